"""One unit's torch side (FSDP2's FSDPParamGroup with its FSDPParams): the module's own nn.Parameter
objects, kept for the module's life, over the storage of one flat compute tensor the runtime unit
(runtime/fsdp_unit.h through _C.FsdpUnit) fills when it unshards and empties when it reshards.

    flat (numel of the unit, param dtype, param-major)   <- bind_compute: unshard points its storage at
      p0 = flat[0:n0].view(shape0)   (the same nn.Parameter   the unit's full parameters, reshard
      p1 = flat[n0:n0+n1].view(...)   every step, a leaf)     empties it (size 0)

The unit keeps its full parameters in the param dtype (the all-gather's copy-out writes them there,
float32 or bfloat16 alike), so the storage is never a copy. Views that autograd saved in forward share
that storage, so they see the values again once the unit is gathered for backward: no saved-tensor
hooks. The module attribute is the parameter while unsharded and None otherwise (FSDP2 swaps the
sharded and the unsharded parameter the same way).

Each parameter's gradient arrives through a post-hook on its AccumulateGrad node, registered once and
run in C++ (csrc/grad_watch.h): the unit writes it straight into its reduce-scatter input (rank-major,
reduce dtype: copied the first time since the last reduce, added after; FSDP2's foreach_reduce copy-in)
and the parameter's .grad is dropped; once the unit's last gradient is in, the watch calls
post_backward, which reshards and starts the reduce-scatter when the root's schedule says so
(runtime/fsdp_schedule.h). Python runs once per unit in backward, not once per parameter.
"""
import weakref

import torch

from ._fsdp_state import RootContext, TrainingState


class UnitState:
    def __init__(self, module, index, unit, groups, pg, slots, names, params, shard, reshard_after_forward,
                 reshard_policy, mp_policy, prefetch):
        self.module = module
        self.index = index      # the unit's id in its roots' schedules (and the runtime unit's index)
        self.unit = unit
        self.groups = groups    # ShardingGroups (shard / replicate communicators, memory tracker)
        self.pg = pg            # the torch process group the unit was made over
        self.slots = slots      # [(owning submodule, attribute name)], the unit's parameters in order
        self.names = names      # their names relative to the unit's module
        self.params = params    # the persistent nn.Parameters (views of the bound flat tensor)
        self.shapes = [tuple(p.shape) for p in params]
        self.shard = shard      # nn.Parameter over the master shard: what the optimizer steps
        self.grad_view = unit.grad_shard()  # its .grad once reduced: a view of the unit's gradient shard, made once
        self.reshard_after_forward = reshard_after_forward  # True, False or the group size k
        self.reshard_policy = reshard_policy                # ... as the schedule reads it (_C.Reshard)
        self.mp_policy = mp_policy
        self.param_dtype = mp_policy.param_dtype if mp_policy.param_dtype not in (None, torch.float32) else None
        self.prefetch = prefetch     # units whose all-gather this one starts ahead of them
        self.training_state = TrainingState.IDLE
        self.ctx = None              # the RootContext of the forward that last ran this unit
        self.root_ctx = None         # this unit's own, when it is the outermost of a forward
        self.post_hook_id = None     # the forward hook's key in module._forward_hooks (run last)
        self.attached = False        # the module attributes are the parameters
        self.gathering = False       # an all-gather started (a prefetch) and not waited for yet
        self.prefetches_used = 0     # all-gathers found already started when the unit needed them
        self.requires_sync = True
        self.trainable = [i for i, p in enumerate(params) if p.requires_grad]

    def bind(self, flat):
        """Makes the parameters views of `flat` (their values already loaded into the unit), hands its
        storage to the unit, and hooks each trainable parameter's gradient once."""
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.data = flat[offset:offset + p.numel()].view(p.shape)
                offset += p.numel()
        me = weakref.ref(self)  # the unit holds the callbacks: no cycle back to this state
        self.unit.watch_grads(self.params, self.trainable, lambda: me().pre_backward(),
                              lambda: me().post_backward())
        self.unit.bind_compute(flat)
        self._detach_attributes()

    # --- parameters ---
    @property
    def compute(self):
        """The tensors torch computes with while the unit is unsharded ([] when resharded)."""
        return self.params if self.attached else []

    def start_unshard(self):
        if not self.gathering and not self.unit.unsharded:
            self.unit.start_unshard()
            self.gathering = True

    def unshard(self):
        """Gathers (or waits for the prefetch); the parameters' storage holds the full values."""
        self.gathering = False
        self.unit.gather()
        if not self.attached:
            for (owner, name), p in zip(self.slots, self.params):
                owner.__dict__[name] = p
            self.attached = True

    def reshard(self, keep_for_backward=False):
        """Frees the full parameters (keep_for_backward: but the 1/k slice of reshard_after_forward=k)."""
        if self.gathering:  # a prefetch nobody used: let it land (the engine writes into the unit)
            self.gathering = False
            self.unit.gather()
        self._detach_attributes()
        self.unit.reshard(keep_for_backward)

    def _detach_attributes(self):
        for owner, name in self.slots:
            owner.__dict__[name] = None  # the parameter lives on in self.params, its storage empty
        self.attached = False

    # --- backward ---
    def pre_backward(self):
        """Before the unit's backward reads its parameters (the hook on its forward's outputs, or the
        forward a checkpoint reruns in backward): gather them and start the prefetches behind it."""
        if self.training_state is TrainingState.PRE_BACKWARD:
            return
        ctx = self.ctx
        ctx.begin_backward()
        self.training_state = TrainingState.PRE_BACKWARD
        prefetch = ctx.schedule.pre_backward(self.index, self.prefetch)
        self.prefetches_used += self.gathering
        self.start_unshard()  # its own all-gather first, then the prefetches behind it
        for index in prefetch:
            ctx.units[index].start_unshard()
        self.unshard()
        self.unit.arm_grads()  # every trainable parameter's gradient is pending

    def post_backward(self):
        """All of the unit's gradients are in: free the full parameters and start the reduce-scatter."""
        self.reshard()  # also drops a slice reshard_after_forward=k kept that backward did not gather
        if self.training_state is TrainingState.PRE_BACKWARD:
            self.training_state = TrainingState.POST_BACKWARD
        self.unit.disarm_grads()
        if not self.unit.has_unsharded_grads:  # no gradient in this backward nor in one without sync
            return
        start, finish_first = self.ctx.schedule.post_backward(self.index, self.requires_sync)
        if not start:
            return  # sync off: the full gradients accumulate until a backward with sync on
        if self.shard.grad is None:  # zero_grad(set_to_none=True) dropped the previous gradient: the
            self.unit.discard_grad_shard()  # reduce writes the shard (no zeroing, no add)
        if finish_first >= 0:  # one reduce-scatter in flight: it overlapped this unit's backward
            self.ctx.units[finish_first].finish_reduce()
        self.unit.start_reduce_grads()

    def finish_reduce(self):
        self.unit.finish_reduce_grads()
        self.shard.grad = self.grad_view

    def root_context(self):
        if self.root_ctx is None:
            self.root_ctx = RootContext(self)
        return self.root_ctx
