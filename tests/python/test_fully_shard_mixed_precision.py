"""fully_shard with MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the all-gather
carries bfloat16, torch computes in bfloat16 (inputs cast, outputs bfloat16 unless output_dtype), the
gradients are averaged in float32 into float32 shards that the optimizer steps. One process doing the
same casts (each rank's micro-batch through a bfloat16 copy of the float32 weights, the bfloat16
gradients averaged in float32) takes the same steps.

With reduce_dtype None (FSDP2: the param dtype) the gradients are accumulated over micro-batches
without sync and averaged in bfloat16, against one process doing that in the same order, at the bar
bf16 runs meet (2e-2 relative); the full parameters torch computes on are the unit's own bfloat16
buffer (2 bytes an element: no float32 copy)."""
import copy

import torch
import torch.distributed as dist

from compare import assert_parameters_match
from spawn import main

STEPS = 3
ROWS = 4  # per rank
MICRO = 2  # micro-batches per step in the accumulation case
BF16 = torch.bfloat16
BF16_RTOL = 2e-2  # bf16 against its reference (test_train_vs_fsdp_train.py's bf16 bar)


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


def reference_bf16_reduce_step(reference, opt, micros, n):
    """FSDP2's reduce_dtype=None in one process: each rank's bfloat16 gradients summed in bfloat16 over
    its micro-batches, then averaged over the ranks (float32 partials, rounded once to bfloat16)."""
    acc = [[None] * len(list(reference.parameters())) for _ in range(n)]
    losses = []
    for x, y in micros:
        for r in range(n):
            low = copy.deepcopy(reference).to(BF16)
            rows = slice(r * ROWS, (r + 1) * ROWS)
            loss = torch.nn.functional.mse_loss(low(x[rows].to(BF16)).float(), y[rows]) / len(micros)
            loss.backward()
            losses.append(loss.item())
            for k, p in enumerate(low.parameters()):
                acc[r][k] = p.grad if acc[r][k] is None else (acc[r][k].float() + p.grad.float()).to(BF16)
    opt.zero_grad()
    for k, p in enumerate(reference.parameters()):
        p.grad = (sum(acc[r][k].float() for r in range(n)) / n).to(BF16).float()
    opt.step()
    return sum(losses) / n


def bf16_reduce_accumulated(rank, n):
    import fsdp_runtime

    reference = make_model()
    model = copy.deepcopy(reference)
    fsdp_runtime.fully_shard(model[0], mp_policy=fsdp_runtime.MixedPrecisionPolicy(param_dtype=BF16))
    fsdp_runtime.fully_shard(model, mp_policy=fsdp_runtime.MixedPrecisionPolicy(param_dtype=BF16,
                                                                                output_dtype=torch.float32))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rows = slice(rank * ROWS, (rank + 1) * ROWS)
    g = torch.Generator().manual_seed(41)
    root_numel = 16 * 3 + 3  # model[2], the parameters no inner unit took
    for step in range(STEPS):
        micros = [(torch.randn(n * ROWS, 6, generator=g), torch.randn(n * ROWS, 3, generator=g)) for _ in range(MICRO)]
        ref_loss = reference_bf16_reduce_step(reference, ref_opt, micros, n)
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for m, (x, y) in enumerate(micros):
            model.set_requires_gradient_sync(m == MICRO - 1)
            before = fsdp_runtime.memory(model)["unsharded_params"][0]
            out = model(x[rows])
            # The root keeps its full parameters after forward: model[2]'s, in bfloat16 (2 bytes each).
            held = fsdp_runtime.memory(model)["unsharded_params"][0] - before
            assert held == root_numel * 2, (held, root_numel)
            l = torch.nn.functional.mse_loss(out, y[rows]) / MICRO
            l.backward()
            loss += l.item()
            if m < MICRO - 1:
                assert all(p.grad is None for p in model.parameters()), "reduced without sync"
        opt.step()
        total = torch.tensor([loss])
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        assert abs(total.item() - ref_loss) <= BF16_RTOL * abs(ref_loss), (step, total.item(), ref_loss)
    got = fsdp_runtime.full_parameters(model)
    for name, p in reference.named_parameters():
        assert torch.allclose(got[name], p, rtol=BF16_RTOL, atol=1e-3), (name, (got[name] - p).abs().max())
    if rank == 0:
        print(f"bfloat16 compute and reduce at {n} ranks, {MICRO} micro-batches a step: {STEPS} steps within "
              f"{BF16_RTOL} of the 1-process run that accumulates and averages the same way", flush=True)


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
    main(bf16_compute_fp32_reduce, bf16_reduce_accumulated, refuses_other_dtypes)
