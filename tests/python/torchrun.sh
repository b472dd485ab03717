#!/usr/bin/env bash
# torchrun.sh PYTHON N [ARGS...]: runs ARGS (default: env_job.py) as a torchrun job of N ranks
# on one node with its rendezvous store on a port the kernel picks (torch 1.13's --standalone fixes
# it at 29400, so two such tests at once collided). --redirects/--tee/--log_dir work around torch 1.13's
# elastic launcher on Python 3.11 (its default "0" parses to None there); the logs go to a temporary
# folder removed afterwards.
set -euo pipefail
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
python=$1 n=$2
shift 2
[ $# -gt 0 ] || set -- "$(dirname "$0")/env_job.py"
"$python" -m torch.distributed.run --nnodes 1 --rdzv_backend c10d --rdzv_endpoint localhost:0 \
  --rdzv_id "torchrun-sh-$$" --nproc_per_node "$n" --redirects 2 --tee 1 --log_dir "$logs" "$@"
