#!/bin/sh
# fault_tolerance.enable under fsdp-run: rank KILL_RANK SIGKILLs itself after step KILL_STEP
# (FSDP_FAULT_KILL_AFTER_STEP); the survivors agree, shrink, re-plan, rebuild its shard from their buddy
# mirrors and redo the step. fsdp-run exits 0, rank 0 says the recovery in one line, metrics.jsonl records
# it, and every step's loss equals the uninterrupted run's within 1e-5 relative (the N-rank == 1-rank bar).
#
#   survives_lost_rank.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER NPROC KILL_RANK:KILL_STEP
set -u
run=$1 train=$2 config=$3 dir=$4 nproc=$5 kill=$6
rm -rf "$dir" && mkdir -p "$dir" || exit 1
set -- --config "$config" --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.multiple_of 16 --training.steps 6 --training.local_batch_size 2 --training.seq_len 16 \
  --training.mixed_precision_param float32 --metrics.file metrics.jsonl --fault_tolerance.enable true
fail() { echo "FAILED: $*"; exit 1; }
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

"$run" --nproc "$nproc" -- "$train" "$@" --job.dump_folder "$dir/whole" >"$dir/whole.log" 2>&1 ||
  { cat "$dir/whole.log"; fail "the uninterrupted run"; }
FSDP_FAULT_KILL_AFTER_STEP=$kill "$run" --nproc "$nproc" -- "$train" "$@" --job.dump_folder "$dir/killed" \
  >"$dir/killed.log" 2>&1
status=$?
cat "$dir/killed.log"
[ $status -eq 0 ] || fail "fsdp-run exited $status"
grep -q "fsdp-train: recovery: rank ${kill%%:*} lost in step" "$dir/killed.log" || fail "no recovery line"
grep -q '^{"event":"recovery",' "$dir/killed/metrics.jsonl" || fail "no recovery event in metrics.jsonl"
losses "$dir/whole/metrics.jsonl" >"$dir/want"
losses "$dir/killed/metrics.jsonl" >"$dir/got"
echo "uninterrupted:"; cat "$dir/want"
echo "with rank ${kill%%:*} killed after step ${kill##*:}:"; cat "$dir/got"
[ "$(wc -l <"$dir/want")" -eq 6 ] && [ "$(wc -l <"$dir/got")" -eq 6 ] || fail "not every step was logged"
paste "$dir/want" "$dir/got" | awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 }
  END { exit bad }' || fail "the losses differ by more than 1e-5 relative"
echo "every step's loss equals the uninterrupted run's within 1e-5 relative"
