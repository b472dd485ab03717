"""A job whose group has a short timeout (2 s, so that a lost peer fails the test quickly) must not
fail before it started: its ranks import torch at different speeds (seconds apart on a loaded machine),
and the group's start-up waits on the others for that same timeout. So every rank first waits here for
all the others, on the job's own store with a start-up bound of STARTUP_S, then creates the group
over that store:

    start_together(store, rank, n)     # store: a c10d.Store all ranks share
    dist.init_process_group("fsdp", store=store, rank=rank, world_size=n, timeout=short)
"""
import datetime
import os
import time

import torch.distributed as dist

STARTUP_S = 90  # under ctest's 120 s per test
KEY = "tests/started"


def start_together(store, rank, n):
    store.set_timeout(datetime.timedelta(seconds=STARTUP_S))
    store.add(KEY, 1)
    deadline = time.monotonic() + STARTUP_S
    while (arrived := store.add(KEY, 0)) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank}: {arrived} of {n} ranks started within {STARTUP_S} s")
        time.sleep(0.01)


def init_under_torchrun(timeout_s):
    """init_process_group("fsdp") under torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT) once every rank
    started: rank 0 serves the store on torchrun's MASTER_PORT, as torch's env:// would."""
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), n, rank == 0,
                          datetime.timedelta(seconds=STARTUP_S))
    start_together(store, rank, n)
    dist.init_process_group("fsdp", store=store, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout_s))
