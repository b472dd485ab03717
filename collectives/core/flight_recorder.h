// The flight recorder: every process keeps its last FSDP_FLIGHT_RECORDER_ENTRIES collectives (which
// communicator, sequence number, operation, size, peer, state, when it was queued, started and
// finished) in a ring, and writes them as JSON when something goes wrong, so that after a hang or a
// crash the question "which rank was behind, and in which operation" has an answer
// (collectives/core/flight_analysis.h reads every rank's dump; `fsdp-flight DIR` prints it).
//
//   dump file: <FSDP_FLIGHT_RECORDER_DIR>/flight_recorder_rank<R>.json  (R: the job-wide rank)
//   {"rank": R, "pid": P, "reason": "...", "wall_time": s, "monotonic_time": s,
//    "entries": [{"rank": R, "comm": "0x..", "comm_rank": r, "comm_size": n, "op": "all_gather",
//                 "p2p": false, "seq": 17, "bytes": 4096, "peer": -1, "state": "started",
//                 "queued": s, "started": s, "finished": s, "error": ""}, ...]}   (oldest first)
//
// Times are CLOCK_MONOTONIC seconds: comparable between the ranks of one host; wall_time and
// monotonic_time, taken together at the dump, convert them across hosts.
//
// A dump is written at the first failed operation of the process (timeout, lost peer, mismatch,
// abort: the moment that shows what every operation was waiting on) and whenever dump() is called
// (fsdp-train does at a failed exit). No directory set: nothing is written, the ring still records.
// The notice "fsdp: rank R wrote its last N collectives to PATH" is printed once per dump that the
// user is told of, after the error it belongs to: dump() prints it (the caller reported the error
// just before), the failure's own dump leaves it to the process's exit (its error reaches the caller
// only later), and a dump() after that failure dump prints the one line for both.
// Recording costs one uncontended mutex per state change; FSDP_FLIGHT_RECORDER_ENTRIES=0 turns it off.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/types/collective_kind.h"
#include "collectives/types/errors.h"

namespace fsdp {

struct FlightEntry {
  enum class State { kQueued, kStarted, kDone, kFailed };
  int rank = -1;      // job-wide (transport) rank
  uint64_t comm = 0;  // the communicator's tag context: equal on all its members
  int comm_rank = -1;
  int comm_size = 0;
  char op[24] = {};  // name(CollectiveKind); text, as dumps (read back by fsdp-flight) hold it
  bool p2p = false;  // send/recv: seq counts per peer, not per communicator
  uint64_t seq = 0;
  size_t bytes = 0;
  int peer = -1;
  State state = State::kQueued;
  double queued = 0, started = 0, finished = 0;  // CLOCK_MONOTONIC seconds; 0 = not yet
  std::string error;
};

const char* name(FlightEntry::State s);  // "queued", "started", "done", "failed"
// A communicator id as dumps write it and reports show it: "0x" and 16 hex digits.
std::string comm_id_text(uint64_t comm);

class FlightRecorder {
 public:
  // The process's recorder, sized and directed by FSDP_FLIGHT_RECORDER_ENTRIES / _DIR.
  static FlightRecorder& instance();
  explicit FlightRecorder(size_t capacity);

  // Records operation `kind` (rank, seq and bytes from `ctx`). Returns the entry's id for the updates
  // below (0 when recording is off).
  uint64_t queued(CollectiveKind kind, const ErrorContext& ctx, uint64_t comm, int comm_rank, int comm_size, bool p2p,
                  int peer);
  void started(uint64_t id);
  void finished(uint64_t id, const Failure* failure);  // failure: null when it succeeded
  // One lock and no clock read each, for operations that start at their call and know their times
  // (the flag path): queued and started at `at`, finished at `at`; steady_clock is CLOCK_MONOTONIC.
  uint64_t started_now(CollectiveKind kind, const ErrorContext& ctx, uint64_t comm, int comm_rank, int comm_size,
                       std::chrono::steady_clock::time_point at);
  void finished(uint64_t id, const Failure* failure, std::chrono::steady_clock::time_point at);

  // Where dumps go; "" turns dumping off. set_dump_dir wins over FSDP_FLIGHT_RECORDER_DIR and re-arms
  // the dump at the next failure.
  void set_dump_dir(const std::string& dir);
  std::string dump_dir() const;
  // Writes the ring (atomically: temporary file, then rename), prints the notice (and drops one a
  // failure dump left for the exit) and returns the path; "" when no directory is set or nothing was
  // recorded. Never throws: a failed write is reported on stderr.
  std::string dump(const std::string& reason);
  // Prints the notice a failure dump left for the exit, if any (instance(): at exit by itself).
  void print_pending_notice();

  std::vector<FlightEntry> snapshot() const;  // oldest first
  // The job-wide rank named in dump files: the first rank that recorded anything in this process.
  int process_rank() const;

 private:
  FlightEntry* slot(uint64_t id);  // null once the ring moved past it
  // Writes the dump file; its path and, in `notice`, the line announcing it ("" and nothing when not written).
  std::string write_dump(const std::string& reason, std::string& notice);
  // The failure's dump: written now, its notice kept for print_pending_notice.
  std::string dump_quietly(const std::string& reason);
  uint64_t queued_locked(CollectiveKind kind, const ErrorContext& ctx, uint64_t comm, int comm_rank, int comm_size,
                         bool p2p, int peer, double at);

  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 1;  // entry id i lives in ring_[(i - 1) % capacity]
  int process_rank_ = -1;
  bool failure_dumped_ = false;
  std::string pending_notice_;  // a failure dump's notice not yet printed
  std::string dir_;
};

}  // namespace fsdp
