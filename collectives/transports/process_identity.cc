#include "collectives/transports/process_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace fsdp {

bool read_proc_stat(int pid, char& state, uint64_t& start_time) {
  char path[48];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char line[2048];  // 52 numeric fields and a command name of at most 16 bytes
  const ssize_t n = ::read(fd, line, sizeof(line) - 1);
  ::close(fd);
  if (n <= 0) return false;
  line[n] = '\0';
  const char* paren = std::strrchr(line, ')');  // the command name may hold spaces and parentheses
  if (!paren || paren + 2 >= line + n) return false;
  state = paren[2];
  // After the state (field 3) come fields 4..21; field 22 is the start time.
  const char* p = paren + 3;
  for (int field = 4; field <= 21 && *p; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
  }
  start_time = std::strtoull(p, nullptr, 10);
  return true;
}

bool process_exited(int pid) {
  char state = 0;
  uint64_t start_time = 0;
  return !read_proc_stat(pid, state, start_time) || state == 'Z' || state == 'X';
}

ProcessIdentity ProcessIdentity::self() {
  ProcessIdentity id;
  id.pid = static_cast<int32_t>(::getpid());
  char state = 0;
  read_proc_stat(id.pid, state, id.start_time);
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) == 0) id.pid_namespace = static_cast<uint64_t>(ns.st_ino);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string text;
  std::getline(boot, text);
  std::strncpy(id.boot_id, text.c_str(), sizeof(id.boot_id) - 1);
  return id;
}

bool ProcessIdentity::checkable_here() const {
  static const ProcessIdentity me = self();
  return pid > 0 && boot_id[0] != '\0' && pid_namespace != 0 && pid_namespace == me.pid_namespace &&
         std::strncmp(boot_id, me.boot_id, sizeof(boot_id)) == 0;
}

std::string ProcessIdentity::gone(int rank) const {
  if (!checkable_here()) return {};
  char state = 0;
  uint64_t started = 0;
  const std::string who = "process " + std::to_string(pid) + " of rank " + std::to_string(rank);
  if (!read_proc_stat(pid, state, started)) return who + " exited";
  if (state == 'Z' || state == 'X') return who + " exited";
  if (start_time != 0 && started != start_time) return who + " exited (its pid now belongs to another process)";
  return {};
}

}  // namespace fsdp
