"""Per-root step state and the module hooks that drive the units (FSDP2's FSDPState and its hooks).

The root of a forward is the outermost unit whose forward runs while no other unit's is running; it is
decided anew for every forward (a block called alone is the root of that call, and not of the next
forward of the model around it). The root's RootContext holds what the units of that forward and its
backward share: the order they ran in (what the prefetches follow), the units the backward touched,
and the one reduce-scatter in flight.

Lifecycle of one unit in a step:
  forward pre-hook   all-gathers (waits; prefetched ones were started earlier), the module's
                     attributes become the unit's persistent parameters, and the all-gathers of the
                     `prefetch` units that followed it in the previous forward start;
  forward post-hook  hooks the output tensors (its pre-backward), then with reshard_after_forward
                     frees the full parameters (True), keeps a 1/k slice (int k) or everything (False);
                     the root keeps its parameters, as FSDP2 does;
  pre-backward       (the first gradient of one of its outputs, or a forward that torch.utils.checkpoint
                     reruns inside backward) gathers the unit again and prefetches those before it;
  gradients          each parameter's lands in the unit's full-gradient buffer; after the last one the
                     unit frees its parameters and starts the reduce-scatter; at most one is in flight;
  end of backward    (a callback queued on the autograd engine) units with parameters backward never
                     reached reduce, the last reduce-scatter finishes, every unit reshards.
"""
import enum
import threading

import torch

_forward = threading.local()  # .ctx: the RootContext whose forward is running on this thread


class TrainingState(enum.Enum):
    """FSDP2's TrainingState for one unit."""
    IDLE = "idle"                    # between its forward and its backward, or between steps
    FORWARD = "forward"              # its forward is running
    PRE_BACKWARD = "pre_backward"    # gathered for backward; gradients arriving
    POST_BACKWARD = "post_backward"  # its gradients are in and reducing


class RootContext:
    def __init__(self, root):
        self.root = root             # the UnitState whose forward is (was) outermost
        self.depth = 0               # units whose forward is running (nested)
        self.order = []              # units in the order this forward ran them
        self.last_order = []         # ... and the previous forward: what forward prefetches follow
        self.post_order = []         # units in the order their forward ended: backward runs it reversed
        self.in_backward = []        # units this backward gathered
        self.backward_started = False
        self.pending_reduce = None   # the unit whose reduce-scatter is in flight

    def begin_backward(self):
        if not self.backward_started:
            self.backward_started = True
            torch.autograd.Variable._execution_engine.queue_callback(self.finish_backward)

    def finish_backward(self):
        self.backward_started = False
        units, self.in_backward = self.in_backward, []
        for state in units:
            state.post_backward()
        if self.pending_reduce is not None:
            self.pending_reduce.finish_reduce()
            self.pending_reduce = None
        for state in self.order:
            state.reshard()
            state.training_state = TrainingState.IDLE

    def reduce(self, state):
        """Starts `state`'s reduce-scatter after finishing the one in flight (it overlapped backward)."""
        previous, self.pending_reduce = self.pending_reduce, state
        if previous is not None:
            previous.finish_reduce()
        state.unit.start_reduce_grads()

    @staticmethod
    def prefetch(order, state, direction):
        """Starts the all-gathers of the `state.prefetch` units after `state` in `order` (direction +1:
        forward, in pre-forward order) or before it (-1: backward, in post-forward order, where the root
        that wraps the others comes last)."""
        if state not in order:
            return
        at = order.index(state)
        for k in range(1, state.prefetch + 1):
            nxt = at + direction * k
            if nxt < 0 or nxt >= len(order):
                break
            order[nxt].start_unshard()


def _cast_floats(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floats(v, dtype) for k, v in value.items()}
    return value


def _grad_tensors(value):
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _grad_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _grad_tensors(v)


def _recomputing(state):
    """A forward of a unit whose root is in backward: torch.utils.checkpoint rerunning it."""
    return state.ctx is not None and state.ctx.backward_started and torch.is_grad_enabled()


def pre_forward(state, args):
    cast = state.param_dtype is not None and state.mp_policy.cast_forward_inputs
    if _recomputing(state):  # its backward follows: gather it as its pre-backward would
        state.pre_backward()
        return _cast_floats(args, state.param_dtype) if cast else None
    ctx = getattr(_forward, "ctx", None)
    if ctx is not None and ctx.root is state:  # its previous forward raised (a root never nests in itself)
        ctx.depth, ctx = 0, None
    if ctx is None:  # the outermost unit of this forward: its root
        ctx = state.root_context()
        _forward.ctx = ctx
        ctx.order, ctx.post_order = [], []
    state.ctx = ctx
    ctx.depth += 1
    ctx.order.append(state)
    state.training_state = TrainingState.FORWARD
    state.module._forward_hooks.move_to_end(state.post_hook_id)  # after the user's hooks: they see full parameters
    state.prefetches_used += state.gathering
    state.start_unshard()
    ctx.prefetch(ctx.last_order, state, +1)
    state.unshard()
    return _cast_floats(args, state.param_dtype) if cast else None


def post_forward(state, output):
    if state.training_state is not TrainingState.FORWARD:  # a checkpoint's rerun: backward comes next
        return _output(state, output)
    ctx = state.ctx
    ctx.depth -= 1
    ctx.post_order.append(state)
    if ctx.depth == 0:
        _forward.ctx = None
        for unit in ctx.last_order:  # forward prefetched a unit this forward did not run
            if unit.gathering:
                unit.reshard()
        ctx.last_order = list(ctx.order)
    state.training_state = TrainingState.IDLE
    if not (torch.is_grad_enabled() and state.shard.requires_grad):
        state.reshard()  # nothing will run backward
    else:
        for t in _grad_tensors(output):
            t.register_hook(lambda grad: state.pre_backward())
        if state.reshard_after_forward is not False and state is not ctx.root:
            state.reshard(keep_for_backward=state.reshard_after_forward is not True)
    return _output(state, output)


def _output(state, output):
    if state.mp_policy.output_dtype is not None:
        return _cast_floats(output, state.mp_policy.output_dtype)
    return None
