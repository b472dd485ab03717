#include "model/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/knobs.h"

namespace fsdp::model {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string better_blas_core(const std::string& loaded, bool avx2_fma, bool avx512) {
  // OpenBLAS's x86 cores without AVX2 kernels (its fallbacks for a CPU it does not know).
  static constexpr std::array<std::string_view, 16> kPreAvx2{
      "unknown", "katmai",  "coppermine", "northwood", "prescott", "banias",    "atom",     "core2",
      "penryn",  "dunnington", "nehalem", "sandybridge", "opteron", "barcelona", "bobcat", "bulldozer"};
  std::string lower;
  for (char c : loaded) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  bool old = lower.empty();
  for (std::string_view name : kPreAvx2) old = old || lower == name;
  if (!old || !avx2_fma) return "";
  return avx512 ? "SkylakeX" : "Haswell";
}

std::string blas_core_override() {
  if (knobs::kOpenblasCoretype.is_set()) return "";
  __builtin_cpu_init();
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return better_blas_core(blas_core_name(), avx2_fma, avx512);
}

std::string prepare_blas_core_restart(const std::string& program, bool announce) {
  const std::string better = blas_core_override();
  if (better.empty()) return "";
  if (announce) {
    std::fprintf(stderr,
                 "%s: OpenBLAS picked its '%s' kernels on a CPU with %s: restarting with OPENBLAS_CORETYPE=%s "
                 "(set OPENBLAS_CORETYPE to choose)\n",
                 program.c_str(), blas_core_name().c_str(), better == "SkylakeX" ? "AVX-512" : "AVX2",
                 better.c_str());
  }
  std::fflush(stderr);
  std::fflush(stdout);
  ::setenv(std::string(knobs::kOpenblasCoretype.env).c_str(), better.c_str(), 1);
  return better;
}

void use_best_blas_core(char** argv, bool announce) {
  if (prepare_blas_core_restart(argv[0], announce).empty()) return;
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr, "%s: restarting failed (%s): OpenBLAS's '%s' kernels stay\n", argv[0], std::strerror(errno),
               blas_core_name().c_str());
}

}  // namespace fsdp::model
