#include "sharding/schedule_sim.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <stdexcept>
#include <string>

namespace fsdp::sharding {
namespace {

constexpr double kDone = 1e-12;  // seconds of work left that count as finished (rounding)

enum class CallState : uint8_t { kNone, kQueued, kRunning, kDone };
enum class Thread : uint8_t { kReady, kComputing, kWaiting };

struct SegmentTime {
  double duration = 0, compute = 0, exposed = 0;
};

// The event loop: between two events every activity progresses at a constant rate, so time jumps to
// the next completion.
class Engine {
 public:
  Engine(const Program& p, const SimOptions& o)
      : p_(p),
        o_(o),
        slow_(1.0 / (1.0 + std::clamp(o.contention, 0.0, 1.0))),
        state_(p.calls.size(), CallState::kNone),
        left_(p.calls.size(), 0.0),
        latency_left_(p.calls.size(), 0.0),
        started_(p.calls.size(), 0.0),
        seg_time_(p.segments.size()) {
    running_on_stream_.fill(-1);
  }

  StepSimulation run() {
    const size_t n = p_.instructions.size();
    while (true) {
      step_thread();
      if (pc_ >= n) break;
      advance();
    }
    StepSimulation out;
    for (size_t s = 0; s < p_.segments.size(); ++s) {
      const auto r = static_cast<double>(p_.segments[s].repeat);
      out.step += r * seg_time_[s].duration;
      out.compute += r * seg_time_[s].compute;
      out.exposed_communication += r * seg_time_[s].exposed;
    }
    out.peak_bytes = p_.memory.peak;
    if (o_.record) {
      for (auto& span : spans_) span.start -= origin_;
      for (auto& m : memory_) m.time -= origin_;
      out.spans = std::move(spans_);
      out.memory = std::move(memory_);
    }
    return out;
  }

 private:
  size_t segment_of_pc() {
    while (seg_ + 1 < p_.segments.size() && pc_ >= p_.segments[seg_].end) {
      ++seg_;
      if (p_.segments[seg_].repeat > 0 && !origin_set_) {
        origin_ = now_;
        origin_set_ = true;
      }
    }
    return seg_;
  }

  void start(int c) {
    state_[c] = CallState::kRunning;
    const SimCollective& sc = p_.calls[c].collective;
    // A call the training thread already waits for skips its latency: see SimCollective::latency_seconds.
    const bool awaited = thread_ == Thread::kWaiting && waiting_for_ == c;
    latency_left_[c] = awaited ? 0.0 : std::clamp(sc.latency_seconds, 0.0, sc.seconds);
    left_[c] = sc.seconds - latency_left_[c];
    started_[c] = now_;
    active_.push_back(c);
  }

  void submit(int c) {
    const int stream = p_.calls[c].collective.stream;
    state_[c] = CallState::kQueued;
    if (running_on_stream_[stream] < 0) {
      running_on_stream_[stream] = c;
      start(c);
    } else {
      queued_[stream].push_back(c);
    }
  }

  // Runs the instructions that take no time, up to the next compute span or unfinished wait.
  void step_thread() {
    const size_t n = p_.instructions.size();
    while (thread_ == Thread::kReady && pc_ < n) {
      segment_of_pc();
      const Instruction& in = p_.instructions[pc_];
      switch (in.op) {
        case Op::kMemory:
          if (o_.record) memory_.push_back(MemoryPoint{now_, in.bytes});
          ++pc_;
          break;
        case Op::kIssue:
          submit(in.call);
          ++pc_;
          break;
        case Op::kBlocking:
          start(in.call);  // on the training thread: no stream queue
          [[fallthrough]];
        case Op::kWait:
          if (state_[in.call] == CallState::kDone) {
            ++pc_;
          } else {
            thread_ = Thread::kWaiting;
            waiting_for_ = in.call;
            latency_left_[in.call] = 0;  // the waiting thread drives it (caller-driven progress)
          }
          break;
        case Op::kCompute:
          if (in.seconds <= 0) {
            ++pc_;
          } else {
            thread_ = Thread::kComputing;
            compute_left_ = in.seconds;
            compute_start_ = now_;
          }
          break;
      }
    }
  }

  void record(SpanKind kind, int unit, double start, int64_t bytes) {
    if (o_.record) spans_.push_back(SimSpan{kind, unit, start, now_ - start, bytes});
  }

