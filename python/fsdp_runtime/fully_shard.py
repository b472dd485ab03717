"""fully_shard for torch modules over the runtime's FSDP units (runtime/fsdp_unit.h), FSDP2's usage:

    for block in model.blocks:
        fully_shard(block)                   # reshard_after_forward=True by default
    fully_shard(model)                       # the root takes the parameters no block took
    opt = torch.optim.SGD(model.parameters(), lr=0.1)   # steps the rank's flat shards

Each call makes one unit of the parameters of `module` not already in a unit. Between steps the module
holds only this rank's flat float32 shard of them (FSDP2's dim-0 shards with padding, a parameter
named `_fsdp_shard`, a view of the unit's master shard); its attributes for the parameters are None.
During the unit's forward and backward they are the module's own nn.Parameter objects, the same ones
every step, whose storage the all-gather fills (_fsdp_param_group.py).

The package splits as FSDP2 splits _fully_shard: this file is the API (arguments checked by the job's
rules in C++ before anything changes), _fsdp_state.py the per-root step state (over the runtime's
schedule, _C.FsdpSchedule) and the hooks, _fsdp_param_group.py one unit's parameters and gradients,
_fsdp_module.py the FSDPModule class and clipping, sharded_state.py the state dicts and counters.
"""
import dataclasses
import weakref

import torch
import torch.distributed as dist

from . import _fsdp_state
from ._C import FsdpUnit, ProcessGroupFsdp, Reshard, ShardingGroups, keep_freed_heap, validate_fully_shard
from ._fsdp_module import FSDPModule, _fsdp_class, clip_grad_norm_  # noqa: F401  (the package's API)
from ._fsdp_param_group import UnitState

# process group -> {(replicate degree, reshard group): ShardingGroups}. Splitting is collective, so it
# happens once per process group and key on every rank, never again after a rank's garbage collector
# (which runs when it will) dropped a model: the groups live as long as the process group, which the
# cache holds weakly (it keeps no group, its communicators or the world alive after torch drops it).
_groups = weakref.WeakKeyDictionary()
_unit_count = [0]


@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """FSDP2's mixed precision: param_dtype is what the all-gather carries and torch computes in (the
    unit's master shard stays float32); reduce_dtype what the gradient reduce-scatter carries (default:
    param_dtype); output_dtype casts the module's floating outputs; cast_forward_inputs casts its
    floating inputs to param_dtype. None: float32."""
    param_dtype: torch.dtype = None
    reduce_dtype: torch.dtype = None
    output_dtype: torch.dtype = None
    cast_forward_inputs: bool = True


def _dtype_name(dtype):
    """torch's name of a dtype ("bfloat16"); the C++ rule decides which ones a unit carries."""
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


def _reshard_text(value):
    """reshard_after_forward as the job's Reshard parses it (spec/policy.h)."""
    if value is True or value is False:
        return "default" if value else "never"
    return str(value) if isinstance(value, int) else repr(value)


def _unclaimed_parameters(module, prefix=""):
    """(owning module, qualified name, parameter) for the parameters no inner fully_shard took."""
    for name, p in module._parameters.items():
        if p is not None:
            yield module, prefix + name, p
    for child_name, child in module._modules.items():
        if child is not None and not hasattr(child, "_fsdp_state"):
            yield from _unclaimed_parameters(child, prefix + child_name + ".")


def _sharding_groups(pg, replicate, reshard_group):
    split = _groups.setdefault(pg, {})
    key = (replicate, reshard_group)
    if key not in split:
        split[key] = ShardingGroups(pg, replicate, reshard_group)
    return split[key]


