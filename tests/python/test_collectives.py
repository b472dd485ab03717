"""Every collective of backend "fsdp" through torch.distributed, against a naive reference computed
from every rank's known inputs and, where gloo has the op, against gloo's result in the same run."""
import sys

import torch
import torch.distributed as dist

from refusals import refused
from spawn import main

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64]
COUNT = 13  # odd, so blocks do not line up with anything


def inputs(rank, dtype, count=COUNT, salt=0):
    """Values unique to rank and index (a block landing one slot off fails), small enough for every dtype."""
    v = (torch.arange(count) * 3 + rank * 7 + salt) % 11 + 1
    return v.to(dtype)


def reference(op, tensors):
    stacked = torch.stack([t.double() for t in tensors])
    if op == dist.ReduceOp.SUM:
        r = stacked.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        r = stacked.prod(0)
    elif op == dist.ReduceOp.MAX:
        r = stacked.max(0).values
    elif op == dist.ReduceOp.MIN:
        r = stacked.min(0).values
    else:  # AVG
        r = stacked.mean(0)
        if not tensors[0].is_floating_point():
            r = stacked.sum(0).div(len(tensors), rounding_mode="trunc")
    return r.to(tensors[0].dtype)


def close(a, b, what):
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(a.dtype, 1e-6)
    if a.is_floating_point():
        ok = torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(a, b)
    assert ok, f"{what}: got {a.tolist()} expected {b.tolist()}"


def gloo_or_none(fn):
    """gloo's answer, or None where gloo lacks the op or dtype."""
    try:
        return fn()
    except RuntimeError:
        return None


