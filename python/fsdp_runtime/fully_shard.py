"""fully_shard for torch modules over the runtime's FSDP units (runtime/fsdp_unit.h).

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)                       # the root takes the parameters no block took
    opt = torch.optim.SGD(model.parameters(), lr=0.1)   # steps the rank's flat shards

Each call makes one unit of the parameters of `module` not already in a unit. Between steps the module
holds only this rank's flat float32 shard of them (FSDP2's dim-0 shards with padding, a parameter
named `_fsdp_shard`, a view of the unit's master shard). Before the module's forward the unit
all-gathers and the module's parameters become views of the unit's full buffer; as backward produces
each parameter's gradient it is added into the unit's gradient buffer, and once the unit's last one
arrived (or backward ended) the unit reduce-scatters them (averaged over the ranks) into the gradient
shard, which is `_fsdp_shard.grad`, and frees the full parameters.

Not yet: resharding after forward (the full parameters stay until the unit's backward), prefetching
the next unit, mixed precision, HSDP meshes from Python, set_requires_gradient_sync, state_dict.
"""
import torch
import torch.distributed as dist

from ._C import FsdpUnit, ProcessGroupFsdp, ShardingGroups

_groups = {}          # process group -> ShardingGroups, split once per group
_units_in_backward = []  # units whose gradients this backward has started filling
_callback_queued = [False]
_unit_count = [0]


class _UnitState:
    def __init__(self, module, unit, slots, names, shard):
        self.module = module
        self.unit = unit
        self.slots = slots      # [(owning submodule, attribute name)], the unit's parameters in order
        self.names = names      # their names relative to the unit's module
        self.shard = shard      # nn.Parameter over the master shard
        self.pending = set()    # parameter indices whose gradient this backward has not produced yet
        self.grads = None       # views of the unit's full gradients during backward

    def unshard(self):
        views = self.unit.unshard()
        track = torch.is_grad_enabled() and self.shard.requires_grad
        for i, ((owner, name), view) in enumerate(zip(self.slots, views)):
            t = view.detach().requires_grad_(track)
            if track:
                t.register_hook(self._grad_hook(i))
            setattr(owner, name, t)
        if track:
            self.pending = set(range(len(self.slots)))

    def _grad_hook(self, i):
        def hook(grad):
            if self.grads is None:
                self.grads = self.unit.grads()
                _units_in_backward.append(self)
                if not _callback_queued[0]:
                    _callback_queued[0] = True
                    torch.autograd.Variable._execution_engine.queue_callback(_finish_backward)
            self.grads[i].add_(grad)
            self.pending.discard(i)
            if not self.pending:
                self.reduce()
        return hook

    def reduce(self):
        if self.grads is None:
            return
        if self.shard.grad is None:  # zero_grad(set_to_none=True) dropped the previous gradient
            self.unit.zero_grad_shard()
        self.unit.reduce_grads()
        self.grads = None
        self.pending = set()
        self.shard.grad = self.unit.grad_shard()
        self.reshard()

    def reshard(self):
        for owner, name in self.slots:
            setattr(owner, name, None)  # the views die with the full buffer
        self.unit.reshard()


def _finish_backward():
    # Units with parameters forward did not use (their hooks never fired) reduce here.
    _callback_queued[0] = False
    units, _units_in_backward[:] = list(_units_in_backward), []
    for state in units:
        state.reduce()


def _unclaimed_parameters(module, prefix=""):
    """(owning module, qualified name, parameter) for the parameters no inner fully_shard took."""
    for name, p in module._parameters.items():
        if p is not None:
            yield module, prefix + name, p
    for child_name, child in module._modules.items():
        if child is not None and not hasattr(child, "_fsdp_state"):
            yield from _unclaimed_parameters(child, prefix + child_name + ".")


def _sharding_groups(pg):
    if pg not in _groups:
        _groups[pg] = ShardingGroups(pg, 1)
    return _groups[pg]


def fully_shard(module, *, group=None):
    """Makes the parameters of `module` not yet in a unit one FSDP unit; returns `module`. Collective
    over the group (the default group unless given, which must use backend "fsdp"): every rank calls
    fully_shard on the same modules in the same order."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupFsdp):
        raise TypeError(f"fully_shard needs a process group of backend 'fsdp', got {type(pg).__name__}")
    if hasattr(module, "_fsdp_state"):
        raise ValueError(f"fully_shard: {type(module).__name__} is already sharded")
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
    groups = _sharding_groups(pg)
    _unit_count[0] += 1
    unit = FsdpUnit(groups, _unit_count[0], type(module).__name__, names, [list(p.shape) for p in params])
    unit.load_full(torch.cat([p.detach().reshape(-1) for p in params]))
    requires_grad = any(p.requires_grad for p in params)
    for owner, name in slots:
        del owner._parameters[name]
        setattr(owner, name, None)
    shard = torch.nn.Parameter(unit.master_shard(), requires_grad=requires_grad)
    module.register_parameter("_fsdp_shard", shard)
    state = _UnitState(module, unit, slots, names, shard)
    module._fsdp_state = state
    module.register_forward_pre_hook(lambda mod, args: state.unshard())
    return module


def full_parameters(module):
    """{qualified name: full parameter (a copy)} for every unit in `module`; collective (all-gathers)."""
    out = {}
    for prefix, sub in module.named_modules():
        state = getattr(sub, "_fsdp_state", None)
        if state is None:
            continue
        was_unsharded = state.unit.unsharded
        views = state.unit.unshard()
        for name, view in zip(state.names, views):
            out[f"{prefix}.{name}" if prefix else name] = view.clone()
        if not was_unsharded:
            state.unit.reshard()
    return out
