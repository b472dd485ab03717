"""FSDPModule, the class fully_shard mixes into every module it shards (FSDP2's FSDPModule), and
clip_grad_norm_ over such a module."""
import collections

import torch

from . import _C
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
    """torch.nn.utils.clip_grad_norm_ over a sharded module, computed and applied by the runtime
    (runtime/grad_clip.h, what fsdp-train's FsdpModel::clip_grad_norm calls): the norm_type-norm (any
    p > 0, inf) of the units' gradient shards reduced over their shard group (padding is zero; HSDP's
    replicas hold the same shards and count once) and of the parameters no unit took (the same on every
    rank) counted once; every gradient scaled by max_norm / (norm + 1e-6) in float32 when the norm is
    finite and above max_norm (max_norm <= 0: no clipping). Collective. Returns the total norm (before
    clipping) as a float32 tensor."""
    states = [s for _, s in _units(module)]
    shards = {id(s.shard) for s in states}
    if len({s.pg for s in states}) > 1:
        raise ValueError("clip_grad_norm_: the module's units are over different process groups")
    if len({s.groups.replicate_degree for s in states}) > 1:
        raise ValueError("clip_grad_norm_: the module's units are over different meshes")
    sharded = [s.shard.grad.detach() for s in states if s.shard.grad is not None]
    replicated = [p.grad for p in module.parameters() if id(p) not in shards and p.grad is not None]
    norm = _C.clip_grad_norm(states[0].groups if states else None, sharded, replicated, float(max_norm),
                             float(norm_type))
    return torch.tensor(norm, dtype=torch.float32)
