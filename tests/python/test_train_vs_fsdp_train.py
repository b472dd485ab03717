"""The two front ends drive one runtime: python3 -m fsdp_runtime.train (the PyTorch Llama, fully_shard)
and fsdp-train (the C++ reference model) on the same configuration and data give the same losses within
1e-5 relative over 20 steps in float32, and each writes the same run report beside its metrics.jsonl
(train/run_report.h: every series, the last save marked).

    test_train_vs_fsdp_train.py FSDP_RUN FSDP_TRAIN RANKS seed|load|torchtitan|bf16

seed: each front end initialises its own weights from training.seed (both draw model/init.h's values),
      the Python job under plain fsdp-run (it joins the launcher's store);
load: both read one safetensors file of the torch model's own init through checkpoint.initial_load_path,
      the Python job under fsdp-run --no-store (torch's env:// store);
torchtitan: TorchTitan v0.2.2's debug_model.toml as both front ends read it (weights by seed), with its
      activation checkpointing (selective, every 2nd block full), then "full" and "selective op" in the
      Python front end: each equals fsdp-train's run of the file.
bf16: weights by seed, parameters all-gathered and computed in bfloat16 (gradients reduced in float32) in
      both: torch's bfloat16 kernels against the runtime's, so the bar is the one bf16 runs meet against
      float32 (runtime.FsdpModel.Bf16ParamsAndReduceStayCloseToFp32): 2e-2 relative.
"""
import os
import re
import sys
import tempfile

import torch

sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
from train_runs import (TORCHTITAN_FLAGS, assert_losses_match, job_flags, run_fsdp_train, run_python,  # noqa: E402
                        write_torchtitan_debug_toml)


def write_initial_weights(path, folder, ranks):
    """The torch model's own init (torch's generator, seeded with training.seed), as F32 safetensors."""
    import fsdp_runtime._C as C
    import tomllib
    from fsdp_runtime.safetensors import save_file
    from fsdp_runtime.train import _model_args
    from fsdp_runtime.models.llama import Llama

    cfg = C.TrainConfig(job_flags(folder, ranks), ranks)
    c = tomllib.loads(cfg.to_toml())
    torch.manual_seed(c["training"]["seed"])
    save_file(Llama(_model_args(cfg, c)).state_dict(), path)


def report_marks(folder):
    """(series drawn, checkpoint marks) of the run report beside the folder's metrics.jsonl."""
    with open(os.path.join(folder, "report.html")) as f:
        page = f.read()
    return sorted(re.findall(r'data-series="(\w+)"', page)), len(re.findall(r'data-event="checkpoint"', page))


def torchtitan_file(fsdp_run, fsdp_train, ranks):
    with tempfile.TemporaryDirectory(prefix="fsdp-train-vs-tt-") as folder:
        config = dict(config=write_torchtitan_debug_toml(os.path.join(folder, "debug_model.toml")),
                      model=TORCHTITAN_FLAGS)
        cc = run_fsdp_train(fsdp_run, fsdp_train, os.path.join(folder, "cpp"), ranks, **config)
        for ac in ([], ["--activation_checkpoint.mode", "full"], ["--activation_checkpoint.selective_ac_option", "op"]):
            py, _ = run_python(fsdp_run, os.path.join(folder, "python" + "_".join(ac)), ranks, extra=ac, **config)
            what = " ".join(ac) or "as the file says (selective, every 2nd block)"
            assert_losses_match(py, cc, f"fsdp_runtime.train against fsdp-train, TorchTitan's debug_model.toml, {what}")
            print(f"TorchTitan's debug_model.toml at {ranks} ranks, activation checkpointing {what}: {len(py)} "
                  f"losses equal fsdp-train's ({cc[0]['loss']:.5f} -> {cc[-1]['loss']:.5f})", flush=True)


def main():
    fsdp_run, fsdp_train, ranks, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "torchtitan":
        return torchtitan_file(fsdp_run, fsdp_train, ranks)
    with tempfile.TemporaryDirectory(prefix="fsdp-train-vs-") as folder:
        load = []
        if mode == "bf16":
            load = ["--training.mixed_precision_param", "bfloat16"]
        if mode == "load":
            init = os.path.join(folder, "init.safetensors")
            write_initial_weights(init, folder, ranks)
            load = ["--checkpoint.initial_load_path", init]
        py, _ = run_python(fsdp_run, os.path.join(folder, "python"), ranks, extra=load,
                           launcher_store=mode in ("seed", "bf16"))
        cc = run_fsdp_train(fsdp_run, fsdp_train, os.path.join(folder, "cpp"), ranks,
                            extra=["--checkpoint.enable", "true", "--checkpoint.interval", "1000"] + load)
        reports = [report_marks(os.path.join(folder, front_end)) for front_end in ("python", "cpp")]
        if mode == "bf16":  # bfloat16 took effect in each front end: both differ from the float32 run
            fp32, _ = run_python(fsdp_run, os.path.join(folder, "python_fp32"), ranks, launcher_store=True)
            for name, run in (("fsdp_runtime.train", py), ("fsdp-train", cc)):
                assert run[0]["loss"] != fp32[0]["loss"], f"{name}: bfloat16 losses equal float32's"
    series = sorted(["loss", "grad_norm", "tps", "memory", "planned_memory", "comm_hidden"])
    assert reports == [(series, 5)] * 2, reports  # the save after the last step, on each of the five charts
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(py, cc))
    assert_losses_match(py, cc, f"fsdp_runtime.train against fsdp-train ({mode}, {ranks} ranks)",
                        rtol=2e-2 if mode == "bf16" else 1e-5)
    print(f"fsdp_runtime.train and fsdp-train at {ranks} rank(s), weights by {mode}: {len(py)} losses equal "
          f"within {worst:.1e} relative ({cc[0]['loss']:.5f} -> {cc[-1]['loss']:.5f})", flush=True)


if __name__ == "__main__":
    main()
