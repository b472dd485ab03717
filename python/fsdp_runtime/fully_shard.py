"""fully_shard for torch modules over the runtime's FSDP units (runtime/fsdp_unit.h), FSDP2's usage:

    for block in model.blocks:
        fully_shard(block)                   # reshard_after_forward=True by default
    fully_shard(model)                       # the root takes the parameters no block took
    opt = torch.optim.SGD(model.parameters(), lr=0.1)   # steps the rank's flat shards

Each call makes one unit of the parameters of `module` not already in a unit. Between steps the module
holds only this rank's flat float32 shard of them (FSDP2's dim-0 shards with padding, a parameter
named `_fsdp_shard`, a view of the unit's master shard).

Lifecycle of one unit in a step (the C++ FsdpModel's, driven from torch's hooks):
  forward pre-hook   all-gathers (waits), the module's parameters become views of the unit's full
                     buffer (leaves of autograd), and saved-tensor hooks replace every tensor autograd
                     saves from them by a marker (unit, parameter, view geometry);
  forward post-hook  with reshard_after_forward frees the full buffer (True), or keeps a 1/k slice
                     (int k), or keeps everything (False); the root unit (outermost in this forward)
                     keeps its parameters, as FSDP2 does;
  backward           the first marker autograd unpacks re-gathers the unit (FSDP2's pre-backward);
                     each parameter's gradient lands in the unit's full-gradient buffer (copied
                     into a new one, added into one still accumulating); once
                     the unit's last one arrived (or backward ended, for parameters forward did not
                     use) the unit frees its full parameters and starts the reduce-scatter (averaged
                     over the ranks) into the gradient shard, `_fsdp_shard.grad`. At most one
                     reduce-scatter is in flight: it overlaps the next unit's backward.
"""
import collections
import dataclasses

import torch
import torch.distributed as dist

from ._C import FsdpUnit, ProcessGroupFsdp, ShardingGroups, check_mesh_fills_world, check_reshard_group
from .sharded_state import _units, full_state_dict, load_full_state_dict

_groups = {}             # (process group, replicate degree, reshard group) -> ShardingGroups, split once
_unit_count = [0]


class _Step:
    """What the units share within one forward / backward of this process."""

    def __init__(self):
        self.depth = 0               # units whose forward is running (nested)
        self.hooks = None            # the saved-tensor hooks context while depth > 0
        self.order = []              # units in the order this forward ran them
        self.last_order = []         # ... and the previous forward: what forward prefetches follow
        self.post_order = []         # units in the order their forward ended: backward runs it reversed
        self.storages = {}           # storage data_ptr of a live full parameter -> (unit state, index)
        self.in_backward = []        # units this backward touched
        self.callback_queued = False
        self.pending_reduce = None   # the unit whose reduce-scatter is in flight


_step = _Step()


def _pack(tensor):
    # Tensors viewing a unit's full parameters are saved as markers: the buffer may be freed after
    # forward and re-gathered (at another address) before backward. The storage's address from the
    # tensor's own (tensor.storage() builds a Python storage object: a third of this hook's time).
    try:
        key = tensor.data_ptr() - tensor.storage_offset() * tensor.element_size()
    except (RuntimeError, NotImplementedError):
        return tensor
    hit = _step.storages.get(key)
    if hit is None or tensor.dtype != hit[0].compute[hit[1]].dtype:
        return tensor
    state, i = hit
    offset = tensor.storage_offset() - state.compute[i].storage_offset()
    return (state, i, tuple(tensor.shape), tuple(tensor.stride()), offset)


