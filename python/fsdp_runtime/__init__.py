"""The fsdp runtime under PyTorch (docs/pytorch.md).

Importing this package registers the torch.distributed backend "fsdp":

    import fsdp_runtime
    torch.distributed.init_process_group("fsdp")   # under torchrun, mpirun or fsdp-run
"""
import os
import sys

import torch
import torch.distributed as dist

from ._C import ProcessGroupFsdp, keep_freed_heap, prepare_blas_core_restart, set_blas_threads
from .fully_shard import FSDPModule, MixedPrecisionPolicy, clip_grad_norm_, fully_shard
from .process_group_shrink import SHRINK_ABORT, SHRINK_DEFAULT, shrink_group
from .sharded_state import (clear_overlap, full_parameters, full_state_dict, load_full_state_dict, memory, overlap,
                            reset_memory_peaks)

__all__ = ["ProcessGroupFsdp", "FSDPModule", "MixedPrecisionPolicy", "SHRINK_ABORT", "SHRINK_DEFAULT", "clear_overlap",
           "clip_grad_norm_", "fully_shard", "full_parameters", "full_state_dict", "keep_freed_heap",
           "load_full_state_dict", "memory", "overlap", "reset_memory_peaks", "set_cpu_threads", "shrink_group",
           "use_best_blas_core"]


def use_best_blas_core():
    """Where OpenBLAS (torch's BLAS here) loaded kernels older than this CPU allows (model/blas_core.h:
    Debian 12's 0.3.21 runs an Emerald Rapids on SSE3 kernels at half speed): sets OPENBLAS_CORETYPE and
    re-executes this Python program, as fsdp-train does. Call it first thing in a script's main; returns
    when there is nothing to do or OPENBLAS_CORETYPE is set."""
    if not prepare_blas_core_restart(sys.argv[0]):  # sets OPENBLAS_CORETYPE in the environment execv passes
        return
    sys.stdout.flush()
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name not in ("", "__main__"):  # python3 -m package.module
        argv = [sys.executable, "-m", spec.name.removesuffix(".__main__")] + sys.argv[1:]
    else:
        argv = [sys.executable] + sys.argv
    os.execv(sys.executable, argv)


def set_cpu_threads(n):
    """torch.set_num_threads(n), and the same for OpenBLAS's own thread pool, which torch's setting does
    not reach: Debian's torch 1.13 calls the pthreads OpenBLAS, which starts a thread per core, so two
    ranks on two cores would each run two BLAS threads (and their idle ones spin in sched_yield). The
    OpenBLAS set is the one the runtime's C++ model links, the library torch calls on Debian. Returns
    OpenBLAS's thread count afterwards."""
    torch.set_num_threads(n)
    return set_blas_threads(n)


def _create_process_group(store, rank, size, timeout):
    # torch passes the group's PrefixStore, the rank and size within the group, and a timedelta.
    return ProcessGroupFsdp(store, rank, size, timeout)


if not hasattr(dist.Backend, "FSDP"):
    dist.Backend.register_backend("fsdp", _create_process_group)
