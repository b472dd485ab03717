#include "collectives/transports/process_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace fsdp {
namespace {

// The state letter and start time of /proc/<pid>/stat; false when there is no such process.
bool read_stat(int pid, char& state, uint64_t& start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  fields >> state;
  // After the state (field 3) come fields 4..21; field 22 is the start time.
  for (int i = 4; i <= 21 && fields >> field; ++i) {
  }
  start_time = 0;
  fields >> start_time;
  return true;
}

}  // namespace

ProcessIdentity ProcessIdentity::self() {
  ProcessIdentity id;
  id.pid = static_cast<int32_t>(::getpid());
  char state = 0;
  read_stat(id.pid, state, id.start_time);
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
  if (!read_stat(pid, state, started)) return who + " exited";
  if (state == 'Z' || state == 'X') return who + " exited";
  if (start_time != 0 && started != start_time) return who + " exited (its pid now belongs to another process)";
  return {};
}

}  // namespace fsdp
