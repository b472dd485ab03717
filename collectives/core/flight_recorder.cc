#include "collectives/core/flight_recorder.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/atomic_file.h"
#include "common/json.h"
#include "common/knobs.h"

namespace fsdp {
namespace {

double clock_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double now() { return clock_seconds(CLOCK_MONOTONIC); }
// steady_clock is CLOCK_MONOTONIC on Linux (libstdc++).
double seconds_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

std::string comm_id_text(uint64_t comm) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(comm));
  return text;
}

const char* name(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::State::kQueued:
      return "queued";
    case FlightEntry::State::kStarted:
      return "started";
    case FlightEntry::State::kDone:
      return "done";
    case FlightEntry::State::kFailed:
      return "failed";
  }
  return "unknown";
}

FlightRecorder& FlightRecorder::instance() {
  // Never destroyed: operations finishing during static destruction still find it.
  static FlightRecorder* r = [] {
    auto* made = new FlightRecorder(static_cast<size_t>(knobs::kFlightRecorderEntries.get()));
    made->dir_ = knobs::kFlightRecorderDir.get();
    return made;
  }();
  return *r;
}

FlightRecorder::FlightRecorder(size_t capacity) : ring_(capacity) {}

uint64_t FlightRecorder::queued(CollectiveKind kind, const ErrorContext& ctx, uint64_t comm, int comm_rank,
                                int comm_size, bool p2p, int peer) {
  if (ring_.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return queued_locked(kind, ctx, comm, comm_rank, comm_size, p2p, peer, now());
}

uint64_t FlightRecorder::started_now(CollectiveKind kind, const ErrorContext& ctx, uint64_t comm, int comm_rank,
                                     int comm_size, std::chrono::steady_clock::time_point at) {
  if (ring_.empty()) return 0;
  const double t = seconds_of(at);
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = queued_locked(kind, ctx, comm, comm_rank, comm_size, false, -1, t);
  FlightEntry& e = ring_[(id - 1) % ring_.size()];
  e.state = FlightEntry::State::kStarted;
  e.started = t;
  return id;
}

uint64_t FlightRecorder::queued_locked(CollectiveKind kind, const ErrorContext& ctx, uint64_t comm, int comm_rank,
                                       int comm_size, bool p2p, int peer, double at) {
  const uint64_t id = next_id_++;
  FlightEntry& e = ring_[(id - 1) % ring_.size()];
  e = FlightEntry{};
  e.rank = ctx.rank;
  e.comm = comm;
  e.comm_rank = comm_rank;
  e.comm_size = comm_size;
  const std::string_view op = name(kind);
  std::memcpy(e.op, op.data(), std::min(op.size(), sizeof(e.op) - 1));
  e.p2p = p2p;
  e.seq = ctx.seq;
  e.bytes = ctx.bytes;
  e.peer = peer;
  e.queued = at;
  if (process_rank_ < 0) process_rank_ = ctx.rank;
  return id;
}

FlightEntry* FlightRecorder::slot(uint64_t id) {
  if (id == 0 || ring_.empty() || id + ring_.size() < next_id_) return nullptr;
  return &ring_[(id - 1) % ring_.size()];
}

void FlightRecorder::started(uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (FlightEntry* e = slot(id)) {
    e->state = FlightEntry::State::kStarted;
    e->started = now();
  }
}

void FlightRecorder::finished(uint64_t id, const Failure* failure) {
  if (id == 0) return;
  finished(id, failure, std::chrono::steady_clock::now());
}

void FlightRecorder::finished(uint64_t id, const Failure* failure, std::chrono::steady_clock::time_point at) {
  if (id == 0) return;
  bool first_failure = false;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FlightEntry* e = slot(id);
    if (e) {
      e->state = failure ? FlightEntry::State::kFailed : FlightEntry::State::kDone;
      e->finished = seconds_of(at);
      if (e->started == 0) e->started = e->finished;
      if (failure) e->error = describe(failure->ctx, failure->detail);
    }
    if (failure && !failure_dumped_) {
      failure_dumped_ = true;
      first_failure = true;
      reason = "first failed operation: " + describe(failure->ctx, failure->detail);
    }
  }
  if (first_failure) dump_quietly(reason);
}

std::string FlightRecorder::dump_quietly(const std::string& reason) {
  std::string notice;
  const std::string path = write_dump(reason, notice);
  if (path.empty()) return "";
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_notice_ = notice;
  }
  // The error that caused it reaches the user later (a Work's wait, then the caller's report), so
  // the notice waits for the exit, unless an explicit dump() after the report prints it first.
  if (this == &instance()) {
    static std::once_flag registered;
    std::call_once(registered, [] { std::atexit([] { instance().print_pending_notice(); }); });
  }
  return path;
}

void FlightRecorder::print_pending_notice() {
  std::string notice;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notice = std::exchange(pending_notice_, {});
  }
  if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
}

std::string FlightRecorder::dump(const std::string& reason) {
  std::string notice;
  const std::string path = write_dump(reason, notice);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!path.empty()) pending_notice_ = notice;  // replaces the failure dump's: one line per rank
  }
  print_pending_notice();
  return path;
}

void FlightRecorder::set_dump_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  dir_ = dir;
  failure_dumped_ = false;  // the next failure dumps into the new directory
}

std::string FlightRecorder::dump_dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dir_;
}

int FlightRecorder::process_rank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return process_rank_;
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  const uint64_t first = next_id_ > ring_.size() ? next_id_ - ring_.size() : 1;
  for (uint64_t id = first; id < next_id_; ++id) out.push_back(ring_[(id - 1) % ring_.size()]);
  return out;
}

std::string FlightRecorder::write_dump(const std::string& reason, std::string& notice) {
  const std::string dir = dump_dir();
  const int rank = process_rank();
  if (dir.empty() || rank < 0) return "";
  const std::vector<FlightEntry> entries = snapshot();
  json::Writer w;
  w.begin_object();
  w.key("rank").value(rank);
  w.key("pid").value(static_cast<int64_t>(::getpid()));
  w.key("reason").value(reason);
  w.key("wall_time").value(clock_seconds(CLOCK_REALTIME));
  w.key("monotonic_time").value(now());
  w.key("entries").begin_array();
  for (const FlightEntry& e : entries) {
    w.begin_object();
    w.key("rank").value(e.rank);
    w.key("comm").value(comm_id_text(e.comm));
    w.key("comm_rank").value(e.comm_rank);
    w.key("comm_size").value(e.comm_size);
    w.key("op").value(e.op);
    w.key("p2p").value(e.p2p);
    w.key("seq").value(static_cast<int64_t>(e.seq));
    w.key("bytes").value(e.bytes);
    w.key("peer").value(e.peer);
    w.key("state").value(name(e.state));
    w.key("queued").value(e.queued);
    w.key("started").value(e.started);
    w.key("finished").value(e.finished);
    w.key("error").value(e.error);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/flight_recorder_rank" + std::to_string(rank) + ".json";
  if (const std::string error = write_file_atomically(path, w.text() + "\n"); !error.empty()) {
    std::fprintf(stderr, "fsdp: rank %d could not write its flight recorder: %s\n", rank, error.c_str());
    return "";
  }
  notice = "fsdp: rank " + std::to_string(rank) + " wrote its last " + std::to_string(entries.size()) +
           " collectives to " + path + " (fsdp-flight " + dir + ")";
  return path;
}

}  // namespace fsdp
