"""A collective a peer never joins, or a peer that died, fails (within the group's timeout) with a
Python RuntimeError that carries the runtime's error text: this rank, the peer, the op. A rank that
starts later than the group's timeout still joins when FSDP_RENDEZVOUS_TIMEOUT_SEC bounds the start-up."""
import datetime
import os
import sys
import signal
import time

import torch
import torch.distributed as dist

import shutil
import tempfile

import torch.multiprocessing as mp

from spawn import _rank_main, run_ranks
from start_together import STARTUP_S

TIMEOUT_S = 2


def stalled_peer(rank, n):
    if rank == 0:
        t = torch.ones(1024)
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            text = str(e)
            print(f"rank 0 raised after {time.monotonic() - start:.1f} s: {text}", flush=True)
            assert "fsdp backend: allreduce" in text, text
            assert "rank 0" in text and "peer 1" in text, text
            dist.distributed_c10d._get_default_store().set("gave up", "1")
            return
        raise AssertionError("all_reduce returned although rank 1 never joined")
    # Never joins; leaves once rank 0 gave up (its shutdown must not meet rank 0's all_reduce, however
    # slowly rank 0 runs): the store's start-up bound, not the group's timeout.
    dist.distributed_c10d._get_default_store().wait(["gave up"])


def killed_peer(rank, n):
    t = torch.ones(1 << 16)
    dist.all_reduce(t)  # the job works
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)  # dies mid-step, as a crashed or OOM-killed rank would
    start = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(t)
    except RuntimeError as e:
        text = str(e)
        print(f"rank {rank} raised after {time.monotonic() - start:.1f} s: {text}", flush=True)
        # The killed rank is named (as the peer, or as also lost when a survivor that left first was seen first).
        assert f"of rank {n - 1} exited" in text, text
        os._exit(0)  # the survivors leave at once: their test passed
    raise AssertionError("all_reduce kept working although a peer was killed")


def late_rank(rank, n, store_path):
    sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
    import fsdp_runtime  # noqa: F401  registers the backend

    if rank == n - 1:
        time.sleep(2 * TIMEOUT_S)  # starts after the others' group timeout ran out
    dist.init_process_group("fsdp", init_method="file://" + store_path, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(n))), t
    dist.destroy_process_group()


if __name__ == "__main__":
    folder = tempfile.mkdtemp(prefix="fsdp-torch-test-")
    os.environ["FSDP_RENDEZVOUS_TIMEOUT_SEC"] = str(STARTUP_S)
    try:
        mp.spawn(late_rank, args=(2, folder + "/store"), nprocs=2)
    finally:
        del os.environ["FSDP_RENDEZVOUS_TIMEOUT_SEC"]
        shutil.rmtree(folder, ignore_errors=True)
    print(f"a rank {2 * TIMEOUT_S} s late joins a group of timeout {TIMEOUT_S} s within FSDP_RENDEZVOUS_TIMEOUT_SEC",
          flush=True)

    run_ranks(stalled_peer, 2, timeout_s=TIMEOUT_S)
    print("a stalled peer makes the collective raise naming it", flush=True)

    # torch.multiprocessing.spawn would stop the survivors as soon as one rank dies: plain processes.
    n, folder = 3, tempfile.mkdtemp(prefix="fsdp-torch-test-")
    try:
        ctx = mp.get_context("spawn")
        ranks = [ctx.Process(target=_rank_main, args=(r, n, folder + "/store", killed_peer, TIMEOUT_S, ()))
                 for r in range(n)]
        for p in ranks:
            p.start()
        # One bound for the whole job, start-up (torch's import, seconds under load) included.
        deadline = time.monotonic() + STARTUP_S
        for p in ranks:
            p.join(timeout=max(deadline - time.monotonic(), 0))
        codes = [p.exitcode for p in ranks]
    finally:
        for p in ranks:
            if p.is_alive():
                p.kill()
        shutil.rmtree(folder, ignore_errors=True)
    assert codes == [0] * (n - 1) + [-9], f"exit codes {codes}: every survivor should have raised naming the peer"
    print("a killed peer makes the survivors' collective raise naming it", flush=True)
