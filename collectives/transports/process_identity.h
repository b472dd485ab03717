// Which process a rank is, in a form another rank can check for liveness: the fabric transports (UCX,
// MPI) exchange it at start-up, so a rank on the same kernel notices a peer that died (SIGKILL, OOM)
// in the engine's 100 ms liveness check, whatever the fabric itself reports and however long it takes.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

// Plain bytes (exchanged as is between ranks of one architecture).
struct ProcessIdentity {
  int32_t pid = 0;
  uint32_t reserved = 0;
  uint64_t start_time = 0;     // clock ticks after boot (/proc/<pid>/stat field 22): tells a reused pid apart
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid: pids mean the same only inside one namespace
  char boot_id[40] = {};       // /proc/sys/kernel/random/boot_id: the same kernel, booted once

  static ProcessIdentity self();

  // Whether this process can tell if `*this` is alive: same kernel boot and pid namespace. Two network
  // namespaces of one kernel qualify; another host or another container's pid namespace do not.
  bool checkable_here() const;
  // Empty while the process lives or when it is not checkable here; otherwise "process P of rank R
  // exited" (a zombie counts as exited, and so does a pid now used by a younger process).
  std::string gone(int rank) const;
};
static_assert(sizeof(ProcessIdentity) == 64);

// The state letter and start time (field 22) of /proc/<pid>/stat; false when there is no such process.
// Read into a stack buffer: liveness checks ask often, and it allocates nothing.
bool read_proc_stat(int pid, char& state, uint64_t& start_time);
// True when the process is gone or a zombie (a killed child not yet reaped still answers kill(0)).
bool process_exited(int pid);

}  // namespace fsdp
