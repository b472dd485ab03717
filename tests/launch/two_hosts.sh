#!/bin/sh
# Two hosts on one machine: network namespaces A and B joined by a veth pair, ranks placed on them by
# LAYOUT (e.g. AABB, AAAB, ABAB), every rank running fsdp-world-check (every collective against the
# reference) over FSDP_TRANSPORT=TRANSPORT. Ranks of one namespace share /dev/shm, so they count as
# one host only by their identity (hostname, boot id and source address differ per namespace).
#
#   two_hosts.sh WORLD_CHECK_BIN TRANSPORT LAYOUT [EXPECTED_TRANSPORT | refused]
#
# Exit 0 when every rank printed OK with the expected transport and two hosts, or, with `refused`
# (FSDP_TRANSPORT=shm forced across the hosts), when every rank failed with rank 0's refusal naming
# both hosts, none with another error; 77 (skipped) when this machine cannot create network
# namespaces; 1 otherwise.
set -u
bin=$1 transport=$2 layout=$3 expect=${4:-$2}
. "$(dirname "$0")/netns_pair.sh"

n=${#layout}
count_a=$(printf '%s' "$layout" | tr -cd A | wc -c)
count_b=$((n - count_a))
local_a=0 local_b=0 pids=""
r=0
while [ $r -lt $n ]; do
  host=$(printf '%s' "$layout" | cut -c$((r + 1)))
  if [ "$host" = A ]; then ns=$nsa lr=$local_a ls=$count_a local_a=$((local_a + 1))
  else ns=$nsb lr=$local_b ls=$count_b local_b=$((local_b + 1)); fi
  ip netns exec "$ns" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$ls MASTER_ADDR="${net}1" \
    MASTER_PORT=$port FSDP_TRANSPORT="$transport" FSDP_TIMEOUT_SEC=30 FSDP_RENDEZVOUS_TIMEOUT_SEC=30 \
    timeout 90 "$bin" >"$logs/rank$r.log" 2>&1 &
  pids="$pids $!"
  r=$((r + 1))
done
status=0
for p in $pids; do
  if [ "$expect" = refused ]; then wait "$p" && status=1; else wait "$p" || status=1; fi
done
refusal="transport shm was asked for but the ranks span 2 hosts (.*${net}1.*: ranks .*; .*${net}2.*: ranks "
r=0
while [ $r -lt $n ]; do
  sed "s/^/[rank $r] /" "$logs/rank$r.log"
  if [ "$expect" = refused ]; then
    grep -q "FAILED: InvalidArgument: .*$refusal" "$logs/rank$r.log" || status=1
  else
    grep -q "OK: .* host [01]/2 .* transport $expect " "$logs/rank$r.log" || status=1
  fi
  r=$((r + 1))
done
[ $status -eq 0 ] && echo "two hosts ($layout), transport $transport: every rank $expect"
exit $status
