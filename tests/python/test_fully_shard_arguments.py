"""fully_shard's arguments are checked by the job's rules (spec/, through _C) before anything changes: a
refused call leaves the module as it was (its class, its parameters, forward and backward), with the
rule's C++ text. And the root of a forward is decided per forward: a block called alone, the root of
that call, still reshards after its forward inside the model later, as after a forward that raised.
The gradient hooks (csrc/grad_watch.h) keep no unit alive; the sharding groups are split once per process
group (a collective that must not depend on when a rank's collector runs) and go with it; an error raised
by a unit's post-backward comes out of backward() as itself. A backward that raised (torch then drops the
callback queued for its end) leaves the model trainable: the retried step equals plain torch's."""
import copy
import gc
import importlib
import weakref

import torch
import torch.distributed as dist

from refusals import refused
from spawn import main


def refused_call_changes_nothing(rank, n):
    import fsdp_runtime

    torch.manual_seed(3)
    module = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    reference = copy.deepcopy(module)
    cls, params = type(module), dict(module.named_parameters())
    bad_calls = [
        (dict(prefetch=-1), "prefetch depth is -1"),
        (dict(prefetch=9), "prefetch depth is 9"),
        (dict(mesh=(2, n)), "data_parallel_replicate_degree (2)"),
        (dict(reshard_after_forward=n + 1), "must divide parallelism.data_parallel_shard_degree"),
        (dict(mp_policy=fsdp_runtime.MixedPrecisionPolicy(param_dtype=torch.float64)), "param_dtype 'float64'"),
        (dict(mp_policy=fsdp_runtime.MixedPrecisionPolicy(reduce_dtype=torch.int32)), "reduce_dtype 'int32'"),
    ]
    for kwargs, text in bad_calls:
        refused(lambda: fsdp_runtime.fully_shard(module[0], **kwargs), text, ValueError)
        assert type(module) is cls and not hasattr(module[0], "_fsdp_state"), kwargs
        assert dict(module.named_parameters()) == params, kwargs
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    module(x).sum().backward()
    reference(x).sum().backward()
    for name, p in module.named_parameters():
        ref = dict(reference.named_parameters())[name]
        assert torch.equal(p.detach(), ref.detach()) and torch.equal(p.grad, ref.grad), name
    dist.barrier()


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.fail = False
        self.fail_backward = False

    def forward(self, x):
        if self.fail:
            raise RuntimeError("this block's forward failed")
        z = self.lin(x)
        if self.fail_backward:  # raises inside the block's backward: after its pre-backward, before its gradients
            z.register_hook(_raise_in_backward)
        return torch.tanh(z)


def _raise_in_backward(grad):
    raise RuntimeError("this block's backward failed")


def root_decided_per_forward(rank, n):
    import fsdp_runtime

    torch.manual_seed(5)
    model = torch.nn.Sequential(Block(), Block(), torch.nn.Linear(4, 2))  # the root's own unit: the Linear
    reference = copy.deepcopy(model)
    for block in model[:2]:
        fsdp_runtime.fully_shard(block)
    fsdp_runtime.fully_shard(model)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(2))
    alone = model[0](x)  # model[0] is the root of this call: it keeps its parameters until its backward
    assert model[0].lin.weight is not None
    alone.sum().backward()
    assert model[0].lin.weight is None, "the block did not reshard after its backward"
    with torch.no_grad():
        assert torch.allclose(model[0](x), reference[0](x)) and model[0].lin.weight is None
    out = model(x)
    assert model[0].lin.weight is None, "a block once called alone kept its parameters inside the model"
    out.sum().backward()
    assert model[0].lin.weight is None and model[1].lin.weight is None
    assert torch.allclose(out, reference(x), rtol=1e-5, atol=1e-6)
    # A forward that raised inside the model: the root's next forward starts afresh and reshards its blocks.
    model[1].fail = True
    try:
        model(x)
    except RuntimeError:
        pass
    model[1].fail = False
    out = model(x)
    assert model[0].lin.weight is None and model[1].lin.weight is None, "a forward after a failed one kept parameters"
    from fsdp_runtime import _fsdp_state
    assert getattr(_fsdp_state._forward, "ctx", None) is None, "the failed forward's state is still open"
    out.sum().backward()
    assert torch.allclose(out, reference(x), rtol=1e-5, atol=1e-6)
    if rank == 0:
        print(f"fully_shard arguments at {n} ranks: refused calls change nothing; the root is per forward",
              flush=True)


