#!/usr/bin/env python3
"""Tokens/s of fsdp-train against the same Llama in PyTorch, side by side in one invocation.

Per repeat, interleaved (so drifting machine load hits all alike): fsdp-train at 1 and 2 ranks (through
fsdp-run, which sets one BLAS thread per rank at 2 ranks on 2 cores), then the same model in plain PyTorch
(TorchTitan's Llama 3 module tree: RMSNorm, RoPE on interleaved pairs, GQA, SwiGLU), eager in 1 process
and DDP over gloo in 2 processes with cores // ranks threads each (torch's and OpenBLAS's pools:
fsdp_runtime.set_cpu_threads; torch.set_num_threads alone leaves OpenBLAS a thread per core). Same global batch (8
sequences), seq_len, vocab, init (N(0, 0.02) matrices, unit norm weights), AdamW (lr 8e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1) and gradient clipping at 1.0. Prints the median over repeats of
each run's median tokens/s (steps 2..n), the ratio fsdp-train / torch per rank count (at 1 process torch
runs on all cores and on one thread; the faster is the baseline; at 2 ranks DDP over gloo is; the
torch model fully_shard'ed on the runtime and DDP over backend "fsdp" run beside them), the achieved GFLOP/s (TorchTitan's
6N + 12·L·H·hd·T FLOPs per token) and an sgemm figure timed in the same run (torch.mm of the FFN's
(B·T, dim) x (dim, hidden) shape at 1 thread and at all cores).

  /usr/bin/python3 bench/vs_torch.py [--build build] [--steps 8] [--repeats 3] [--models debug,titan]
                                     [--bind-to core|none]

--bind-to core pins each rank of every 2-rank variant to its own CPU (fsdp-run --bind-to core for ours,
sched_setaffinity in the torch workers); the default leaves placement to the kernel, as torchrun does.
"""
import argparse
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

# The torch model lives in the package (TorchTitan's Llama 3 module tree); only its pure-Python part is
# used here, but the package's import loads the extension from the build tree (--build).
_build = next((a.split("=", 1)[1] if "=" in a else sys.argv[i + 2] for i, a in enumerate(sys.argv[1:])
               if a.startswith("--build")), "build")
sys.path.insert(0, os.path.join(_build, "python"))
from fsdp_runtime import set_cpu_threads, use_best_blas_core  # noqa: E402
from fsdp_runtime.models.llama import Llama, LlamaArgs, flops_per_token  # noqa: E402

GLOBAL_BATCH = 8
CORES = os.cpu_count() or 1

# The two models: fsdp-train CLI overrides on top of configs/debug_model.toml, and the dims the torch
# model is built with (hidden = TorchTitan's FFN rule: 2/3 of 4·dim rounded up to multiple_of).
MODELS = {
    "debug": dict(args=[], dim=128, n_layers=4, n_heads=8, n_kv_heads=4, hidden=384, vocab=256, seq_len=128),
    "titan": dict(args=["--model.dim", "256", "--model.n_layers", "6", "--model.n_heads", "16", "--model.n_kv_heads",
                        "16", "--model.vocab_size", "2048", "--model.multiple_of", "256", "--training.seq_len", "256"],
                  dim=256, n_layers=6, n_heads=16, n_kv_heads=16, hidden=768, vocab=2048, seq_len=256),
}


def llama_args(m):
    return LlamaArgs(dim=m["dim"], n_layers=m["n_layers"], n_heads=m["n_heads"], n_kv_heads=m["n_kv_heads"],
                     hidden=m["hidden"], vocab=m["vocab"], seq_len=m["seq_len"])


