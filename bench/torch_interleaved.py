#!/usr/bin/env python3
"""The torch variants at 2 ranks in the same two processes, a step of each in turn: the torch model
fully_shard'ed on the runtime, DDP over gloo, DDP over "fsdp", and no communication at all (each rank
trains its own replica on its half of the batch: the compute floor), and two lockstep floors: the same
replicas meeting once per step (a 1-float all-reduce after backward: what any synchronous data-parallel
step waits for at least) or once per unit in forward and backward (where fully_shard all-gathers and
reduce-scatters: its synchronisation points without its bytes). Separate jobs, as bench/vs_torch.py
runs them, spread by more than the differences between them on a shared 2-core machine; here every
variant sees the same load, step by step, and the ratios are of medians over the same minutes.
--alone runs each variant in two processes of its own instead, one after another: what a job of that
variant alone sees of the process (its heap, its threads), which interleaving can hide.

  /usr/bin/python3 bench/torch_interleaved.py [--build build] [--steps 80] [--models debug,titan]
                                              [--bind-to core|none] [--check] [--before REV] [--alone]
                                              [--variants "fully_shard,no communication"]

Same model, init, data, AdamW and clipping as vs_torch.py (whose MODELS it reuses); one thread per rank
for torch and OpenBLAS (fsdp_runtime.set_cpu_threads), and every variant under the heap policy
fully_shard sets (fsdp_runtime.keep_freed_heap). The ranks meet before each timed step (untimed), so
that no variant pays for the drift the one before it left between the ranks: each step starts as a
step of a job running that variant alone does, right after the last one's synchronisation. Per variant:
median step time over steps 4..n of each rank, the slower rank's (a job runs at its slower rank's pace;
for the replicas, the job of two unconnected replicas ends with its slower one), tokens/s of the job,
the ratios to DDP over gloo and to the replicas' step, and rank 0's median forward / backward / clip /
optimizer split. The variants train the same model on the same tokens, so their losses must agree: the
largest relative difference of each against DDP over gloo over the first 20 steps is printed too (the
horizon of the equivalence tests: later, rounding differences grow as in any two fp32 runs), so a wrong
result shows before any speed is read; --check exits 1 where one exceeds 1e-5 (ctest
python.torch_interleaved runs it for a few steps). --before REV adds the variant "fully_shard REV": the
package's Python files as they were at git revision REV of this checkout, over today's extension, so a
change to the front end is measured before and after in one run.
"""
import argparse
import atexit
import importlib
import os
import socket
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
import types

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_torch import GLOBAL_BATCH, MODELS, llama_args  # noqa: E402  (also puts --build's python/ on the path)

import fsdp_runtime  # noqa: E402
from fsdp_runtime.models.llama import Llama  # noqa: E402

VARIANTS = ("fully_shard", "DDP gloo", "DDP fsdp", "no communication", "replicas + step barrier",
            "replicas + unit barriers")
REPLICAS = ("no communication", "replicas + step barrier", "replicas + unit barriers")  # each rank its own model
BASELINE = "DDP gloo"


def fully_shard_at(rev):
    """fully_shard as python/fsdp_runtime/ was at git revision `rev`, run over today's extension: that
    revision's .py files of the package become a package of their own whose _C is today's (its
    __init__.py is not run: the backend is registered once). A revision whose fully_shard.py was a single
    file keeps working: its copies of the mesh and reshard rules are left out (the benchmark passes
    neither argument)."""
    here = os.path.dirname(os.path.abspath(__file__))
    git = ["git", "-C", here]
    files = subprocess.check_output(git + ["ls-tree", "--full-tree", "--name-only", rev, "python/fsdp_runtime/"],
                                    text=True).split()
    folder = tempfile.mkdtemp(prefix="fsdp-runtime-before-")
    atexit.register(shutil.rmtree, folder, True)
    for path in files:
        if path.endswith(".py") and not path.endswith("__init__.py"):
            src = subprocess.check_output(git + ["show", f"{rev}:{path}"], text=True)
            src = src.replace(", check_mesh_fills_world, check_reshard_group", "")
            with open(os.path.join(folder, os.path.basename(path)), "w") as f:
                f.write(src)
    name = "fsdp_runtime_at_" + "".join(c if c.isalnum() else "_" for c in rev)
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package
    sys.modules[name + "._C"] = fsdp_runtime._C
    return importlib.import_module(name + ".fully_shard").fully_shard


