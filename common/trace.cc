#include "common/trace.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/json.h"
#include "common/output_files.h"

namespace fsdp {
namespace {

std::string metadata(int64_t pid, int tid, std::string_view what, std::string_view value) {
  return "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"name\":" +
         json::quote(what) + ",\"args\":{\"name\":" + json::quote(value) + "}}";
}

// The text inside the top-level "traceEvents": [ ... ] of a trace file, trimmed.
std::string events_body(const std::string& text, const std::string& path) {
  const size_t key = text.find("\"traceEvents\"");
  const size_t open = key == std::string::npos ? key : text.find('[', key);
  if (open == std::string::npos) throw std::runtime_error("merge_trace_files: '" + path + "' has no traceEvents array");
  int depth = 0;
  bool in_string = false;
  for (size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (--depth == 0) {
        std::string body = text.substr(open + 1, i - open - 1);
        const size_t first = body.find_first_not_of(" \t\r\n");
        const size_t last = body.find_last_not_of(" \t\r\n");
        return first == std::string::npos ? std::string() : body.substr(first, last - first + 1);
      }
    }
  }
  throw std::runtime_error("merge_trace_files: '" + path + "': traceEvents array is not closed (truncated file?)");
}

}  // namespace

std::string_view name(Track t) { return t == Track::kCompute ? "compute" : "communication"; }

double Trace::now_us() {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
  return static_cast<double>(ns.count()) / 1000.0;
}

void Trace::complete(Track track, std::string_view name, double start_us, double duration_us, int64_t bytes) {
  if (!enabled_) return;
  Event e{track, std::string(name), start_us, duration_us < 0 ? 0 : duration_us, bytes};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}

void Trace::counter(std::string_view name, double time_us, int64_t value) {
  if (!enabled_) return;
  Event e{Track::kCompute, std::string(name), time_us, 0, value, true};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}

Trace::Span::Span(Trace* trace, Track track, std::string_view name)
    : trace_(trace), track_(track), name_(name), start_us_(now_us()) {}

Trace::Span::Span(Span&& o) noexcept
    : trace_(o.trace_), track_(o.track_), name_(std::move(o.name_)), start_us_(o.start_us_), bytes_(o.bytes_) {
  o.trace_ = nullptr;
}

Trace::Span& Trace::Span::operator=(Span&& o) noexcept {
  if (this != &o) {
    finish();
    trace_ = o.trace_;
    track_ = o.track_;
    name_ = std::move(o.name_);
    start_us_ = o.start_us_;
    bytes_ = o.bytes_;
    o.trace_ = nullptr;
  }
  return *this;
}

void Trace::Span::finish() {
  if (trace_ == nullptr) return;
  trace_->complete(track_, name_, start_us_, now_us() - start_us_, bytes_);
  trace_ = nullptr;
}

Trace::Span Trace::span(Track track, std::string_view name) {
  if (!enabled_) return Span();
  return Span(this, track, name);
}

Trace::Pending Trace::begin(Track track, std::string_view name) const {
  if (!enabled_) return Pending{};
  return Pending{track, std::string(name), now_us()};
}

void Trace::end(const Pending& pending, int64_t bytes) {
  if (!enabled_ || pending.start_us < 0) return;
  complete(pending.track, pending.name, pending.start_us, now_us() - pending.start_us, bytes);
}

size_t Trace::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string Trace::to_json() const {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events = events_;
  }
  std::ostringstream out;
  out << "{\"traceEvents\":[\n";
  out << metadata(rank_, 0, "process_name", "rank " + std::to_string(rank_)) << ",\n";
  out << "{\"ph\":\"M\",\"pid\":" << rank_ << ",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":"
      << rank_ << "}},\n";
  out << metadata(rank_, static_cast<int>(Track::kCompute), "thread_name", name(Track::kCompute)) << ",\n";
  out << metadata(rank_, static_cast<int>(Track::kCommunication), "thread_name", name(Track::kCommunication));
  for (const auto& e : events) {
    if (e.counter) {
      out << ",\n{\"ph\":\"C\",\"pid\":" << rank_ << ",\"name\":" << json::quote(e.name)
          << ",\"ts\":" << json::number(e.start_us) << ",\"args\":{\"bytes\":" << e.bytes << "}}";
      continue;
    }
    out << ",\n{\"ph\":\"X\",\"pid\":" << rank_ << ",\"tid\":" << static_cast<int>(e.track)
        << ",\"name\":" << json::quote(e.name) << ",\"cat\":" << json::quote(name(e.track))
        << ",\"ts\":" << json::number(e.start_us) << ",\"dur\":" << json::number(e.duration_us);
    if (e.bytes >= 0) out << ",\"args\":{\"bytes\":" << e.bytes << "}";
    out << "}";
  }
  out << "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out.str();
}

void Trace::write(const std::string& path) const { write_text_file(path, to_json(), "Trace::write"); }

std::string trace_file_for_rank(const std::string& path, int64_t rank) { return rank_file_name(path, rank); }

std::string merge_trace_json(const std::vector<std::pair<std::string, std::string>>& traces) {
  std::string merged = "{\"traceEvents\":[\n";
  bool any = false;
  for (const auto& [source, text] : traces) {
    const std::string body = events_body(text, source);
    if (body.empty()) continue;
    merged += (any ? ",\n" : "") + body;
    any = true;
  }
  merged += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return merged;
}

void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<std::pair<std::string, std::string>> traces;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("merge_trace_files: cannot read '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    traces.emplace_back(path, ss.str());
  }
  write_text_file(output, merge_trace_json(traces), "merge_trace_files");
}

}  // namespace fsdp
