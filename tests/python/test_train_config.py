"""python3 -m fsdp_runtime.train reads fsdp-train's configuration: an unknown key, and a key whose
value this front end cannot honour, are refused naming the key (exit status 2) before any rank
connects; --help prints fsdp-train's key table."""
import os
import subprocess
import sys

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "debug_model.toml")


def train(*flags):
    env = dict(os.environ, PYTHONPATH=os.environ["FSDP_PYTHON_PATH"])
    return subprocess.run([sys.executable, "-m", "fsdp_runtime.train", "--config", CONFIG] + list(flags), env=env,
                          capture_output=True, text=True, timeout=60)


def refused(flags, key):
    p = train(*flags)
    assert p.returncode == 2 and key in p.stderr, (flags, p.returncode, p.stdout, p.stderr)
    print(f"{' '.join(flags)}: refused: {p.stderr.strip().splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    refused(["--training.no_such_key", "1"], "training.no_such_key")
    refused(["--metrics.trace_file", "trace.json"], "metrics.trace_file")  # (activation checkpointing runs here)
    refused(["--training.param_comm_dtype", "mxfp8"], "training.param_comm_dtype")
    refused(["--parallelism.data_parallel_shard_degree", "3"], "data_parallel_shard_degree")
    p = train("--help")
    assert p.returncode == 0 and "local_batch_size" in p.stdout, (p.returncode, p.stdout[-500:], p.stderr)
    print("--help lists fsdp-train's keys", flush=True)
