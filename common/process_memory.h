// What the kernel sees of this process's memory, for checking that a training step maps nothing new:
// its minor page faults so far and its number of mappings now.
#pragma once

#include <cstdint>

namespace fsdp {

// Minor page faults of the whole process so far (getrusage): each first touch of a freshly mapped page.
int64_t minor_page_faults();
// Lines of /proc/self/maps: the process's mappings now (-1 where /proc is not mounted).
int64_t mapping_count();

}  // namespace fsdp
