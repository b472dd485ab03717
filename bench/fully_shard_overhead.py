#!/usr/bin/env python3
"""The front end's own cost per step of fully_shard, with next to no compute or communication: one rank, a
root wrapping 16 units of one Linear(8, 8), prefetch 1, forward and backward; what is measured is the
training thread's CPU time (time.thread_time: not the time other processes on a loaded host take from it),
median over the steps after a warm-up. --before REV runs fully_shard as python/fsdp_runtime/ was at git
revision REV (torch_interleaved.fully_shard_at) in the same process, a step of each in turn.

  /usr/bin/python3 bench/fully_shard_overhead.py [--build build] [--steps 400] [--before REV]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_interleaved  # noqa: E402  (puts --build's python/ on the path)
import fsdp_runtime  # noqa: E402

UNITS = 16
WARMUP = 50


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inner = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(UNITS)])
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        for layer in self.inner:
            x = layer(x)
        return self.head(x)


def sharded(shard):
    model = Net()
    for layer in model.inner:
        shard(layer, prefetch=1)
    shard(model, prefetch=1)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--before", help="also run fully_shard as python/fsdp_runtime/ was at this git revision")
    a = ap.parse_args()
    fsdp_runtime.set_cpu_threads(1)
    # An in-memory store: a file store's folder would be gone before the units (and the world they hold)
    # are collected at exit, and the world's shutdown would wait on it.
    dist.init_process_group("fsdp", store=dist.HashStore(), rank=0, world_size=1)
    models = {"fully_shard": sharded(fsdp_runtime.fully_shard)}
    if a.before:
        models[f"fully_shard {a.before}"] = sharded(torch_interleaved.fully_shard_at(a.before))
    x = torch.randn(4, 8)
    times = {name: [] for name in models}
    for s in range(WARMUP + a.steps):
        for name in (list(models) if s % 2 == 0 else list(models)[::-1]):
            t0 = time.thread_time()
            models[name](x).sum().backward()
            times[name].append(time.thread_time() - t0)
    dist.destroy_process_group()
    for name, t in times.items():
        print(f"{name}: {statistics.median(t[WARMUP:]) * 1e6:.0f} us of the training thread's CPU per step "
              f"({UNITS + 1} units, forward and backward)")


if __name__ == "__main__":
    main()
