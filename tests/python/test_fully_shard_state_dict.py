"""fully_shard state dicts: model.state_dict() of a sharded module is the unsharded module's (same names in
the same order, full tensors, buffers included), before and after training; load_state_dict of a full
state dict puts every rank's slice back into the shards (round trip exact, and the loaded model computes
what the saved one did); rank0_only, a partial load, and a strict load that names the missing key."""
import copy

import torch
import torch.distributed as dist

from spawn import main


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, width))
        self.register_buffer("scratch", torch.zeros(width), persistent=False)

    def forward(self, x):
        return self.norm(torch.tanh(self.proj(x))) * self.scale


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Linear(4, 6)
        self.blocks = torch.nn.ModuleList([Block(6), Block(6)])
        self.out = torch.nn.Linear(6, 2)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def shard(model):
    import fsdp_runtime

    for b in model.blocks:
        fsdp_runtime.fully_shard(b)
    return fsdp_runtime.fully_shard(model)


def assert_same(got, want, exact=False):
    assert list(got.keys()) == list(want.keys()), (list(got.keys()), list(want.keys()))
    for k in want:
        assert got[k].shape == want[k].shape, k
        ok = torch.equal(got[k], want[k]) if exact else torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
        assert ok, (k, (got[k] - want[k]).abs().max())


def round_trip(rank, n):
    import fsdp_runtime

    reference = Net(seed=1)
    model = shard(copy.deepcopy(reference))
    assert_same(model.state_dict(), reference.state_dict(), exact=True)

    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(4 * n, 4, generator=g), torch.randn(4 * n, 2, generator=g)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[rank * 4:(rank + 1) * 4]), y[rank * 4:(rank + 1) * 4]).backward()
        opt.step()
    saved = model.state_dict()
    assert_same(saved, reference.state_dict())

    # Into a model initialised differently: every shard and buffer comes from the dict.
    other = shard(Net(seed=99))
    result = other.load_state_dict(saved)
    assert not result.missing_keys and not result.unexpected_keys, result
    assert_same(other.state_dict(), saved, exact=True)
    with torch.no_grad():
        assert torch.equal(other(x), model(x))
    # The unsharded module takes the sharded one's dict as it is.
    plain = Net(seed=5)
    plain.load_state_dict(saved)
    assert_same(plain.state_dict(), saved, exact=True)

    only0 = fsdp_runtime.full_state_dict(model, rank0_only=True)
    assert (len(only0) == len(saved)) if rank == 0 else (len(only0) == 0), len(only0)

    # A partial load keeps the unit's other parameters; a strict one names what is missing.
    partial = shard(Net(seed=1))
    partial.load_state_dict({"blocks.0.proj.weight": saved["blocks.0.proj.weight"]}, strict=False)
    got = partial.state_dict()
    assert torch.equal(got["blocks.0.proj.weight"], saved["blocks.0.proj.weight"])
    assert torch.equal(got["blocks.0.proj.bias"], Net(seed=1).state_dict()["blocks.0.proj.bias"])
    try:
        partial.load_state_dict({k: v for k, v in saved.items() if k != "out.bias"})
    except RuntimeError as e:
        assert "out.bias" in str(e), e
    else:
        raise AssertionError("a strict load without out.bias was accepted")
    dist.barrier()
    if rank == 0:
        print(f"state dict round trip at {n} ranks: {len(saved)} entries, names and order of the unsharded "
              "module", flush=True)


if __name__ == "__main__":
    main(round_trip)
