// Chrome / Perfetto trace of one rank: complete ('X') events on two tracks, "compute" and
// "communication", of a process named "rank <r>" (pid = rank). Open the file in ui.perfetto.dev or
// chrome://tracing. Format in docs/training.md.
//
//   Trace trace(rank, /*enabled=*/!cfg.metrics.trace_file.empty());
//   { auto s = trace.span(Track::kCompute, "forward"); ... }          // RAII: records on scope exit
//   auto ag = trace.begin(Track::kCommunication, "all_gather layers.3");  // training thread
//   trace.end(ag, bytes);                                              // later, on the progress thread
//   trace.write(rank_file_name(path, rank));  ... merge_trace_files(per_rank_files, path);
//
// Recording is thread-safe (one mutex; events are appended, never reordered). A disabled trace costs one
// branch per call and allocates nothing.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp {

enum class Track : int { kCompute = 0, kCommunication = 1 };  // the tid of the event
std::string_view name(Track t);                                // "compute", "communication"

class Trace {
 public:
  Trace() = default;  // disabled
  explicit Trace(int64_t rank, bool enabled = true) : rank_(rank), enabled_(enabled) {}
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  bool enabled() const { return enabled_; }
  int64_t rank() const { return rank_; }

  // Microseconds on the monotonic clock. CLOCK_MONOTONIC is shared by the processes of one host, so
  // traces of local ranks line up when merged.
  static double now_us();

  // One complete event. bytes >= 0 adds "args": {"bytes": N}.
  void complete(Track track, std::string_view name, double start_us, double duration_us, int64_t bytes = -1);
  // A counter sample ('C' event, drawn as a graph over time, e.g. bytes live): "args": {"bytes": value}.
  void counter(std::string_view name, double time_us, int64_t value);

  // Scoped span: records [construction, destruction) on the thread that destroys it. Move-only.
  class Span {
   public:
    Span() = default;
    Span(Span&& o) noexcept;
    Span& operator=(Span&& o) noexcept;
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    ~Span() { finish(); }
    void set_bytes(int64_t bytes) { bytes_ = bytes; }
    void finish();  // records now instead of at destruction (idempotent)

   private:
    friend class Trace;
    Span(Trace* trace, Track track, std::string_view name);
    Trace* trace_ = nullptr;  // nullptr: inert
    Track track_ = Track::kCompute;
    std::string name_;
    double start_us_ = 0;
    int64_t bytes_ = -1;
  };
  Span span(Track track, std::string_view name);

  // A span that starts on one thread and ends on another (a collective issued by the training thread and
  // completed by the progress engine). A plain value: copy it into the completion callback.
  struct Pending {
    Track track = Track::kCommunication;
    std::string name;
    double start_us = -1;  // < 0: inert (the trace was disabled at begin)
  };
  Pending begin(Track track, std::string_view name) const;
  void end(const Pending& pending, int64_t bytes = -1);

  size_t size() const;  // events recorded so far (metadata excluded)

  // {"traceEvents":[ metadata..., events... ],"displayTimeUnit":"ms"}: one event per line.
  std::string to_json() const;
  // Writes to_json() to `path`, creating its folder; throws std::runtime_error naming the path.
  void write(const std::string& path) const;

 private:
  struct Event {
    Track track;
    std::string name;
    double start_us;
    double duration_us;
    int64_t bytes;
    bool counter = false;  // a 'C' sample of `bytes` at start_us
  };

  int64_t rank_ = 0;
  bool enabled_ = false;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

// The per-rank file: "trace.json" -> "trace.rank<r>.json".
std::string trace_file_for_rank(const std::string& path, int64_t rank);

// Concatenates the "traceEvents" arrays of trace files (written by Trace or any tool emitting the JSON
// object form) into one file, so all ranks show as processes of one timeline. Throws
// std::runtime_error naming the file that is missing or has no traceEvents array.
void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output);
// The same over texts in memory: (source name for errors, trace JSON) pairs -> one trace JSON.
std::string merge_trace_json(const std::vector<std::pair<std::string, std::string>>& traces);

}  // namespace fsdp
