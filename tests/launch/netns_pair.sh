# Sourced by the two-host tests: network namespaces $nsa and $nsb joined by a veth pair, addresses
# ${net}1 (A) and ${net}2 (B), removed with $logs (a scratch directory) at exit. Exits 77 (skipped)
# where this machine cannot create network namespaces. Names derive from the caller's pid ($id), so
# concurrent tests never collide.
id=$$
tag=$(printf '%x' $((id % 65536)))
nsa=fsdp2h_a_$tag nsb=fsdp2h_b_$tag
va=fa$tag vb=fb$tag
net=10.$((200 + id % 50)).$((id / 50 % 250)).
logs=$(mktemp -d)
cleanup() {
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  rm -rf "$logs"
}
trap cleanup EXIT INT TERM
if ! ip netns add "$nsa" 2>"$logs/netns.err"; then
  echo "SKIP: cannot create network namespaces here: $(cat "$logs/netns.err")"
  exit 77
fi
ip netns add "$nsb" || exit 1
ip link add "$va" type veth peer name "$vb" || exit 1
ip link set "$va" netns "$nsa" && ip link set "$vb" netns "$nsb" || exit 1
ip -n "$nsa" addr add "${net}1/24" dev "$va" && ip -n "$nsb" addr add "${net}2/24" dev "$vb" || exit 1
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up || exit 1; done
ip -n "$nsa" link set "$va" up && ip -n "$nsb" link set "$vb" up || exit 1
port=$((20000 + id % 30000))
