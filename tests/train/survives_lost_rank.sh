#!/bin/sh
# fault_tolerance.enable under fsdp-run, against the same job nobody disturbed: every step's loss must equal
# the uninterrupted run's within 1e-5 relative (the N-rank == 1-rank bar) and fsdp-run must exit 0.
#
#   survives_lost_rank.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER NPROC RANK:STEP[:WHEN][,...]
#     the ranks named SIGKILL themselves (FSDP_FAULT_KILL_AFTER_STEP); the survivors agree, shrink, rebuild
#     the lost shards from their buddy mirrors and redo the step; rank 0 says so in one line and in
#     metrics.jsonl.
#   survives_lost_rank.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER NPROC RANK:STEP replace
#     the same under fsdp-run --replace-lost 1: a replacement of the lost rank joins at a step boundary and
#     the job grows back to NPROC ranks (rank 0's grow line and metrics.jsonl event; fsdp-run's last decision
#     has every rank), then finishes every step.
#   survives_lost_rank.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER 3 freeze
#     rank 1 freezes itself (SIGSTOP) after step 3; the heartbeat declares it lost and the survivors go on;
#     once their recovery line is out the test wakes it (SIGCONT), and it must exit saying it was fenced.
set -u
run=$1 train=$2 config=$3 dir=$4 nproc=$5 fault=$6 replace=${7:-}
rm -rf "$dir" && mkdir -p "$dir" || exit 1
steps=6
[ "$fault" = freeze ] && steps=200  # long enough that the survivors are still training when it wakes
set -- --config "$config" --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.multiple_of 16 --training.steps $steps --training.local_batch_size 2 --training.seq_len 16 \
  --training.mixed_precision_param float32 --metrics.file metrics.jsonl --fault_tolerance.enable true
fail() { echo "FAILED: $*"; exit 1; }
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

"$run" --nproc "$nproc" -- "$train" "$@" --job.dump_folder "$dir/whole" >"$dir/whole.log" 2>&1 ||
  { cat "$dir/whole.log"; fail "the uninterrupted run"; }
if [ "$fault" = freeze ]; then
  export FSDP_HEARTBEAT_TIMEOUT_SEC=1 FSDP_FAULT_KILL_AFTER_STEP=1:3:stop
  "$run" --nproc "$nproc" -- "$train" "$@" --job.dump_folder "$dir/faulty" >"$dir/faulty.log" 2>&1 &
  job=$!
  woke=no
  for _ in $(seq 600); do  # up to 60 s
    if grep -q "fsdp-train: recovery: rank 1 lost" "$dir/faulty.log"; then
      pid=$(sed -n 's/.*rank 1 (pid \([0-9]*\)) stops itself.*/\1/p' "$dir/faulty.log")
      [ -n "$pid" ] && kill -CONT "$pid" && woke=yes
      break
    fi
    sleep 0.1
  done
  wait $job
  status=$?
  cat "$dir/faulty.log"
  [ $woke = yes ] || fail "no recovery line while rank 1 was frozen"
  grep -q "rank 1: fenced: rank 1 was declared lost at epoch 1" "$dir/faulty.log" ||
    fail "the woken rank did not say it was fenced"
  echo "the woken rank was fenced"
else
  launcher_flags=
  if [ "$replace" = replace ]; then  # RANK:STEP: the redone step's commit waits for the replacement
    join_step=$((${fault#*:} + 1))
    launcher_flags="--replace-lost 1"
    export FSDP_FT_AWAIT_JOIN_STEP=$join_step
  fi
  # shellcheck disable=SC2086
  FSDP_FAULT_KILL_AFTER_STEP=$fault "$run" --nproc "$nproc" $launcher_flags -- "$train" "$@" \
    --job.dump_folder "$dir/faulty" >"$dir/faulty.log" 2>&1
  status=$?
  cat "$dir/faulty.log"
  grep -q "fsdp-train: recovery: rank ${fault%%:*} lost in step" "$dir/faulty.log" || fail "no recovery line"
  grep -q '^{"event":"recovery",' "$dir/faulty/metrics.jsonl" || fail "no recovery event in metrics.jsonl"
  if [ "$replace" = replace ]; then
    grew=$(sed -n "s/.*fsdp-train: grow: rank ${fault%%:*} joined after step \([0-9]*\); $nproc rank(s) go on.*/\1/p" \
      "$dir/faulty.log")
    [ "$grew" = "$join_step" ] || fail "no grow line back to $nproc ranks after step $join_step"
    grep -q '^{"event":"grow",' "$dir/faulty/metrics.jsonl" || fail "no grow event in metrics.jsonl"
    grep -q "fsdp-run: fault_tolerance: the last decision (.*) went on without rank(s) none" "$dir/faulty.log" ||
      fail "the last steps did not run at $nproc ranks"
    echo "the job grew back to $nproc ranks after step $grew"
  fi
fi
[ $status -eq 0 ] || fail "fsdp-run exited $status"
losses "$dir/whole/metrics.jsonl" >"$dir/want"
losses "$dir/faulty/metrics.jsonl" >"$dir/got"
[ "$(wc -l <"$dir/want")" -eq $steps ] && [ "$(wc -l <"$dir/got")" -eq $steps ] || fail "not every step was logged"
paste "$dir/want" "$dir/got" | awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 }
  END { exit bad }' || fail "the losses differ by more than 1e-5 relative"
echo "every step's loss equals the uninterrupted run's within 1e-5 relative"
