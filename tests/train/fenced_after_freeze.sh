#!/bin/sh
# fault_tolerance.enable: rank 1 of 3 freezes itself (SIGSTOP) after step 3; the heartbeat declares it lost,
# the survivors go on without it, and once the recovery line is out the test wakes it (SIGCONT). The woken
# rank must find itself fenced: it exits non-zero saying so, writes nothing the survivors read, and the job
# (fsdp-run) exits 0 with every step's loss equal to the uninterrupted run's within 1e-5 relative.
#
#   fenced_after_freeze.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER
set -u
run=$1 train=$2 config=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" || exit 1
set -- --config "$config" --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.multiple_of 16 --training.steps 200 --training.local_batch_size 2 --training.seq_len 16 \
  --training.mixed_precision_param float32 --metrics.file metrics.jsonl --fault_tolerance.enable true
fail() { echo "FAILED: $*"; exit 1; }
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
export FSDP_HEARTBEAT_TIMEOUT_SEC=1 FSDP_TIMEOUT_SEC=30

"$run" --nproc 3 -- "$train" "$@" --job.dump_folder "$dir/whole" >"$dir/whole.log" 2>&1 ||
  { cat "$dir/whole.log"; fail "the uninterrupted run"; }
FSDP_FAULT_KILL_AFTER_STEP=1:3:stop "$run" --nproc 3 -- "$train" "$@" --job.dump_folder "$dir/frozen" \
  >"$dir/frozen.log" 2>&1 &
job=$!
woke=no
for _ in $(seq 600); do  # up to 60 s
  if grep -q "fsdp-train: recovery: rank 1 lost" "$dir/frozen.log"; then
    pid=$(sed -n 's/.*rank 1 (pid \([0-9]*\)) stops itself.*/\1/p' "$dir/frozen.log")
    [ -n "$pid" ] && kill -CONT "$pid" && woke=yes
    break
  fi
  sleep 0.1
done
wait $job
status=$?
cat "$dir/frozen.log"
[ $woke = yes ] || fail "no recovery line while rank 1 was frozen"
[ $status -eq 0 ] || fail "fsdp-run exited $status"
grep -q "rank 1: fenced: rank 1 was declared lost at epoch 1" "$dir/frozen.log" || fail "the woken rank did not say it was fenced"
losses "$dir/whole/metrics.jsonl" >"$dir/want"
losses "$dir/frozen/metrics.jsonl" >"$dir/got"
[ "$(wc -l <"$dir/want")" -eq 200 ] && [ "$(wc -l <"$dir/got")" -eq 200 ] || fail "not every step was logged"
paste "$dir/want" "$dir/got" | awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 }
  END { exit bad }' || fail "the losses differ by more than 1e-5 relative"
echo "the woken rank was fenced; every step's loss equals the uninterrupted run's within 1e-5 relative"
