#!/bin/sh
# make chaos (not in CI): a 4-rank fault-tolerant job of a few hundred steps on the debug model, with a
# random surviving rank SIGKILLed every T seconds from outside (at whatever point of the step it is in)
# until MIN ranks are left, compared with the run nobody killed: every step's loss within 1e-5 relative.
# Lost ranks are not replaced (growing back is not implemented yet), so the job ends at MIN ranks.
#
#   bench/chaos.sh [BUILD_DIR] [STEPS] [T_SECONDS] [MIN]
set -u
BUILD=${1:-build}
STEPS=${2:-300}
T=${3:-2}
MIN=${4:-2}
OUT=$BUILD/bench-results/chaos
RUN=$BUILD/launch/fsdp-run
TRAIN=$BUILD/train/fsdp-train
rm -rf "$OUT" && mkdir -p "$OUT"
set -- --config configs/debug_model.toml --training.steps "$STEPS" --training.mixed_precision_param float32 \
  --metrics.log_freq 50 --metrics.file metrics.jsonl --fault_tolerance.enable true
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

"$RUN" --nproc 4 -- "$TRAIN" "$@" --job.dump_folder "$OUT/whole" >"$OUT/whole.log" 2>&1 || { echo "uninterrupted run failed"; exit 1; }
"$RUN" --nproc 4 -- "$TRAIN" "$@" --job.dump_folder "$OUT/chaos" >"$OUT/chaos.log" 2>&1 &
job=$!
alive=4
while [ $alive -gt "$MIN" ] && kill -0 $job 2>/dev/null; do
  sleep "$T"
  victim=$(pgrep -P $job -f fsdp-train | shuf -n 1)
  [ -n "$victim" ] || break
  echo "chaos: SIGKILL pid $victim at $(date +%T.%N)"
  kill -9 "$victim" && alive=$((alive - 1))
done
wait $job
status=$?
grep -E "recovery:|fsdp-run:" "$OUT/chaos.log"
losses "$OUT/whole/metrics.jsonl" >"$OUT/want"
losses "$OUT/chaos/metrics.jsonl" >"$OUT/got"
paste "$OUT/want" "$OUT/got" | awk -v n="$STEPS" '{ d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r;
  if ($1 != $3 || r > 1e-5) bad = 1 } END { printf "steps compared: %d of %d, largest relative loss difference %.2g\n", NR, n, worst;
  exit bad || NR != n }'
ok=$?
echo "fsdp-run exited $status; $([ $ok -eq 0 ] && echo "every step's loss equals the uninterrupted run's" || echo "LOSSES DIFFER")"
[ $status -eq 0 ] && [ $ok -eq 0 ]
