#!/usr/bin/env python3
"""The Python trainer (python3 -m fsdp_runtime.train) against fsdp-train on the same TOML, 2 ranks under
fsdp-run, interleaved: per repeat and model one run of each, the order alternating from repeat to repeat.

  /usr/bin/python3 bench/trainer_vs_fsdp_train.py [--build build] [--config configs/debug_model.toml]
        [--models debug,titan] [--steps 20] [--repeats 5] [--bind-to none|core] [--sample-ms 2] [--floor]
        [--check]

Models: "debug" is the TOML as it is; "titan" adds TorchTitan's debugmodel dims (bench/vs_torch.py's
MODELS). tokens/s: the job's (2 x rank 0's per-step `tps`, the same metrics line from either front end),
median over steps 2..n of a run, then median over repeats; "Python / fsdp-train" is the ratio of the two
medians. The losses of both front ends must agree (same TOML and seed: the same weights and batches);
the largest relative difference over each pair of runs is printed, and --check exits 1 above 1e-4.

Where rank 0's step goes, summed over steps 2..n of every run and given as a share of the step time:
- fsdp-train: its trace (metrics.trace_file): the compute spans "forward <unit>", "backward <unit>",
  "optimizer"; "rest" is the step time outside them (waits for all-gathers and reduce-scatters, the
  clipping and the loss all-reduce, the runtime's bookkeeping between spans).
- the Python trainer: bench/trainer_sampled.py's sampling of rank 0's stack: forward and backward without
  "hooks" (the time inside fully_shard's modules, fully_shard.py and _fsdp_*.py, during forward and
  backward, and what they wait on), clip, optimizer (step and zero_grad), rest (the batch, the loss
  all-reduce). A sample costs tens of microseconds of rank 0's time per period; --sample-ms 0 runs the
  trainer unsampled, to see that cost in its tokens/s.
--floor: each front end's compute floor too, in the same repeats: two 1-rank jobs at once, each alone on
the 2-rank job's local batch (no communication; unsampled, unpinned). A front end's 2-rank job cannot beat
its floor, so the Python trainer's share of fsdp-train's tokens/s is bounded by the floors' ratio (torch's
kernels against the runtime's).
--check: a tiny model for 3 steps, one repeat (ctest python.trainer_vs_fsdp_train).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from vs_torch import MODELS  # noqa: E402

PHASES = ("forward", "backward", "hooks", "clip", "optimizer", "rest")
FRONT_ENDS = ("fsdp-train", "Python trainer")
TINY = ["--model.n_layers", "2", "--model.dim", "32", "--model.n_heads", "4", "--model.n_kv_heads", "2",
        "--training.seq_len", "16"]


def command(a, front_end, model_args, scratch, nproc, sample):
    """(argv, env) of one job of `nproc` ranks; `sample`: the Python trainer under the stack sampler. A
    1-rank job (of two at once) gets one thread, as each rank of the 2-rank job does (fsdp-run's share)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if nproc == 1:
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    trace, sampled = os.path.join(scratch, "trace.json"), os.path.join(scratch, "sampled.json")
    if front_end == "fsdp-train":
        job = [f"{a.build}/train/fsdp-train", "--metrics.trace_file", trace]
    else:
        env["PYTHONPATH"] = os.path.join(a.build, "python")
        env["FSDP_BENCH_SAMPLE_MS"] = str(a.sample_ms)
        job = ([sys.executable, os.path.join(HERE, "trainer_sampled.py"), sampled] if sample else
               [sys.executable, "-m", "fsdp_runtime.train"])
    cmd = ([f"{a.build}/launch/fsdp-run", "--nproc", str(nproc)] +
           (["--bind-to", "core"] if a.bind_to == "core" and nproc > 1 else []) +
           ["--"] + job + ["--config", a.config, "--training.steps", str(a.steps), "--metrics.file=",
                           "--job.dump_folder", scratch] + model_args)
    return cmd, env


def step_lines(a, cmd, p):
    """[(loss, tps)] of rank 0's step lines of a finished job (exits on a failed or short run)."""
    if p.returncode != 0:
        sys.exit(f"trainer_vs_fsdp_train: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    steps = [(float(x.group(1)), float(x.group(2).replace(",", "")))
             for x in re.finditer(r"\[rank 0\] step: +\d+ .*loss: +([\d.]+) .*tps: ([\d,]+)", p.stdout)]
    if len(steps) != a.steps:
        sys.exit(f"trainer_vs_fsdp_train: {len(steps)} step lines of rank 0, not {a.steps}:\n{p.stdout}")
    return steps


def run(a, front_end, model_args, scratch):
    """One 2-rank job: (job tokens/s, [losses], {phase: seconds of rank 0 over steps 2..n})."""
    sample = front_end != "fsdp-train" and a.sample_ms > 0
    cmd, env = command(a, front_end, model_args, scratch, 2, sample)
    steps = step_lines(a, cmd, subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900))
    tps = [t for _, t in steps[1:]]
    if front_end == "fsdp-train":
        phases = fsdp_train_phases(os.path.join(scratch, "trace.json"))
    elif not sample:
        phases = {k: float("nan") for k in PHASES}
    else:
        with open(os.path.join(scratch, "sampled.json")) as f:
            s = json.load(f)
        phases = {k: s["seconds"].get(k, 0.0) for k in PHASES if k != "rest"}
        phases["rest"] = s["seconds"].get("other", 0.0)
    return statistics.median(tps) * 2, [loss for loss, _ in steps], phases