def _check_arguments(module, pg, mesh, reshard_after_forward, mp_policy, prefetch):
    """Every argument checked before fully_shard changes anything; returns (replicate, reshard group,
    [(owner, qualified name, parameter)]). The rules are the job's (spec/mesh.h, spec/policy.h): this
    only turns torch's values into theirs."""
    if not isinstance(pg, ProcessGroupFsdp):
        raise TypeError(f"fully_shard needs a process group of backend 'fsdp', got {type(pg).__name__}")
    if hasattr(module, "_fsdp_state"):
        raise ValueError(f"fully_shard: {type(module).__name__} is already sharded")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"fully_shard: mp_policy must be a MixedPrecisionPolicy, got {type(mp_policy).__name__}")
    replicate, shard = (1, pg.size()) if mesh is None else mesh
    if isinstance(prefetch, bool) or not isinstance(prefetch, int):
        raise TypeError(f"fully_shard: prefetch={prefetch!r} must be an integer")
    try:
        reshard_group = validate_fully_shard(
            pg.size(), replicate, shard, _reshard_text(reshard_after_forward), _dtype_name(mp_policy.param_dtype),
            _dtype_name(mp_policy.reduce_dtype or mp_policy.param_dtype), prefetch)
    except ValueError as e:
        raise ValueError(f"fully_shard(reshard_after_forward={reshard_after_forward!r}, mesh={mesh!r}, "
                         f"prefetch={prefetch!r}): {e}") from None
    params = list(_unclaimed_parameters(module))
    for _, name, p in params:
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise ValueError(f"fully_shard: parameter {name} is {p.dtype} on {p.device}; only float32 CPU "
                             "parameters are supported")
    return replicate, reshard_group, params


def fully_shard(module, *, group=None, mesh=None, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(),
                prefetch=1):
    """Makes the parameters of `module` not yet in a unit one FSDP unit; returns `module`. Collective
    over the group (the default group unless given, which must use backend "fsdp"): every rank calls
    fully_shard on the same modules in the same order. A call that raises has changed nothing.

    reshard_after_forward: True frees the full parameters after the unit's forward and all-gathers
    them again for its backward; False keeps them until the unit's backward; an integer k (dividing
    the group size) keeps a 1/k slice so that backward all-gathers inside a group of k ranks only
    (k = the group size is True). The root of a forward keeps its parameters whatever the value (FSDP2).

    mp_policy: MixedPrecisionPolicy (dtypes of the all-gather, compute, reduce-scatter and output).

    prefetch: how many units' all-gathers this unit starts ahead (0..8): in its forward those that ran
    after it in the previous forward, in its backward those before it in this forward (0: none).

    mesh: None shards over the whole group; (replicate, shard) is HSDP over a 2-D mesh of the group's
    ranks, rank = replica * shard + shard_rank (torch's init_device_mesh(("replicate", "shard"))): the
    parameters shard within each group of `shard` consecutive ranks, and the gradients, reduce-scattered
    there, are averaged across the `replicate` replicas (the runtime's HSDP, runtime/process_groups.h)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    replicate, reshard_group, found = _check_arguments(module, pg, mesh, reshard_after_forward, mp_policy, prefetch)
    if not found:
        return module
    slots = [(owner, name.rsplit(".", 1)[-1]) for owner, name, _ in found]
    names = [name for _, name, _ in found]
    params = [p for _, _, p in found]
    groups = _sharding_groups(pg, replicate, reshard_group)
    _unit_count[0] += 1
    unit = FsdpUnit(groups, _unit_count[0], type(module).__name__, names, [list(p.shape) for p in params],
                    _dtype_name(mp_policy.param_dtype), _dtype_name(mp_policy.reduce_dtype or mp_policy.param_dtype))
    unit.load_full(torch.cat([p.detach().reshape(-1) for p in params]))
    shard = torch.nn.Parameter(unit.master_shard(), requires_grad=any(p.requires_grad for p in params))
    state = UnitState(module, _unit_count[0], unit, groups, pg, slots, names, params, shard, reshard_after_forward,
                      Reshard(_reshard_text(reshard_after_forward)), mp_policy, prefetch)
    # From here on nothing raises: the module changes all at once.
    keep_freed_heap()  # once per process: a step's freed tensors stay mapped for the next (docs/pytorch.md)
    for owner, _ in slots:
        # The parameters' order in their module, for state dicts in the unsharded module's order.
        owner.__dict__.setdefault("_fsdp_param_order", list(owner._parameters.keys()))
    for owner, name in slots:
        del owner._parameters[name]
    compute_dtype = state.param_dtype or torch.float32
    state.bind(torch.empty(sum(p.numel() for p in params), dtype=compute_dtype))
    module.register_parameter("_fsdp_shard", shard)
    module._fsdp_state = state
    module.__class__ = _fsdp_class(type(module))
    pre = module.register_forward_pre_hook(lambda mod, args: _fsdp_state.pre_forward(state, args))
    module._forward_pre_hooks.move_to_end(pre.id, last=False)  # the user's pre-hooks see full parameters
    state.post_hook_id = module.register_forward_hook(lambda mod, args, out: _fsdp_state.post_forward(state, out)).id
    return module
