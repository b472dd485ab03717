#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS each (default 60) from its checked-in seeds
# (fuzz/corpus/<target>), under ASan + UBSan, with a per-format -max_len and a 2 GiB -rss_limit_mb.
# New inputs go to <build>/corpus/<target> (never into the checked-in seeds); a crash, leak, timeout
# or out-of-memory stops the run with a reproducer in <build>/artifacts/ and a nonzero exit.
# Usage: fuzz/run.sh BUILD_DIR [TARGET...]   (the -DFSDP_FUZZ=ON build; no TARGET: every one)
set -euo pipefail
build=${1:?usage: fuzz/run.sh BUILD_DIR [TARGET...]}
shift
only=" $* "
seconds=${FUZZ_SECONDS:-60}
here=$(cd "$(dirname "$0")" && pwd)
# target:max_len, the largest input worth mutating for each format.
targets=(message_header:64 tcp_handshake:1024 store_frame:4096 checkpoint_metadata:4096 safetensors_header:4096
         plan_file:12288 toml_config:4096)
mkdir -p "$build/artifacts"
for entry in "${targets[@]}"; do
  t=${entry%%:*}
  max_len=${entry##*:}
  if [ $# -gt 0 ] && [[ $only != *" $t "* ]]; then continue; fi
  mkdir -p "$build/corpus/$t"
  log="$build/artifacts/$t.log"
  echo "fuzz: $t for ${seconds}s (max_len $max_len)"
  if ! "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
        -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
        "$build/corpus/$t" "$here/corpus/$t" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $t FAILED (reproducer and log under $build/artifacts/)"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/fuzz: $t /"
done
