"""FSDPModule, the class fully_shard mixes into every module it shards (FSDP2's FSDPModule), and
clip_grad_norm_ over such a module."""
import collections

import torch
import torch.distributed as dist

from .sharded_state import _units, full_state_dict, load_full_state_dict


class FSDPModule:
    """Mixed into the class of every module fully_shard made a unit (FSDP2's FSDPModule)."""

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """False: backward accumulates the full gradients in the units, with no reduce-scatter, until a
        backward with it True reduces the sum (gradient accumulation without communication)."""
        for _, state in (_units(self) if recurse else [("", self._fsdp_state)]):
            state.requires_sync = bool(requires_gradient_sync)


    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """The full state dict (full_state_dict): collective, the unsharded module's names and order."""
        if args:
            raise TypeError("state_dict of a fully_shard module takes keyword arguments only")
        destination = collections.OrderedDict() if destination is None else destination
        for key, value in full_state_dict(self).items():
            destination[prefix + key] = value
        return destination

    def load_state_dict(self, state_dict, strict=True):
        """Loads a full state dict (load_full_state_dict)."""
        return load_full_state_dict(self, state_dict, strict=strict)


_fsdp_classes = {}


def _fsdp_class(cls):
    if cls not in _fsdp_classes:
        _fsdp_classes[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return _fsdp_classes[cls]


def clip_grad_norm_(module, max_norm, norm_type=2.0):
    """torch.nn.utils.clip_grad_norm_ over a sharded module: the norm of all its gradients, the
    units' gradient shards reduced over their group (padding is zero) and the parameters no unit took
    (the same on every rank) counted once; scales every gradient by max_norm / (norm + 1e-6) when that
    is below 1. Collective. Returns the total norm (before clipping)."""
    norm_type = float(norm_type)
    states = [s for _, s in _units(module)]
    shards = {id(s.shard) for s in states}
    sharded = [s.shard.grad for s in states if s.shard.grad is not None]
    replicated = [p.grad for p in module.parameters() if id(p) not in shards and p.grad is not None]
    pgs = {s.pg for s in states}
    if len(pgs) > 1:
        raise ValueError("clip_grad_norm_: the module's units are over different process groups")
    inf = norm_type == float("inf")

    def local(grads):
        if not grads:
            return torch.zeros((), dtype=torch.float64)
        if inf:
            return torch.stack([g.detach().abs().max().double() for g in grads]).max()
        return sum(g.detach().double().abs().pow(norm_type).sum() for g in grads)

    total = local(sharded).reshape(1)
    replicas = {s.groups.replicate_degree for s in states}
    if len(replicas) > 1:
        raise ValueError("clip_grad_norm_: the module's units are over different meshes")
    if pgs:
        dist.all_reduce(total, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=pgs.pop())
        if not inf:  # under HSDP every replica holds the same shards: count them once
            total /= replicas.pop()
    rest = local(replicated)
    total = torch.maximum(total[0], rest) if inf else (total[0] + rest).pow(1.0 / norm_type)
    total = total.float()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in sharded + replicated:
        g.detach().mul_(coef.to(g.dtype))
    return total
