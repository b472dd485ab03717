#include "common/process_memory.h"

#include <sys/resource.h>

#include <cstdio>

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

}  // namespace fsdp
