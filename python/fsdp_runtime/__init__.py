"""The fsdp runtime under PyTorch (docs/pytorch.md).

Importing this package registers the torch.distributed backend "fsdp":

    import fsdp_runtime
    torch.distributed.init_process_group("fsdp")   # under torchrun, mpirun or fsdp-run
"""
import torch.distributed as dist

from ._C import ProcessGroupFsdp
from .fully_shard import (FSDPModule, MixedPrecisionPolicy, clear_overlap, clip_grad_norm_, full_parameters, full_state_dict,
                          fully_shard, load_full_state_dict, memory, overlap, reset_memory_peaks)

__all__ = ["ProcessGroupFsdp", "FSDPModule", "MixedPrecisionPolicy", "clear_overlap", "clip_grad_norm_", "fully_shard",
           "full_parameters", "full_state_dict", "load_full_state_dict", "memory", "overlap", "reset_memory_peaks"]


def _create_process_group(store, rank, size, timeout):
    # torch passes the group's PrefixStore, the rank and size within the group, and a timedelta.
    return ProcessGroupFsdp(store, rank, size, timeout)


if not hasattr(dist.Backend, "FSDP"):
    dist.Backend.register_backend("fsdp", _create_process_group)
