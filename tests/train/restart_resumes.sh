#!/bin/sh
# fsdp-run --max-restarts with fsdp-train: rank 1 of 2 SIGKILLs itself after step 4's checkpoint on the
# first start (FSDP_FAULT_KILL_AFTER_STEP); fsdp-run starts the job again, it resumes from step 4, and the
# losses of steps 5-8 in metrics.jsonl equal those of the run nobody killed, as text (bitwise fp32).
#
#   restart_resumes.sh FSDP_RUN FSDP_TRAIN CONFIG FOLDER [nodes]
# With "nodes" the restarted job runs under two launchers, --nnodes 2 --nproc 1 on this host, which must
# agree on the restart through node 0's store.
set -u
run=$1 train=$2 config=$3 dir=$4 mode=${5:-one}
rm -rf "$dir" && mkdir -p "$dir" || exit 1
set -- --config "$config" --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.multiple_of 16 --training.steps 8 --training.local_batch_size 2 --training.seq_len 16 \
  --checkpoint.enable true --checkpoint.interval 2 --checkpoint.keep_latest_k 0 --metrics.file metrics.jsonl
fail() { echo "FAILED: $*"; exit 1; }
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

"$run" --nproc 2 -- "$train" "$@" --job.dump_folder "$dir/whole" >"$dir/whole.log" 2>&1 ||
  { cat "$dir/whole.log"; fail "the uninterrupted run"; }
export FSDP_FAULT_KILL_AFTER_STEP=1:4
cause="rank 1 was killed by signal 9 (SIGKILL)"
if [ "$mode" = nodes ]; then
  export FSDP_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  node() {  # node NODE_RANK FSDP_TRAIN_FLAGS...
    k=$1
    shift
    "$run" --nnodes 2 --node-rank "$k" --nproc 1 --master-addr 127.0.0.1 --master-port "$port" --max-restarts 1 \
      -- "$train" "$@" --job.dump_folder "$dir/restarted"
  }
  ( node 1 "$@" >"$dir/node1.log" 2>&1; echo $? >"$dir/node1.status" ) &
  node 0 "$@" >"$dir/restarted.log" 2>&1
  status=$?
  wait
  cat "$dir/node1.log"
  [ "$(cat "$dir/node1.status")" = 0 ] || fail "node 1's fsdp-run exited $(cat "$dir/node1.status")"
  grep -q "^fsdp-run: restart 1 of 1: $cause" "$dir/node1.log" || fail "no restart line from node 1's fsdp-run"
  cause="rank [01] .*"  # node 0's view: its rank 0 exited, or (usually) rank 1 on node 1 was killed
else
  "$run" --nproc 2 --max-restarts 1 -- "$train" "$@" --job.dump_folder "$dir/restarted" >"$dir/restarted.log" 2>&1
  status=$?
fi
cat "$dir/restarted.log"
[ $status -eq 0 ] || fail "fsdp-run --max-restarts 1 exited $status"
grep -q "^fsdp-run: restart 1 of 1: $cause; starting all 2 ranks again" "$dir/restarted.log" ||
  fail "no restart line from fsdp-run"
detail="restart 1 of 1 after $cause; resumed from step 4"
grep -q "^\[rank 0\] fsdp-train: $detail\$" "$dir/restarted.log" || fail "no restart line from fsdp-train"
grep -q "^{\"event\":\"recovery\",\"step\":4,\"rank\":0,.*\"detail\":\"$detail\"}\$" "$dir/restarted/metrics.jsonl" ||
  fail "no recovery event in metrics.jsonl"
losses "$dir/whole/metrics.jsonl" | sed -n '5,8p' >"$dir/want"
losses "$dir/restarted/metrics.jsonl" >"$dir/got"
echo "uninterrupted, steps 5-8:"; cat "$dir/want"
echo "restarted:"; cat "$dir/got"
[ "$(wc -l <"$dir/want")" -eq 4 ] && cmp -s "$dir/want" "$dir/got" || fail "the resumed losses differ"
echo "the restarted job's losses equal the uninterrupted run's bitwise over steps 5-8"