  void advance() {
    if (thread_ == Thread::kWaiting && active_.empty()) {
      const auto& c = p_.calls[static_cast<size_t>(waiting_for_)];
      throw std::logic_error("schedule simulation: the training thread waits for " + std::string(name(c.kind)) +
                             " of unit " + std::to_string(c.unit) + ", which was never issued (instruction " +
                             std::to_string(pc_) + ")");
    }
    const bool computing = thread_ == Thread::kComputing;
    // A call first waits out its latency (alone: no link share, no core taken), then moves its bytes.
    auto waiting = [&](int c) { return latency_left_[c] > kDone; };
    std::array<int, kNumLinks> on_link{};
    bool transferring = false;
    for (int c : active_) {
      if (waiting(c)) continue;
      ++on_link[static_cast<size_t>(p_.calls[c].collective.link)];
      transferring = true;
    }
    const double compute_rate = computing && transferring ? slow_ : 1.0;
    auto rate_of = [&](int c) {
      return (computing ? slow_ : 1.0) / on_link[static_cast<size_t>(p_.calls[c].collective.link)];
    };
    double dt = computing ? compute_left_ / compute_rate : std::numeric_limits<double>::infinity();
    for (int c : active_) dt = std::min(dt, waiting(c) ? latency_left_[c] : left_[c] / rate_of(c));

    SegmentTime& st = seg_time_[segment_of_pc()];
    st.duration += dt;
    (computing ? st.compute : st.exposed) += dt;
    now_ += dt;

    std::vector<int> finished;
    for (int c : active_) {
      if (waiting(c)) {
        latency_left_[c] -= dt;
        if (latency_left_[c] <= kDone) latency_left_[c] = 0;
      } else {
        left_[c] -= rate_of(c) * dt;
      }
      if (!waiting(c) && left_[c] <= kDone) finished.push_back(c);
    }
    if (computing) {
      compute_left_ -= compute_rate * dt;
      if (compute_left_ <= kDone) {
        const Instruction& in = p_.instructions[pc_];
        record(in.kind, in.unit, compute_start_, -1);
        thread_ = Thread::kReady;
        ++pc_;
      }
    }
    for (int c : finished) finish(c);
    if (thread_ == Thread::kWaiting && state_[waiting_for_] == CallState::kDone) {
      thread_ = Thread::kReady;
      ++pc_;
    }
  }

  void finish(int c) {
    state_[c] = CallState::kDone;
    active_.erase(std::find(active_.begin(), active_.end(), c));
    const CollectiveCall& call = p_.calls[c];
    record(call.kind, call.unit, started_[c], call.collective.bytes);
    const int stream = call.collective.stream;
    if (running_on_stream_[stream] != c) return;  // a blocking one
    running_on_stream_[stream] = -1;
    if (!queued_[stream].empty()) {
      const int next = queued_[stream].front();
      queued_[stream].pop_front();
      running_on_stream_[stream] = next;
      start(next);
    }
  }

  const Program& p_;
  const SimOptions& o_;
  const double slow_;  // rate of compute and collectives while they overlap
  std::vector<CallState> state_;
  std::vector<double> left_;     // seconds of transfer left at full rate
  std::vector<double> latency_left_;  // seconds of latency left before the transfer starts
  std::vector<double> started_;  // when each call started
  std::vector<int> active_;      // calls running
  std::array<int, kNumStreams> running_on_stream_{};
  std::array<std::deque<int>, kNumStreams> queued_;
  std::vector<SegmentTime> seg_time_;
  size_t seg_ = 0;
  size_t pc_ = 0;
  Thread thread_ = Thread::kReady;
  int waiting_for_ = -1;
  double compute_left_ = 0, compute_start_ = 0;
  double now_ = 0;
  double origin_ = 0;
  bool origin_set_ = false;
  std::vector<SimSpan> spans_;
  std::vector<MemoryPoint> memory_;
};

}  // namespace

StepSimulation simulate(const Program& program, const SimOptions& options) {
  for (const auto& c : program.calls) {
    if (c.collective.stream < 0 || c.collective.stream >= kNumStreams || c.collective.link < 0 ||
        c.collective.link >= kNumLinks) {
      throw std::invalid_argument("schedule simulation: " + std::string(name(c.kind)) + " of unit " +
                                  std::to_string(c.unit) + " names stream " + std::to_string(c.collective.stream) +
                                  " / link " + std::to_string(c.collective.link) + " out of range");
    }
  }
  return Engine(program, options).run();
}

}  // namespace fsdp::sharding
