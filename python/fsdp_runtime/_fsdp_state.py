"""Per-root step state and the module hooks that drive the units (FSDP2's FSDPState and its hooks).

The root of a forward is the outermost unit whose forward runs while no other unit's is running; it is
decided anew for every forward (a block called alone is the root of that call, and not of the next
forward of the model around it). The root's RootContext holds the runtime's FSDP schedule
(_C.FsdpSchedule, runtime/fsdp_schedule.h: the one FsdpModel follows), which decides what the units of
that forward and its backward do: whose all-gathers to start ahead (forward in the previous forward's
order, backward in this forward's post-forward order reversed, both recorded by the schedule), who keeps
its parameters after forward, the one reduce-scatter in flight, whether a backward reduces at all.
This file only acts on those answers: hooks, torch tensors, autograd callbacks.

Lifecycle of one unit in a step:
  forward pre-hook   all-gathers (waits; prefetched ones were started earlier), the module's
                     attributes become the unit's persistent parameters, and the all-gathers the
                     schedule names start;
  forward post-hook  hooks the output tensors (its pre-backward), then frees the full parameters, keeps
                     a 1/k slice or keeps everything, as the schedule says (the root keeps them);
  pre-backward       (the first gradient of one of its outputs, or a forward that torch.utils.checkpoint
                     reruns inside backward) gathers the unit again and starts the schedule's prefetches;
  gradients          each parameter's lands in the unit's full-gradient buffer; after the last one the
                     unit frees its parameters and starts the reduce-scatter after finishing the one in
                     flight, or keeps its gradients (sync off);
  end of backward    (a callback queued on the autograd engine) units with parameters backward never
                     reached reduce, the last reduce-scatter finishes, every unit reshards.
"""
import enum
import threading

import torch

from ._C import AfterForward, FsdpSchedule

_forward = threading.local()  # .ctx: the RootContext whose forward is running on this thread
_KEEP, _KEEP_SLICE = int(AfterForward.KEEP), int(AfterForward.KEEP_SLICE)  # what post_forward answers


class TrainingState(enum.Enum):
    """FSDP2's TrainingState for one unit."""
    IDLE = "idle"                    # between its forward and its backward, or between steps
    FORWARD = "forward"              # its forward is running
    PRE_BACKWARD = "pre_backward"    # gathered for backward; gradients arriving
    POST_BACKWARD = "post_backward"  # its gradients are in and reducing


class RootContext:
    def __init__(self, root):
        self.root = root                 # the UnitState whose forward is (was) outermost
        self.schedule = FsdpSchedule()   # decides; records the order of every forward
        self.units = {}                  # unit index -> UnitState that ran under this root
        self.callback_queued = False     # finish_backward is queued on the autograd engine

    def begin_backward(self):
        if not self.callback_queued:  # the root's first pre-backward: the end of backward, once
            self.callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self.finish_backward)

    def abandon_backward(self):
        """A backward that raised: torch drops the callbacks queued for its end, so the next forward
        cleans up what it left. Gradients the reduce-scatters had written into the units' shards before
        it raised stay (plain torch keeps the .grad a failed backward wrote); the rest are dropped: the
        reduce-scatter in flight once it finished (its result would land after the user's zero_grad),
        the gradients of units whose backward did not finish, and any held under
        set_requires_gradient_sync(False). Every unit that ran under this root reshards (one that has
        run under another root since is that root's). The context counts as in backward until all of
        this is done: an error on the way (a lost peer) comes out of the next forward again."""
        self.schedule.finish_backward()
        for state in self.units.values():
            if state.ctx is not self:
                continue
            if state.training_state is TrainingState.PRE_BACKWARD:  # armed for gradients that never came
                state.unit.disarm_grads()
            state.unit.drop_unreduced_grads()
            state.reshard()
            state.training_state = TrainingState.IDLE
        self.callback_queued = False

    def finish_backward(self):
        self.callback_queued = False
        for index in self.schedule.backward_units:
            state = self.units[index]
            if state.training_state is TrainingState.PRE_BACKWARD:  # a gradient never came
                state.post_backward()
        pending = self.schedule.finish_backward()
        if pending >= 0:
            self.units[pending].finish_reduce()
        for index in self.schedule.order:
            state = self.units[index]
            # A unit whose post-backward ran holds nothing unless a prefetch gathered it since.
            if state.training_state is not TrainingState.POST_BACKWARD or state.attached or state.gathering:
                state.reshard()
            state.training_state = TrainingState.IDLE


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


