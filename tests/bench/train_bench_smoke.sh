#!/bin/sh
# A short fsdp-train-bench run: every scenario trains and reports, nothing is hidden without prefetch,
# and something is with it (the figures themselves are for docs/benchmarks.md, not for a test).
set -eu
out=$("$1" --steps 3 --repeats 1 2>&1) || { echo "$out"; exit 1; }
echo "$out"
for s in "1 rank | 1 |" "FSDP 2 ranks, prefetch 1 | 2 |" "FSDP 2 ranks, prefetch 2 | 2 |" \
         "FSDP 2 ranks, prefetch 0 | 2 |" "checkpoint every 5 steps (sync) | 2 |" "checkpoint every 5 steps (async) | 2 |" \
         "MoE 2 ranks, EP 1 | 2 |" "MoE 2 ranks, EP 2 | 2 |"; do
  echo "$out" | grep -qF "$s" || { echo "no row for: $s"; exit 1; }
done
# Columns: scenario, ranks, step, us/token, vs 1 rank, all-gather hidden, ...
echo "$out" | grep -F "| FSDP 2 ranks, prefetch 0 |" | awk -F'|' '{ exit !($7 ~ /^ *0% *$/) }' ||
  { echo "prefetch 0 hid part of an all-gather"; exit 1; }
echo "$out" | grep -F "| FSDP 2 ranks, prefetch 1 |" | awk -F'|' '{ exit !($7 ~ /^ *[1-9][0-9]*% *$/) }' ||
  { echo "prefetch 1 hid nothing"; exit 1; }
# Expert parallelism's all-to-all is timed (a share above 0%) and only under EP.
echo "$out" | grep -F "| MoE 2 ranks, EP 2 |" | awk -F'|' '{ exit !($7 ~ /^ *[0-9.]+% *$/ && $6 + 0 > 0) }' ||
  { echo "EP 2 reported no all-to-all time"; exit 1; }
echo "$out" | grep -F "| MoE 2 ranks, EP 1 |" | awk -F'|' '{ exit !($6 ~ /^ *- *$/) }' ||
  { echo "EP 1 reported all-to-all time"; exit 1; }
