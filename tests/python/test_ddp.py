"""DistributedDataParallel over backend "fsdp" trains a tiny model exactly as over "gloo": same
initial weights (DDP broadcasts rank 0's), same per-rank data, same losses and final parameters."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from spawn import main

STEPS = 8


def train(rank, group):
    torch.manual_seed(1234 + rank)  # different on every rank: DDP must broadcast rank 0's weights
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(99 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=data)
        y = torch.randn(8, 4, generator=data)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def ddp_matches_gloo(rank, n):
    fsdp_losses, fsdp_params = train(rank, dist.group.WORLD)
    gloo_losses, gloo_params = train(rank, dist.new_group(backend="gloo"))
    for a, b in zip(fsdp_losses, gloo_losses):
        assert abs(a - b) <= 1e-6 * max(1.0, abs(b)), (fsdp_losses, gloo_losses)
    for p, q in zip(fsdp_params, gloo_params):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), (p - q).abs().max()
    # and the replicas agree with each other
    for p in fsdp_params:
        ref = p.clone()
        dist.broadcast(ref, src=0)
        assert torch.equal(p, ref)
    if rank == 0:
        print(f"DDP over fsdp at {n} ranks: losses {['%.5f' % l for l in fsdp_losses]} equal gloo's", flush=True)


if __name__ == "__main__":
    main(ddp_matches_gloo)
