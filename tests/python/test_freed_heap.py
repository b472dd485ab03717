"""fully_shard makes the C library's heap keep what a step frees (fsdp_runtime.keep_freed_heap), so a warm
step maps no fresh memory. With glibc's defaults the heap hands a freed top larger than twice its
largest freed block back to the kernel, and a step whose tensors lift the top faults them all in again:
fully_shard's steps on the debug model at 2 ranks took 3,300-5,500 faults and a quarter of their time so.

Here a "step" takes 128 blocks of 1 MiB from the C library (torch's CPU allocator takes its tensors
there too), writes them and frees them all, six times, counting page faults per step: in a process
that called fully_shard, the steps after the first fault nothing; under FSDP_CACHING_ALLOCATOR=0, where
glibc's defaults stay, the heap gives the 128 MiB back to the kernel at every step's end and every
step after the first faults them in again (or this test proves nothing)."""
import ctypes
import os
import resource
import sys
import tempfile

import torch

from spawn import run_ranks

BLOCKS, BLOCK_BYTES = 128, 1 << 20  # 128 MiB a step: above the most glibc's dynamic trim keeps (64 MiB)
STEPS = 6


def step(libc):
    blocks = [libc.malloc(BLOCK_BYTES) for _ in range(BLOCKS)]
    for b in blocks:
        ctypes.memset(b, 1, BLOCK_BYTES)
    for b in reversed(blocks):
        libc.free(b)


def faults_per_step(rank, n, out):
    import fsdp_runtime

    fsdp_runtime.fully_shard(torch.nn.Linear(8, 8))  # applies keep_freed_heap (once per process)
    libc = ctypes.CDLL(None)
    # Small pages, whatever the host's transparent huge pages say: with them a 2 MiB stretch faults once.
    assert libc.prctl(41, 1, 0, 0, 0) == 0, "prctl(PR_SET_THP_DISABLE) failed"
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    counts = []
    for _ in range(STEPS):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step(libc)
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    with open(out, "w") as f:
        f.write(f"{fsdp_runtime.keep_freed_heap()} {max(counts[1:])} {min(counts[1:])}")


def measure(folder, caching):
    os.environ["FSDP_CACHING_ALLOCATOR"] = "1" if caching else "0"  # the spawned rank's, read once there
    out = os.path.join(folder, f"faults{int(caching)}")
    run_ranks(faults_per_step, 1, args=(out,))
    kept, most, least = open(out).read().split()
    return kept == "True", int(most), int(least)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="fsdp-freed-heap-") as folder:
        kept, most, _ = measure(folder, True)
        unkept, _, glibc_least = measure(folder, False)
    pages = BLOCKS * BLOCK_BYTES // resource.getpagesize()
    print(f"page faults per step of {pages} pages, after the first: at most {most} with the heap kept, at least "
          f"{glibc_least} with glibc's defaults", flush=True)
    assert kept and not unkept, (kept, unkept)
    assert glibc_least > pages // 2, f"glibc's defaults faulted only {glibc_least} pages: the test shows nothing"
    assert most < pages // 100, f"{most} page faults in a step after the first with the heap kept"
    sys.exit(0)
