"""safetensors files of float32 tensors through the runtime's reader and writer (runtime/checkpoint/
safetensors.h), the files fsdp-train's checkpoint.initial_load_path reads and its exports write.

    save_file({"tok_embeddings.weight": t, ...}, "init.safetensors")
    tensors = load_file("init.safetensors")       # {name: float32 tensor}, in file order
"""
import collections
import os

import torch

from ._C import read_safetensors, write_safetensors


def save_file(tensors, path, metadata=None):
    """Writes the tensors (any float dtype, stored as F32) in the dict's order, atomically, creating
    missing folders above the file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    entries = []
    for name, t in tensors.items():
        t = t.detach().to(torch.float32).contiguous()
        entries.append((name, list(t.shape), t.numpy().tobytes()))
    write_safetensors(path, entries, dict(metadata or {}))


def load_file(path):
    out = collections.OrderedDict()
    for name, shape, data in read_safetensors(path):
        out[name] = torch.frombuffer(bytearray(data), dtype=torch.float32).view(shape)
    return out
