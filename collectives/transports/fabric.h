// A fabric: the handful of primitives of a tagged message layer (UCX's ucp tag API, MPI point to
// point) on which fabric_transport.h builds a full Transport. The fabric only moves bytes with exact
// matching; the 128-bit Tag, receive matching, size checks, rendezvous and loopback live once in the
// fabric transport, so UCX and MPI share all of it and differ only here.
//
// Two kinds of message, kept apart by the fabric's own tag space:
//   control: at most kFabricMaxControlBytes, from any peer, received by the fabric on its own (probe
//     and receive) and handed over by next_control() in send order per ordered pair of ranks;
//   data: a payload of any size posted on both sides under a data id in [1, max_data_id()] that the
//     receiver chose and announced (so every posted data receive has exactly one sender).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdp {

// The header of a control message and the largest inline payload (eager) behind it.
inline constexpr size_t kFabricHeaderBytes = 48;
inline constexpr size_t kFabricEagerBytes = 32 * 1024;
inline constexpr size_t kFabricMaxControlBytes = kFabricHeaderBytes + kFabricEagerBytes;

// How a posted operation ended; reported once, through its callback.
struct FabricResult {
  bool ok = true;
  bool peer_lost = false;  // failed because the peer is gone (vs. a local or protocol error)
  size_t bytes = 0;        // receives: the bytes that arrived
  std::string error;
};
using FabricCallback = std::function<void(const FabricResult&)>;

// A posted operation. Backends derive from it to keep their handles; `finished` turns true just
// before the callback runs.
struct FabricOp {
  virtual ~FabricOp() = default;
  bool finished = false;
  FabricCallback done;
};
using FabricOpPtr = std::shared_ptr<FabricOp>;

class Fabric {
 public:
  virtual ~Fabric() = default;

  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Data ids run from 1 to this (UCX: 2^40 - 1; MPI: MPI_TAG_UB).
  virtual uint64_t max_data_id() const = 0;

  // Callbacks run only inside progress() and cancel(), never inside the call that posted the
  // operation, so a caller may post from a callback and never sees one re-enter its own post.
  virtual FabricOpPtr send_control(int peer, std::vector<std::byte> message, FabricCallback done) = 0;
  // The next control message that fully arrived, from any peer; false when none.
  virtual bool next_control(int& from, std::vector<std::byte>& message) = 0;
  virtual FabricOpPtr send_data(int peer, uint64_t id, const void* data, size_t bytes, FabricCallback done) = 0;
  virtual FabricOpPtr recv_data(int peer, uint64_t id, void* data, size_t bytes, FabricCallback done) = 0;

  // Moves bytes and runs callbacks of what finished, without blocking. True when anything happened.
  virtual bool progress() = 0;
  // Asks the fabric to withdraw `op`. Its callback still runs, now or in a later progress(): failed
  // when withdrawn, done when it was too late (a send already under way cannot be recalled).
  virtual void cancel(const FabricOpPtr& op) = 0;

  // Why `peer` is gone (its process exited, the fabric saw its endpoint fail), or empty.
  virtual std::string check_peer(int peer) = 0;
  // Peers the fabric saw fail since the last call, with why (UCX endpoint errors).
  virtual std::vector<std::pair<int, std::string>> take_failed_peers() { return {}; }
};

}  // namespace fsdp
