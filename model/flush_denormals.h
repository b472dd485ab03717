// Denormal results flushed to zero, and denormal inputs read as zero, while a scope runs (MXCSR's FTZ
// and DAZ bits on this thread; restored after). For the elementwise passes that use exp_fast: GCC
// vectorizes its clamps by computing every lane's clamped cases too and blending, so SiLU computes
// x / (1 + e^88) for every x, a denormal, and each vector instruction producing one takes a microcode
// assist: SwiGLU's forward ran at 16-19 ns an element instead of 1.8. Results differ only where a true
// result is below 1.2e-38.
#pragma once

#include <xmmintrin.h>

namespace fsdp::model {

class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  unsigned saved_;
};

}  // namespace fsdp::model
