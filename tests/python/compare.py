"""Checks shared by the fully_shard tests."""
import torch


def assert_parameters_match(model, reference, what=""):
    """The sharded model's full parameters (gathered: collective) equal the unsharded reference's (1e-5)."""
    import fsdp_runtime

    got = fsdp_runtime.full_parameters(model)
    for name, p in reference.named_parameters():
        assert torch.allclose(got[name], p, rtol=1e-5, atol=1e-6), (what, name, (got[name] - p).abs().max())
