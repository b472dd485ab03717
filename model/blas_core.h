// Which OpenBLAS kernels this process's GEMMs run on. OpenBLAS (DYNAMIC_ARCH) picks them by CPU model at
// load time, and a model newer than its release falls back to an old core: Debian 12's 0.3.21 runs an
// Emerald Rapids (family 6, model 207: AVX-512) on its SSE3 "Prescott" kernels, at half the GEMM rate of
// its SkylakeX ones (measured: 5,368 against 10,083 tokens/s for the debug model at 1 rank).
// OPENBLAS_CORETYPE, read once when the library loads, is the fix; a running process cannot switch, so
// the programs that compute (fsdp-train, fsdp-train-bench, fsdp-calibrate) re-execute themselves once
// with it set, at the very start:
//
//   int main(int argc, char** argv) { fsdp::model::use_best_blas_core(argv, /*announce=*/true); ... }
//
// The Python front end does the same through fsdp_runtime.use_best_blas_core() (torch's BLAS is the same
// OpenBLAS).
#pragma once

#include <string>

namespace fsdp::model {

// OpenBLAS's name for the kernels it loaded ("SkylakeX", "Haswell", "Prescott", ...).
std::string blas_core_name();

// The OPENBLAS_CORETYPE this CPU should run with, given the core OpenBLAS picked: "SkylakeX" where the
// CPU has AVX-512 F/BW/DQ/VL, else "Haswell" where it has AVX2 and FMA, when OpenBLAS picked a core
// older than that instruction set; empty when its choice is already right (or the CPU has no AVX2).
std::string better_blas_core(const std::string& loaded, bool avx2_fma, bool avx512);

// better_blas_core for this CPU and the kernels this process loaded; empty when OPENBLAS_CORETYPE is set
// (the user's choice, or this program's second start).
std::string blas_core_override();

// Where blas_core_override names one: sets OPENBLAS_CORETYPE, says so on stderr if `announce` (rank 0:
// one line per job) and returns it for the caller to restart with; "" when there is nothing to do.
std::string prepare_blas_core_restart(const std::string& program, bool announce);

// prepare_blas_core_restart, then re-executes this program (/proc/self/exe, the same argv and
// environment otherwise). Returns when there is nothing to do, the user chose through
// OPENBLAS_CORETYPE, or the exec failed (then OpenBLAS's own choice stands, with a warning).
void use_best_blas_core(char** argv, bool announce);

}  // namespace fsdp::model