def _unpack(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    state, i, shape, stride, offset = packed
    state.unshard_for_backward()
    base = state.compute[i]
    return base.as_strided(shape, stride, base.storage_offset() + offset)


def _queue_finish_backward():
    if not _step.callback_queued:
        _step.callback_queued = True
        torch.autograd.Variable._execution_engine.queue_callback(_finish_backward)


class _UnitState:
    def __init__(self, module, unit, groups, pg, slots, names, shard, reshard_after_forward):
        self.module = module
        self.unit = unit
        self.groups = groups    # ShardingGroups (shard / replicate / reshard communicators, memory tracker)
        self.pg = pg            # the torch process group the unit was made over
        self.slots = slots      # [(owning submodule, attribute name)], the unit's parameters in order
        self.names = names      # their names relative to the unit's module
        self.shard = shard      # nn.Parameter over the master shard
        self.reshard_after_forward = reshard_after_forward  # True, False or the group size k
        self.is_root = False    # outermost unit of the forward that ran it
        self.compute = []       # the tensors torch computes with (leaves), while unsharded
        self.pending = set()    # parameter indices whose gradient this backward has not produced yet
        self.grads = None       # views of the unit's full gradients during backward
        self.grads_fresh = False  # those views were allocated by this backward and not zeroed
        self.requires_sync = True
        self.prefetch = 1            # units whose all-gather this one starts ahead of them
        self.gathering = False       # an all-gather started (a prefetch) and not waited for yet
        self.prefetches_used = 0     # all-gathers found already started when the unit needed them
        self.mp_policy = MixedPrecisionPolicy()
        self.param_dtype = None  # the compute dtype when it is not float32

    # --- parameters ---
    def unshard(self, track):
        self.compute = []
        for i, ((owner, name), t) in enumerate(zip(self.slots, self._compute_tensors())):
            t.requires_grad_(track)
            if track:
                t.register_hook(self._grad_hook(i))
            self.compute.append(t)
            _step.storages[t.storage().data_ptr()] = (self, i)
            setattr(owner, name, t)
        self.pending = set(range(len(self.slots))) if track else set()

    def unshard_for_backward(self):
        """Before the unit's backward reads its parameters: all-gather them again if forward freed them."""
        if self not in _step.in_backward:
            _step.in_backward.append(self)
            _queue_finish_backward()
            self.prefetches_used += self.gathering
            if not self.unit.unsharded:
                self.start_unshard()  # its own all-gather first, then the prefetches behind it
            _prefetch(_step.post_order, self, -1)
        if self.unit.unsharded:
            return
        self.compute = self._compute_tensors()
        for i, t in enumerate(self.compute):
            _step.storages[t.storage().data_ptr()] = (self, i)

    def start_unshard(self):
        if not self.unit.unsharded and not self.gathering:
            self.unit.start_unshard()
            self.gathering = True

    def _compute_tensors(self):
        """Gathers (or waits for the prefetch) and gives the tensors torch computes with: views of the
        unit's full float32 buffer, or under a param_dtype their copies in it."""
        self.gathering = False
        views = self.unit.unshard()
        if self.param_dtype is None:
            return [v.detach() for v in views]
        with torch.no_grad():
            return [v.to(self.param_dtype) for v in views]

    def reshard(self, keep_for_backward=False):
        """Frees the full parameters (keep_for_backward: but the 1/k slice of reshard_after_forward=k)."""
        if self.gathering:  # a prefetch nobody used: let it land (the engine writes into the unit)
            self.gathering = False
            self.unit.unshard()
        for t in self.compute:
            _step.storages.pop(t.storage().data_ptr(), None)
            if self.param_dtype is not None:
                t.storage().resize_(0)  # autograd holds the leaf; its data is the unit's to free
        self.compute = []
        for owner, name in self.slots:
            setattr(owner, name, None)  # the views die with the full buffer
        self.unit.reshard(keep_for_backward)

    # --- gradients ---
    def _grad_hook(self, i):
        def hook(grad):
            if self.grads is None:
                # Not zeroed when new: each parameter's first gradient is copied in (one pass instead
                # of a zeroing and an add), and post_backward zeroes the ones backward never produced.
                self.grads, self.grads_fresh = self.unit.grads_for_overwrite()
                if self not in _step.in_backward:
                    _step.in_backward.append(self)
                _queue_finish_backward()
            if self.grads_fresh and i in self.pending:
                self.grads[i].copy_(grad)
            else:
                self.grads[i].add_(grad)
            self.pending.discard(i)
            if not self.pending:
                self.post_backward()
        return hook

    def post_backward(self):
        """All of the unit's gradients are in: free the full parameters and start the reduce-scatter."""
        self.reshard()  # also drops a slice reshard_after_forward=k kept that backward did not gather
        if self.grads is None:
            return
        if self.grads_fresh:
            for i in self.pending:  # parameters this backward did not reach: no gradient is zero
                self.grads[i].zero_()
        self.grads = None
        self.grads_fresh = False
        self.pending = set()
        if not self.requires_sync:
            return  # the full gradients accumulate until a backward with sync on
        if self.shard.grad is None:  # zero_grad(set_to_none=True) dropped the previous gradient
            self.unit.zero_grad_shard()
        previous, _step.pending_reduce = _step.pending_reduce, self
        if previous is not None:
            previous.finish_reduce()
        self.unit.start_reduce_grads()

    def finish_reduce(self):
        self.unit.finish_reduce_grads()
        self.shard.grad = self.unit.grad_shard()


def _finish_backward():
    # Units with parameters forward did not use (their hooks never fired) reduce here; the last
    # reduce-scatter finishes; units still holding full parameters free them.
    _step.callback_queued = False
    units, _step.in_backward = _step.in_backward, []
    for state in units:
        state.post_backward()
    if _step.pending_reduce is not None:
        _step.pending_reduce.finish_reduce()
        _step.pending_reduce = None
    for state in _step.order:
        state.reshard()


def _cast_floats(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floats(v, dtype) for k, v in value.items()}
    return value


def _prefetch(order, state, direction):
    """Starts the all-gathers of the `state.prefetch` units after `state` in `order` (direction +1:
    forward, in pre-forward order) or before it (-1: backward, in post-forward order, where the root
    that wraps the others comes last), as the runtime's FsdpModel::prefetch_after does."""
    if state not in order:
        return
    at = order.index(state)
    for k in range(1, state.prefetch + 1):
        nxt = at + direction * k
        if nxt < 0 or nxt >= len(order):
            break
        order[nxt].start_unshard()


def _pre_forward(state, args):
    track = torch.is_grad_enabled() and state.shard.requires_grad
    if _step.depth == 0:
        state.is_root = True
        _step.order = []
        _step.post_order = []
        _step.hooks = torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)
        _step.hooks.__enter__()
    _step.depth += 1
    _step.order.append(state)
    state.prefetches_used += state.gathering
    state.start_unshard()
    _prefetch(_step.last_order, state, +1)
    state.unshard(track)
    if state.param_dtype is not None and state.mp_policy.cast_forward_inputs:
        return _cast_floats(args, state.param_dtype)
    return None


