#include "common/host_memory.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

namespace fsdp {
namespace {

std::optional<std::string> first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// A limit file's value; "max" (v2) and unparsable text are no limit.
std::optional<int64_t> limit_in(const std::string& path) {
  const auto line = first_line(path);
  if (!line) return std::nullopt;
  try {
    size_t used = 0;
    const long long v = std::stoll(*line, &used);
    if (v > 0 && (used == line->size() || (*line)[used] == ' ')) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// This process's cgroup path for `controller` from /proc/self/cgroup ("0::/a/b" for v2, "N:memory:/a/b"
// for v1); "" when none is listed.
std::string cgroup_path(const std::string& root, bool v2) {
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const bool match = v2 ? line.compare(0, a, "0") == 0 && controllers.empty()
                          : (',' + controllers + ',').find(",memory,") != std::string::npos;
    if (match) return line.substr(b + 1);
  }
  return "";
}

// The process's own cgroup's file, else the one at the mount's top (a container sees its own cgroup there).
std::optional<int64_t> cgroup_limit(const std::string& root, const std::string& mount, bool v2,
                                    const std::string& file) {
  const std::string own = cgroup_path(root, v2);
  if (!own.empty() && own != "/") {
    if (const auto v = limit_in(root + mount + own + "/" + file)) return v;
  }
  return limit_in(root + mount + "/" + file);
}

}  // namespace

std::string MemoryLimit::describe() const {
  char text[96];
  std::snprintf(text, sizeof(text), "%.1f GiB (%s)", static_cast<double>(bytes) / (1ull << 30), source.c_str());
  return text;
}

MemoryLimit host_memory_limit(const std::string& root, int64_t physical_bytes) {
  MemoryLimit limit{physical_bytes > 0 ? physical_bytes : 0, "physical memory"};
  const auto lower = [&](std::optional<int64_t> v, const char* source) {
    if (v && (limit.bytes == 0 || *v < limit.bytes)) limit = {*v, source};
  };
  lower(cgroup_limit(root, "/sys/fs/cgroup", true, "memory.max"), "cgroup v2 memory.max");
  lower(cgroup_limit(root, "/sys/fs/cgroup/memory", false, "memory.limit_in_bytes"), "cgroup v1 memory.limit_in_bytes");
  return limit;
}

MemoryLimit host_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return host_memory_limit("", pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0);
}

}  // namespace fsdp
