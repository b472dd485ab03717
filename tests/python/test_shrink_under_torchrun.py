"""The torchft-style recovery under torchrun: N ranks train, rank V SIGKILLs itself mid-step
(shrink_job.py); every survivor's all_reduce raises naming rank V and the op, and the survivors shrink
the group to themselves, get every collective right on it and finish training with the losses and
parameters of the run nobody killed. torchrun itself still exits
non-zero (a worker died): the survivors' lines are the verdict.

    test_shrink_under_torchrun.py N V
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    n, victim = int(sys.argv[1]), int(sys.argv[2])
    env = dict(os.environ, PYTHONPATH=os.environ["FSDP_PYTHON_PATH"])
    # --monitor_interval 1: torchrun notices the dead worker within a second and stops the others, which
    # ignore its SIGTERM until they finished (shrink_job.py), so the run lasts as long as the job.
    p = subprocess.run([os.path.join(HERE, "torchrun.sh"), sys.executable, str(n), "--monitor_interval", "1",
                        os.path.join(HERE, "shrink_job.py"), str(victim)], env=env, capture_output=True, text=True,
                       timeout=120)
    out = p.stdout
    survivors = [r for r in range(n) if r != victim]
    raised = {int(r): text for r, text in re.findall(r"rank (\d+) raised after [\d.]+ s: (.*)", out)}
    assert sorted(raised) == survivors, f"survivors that raised: {sorted(raised)}\n{out}\n{p.stderr[-3000:]}"
    for r, text in raised.items():
        assert re.search(rf"\brank {victim}\b", text), f"rank {r} did not name the killed rank {victim}: {text}"
        assert "allreduce" in text and "all_reduce" in text, f"rank {r} did not name the op: {text}"
    shrunk = sorted(int(r) for r in re.findall(r"rank (\d+) is rank \d+ of \d+ after the shrink: .* ok", out))
    assert shrunk == survivors, f"survivors that passed on the shrunk group: {shrunk}\n{out}\n{p.stderr[-3000:]}"
    finished = sorted(int(r) for r in re.findall(rf"rank (\d+) finished \d+ steps on {n - 1} ranks: its losses and parameters equal the uninterrupted", out))
    assert finished == survivors, f"survivors that finished training: {finished}\n{out}\n{p.stderr[-3000:]}"
    assert p.returncode != 0, f"torchrun exited 0 although rank {victim} was killed"
    print("\n".join(f"rank {r} raised: {text}" for r, text in sorted(raised.items())), flush=True)
    print("\n".join(line for line in out.splitlines() if "after the shrink" in line or "finished" in line), flush=True)


if __name__ == "__main__":
    main()
