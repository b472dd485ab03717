"""fully_shard with MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the all-gather
carries bfloat16, torch computes in bfloat16 (inputs cast, outputs bfloat16 unless output_dtype), the
gradients are averaged in float32 into float32 shards that the optimizer steps. One process doing the
same casts (each rank's micro-batch through a bfloat16 copy of the float32 weights, the bfloat16
gradients averaged in float32) takes the same steps."""
import copy

import torch
import torch.distributed as dist

from compare import assert_parameters_match
from spawn import main

STEPS = 3
ROWS = 4  # per rank
BF16 = torch.bfloat16


def make_model():
    torch.manual_seed(31)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batches(n):
    g = torch.Generator().manual_seed(37)
    return [(torch.randn(n * ROWS, 6, generator=g), torch.randn(n * ROWS, 3, generator=g)) for _ in range(STEPS)]


def reference_step(reference, opt, x, y, n):
    """Each rank's micro-batch through a bfloat16 copy; the gradients averaged in float32."""
    grads = [torch.zeros_like(p) for p in reference.parameters()]
    losses = []
    for r in range(n):
        low = copy.deepcopy(reference).to(BF16)
        rows = slice(r * ROWS, (r + 1) * ROWS)
        out = low(x[rows].to(BF16)).float()  # output_dtype=float32
        loss = torch.nn.functional.mse_loss(out, y[rows])
        loss.backward()
        losses.append(loss.item())
        for g, p in zip(grads, low.parameters()):
            g.add_(p.grad.float())
    opt.zero_grad()
    for g, p in zip(grads, reference.parameters()):
        p.grad = g / n
    opt.step()
    return sum(losses) / n


def bf16_compute_fp32_reduce(rank, n):
    import fsdp_runtime

    reference = make_model()
    model = copy.deepcopy(reference)
    policy = fsdp_runtime.MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=torch.float32)
    fsdp_runtime.fully_shard(model[0], mp_policy=policy)
    fsdp_runtime.fully_shard(model, mp_policy=fsdp_runtime.MixedPrecisionPolicy(
        param_dtype=BF16, reduce_dtype=torch.float32, output_dtype=torch.float32))
    assert model._fsdp_shard.dtype == torch.float32  # the master shard stays float32
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    for step, (x, y) in enumerate(batches(n)):
        ref_loss = reference_step(reference, ref_opt, x, y, n)
        out = model(x[rows])
        assert out.dtype == torch.float32, out.dtype
        inner = model[0]._fsdp_state
        assert inner.compute == [], "the inner unit did not reshard after forward"
        loss = torch.nn.functional.mse_loss(out, y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().reshape(1)
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        assert abs(total.item() - ref_loss) <= 1e-5 * abs(ref_loss), (step, total.item(), ref_loss)
    assert_parameters_match(model, reference)
    # Inside the model the layers computed in bfloat16.
    with torch.no_grad():
        seen = []
        handle = model[2].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
        model(x[rows])
        handle.remove()
    assert seen == [BF16], seen
    if rank == 0:
        print(f"bfloat16 compute, float32 reduce at {n} ranks: {STEPS} steps equal the 1-process run that casts "
              "the same way", flush=True)


def refuses_other_dtypes(rank, n):
    import fsdp_runtime

    try:
        fsdp_runtime.fully_shard(torch.nn.Linear(2, 2),
                                 mp_policy=fsdp_runtime.MixedPrecisionPolicy(param_dtype=torch.float64))
    except ValueError as e:
        assert "param_dtype" in str(e), e
    else:
        raise AssertionError("param_dtype=float64 was accepted")


if __name__ == "__main__":
    main(bf16_compute_fp32_reduce, refuses_other_dtypes)