def _post_forward(state, output):
    _step.depth -= 1
    _step.post_order.append(state)
    if _step.depth == 0:
        _step.hooks.__exit__(None, None, None)
        _step.hooks = None
        for unit in _step.last_order:  # forward prefetched a unit this forward did not run
            if unit.gathering:
                unit.reshard()
        _step.last_order = list(_step.order)
    grad = torch.is_grad_enabled() and state.shard.requires_grad
    if not grad:
        state.reshard()  # nothing will run backward
    elif state.reshard_after_forward is not False and not state.is_root:
        state.reshard(keep_for_backward=state.reshard_after_forward is not True)
    if state.mp_policy.output_dtype is not None:
        return _cast_floats(output, state.mp_policy.output_dtype)
    return None


def _unclaimed_parameters(module, prefix=""):
    """(owning module, qualified name, parameter) for the parameters no inner fully_shard took."""
    for name, p in module._parameters.items():
        if p is not None:
            yield module, prefix + name, p
    for child_name, child in module._modules.items():
        if child is not None and not hasattr(child, "_fsdp_state"):
            yield from _unclaimed_parameters(child, prefix + child_name + ".")


def _reshard_group(reshard_after_forward, shard_degree):
    """The ProcessGroups' reshard group size for a reshard_after_forward value (0: none)."""
    if reshard_after_forward is True or reshard_after_forward is False:
        return 0
    k = reshard_after_forward
    if not isinstance(k, int):
        raise ValueError(f"fully_shard: reshard_after_forward={k!r} must be True, False or an integer "
                         f"dividing the shard group size {shard_degree}")
    check_reshard_group(k, shard_degree)  # the job's rule (spec/job_spec.h): ValueError naming the key
    return k


def _sharding_groups(pg, replicate, reshard_group):
    key = (pg, replicate, reshard_group)
    if key not in _groups:
        _groups[key] = ShardingGroups(pg, replicate, reshard_group)
    return _groups[key]


def _mesh_degrees(mesh, world):
    """(replicate, shard) of fully_shard's mesh argument over a group of `world` ranks."""
    if mesh is None:
        return 1, world
    if not isinstance(mesh, (tuple, list)) or len(mesh) != 2 or not all(isinstance(d, int) and d > 0 for d in mesh):
        raise ValueError(f"fully_shard: mesh={mesh!r} must be (replicate, shard) positive integers whose product is "
                         f"the group's {world} ranks")
    check_mesh_fills_world(mesh[0], mesh[1], world)  # the job's rule (spec/job_spec.h): ValueError naming the keys
    return tuple(mesh)


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


