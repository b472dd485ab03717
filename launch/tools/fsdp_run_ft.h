// fsdp-run's side of in-job fault tolerance (docs/fault_tolerance.md): the job's ranks say they
// recover from a lost rank by writing "<job>ft/enabled" into the store this fsdp-run serves; from then
// on a rank's end is recorded under "<job>ft/exited/<rank>" for the survivors' agreement
// (launch/failure_agreement.h) instead of stopping the job, and the job is judged at the end by the
// latest decision the survivors recorded in "<job>ft/current".
#pragma once

#include <string>

#include "launch/failure_agreement.h"
#include "launch/key_value_store.h"

namespace fsdp::launch::run {

class FaultToleranceLink {
 public:
  // `store`: a client of the store this fsdp-run serves; `job_prefix`: the attempt's
  // job_key_prefix_of_attempt.
  FaultToleranceLink(KeyValueStore& store, std::string job_prefix) : store_(store), prefix_(std::move(job_prefix)) {}

  // Whether the ranks enabled fault tolerance; asked of the store until it says yes (the key is never
  // removed). A store that cannot be read counts as "no": fail-fast, as without the key.
  bool enabled();
  // "<job>ft/exited/<rank>" = cause ("was killed by signal 9 (SIGKILL)"); false if the store refused.
  bool record_exit(int rank, const std::string& cause);
  // Whether "<job>ft/exited/<rank>" is still there (a newcomer that replaced the rank cleared it).
  bool exit_recorded(int rank);
  // Removes "<job>ft/exited/<rank>" before a replacement of that rank starts; false if the store refused.
  bool clear_exit(int rank);
  // The latest recorded decision; false when none (or it cannot be read: said on stderr).
  bool decision(RecoveryDecision* out);

 private:
  KeyValueStore& store_;
  const std::string prefix_;
  bool enabled_ = false;
};

}  // namespace fsdp::launch::run
