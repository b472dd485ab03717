#!/usr/bin/env bash
# plan_outputs_diff.sh BUILD_DIR BASELINE_DIR: regenerates every fsdp-plan output (scripts/plan_outputs.sh)
# into a temporary folder and compares it byte for byte (gunzipped) with BASELINE_DIR, written the same
# way before a change. Prints each file that differs (or is only on one side) and the first lines of its
# diff; exits 1 on any difference, 0 when every output is identical.
#
#   scripts/plan_outputs.sh build /tmp/plan_before          # before the change
#   scripts/plan_outputs_diff.sh build /tmp/plan_before     # after it
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR BASELINE_DIR" >&2
  exit 2
fi
baseline="$2"
[[ -d "$baseline" ]] || { echo "$0: no baseline folder $baseline" >&2; exit 2; }
tmp="$(mktemp -d "${TMPDIR:-/tmp}/plan_outputs.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

"$(dirname "$0")/plan_outputs.sh" "$1" "$tmp/new"

# A file's bytes, gunzipped where scripts/plan_outputs.sh gzipped them.
content() {
  if [[ "$1" == *.gz ]]; then gzip -dc "$1"; else cat "$1"; fi
}

differing=0
while read -r name; do
  if [[ ! -e "$baseline/$name" ]]; then
    echo "only in the new outputs: $name"
  elif [[ ! -e "$tmp/new/$name" ]]; then
    echo "only in the baseline: $name"
  elif cmp -s "$baseline/$name" "$tmp/new/$name" || cmp -s <(content "$baseline/$name") <(content "$tmp/new/$name"); then
    continue  # the same bytes, or the same once gunzipped (another gzip may compress differently)
  else
    echo "differs: $name"
    diff <(content "$baseline/$name") <(content "$tmp/new/$name") | head -n 20 || true
  fi
  differing=$((differing + 1))
done < <({ (cd "$baseline" && find . -type f); (cd "$tmp/new" && find . -type f); } | sed 's#^\./##' | sort -u)

total=$(find "$baseline" -type f | wc -l)
if [[ $differing -gt 0 ]]; then
  echo "$differing of $total fsdp-plan outputs differ from $baseline"
  exit 1
fi
echo "all $total fsdp-plan outputs identical to $baseline"
