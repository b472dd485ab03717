"""fully_shard composes with torch.utils.checkpoint and with the user's hooks (the parameters are the
module's own nn.Parameters, gathered in place; no saved-tensor hooks of the front end's): N ranks with
some blocks checkpointed (non-reentrant over two units at once, reentrant over one) train as one
process training the unsharded model on the whole batch (float32, 1e-5 relative); a forward hook sees
the full parameters (the same objects every step), a parameter hook the full gradient."""
import copy

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from compare import assert_parameters_match, train_against_reference
from spawn import main

STEPS = 4
GLOBAL_BATCH = 12  # divisible by 1-4 ranks
DIM = 6


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(DIM, 10)
        self.down = torch.nn.Linear(10, DIM)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(x)))


class Net(torch.nn.Module):
    """Blocks 0-1 under one non-reentrant checkpoint, block 2 under a reentrant one, block 3 plain."""

    def __init__(self, checkpointed):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
        self.out = torch.nn.Linear(DIM, 3)
        self.checkpointed = checkpointed

    def forward(self, x):
        b = self.blocks
        if self.checkpointed:
            x = checkpoint(lambda h: b[1](b[0](h)), x, use_reentrant=False)
            x = checkpoint(b[2], x, use_reentrant=True)
        else:
            x = b[2](b[1](b[0](x)))
        return self.out(b[3](x))


def make_pair(fsdp_runtime):
    torch.manual_seed(7)
    reference = Net(checkpointed=False)
    sharded = copy.deepcopy(reference)
    sharded.checkpointed = True
    for block in sharded.blocks:
        fsdp_runtime.fully_shard(block)
    fsdp_runtime.fully_shard(sharded)
    return reference, sharded


def batches():
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(GLOBAL_BATCH, DIM, generator=g), torch.randn(GLOBAL_BATCH, 3, generator=g))
            for _ in range(STEPS)]


def checkpoint_matches_plain(rank, n):
    import fsdp_runtime

    reference, sharded = make_pair(fsdp_runtime)
    train_against_reference(reference, sharded, batches(), rank, n)
    assert_parameters_match(sharded, reference, "with torch.utils.checkpoint")
    if rank == 0:
        print(f"fully_shard under torch.utils.checkpoint (reentrant and not) at {n} ranks: {STEPS} steps equal "
              "plain torch", flush=True)


def user_hooks_see_full(rank, n):
    import fsdp_runtime

    reference, sharded = make_pair(fsdp_runtime)
    sharded.checkpointed = reference.checkpointed = False
    block, ref_block = sharded.blocks[1], reference.blocks[1]
    seen = {"weights": [], "grads": [], "grad_outputs": []}

    def forward_hook(module, args, output):
        seen["weights"].append(module.up.weight)
        if len(seen["weights"]) == 1:  # the parameter is the module's own, the same every step: a hook on it stays
            module.down.weight.register_hook(lambda g: seen["grads"].append(g.clone()))
        assert torch.equal(module.up.weight.detach(), ref_block.up.weight.detach()), "forward hook: not the full weight"

    def backward_hook(module, grad_input, grad_output):
        seen["grad_outputs"].append(grad_output[0].clone())

    block.register_forward_hook(forward_hook)
    block.register_full_backward_hook(backward_hook)
    ref_grad_outputs = []
    ref_block.register_full_backward_hook(lambda m, gi, go: ref_grad_outputs.append(go[0].clone()))
    rows = GLOBAL_BATCH // n
    for x, y in batches()[:2]:
        mine = slice(rank * rows, (rank + 1) * rows)
        # The reference runs this rank's rows: the gradient a rank's hook sees is its own, before the average.
        reference.zero_grad()
        torch.nn.functional.mse_loss(reference(x[mine]), y[mine]).backward()
        torch.nn.functional.mse_loss(sharded(x[mine]), y[mine]).backward()
        assert block.down.weight is None, "the unit kept its parameters after backward"
        got = seen["grads"][-1]
        want = ref_block.down.weight.grad
        assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-6), "parameter hook"
        assert torch.allclose(seen["grad_outputs"][-1], ref_grad_outputs[-1], rtol=1e-5, atol=1e-6), "backward hook"
        dist.barrier()  # no optimizer step: the reference stays the weights the forward hook compares to
    assert len(seen["weights"]) == 2 and all(w is seen["weights"][0] for w in seen["weights"]), \
        "the module's parameter is not the same object every step"
    if rank == 0:
        print(f"user hooks at {n} ranks: forward hooks see the full parameters (one object), parameter and "
              "backward hooks the full gradients", flush=True)


if __name__ == "__main__":
    main(checkpoint_matches_plain, user_hooks_see_full)
