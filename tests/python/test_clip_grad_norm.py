"""Gradient clipping has one home (runtime/grad_clip.h): fully_shard's clip_grad_norm_ and fsdp-train's
FsdpModel::clip_grad_norm give the same norm and the same clipped gradient shards, bit for bit, for the
same gradients (each rank's own, reduced by each front end's backward), for p = 2, inf and 1.5, under
FSDP (1 x N) and HSDP (2 x N/2); both equal torch.nn.utils.clip_grad_norm_ over the ranks' averaged full
gradients (1e-5), with a parameter no unit took (replicated, counted once) and without.

Each unit's forward is sum(p * g) over its parameters, so backward hands every parameter exactly the
gradient g this rank drew."""
import torch

from spawn import main

SHAPES = ([(7, 5), (7,)], [(3, 7), (3,)])  # two units; 7 and 3 rows leave padding at 2 and 4 shards
NORMS = (2.0, float("inf"), 1.5)


class Leaf(torch.nn.Module):
    def __init__(self, shapes):
        super().__init__()
        for i, shape in enumerate(shapes):
            self.register_parameter(f"p{i}", torch.nn.Parameter(torch.zeros(shape)))
        self.count = len(shapes)

    def forward(self, grads):
        return sum((getattr(self, f"p{i}") * g).sum() for i, g in enumerate(grads))


class Net(torch.nn.Module):
    def __init__(self, replicated):
        super().__init__()
        self.units = torch.nn.ModuleList([Leaf(shapes) for shapes in SHAPES])
        self.extra = torch.nn.Parameter(torch.zeros(4)) if replicated else None

    def forward(self, grads, extra_grad):
        out = sum(unit(g) for unit, g in zip(self.units, grads))
        return out if self.extra is None else out + (self.extra * extra_grad).sum()


def draw(rank):
    """Rank `rank`'s gradients per unit (scaled per parameter so that the inf norm has one winner)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return [[torch.randn(shape, generator=g) * (1 + i + 2 * u) for i, shape in enumerate(shapes)]
            for u, shapes in enumerate(SHAPES)]


EXTRA = torch.randn(4, generator=torch.Generator().manual_seed(5)) * 3  # the same on every rank


def reference_norm(n, norm_type, replicated):
    """torch's clip_grad_norm_ over the full gradients averaged over the ranks (the data-parallel mean)."""
    per_rank = [draw(r) for r in range(n)]
    params = []
    for u, shapes in enumerate(SHAPES):
        for i in range(len(shapes)):
            p = torch.nn.Parameter(torch.zeros(shapes[i]))
            p.grad = sum(per_rank[r][u][i] for r in range(n)) / n
            params.append(p)
    if replicated:
        params.append(torch.nn.Parameter(torch.zeros(4)))
        params[-1].grad = EXTRA.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, float("inf"), norm_type)  # the norm, nothing clipped
    return norm.item()


def fully_shard_clip(rank, mesh, norm_type, max_norm, replicated):
    import fsdp_runtime

    net = Net(replicated)
    for unit in net.units:
        fsdp_runtime.fully_shard(unit, mesh=mesh)
    net(draw(rank), EXTRA).backward()
    norm = fsdp_runtime.clip_grad_norm_(net, max_norm, norm_type)
    shards = [unit._fsdp_state.shard.grad.clone() for unit in net.units]
    return norm, shards, (net.extra.grad.clone() if replicated else None)


def same_as_fsdp_model(rank, n):
    import torch.distributed as dist

    from fsdp_runtime import _C, clip_grad_norm_

    pg = dist.distributed_c10d._get_default_group()
    meshes = [None] + ([(2, n // 2)] if n % 2 == 0 else [])
    for mesh in meshes:
        replicate = 1 if mesh is None else mesh[0]
        for norm_type in NORMS:
            for replicated in (False, True):
                want = reference_norm(n, norm_type, replicated)
                max_norm = 0.5 * want  # clipping scales
                what = (mesh, norm_type, replicated)
                norm, shards, extra = fully_shard_clip(rank, mesh, norm_type, max_norm, replicated)
                assert abs(norm.item() - want) <= 1e-5 * want, (what, norm.item(), want)
                if replicated:  # counted once, clipped by the same factor
                    scale = max_norm / (norm.item() + 1e-6)
                    assert torch.allclose(extra, EXTRA * scale, rtol=1e-5), (what, extra, EXTRA * scale)
                    continue
                flat = [torch.cat([g.reshape(-1) for g in unit]).tolist() for unit in draw(rank)]
                cpp_norm, cpp_shards = _C.fsdp_model_clip_grad_norm(pg, replicate, [list(map(list, s)) for s in SHAPES],
                                                                    flat, max_norm, norm_type)
                assert norm.item() == torch.tensor(cpp_norm, dtype=torch.float32).item(), (what, norm.item(),
                                                                                           cpp_norm)
                for u, (got, cpp) in enumerate(zip(shards, cpp_shards)):
                    assert torch.equal(got, torch.tensor(cpp, dtype=torch.float32)), (what, u, got, cpp)
    try:
        clip_grad_norm_(Net(False), 1.0, 0.0)
    except ValueError as e:
        assert "norm_type 0" in str(e), e
    else:
        raise AssertionError("clip_grad_norm_ with norm_type 0 was accepted")
    if rank == 0:
        print(f"clip_grad_norm_ equals FsdpModel::clip_grad_norm (norm and shards, bitwise) and torch's norm: "
              f"meshes {meshes}, p in {NORMS}", flush=True)


if __name__ == "__main__":
    main(same_as_fsdp_model)