def run_floor(a, front_end, model_args, scratch):
    """The front end's compute floor: two 1-rank jobs at once (each rank alone on the same local batch as
    in the 2-rank job, no communication at all), unsampled and unpinned. Their tokens/s summed."""
    jobs = []
    for i in range(2):
        d = os.path.join(scratch, f"floor{i}")
        os.makedirs(d, exist_ok=True)
        cmd, env = command(a, front_end, model_args, d, 1, False)
        jobs.append((cmd, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    total = 0.0
    for cmd, proc in jobs:
        out, err = proc.communicate(timeout=900)
        steps = step_lines(a, cmd, subprocess.CompletedProcess(cmd, proc.returncode, out, err))
        total += statistics.median(t for _, t in steps[1:])
    return total


def fsdp_train_phases(trace_path):
    """Seconds of rank 0's compute spans in steps 2..n (after step 1's optimizer span, the last span of a
    step, up to the last one's end), by phase; rest = the rest of that time."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0 and e["tid"] == 0]
    events.sort(key=lambda e: e["ts"])
    first_opt = next(i for i, e in enumerate(events) if e["name"] == "optimizer")
    last_opt = max(i for i, e in enumerate(events) if e["name"] == "optimizer")
    phases = {k: 0.0 for k in PHASES}
    for e in events[first_opt + 1:last_opt + 1]:
        kind = e["name"].split()[0]
        if kind in phases:
            phases[kind] += e["dur"] / 1e6
    end = lambda e: (e["ts"] + e["dur"]) / 1e6  # noqa: E731
    phases["rest"] = end(events[last_opt]) - end(events[first_opt]) - sum(phases.values())
    return phases


def print_table(models, res, steps):
    """The markdown table; returns the largest relative loss difference between the front ends."""
    print("| model | front end | tokens/s (median) | runs | Python / fsdp-train | step (ms, rank 0, mean) | "
          + " | ".join(PHASES) + " | largest loss difference |")
    print("|---|---|---|---|---|---|" + "---|" * len(PHASES) + "---|")
    worst = 0.0
    for n in models:
        base = statistics.median(r[0] for r in res[(n, "fsdp-train")])
        diff = max(abs(x - y) / abs(y) for p, q in zip(res[(n, "Python trainer")], res[(n, "fsdp-train")])
                   for x, y in zip(p[1], q[1]))
        worst = max(worst, diff)
        for f in FRONT_ENDS:
            runs = res[(n, f)]
            tps = statistics.median(r[0] for r in runs)
            total = {k: sum(r[2][k] for r in runs) for k in PHASES}
            whole = sum(total.values())
            step_ms = whole / (len(runs) * (steps - 1)) * 1e3
            shares = " | ".join("-" if (f == "fsdp-train" and k in ("hooks", "clip")) or whole != whole
                                else f"{total[k] / whole:.0%}" for k in PHASES)
            print(f"| {n} | {f} | {tps:,.0f} | {' '.join(f'{r[0]:,.0f}' for r in runs)} | {tps / base:.0%} | "
                  f"{step_ms:.1f} | {shares} | {diff:.1e} |")
    return worst


def print_floors(models, res, floors):
    """Each front end against its compute floor, and the two floors against each other: what the Python
    trainer can reach at most is its floor, so Python / fsdp-train is bounded by the floors' ratio."""
    print("\n| model | front end | 2-rank tokens/s | floor: 2 x 1 rank, no communication | 2-rank / floor | "
          "floor / fsdp-train's floor |")
    print("|---|---|---|---|---|---|")
    for n in models:
        base = statistics.median(floors[(n, "fsdp-train")])
        for f in FRONT_ENDS:
            tps, floor = statistics.median(r[0] for r in res[(n, f)]), statistics.median(floors[(n, f)])
            print(f"| {n} | {f} | {tps:,.0f} | {floor:,.0f} | {tps / floor:.0%} | {floor / base:.0%} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--config", default="configs/debug_model.toml")
    ap.add_argument("--models", default="debug,titan")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bind-to", choices=("core", "none"), default="none")
    ap.add_argument("--sample-ms", type=float, default=2.0,
                    help="the Python trainer's stack sampling period; 0: run it unsampled (no phase shares)")
    ap.add_argument("--floor", action="store_true",
                    help="also each front end's compute floor (two 1-rank jobs at once) in every repeat")
    ap.add_argument("--check", action="store_true", help="a tiny model, 3 steps, 1 repeat; exit 1 on a loss mismatch")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    models = {"tiny": TINY} if a.check else {n: MODELS[n]["args"] for n in a.models.split(",")}
    if a.check:
        a.steps, a.repeats = 3, 1
    if a.steps < 3:
        sys.exit("trainer_vs_fsdp_train: --steps must be at least 3 (the first is left out)")
    res = {(n, f): [] for n in models for f in FRONT_ENDS}
    floors = {(n, f): [] for n in models for f in FRONT_ENDS}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fsdp_trainer_vs_") as scratch:
        for rep in range(a.repeats):
            for n, args in models.items():
                for f in (FRONT_ENDS if rep % 2 == 0 else FRONT_ENDS[::-1]):
                    res[(n, f)].append(run(a, f, args, scratch))
                    if a.floor:
                        floors[(n, f)].append(run_floor(a, f, args, scratch))
            print(f"trainer_vs_fsdp_train: repeat {rep + 1}/{a.repeats} done", file=sys.stderr)
    print(f"2 ranks (fsdp-run, bind-to {a.bind_to}), {a.config}, {a.repeats} repeats x {a.steps} steps, "
          f"alternating; load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    worst = print_table(models, res, a.steps)
    if a.floor:
        print_floors(models, res, floors)
    if a.check and worst > 1e-4:
        sys.exit(f"trainer_vs_fsdp_train: the two front ends' losses differ by {worst:.1e} relative (> 1e-4)")


if __name__ == "__main__":
    main()
