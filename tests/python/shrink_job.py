"""One rank of a torchrun job (tests/python/test_shrink_under_torchrun.py): N ranks over backend "fsdp"
with a 2 s timeout all-reduce once, then rank VICTIM SIGKILLs itself. The survivors' next all_reduce
raises naming it (rank 0 through the blocking call, the others through async_op=True and wait()), they
learn who is gone from lost_peer(), shrink the default group with SHRINK_ABORT and check all_reduce,
all_gather, broadcast, reduce_scatter and barrier on the shrunk group against what each computes.
Each survivor prints one line: "rank R raised ...: TEXT" and "rank R is rank r of m ...: ok"."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import fsdp_runtime

VICTIM = int(sys.argv[1])
COUNT = 1 << 14  # elements: past the small-message path, a few shm chunks


def values(rank, count=COUNT):
    """Unique to rank and index, exact in float32: a block one slot off fails."""
    return torch.arange(count, dtype=torch.float32) % 1024 + 1000 * (rank + 1)


def check_shrunk(group, me, m):
    t = values(me)
    dist.all_reduce(t, group=group)
    assert torch.equal(t, sum(values(r) for r in range(m))), "all_reduce on the shrunk group"
    gathered = [torch.empty(COUNT) for _ in range(m)]
    dist.all_gather(gathered, values(me), group=group)
    for r in range(m):
        assert torch.equal(gathered[r], values(r)), f"all_gather block {r}"
    root = m - 1
    t = values(me)
    dist.broadcast(t, src=root, group=group)  # the shrunk default group: global ranks are its ranks
    assert torch.equal(t, values(root)), "broadcast from the last rank"
    out = torch.empty(COUNT)
    dist.reduce_scatter(out, [values(me, COUNT * m)[i * COUNT:(i + 1) * COUNT] for i in range(m)], group=group)
    assert torch.equal(out, sum(values(r, COUNT * m)[me * COUNT:(me + 1) * COUNT] for r in range(m))), "reduce_scatter"
    dist.barrier(group=group)


def main():
    # torchrun stops the other workers (SIGTERM, then SIGKILL 30 s later) as soon as it sees the victim
    # dead; the survivors finish their checks first, whenever its look comes.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    dist.init_process_group("fsdp", timeout=datetime.timedelta(seconds=2))
    rank, n = dist.get_rank(), dist.get_world_size()
    world = dist.distributed_c10d._get_default_group()
    t = values(rank)
    dist.all_reduce(t)
    assert torch.equal(t, sum(values(r) for r in range(n)))
    if rank == VICTIM:
        os.kill(os.getpid(), signal.SIGKILL)  # mid-job, as an OOM-killed rank would
    start = time.monotonic()
    try:
        for _ in range(100):
            if rank == 0:
                dist.all_reduce(t)
            else:
                dist.all_reduce(t, async_op=True).wait()
        raise AssertionError(f"rank {rank}: all_reduce kept working although rank {VICTIM} was killed")
    except RuntimeError as e:
        print(f"rank {rank} raised after {time.monotonic() - start:.1f} s: {e}", flush=True)
    lost = world.lost_peer()
    assert lost is not None and lost[0] == VICTIM, f"rank {rank}: lost_peer() says {lost}"
    start = time.monotonic()
    shrunk = fsdp_runtime.shrink_group([lost[0]], shrink_flags=fsdp_runtime.SHRINK_ABORT)
    me, m = dist.get_rank(shrunk), dist.get_world_size(shrunk)
    assert (me, m) == (rank - (rank > VICTIM), n - 1), (rank, me, m)
    assert dist.get_rank() == me and dist.get_world_size() == m, "the shrunk group is the new default"
    check_shrunk(shrunk, me, m)
    print(f"rank {rank} is rank {me} of {m} after the shrink: all_reduce, all_gather, broadcast, reduce_scatter "
          f"and barrier ok in {time.monotonic() - start:.2f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
