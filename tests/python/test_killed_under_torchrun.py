"""A rank killed mid-step under torchrun: every survivor raises a Python exception naming the lost
peer within the group's timeout plus a few seconds and exits non-zero, and so does torchrun.

    test_killed_under_torchrun.py N
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 2   # killed_job.py's process-group timeout
SLACK_S = 5     # what "a few seconds" allows on a loaded 2-core machine


def main():
    n = int(sys.argv[1])
    env = dict(os.environ, PYTHONPATH=os.environ["FSDP_PYTHON_PATH"])
    start = time.monotonic()
    # --monitor_interval 1: torchrun notices the dead worker within a second and stops the others, which
    # ignore its SIGTERM (killed_job.py), so the survivors still raise on their own: this checks the
    # runtime, not torchrun's agent.
    p = subprocess.run([os.path.join(HERE, "torchrun.sh"), sys.executable, str(n), "--monitor_interval", "1",
                        os.path.join(HERE, "killed_job.py")], env=env, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - start
    out = p.stdout
    assert p.returncode != 0, f"torchrun exited 0 although rank {n - 1} was killed:\n{out}"
    raised = re.findall(r"rank (\d+) raised in step 2 after ([\d.]+) s: (.*)", out)
    survivors = sorted(int(r) for r, _, _ in raised)
    assert survivors == list(range(n - 1)), f"survivors that raised: {survivors}\n{out}\n{p.stderr[-3000:]}"
    for r, seconds, text in raised:
        assert float(seconds) <= TIMEOUT_S + SLACK_S, (r, seconds, text)
        assert f"rank {n - 1}" in text, f"rank {r} did not name the killed rank {n - 1}: {text}"
    print(f"{n - 1} survivor(s) raised naming rank {n - 1} after "
          f"{', '.join(s for _, s, _ in raised)} s; torchrun exited {p.returncode} after {wall:.1f} s", flush=True)
    print(raised[0][2], flush=True)


if __name__ == "__main__":
    main()
