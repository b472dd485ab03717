// What the kernel sees of this process's memory, for checking that a training step maps nothing new:
// its minor page faults so far and its number of mappings now; and the C library heap's policy for
// memory a step frees.
#pragma once

#include <cstdint>

namespace fsdp {

// Minor page faults of the whole process so far (getrusage): each first touch of a freshly mapped page.
int64_t minor_page_faults();
// Lines of /proc/self/maps: the process's mappings now (-1 where /proc is not mounted).
int64_t mapping_count();

// Makes the C library's heap keep what a step frees for the next step, as the block cache keeps tracked
// buffers: allocations up to 32 MiB come from the heap (not a fresh mapping each), and up to 2 GiB freed
// at the heap's top stays mapped. glibc's defaults return a freed top over twice the largest block
// freed so far to the kernel, so a step whose activations alone lift the top (torch's CPU tensors under
// fully_shard, with no gradient left pinned above them) faults every page of them in again each step:
// 3,300-5,500 faults and a quarter of a debug-model step at 2 ranks (docs/pytorch.md). Process-wide and
// once; false where FSDP_CACHING_ALLOCATOR=0 (glibc's defaults stay), the C library is not glibc, or
// AddressSanitizer intercepts mallopt (it refuses every setting).
bool keep_freed_heap();

}  // namespace fsdp
