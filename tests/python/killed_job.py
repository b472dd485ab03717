"""One rank of a torchrun job (tests/python/test_killed_under_torchrun.py): the tiny Llama fully_shard'ed
over backend "fsdp" with a 2 s timeout trains; in step 2 the last rank SIGKILLs itself in the middle of
its forward (after block 0, before block 1's all-gather), as an OOM-killed rank would. The survivors
must raise a RuntimeError naming the lost rank: each prints what it raised and how long after the step
began, and exits 3."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import fsdp_runtime
from fsdp_runtime.models.llama import Llama, LlamaArgs
from start_together import init_under_torchrun

TIMEOUT_S = 2

# torchrun stops the other workers (SIGTERM, then SIGKILL 30 s later) at its first look after the victim
# died, which may come right after the kill: the survivors raise on their own first, whenever it comes.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
init_under_torchrun(TIMEOUT_S)
rank, n = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
args = LlamaArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden=96, vocab=64, seq_len=8)
model = Llama(args)
for block in model.layers:
    fsdp_runtime.fully_shard(block)
fsdp_runtime.fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = [0]


def die_mid_forward(module, inputs, output):
    if step[0] == 2 and rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)


model.layers[0].register_forward_hook(die_mid_forward)
tokens = torch.randint(0, args.vocab, (2, args.seq_len + 1), generator=torch.Generator().manual_seed(rank))
for step[0] in range(1, 4):
    start = time.monotonic()
    try:
        F.cross_entropy(model(tokens[:, :-1]).reshape(-1, args.vocab), tokens[:, 1:].reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
    except RuntimeError as e:
        print(f"rank {rank} raised in step {step[0]} after {time.monotonic() - start:.1f} s: {e}", flush=True)
        os._exit(3)  # the group is broken: no clean shutdown to attempt
print(f"rank {rank} finished although rank {n - 1} was killed", flush=True)
