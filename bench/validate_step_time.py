#!/usr/bin/env python3
"""Predicted against measured step time: fsdp-plan's schedule simulator beside fsdp-train, same machine.

For each configuration (ranks x prefetch x reshard_after_forward) it runs fsdp-train on the debug model
with a trace, takes rank 0's median step time over steps 2..n and the median time per step the training
thread spent outside compute spans (waiting for collectives, the step's small all-reduces, data), and
asks fsdp-plan for the same job (--json). Prints one markdown row per configuration and the error of
the prediction. No timing is asserted: the 15% target of issue 18 is a benchmark, not a test.

  bench/validate_step_time.py [--build build] [--calibrate | --chip cpu | --chip-file chip.toml] [--steps 12]
                              [--ranks 1,2,4] [--prefetch 0,1,2] [--reshard default,never] [--repeats 1]

--calibrate measures a profile per rank count with fsdp-calibrate, as each rank will run: with the BLAS
threads fsdp-run's thread budget gives it (cores / ranks, at least 1), and where ranks outnumber the cores
its matmul rate and memory bandwidth scaled by cores / ranks (the ranks time-slice the cores).
--fit-links then also fits the intra-server link (alpha, beta) of that profile to the all-gathers and
reduce-scatters of one fsdp-train run at prefetch 1, default resharding (rank 0's trace, steps 3..n):
duration = (n - 1) alpha + (n - 1) / n bytes / beta by least squares; the transfer term halved because
those collectives ran beside compute, which the profile's contention of 1 already halves (the latency
term, waiting for peers, the simulator leaves at full rate). That row is then fitted, not predicted.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

SEQ_LEN = 128
GLOBAL_BATCH = 8  # sequences per step at every rank count (local batch 8 / ranks, no accumulation)


def fit_links(trace, ranks, path):
    """Least-squares alpha, beta of rank 0's collectives in the trace, written into the profile at path."""
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
    ends = sorted(e["ts"] + e["dur"] for e in events if e.get("tid") == 0 and e["name"] == "optimizer")
    rows = [((ranks - 1), (ranks - 1) / ranks * e["args"]["bytes"], e["dur"] * 1e-6) for e in events
            if e.get("tid") == 1 and e["name"].split()[0] in ("all_gather", "reduce_scatter") and "args" in e
            and ends[1] <= e["ts"] <= ends[-1]]
    # Normal equations of d = x alpha + y inv_beta.
    sxx = sum(x * x for x, _, _ in rows)
    sxy = sum(x * y for x, y, _ in rows)
    syy = sum(y * y for _, y, _ in rows)
    sxd = sum(x * d for x, _, d in rows)
    syd = sum(y * d for _, y, d in rows)
    det = sxx * syy - sxy * sxy
    alpha, inv_beta = ((sxd * syy - syd * sxy) / det, (sxx * syd - sxy * sxd) / det) if det > 0 else (0, 0)
    if alpha < 0 or inv_beta <= 0:  # one size only, or noise: all latency
        alpha, inv_beta = sum(d for _, _, d in rows) / sxx * rows[0][0] if rows else 0, 1e-12
    inv_beta = inv_beta / 2
    with open(path, "a") as f:
        f.write(f"intra_latency_us = {alpha * 1e6:.6g}\nintra_gb_per_s = {1e-9 / inv_beta:.6g}\n")
    return alpha, 1 / inv_beta


def measure(build, config, ranks, prefetch, reshard, steps, scratch):
    trace = os.path.join(scratch, f"trace_{ranks}_{prefetch}_{reshard}.json")
    cmd = [f"{build}/launch/fsdp-run", "--nproc", str(ranks), "--", f"{build}/train/fsdp-train", "--config", config,
           "--training.steps", str(steps), "--training.local_batch_size", str(GLOBAL_BATCH // ranks),
           "--training.seq_len", str(SEQ_LEN), "--parallelism.prefetch", str(prefetch),
           "--parallelism.fsdp_reshard_after_forward", reshard, "--metrics.file=", "--metrics.trace_file", trace,
           "--job.dump_folder", scratch]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"validate_step_time: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
    compute = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("tid") == 0)
    # A step ends with its optimizer span; steps 2..n are the steady state.
    ends = [end for _, end, name in compute if name == "optimizer"]
    steps_s, outside_s = [], []
    for a, b in zip(ends[1:], ends[2:]):
        inside = sum(min(e, b) - max(s, a) for s, e, _ in compute if e > a and s < b)
        steps_s.append((b - a) * 1e-6)
        outside_s.append((b - a - inside) * 1e-6)
    return statistics.median(steps_s), statistics.median(outside_s)


