#!/bin/sh
# Runs fsdp-train twice on NPROC ranks, without and with expert parallelism EP, and passes when both
# print the same per-step losses (to the printed digits).
# usage: same_losses_with_ep.sh DIR NPROC EP FSDP_RUN FSDP_TRAIN ARGS...
set -e
dir=$1 nproc=$2 ep=$3 run=$4 train=$5
shift 5
mkdir -p "$dir"
for degree in 1 "$ep"; do
  "$run" --nproc "$nproc" -- "$train" "$@" --parallelism.expert_parallel_degree "$degree" \
      --job.dump_folder "$dir/ep$degree" >"$dir/ep$degree.log" 2>&1 || { cat "$dir/ep$degree.log"; exit 1; }
  grep -o 'step: *[0-9]* *loss: *[0-9.]*' "$dir/ep$degree.log" >"$dir/ep$degree.losses"
done
cat "$dir/ep$ep.losses"
test -s "$dir/ep1.losses"
diff "$dir/ep1.losses" "$dir/ep$ep.losses"
echo "losses equal with expert_parallel_degree 1 and $ep on $nproc ranks"
