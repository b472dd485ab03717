#!/usr/bin/env python3
"""The planner against published FSDP runs: for every run in bench/public_fsdp_runs.toml, fsdp-plan's
predicted tokens/s per chip, MFU and peak memory beside the published figures, as a markdown table.

    python3 bench/validate_public_runs.py --build build [--runs bench/public_fsdp_runs.toml] [--check]

Each run is planned exactly as published (model, chip preset, servers, HSDP degrees, micro-batch, sequence
length, checkpointing, reduce dtype, PyTorch's eager loss) with no headroom: the published peak is what the allocator reserved,
so the whole capacity counts. A source's own network figure overrides the chip profile's (it describes
that cluster, not the chip); nothing else is adjusted per run. --check exits 1 when a run that ran is
predicted not to fit, or a run that ran out of memory is predicted to fit (the step-time error is
reported, never checked: it is the benchmark's figure, docs/planner.md).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib

REQUIRED = ("id", "source", "model", "chip", "nodes", "chips_per_node", "micro_batch", "seq_len", "ac", "outcome")
OPTIONAL = ("loss", "shard", "replicate", "reduce_dtype", "compile", "network_gb_per_s", "memory_gib",
            "tokens_per_s_per_chip", "mfu", "memory_gib_published", "note")


def load_runs(path):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    unknown_top = set(doc) - {"run"}
    if unknown_top:
        raise SystemExit(f"{path}: unknown top-level keys {sorted(unknown_top)}")
    runs = doc.get("run", [])
    for i, r in enumerate(runs):
        where = f"{path}: run {i + 1} ({r.get('id', '?')})"
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise SystemExit(f"{where}: missing {missing}")
        unknown = set(r) - set(REQUIRED) - set(OPTIONAL)
        if unknown:
            raise SystemExit(f"{where}: unknown keys {sorted(unknown)}")
        if r["outcome"] not in ("ran", "oom"):
            raise SystemExit(f"{where}: outcome must be \"ran\" or \"oom\" (got {r['outcome']!r})")
        if r["outcome"] == "ran" and "tokens_per_s_per_chip" not in r:
            raise SystemExit(f"{where}: a run that ran needs tokens_per_s_per_chip")
    return runs


def plan(build, run, tmp):
    cmd = [os.path.join(build, "sharding", "fsdp-plan"), "--model", run["model"], "--nodes", str(run["nodes"]),
           "--chips-per-node", str(run["chips_per_node"]), "--micro-batch", str(run["micro_batch"]),
           "--seq-len", str(run["seq_len"]), "--ac", run["ac"], "--headroom", "0", "--json"]
    overrides = []
    if "network_gb_per_s" in run:
        overrides.append(f"inter_gb_per_s = {run['network_gb_per_s']}")
    if "memory_gib" in run:
        overrides.append(f"memory_gib = {run['memory_gib']}")
    if overrides:
        chip_file = os.path.join(tmp, run["id"] + ".toml")
        with open(chip_file, "w") as f:
            f.write(f"[chip]\nbase = \"{run['chip']}\"\nname = \"{run['chip']}-{run['id']}\"\n" + "\n".join(overrides) + "\n")
        cmd += ["--chip-file", chip_file]
    else:
        cmd += ["--chip", run["chip"]]
    for key, flag in (("shard", "--shard"), ("replicate", "--replicate"), ("reduce_dtype", "--reduce-dtype"),
                      ("loss", "--loss")):
        if key in run:
            cmd += [flag, str(run[key])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 3):  # 3: planned, does not fit
        raise SystemExit(f"fsdp-plan failed for {run['id']} (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


def pct(predicted, published):
    return f"{(predicted / published - 1) * 100:+.0f}%"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", default=os.path.join(here, "public_fsdp_runs.toml"))
    ap.add_argument("--check", action="store_true", help="exit 1 when a run's fit or OOM is predicted wrongly")
    args = ap.parse_args()

    runs = load_runs(args.runs)
    wrong = []
    rows = []
    errors = {"no compile": [], "compile": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in runs:
            p = plan(args.build, r, tmp)
            world = int(p["mesh"]["world_size"])
            mem = p["memory"]
            peak_gib = int(mem["peak"]) / 2**30
            cap_gib = int(mem["capacity"]) / 2**30
            fits = bool(mem["fits"])
            tps = p["time"]["tokens_per_s"] / world
            mfu = p["time"]["mfu"]
            setup = f"{world} x {r['chip']}" + (f", HSDP {r['shard']} x {r['replicate']}" if "shard" in r else "")
            setup += f", mb {r['micro_batch']} x {r['seq_len']}, AC {r['ac']}"
            if r.get("reduce_dtype"):
                setup += f", reduce {r['reduce_dtype']}"
            if r.get("compile"):
                setup += ", compile"
            if r["outcome"] == "ran":
                pub = r["tokens_per_s_per_chip"]
                err = pct(tps, pub)
                errors["compile" if r.get("compile") else "no compile"].append(tps / pub - 1)
                pub_mfu = f"{r['mfu'] * 100:.1f}%" if "mfu" in r else "-"
                pub_mem = f"{r['memory_gib_published']:.1f}" if "memory_gib_published" in r else "-"
                verdict = "fits" if fits else "**does not fit: wrong**"
                if not fits:
                    wrong.append(f"{r['id']}: ran in public, predicted not to fit ({peak_gib:.1f} of {cap_gib:.1f} GiB)")
                rows.append(f"| {r['id']} | {r['model']} | {setup} | {pub:,} | {tps:,.0f} | {err} | {pub_mfu} | "
                            f"{mfu * 100:.1f}% | {pub_mem} | {peak_gib:.1f} of {cap_gib:.1f} | ran; {verdict} |")
            else:
                verdict = "does not fit" if not fits else "**fits: wrong**"
                if fits:
                    wrong.append(f"{r['id']}: ran out of memory in public, predicted to fit ({peak_gib:.1f} of {cap_gib:.1f} GiB)")
                rows.append(f"| {r['id']} | {r['model']} | {setup} | OOM | - | - | - | - | - | "
                            f"{peak_gib:.1f} of {cap_gib:.1f} | OOM; {verdict} |")

    print("| run | model | setup | published tok/s/chip | predicted | error | published MFU | predicted MFU | "
          "published peak GiB (reserved) | predicted peak GiB of capacity | outcome; prediction |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print()
    for kind, errs in errors.items():
        if errs:
            errs = sorted(errs)
            median = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
            print(f"tokens/s, {kind} ({len(errs)} runs): median error {median * 100:+.0f}%, "
                  f"range {errs[0] * 100:+.0f}% to {errs[-1] * 100:+.0f}%")
    for w in wrong:
        print("wrong:", w)
    n_oom = sum(r["outcome"] == "oom" for r in runs)
    print(f"fit predictions: {len(runs) - len(wrong)} of {len(runs)} right ({n_oom} published OOM runs)")
    if args.check and wrong:
        sys.exit(1)


if __name__ == "__main__":
    main()
