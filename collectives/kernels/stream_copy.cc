#include "collectives/kernels/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/knobs.h"

namespace fsdp {

void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  // Up to the destination's first cache line boundary with memcpy, then whole lines streamed.
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (bytes < head + 64) {
    if (bytes > 0) std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  _mm_sfence();  // the streamed lines are visible before whatever the caller publishes next
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);
#else
  if (bytes > 0) std::memcpy(dst, src, bytes);
#endif
}

bool worth_streaming(size_t bytes) {
  static const size_t from = static_cast<size_t>(knobs::kStreamCopyBytes.get());
  return from > 0 && bytes >= from;
}

ChunkedCopy::ChunkedCopy(std::byte* dst, const std::byte* src, size_t bytes)
    : dst_(dst), src_(src), bytes_(bytes), streamed_(worth_streaming(bytes)) {}

ChunkedCopy::ChunkedCopy(std::byte* recv, const std::byte* src, size_t block_bytes, std::span<const GatherRun> runs,
                         int p)
    : dst_(recv), src_(src), bytes_(block_bytes), runs_(runs), rank_(p) {
  size_t written = 0;
  for (const GatherRun& r : runs_) written += r.piece(p);
  streamed_ = worth_streaming(written);
}

void ChunkedCopy::copy(std::byte* dst, const std::byte* src, size_t bytes) const {
  if (streamed_) {
    stream_copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void ChunkedCopy::copy_through(size_t end) {
  end = end < bytes_ ? end : bytes_;
  if (end <= copied_) return;
  if (runs_.empty()) {
    copy(dst_ + copied_, src_ + copied_, end - copied_);
  } else {
    for (const GatherRun& r : runs_) {  // the part of each piece in [copied_, end)
      const size_t from = std::max(r.src, copied_), to = std::min(r.src + r.piece(rank_), end);
      if (from < to)
        copy(dst_ + r.dst + static_cast<size_t>(rank_) * r.per_rank + (from - r.src), src_ + from, to - from);
    }
  }
  copied_ = end;
}

void stream_sum_f32(float* dst, const float* a, const float* b, size_t count) {
  size_t i = 0;
#if defined(__SSE2__)
  // Scalar up to the destination's first cache line boundary (floats are 4-byte aligned), then whole
  // lines of 16 floats, streamed four at a time; the tail scalar.
  for (; i < count && (reinterpret_cast<uintptr_t>(dst + i) & 63) != 0; ++i) dst[i] = a[i] + b[i];
  for (; i + 16 <= count; i += 16) {
    for (size_t k = 0; k < 16; k += 4) {
      _mm_stream_ps(dst + i + k, _mm_add_ps(_mm_loadu_ps(a + i + k), _mm_loadu_ps(b + i + k)));
    }
  }
  _mm_sfence();  // the streamed lines are visible before whatever the caller publishes next
#endif
  for (; i < count; ++i) dst[i] = a[i] + b[i];
}

}  // namespace fsdp
