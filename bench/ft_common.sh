# Sourced by the fault-tolerance benches (ft_recovery.sh, ft_cost.sh): what they share. Sets RUN and
# TRAIN from BUILD and empties OUT.
RUN=$BUILD/launch/fsdp-run
TRAIN=$BUILD/train/fsdp-train
rm -rf "$OUT" && mkdir -p "$OUT"

# The step seconds of the records in a metrics.jsonl, one per line.
step_seconds() { sed -n 's/.*"step_time_s":\([0-9.e-]*\).*/\1/p' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
