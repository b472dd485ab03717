"""fully_shard with gradient accumulation and clipping: set_requires_gradient_sync(False) on all but the
last micro-batch of a step (no reduce-scatter: the full gradients accumulate in the units), then
fsdp_runtime.clip_grad_norm_ over the shards; N ranks train as one process accumulating the same
micro-batches and clipping with torch.nn.utils.clip_grad_norm_ (loss, norm, parameters: 1e-5)."""
import copy

import torch
import torch.distributed as dist

from compare import assert_parameters_match
from spawn import main

STEPS = 4
MICRO = 3          # micro-batches per step
GLOBAL_BATCH = 12  # per micro-batch, divisible by 1-4 ranks
MAX_NORM = {2.0: 0.3, float("inf"): 0.02}  # below the gradients' norms: clipping scales them


def make_model():
    torch.manual_seed(17)
    return torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4))


def micro_batches():
    g = torch.Generator().manual_seed(23)
    return [[(torch.randn(GLOBAL_BATCH, 5, generator=g), torch.randn(GLOBAL_BATCH, 4, generator=g))
             for _ in range(MICRO)] for _ in range(STEPS)]


def accumulate_and_clip(rank, n, norm_type):
    import fsdp_runtime

    max_norm = MAX_NORM[norm_type]
    reference = make_model()
    model = copy.deepcopy(reference)
    fsdp_runtime.fully_shard(model[0])
    fsdp_runtime.fully_shard(model)  # the root takes model[2]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    rows = GLOBAL_BATCH // n
    mine = slice(rank * rows, (rank + 1) * rows)
    for step, micros in enumerate(micro_batches()):
        ref_opt.zero_grad()
        opt.zero_grad(set_to_none=True)
        ref_loss = loss = 0.0
        for m, (x, y) in enumerate(micros):
            l = torch.nn.functional.mse_loss(reference(x), y) / MICRO
            l.backward()
            ref_loss += l.item()

            last = m == MICRO - 1
            model.set_requires_gradient_sync(last)
            l = torch.nn.functional.mse_loss(model(x[mine]), y[mine]) / MICRO
            l.backward()
            loss += l.item()
            if not last:
                # Nothing reduced yet: the gradient shards are untouched, the full gradients held.
                assert all(p.grad is None for p in model.parameters()), step
                assert fsdp_runtime.memory(model)["unsharded_grads"][0] > 0
        assert fsdp_runtime.memory(model)["unsharded_grads"][0] == 0
        ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm, norm_type)
        norm = fsdp_runtime.clip_grad_norm_(model, max_norm, norm_type)
        assert ref_norm > max_norm, (ref_norm, max_norm)
        assert abs(norm.item() - ref_norm.item()) <= 1e-5 * ref_norm.item(), (step, norm, ref_norm)
        ref_opt.step()
        opt.step()
        total = torch.tensor([loss])
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        assert abs(total.item() - ref_loss) <= 1e-5 * abs(ref_loss), (step, total, ref_loss)

    assert_parameters_match(model, reference)
    if rank == 0:
        print(f"{n} ranks, {STEPS} steps of {MICRO} micro-batches, clip_grad_norm_({max_norm}, {norm_type}): "
              f"equal to the 1-process run (last norm {norm.item():.6f})", flush=True)


def l2(rank, n):
    accumulate_and_clip(rank, n, 2.0)


def linf(rank, n):
    accumulate_and_clip(rank, n, float("inf"))


if __name__ == "__main__":
    main(l2, linf)