def build(variant, m, gloo):
    torch.manual_seed(42)  # the same initial weights for every variant
    model = Llama(llama_args(m))
    if variant.startswith("fully_shard"):
        shard = fully_shard_at(variant.split()[1]) if variant != "fully_shard" else fsdp_runtime.fully_shard
        for block in model.layers:
            shard(block)
        shard(model)
        return model, model
    if variant == "DDP gloo":
        return nn.parallel.DistributedDataParallel(model, process_group=gloo), model
    if variant == "DDP fsdp":
        return nn.parallel.DistributedDataParallel(model), model
    if variant == "replicas + unit barriers":
        for block in list(model.layers) + [model]:
            block.register_forward_pre_hook(lambda mod, args: barrier())
            block.register_forward_hook(barrier_in_backward)
    return model, model


def barrier_in_backward(module, args, out):
    out.register_hook(lambda grad: barrier())  # before the unit's backward (returns None: out stays)


def barrier():
    """A 1-float all-reduce: the ranks meet, no bytes to speak of move. One per step, or one per unit in
    forward and in backward where fully_shard all-gathers: what lockstep alone costs, without any data.
    Also the untimed meeting before every step."""
    dist.all_reduce(torch.zeros(1))


def step(variant, wrapped, model, opt, tokens, vocab):
    """One training step; returns (loss, [forward, backward, clip, optimizer] seconds)."""
    t0 = time.perf_counter()
    logits = wrapped(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    t1 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if variant == "replicas + step barrier":
        barrier()
    t2 = time.perf_counter()
    if variant.startswith("fully_shard"):
        fsdp_runtime.clip_grad_norm_(model, 1.0)
    else:
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    t3 = time.perf_counter()
    opt.step()
    t4 = time.perf_counter()
    return loss.item(), [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


def worker(rank, world, port, names, steps, bind, variants, out):
    if bind:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})
    fsdp_runtime.set_cpu_threads(1)
    fsdp_runtime.keep_freed_heap()  # what fully_shard sets for the process, from the first step of every variant
    dist.init_process_group("fsdp", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    results = {}
    for name in names:
        m = MODELS[name]
        runs = {}
        for v in variants:
            wrapped, model = build(v, m, gloo)
            opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
            runs[v] = (wrapped, model, opt)
        gen = torch.Generator().manual_seed(1000 + rank)
        times = {v: [] for v in variants}
        losses = {v: [] for v in variants}
        for s in range(steps):
            tokens = torch.randint(0, m["vocab"], (GLOBAL_BATCH // world, m["seq_len"] + 1), generator=gen)
            for v in (variants if s % 2 == 0 else variants[::-1]):
                barrier()  # untimed: the step starts with the ranks together, whatever the last variant left
                loss, phases = step(v, *runs[v], tokens, m["vocab"])
                losses[v].append(loss)
                times[v].append(phases)
        results[name] = (times, losses)
        del runs
    dist.destroy_process_group()
    out.put((rank, results))


def run_pair(names, steps, bind, variants):
    """Two fresh processes running `variants` in turn; returns {rank: {model: (times, losses)}}."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.get_context("spawn").SimpleQueue()
    ranks = mp.start_processes(worker, args=(2, port, names, steps, bind, variants, out), nprocs=2,
                               start_method="spawn", join=False)
    results = dict(out.get() for _ in range(2))  # before joining: two ranks' results overfill the pipe
    while not ranks.join():
        pass
    return results


def main():
    fsdp_runtime.use_best_blas_core()
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--models", default="debug,titan")
    ap.add_argument("--bind-to", choices=("core", "none"), default="core")
    ap.add_argument("--check", action="store_true", help="exit 1 where a variant's losses differ from DDP over gloo's "
                    "by more than 1e-5 relative in the first 20 steps")
    ap.add_argument("--before", help="also run fully_shard as python/fsdp_runtime/ was at this git revision")
    ap.add_argument("--variants", help="comma-separated subset of: " + ", ".join(VARIANTS))
    ap.add_argument("--alone", action="store_true", help="each variant in processes of its own, one after another")
    a = ap.parse_args()
    variants = tuple(dict.fromkeys(a.variants.split(","))) if a.variants else VARIANTS
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"torch_interleaved: unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if a.check and BASELINE not in variants:
        sys.exit(f"torch_interleaved: --check compares losses against {BASELINE!r}: run it too")
    variants += (f"fully_shard {a.before}",) if a.before else ()
    names = a.models.split(",")
    if a.steps < 6:
        sys.exit("torch_interleaved: --steps must be at least 6 (the first 3 are left out)")
    bind = a.bind_to == "core"
    if a.alone:  # the same tables, each variant's columns from a job of its own
        ranks = {0: {n: ({}, {}) for n in names}, 1: {n: ({}, {}) for n in names}}
        for v in variants:
            for rank, results in run_pair(names, a.steps, bind, (v,)).items():
                for n in names:
                    for into, got in zip(ranks[rank][n], results[n]):
                        into.update(got)
    else:
        ranks = run_pair(names, a.steps, bind, variants)
    how = "each variant alone in its own job" if a.alone else "a step of each variant in turn"
    print(f"2 ranks (bind-to {a.bind_to}), {a.steps} steps, {how}, global batch {GLOBAL_BATCH} sequences; step: the "
          "slower rank's median over steps 4..n; split: rank 0's medians")
    print("| model | variant | step (ms, median) | rank 0 / rank 1 (ms) | tokens/s | vs DDP gloo "
          "| step / replicas' step | forward / backward / clip / optimizer (ms) "
          "| largest loss difference vs DDP gloo (steps 1-20) |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for name in names:
        m = MODELS[name]
        per_rank = {r: {v: statistics.median(sum(p) for p in ranks[r][name][0][v][3:]) for v in variants}
                    for r in ranks}
        med = {v: max(per_rank[0][v], per_rank[1][v]) for v in variants}
        times, losses = ranks[0][name]
        for v in variants:
            split = " / ".join(f"{statistics.median(p[k] for p in times[v][3:]) * 1e3:.1f}" for k in range(4))
            if v in REPLICAS:  # each rank its own replica: not the same training
                diff = "- (own replicas)"
            elif BASELINE in losses:
                pairs = list(zip(losses[v], losses[BASELINE]))[:20]
                largest = max(abs(x - y) / abs(y) for x, y in pairs)
                worst = max(worst, largest)
                diff = f"{largest:.1e}"
            else:
                diff = "-"
            vs_gloo = f"{med[BASELINE] / med[v]:.2f}x" if BASELINE in med else "-"
            vs_replicas = f"{med[v] / med['no communication']:.3f}x" if "no communication" in med else "-"
            print(f"| {name} | {v} | {med[v] * 1e3:.2f} | {per_rank[0][v] * 1e3:.2f} / {per_rank[1][v] * 1e3:.2f} | "
                  f"{GLOBAL_BATCH * m['seq_len'] / med[v]:,.0f} | {vs_gloo} | {vs_replicas} | {split} | {diff} |")
    if a.check and worst > 1e-5:
        sys.exit(f"torch_interleaved: a variant's losses differ from DDP over gloo's by {worst:.1e} relative (> 1e-5)")


if __name__ == "__main__":
    main()
