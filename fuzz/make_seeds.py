#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (fuzz/corpus/<target>/): small valid inputs shaped like
the ordinary tests' fixtures. Rerun after a format change; the files are checked in."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_varint(n, v):
    return varint(n << 3) + varint(v)


def field_bytes(n, b):
    return varint((n << 3) | 2) + varint(len(b)) + b


# message_header: magic, kind, status, tag context, tag op, bytes, id, aux (+ eager limit)
MAGIC = 0x66616231
def header(kind, bytes_, id_=7, aux=0, status=0):
    return struct.pack("<IHHQQQQQ", MAGIC, kind, status, 3, 9, bytes_, id_, aux)
write("message_header", "hello", header(1, 1, 0, 4))
write("message_header", "eager", header(2, 512) + struct.pack("<Q", 65536))
write("message_header", "rts", header(3, 1 << 20) + struct.pack("<Q", 65536))
write("message_header", "cts", header(4, 1 << 20, 7, 11))
write("message_header", "data", header(5, 4096, 11, 8192))
write("message_header", "pulled", header(6, 0, 7, 0, 1))

# checkpoint_metadata: the message, "crc1", CRC32C little-endian (metadata_file.h)
def metadata(msg):
    return msg + b"crc1" + struct.pack("<I", crc32c(msg))
write("checkpoint_metadata", "empty", metadata(field_varint(1, 2)))
write("checkpoint_metadata", "adamw", metadata(
    field_varint(1, 2) + field_varint(2, 10) + field_varint(3, 2) + field_varint(4, 1) +
    field_bytes(5, b"debugmodel") + field_bytes(6, b"abc123") + field_bytes(7, b"adamw") +
    field_varint(8, 10) + field_varint(9, 1 << 20) +
    field_bytes(12, field_bytes(1, b"loader") + field_bytes(2, b"\x01\x02\x03"))))
write("checkpoint_metadata", "format1", field_varint(1, 1) + field_varint(2, 3))

# safetensors_header: u64 length, then the JSON header (space-padded to 8)
def safetensors(header_json):
    h = header_json.encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h
write("safetensors_header", "two_tensors", safetensors(
    '{"__metadata__":{"format":"pt"},"tok_embeddings.weight":{"dtype":"F32","shape":[4,2],'
    '"data_offsets":[0,32]},"norm.weight":{"dtype":"BF16","shape":[2],"data_offsets":[32,36]}}'))
write("safetensors_header", "empty", safetensors("{}"))

# toml_config: the job config the repository ships, and a small one of every value kind
with open(os.path.join(HERE, "..", "configs", "debug_model.toml"), "rb") as f:
    write("toml_config", "debug_model", f.read())
write("toml_config", "kinds", b'name = "x"\nsteps = 10\nlr = 3e-4\ncompile = false\n'
      b'[training]\nbatch = [1, 2]\n[[units]]\nparams = { w = "a" }\n')
