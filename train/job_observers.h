// The step loop's observers of the trainer in hand (train/train_job.cc): compute spans from its thread and
// collectives from the progress engine, into the overlap figures and the trace. Attached again to the
// trainer a recovery builds (train/job_recovery.h).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/trace.h"
#include "runtime/overlap.h"
#include "train/trainer.h"

namespace fsdp::train {

// Microseconds of a steady-clock time, the trace's unit.
inline double to_us(std::chrono::steady_clock::time_point t) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count()) /
         1000.0;
}

struct JobObservers {
  using Clock = std::chrono::steady_clock;
  bool tracing = false;
  Trace& trace;
  runtime::OverlapMeter& overlap;
  runtime::OverlapMeter& step_overlap;  // the step in hand
  double all_to_all_seconds = 0;

  void attach(Trainer& trainer) {
    trainer.set_compute_observer([this](std::string_view what, Clock::time_point start, Clock::time_point end) {
      overlap.compute(start, end);
      step_overlap.compute(start, end);
      if (tracing) trace.complete(Track::kCompute, what, to_us(start), to_us(end) - to_us(start));
    });
    runtime::FsdpModel* fsdp = &trainer.fsdp();
    fsdp->set_comm_observer([this, fsdp](CollectiveKind kind, std::string_view what, int unit, Clock::time_point start,
                                         Clock::time_point end, int64_t bytes) {
      overlap.communication(kind, start, end);
      step_overlap.communication(kind, start, end);
      if (tracing) {
        trace.complete(Track::kCommunication, std::string(what) + " " + fsdp->unit(unit).name(), to_us(start),
                       to_us(end) - to_us(start), bytes);
      }
    });
    // Expert parallelism's all-to-alls: inside the blocks' compute spans (the compute waits for them), so
    // timed on their own rather than counted as hidden by the overlap meter.
    trainer.set_exchange_observer(
        [this](std::string_view what, Clock::time_point start, Clock::time_point end, int64_t bytes) {
          all_to_all_seconds += std::chrono::duration<double>(end - start).count();
          if (tracing) trace.complete(Track::kCommunication, what, to_us(start), to_us(end) - to_us(start), bytes);
        });
  }
};

}  // namespace fsdp::train
