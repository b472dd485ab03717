"""One rank of a job whose launcher set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun
on one node with its c10d rendezvous on port 0, or fsdp-run --no-store; both pick a free port): env:// rendezvous through torch's
TCPStore, then backend "fsdp" works."""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
import fsdp_runtime  # noqa: E402,F401

dist.init_process_group("fsdp")
rank, n = dist.get_rank(), dist.get_world_size()
assert n == int(os.environ["WORLD_SIZE"]) and rank == int(os.environ["RANK"])
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), n * (n + 1) / 2)), t[:4]
out = torch.empty(n * 3, dtype=torch.int64)
dist.all_gather_into_tensor(out, torch.full((3,), rank, dtype=torch.int64))
assert out.tolist() == [r for r in range(n) for _ in range(3)], out
if rank == 0:
    print(f"env:// job of {n} ranks over backend fsdp ({dist.group.WORLD.transport}): all_reduce and "
          "all_gather correct", flush=True)
dist.destroy_process_group()
