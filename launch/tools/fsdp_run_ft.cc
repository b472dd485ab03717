#include "launch/tools/fsdp_run_ft.h"

#include <cstdio>

#include "collectives/types/errors.h"

namespace fsdp::launch::run {

bool FaultToleranceLink::enabled() {
  if (enabled_) return true;
  try {
    store_.get(prefix_ + "ft/enabled", std::chrono::milliseconds(0));  // only looks
    enabled_ = true;
  } catch (const TimeoutError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: cannot read '%sft/enabled' from the store: %s (fail-fast)\n", prefix_.c_str(),
                 e.what());
  }
  return enabled_;
}

bool FaultToleranceLink::record_exit(int rank, const std::string& cause) {
  try {
    store_.set(exited_key(prefix_, rank), cause);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: cannot record rank %d's exit in the store: %s\n", rank, e.what());
    return false;
  }
}

bool FaultToleranceLink::exit_recorded(int rank) {
  try {
    return peek(store_, exited_key(prefix_, rank)).has_value();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: cannot read rank %d's exit from the store: %s\n", rank, e.what());
    return true;
  }
}

bool FaultToleranceLink::clear_exit(int rank) {
  try {
    store_.erase(exited_key(prefix_, rank));
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: cannot clear rank %d's exit in the store: %s\n", rank, e.what());
    return false;
  }
}

bool FaultToleranceLink::decision(RecoveryDecision* out) {
  try {
    return current_decision(store_, prefix_, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: cannot read '%sft/current' from the store: %s\n", prefix_.c_str(), e.what());
    return false;
  }
}

}  // namespace fsdp::launch::run
