#!/usr/bin/env python3
"""python3 -m fsdp_runtime.train with a sampling profiler on rank 0, for bench/trainer_vs_fsdp_train.py:

  fsdp-run --nproc 2 -- /usr/bin/python3 bench/trainer_sampled.py OUT.json --config ... (the trainer's arguments)

Every FSDP_BENCH_SAMPLE_MS (default 2) a thread reads the training thread's stack and adds the time since
its last look to the phase the step is in: the statement of fsdp_runtime.train.train_step on the stack
(the model call and the loss: forward; loss.backward(): backward; clip_grad_norm_: clip; opt.step and
zero_grad: optimizer; loading the batch, the loss all-reduce: other). A forward or backward sample whose
innermost frame outside torch's own files is in fully_shard's modules (fully_shard.py, _fsdp_*.py) counts
as "hooks": fully_shard's hooks and whatever they wait on (all-gathers, reduce-scatters). Nothing in the
package is edited or wrapped but train_step, to know the step number (step 1, warm-up, is left out as the
tokens/s leave it out). OUT.json: {"seconds": {phase: s}, "steps": n, "step_seconds": s} of rank 0.
"""
import collections
import inspect
import json
import os
import sys
import threading
import time

import fsdp_runtime  # PYTHONPATH names the build's package (build/python)

fsdp_runtime.use_best_blas_core()  # OPENBLAS_CORETYPE where the trainer would set it (restarts this script)

import torch  # noqa: E402
import fsdp_runtime.train as train  # noqa: E402

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PACKAGE_DIR = os.path.dirname(fsdp_runtime.__file__)
_STEP_CODE = train.train_step.__code__


def _phases_by_line():
    """{line number of train_step: phase}, read from its source so an edit of train.py keeps the map."""
    lines, first = inspect.getsourcelines(train.train_step)
    phases = {}
    for i, text in enumerate(lines):
        for needle, phase in (("backward()", "backward"), ("cross_entropy", "forward"), ("model(", "forward"),
                              ("clip_grad_norm_", "clip"), ("opt.step", "optimizer"), ("zero_grad", "optimizer")):
            if needle in text:
                phases[first + i] = phase
                break
    return phases


def _is_hook_file(path):
    name = os.path.basename(path)
    return os.path.dirname(path) == _PACKAGE_DIR and (name == "fully_shard.py" or name.startswith("_fsdp_"))


def _classify(frame, phases):
    innermost = None
    while frame is not None:
        path = frame.f_code.co_filename
        if innermost is None and not path.startswith(_TORCH_DIR):
            innermost = path
        if frame.f_code is _STEP_CODE:
            phase = phases.get(frame.f_lineno, "other")
            return "hooks" if phase in ("forward", "backward") and _is_hook_file(innermost) else phase
        frame = frame.f_back
    return None  # outside the step (the loop's logging, start-up)


def main():
    out, argv = sys.argv[1], sys.argv[2:]
    if os.environ.get("RANK", "0") != "0":
        return train.main(argv)
    phases, period = _phases_by_line(), float(os.environ.get("FSDP_BENCH_SAMPLE_MS", "2")) / 1e3
    seconds, state = collections.defaultdict(float), {"step": 0, "steps": 0, "step_seconds": 0.0}
    step_fn, main_id, stop = train.train_step, threading.get_ident(), threading.Event()

    def timed_step(*args):
        state["step"] = args[-1]
        start = time.perf_counter()
        try:
            return step_fn(*args)
        finally:
            if state["step"] > 1:
                state["steps"] += 1
                state["step_seconds"] += time.perf_counter() - start

    def sample():
        last = time.perf_counter()
        while not stop.wait(period):
            now = time.perf_counter()
            frame = sys._current_frames().get(main_id)
            phase = _classify(frame, phases) if state["step"] > 1 and frame is not None else None
            if phase is not None:
                seconds[phase] += now - last
            last = now

    train.train_step = timed_step  # _run looks it up at each call
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        return train.main(argv)
    finally:
        stop.set()
        sampler.join()
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "steps": state["steps"], "step_seconds": state["step_seconds"]}, f)


if __name__ == "__main__":
    sys.exit(main())