def check_all(rank, n):
    gloo = dist.new_group(backend="gloo")
    everyone = lambda dtype, salt=0: [inputs(r, dtype, salt=salt) for r in range(n)]  # noqa: E731
    for dtype in DTYPES:
        tag = f"rank {rank}/{n} {dtype}"
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT, dist.ReduceOp.AVG]
        for op in ops:
            if dtype == torch.uint8 and op == dist.ReduceOp.AVG:
                continue
            mine = inputs(rank, dtype)
            expected = reference(op, everyone(dtype))
            work = dist.all_reduce(mine, op=op, async_op=True)
            work.wait()
            close(mine, expected, f"{tag} all_reduce {op}")
            if op != dist.ReduceOp.AVG:
                g = gloo_or_none(lambda: (lambda t: (dist.all_reduce(t, op=op, group=gloo), t)[1])(inputs(rank, dtype)))
                if g is not None:
                    close(mine, g, f"{tag} all_reduce {op} vs gloo")

        # all_gather_into_tensor: out of place and in place (input is this rank's block of output).
        out = torch.empty(n * COUNT, dtype=dtype)
        dist.all_gather_into_tensor(out, inputs(rank, dtype))
        close(out, torch.cat(everyone(dtype)), f"{tag} all_gather_into_tensor")
        flat = torch.zeros(n * COUNT, dtype=dtype)
        flat[rank * COUNT:(rank + 1) * COUNT] = inputs(rank, dtype)
        dist.all_gather_into_tensor(flat, flat[rank * COUNT:(rank + 1) * COUNT])
        close(flat, torch.cat(everyone(dtype)), f"{tag} all_gather_into_tensor in place")
        g = gloo_or_none(lambda: (lambda o: (dist.all_gather_into_tensor(o, inputs(rank, dtype), group=gloo), o)[1])(
            torch.empty(n * COUNT, dtype=dtype)))
        if g is not None:
            close(out, g, f"{tag} all_gather_into_tensor vs gloo")

        # all_gather (list)
        outs = [torch.empty(COUNT, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, inputs(rank, dtype))
        for r in range(n):
            close(outs[r], inputs(r, dtype), f"{tag} all_gather block {r}")

        # reduce_scatter_tensor and reduce_scatter (list): rank r's input blocks are inputs(r, salt=block)
        blocks = lambda r: [inputs(r, dtype, salt=b) for b in range(n)]  # noqa: E731
        expected = reference(dist.ReduceOp.SUM, [blocks(r)[rank] for r in range(n)])
        got = torch.empty(COUNT, dtype=dtype)
        dist.reduce_scatter_tensor(got, torch.cat(blocks(rank)))
        close(got, expected, f"{tag} reduce_scatter_tensor")
        got = torch.empty(COUNT, dtype=dtype)
        dist.reduce_scatter(got, blocks(rank))
        close(got, expected, f"{tag} reduce_scatter")
        expected_max = reference(dist.ReduceOp.MAX, [blocks(r)[rank] for r in range(n)])
        dist.reduce_scatter(got, blocks(rank), op=dist.ReduceOp.MAX)
        close(got, expected_max, f"{tag} reduce_scatter max")

        # broadcast and reduce from every root
        for root in range(n):
            t = inputs(rank, dtype)
            dist.broadcast(t, src=root)
            close(t, inputs(root, dtype), f"{tag} broadcast root {root}")
            t = inputs(rank, dtype)
            dist.reduce(t, dst=root)
            if rank == root:
                close(t, reference(dist.ReduceOp.SUM, everyone(dtype)), f"{tag} reduce root {root}")

        # gather and scatter, root n-1
        root = n - 1
        gathered = [torch.empty(COUNT, dtype=dtype) for _ in range(n)] if rank == root else None
        dist.gather(inputs(rank, dtype), gathered, dst=root)
        if rank == root:
            for r in range(n):
                close(gathered[r], inputs(r, dtype), f"{tag} gather block {r}")
        got = torch.empty(COUNT, dtype=dtype)
        dist.scatter(got, [inputs(root, dtype, salt=b) for b in range(n)] if rank == root else None, src=root)
        close(got, inputs(root, dtype, salt=rank), f"{tag} scatter")

        # all_to_all_single, equal and uneven splits (rank r sends r+1+p rows to rank p)
        ins = torch.cat(blocks(rank))
        got = torch.empty(n * COUNT, dtype=dtype)
        dist.all_to_all_single(got, ins)
        close(got, torch.cat([blocks(r)[rank] for r in range(n)]), f"{tag} all_to_all_single")
        g = gloo_or_none(lambda: (lambda o: (dist.all_to_all_single(o, ins, group=gloo), o)[1])(
            torch.empty(n * COUNT, dtype=dtype)))
        if g is not None:
            close(got, g, f"{tag} all_to_all_single vs gloo")
        in_splits = [rank + 1 + p for p in range(n)]
        out_splits = [r + 1 + rank for r in range(n)]
        rows = lambda r, p: inputs(r, dtype, count=(r + 1 + p) * 2, salt=p).view(-1, 2)  # noqa: E731
        got = torch.empty(sum(out_splits), 2, dtype=dtype)
        dist.all_to_all_single(got, torch.cat([rows(rank, p) for p in range(n)]), out_splits, in_splits)
        close(got, torch.cat([rows(r, rank) for r in range(n)]), f"{tag} all_to_all_single uneven")

        # all_to_all (list)
        got = [torch.empty(COUNT, dtype=dtype) for _ in range(n)]
        dist.all_to_all(got, blocks(rank))
        for r in range(n):
            close(got[r], blocks(r)[rank], f"{tag} all_to_all from {r}")

        # send/recv around the ring
        if n > 1:
            nxt, prev = (rank + 1) % n, (rank - 1) % n
            t = torch.empty(COUNT, dtype=dtype)
            s = dist.isend(inputs(rank, dtype), nxt)
            dist.recv(t, prev)
            s.wait()
            close(t, inputs(prev, dtype), f"{tag} send/recv")
    dist.barrier()

    # PREMUL_SUM with a scalar factor: sum of (2.5 * each rank's input)
    t = inputs(rank, torch.float64)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.5))
    close(t, reference(dist.ReduceOp.SUM, [inputs(r, torch.float64) * 2.5 for r in range(n)]), "premul_sum")

    # bool: data movement and MAX/MIN (logical or/and)
    b = torch.tensor([rank % 2 == 0, rank == 0, True])
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert b.tolist() == [True, True, True], b
    b = torch.tensor([rank % 2 == 0, rank == 0, True])
    dist.all_reduce(b, op=dist.ReduceOp.MIN)
    assert b.tolist() == [n == 1, n == 1, True], b

    # a subgroup of every rank but the last (the whole world when n == 1)
    members = list(range(max(n - 1, 1)))
    sub = dist.new_group(ranks=members)
    if rank in members:
        t = inputs(rank, torch.float32)
        dist.all_reduce(t, group=sub)
        close(t, reference(dist.ReduceOp.SUM, [inputs(r, torch.float32) for r in members]), f"rank {rank} subgroup")
        dist.barrier(group=sub)
    dist.barrier()


def check_refusals(rank, n):
    refused(lambda: dist.all_reduce(torch.ones(4, 4).t()), "not contiguous")
    refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)), "unsupported dtype")
    refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)), "SUM of bool")
    refused(lambda: dist.all_gather_into_tensor(torch.empty(4 * n + 1), torch.ones(4)), "elements, expected")
    refused(lambda: dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * n + 2)), "elements, expected")
    refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND), "not supported")
    dist.barrier()  # the group still works after refusals


def check_threads(rank, n):
    """Threads racing on one process group (c10d allows it; gloo queues them): calls take turns, none is
    lost or corrupted. Every call sums ones of one shape, so any pairing across ranks gives n."""
    import threading
    errors = []

    def worker():
        try:
            for _ in range(30):
                ts = [torch.ones(2048) for _ in range(3)]
                works = [dist.all_reduce(t, async_op=True) for t in ts]
                for w, t in zip(works, ts):
                    w.wait()
                    assert torch.all(t == n), f"rank {rank}: {t[:4]}"
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    t = torch.ones(2048)
    dist.all_reduce(t)
    assert torch.all(t == n), t
    dist.barrier()


if __name__ == "__main__":
    main(check_all, check_refusals, check_threads)
