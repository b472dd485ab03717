#!/bin/sh
# make bench-ft-cost: the redundancy's cost in step time (docs/fault_tolerance.md, "The redundancy's cost in
# step time"): the debug model (configs/debug_model.toml, fp32) at 2 ranks under fsdp-run, 40 steps, with
# fault_tolerance.enable false and true interleaved (PAIRS pairs, which goes first alternating), the median
# step time of steps 2-40 of each run; prints each pair's ratio, the median ratio and the load average.
#
#   bench/ft_cost.sh [BUILD_DIR] [PAIRS]
set -eu
BUILD=${1:-build}
PAIRS=${2:-6}
OUT=$BUILD/bench-results/ft_cost
. "$(dirname "$0")/ft_common.sh"

# The median step time of steps 2-40 of one run with fault_tolerance.enable $1 (pair $2).
run() {
  d=$OUT/ft_${1}_$2
  "$RUN" --nproc 2 -- "$TRAIN" --config configs/debug_model.toml --training.steps 40 \
    --training.mixed_precision_param float32 --metrics.log_freq 100 --fault_tolerance.enable "$1" \
    --metrics.file metrics.jsonl --job.dump_folder "$d" >"$d.log" 2>&1
  step_seconds "$d/metrics.jsonl" | sed 1d | median
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) -eq 1 ]; then
    off=$(run false "$i") && on=$(run true "$i")
  else
    on=$(run true "$i") && off=$(run false "$i")
  fi
  echo "$i $off $on" | awk '{ printf "pair %d  off %.1f ms  on %.1f ms  on/off %.3f\n", $1, $2 * 1e3, $3 * 1e3, $3 / $2 }' |
    tee -a "$OUT/pairs.txt"
done
echo "median on/off over $PAIRS pairs: $(awk '{ print $NF }' "$OUT/pairs.txt" | median)" \
  "(off $(awk '{ print $4 }' "$OUT/pairs.txt" | median) ms, on $(awk '{ print $7 }' "$OUT/pairs.txt" | median) ms)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
