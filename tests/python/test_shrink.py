"""fsdp_runtime.shrink_group without a failure: bad arguments raise naming the entry and change nothing;
a live rank is excluded (SHRINK_DEFAULT) from the default group and from a subgroup, the survivors'
collectives on the shrunk group are right, and every group still shuts down in order (the excluded
rank's teardown meets the survivors' once they dropped theirs); SHRINK_ABORT fails what the parent
group has in flight."""
import torch
import torch.distributed as dist

from refusals import refused
from spawn import run_ranks


def values(rank, count=1000):
    return torch.arange(count, dtype=torch.float32) + 10000 * (rank + 1)


def check_collectives(group, me, m, global_of):
    """all_reduce, all_gather and broadcast (src is a global rank, as torch 1.13 wants) on `group`."""
    t = values(me)
    dist.all_reduce(t, group=group)
    assert torch.equal(t, sum(values(r) for r in range(m)))
    gathered = [torch.empty(1000) for _ in range(m)]
    dist.all_gather(gathered, values(me), group=group)
    assert all(torch.equal(gathered[r], values(r)) for r in range(m))
    t = values(me)
    dist.broadcast(t, src=global_of[m - 1], group=group)
    assert torch.equal(t, values(m - 1))
    dist.barrier(group=group)


def bad_arguments(rank, n):
    import fsdp_runtime  # in the ranks, which have the build tree on their path (spawn.py)

    shrink = fsdp_runtime.shrink_group
    refused(lambda: shrink([(rank + 1) % n, n]), f"excluded rank {n} (entry 1) is outside [0, {n})", ValueError)
    refused(lambda: shrink([-1]), "excluded rank -1 (entry 0) is outside", ValueError)
    other = (rank + 1) % n
    refused(lambda: shrink([other, other]), f"excluded rank {other} (entry 1) is listed twice", ValueError)
    refused(lambda: shrink(list(range(n))), "every rank is excluded", ValueError)
    refused(lambda: shrink([rank]), "the calling rank is excluded", ValueError)
    refused(lambda: shrink([]), "ranks_to_exclude is empty", ValueError)
    refused(lambda: shrink([other], shrink_flags=2), "shrink_flags 2", ValueError)
    refused(lambda: shrink(["1"]), "entry 0 ('1') is not an int", TypeError)
    refused(lambda: shrink([other], group=object()), "only backend \"fsdp\" groups shrink", TypeError)
    # Nothing changed: the default group is still the whole job and works.
    assert dist.get_world_size() == n and dist.get_rank() == rank
    check_collectives(None, rank, n, list(range(n)))


def exclude_live_rank(rank, n):
    """Rank 1 stays out of the shrink (alive); the others shrink the default group without it."""
    import fsdp_runtime

    bad_arguments(rank, n)
    if rank == 1:
        return
    world = dist.distributed_c10d._get_default_group()
    shrunk = fsdp_runtime.shrink_group([1])
    me, m = dist.get_rank(), dist.get_world_size()
    assert (me, m) == (rank - (rank > 1), n - 1) and dist.get_rank(shrunk) == me, (rank, me, m)
    check_collectives(shrunk, me, m, list(range(m)))
    # The old default group is no longer torch's; new groups come from the shrunk one.
    refused(lambda: fsdp_runtime.shrink_group([1], group=world), "not one of torch.distributed's", ValueError)
    sub = dist.new_group(list(range(m)))
    check_collectives(sub, me, m, list(range(m)))


def exclude_from_subgroup(rank, n):
    """A subgroup of ranks 1..n-1 loses its rank 0 (global 1); global ranks 2..n-1 go on, renumbered, and
    broadcast names its root by global rank as for any subgroup."""
    import fsdp_runtime

    sub = dist.new_group(list(range(1, n)))
    if rank < 2:
        return
    shrunk = fsdp_runtime.shrink_group([0], group=sub)
    me, m = dist.get_rank(shrunk), dist.get_world_size(shrunk)
    assert (me, m) == (rank - 2, n - 2), (rank, me, m)
    assert dist.get_world_size() == n, "a subgroup's shrink leaves the default group alone"
    check_collectives(shrunk, me, m, list(range(2, n)))


def abort_in_flight(rank, n):
    """SHRINK_ABORT fails what the parent has in flight: an all_reduce rank 1 never joins raises at once
    (not after the 30 s group timeout) naming the abort, and the shrunk group works. Rank 1 stays alive
    until the survivors are done (so their all_reduce cannot fail on its exit instead), then aborts its
    group, as torchft's pg.abort(), and leaves without waiting on them."""
    import fsdp_runtime

    world = dist.distributed_c10d._get_default_group()
    store = dist.distributed_c10d._get_default_store()
    check_collectives(world, rank, n, list(range(n)))  # past the first collective's set-up exchange
    if rank == 1:
        store.wait(["abort_in_flight/done"])
        world.abort()
        return
    work = dist.all_reduce(values(rank), async_op=True)
    shrunk = fsdp_runtime.shrink_group([1], shrink_flags=fsdp_runtime.SHRINK_ABORT)
    refused(work.wait, "aborted by shrink_group(SHRINK_ABORT)", RuntimeError)
    refused(lambda: dist.all_reduce(values(rank), group=world), "SHRINK_ABORT", RuntimeError)  # stays broken
    check_collectives(shrunk, dist.get_rank(), n - 1, list(range(n - 1)))
    if store.add("abort_in_flight/survivors", 1) == n - 1:
        store.set("abort_in_flight/done", "1")


if __name__ == "__main__":
    run_ranks(exclude_live_rank, 3)
    print("bad arguments raise naming the entry; a live rank excluded from the default group: passed at 3 ranks",
          flush=True)
    run_ranks(exclude_from_subgroup, 4)
    print("a live rank excluded from a subgroup: passed at 4 ranks", flush=True)
    run_ranks(abort_in_flight, 3)
    print("SHRINK_ABORT fails the parent's operation in flight: passed at 3 ranks", flush=True)
