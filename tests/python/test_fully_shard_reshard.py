"""fully_shard's reshard_after_forward: True frees the inner units' full parameters between forward and
backward (the runtime's memory tracker holds only the root's), False keeps all of them, an integer k
keeps a 1/k slice per inner unit; the gradients are bit-identical whatever the choice, and training
matches one process training the unsharded model on the whole batch (1e-5)."""
import copy

import torch
import torch.distributed as dist

from compare import assert_parameters_match
from spawn import main

STEPS = 3
GLOBAL_BATCH = 12
F32 = 4  # bytes


class Net(torch.nn.Module):
    """Two inner units (Linear layers) and a root that owns a parameter of its own (`head`)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(21)
        self.inner = torch.nn.ModuleList([torch.nn.Linear(6, 10), torch.nn.Linear(10, 8)])
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        for layer in self.inner:
            x = torch.tanh(layer(x))
        return self.head(x)


def batches():
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(GLOBAL_BATCH, 6, generator=g), torch.randn(GLOBAL_BATCH, 3, generator=g))
            for _ in range(STEPS)]


def padded_numel(linear, n):
    """A unit's full (padded) size: dim 0 rounded up to a multiple of n."""
    return sum(-(-p.shape[0] // n) * n * (p[0].numel() if p.dim() > 1 else 1) for p in linear.parameters())


def train(rank, n, reference, reshard):
    """Returns (model, per-step gradient shards, unsharded/kept bytes after each forward, peaks)."""
    import fsdp_runtime

    model = copy.deepcopy(reference)
    for layer in model.inner:
        fsdp_runtime.fully_shard(layer, reshard_after_forward=reshard, prefetch=0)  # peaks of one unit
    fsdp_runtime.fully_shard(model, reshard_after_forward=reshard, prefetch=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rows = GLOBAL_BATCH // n
    grads, after_forward, peaks = [], [], []
    for x, y in batches():
        mine = slice(rank * rows, (rank + 1) * rows)
        fsdp_runtime.reset_memory_peaks(model)
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        mem = fsdp_runtime.memory(model)
        after_forward.append((mem["unsharded_params"][0], mem["kept_params"][0]))
        opt.zero_grad()
        loss.backward()
        peaks.append(fsdp_runtime.memory(model)["unsharded_params"][1])
        grads.append([m._fsdp_shard.grad.clone() for m in model.modules() if hasattr(m, "_fsdp_state")])
        opt.step()
    return model, grads, after_forward, peaks


def reshard_choices(rank, n):
    reference = Net()
    # The full parameters torch sees are unpadded; the slice reshard_after_forward=k keeps is 1/k of
    # the padded all-gather buffer.
    inner = [sum(p.numel() for p in layer.parameters()) * F32 for layer in reference.inner]
    inner_padded = [padded_numel(layer, n) * F32 for layer in reference.inner]
    root = sum(p.numel() for p in reference.head.parameters()) * F32
    root_padded = padded_numel(reference.head, n) * F32
    choices = [True, False] + [k for k in range(1, n) if n % k == 0]
    runs = [(r, train(rank, n, reference, r)) for r in choices]  # a list: True == 1 as a dict key
    base = runs[1][1][1]  # reshard_after_forward=False's gradients

    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches():
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()

    for r, (model, grads, after_forward, peaks) in runs:
        # Between forward and backward: the root always keeps its parameters (FSDP2).
        if r is True:
            expect = (root, 0)
            peak = root + max(inner)   # backward re-gathers one inner unit at a time
        elif r is False:
            expect = (root + sum(inner), 0)
            peak = root + sum(inner)
        else:
            # The root keeps its parameters, and (as the runtime's last unit does) the slice too.
            expect = (root, (sum(inner_padded) + root_padded) // r)
            peak = root + max(inner)
        assert all(a == expect for a in after_forward), (r, after_forward, expect)
        assert all(p == peak for p in peaks), (r, peaks, peak)
        # Bit-identical gradients whatever the reshard choice.
        for step, (mine, theirs) in enumerate(zip(grads, base)):
            for a, b in zip(mine, theirs):
                assert torch.equal(a, b), (r, step, (a - b).abs().max())
        assert_parameters_match(model, reference, f"reshard_after_forward {r}")
    if rank == 0:
        print(f"reshard_after_forward at {n} ranks, full parameters held between forward and backward "
              "(unsharded + kept bytes) and their peak in the step: "
              + ", ".join(f"{r}: {run[2][0][0]} + {run[2][0][1]} B, peak {run[3][0]} B" for r, run in runs),
              flush=True)


def bad_reshard_value(rank, n):  # and a bad mesh
    import fsdp_runtime

    for bad in (0, n + 1, 1.5):
        if isinstance(bad, int) and bad > 0 and n % bad == 0:
            continue
        try:
            fsdp_runtime.fully_shard(torch.nn.Linear(2, 2), reshard_after_forward=bad)
        except ValueError as e:
            assert "reshard_after_forward" in str(e) and "divid" in str(e), e
        else:
            raise AssertionError(f"reshard_after_forward={bad} was accepted at {n} ranks")
    # A mesh that does not fill the group is refused by the job's rule (spec/job_spec.h), naming both degrees.
    try:
        fsdp_runtime.fully_shard(torch.nn.Linear(2, 2), mesh=(2, n))
    except ValueError as e:
        assert f"data_parallel_replicate_degree (2)" in str(e) and f"world size is {n}" in str(e), e
    else:
        raise AssertionError(f"mesh=(2, {n}) was accepted at {n} ranks")
    dist.barrier()


if __name__ == "__main__":
    main(reshard_choices, bad_reshard_value)
