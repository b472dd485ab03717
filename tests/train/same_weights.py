#!/usr/bin/env python3
"""Two safetensors files of F32 tensors (fsdp-ckpt export) hold the same tensors within a relative L2
tolerance per module (||got - want|| / ||want|| over each of tok_embeddings, layers.N, norm and output:
the FSDP units, as the C++ tests' N-rank == 1-rank bar compares them; per tensor, one AdamW element whose
first gradient is a cancellation can move ~1e-3 of its value with the summation order).

    same_weights.py WANT.safetensors GOT.safetensors [TOLERANCE (default 1e-5)]

Prints the largest relative differences; exits 1 naming each tensor missing or reshaped and each module off.
Standard library only: the header is JSON after an 8-byte little-endian length, the data F32 little-endian.
"""
import array
import json
import math
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {entry['dtype']}, not F32")
        begin, end = entry["data_offsets"]
        values = array.array("f", data[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (entry["shape"], values)
    return tensors


def main():
    want_path, got_path = sys.argv[1], sys.argv[2]
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    want, got = read(want_path), read(got_path)
    bad = [f"{name}: missing in {got_path}" for name in want if name not in got]
    bad += [f"{name}: not in {want_path}" for name in got if name not in want]
    sums = {}  # module -> [squared difference, squared norm]
    worst_tensor = 0.0
    for name in want.keys() & got.keys():
        (ws, w), (gs, g) = want[name], got[name]
        if ws != gs:
            bad.append(f"{name}: shape {gs}, want {ws}")
            continue
        diff = sum((a - b) ** 2 for a, b in zip(g, w))
        norm = sum(b * b for b in w)
        worst_tensor = max(worst_tensor, math.sqrt(diff / norm) if norm > 0 else math.sqrt(diff))
        parts = name.split(".")
        module = sums.setdefault(".".join(parts[:2]) if parts[0] == "layers" else parts[0], [0.0, 0.0])
        module[0] += diff
        module[1] += norm
    worst = 0.0
    for module, (diff, norm) in sums.items():
        rel = math.sqrt(diff / norm) if norm > 0 else math.sqrt(diff)
        worst = max(worst, rel)
        if not rel <= tolerance:
            bad.append(f"{module}: relative L2 difference {rel:.3g} > {tolerance:g}")
    for line in sorted(bad):
        print(f"same_weights: {line}")
    print(f"final parameters: {len(sums)} modules, largest relative L2 difference {worst:.3g} "
          f"(per tensor {worst_tensor:.3g})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
