#!/usr/bin/env python3
"""Compares fsdp-train runs by their metrics.jsonl: prints a markdown table against the first run
(final loss, mean of the last 20 steps, their relative differences) and writes the loss curves as one SVG.

  scripts/compare_loss_curves.py out.svg bf16=/tmp/a/metrics.jsonl mxfp8=/tmp/b/metrics.jsonl
"""
import json
import sys


def losses(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["loss"] for r in records if "event" not in r]  # step lines, not checkpoint or recovery events


def svg(runs, path, width=720, height=360, pad=40):
    steps = max(len(l) for _, l in runs)
    lo = min(min(l) for _, l in runs)
    hi = max(max(l) for _, l in runs)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    x = lambda i: pad + (width - 2 * pad) * i / max(steps - 1, 1)
    y = lambda v: height - pad - (height - 2 * pad) * (v - lo) / max(hi - lo, 1e-12)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{pad}" y="20">loss by step ({lo:.2f} to {hi:.2f})</text>']
    for k, (name, l) in enumerate(runs):
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(l))
        c = colors[k % len(colors)]
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1" points="{pts}"/>')
        out.append(f'<text x="{width - pad - 120}" y="{pad + 16 * k}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    runs = [(a.split("=", 1)[0], losses(a.split("=", 1)[1])) for a in sys.argv[2:]]
    base_final, base_tail = runs[0][1][-1], sum(runs[0][1][-20:]) / 20
    print("| run | final loss | vs " + runs[0][0] + " | mean of last 20 steps | vs " + runs[0][0] + " |")
    print("|---|---|---|---|---|")
    for name, l in runs:
        tail = sum(l[-20:]) / 20
        print(f"| {name} | {l[-1]:.4f} | {100 * (l[-1] - base_final) / base_final:+.2f}% | {tail:.4f} | "
              f"{100 * (tail - base_tail) / base_tail:+.2f}% |")
    svg(runs, sys.argv[1])


if __name__ == "__main__":
    main()
