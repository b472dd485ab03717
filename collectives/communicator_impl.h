// What a Communicator holds and the steps every collective call shares: its group, engine stream and
// operation pool, the algorithm choice, the host layout, its shared windows and its flag path. Private
// to the communicator's files (communicator*.cc).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "collectives/algorithms/host_layout.h"
#include "collectives/algorithms/selection.h"
#include "collectives/algorithms/window_sync.h"
#include "collectives/communicator.h"
#include "collectives/core/fingerprint.h"
#include "collectives/core/flight_recorder.h"
#include "collectives/core/op.h"
#include "collectives/core/op_pool.h"
#include "collectives/core/progress_engine.h"
#include "collectives/core/window_table.h"
#include "collectives/flag_path.h"
#include "collectives/types/collective_kind.h"

namespace fsdp {

// Set in the tag context of a communicator's point-to-point operations, clear in its collectives'.
inline constexpr uint64_t kPointToPointBit = 1ull << 63;

struct Communicator::Impl {
  std::shared_ptr<Transport> transport;
  std::shared_ptr<ProgressEngine> engine;
  GroupView group;
  GroupView p2p_group;  // same ranks, its own tag context; its sequence numbers count per peer
  ScratchPool scratch;
  std::shared_ptr<OpPool> ops;  // reused from call to call
  ProgressEngine::Stream* stream = nullptr;
  AlgorithmChoice algorithms;
  uint64_t next_seq = 0;
  uint64_t shrinks = 0;            // shrink() calls so far: part of each child's context
  std::vector<uint64_t> sends_to;  // per peer, for matching point-to-point in call order
  std::vector<uint64_t> recvs_from;
  std::shared_ptr<const HostLayout> layout;  // null: every rank on one host (or not told)
  std::shared_ptr<WindowTable> windows;      // null until the first alloc_window
  OpPtr last_ordered;                        // the last collective given to the engine

  // The flag path (collectives/flag_path.h), set up by the communicator's first collective.
  enum class FlagSetup { kUntried, kSettingUp, kOn, kOff };
  FlagSetup flag_setup = FlagSetup::kUntried;
  std::shared_ptr<FlagSegment> flags;
  std::shared_ptr<FlagOp> flag_pool[2];  // by parity
  std::shared_ptr<FlagOp> flag_pending;  // the flag operation not yet known to be complete
  uint64_t flag_ops = 0;

  Impl(std::shared_ptr<Transport> t, std::shared_ptr<ProgressEngine> e, const CommOptions& o);

  // --- windows (communicator_windows.cc) ---
  // Where this rank's buffers of a collective lie in shared windows. Empty (no window exchange at
  // all) unless this communicator shares windows, which every rank knows alike (alloc_window is
  // collective); a count-0 or single-rank collective never needs one.
  WindowPlan window_plan(const void* read, size_t read_bytes, const void* fallback_read = nullptr,
                         const void* result = nullptr, size_t result_bytes = 0, bool needs_result = false) const;
  // all_to_all(_v): the send buffer's extent may be 0 on some ranks and not others, so unlike
  // window_plan the decision to exchange posts cannot hang on it (every rank must decide alike).
  WindowPlan window_plan_all_to_all(const void* send, size_t extent) const;

  // --- algorithm choice ---
  // The layout when the hierarchical algorithm should run this collective, else null (the coroutine
  // holds a reference, so a later set_host_layout cannot pull it from under an operation in flight).
  std::shared_ptr<const HostLayout> hierarchy(CollectiveKind collective, size_t bytes, const CommOptions& o) const;
  // Whether the latency-optimised algorithm runs it.
  bool small(CollectiveKind collective, size_t bytes, const CommOptions& o) const {
    return algorithms.small(collective, bytes, o.small_message_bytes);
  }

  // --- the flag path (communicator_flags.cc) ---
  // A communicator has one flag operation outstanding at most, and it completes before the next
  // collective is given to the engine or posted: errors stay with its own Work (and break the
  // communicator, so what follows fails at once).
  void settle_flag_op();
  // The collective `call` (of `bytes` per rank) posted on the flag path, or nullopt where it takes the
  // engine (set_up_at_first_collective first). Ranks that pass the same call decide alike (sizes,
  // options, layout and transport agree).
  std::optional<Work> flag_path(Communicator& comm, const CommOptions& o, size_t bytes, const FlagOp::Call& call);
  // At the communicator's first collective, whatever its size (so ranks whose counts differ still
  // set up together): set_up_flags, on every rank at once. The call's failed Work where that failed
  // (a peer missing, or a mismatch), else nullopt.
  std::optional<Work> set_up_at_first_collective(Communicator& comm, const Fingerprint& call, size_t bytes);
  // Rank 0 creates the segment; every rank maps it and reports; on if all did. The ranks' calls
  // (`call`) are compared on the way: MismatchError naming them where they differ.
  void set_up_flags(Communicator& comm, Fingerprint call);

  // --- the engine path ---
  OpPtr new_op(const CommOptions& o, CollectiveKind kind, size_t bytes, bool p2p, uint64_t seq, int peer = -1);
  // Hands the operation and its algorithm to the engine; ordered ones queue behind earlier collectives.
  Work submit(OpPtr op, Task task, bool ordered);
  // A collective: ordered, and fingerprinted first when the options ask for it.
  Work submit_collective(OpPtr op, Task task, const CommOptions& o, CollectiveKind kind, size_t count = 0,
                         int dtype = -1, int root = -1, int reduce = -1);
};

}  // namespace fsdp
