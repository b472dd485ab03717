#!/usr/bin/env python3
"""A real run's report (train/run_report.h) opened in headless Chromium: the page loads without a
console error and the browser's SVG engine draws every series with one point per step that has a value,
and every checkpoint on every chart.

    report_in_chromium.py WORKDIR FSDP_RUN FSDP_TRAIN CONFIG

Exit 77 (ctest's SKIP_RETURN_CODE) when no Chromium is installed (Debian's `chromium`, scripts/install-deps.sh).
The report itself holds no script; the copy opened here gets a few lines after the page that write what
the browser computed (each polyline's point count in the SVG DOM and its drawn width) into attributes
that --dump-dom prints.
"""
import json
import os
import re
import shutil
import subprocess
import sys

PROBE = """<script>
for (const p of document.querySelectorAll("polyline[data-series]")) {
  p.setAttribute("data-drawn", p.points.numberOfItems + " " + p.getBBox().width.toFixed(1));
}
document.body.setAttribute("data-probed", "yes");
</script>
"""

# Step records that have each series' value (what the generator draws: finite numbers only).
FIELDS = {"loss": "loss", "grad_norm": "grad_norm", "tps": "tps", "memory": "memory_bytes",
          "planned_memory": "planned_memory_bytes", "comm_hidden": "comm_hidden"}


def fail(why):
    sys.exit(f"report_in_chromium: {why}")


def main():
    work, fsdp_run, fsdp_train, config = sys.argv[1:5]
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("report_in_chromium: SKIPPED: no chromium (apt-get install chromium)")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    steps = 4
    run = subprocess.run(
        [fsdp_run, "--nproc", "2", "--", fsdp_train, "--config", config, "--model.dim", "16", "--model.n_layers", "1",
         "--model.n_heads", "2", "--model.n_kv_heads", "1", "--model.multiple_of", "16", "--training.steps", str(steps),
         "--training.local_batch_size", "2", "--training.seq_len", "16", "--checkpoint.enable", "true",
         "--checkpoint.interval", "2", "--checkpoint.keep_latest_k", "0", "--metrics.file", "metrics.jsonl",
         "--job.dump_folder", work], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        fail(f"fsdp-train exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
    report = os.path.join(work, "report.html")
    if f"report: {report}" not in run.stdout:
        fail(f"fsdp-train did not name its report:\n{run.stdout}")

    with open(os.path.join(work, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    records = [r for r in lines if "event" not in r]
    checkpoints = [r for r in lines if r.get("event") == "checkpoint"]
    if len(records) != steps or len(checkpoints) != 2:
        fail(f"metrics.jsonl holds {len(records)} steps and {len(checkpoints)} checkpoints, expected {steps} and 2")
    want = {s: sum(1 for r in records if isinstance(r.get(k), (int, float)) and not (k == "loss" and r["skipped"])
                   and (k != "planned_memory_bytes" or r[k] > 0))
            for s, k in FIELDS.items()}
    if want["comm_hidden"] == 0:
        fail("two ranks recorded no communication (comm_hidden null on every step)")

    with open(report) as f:
        page = f.read()
    if "<script" in page:
        fail("the report holds a script")
    probe = os.path.join(work, "probe.html")
    with open(probe, "w") as f:
        f.write(page.replace("</body>", PROBE + "</body>"))
    shot = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={os.path.join(work, 'chromium-profile')}", "--dump-dom", "file://" + probe],
        capture_output=True, text=True, timeout=60)
    if shot.returncode != 0:
        fail(f"chromium exited {shot.returncode}:\n{shot.stderr[-3000:]}")
    console = [line for line in shot.stderr.splitlines() if ":CONSOLE" in line]
    if console:
        fail("console messages while loading the page:\n" + "\n".join(console))
    dom = shot.stdout
    if 'data-probed="yes"' not in dom:
        fail("the page did not finish loading (no probe mark in the dumped DOM)")

    drawn = {m.group(1): (int(m.group(2)), float(m.group(3)))
             for m in re.finditer(r'<polyline data-series="(\w+)"[^>]*data-drawn="(\d+) ([\d.]+)"', dom)}
    for series, points in want.items():
        count = len(re.findall(f'<polyline data-series="{series}"', dom))
        if count != 1:
            fail(f"series {series}: {count} polylines in the page, expected 1")
        got, width = drawn[series]
        if got != points or width <= 0:
            fail(f"series {series}: the browser drew {got} points over {width} px, expected {points} points")
    marks = len(re.findall(r'data-event="checkpoint"', dom))
    if marks != 2 * 5:
        fail(f"{marks} checkpoint marks, expected 2 on each of the 5 charts")
    print(f"report_in_chromium: {report}: {len(want)} series drawn ({want}), {marks} checkpoint marks, no console message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
