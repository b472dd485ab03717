"""One rank of packaging.PipInstall: started by the installed fsdp-run from a folder outside the
repository, with no PYTHONPATH, it imports the installed fsdp_runtime (not the source or build tree's)
and all-reduces over backend "fsdp" through the launcher's store."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import fsdp_runtime
from fsdp_runtime import _C

package = os.path.dirname(fsdp_runtime.__file__)
assert "PYTHONPATH" not in os.environ, os.environ["PYTHONPATH"]
assert package.startswith(sys.prefix + os.sep), (package, sys.prefix)
assert os.path.dirname(_C.__file__) == package, _C.__file__

rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=60)
store = _C.RunStore.from_env(timeout)
assert store is not None, "fsdp-run served no store"
dist.init_process_group("fsdp", store=store, rank=rank, world_size=n, timeout=timeout)
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), n * (n + 1) / 2)), t[:4]
if rank == 0:
    print(f"installed fsdp_runtime ({package}): all_reduce over {n} ranks correct", flush=True)
dist.destroy_process_group()
