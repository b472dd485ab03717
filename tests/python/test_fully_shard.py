"""fully_shard over the runtime's FSDP units: N ranks, each on its slice of the global batch, train a
tiny model exactly as one process training it unsharded on the whole batch (float32, 1e-5 relative),
and between steps each rank holds only its 1/N shard (with FSDP2's dim-0 padding)."""
import copy

import torch
import torch.distributed as dist

from compare import assert_parameters_match, train_against_reference
from spawn import main

STEPS = 6
GLOBAL_BATCH = 12  # divisible by 1-4 ranks


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 7), torch.nn.Tanh(),
                               torch.nn.Linear(7, 3))


def batches():
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(GLOBAL_BATCH, 5, generator=g), torch.randn(GLOBAL_BATCH, 3, generator=g))
            for _ in range(STEPS)]


def sharded_matches_single(rank, n):
    import fsdp_runtime

    reference = make_model()
    sharded = copy.deepcopy(reference)
    for layer in sharded:
        if isinstance(layer, torch.nn.Linear):
            fsdp_runtime.fully_shard(layer)
    fsdp_runtime.fully_shard(sharded)
    full_numel = sum(p.numel() for p in reference.parameters())
    held = sum(p.numel() for p in sharded.parameters())
    # Each Linear's rows split over n ranks, rounded up: about 1/n of the parameters.
    expected = sum(-(-m.weight.shape[0] // n) * (m.weight.shape[1] + 1) for m in reference
                   if isinstance(m, torch.nn.Linear))
    assert held == expected, (held, expected, full_numel)

    train_against_reference(reference, sharded, batches(), rank, n)

    assert_parameters_match(sharded, reference)
    if rank == 0:
        print(f"fully_shard at {n} ranks: {STEPS} steps equal the 1-process run; "
              f"{held} of {full_numel} parameters held per rank", flush=True)


class PartlyUsed(torch.nn.Module):
    """`spare` is in the unit but forward uses it only while `use_spare`: when it is left out its hooks
    never fire, and the unit must still reduce (when backward ends), reshard, and give it a zero gradient,
    also in a buffer that held the previous step's gradients."""

    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 6)
        self.spare = torch.nn.Linear(4, 6)
        self.use_spare = False

    def forward(self, x):
        y = self.used(x)
        return y + self.spare(x) if self.use_spare else y


def unused_parameters_still_reduce(rank, n):
    import fsdp_runtime

    torch.manual_seed(3)
    reference = PartlyUsed()
    model = fsdp_runtime.fully_shard(copy.deepcopy(reference))
    x = torch.randn(n * 2, 4, generator=torch.Generator().manual_seed(5))
    # Step 1 uses both layers, step 2 only `used`: its full-gradient buffer may be step 1's, reused.
    for use_spare in (True, False):
        model.use_spare = reference.use_spare = use_spare
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        model(x[rank * 2:(rank + 1) * 2]).sum().backward()
        reference(x).sum().mul(1.0 / n).backward()  # the average over ranks of each rank's sum
        shard = model._fsdp_shard
        assert shard.grad is not None and model.used.weight is None, "the unit did not reduce and reshard"
        # The gradient shard, gathered, is the reference's gradient (zero for the unused layer).
        full = torch.empty(shard.numel() * n)
        dist.all_gather_into_tensor(full, shard.grad)
        state = model._fsdp_state
        grads = {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in reference.named_parameters()}
        # Rebuild the unit's layout: each parameter's dim-0 rows split over n ranks with padding.
        chunk = shard.numel()
        offset = 0
        for name in state.names:
            g = grads[name]
            rows_per_rank = -(-g.shape[0] // n)
            row_numel = g[0].numel()
            got = torch.cat([full[r * chunk + offset:r * chunk + offset + rows_per_rank * row_numel] for r in range(n)])
            got = got[:g.numel()].view_as(g)
            assert torch.allclose(got, g, rtol=1e-5, atol=1e-6), (use_spare, name, got, g)
            offset += rows_per_rank * row_numel


if __name__ == "__main__":
    main(sharded_matches_single, unused_parameters_still_reduce)
