#!/bin/sh
# fsdp-train started by torchrun itself (--no_python, static rendezvous: the agent serves its c10d store
# on MASTER_PORT and the ranks join it) trains exactly as under fsdp-run: the same loss and grad norm,
# every digit, at every step (fp32). Exit 77 (skipped) where the Python has no torch.
#   torchrun_matches_fsdp_run.sh PYTHON FSDP_RUN FSDP_TRAIN CONFIG
set -eu
python=$1 fsdp_run=$2 fsdp_train=$3 config=$4
"$python" -c 'import torch.distributed.run' 2>/dev/null || { echo "skipped: $python has no torch"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args="--config $config --training.steps 3 --training.local_batch_size 2 --training.seq_len 32 --model.n_layers 1"

"$fsdp_run" --nproc 2 -- "$fsdp_train" $args --job.dump_folder "$work/fsdp_run" >"$work/fsdp_run.log" 2>&1 ||
  { cat "$work/fsdp_run.log"; exit 1; }
# A port the kernel just handed out (no fixed ports); torchrun's agent binds it again at once.
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# --redirects/--tee 1: on Python 3.11, torch 1.13's torchrun crashes on their default 0 (and on 3).
"$python" -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
  --redirects 1 --tee 1 --log_dir "$work/logs" --monitor_interval 0.2 --no_python \
  "$fsdp_train" $args --job.dump_folder "$work/torchrun" >"$work/torchrun.log" 2>&1 ||
  { cat "$work/torchrun.log"; exit 1; }
grep -h "from torchrun" "$work/torchrun.log"

# The fields that must agree, as fsdp-train wrote them (shortest round-trip decimal: equal text, equal bits).
fields() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),"grad_norm":([^,]+),.*/\1 \2 \3/' "$1"; }
fields "$work/fsdp_run/metrics.jsonl" >"$work/a"
fields "$work/torchrun/metrics.jsonl" >"$work/b"
if [ "$(wc -l <"$work/a")" -ne 3 ] || ! cmp -s "$work/a" "$work/b"; then
  echo "torchrun and fsdp-run differ (step loss grad_norm):"; paste "$work/a" "$work/b"; exit 1
fi
echo "torchrun matches fsdp-run bitwise over 3 steps:"; cat "$work/b"
