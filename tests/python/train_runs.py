"""Runs of the two training front ends on one configuration, for the equivalence tests: the Python
entry point (python3 -m fsdp_runtime.train) and fsdp-train, each as an fsdp-run job, in a folder of
their own. Each run returns its per-step records (metrics.file, JSONL) and, for the Python one, its
final weights (checkpoint.enable: step-<steps>/model.safetensors)."""
import json
import os
import re
import subprocess
import sys

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "debug_model.toml")
STEPS = 20
GLOBAL_BATCH = 12  # sequences: divisible by 1, 2, 3, 4 data-parallel ranks

# The tiny Llama of the CI checks (a few seconds a run): 2 layers, dim 32, 4 heads / 2 KV heads, 17-token
# windows of the tiny corpus, 20 steps of AdamW in float32. FSDP_EQUIVALENCE=full: the debug model itself.
TINY = ["--model.n_layers", "2", "--model.dim", "32", "--model.n_heads", "4", "--model.n_kv_heads", "2",
        "--training.seq_len", "16"]


def model_flags():
    return [] if os.environ.get("FSDP_EQUIVALENCE") == "full" else TINY


# TorchTitan v0.2.2's torchtitan/models/llama3/train_configs/debug_model.toml, kept once in the project
# (tests/train/config_torchtitan_test.cc's kDebugModelToml), and what it needs beside a TorchTitan
# checkout: the corpus and tokenizer in place of c4_test's, float32, short windows, 2 of its 6 layers.
TORCHTITAN_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train", "config_torchtitan_test.cc")
TORCHTITAN_FLAGS = ["--training.dataset", "tiny_corpus", "--model.hf_assets_path", "",
                    "--training.mixed_precision_param", "float32", "--training.seq_len", "16", "--model.n_layers", "2"]


def write_torchtitan_debug_toml(path):
    with open(TORCHTITAN_TESTS) as f:
        text = re.search(r'kDebugModelToml = R"\((.*?)\)";', f.read(), re.S).group(1)
    with open(path, "w") as f:
        f.write(text)
    return path


def job_flags(folder, ranks, replicate=1, config=CONFIG, model=None):
    dp = ranks
    return ["--config", config, "--job.dump_folder", folder, "--training.steps", str(STEPS),
            "--training.local_batch_size", str(GLOBAL_BATCH // dp), "--training.global_batch_size", str(GLOBAL_BATCH),
            "--parallelism.data_parallel_replicate_degree", str(replicate), "--metrics.file", "metrics.jsonl",
            "--metrics.log_freq", "5"] + (model_flags() if model is None else model)


def run(cmd, what):
    env = dict(os.environ, PYTHONPATH=os.environ["FSDP_PYTHON_PATH"])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    sys.stdout.write(p.stdout[-2000:])
    if p.returncode != 0:
        sys.exit(f"{what} failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def records(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if "event" not in r]  # steps, not checkpoint events


def run_python(fsdp_run, folder, ranks, replicate=1, extra=(), launcher_store=False, **config):
    """The Python front end at `ranks` ranks (HSDP: replicate x ranks/replicate); (records, final weights).
    launcher_store: fsdp-run serves the rendezvous (the job joins it through _C.RunStore); otherwise
    --no-store, and torch's env:// store on rank 0."""
    from fsdp_runtime.safetensors import load_file

    flags = job_flags(folder, ranks, replicate, **config) + ["--checkpoint.enable", "true", "--checkpoint.interval",
                                                   str(STEPS)] + list(extra)
    store = [] if launcher_store else ["--no-store"]
    run([fsdp_run] + store + ["--nproc", str(ranks), "--", sys.executable, "-m", "fsdp_runtime.train"] + flags,
        f"fsdp_runtime.train at {ranks} ranks")
    return records(folder), load_file(os.path.join(folder, "checkpoint", f"step-{STEPS}", "model.safetensors"))


def run_fsdp_train(fsdp_run, fsdp_train, folder, ranks, extra=(), **config):
    run([fsdp_run, "--nproc", str(ranks), "--", fsdp_train] + job_flags(folder, ranks, **config) + list(extra),
        f"fsdp-train at {ranks} ranks")
    return records(folder)


def assert_losses_match(got, want, what, rtol=1e-5):
    assert len(got) == len(want) == STEPS, (what, len(got), len(want))
    for g, w in zip(got, want):
        assert abs(g["loss"] - w["loss"]) <= rtol * abs(w["loss"]), (what, g["step"], g["loss"], w["loss"])
