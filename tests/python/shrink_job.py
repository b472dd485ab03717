"""One rank of a torchrun job (tests/python/test_shrink_under_torchrun.py): N ranks over backend "fsdp"
with a 2 s timeout train replicas of a small model in docs/pytorch.md's torchft-style loop; in step
KILL_AT_STEP rank VICTIM SIGKILLs itself between two gradient all_reduces. The survivors' all_reduce
raises naming it (rank 0 through the blocking call, the others through async_op=True and wait()), they
learn who is gone from lost_peer(), shrink the default group with SHRINK_ABORT, check all_reduce,
all_gather, broadcast, reduce_scatter and barrier on it against what each computes, heal and finish
every step on the same global batch; their losses and parameters equal the run nobody killed (1e-5
relative). Each survivor prints "rank R raised ...: TEXT", "rank R is rank r of m after the shrink:
... ok" and "rank R finished S steps on m ranks: its losses and parameters equal the uninterrupted
run's".
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import fsdp_runtime
from start_together import init_under_torchrun

VICTIM = int(sys.argv[1])
STEPS, KILL_AT_STEP = 6, 3
GLOBAL_BATCH = 12  # samples per step: 3 per rank at 4 ranks, 4 at 3
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


def heal(step, model, optimizer):
    """docs/pytorch.md's: the survivors may be a step apart; all take the state of one that got furthest."""
    furthest = torch.tensor([step])
    dist.all_reduce(furthest, op=dist.ReduceOp.MAX)
    source = torch.tensor([dist.get_rank() if step == furthest.item() else dist.get_world_size()])
    dist.all_reduce(source, op=dist.ReduceOp.MIN)
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    for t in [p.data for p in model.parameters()] + state:
        dist.broadcast(t, src=int(source))
    return int(furthest)


def recover(rank, n, error, start):
    """What a survivor does when a collective raised: who is gone, shrink, check the new group."""
    print(f"rank {rank} raised after {time.monotonic() - start:.1f} s: {error}", flush=True)
    lost = dist.distributed_c10d._get_default_group().lost_peer()
    assert lost is not None and lost[0] == VICTIM, f"rank {rank}: lost_peer() says {lost}"
    start = time.monotonic()
    shrunk = fsdp_runtime.shrink_group([lost[0]], shrink_flags=fsdp_runtime.SHRINK_ABORT)
    me, m = dist.get_rank(shrunk), dist.get_world_size(shrunk)
    assert (me, m) == (rank - (rank > VICTIM), n - 1), (rank, me, m)
    assert dist.get_rank() == me and dist.get_world_size() == m, "the shrunk group is the new default"
    check_shrunk(shrunk, me, m)
    print(f"rank {rank} is rank {me} of {m} after the shrink: all_reduce, all_gather, broadcast, reduce_scatter "
          f"and barrier ok in {time.monotonic() - start:.2f} s", flush=True)


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    # SGD with momentum: linear in the gradients, so the recovered run's summation order (3 partial sums
    # instead of 4) moves the result by rounding only (Adam's first steps amplify it on tiny gradients).
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def shard(step, rank, m):
    """Rank `rank` of `m`'s share of step `step`'s global batch: the same samples at any world size."""
    x = torch.randn(GLOBAL_BATCH, 32, generator=torch.Generator().manual_seed(step))
    per = GLOBAL_BATCH // m
    return x[rank * per:(rank + 1) * per]


def uninterrupted():
    """The run nobody killed, on one process: its losses per step and final parameters."""
    model, optimizer = make_model()
    losses = []
    for step in range(STEPS):
        loss = model(shard(step, 0, 1)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, torch.cat([p.data.view(-1) for p in model.parameters()])


def main():
    # torchrun stops the other workers (SIGTERM, then SIGKILL 30 s later) as soon as it sees the victim
    # dead; the survivors finish first, whenever its look comes.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    init_under_torchrun(2)
    rank, n = dist.get_rank(), dist.get_world_size()
    model, optimizer = make_model()
    step, start, recovered, losses = 0, time.monotonic(), False, {}
    while step < STEPS:  # docs/pytorch.md's torchft-style loop
        try:
            loss = model(shard(step, dist.get_rank(), dist.get_world_size())).square().mean()
            loss.backward()
            start = time.monotonic()
            for i, p in enumerate(model.parameters()):
                if (step, i) == (KILL_AT_STEP, 1) and rank == VICTIM:
                    os.kill(os.getpid(), signal.SIGKILL)  # mid-step, as an OOM-killed rank would
                if rank == 0:
                    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
                else:  # the async path: the error comes from wait()
                    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, async_op=True).wait()
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
            optimizer.step()
            optimizer.zero_grad()
            losses[step] = global_loss.item()
            step += 1
        except RuntimeError as e:
            assert not recovered, f"rank {rank}: a second failure: {e}"
            recover(rank, n, e, start)
            recovered = True
            optimizer.zero_grad()
            step = heal(step, model, optimizer)
    assert recovered, f"rank {rank} never saw rank {VICTIM} go"
    flat = torch.cat([p.data.view(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(g, flat) for g in gathered), f"rank {rank}: the replicas differ"
    want_losses, want = uninterrupted()
    diff = ((flat - want).abs().max() / want.abs().max()).item()
    assert diff <= 1e-5, f"rank {rank}: parameters {diff:.2e} (relative) from the uninterrupted run's"
    for s, got in losses.items():
        assert abs(got - want_losses[s]) <= 1e-5 * abs(want_losses[s]), (rank, s, got, want_losses[s])
    print(f"rank {rank} finished {step} steps on {dist.get_world_size()} ranks: its losses and parameters equal "
          f"the uninterrupted run's (parameters {diff:.1e} relative)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
