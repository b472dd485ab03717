"""A collective a peer never joins fails within the group's timeout with a Python RuntimeError that
carries the runtime's error text: this rank, the peer it waited for, the op."""
import time

import torch
import torch.distributed as dist

from spawn import run_ranks

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
            return
        raise AssertionError("all_reduce returned although rank 1 never joined")
    time.sleep(2 * TIMEOUT_S + 1)  # never joins; leaves after rank 0 gave up


if __name__ == "__main__":
    run_ranks(stalled_peer, 2, timeout_s=TIMEOUT_S)
    print("a stalled peer makes the collective raise naming it", flush=True)
