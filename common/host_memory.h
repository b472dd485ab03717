// The memory this process may use on this host: physical memory (sysconf), lowered by the cgroup's limit
// where one is set (v2 memory.max, v1 memory.limit_in_bytes; the smaller wins). What a CPU job's memory
// is measured against: the metric line's percentage and the start-up refusal of sizes that cannot fit.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

struct MemoryLimit {
  int64_t bytes = 0;             // 0: unknown
  std::string source;            // "physical memory", "cgroup v2 memory.max" or "cgroup v1 memory.limit_in_bytes"
  std::string describe() const;  // "22.9 GiB (cgroup v2 memory.max)"
};

// This host, read once per call (the cgroup files of this process, from /proc/self/cgroup).
MemoryLimit host_memory_limit();
// The same over a file system rooted at `root` ("/" for this host) with `physical_bytes` of memory:
// reads root/proc/self/cgroup and the limit files under root/sys/fs/cgroup.
MemoryLimit host_memory_limit(const std::string& root, int64_t physical_bytes);

}  // namespace fsdp
