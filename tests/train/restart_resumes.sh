#!/bin/sh
# fsdp-run --max-restarts with fsdp-train: rank 1 of 2 SIGKILLs itself after step 4's checkpoint on the
# first start (FSDP_FAULT_KILL_AFTER_STEP); fsdp-run starts the job again, it resumes from step 4, and the
# losses of steps 5-8 in metrics.jsonl equal those of the run nobody killed, as text (bitwise fp32).
#
#   restart_resumes.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER
set -u
run=$1 train=$2 config=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir" || exit 1
set -- --config "$config" --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.multiple_of 16 --training.steps 8 --training.local_batch_size 2 --training.seq_len 16 \
  --checkpoint.enable true --checkpoint.interval 2 --checkpoint.keep_latest_k 0 --metrics.file metrics.jsonl
fail() { echo "FAILED: $*"; exit 1; }
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

"$run" --nproc 2 -- "$train" "$@" --job.dump_folder "$dir/whole" >"$dir/whole.log" 2>&1 ||
  { cat "$dir/whole.log"; fail "the uninterrupted run"; }
FSDP_FAULT_KILL_AFTER_STEP=1:4 "$run" --nproc 2 --max-restarts 1 -- "$train" "$@" --job.dump_folder "$dir/restarted" \
  >"$dir/restarted.log" 2>&1
status=$?
cat "$dir/restarted.log"
[ $status -eq 0 ] || fail "fsdp-run --max-restarts 1 exited $status"
grep -q "^fsdp-run: restart 1 of 1: rank 1 was killed by signal 9 (SIGKILL); starting all 2 ranks again" \
  "$dir/restarted.log" || fail "no restart line from fsdp-run"
detail="restart 1 of 1 after rank 1 was killed by signal 9 (SIGKILL); resumed from step 4"
grep -qF "[rank 0] fsdp-train: $detail" "$dir/restarted.log" || fail "no restart line from fsdp-train"
grep -qF "{\"event\":\"recovery\",\"step\":4,\"rank\":0," "$dir/restarted/metrics.jsonl" &&
  grep -qF "\"detail\":\"$detail\"}" "$dir/restarted/metrics.jsonl" || fail "no recovery event in metrics.jsonl"
losses "$dir/whole/metrics.jsonl" | sed -n '5,8p' >"$dir/want"
losses "$dir/restarted/metrics.jsonl" >"$dir/got"
echo "uninterrupted, steps 5-8:"; cat "$dir/want"
echo "restarted:"; cat "$dir/got"
[ "$(wc -l <"$dir/want")" -eq 4 ] && cmp -s "$dir/want" "$dir/got" || fail "the resumed losses differ"
echo "the restarted job's losses equal the uninterrupted run's bitwise over steps 5-8"
