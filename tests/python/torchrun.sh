#!/usr/bin/env bash
# torchrun.sh PYTHON N [ARGS...]: runs ARGS (default: env_job.py) as a torchrun job of N ranks
# on one node with its rendezvous store on a port the kernel picks (torch 1.13's --standalone fixes
# it at 29400, so two such tests at once collided). --redirects/--tee/--log_dir work around torch 1.13's
# elastic launcher on Python 3.11 (only "1" and "2" parse there, its default "0" and "3" to None): the
# workers' stdout comes out on torchrun's, each line prefixed with its rank, and their stderr straight
# on torchrun's (a worker's traceback reaches the test's log); the log files go to a temporary folder
# removed afterwards.
set -euo pipefail
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
python=$1 n=$2
shift 2
[ $# -gt 0 ] || set -- "$(dirname "$0")/env_job.py"
"$python" -m torch.distributed.run --nnodes 1 --rdzv_backend c10d --rdzv_endpoint localhost:0 \
  --rdzv_id "torchrun-sh-$$" --nproc_per_node "$n" --redirects 1 --tee 1 --log_dir "$logs" "$@"