def calibrate(build, ranks, scratch):
    cores = len(os.sched_getaffinity(0))
    path = os.path.join(scratch, f"chip_{ranks}.toml")
    cmd = [f"{build}/sharding/fsdp-calibrate", "--threads", str(max(1, cores // ranks)), "--micro-batch",
           str(GLOBAL_BATCH // ranks), "--seq-len", str(SEQ_LEN), "--out", path]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"validate_step_time: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    share = min(1.0, cores / ranks)
    if share < 1:
        with open(path) as f:
            text = f.read()
        text = re.sub(r"^((?:fp32|bf16|fp8)_tflops|hbm_tb_per_s) = ([\d.e+-]+)$",
                      lambda m: f"{m.group(1)} = {float(m.group(2)) * share:.6g}", text, flags=re.M)
        with open(path, "w") as f:
            f.write(text)
    return ["--chip-file", path]


def predict(build, chip_args, ranks, prefetch, reshard):
    cmd = [f"{build}/sharding/fsdp-plan", "--model", "debugmodel_byte", *chip_args, "--nodes", "1",
           "--chips-per-node", str(ranks), "--seq-len", str(SEQ_LEN), "--micro-batch", str(GLOBAL_BATCH // ranks),
           "--param-dtype", "float32", "--reduce-dtype", "float32", "--prefetch", str(prefetch), "--reshard", reshard,
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode not in (0, 3):
        sys.exit(f"validate_step_time: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    t = json.loads(p.stdout)["time"]
    return t["step"], t.get("exposedCommunication", t.get("exposed_communication", 0.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--config", default="configs/debug_model.toml")
    ap.add_argument("--chip", default="cpu")
    ap.add_argument("--chip-file")
    ap.add_argument("--calibrate", action="store_true", help="a profile per rank count from fsdp-calibrate")
    ap.add_argument("--fit-links", action="store_true", help="with --calibrate: fit the link to a training run")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--prefetch", default="0,1,2")
    ap.add_argument("--reshard", default="default,never")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    chip_args = ["--chip", a.chip] + (["--chip-file", a.chip_file] if a.chip_file else [])
    print("| ranks | prefetch | reshard | predicted step (ms) | measured step (ms) | error | "
          "predicted exposed (ms) | measured outside compute (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    errors = []
    with tempfile.TemporaryDirectory(prefix="fsdp_validate_") as scratch:
        for ranks in [int(x) for x in a.ranks.split(",")]:
            if a.calibrate:
                chip_args = calibrate(a.build, ranks, scratch)
                if a.fit_links and ranks > 1:
                    measure(a.build, a.config, ranks, 1, "default", a.steps, scratch)
                    alpha, beta = fit_links(os.path.join(scratch, f"trace_{ranks}_1_default.json"), ranks,
                                            chip_args[1])
                    print(f"<!-- {ranks} ranks: link fitted to alpha {alpha * 1e6:.0f} us, beta {beta / 1e9:.2f} GB/s -->",
                          flush=True)
            for prefetch in [int(x) for x in a.prefetch.split(",")]:
                for reshard in a.reshard.split(","):
                    runs = [measure(a.build, a.config, ranks, prefetch, reshard, a.steps, scratch)
                            for _ in range(a.repeats)]
                    step = statistics.median(r[0] for r in runs)
                    outside = statistics.median(r[1] for r in runs)
                    p_step, p_exposed = predict(a.build, chip_args, ranks, prefetch, reshard)
                    err = (p_step - step) / step
                    errors.append(abs(err))
                    print(f"| {ranks} | {prefetch} | {reshard} | {p_step * 1e3:.2f} | {step * 1e3:.2f} | "
                          f"{err * 100:+.0f}% | {p_exposed * 1e3:.2f} | {outside * 1e3:.2f} |", flush=True)
    print(f"\nmedian |error| {statistics.median(errors) * 100:.0f}%, worst {max(errors) * 100:.0f}%")


if __name__ == "__main__":
    main()
