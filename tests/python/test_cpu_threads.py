"""fsdp_runtime.set_cpu_threads sets torch's thread pool and OpenBLAS's: torch.set_num_threads alone
leaves Debian's pthreads OpenBLAS a thread per core (two ranks on two cores would each run two)."""
import ctypes
import os
import sys

sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
import torch  # noqa: E402

import fsdp_runtime  # noqa: E402

if __name__ == "__main__":
    torch.mm(torch.randn(64, 64), torch.randn(64, 64))  # BLAS loaded and initialised
    blas = [line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line]
    for n in (1, 2, 1):
        got = fsdp_runtime.set_cpu_threads(n)
        assert torch.get_num_threads() == n, (n, torch.get_num_threads())
        assert got == n, (n, got)
        if blas:  # read back through a handle of our own on the library torch loaded, not the function's
            assert ctypes.CDLL(blas[0]).openblas_get_num_threads() == n, n
    torch.set_num_threads(2)
    if blas:
        assert ctypes.CDLL(blas[0]).openblas_get_num_threads() == 1, "torch's setting reached OpenBLAS after all"
        print(f"torch and OpenBLAS ({os.path.basename(blas[0])}) pools follow set_cpu_threads; "
              "torch.set_num_threads alone leaves OpenBLAS's", flush=True)
    else:
        print("no libopenblas in this process: only the counts set_cpu_threads reports were checked", flush=True)
