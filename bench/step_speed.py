#!/usr/bin/env python3
"""Tokens/s of fsdp-train on the debug model, before/after settings side by side in one invocation.

Runs every variant once per repeat, interleaved (so drifting machine load hits all alike), and prints
the median over repeats of each run's median tokens/s (steps 2..n, rank 0's per-step `tps`), the page
faults per step (perf stat -e page-faults over the whole job, all ranks, divided by the steps; and
fsdp-train's own count over steps 2..n), and each variant's ratio to the first of its rank count.

  bench/step_speed.py [--build build] [--before-build ../main/build] [--steps 30] [--repeats 5]
                      [--config configs/debug_model.toml]
  bench/step_speed.py --windows [--build build] ...   # 2 ranks, unit buffers in windows or not
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# name, ranks, which build, extra environment. "main" is --before-build (the code before the thread
# budget, the block cache and the vectorized elementwise passes); the knob variants of this build take
# the block cache (FSDP_CACHING_ALLOCATOR=0) or the thread budget (OPENBLAS_NUM_THREADS=2, OpenBLAS's
# own default of one thread per core in every rank) away one at a time.
VARIANTS = [
    ("1 rank, main", 1, "before", {}),
    ("1 rank, no block cache", 1, "this", {"FSDP_CACHING_ALLOCATOR": "0"}),
    ("1 rank, this branch", 1, "this", {}),
    ("2 ranks, main", 2, "before", {}),
    ("2 ranks, thread budget, no block cache", 2, "this", {"FSDP_CACHING_ALLOCATOR": "0"}),
    ("2 ranks, block cache, 2 BLAS threads/rank", 2, "this", {"OPENBLAS_NUM_THREADS": "2"}),
    ("2 ranks, this branch", 2, "this", {}),
]
# --windows: one build at 2 ranks, FSDP units' all-gather and reduce-scatter buffers as plain blocks
# (FSDP_UNIT_WINDOWS=0) against shared-memory windows (the default).
WINDOW_VARIANTS = [
    ("2 ranks, plain unit buffers", 2, "this", {"FSDP_UNIT_WINDOWS": "0"}),
    ("2 ranks, unit buffers in windows", 2, "this", {"FSDP_UNIT_WINDOWS": "1"}),
]


def run(build, config, ranks, steps, env_extra, scratch, perf):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(env_extra)
    # The same global batch (8 sequences) at 1 and 2 ranks.
    cmd = [f"{build}/launch/fsdp-run", "--nproc", str(ranks), "--", f"{build}/train/fsdp-train", "--config", config,
           "--training.steps", str(steps), "--training.local_batch_size", str(8 // ranks), "--metrics.file=",
           "--job.dump_folder", scratch]
    if perf:
        cmd = ["perf", "stat", "-x,", "-e", "page-faults", "--"] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"step_speed: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    tps = [float(m.group(2).replace(",", "")) for m in re.finditer(r"\[rank 0\] step: +(\d+) .*tps: ([\d,]+)", p.stdout)
           ][1:]
    faults = re.search(r"\[rank 0\] memory: after the first step, .* ([\d.e+-]+) minor page faults per step", p.stdout)
    perf_faults = re.search(r"^(\d+),,page-faults", p.stderr, re.M) if perf else None
    # fsdp-train reports the aggregate tokens/s of rank 0's tokens; the job's is ranks x that.
    return (statistics.median(tps) * ranks, float(faults.group(1)) if faults else float("nan"),
            int(perf_faults.group(1)) / steps if perf_faults else float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--before-build", help="a build of the code to compare with (e.g. main's)")
    ap.add_argument("--windows", action="store_true", help="compare FSDP_UNIT_WINDOWS=0 and 1 at 2 ranks instead")
    ap.add_argument("--config", default="configs/debug_model.toml")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    variants = WINDOW_VARIANTS if a.windows else VARIANTS
    if not a.windows and not a.before_build:
        ap.error("--before-build is required (unless --windows)")
    perf = shutil.which("perf") is not None and subprocess.run(
        ["perf", "stat", "-e", "page-faults", "true"], capture_output=True).returncode == 0
    builds = {"this": a.build, "before": a.before_build}
    results = {name: [] for name, _, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="fsdp_step_speed_") as scratch:
        for r in range(a.repeats):
            for name, ranks, build, env in variants:
                results[name].append(run(builds[build], a.config, ranks, a.steps, env, scratch, perf))
            print(f"step_speed: repeat {r + 1}/{a.repeats} done", file=sys.stderr)
    print("| variant | ranks | tokens/s (median) | runs (tokens/s) | vs first of its ranks | minor faults/step, rank 0 "
          "(fsdp-train) | page faults/step, whole job (perf) |")
    print("|---|---|---|---|---|---|---|")
    base = {}
    for name, ranks, _, _ in variants:
        runs = results[name]
        tps = statistics.median(x[0] for x in runs)
        base.setdefault(ranks, tps)
        print(f"| {name} | {ranks} | {tps:,.0f} | {' '.join(f'{x[0]:,.0f}' for x in runs)} | {tps / base[ranks]:.2f}x | "
              f"{statistics.median(x[1] for x in runs):,.1f} | {statistics.median(x[2] for x in runs):,.0f} |")


if __name__ == "__main__":
    main()
