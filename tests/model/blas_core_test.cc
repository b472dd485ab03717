// Which OpenBLAS kernels the programs restart with (model/blas_core.h): only where OpenBLAS fell back to
// a core older than the CPU's instruction set, and never against the user's OPENBLAS_CORETYPE.
#include "model/blas_core.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace fsdp::model {
namespace {

TEST(BlasCore, PreAvx2FallbacksGetTheCpusKernels) {
  // Debian 12's OpenBLAS on an Emerald Rapids: SSE3 kernels on an AVX-512 CPU.
  EXPECT_EQ(better_blas_core("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(better_blas_core("Prescott", true, false), "Haswell");
  EXPECT_EQ(better_blas_core("Nehalem", true, false), "Haswell");
  EXPECT_EQ(better_blas_core("Sandybridge", true, true), "SkylakeX");  // AVX without AVX2 kernels
  EXPECT_EQ(better_blas_core("", true, true), "SkylakeX");             // no name: nothing known
  EXPECT_EQ(better_blas_core("unknown", true, false), "Haswell");
}

TEST(BlasCore, ARightPickOrAnOldCpuIsLeftAlone) {
  for (const char* core : {"SkylakeX", "Haswell", "Zen", "Cooperlake", "SapphireRapids", "Skylake"}) {
    EXPECT_EQ(better_blas_core(core, true, true), "") << core;
  }
  EXPECT_EQ(better_blas_core("Prescott", false, false), "");  // no AVX2: Prescott may be right
}

TEST(BlasCore, TheUsersChoiceWins) {
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  EXPECT_EQ(blas_core_override(), "");
  ::unsetenv("OPENBLAS_CORETYPE");
  // Without it the answer is this machine's: a name OpenBLAS knows, or none.
  const std::string o = blas_core_override();
  EXPECT_TRUE(o.empty() || o == "SkylakeX" || o == "Haswell") << o;
  EXPECT_FALSE(blas_core_name().empty());
}

}  // namespace
}  // namespace fsdp::model