def gradient_hooks_hold_nothing(rank, n):
    import fsdp_runtime

    def sharded():
        torch.manual_seed(7)
        model = torch.nn.Sequential(Block(), Block(), torch.nn.Linear(4, 2))
        for block in model[:2]:
            fsdp_runtime.fully_shard(block)
        fsdp_runtime.fully_shard(model)
        return model

    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(2))
    model = sharded()
    model(x).sum().backward()
    states = [weakref.ref(m._fsdp_state) for m in (model[0], model[1], model)]
    groups = weakref.ref(model[0]._fsdp_state.groups)
    del model
    gc.collect()
    assert all(s() is None for s in states), "a dropped fully_shard model's units are still alive"
    # Splitting is collective: the next model over the same group reuses the split, whenever (or whether)
    # each rank's collector ran, so the ranks' communicators stay in step.
    assert groups() is not None and sharded()[0]._fsdp_state.groups is groups(), "the sharding groups were split again"
    # ... and they go with their process group: the cache holds it weakly.
    api = importlib.import_module("fsdp_runtime.fully_shard")  # the module (the package exports the function)
    pg = dist.new_group(backend="fsdp")
    other = torch.nn.Linear(4, 2)
    fsdp_runtime.fully_shard(other, group=pg)
    other(x).sum().backward()
    assert pg in api._groups
    gone = weakref.ref(pg)
    del other
    dist.destroy_process_group(pg)
    del pg
    gc.collect()
    assert gone() is None, "the sharding-groups cache keeps a destroyed process group alive"

    model = sharded()

    def failing_post_backward():
        raise ValueError("post-backward of block 1 failed")
    model[1]._fsdp_state.post_backward = failing_post_backward
    refused(lambda: model(x).sum().backward(), "post-backward of block 1 failed", ValueError)
    dist.barrier()
    if rank == 0:
        print("fully_shard's gradient hooks keep no unit alive and pass a post-backward's error on", flush=True)


def failed_backward_is_retried(rank, n):
    """Block 0's backward raises after the head's, block 2's and block 1's reduce-scatters started (one still
    in flight) and block 0 was gathered and armed for its gradients. The next forward finishes what that
    backward left: the retried steps (zero_grad, forward, backward, step) equal plain torch's."""
    import fsdp_runtime

    torch.manual_seed(11)
    model = torch.nn.Sequential(Block(), Block(), Block(), torch.nn.Linear(4, 2))
    reference = copy.deepcopy(model)
    for block in model[:3]:
        fsdp_runtime.fully_shard(block)
    fsdp_runtime.fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(4))
    for m in (model, reference):
        m[0].fail_backward = True
        refused(lambda: m(x).sum().backward(), "this block's backward failed", RuntimeError)
        m[0].fail_backward = False
    assert model[1].lin.weight is None and model[0].lin.weight is not None, "block 0 was not gathered for backward"
    for step in range(3):
        outs = []
        for m, o in ((model, opt), (reference, ref_opt)):
            o.zero_grad()
            outs.append(m(x * (step + 1)))
            outs[-1].square().sum().backward()
            o.step()
        assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6), f"step {step}"
        assert all(b.lin.weight is None for b in model[:3]), f"step {step}: a block kept its parameters"
    with torch.no_grad():
        assert torch.allclose(model(x), reference(x), rtol=1e-5, atol=1e-6), "the weights differ after the steps"
    dist.barrier()
    if rank == 0:
        print("a backward that raised leaves a fully_shard model trainable: retried steps equal plain torch's",
              flush=True)


if __name__ == "__main__":
    main(refused_call_changes_nothing, root_decided_per_forward, gradient_hooks_hold_nothing,
         failed_backward_is_retried)
