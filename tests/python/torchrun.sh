#!/usr/bin/env bash
# torchrun.sh PYTHON N: runs env_job.py as a torchrun job of N ranks (--standalone: torchrun
# picks a free port). --redirects/--tee/--log_dir work around torch 1.13's elastic launcher on Python
# 3.11 (its default "0" parses to None there); the logs go to a temporary folder removed afterwards.
set -euo pipefail
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
"$1" -m torch.distributed.run --standalone --nproc_per_node "$2" --redirects 2 --tee 1 --log_dir "$logs" \
  "$(dirname "$0")/env_job.py"
