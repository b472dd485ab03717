#!/bin/sh
# make bench: the standard comparison at 2 ranks, each pinned to its own core, every backend and the
# memcpy bound in the same runs, then docs/benchmarks.md (tables, targets, plots, commands, machine)
# regenerated between its markers by fsdp-bench-report.
#
#   bench/run_standard.sh [BUILD_DIR]      (default build; results land in BUILD_DIR/bench-results)
set -eu
BUILD=${1:-build}
OUT=$BUILD/bench-results
BENCH=$BUILD/bench/fsdp-bench
mkdir -p "$OUT"
# Open MPI refuses root without these; --bind-to core puts rank 0 on core 0 and rank 1 on core 1.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LAUNCH="mpirun -np 2 --bind-to core"
SWEEP="-b 1K -e 64M -f 4 -n 20 -w 5 -z 1 -c 1 --backend all"

$LAUNCH "$BENCH" all_gather $SWEEP --json "$OUT/all_gather.json"
$LAUNCH "$BENCH" reduce_scatter $SWEEP --json "$OUT/reduce_scatter.json"
$LAUNCH "$BENCH" all_reduce $SWEEP --json "$OUT/all_reduce.json"
$LAUNCH "$BENCH" all_reduce -b 8 -e 8 -n 2000 -w 200 -z 1 -c 1 --backend all --json "$OUT/all_reduce_latency.json"

"$BUILD/bench/fsdp-bench-report" --markdown docs/benchmarks.md --plots docs --launcher "$LAUNCH" \
  "$OUT/all_gather.json" "$OUT/reduce_scatter.json" "$OUT/all_reduce.json" "$OUT/all_reduce_latency.json"
