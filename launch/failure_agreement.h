// Agreement on what failed (docs/fault_tolerance.md): after a lost peer every survivor posts that it
// is alive, waits until each rank of the old world has posted or is known lost, and the first
// survivor whose compare_set lands writes the decision every participant returns. Keys, under the
// job's prefix ("fsdp/<run>/"):
//   ft/epoch<e>/alive/<old rank>  the committed step of a survivor of epoch e-1's world
//   ft/epoch<e>/decision          encode_decision(...), written once
//   ft/exited/<launch rank>       the launcher's word that the process ended (fsdp-run, FT mode)
//   ft/current                    the latest decision (highest epoch), for the launcher
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/key_value_store.h"

namespace fsdp::launch {

struct RecoveryDecision {
  int64_t epoch = 0;
  std::vector<int> survivors;  // ranks of the world before `epoch`, ascending: new rank = position
  int64_t committed_step = 0;  // the highest committed step any survivor posted
  // The new world's ranks as the launcher started them (RANK), in new rank order: the survivors' (epoch
  // e-1's decision maps old ranks to them; identity at epoch 1), then after a grow the newcomers'
  // (launch/grow_agreement.h). fsdp-run judges the job by these.
  std::vector<int> launch_ranks;
  // Newcomers at the end of launch_ranks (a grow); 0 after a loss.
  int joined() const { return static_cast<int>(launch_ranks.size() - survivors.size()); }

  bool operator==(const RecoveryDecision&) const = default;
};

// "epoch 1 step 41 survivors 0,1,3 launch 0,1,3"; decode throws InvalidArgument naming the text.
std::string encode_decision(const RecoveryDecision& d);
RecoveryDecision decode_decision(const std::string& text);

// Thrown to a rank the survivors went on without: it must exit, not write anything more.
class Fenced : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The agreement above for the recovery that starts epoch `new_epoch` (>= 1) of a world of `old_size`
// ranks. `known_lost` gives old ranks known dead (the caller's own lost-peer error, the heartbeat's
// frozen key); it is asked each poll slice (~10 ms). A rank that neither posts nor is known lost is
// decided without once `timeout` passed. Throws Fenced when `old_rank` is not among the survivors
// ("rank 2 was declared lost at epoch 1 ..."), InvalidArgument for a rank outside the world.
RecoveryDecision agree_on_failure(KeyValueStore& store, const std::string& job_prefix, int64_t new_epoch, int old_rank,
                                  int old_size, int64_t committed_step,
                                  const std::function<std::vector<int>()>& known_lost,
                                  std::chrono::milliseconds timeout);

// "<job_prefix>ft/exited/<launch rank>": the one spelling of the launcher's record that a rank ended.
std::string exited_key(const std::string& job_prefix, int launch_rank);

// The key's value if it is there now; never waits (KeyValueStore's timeout 0 only looks).
std::optional<std::string> peek(KeyValueStore& store, const std::string& key);

// Moves ft/current forward to `d` (never back to an earlier epoch's decision).
void publish_current(KeyValueStore& store, const std::string& job_prefix, const RecoveryDecision& d);

// ft/current's decision, if one was recorded (the launcher's read; never waits).
bool current_decision(KeyValueStore& store, const std::string& job_prefix, RecoveryDecision* out);

}  // namespace fsdp::launch