_dtype_names = {None: "float32", torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _dtype_name(dtype, what):
    if dtype not in _dtype_names:
        raise ValueError(f"fully_shard: MixedPrecisionPolicy {what}={dtype} is not float32, bfloat16 or float16")
    return _dtype_names[dtype]


def fully_shard(module, *, group=None, mesh=None, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(),
                prefetch=1):
    """Makes the parameters of `module` not yet in a unit one FSDP unit; returns `module`. Collective
    over the group (the default group unless given, which must use backend "fsdp"): every rank calls
    fully_shard on the same modules in the same order.

    reshard_after_forward: True frees the full parameters after the unit's forward and all-gathers
    them again for its backward; False keeps them until the unit's backward; an integer k (dividing
    the group size) keeps a 1/k slice so that backward all-gathers inside a group of k ranks only
    (k = the group size is True). The root unit keeps its parameters whatever the value (FSDP2).

    mp_policy: MixedPrecisionPolicy (dtypes of the all-gather, compute, reduce-scatter and output).

    prefetch: how many units' all-gathers this unit starts ahead: in its forward those that ran after
    it in the previous forward, in its backward those before it in this forward (0: none).

    mesh: None shards over the whole group; (replicate, shard) is HSDP over a 2-D mesh of the group's
    ranks, rank = replica * shard + shard_rank (torch's init_device_mesh(("replicate", "shard"))): the
    parameters shard within each group of `shard` consecutive ranks, and the gradients, reduce-scattered
    there, are averaged across the `replicate` replicas (the runtime's HSDP, runtime/process_groups.h)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupFsdp):
        raise TypeError(f"fully_shard needs a process group of backend 'fsdp', got {type(pg).__name__}")
    if hasattr(module, "_fsdp_state"):
        raise ValueError(f"fully_shard: {type(module).__name__} is already sharded")
    replicate, shard_degree = _mesh_degrees(mesh, pg.size())
    reshard_group = _reshard_group(reshard_after_forward, shard_degree)
    slots, names, params = [], [], []
    for owner, name, p in _unclaimed_parameters(module):
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise ValueError(f"fully_shard: parameter {name} is {p.dtype} on {p.device}; only float32 CPU "
                             "parameters are supported")
        slots.append((owner, name.rsplit(".", 1)[-1]))
        names.append(name)
        params.append(p)
    if not params:
        return module
    groups = _sharding_groups(pg, replicate, reshard_group)
    _unit_count[0] += 1
    param_dtype = _dtype_name(mp_policy.param_dtype, "param_dtype")
    reduce_dtype = _dtype_name(mp_policy.reduce_dtype or mp_policy.param_dtype, "reduce_dtype")
    unit = FsdpUnit(groups, _unit_count[0], type(module).__name__, names, [list(p.shape) for p in params],
                    param_dtype, reduce_dtype)
    unit.load_full(torch.cat([p.detach().reshape(-1) for p in params]))
    requires_grad = any(p.requires_grad for p in params)
    for owner, name in slots:
        # The parameters' order in their module, for state dicts in the unsharded module's order.
        owner.__dict__.setdefault("_fsdp_param_order", list(owner._parameters.keys()))
    for owner, name in slots:
        del owner._parameters[name]
        setattr(owner, name, None)
    shard = torch.nn.Parameter(unit.master_shard(), requires_grad=requires_grad)
    module.register_parameter("_fsdp_shard", shard)
    state = _UnitState(module, unit, groups, pg, slots, names, shard, reshard_after_forward)
    state.shapes = [tuple(p.shape) for p in params]
    module._fsdp_state = state
    module.__class__ = _fsdp_class(type(module))
    state.mp_policy = mp_policy
    if not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"fully_shard: prefetch={prefetch!r} must be a non-negative integer")
    state.prefetch = prefetch
    state.param_dtype = mp_policy.param_dtype if mp_policy.param_dtype not in (None, torch.float32) else None
    module.register_forward_pre_hook(lambda mod, args: _pre_forward(state, args))
    module.register_forward_hook(lambda mod, args, out: _post_forward(state, out))
    return module


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
