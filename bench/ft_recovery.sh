#!/bin/sh
# make bench-recovery: what a lost rank costs (docs/fault_tolerance.md "Measured"), on the debug model
# (configs/debug_model.toml, fp32, 20 steps) under fsdp-run:
#   1. recovery in the job at 2, 3 and 4 ranks: the last rank SIGKILLs itself after step 10; from the
#      kill to the survivors' detection, agreement, reconnect, reshard, and the redone step's time;
#   2. the same kill with restart from the checkpoint (fault_tolerance off, --max-restarts 1, a checkpoint
#      every 5 steps): the whole job's wall time against an unkilled one;
#   3. the redundancy's cost: median step time with fault_tolerance on and off, interleaved, 2 ranks
#      (bench/ft_cost.sh, also `make bench-ft-cost`).
#
#   bench/ft_recovery.sh [BUILD_DIR] [REPEATS]
set -eu
BUILD=${1:-build}
REPEATS=${2:-3}
OUT=$BUILD/bench-results/ft_recovery
. "$(dirname "$0")/ft_common.sh"
COMMON="--config configs/debug_model.toml --training.steps 20 --training.mixed_precision_param float32 --metrics.log_freq 100"

echo "== recovery in the job (kill after step 10 of 20)"
for n in 2 3 4; do
  for i in $(seq "$REPEATS"); do
    d=$OUT/ft_n${n}_$i
    FSDP_FAULT_KILL_AFTER_STEP=$((n - 1)):10 "$RUN" --nproc "$n" -- "$TRAIN" $COMMON --fault_tolerance.enable true \
      --metrics.file metrics.jsonl --job.dump_folder "$d" >"$d.log" 2>&1
    kill_at=$(sed -n 's/.*SIGKILLs itself in step [0-9]* at unix \([0-9.]*\)/\1/p' "$d.log")
    event=$(grep '"event":"recovery"' "$d/metrics.jsonl")
    detected=$(echo "$event" | sed -n 's/.*detected at unix \([0-9.]*\).*/\1/p')
    agree=$(echo "$event" | sed -n 's/.*agree \([0-9.]*\) s.*/\1/p')
    reconnect=$(echo "$event" | sed -n 's/.*reconnect \([0-9.]*\) s.*/\1/p')
    reshard=$(echo "$event" | sed -n 's/.*reshard \([0-9.]*\) s.*/\1/p')
    redo=$(sed -n 's/^{"step":11,.*"step_time_s":\([0-9.e-]*\).*/\1/p' "$d/metrics.jsonl")
    steady=$(step_seconds "$d/metrics.jsonl" | sed -n '2,10p' | median)
    echo "$n $kill_at $detected $agree $reconnect $reshard $redo $steady" |
      awk '{ printf "n=%d  detect %.3f s  agree %.3f s  reconnect %.3f s  reshard %.3f s  redone step %.3f s (steady %.3f s)  kill to first step after %.3f s\n",
             $1, $3 - $2, $4, $5, $6, $7, $8, $3 - $2 + $4 + $5 + $6 + $7 }'
  done
done

echo "== restart from the checkpoint instead (fault_tolerance off, --max-restarts 1, checkpoint every 5 steps)"
for n in 2 4; do
  for i in $(seq "$REPEATS"); do
    for mode in whole killed; do
      d=$OUT/restart_n${n}_${mode}_$i
      kill=""
      [ "$mode" = killed ] && kill=$((n - 1)):10
      start=$(date +%s.%N)
      FSDP_FAULT_KILL_AFTER_STEP=$kill "$RUN" --nproc "$n" --max-restarts 1 -- "$TRAIN" $COMMON \
        --checkpoint.enable true --checkpoint.interval 5 --metrics.file= --job.dump_folder "$d" >"$d.log" 2>&1
      echo "$(date +%s.%N) $start" | awk -v n="$n" -v m="$mode" '{ printf "n=%d  %-6s job %.2f s\n", n, m, $1 - $2 }'
    done
  done
done

echo "== the redundancy's step time (2 ranks, 40 steps, fault_tolerance on/off interleaved; median of steps 2-40)"
"$(dirname "$0")/ft_cost.sh" "$BUILD" 6
