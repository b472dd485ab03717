#!/bin/sh
# fault_tolerance.enable under fsdp-run, against the same job nobody disturbed: every step's loss must equal
# the uninterrupted run's within 1e-5 relative (the N-rank == 1-rank bar), and so must the final parameters
# (the last checkpoint of each run, exported by fsdp-ckpt and compared per module by same_weights.py);
# fsdp-run must exit 0. Both runs save a checkpoint every 2 steps.
#
#   survives_lost_rank.sh FSDP_RUN FSDP_TRAIN FSDP_CKPT CONFIG FOLDER NPROC RANK:STEP[:WHEN][,...] [restart|end|async|replace|grow_loss|grow_end|hsdp]
#     the ranks named SIGKILL themselves where WHEN says (FSDP_FAULT_KILL_AFTER_STEP, common/fault_injection.h);
#     the survivors agree, shrink, rebuild the lost shards from their buddy mirrors and redo the step; rank 0
#     names every lost rank in its recovery line and in metrics.jsonl.
#     restart: in-job recovery is impossible (both copies of a shard lost): under fsdp-run --max-restarts 1
#     the job restarts from its checkpoint, and the steps it logs after the restart are compared.
#     end: the same without --max-restarts: fsdp-run must exit non-zero and the log say why.
#     async: both runs save with checkpoint.async_mode = "async".
#     replace: under fsdp-run --replace-lost 1 a replacement of the lost rank joins at a step boundary and
#     the job grows back to NPROC ranks (rank 0's grow line and metrics.jsonl event; fsdp-run's last decision
#     has every rank), then finishes every step.
#     grow_loss: as replace, and a rank named again (a member, or the replacement by the lost rank's RANK)
#     dies during the grow (WHEN in_grow, or `after` the step whose commit admitted the replacement): the
#     grow turns into a recovery from the pre-grow state, which rank 0 says ("in the grow after step N").
#     grow_end: as grow_loss, but the ranks lost in the grow held both copies of a shard: as end.
#     hsdp: both runs are HSDP 2 x 2 (the replicas are the redundancy; after a loss the job goes on as
#     spec::mesh_after_loss says).
#   survives_lost_rank.sh FSDP_RUN FSDP_TRAIN FSDP_CKPT CONFIG FOLDER 3 freeze
#     rank 1 freezes itself (SIGSTOP) after step 3; the heartbeat declares it lost and the survivors go on;
#     once their recovery line is out the test wakes it (SIGCONT), and it must exit saying it was fenced.
set -u
run=$1 train=$2 ckpt=$3 config=$4 dir=$5 nproc=$6 fault=$7 mode=${8:-}
here=$(dirname "$0")
rm -rf "$dir" && mkdir -p "$dir" || exit 1
steps=6 interval=2 async=
[ "$mode" = async ] && async="--checkpoint.async_mode async"
keys=
[ "$mode" = hsdp ] && keys="--parallelism.data_parallel_replicate_degree 2"
[ "$fault" = freeze ] && steps=200 interval=100  # long enough that the survivors are still training when it wakes
set -- --config "$config" --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.multiple_of 16 --training.steps $steps --training.local_batch_size 2 --training.seq_len 16 \
  --training.mixed_precision_param float32 --metrics.file metrics.jsonl --fault_tolerance.enable true \
  --checkpoint.enable true --checkpoint.interval $interval $async $keys
fail() { echo "FAILED: $*"; exit 1; }
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
both_copies="cannot recover in the job: live_reshard: every copy (the shard and its buddy mirror) of old shards is lost"

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
  [ "$mode" = restart ] && launcher_flags="--max-restarts 1"
  case $mode in replace | grow_loss | grow_end) replacing=yes ;; *) replacing=no ;; esac
  if [ $replacing = yes ]; then  # the redone step's commit waits for the replacement
    first_kill=${fault%%,*} && first_kill=${first_kill#*:}
    join_step=$((${first_kill%%:*} + 1))
    launcher_flags="--replace-lost 1"
    export FSDP_FT_AWAIT_JOIN_STEP=$join_step
  fi
  # shellcheck disable=SC2086
  FSDP_FAULT_KILL_AFTER_STEP=$fault "$run" --nproc "$nproc" $launcher_flags -- "$train" "$@" \
    --job.dump_folder "$dir/faulty" >"$dir/faulty.log" 2>&1
  status=$?
  cat "$dir/faulty.log"
  if [ "$mode" = restart ] || [ "$mode" = end ] || [ "$mode" = grow_end ]; then
    grep -qF "$both_copies" "$dir/faulty.log" || fail "no line saying both copies of a shard were lost"
    if [ "$mode" = end ] || [ "$mode" = grow_end ]; then
      [ $status -ne 0 ] || fail "fsdp-run exited 0 after both copies of a shard were lost"
      grep -q "^fsdp-run: failed: " "$dir/faulty.log" || fail "no failure line from fsdp-run"
      echo "the job ended naming why: both copies of a shard were lost (fsdp-run exited $status)"
      exit 0
    fi
    grep -q "^fsdp-run: restart 1 of 1: " "$dir/faulty.log" || fail "no restart line from fsdp-run"
    grep -q "^\[rank 0\] resumed from .*/checkpoint/step-" "$dir/faulty.log" || fail "the restart did not resume"
  else
    lost=$(sed -n 's/.*fsdp-train: recovery: ranks\{0,1\} \([0-9, and]*\) lost in step.*/\1/p' "$dir/faulty.log" |
      tr ',' ' ' | sed 's/ and / /g' | tr '\n' ' ')
    for entry in $(echo "$fault" | tr ',' ' '); do
      echo " $lost " | grep -q " ${entry%%:*} " || fail "no recovery line naming rank ${entry%%:*} (named: $lost)"
    done
    grep -q '^{"event":"recovery",' "$dir/faulty/metrics.jsonl" || fail "no recovery event in metrics.jsonl"
    for page in "$dir"/faulty/report.rank*.html; do  # the successor of a lost rank 0 writes rank 0's page
      [ -e "$page" ] && fail "$page written: the page of metrics.jsonl is report.html"
    done
  fi
  if [ "$mode" = grow_loss ]; then
    grep -q "fsdp-train: recovery: .* lost in step $join_step (in the grow after step $join_step: " "$dir/faulty.log" ||
      fail "no recovery line saying the grow after step $join_step lost a rank"
    echo "the grow after step $join_step turned into a recovery"
  fi
  if [ "$mode" = replace ]; then
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
[ "$(wc -l <"$dir/want")" -eq $steps ] || fail "the uninterrupted run did not log every step"
# Every step after a restart's resume (the restarted run's metrics.jsonl starts there), else every step.
first=1
[ "$mode" = restart ] && first=$(head -n 1 "$dir/got" | cut -d' ' -f1)
[ "$(wc -l <"$dir/got")" -eq $((steps - first + 1)) ] || fail "not every step was logged"
sed -n "$first,\$p" "$dir/want" | paste - "$dir/got" |
  awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 } END { exit bad }' ||
  fail "the losses differ by more than 1e-5 relative"
for run_dir in whole faulty; do
  "$ckpt" export "$dir/$run_dir/checkpoint/step-$steps" --out "$dir/$run_dir.safetensors" >/dev/null ||
    fail "no final checkpoint of the $run_dir run"
done
python3 "$here/same_weights.py" "$dir/whole.safetensors" "$dir/faulty.safetensors" ||
  fail "the final parameters differ by more than 1e-5 relative"
echo "every step's loss and the final parameters equal the uninterrupted run's within 1e-5 relative"
