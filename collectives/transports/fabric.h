// A fabric: the handful of primitives of a message layer (UCX's ucp tag API, MPI point to point, TCP
// sockets) on which fabric_transport.h builds a full Transport. The fabric only moves bytes with
// exact matching; the 128-bit Tag, receive matching, size checks, the eager / rendezvous protocol,
// the start-up hello and loopback live once in the fabric transport, so UCX, MPI and TCP share all
// of it and differ only here.
//
// Two kinds of message, kept apart by the fabric's own tag space (UCX, MPI) or framing (TCP):
//   control: at most kFabricMaxControlBytes, a MessageHeader first, from any peer, received by the
//     fabric on its own and handed over by next_control() in send order per ordered pair of ranks;
//   data: a payload of any size posted on both sides under a data id in [1, max_data_id()] that the
//     receiver chose and announced (so every posted data receive has exactly one sender). How the
//     bytes travel is the fabric's: UCX's and MPI's rendezvous, or pieces striped over TCP connections.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/transports/message_header.h"

namespace fsdp {

// The largest inline payload (eager) behind a control message's header.
inline constexpr size_t kFabricEagerBytes = 32 * 1024;
inline constexpr size_t kFabricMaxControlBytes = sizeof(MessageHeader) + kFabricEagerBytes;

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

// A peer the fabric gave up on: lost (its process or connection is gone), or not (it broke the
// framing, e.g. a malformed header on a TCP stream).
struct FabricFailure {
  int peer;
  std::string why;
  bool lost;
};

class Fabric {
 public:
  virtual ~Fabric() = default;

  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Data ids run from 1 to this (UCX: 2^40 - 1; MPI: MPI_TAG_UB; TCP: 2^63).
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
  // Peers the fabric saw fail since the last call, with why (UCX endpoint errors, closed or
  // malformed TCP streams).
  virtual std::vector<FabricFailure> take_failed_peers() { return {}; }
  // The protocol gave up on `peer` (it broke the protocol, or is gone) and has withdrawn every
  // operation with it: the fabric may release what it holds for the peer (TCP closes its
  // connections, so the peer learns of it at once). Nothing more is posted for it.
  virtual void drop_peer(int /*peer*/) {}
};

}  // namespace fsdp
