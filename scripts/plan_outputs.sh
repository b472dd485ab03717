#!/usr/bin/env bash
# plan_outputs.sh BUILD_DIR OUT_DIR: what fsdp-plan prints for every model preset on every chip profile,
# one file per run, so a change to the planner or its inputs can be checked byte for byte against a
# baseline (scripts/plan_outputs_diff.sh). Each run writes NAME.out.gz (stdout) and NAME.status (exit code,
# then stderr); NAME is <model>__<chip>__<case>.<json|table>, or policy__<model>__<variant>, auto__...,
# tool__<what> for the runs that are not a model x chip grid. Outputs are gzipped (gzip -n: no name or
# time inside) because a MoE preset's plan lists every expert's tensors: 6 MB of JSON for qwen3-30b-a3b.
#
# Cases, for every model x chip (the mesh arithmetic every caller shares):
#   w8      one server of 8 chips           w64   8 servers of 8 (FSDP over 64 ranks)
#   w144    one server of 144 chips         hsdp  4 servers of 8, replicate 4 x shard 8
#   server  the chip's own server size, 2 servers (the default --chips-per-node)
#   ep8     MoE models only: w64 with 8-way expert parallelism
# plus --auto (and --auto --allow-mxfp8) at 64 ranks, and policy variants (every --ac, --reshard,
# --optimizer, dtype, comm precision, loss, batch flag) of every model at 64 ranks on h100.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
plan="$1/sharding/fsdp-plan"
out="$2"
[[ -x "$plan" ]] || { echo "$0: no fsdp-plan at $plan (build the fsdp-plan target)" >&2; exit 2; }
mkdir -p "$out"

# run NAME ARGS...: stdout to NAME.out (gzipped at the end); exit code and stderr to NAME.status. Exit 3 (does not fit) and
# 1 (bad input) are results like any other.
run() {
  local name="$1"
  shift
  local rc=0
  "$plan" "$@" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
  { echo "exit $rc"; cat "$out/$name.err"; } >"$out/$name.status"
  rm -f "$out/$name.err"
}

# Both outputs of one plan: --json and the human-readable table (with --params: every parameter's layout).
both() {
  local name="$1"
  shift
  run "$name.json" "$@" --json
  run "$name.table" "$@" --params
}

run tool__help --help
run tool__list_models --list-models
run tool__list_chips --list-chips
mapfile -t models < <("$plan" --list-models | awk '{print $1}')
mapfile -t chips < <("$plan" --list-chips | awk '{print $1}')

for m in "${models[@]}"; do
  # A MoE model's parameters name its experts; only those take --ep.
  moe=0
  if "$plan" --model "$m" --chip h100 --nodes 1 --chips-per-node 8 --json 2>/dev/null | grep -c '\.experts\.' >/dev/null; then
    moe=1
  fi
  for c in "${chips[@]}"; do
    base=(--model "$m" --chip "$c")
    both "${m}__${c}__w8" "${base[@]}" --nodes 1 --chips-per-node 8
    both "${m}__${c}__w64" "${base[@]}" --nodes 8 --chips-per-node 8
    both "${m}__${c}__w144" "${base[@]}" --nodes 1 --chips-per-node 144
    both "${m}__${c}__hsdp" "${base[@]}" --nodes 4 --chips-per-node 8 --replicate 4 --shard 8
    both "${m}__${c}__server" "${base[@]}" --nodes 2
    if [[ $moe == 1 ]]; then
      both "${m}__${c}__ep8" "${base[@]}" --nodes 8 --chips-per-node 8 --ep 8
    fi
    run "auto__${m}__${c}.json" "${base[@]}" --nodes 8 --chips-per-node 8 --auto --json
  done
  run "auto__${m}__h100__table" --model "$m" --chip h100 --nodes 8 --chips-per-node 8 --auto --top 3
  run "auto__${m}__h100__mxfp8.json" --model "$m" --chip h100 --nodes 8 --chips-per-node 8 --auto --allow-mxfp8 \
    --global-batch 512 --json

  # Policy variants: each flag the planner reads, one at a time, on one mesh.
  pol=(--model "$m" --chip h100 --nodes 8 --chips-per-node 8)
  while read -r variant args; do
    # shellcheck disable=SC2086 # args is a list of flags
    both "policy__${m}__${variant}" "${pol[@]}" $args
  done <<'EOF'
ac_full --ac full
ac_selective --ac selective
ac_selective_op --ac selective:op
ac_selective_2 --ac selective:2
reshard_false --reshard false
reshard_4 --reshard 4
prefetch_2 --prefetch 2
optimizer_sgd --optimizer sgd
dtype_fp32 --param-dtype fp32 --reduce-dtype fp32
dtype_bf16_reduce --reduce-dtype bf16
param_comm_mxfp8 --param-comm mxfp8
grad_comm_mxfp8 --grad-comm mxfp8
both_comm_mxfp8 --param-comm mxfp8 --grad-comm mxfp8
loss_eager --loss eager
micro_batch_2 --micro-batch 2 --seq-len 4096
global_batch_256 --global-batch 256
headroom_0 --headroom 0
shard_16_replicate_4 --shard 16 --replicate 4
shard_only_32 --shard 32
EOF
  # The text and binary protobuf forms of one plan, and its predicted trace.
  run "file__${m}__text" "${pol[@]}" --text
  run "file__${m}__out" "${pol[@]}" --out "$out/file__${m}__out.pb"
  run "file__${m}__outtxt" "${pol[@]}" --out "$out/file__${m}__out.txtpb"
  run "file__${m}__trace" "${pol[@]}" --trace "$out/file__${m}__trace.json"
done

# Usage and input errors: their texts and exit codes are part of the tool's contract too.
run error__no_model --chip h100
run error__bad_model --model no-such-model --chip h100
run error__bad_chip --model llama3-8b --chip no-such-chip
run error__bad_shard --model llama3-8b --chip h100 --nodes 1 --chips-per-node 8 --shard 3
run error__bad_ac --model llama3-8b --chip h100 --ac sometimes
run error__bad_dtype --model llama3-8b --chip h100 --param-dtype int7
run error__auto_and_shard --model llama3-8b --chip h100 --auto --shard 8

find "$out" -type f ! -name '*.status' ! -name '*.gz' -exec gzip -n -f {} +