_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)  # torch >= 2.1
_probe = None  # torch 1.13: a node to ask the engine about, made here (inside a checkpoint's recompute
if _graph_task_id is None:  # it would be one more saved tensor)
    with torch.inference_mode(False), torch.enable_grad():
        _probe = torch.zeros(1, requires_grad=True).sum().grad_fn
    assert _probe is not None


def _in_backward():
    """Whether the autograd engine is running a backward on this thread."""
    if _graph_task_id is not None:
        return _graph_task_id() != -1
    try:
        torch._C._will_engine_execute_node(_probe)
    except RuntimeError:  # "... should only be called during the backward pass"
        return False
    return True


def _recomputing(state):
    """A forward of a unit whose root is in backward: torch.utils.checkpoint rerunning it."""
    return state.ctx is not None and state.ctx.callback_queued and torch.is_grad_enabled()


def pre_forward(state, args):
    cast = state.param_dtype is not None and state.mp_policy.cast_forward_inputs
    if state.ctx is not None and state.ctx.callback_queued and not _in_backward():
        state.ctx.abandon_backward()  # its root's backward raised: the end torch never ran
    if _recomputing(state):  # its backward follows: gather it as its pre-backward would
        state.pre_backward()
        return _cast_floats(args, state.param_dtype) if cast else None
    if state.training_state is TrainingState.PRE_BACKWARD:  # left taking gradients by a backward whose end
        state.unit.disarm_grads()                             # raised: the next backward arms it anew
    ctx = getattr(_forward, "ctx", None)
    if ctx is None:  # the outermost unit of this forward: its root (a root whose previous forward raised
        ctx = state.root_context()  # finds its context still open: the schedule opens it anew)
        _forward.ctx = ctx
    state.ctx = ctx
    ctx.units[state.index] = state
    state.training_state = TrainingState.FORWARD
    state.module._forward_hooks.move_to_end(state.post_hook_id)  # after the user's hooks: they see full parameters
    prefetch = ctx.schedule.pre_forward(state.index, state.prefetch)
    state.prefetches_used += state.gathering
    state.start_unshard()
    for index in prefetch:
        ctx.units[index].start_unshard()
    state.unshard()
    return _cast_floats(args, state.param_dtype) if cast else None


def post_forward(state, output):
    if state.training_state is not TrainingState.FORWARD:  # a checkpoint's rerun: backward comes next
        return _output(state, output)
    ctx = state.ctx
    backward_follows = torch.is_grad_enabled() and state.shard.requires_grad
    after, ended = ctx.schedule.post_forward(state.index, state.reshard_policy, backward_follows)
    if ended:
        _forward.ctx = None
        for index in ctx.schedule.unused_prefetches():  # prefetched along the previous order, not run
            if ctx.units[index].gathering:
                ctx.units[index].reshard()
    state.training_state = TrainingState.IDLE
    if backward_follows:
        for t in _grad_tensors(output):
            t.register_hook(lambda grad: state.pre_backward())
    if after != _KEEP:
        state.reshard(keep_for_backward=after == _KEEP_SLICE)
    return _output(state, output)


def _output(state, output):
    if state.mp_policy.output_dtype is not None:
        return _cast_floats(output, state.mp_policy.output_dtype)
    return None
