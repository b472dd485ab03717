#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (fuzz/corpus/<target>/): small valid inputs shaped like
the ordinary tests' fixtures. Rerun after a format change; the files are checked in.
Usage: fuzz/make_seeds.py [FSDP_PLAN]   (the fsdp-plan binary, e.g. build/sharding/fsdp-plan: the
plan_file seeds are plans it writes; without it they are left as they are)"""
import os
import struct
import subprocess
import sys
import tempfile

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

# tcp_handshake: a TcpHello (magic, version, from, to, size, connection, connections, nonce, proof) to rank 2 of 4
# with 2 connections per peer, then frames on that connection (data ids 1 and 2 have receives posted)
TCP_MAGIC = 0x6673647074637031
def tcp_hello(from_rank, connection, to_rank=2, size=4, connections=2, version=3):
    nonce = bytes(range(16))  # then the proof: zero in a dialer's hello
    return struct.pack("<QIiiiii16s32s", TCP_MAGIC, version, from_rank, to_rank, size, connection, connections,
                       nonce, b"")
write("tcp_handshake", "hello_only", tcp_hello(0, 0))
write("tcp_handshake", "control", tcp_hello(1, 0) + header(2, 16) + b"x" * 16 + header(3, 1 << 20) + header(4, 4096, 7, 2))
write("tcp_handshake", "data_pieces", tcp_hello(0, 1) + header(5, 8, 1, 0) + b"y" * 8 + header(5, 4088, 1, 8))
write("tcp_handshake", "wrong_job", tcp_hello(3, 0, size=8))

# store_frame: a direction byte (0: requests the server reads, 1: replies the client reads), then
# frames of a 4-byte little-endian length and a StoreRequest / StoreResponse (proto/store.proto)
def store_frame(msg):
    return struct.pack("<I", len(msg)) + msg
def request(op, keys=(), value=None, delta=None, expected=None, desired=None, timeout_ms=None, target=None):
    m = field_varint(1, op) + b"".join(field_bytes(2, k) for k in keys)
    if value is not None: m += field_bytes(3, value)
    if delta is not None: m += field_varint(4, delta & 0xFFFFFFFFFFFFFFFF)
    if expected is not None: m += field_bytes(5, expected)
    if desired is not None: m += field_bytes(6, desired)
    if timeout_ms is not None: m += field_varint(7, timeout_ms)
    if target is not None: m += field_varint(8, target)
    return store_frame(m)
write("store_frame", "rendezvous", b"\0" + request(1, [b"fsdp/default/tcp/0"], value=b"127.0.0.1:41237") +
      request(2, [b"fsdp/default/tcp/1"], timeout_ms=30000) + request(3, [b"a", b"b"], timeout_ms=100))
write("store_frame", "counters", b"\0" + request(4, [b"barrier"], delta=1) + request(4, [b"barrier"], delta=-5) +
      request(5, [b"leader"], expected=b"", desired=b"0") + request(6, [b"leader"]) + request(7))
def vote(decision=b"step1/decision", snapshot=(), counter=b"step1/votes"):
    return request(8, [counter, decision, *snapshot], delta=1, desired=b"commit", timeout_ms=20, target=2)
write("store_frame", "votes", b"\0" + vote() + vote() + request(5, [b"step2/decision"], expected=b"", desired=b"abort") +
      vote(b"step2/decision") + request(8, [b"step1/votes"]) + request(4, [b"tickets"], delta=1) +
      vote(b"step3/decision", [b"tickets"], b"step3/votes") + vote(b"step3/decision", [b"tickets"], b"step3/votes"))
write("store_frame", "bad_requests", b"\0" + request(0) + request(1) + request(3) + request(9, [b"k"]))
write("store_frame", "replies", b"\1" + store_frame(field_bytes(2, b"127.0.0.1:41237")) +
      store_frame(field_varint(1, 1) + field_bytes(4, b"key 'x' still missing") + field_bytes(5, b"x")) +
      store_frame(field_varint(3, 42)))

# checkpoint_metadata: the message, "crc1", CRC32C little-endian (metadata_file.h)
def metadata(msg):
    return msg + b"crc1" + struct.pack("<I", crc32c(msg))
write("checkpoint_metadata", "empty", metadata(field_varint(1, 2)))
write("checkpoint_metadata", "adamw", metadata(
    field_varint(1, 2) + field_varint(2, 10) + field_varint(3, 2) + field_varint(4, 1) +
    field_bytes(5, b"debugmodel") + field_bytes(6, b"abc123") + field_bytes(7, b"adamw") +
    field_varint(8, 10) + field_varint(9, 1 << 20) +
    field_bytes(12, field_bytes(1, b"loader") + field_bytes(2, b"\x01\x02\x03"))))
# two ranks' shards of a [4, 2] parameter and a scalar, checksum blocks of 16 bytes: what check_metadata
# accepts, so mutations start from the loader's whole path
def chunk(file, rank, begin, end, offset, length, blocks):
    return (field_bytes(1, file) + field_varint(2, rank) + field_varint(3, begin) + field_varint(4, end) +
            field_varint(5, offset) + field_varint(6, length) + b"".join(b"\x45" + struct.pack("<I", 7) for _ in range(blocks)))
def tensor(name, shape, chunks):
    return (field_bytes(1, name) + field_bytes(2, b"param") + field_bytes(3, b"F32") +
            b"".join(field_varint(4, d) for d in shape) + b"".join(field_bytes(6, c) for c in chunks))
def two_shards(version):
    return (field_varint(1, version) + field_varint(2, 5) + field_varint(3, 2) + field_varint(4, 1) + field_varint(9, 16) +
    field_bytes(10, tensor(b"w", [4, 2], [chunk(b"shard-0.bin", 0, 0, 2, 0, 16, 1), chunk(b"shard-1.bin", 1, 2, 4, 0, 16, 1)])) +
    field_bytes(10, tensor(b"s", [], [chunk(b"shard-0.bin", 0, 0, 1, 16, 4, 1)])) +
    field_bytes(11, field_bytes(1, b"shard-0.bin") + field_varint(3, 20)) +
    field_bytes(11, field_bytes(1, b"shard-1.bin") + field_varint(2, 1) + field_varint(3, 16)))
write("checkpoint_metadata", "two_shards", metadata(two_shards(2)))
# format 1 has no checksum footer: mutations of it reach check_metadata instead of the CRC check
write("checkpoint_metadata", "two_shards_format1", two_shards(1))
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

# plan_file: a flag byte (1: text format, 0: binary), then a plan as `fsdp-plan --out` writes it: the
# one the target checks against (debugmodel_byte, 2 ranks, fp32) in both formats, and another model's
if len(sys.argv) > 1:
    with tempfile.TemporaryDirectory() as tmp:
        def plan(name, out, *args):
            path = os.path.join(tmp, out)
            subprocess.run([sys.argv[1], "--model", name, "--chip", "cpu", "--chips-per-node", "2", "--out", path, *args],
                           check=True, stdout=subprocess.DEVNULL)
            with open(path, "rb") as f:
                return f.read()
        job = ("--param-dtype", "fp32", "--seq-len", "128")
        write("plan_file", "debugmodel_byte_binary", b"\0" + plan("debugmodel_byte", "p.pb", *job))
        write("plan_file", "debugmodel_byte_text", b"\1" + plan("debugmodel_byte", "p.txtpb", *job))
        write("plan_file", "another_model", b"\0" + plan("llama3-debug", "o.pb"))
