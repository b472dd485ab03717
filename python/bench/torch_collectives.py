"""torch.distributed all-gather, reduce-scatter and all-reduce over backend "fsdp" against "gloo" (and
"mpi" where this torch has it: Debian's 1.13 does not), in one run: the groups live in the same processes
and take turns per size, medians of repeats.

    /usr/bin/python3 python/bench/torch_collectives.py --nproc 2 [--repeats 9]

Needs the built extension (build/python, or FSDP_PYTHON_PATH). Torch 1.13's gloo has neither
all_gather_into_tensor nor reduce_scatter: its all-gather column is the list form (over "fsdp" too, for
a like-for-like ratio), and its reduce-scatter column is an all_reduce of the full buffer, what code
without reduce_scatter falls back to. The list form's outputs are separate tensors, as user code
allocates them. Times are medians, in ms, of the full (gathered / reduced) buffer; bus bandwidth as
nccl-tests defines it: (n - 1) / n x bytes / time for all-gather and reduce-scatter, twice that for
all-reduce.
"""
import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES_MIB = [1, 4, 16, 64]


def timed(fn, repeats):
    fn()  # warm-up
    dist.barrier()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rank_main(rank, n, store_path, repeats, build_python):
    sys.path.insert(0, build_python)
    import fsdp_runtime  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("fsdp", init_method="file://" + store_path, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    rows = []
    for mib in SIZES_MIB:
        full = torch.empty(mib * 2**20 // 4, dtype=torch.float32)
        shard = torch.ones(full.numel() // n)
        result = {}
        outs = [torch.empty_like(shard) for _ in range(n)]
        reduced = torch.ones_like(full)
        result = {
            "fsdp_ag_tensor": timed(lambda: dist.all_gather_into_tensor(full, shard), repeats),
            "fsdp_ag_list": timed(lambda: dist.all_gather(outs, shard), repeats),
            "gloo_ag_list": timed(lambda: dist.all_gather(outs, shard, group=gloo), repeats),
            "fsdp_rs_tensor": timed(lambda: dist.reduce_scatter_tensor(shard, full), repeats),
            "gloo_all_reduce": timed(lambda: dist.all_reduce(full, group=gloo), repeats),
            "fsdp_all_reduce": timed(lambda: dist.all_reduce(reduced), repeats),
        }
        rows.append((mib, result))
    if rank == 0:
        busbw = lambda mib, s, k=1: k * (n - 1) / n * mib * 2**20 / s / 1e9  # noqa: E731  GB/s
        print(f"# {n} ranks, float32, median of {repeats} repeats; mpi backend available: {dist.is_mpi_available()}")
        print("| MiB | AG fsdp tensor ms (GB/s) | AG fsdp list ms | AG gloo list ms | gloo list / fsdp tensor "
              "| gloo list / fsdp list | RS fsdp tensor ms (GB/s) | AR gloo ms (GB/s) | gloo AR / fsdp RS "
              "| AR fsdp ms (GB/s) | gloo AR / fsdp AR |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for mib, r in rows:
            print(f"| {mib} | {r['fsdp_ag_tensor']*1e3:.2f} ({busbw(mib, r['fsdp_ag_tensor']):.2f}) "
                  f"| {r['fsdp_ag_list']*1e3:.2f} | {r['gloo_ag_list']*1e3:.2f} "
                  f"| {r['gloo_ag_list']/r['fsdp_ag_tensor']:.1f}x | {r['gloo_ag_list']/r['fsdp_ag_list']:.1f}x "
                  f"| {r['fsdp_rs_tensor']*1e3:.2f} ({busbw(mib, r['fsdp_rs_tensor']):.2f}) "
                  f"| {r['gloo_all_reduce']*1e3:.2f} ({busbw(mib, r['gloo_all_reduce'], 2):.2f}) "
                  f"| {r['gloo_all_reduce']/r['fsdp_rs_tensor']:.1f}x "
                  f"| {r['fsdp_all_reduce']*1e3:.2f} ({busbw(mib, r['fsdp_all_reduce'], 2):.2f}) "
                  f"| {r['gloo_all_reduce']/r['fsdp_all_reduce']:.1f}x |", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--repeats", type=int, default=9)
    a = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    build_python = os.environ.get("FSDP_PYTHON_PATH", os.path.join(here, "..", "..", "build", "python"))
    folder = tempfile.mkdtemp(prefix="fsdp-torch-bench-")
    try:
        mp.spawn(rank_main, args=(a.nproc, os.path.join(folder, "store"), a.repeats, build_python), nprocs=a.nproc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
