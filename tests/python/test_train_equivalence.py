"""python3 -m fsdp_runtime.train at N ranks (or HSDP R x S) trains exactly as at 1 rank: the same losses
and final parameters within 1e-5 relative over 20 steps in float32 (the tiny Llama; the debug model
with FSDP_EQUIVALENCE=full, `make equivalence`).

    test_train_equivalence.py FSDP_RUN N | RxS
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
from train_runs import assert_losses_match, run_python  # noqa: E402


def main():
    fsdp_run, layout = sys.argv[1], sys.argv[2]
    replicate, shard = (int(x) for x in layout.split("x")) if "x" in layout else (1, int(layout))
    ranks = replicate * shard
    with tempfile.TemporaryDirectory(prefix="fsdp-train-py-") as folder:
        ref_records, ref_weights = run_python(fsdp_run, os.path.join(folder, "one"), 1)
        records, weights = run_python(fsdp_run, os.path.join(folder, "many"), ranks, replicate)
    assert_losses_match(records, ref_records, f"{layout} ranks against 1")
    assert list(weights) == list(ref_weights), (list(weights), list(ref_weights))
    worst = 0.0
    for name, w in weights.items():  # relative L2 per tensor, ||w - ref|| / ||ref|| (as tests/train/trainer_test.cc)
        ref = ref_weights[name]
        rel = ((w - ref).norm() / ref.norm()).item()
        assert rel <= 1e-5, (name, rel)
        worst = max(worst, rel)
    print(f"fsdp_runtime.train at {layout} ranks: {len(records)} steps equal the 1-rank run (loss "
          f"{ref_records[0]['loss']:.5f} -> {ref_records[-1]['loss']:.5f}), {len(weights)} final parameters within {worst:.1e} relative",
          flush=True)


if __name__ == "__main__":
    main()
