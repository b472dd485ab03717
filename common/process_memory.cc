#include "common/process_memory.h"

#include <sys/resource.h>

#include <climits>
#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/knobs.h"

namespace fsdp {

int64_t minor_page_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_minflt);
}

int64_t mapping_count() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return -1;
  int64_t lines = 0;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) lines += c == '\n';
  std::fclose(f);
  return lines;
}

bool keep_freed_heap() {
#if defined(__GLIBC__)
  static const bool kept = [] {
    if (!knobs::kCachingAllocator.get()) return false;
    // Setting either turns glibc's dynamic thresholds off, so both are set: 32 MiB, the dynamic
    // threshold's own ceiling and the most older glibc accepts (half a thread arena's heap); the top
    // kept up to what an int holds.
    return ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ::mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  }();
  return kept;
#else
  return false;
#endif
}

}  // namespace fsdp
