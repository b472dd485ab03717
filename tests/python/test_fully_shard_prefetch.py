"""fully_shard's prefetch: each unit starts the next units' all-gathers in forward (in the order the
previous forward ran them) and the previous units' in backward, so they are on their way when needed.
With prefetch 0, 1 and 2 the gradients are bit-identical and training matches one process (1e-5);
with prefetch > 0 the units find their all-gathers already started. The overlap meter sees every unit's
all-gathers and reduce-scatters (how much of them is hidden is timing: a benchmark's figure)."""
import copy

import torch

from compare import ChainNet, assert_parameters_match
from spawn import main

STEPS = 3
ROWS = 3  # per rank


def batches(n):
    g = torch.Generator().manual_seed(43)
    return [(torch.randn(n * ROWS, 5, generator=g), torch.randn(n * ROWS, 2, generator=g)) for _ in range(STEPS)]


def train(rank, n, reference, prefetch):
    import fsdp_runtime

    model = copy.deepcopy(reference)
    for layer in model.inner:
        fsdp_runtime.fully_shard(layer, prefetch=prefetch)
    fsdp_runtime.fully_shard(model, prefetch=prefetch)
    fsdp_runtime.clear_overlap(model)  # the groups (and their meter) are shared with the other runs' models
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    grads = []
    for x, y in batches(n):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        grads.append([m._fsdp_shard.grad.clone() for m in model.modules() if hasattr(m, "_fsdp_state")])
        opt.step()
    used = sum(m._fsdp_state.prefetches_used for m in model.modules() if hasattr(m, "_fsdp_state"))
    return model, grads, used, fsdp_runtime.overlap(model)


def prefetch_depths(rank, n):
    reference = ChainNet(41)
    runs = {p: train(rank, n, reference, p) for p in (0, 1, 2)}
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(n):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    for p, (model, grads, used, hidden) in runs.items():
        if n > 1:
            assert set(hidden) == {"all_gather", "reduce_scatter"}, (p, hidden)
            assert all(0.0 <= f <= 1.0 for f in hidden.values()), (p, hidden)
        for step, (mine, base) in enumerate(zip(grads, runs[0][1])):
            for a, b in zip(mine, base):
                assert torch.equal(a, b), (p, step, (a - b).abs().max())
        assert_parameters_match(model, reference, f"prefetch {p}")
        # Forward: from the second step on, each inner unit was prefetched by the one before it (the
        # root first); backward: at least the units the root and the last inner unit prefetch.
        expected = 0 if p == 0 else (STEPS - 1) * len(reference.inner) + STEPS * 2
        assert (used == 0) if p == 0 else (used >= expected), (p, used, expected)
    if rank == 0:
        print(f"prefetch 0/1/2 at {n} ranks: same gradients, all-gathers found started: "
              f"{[runs[p][2] for p in (0, 1, 2)]}, all-gather time hidden: "
              f"{[round(runs[p][3].get('all_gather', 0.0), 2) for p in (0, 1, 2)]}", flush=True)


if __name__ == "__main__":
    main(prefetch_depths)