def torch_worker(rank, world, port, m, steps, threads, backend, out, bind):
    """One rank of the torch run: returns (median tokens/s over steps 2..n, loss at step 1) through out."""
    if bind:  # as fsdp-run --bind-to core: rank r on the r-th CPU
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})
    set_cpu_threads(threads)  # torch's pool and OpenBLAS's, as fsdp-run gives our ranks
    if world > 1:
        # "fsdp" is registered by the package import above (re-run in each spawned worker)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(42)  # same init on every rank, as DDP broadcasts anyway
    model = Llama(llama_args(m))  # the project's "normal" init: matrices N(0, 0.02), norm weights 1
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    local_b = GLOBAL_BATCH // world
    times, first_loss = [], None
    for _ in range(steps):
        tokens = torch.randint(0, m["vocab"], (local_b, m["seq_len"] + 1), generator=gen)
        t0 = time.perf_counter()
        logits = ddp(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, m["vocab"]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        first_loss = loss.item() if first_loss is None else first_loss
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        out.put((GLOBAL_BATCH * m["seq_len"] / statistics.median(times[1:]), first_loss, {}))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(m, ranks, steps, threads, backend="gloo", bind=False):
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(torch_worker, args=(ranks, free_port(), m, steps, threads, backend, out, bind), nprocs=ranks,
                       start_method="spawn")
    return out.get()


def run_fsdp(build, config, m, ranks, steps, scratch, python_front_end=False, bind=False):
    """fsdp-train, or (python_front_end) python3 -m fsdp_runtime.train: the torch model fully_shard'ed on the
    runtime, both through fsdp-run. Returns (tokens/s, loss at step 1, {collective: % hidden})."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if python_front_end:
        env["PYTHONPATH"] = os.path.join(build, "python")
        job = ["--no-store", "--nproc", str(ranks), "--", sys.executable, "-m", "fsdp_runtime.train"]
    else:
        job = ["--nproc", str(ranks), "--", f"{build}/train/fsdp-train"]
    cmd = [f"{build}/launch/fsdp-run"] + (["--bind-to", "core"] if bind else []) + job + ["--config", config,
           "--training.steps", str(steps), "--training.local_batch_size", str(GLOBAL_BATCH // ranks),
           "--metrics.file=", "--job.dump_folder", scratch,
           # the torch model's init and plain RoPE (fsdp-train's defaults are TorchTitan's scheme and
           # Llama 3.1 RoPE scaling), so both runs are the same model
           "--model.init_scheme", "normal", "--model.rope_scaling", "false"] + m["args"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"vs_torch: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    steps_out = [(float(x.group(1)), float(x.group(2).replace(",", "")))
                 for x in re.finditer(r"\[rank 0\] step: +\d+ .*loss: +([\d.]+) .*tps: ([\d,]+)", p.stdout)]
    hidden = {x.group(1): int(x.group(2)) for x in re.finditer(r"\[rank 0\] overlap: (\w+) (\d+)% hidden", p.stdout)}
    # rank 0's tps counts rank 0's tokens; the job's is ranks x that.
    return statistics.median(t for _, t in steps_out[1:]) * ranks, steps_out[0][0], hidden


# What runs per model and rank count. 1 process: fsdp-train, torch on all cores and on one thread (1.13's
# OpenMP threads can be slower than one; the ratio is taken against the faster). 2 ranks: fsdp-train, the
# torch model fully_shard'ed on the runtime (python3 -m fsdp_runtime.train), and torch DDP over gloo and
# over backend "fsdp"; the ratio is taken against DDP over gloo.
IMPLS = {1: ("fsdp-train", "torch", "torch-1thread"),
         2: ("fsdp-train", "torch fully_shard", "torch DDP gloo", "torch DDP fsdp")}
BASELINES = {1: ("torch", "torch-1thread"), 2: ("torch DDP gloo",)}


def run_variant(a, m, ranks, impl, scratch):
    # --bind-to core: every multi-rank variant, ours and torch's alike, one rank per CPU
    bind = a.bind_to == "core" and ranks > 1 and ranks <= CORES
    if impl in ("fsdp-train", "torch fully_shard"):
        return run_fsdp(a.build, a.config, m, ranks, a.steps, scratch, python_front_end=impl != "fsdp-train", bind=bind)
    threads = 1 if impl == "torch-1thread" else max(1, CORES // ranks)
    return run_torch(m, ranks, a.steps, threads, "fsdp" if impl == "torch DDP fsdp" else "gloo", bind=bind)


def sgemm_gflops(m, threads, reps=50):
    set_cpu_threads(threads)
    a, b = torch.randn(GLOBAL_BATCH * m["seq_len"], m["dim"]), torch.randn(m["dim"], m["hidden"])
    torch.mm(a, b)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        ts.append(time.perf_counter() - t0)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / statistics.median(ts) / 1e9


def main():
    # Torch's BLAS is the OpenBLAS fsdp-train uses: both get this CPU's kernels (model/blas_core.h), the
    # torch workers through the inherited OPENBLAS_CORETYPE.
    use_best_blas_core()
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--config", default="configs/debug_model.toml")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="debug,titan")
    ap.add_argument("--bind-to", choices=("core", "none"), default="none",
                    help="multi-rank runs: each rank pinned to its own CPU (every variant alike), or not")
    a = ap.parse_args()
    names = a.models.split(",")
    variants = [(n, impl, r) for n in names for r in (1, 2) for impl in IMPLS[r]]
    res = {v: [] for v in variants}
    sgemm = {n: {1: [], CORES: []} for n in names}
    with tempfile.TemporaryDirectory(prefix="fsdp_vs_torch_") as scratch:
        for rep in range(a.repeats):
            for n in names:
                for th in sgemm[n]:
                    sgemm[n][th].append(sgemm_gflops(MODELS[n], th))
            for v in variants:
                n, impl, r = v
                res[v].append(run_variant(a, MODELS[n], r, impl, scratch))
            print(f"vs_torch: repeat {rep + 1}/{a.repeats} done", file=sys.stderr)
    print(f"{a.repeats} repeats x {a.steps} steps, global batch {GLOBAL_BATCH} sequences, {CORES} cores; "
          f"sgemm = torch.mm (B*T, dim) x (dim, hidden), median GFLOP/s in this run")
    print("| model | ranks | impl | tokens/s (median) | runs | vs torch (faster of 1 process) / DDP gloo (2 ranks) | "
          "GFLOP/s | sgemm GFLOP/s (1 thread x ranks at 2 ranks; all cores at 1) | of sgemm | "
          "loss at step 1 (ln vocab) | all-gather / reduce-scatter hidden |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, impl, r in variants:
        m, runs = MODELS[n], res[(n, impl, r)]
        tps = statistics.median(x[0] for x in runs)
        other = max(statistics.median(x[0] for x in res[(n, t, r)]) for t in BASELINES[r])
        hidden = [statistics.median(x[2][k] for x in runs) if all(k in x[2] for x in runs) else None
                  for k in ("all_gather", "reduce_scatter")]
        gf = tps * flops_per_token(llama_args(m)) / 1e9
        sg = statistics.median(sgemm[n][1]) * r if r > 1 else statistics.median(sgemm[n][CORES])
        print(f"| {n} | {r} | {impl} | {tps:,.0f} | {' '.join(f'{x[0]:,.0f}' for x in runs)} | "
              f"{tps / other:.2f}x | {gf:.1f} | {sg:.1f} | {gf / sg:.0%} | "
              f"{statistics.median(x[1] for x in runs):.3f} ({math.log(m['vocab']):.3f}) | "
              f"{' / '.join('-' if h is None else f'{h:.0f}%' for h in hidden)} |")


if __name__ == "__main__":
    main()
