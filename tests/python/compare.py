"""Checks shared by the fully_shard tests."""
import torch
import torch.distributed as dist


class ChainNet(torch.nn.Module):
    """Three tanh layers in a ModuleList and a head (5 -> 9 -> 9 -> 7 -> 2), seeded: the nested units the
    prefetch and schedule tests wrap."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.inner = torch.nn.ModuleList([torch.nn.Linear(5, 9), torch.nn.Linear(9, 9), torch.nn.Linear(9, 7)])
        self.head = torch.nn.Linear(7, 2)

    def forward(self, x):
        for layer in self.inner:
            x = torch.tanh(layer(x))
        return self.head(x)


def assert_parameters_match(model, reference, what=""):
    """The sharded model's full parameters (gathered: collective) equal the unsharded reference's (1e-5)."""
    import fsdp_runtime

    got = fsdp_runtime.full_parameters(model)
    for name, p in reference.named_parameters():
        assert torch.allclose(got[name], p, rtol=1e-5, atol=1e-6), (what, name, (got[name] - p).abs().max())


def train_against_reference(reference, sharded, batches, rank, n, lr=0.05):
    """SGD with momentum on both: the reference over each whole batch (x, y), the sharded model on this
    rank's rows; the loss averaged over the ranks equals the reference's each step (1e-5 relative)."""
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr, momentum=0.9)
    opt = torch.optim.SGD(sharded.parameters(), lr=lr, momentum=0.9)
    for step, (x, y) in enumerate(batches):
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()

        rows = x.shape[0] // n
        mine = slice(rank * rows, (rank + 1) * rows)
        loss = torch.nn.functional.mse_loss(sharded(x[mine]), y[mine])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        assert abs(total.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item()), (step, total, ref_loss)
