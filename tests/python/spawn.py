"""Runs a test function on N processes (torch.multiprocessing) joined through a FileStore in a fresh
temporary folder: no ports, nothing left behind. Each rank imports fsdp_runtime from the build tree
(FSDP_PYTHON_PATH, set by ctest) and gets the default group over backend "fsdp"."""
import datetime
import os
import shutil
import sys
import tempfile

import torch.distributed as dist
import torch.multiprocessing as mp

from start_together import start_together


def _rank_main(rank, n, store_path, fn, timeout_s, args):
    sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
    import fsdp_runtime  # noqa: F401  registers the backend

    # Every rank arrives first (start_together.py): a short group timeout must not fail the start-up.
    store = dist.FileStore(store_path, n)
    start_together(store, rank, n)
    dist.init_process_group("fsdp", store=store, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        fn(rank, n, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(fn, n, timeout_s=30, args=()):
    folder = tempfile.mkdtemp(prefix="fsdp-torch-test-")
    try:
        mp.spawn(_rank_main, args=(n, os.path.join(folder, "store"), fn, timeout_s, args), nprocs=n)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def world_sizes():
    """1-4, or what argv names: `test_x.py 2 3`."""
    return [int(a) for a in sys.argv[1:]] or [1, 2, 3, 4]


def _in_turn(rank, n, checks):
    for check in checks:
        check(rank, n)


def main(*checks):
    """Runs `checks` in turn on the same ranks, for every world size world_sizes() names."""
    for n in world_sizes():
        run_ranks(_in_turn, n, args=(checks,))
        print(f"{', '.join(c.__name__ for c in checks)}: passed at {n} ranks", flush=True)
