#!/bin/sh
# fsdp-run across two hosts: network namespaces A and B (netns_pair.sh), one fsdp-run in each with
# --nnodes 2 --nproc 2 (node 0 in A serves the store), the program's ranks 0-1 in A and 2-3 in B.
#
#   two_nodes_run.sh FSDP_RUN same PATTERN -- PROGRAM ARGS...
#     the job's lines matching PATTERN (sed -n, e.g. the losses) from rank 0 equal those of the same
#     program under one fsdp-run --nproc 4 in A, and both launchers exit 0;
#   two_nodes_run.sh FSDP_RUN fails WHO -- PROGRAM ARGS...
#     both launchers exit non-zero and both end with "fsdp-run: failed: WHO" (e.g. rank 3 ... SIGKILL);
#   two_nodes_run.sh FSDP_RUN node0-killed SECONDS -- PROGRAM ARGS...
#     node 0's fsdp-run is SIGKILLed after SECONDS (its ranks die with it); node 1's must find its store
#     gone, stop its ranks and exit non-zero saying so.
#
# Exit 0 when that holds; 77 (skipped) where namespaces cannot be created; 1 otherwise.
set -u
run=$1 mode=$2 what=$3
shift 4
. "$(dirname "$0")/netns_pair.sh"
export FSDP_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') FSDP_RENDEZVOUS_TIMEOUT_SEC=30
node() {  # node NAMESPACE NODE_RANK LOG PROGRAM ARGS...
  ns=$1 node_rank=$2 log=$3 limit="90"
  shift 3
  [ "$mode" = node0-killed ] && [ "$node_rank" = 0 ] && limit="-s KILL $what"
  ip netns exec "$ns" timeout $limit "$run" --nnodes 2 --node-rank "$node_rank" --nproc 2 --master-addr "${net}1" \
    --master-port "$port" -- "$@" >"$log" 2>&1
}
( node "$nsb" 1 "$logs/node1.log" "$@" ) &
b=$!
node "$nsa" 0 "$logs/node0.log" "$@"
status_a=$?
wait $b
status_b=$?
for k in 0 1; do sed "s/^/[node $k] /" "$logs/node$k.log"; done
echo "node 0 exit $status_a, node 1 exit $status_b"
if [ "$mode" = same ]; then
  ip netns exec "$nsa" timeout 90 "$run" --nproc 4 -- "$@" >"$logs/one.log" 2>&1 || { cat "$logs/one.log"; exit 1; }
  sed -n "s/^\[rank 0\] .*\($what\).*/\1/p" "$logs/one.log" >"$logs/one.want"
  sed -n "s/^\[rank 0\] .*\($what\).*/\1/p" "$logs/node0.log" >"$logs/two.got"
  echo "one host, 4 ranks:"; cat "$logs/one.want"
  [ -s "$logs/one.want" ] && cmp -s "$logs/one.want" "$logs/two.got" && [ $status_a -eq 0 ] && [ $status_b -eq 0 ] ||
    { echo "two nodes differ from one host (or failed)"; exit 1; }
  echo "two nodes equal one host"
  exit 0
fi
[ $status_a -ne 0 ] && [ $status_b -ne 0 ] || { echo "a launcher exited 0"; exit 1; }
if [ "$mode" = node0-killed ]; then
  [ $status_b -ne 124 ] && tail -1 "$logs/node1.log" | grep -q "^fsdp-run: failed: node 0's fsdp-run is gone" ||
    { echo "node 1 did not find node 0's fsdp-run gone"; exit 1; }
  echo "node 1 found node 0's fsdp-run gone"
  exit 0
fi
for k in 0 1; do
  tail -1 "$logs/node$k.log" | grep -q "^fsdp-run: failed: $what" || { echo "node $k does not blame $what"; exit 1; }
done
echo "both launchers failed naming $what"
