// The narrow contract every fabric implements: post a send, post a receive, make progress, report
// completion. Transports move bytes between two endpoints and know nothing of collectives, data
// types or reductions; algorithms know nothing of sockets or shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/block_pool.h"

namespace fsdp {

// Names one message in the whole job: the communicator context, and inside it the operation's
// sequence number and the transfer's slot in the algorithm (step, chunk). Concurrent operations and
// sub-communicators never receive each other's messages.
struct Tag {
  uint64_t context = 0;
  uint64_t op = 0;  // (sequence << 32) | slot
  friend bool operator==(const Tag&, const Tag&) = default;
};

// One posted send or receive. The transport completes it; the algorithm polls it.
class Request {
 public:
  enum class State : uint8_t { kPending, kDone, kFailed };

  Request(int peer, size_t bytes, bool is_send) : peer_(peer), bytes_(bytes), is_send_(is_send) {}

  bool done() const { return state_.load(std::memory_order_acquire) == State::kDone; }
  bool failed() const { return state_.load(std::memory_order_acquire) == State::kFailed; }
  bool pending() const { return state_.load(std::memory_order_acquire) == State::kPending; }
  int peer() const { return peer_; }
  size_t bytes() const { return bytes_; }
  bool is_send() const { return is_send_; }
  // Valid once failed(): why, and whether the peer itself is gone (vs. a protocol error).
  const std::string& error() const { return error_; }
  bool peer_lost() const { return peer_lost_; }

  void complete() { state_.store(State::kDone, std::memory_order_release); }
  // A request its owner reuses (one nobody else holds) made pending again for another transfer.
  void rearm(int peer, size_t bytes, bool is_send) {
    peer_ = peer;
    bytes_ = bytes;
    is_send_ = is_send;
    peer_lost_ = false;
    error_.clear();
    state_.store(State::kPending, std::memory_order_relaxed);
  }
  void fail(std::string why, bool peer_lost) {
    error_ = std::move(why);
    peer_lost_ = peer_lost;
    state_.store(State::kFailed, std::memory_order_release);
  }

 private:
  std::atomic<State> state_{State::kPending};
  int peer_;
  size_t bytes_;
  bool is_send_;
  bool peer_lost_ = false;
  std::string error_;
};

using RequestPtr = std::shared_ptr<Request>;

// A transport's requests, from a free list (common/block_pool.h): it makes one per transfer (under
// the engine's lock), and the last holder may drop it on any thread.
class RequestPool {
 public:
  RequestPtr make(int peer, size_t bytes, bool is_send) {
    return std::allocate_shared<Request>(PoolAllocator<Request>(blocks_), peer, bytes, is_send);
  }

 private:
  std::shared_ptr<BlockPool> blocks_ = std::make_shared<BlockPool>(BlockPool::Sharing::kFreedAnywhere);
};

// One endpoint of a job-wide fabric. All methods are called from one thread at a time (the progress
// engine's), so implementations need no locking of their own state except what they share with
// other endpoints.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;
  // This endpoint's index in the job and the number of endpoints.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // The buffer stays owned by the caller and must stay valid until the request leaves kPending.
  // A receive matches the send from `peer` with an equal tag; sizes must agree or both fail.
  virtual RequestPtr isend(int peer, const Tag& tag, const void* data, size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, const Tag& tag, void* data, size_t bytes) = 0;

  // Moves bytes and completes requests without blocking. Returns true when anything happened.
  virtual bool progress() = 0;

  // Withdraws a pending request so the transport never touches its buffer again.
  virtual void cancel(const RequestPtr& request) = 0;

  // True when every endpoint is a thread or process on this host that may map this process's memory
  // through /proc/<pid>/fd (shared-memory windows, collectives/window.h).
  virtual bool shares_host_memory() const { return false; }
  // True when every endpoint is a process of its own, so a call that waits on its peers cannot stall
  // them (one thread driving several endpoints, as ncclCommInitAll's ranks, would): the flag path's
  // condition (collectives/flag_path.h).
  virtual bool separate_processes() const { return false; }

  // Empty when `peer` looks alive; otherwise why it is not (the process exited, the socket closed).
  virtual std::string check_peer(int /*peer*/) { return {}; }

  // The first collective error of any communicator over this endpoint (a timeout, a lost peer), or
  // empty. Teardown reads it so that after a failure it aborts instead of waiting on the peers again
  // (World::shutdown). Written by the progress engine, read by any thread.
  void note_failure(const std::string& why) {
    std::lock_guard lock(failure_mu_);
    if (failure_.empty()) failure_ = why.empty() ? "unknown error" : why;
  }
  std::string failure() const {
    std::lock_guard lock(failure_mu_);
    return failure_;
  }

  // A peer found dead from outside the transport (launch/heartbeat: it stopped beating). From then on
  // lost_reason(peer) reports it, so the engine fails whatever waits on it with PeerLostError. Any thread.
  void declare_peer_lost(int peer, const std::string& why) {
    std::lock_guard lock(failure_mu_);
    if (declared_lost_.size() <= static_cast<size_t>(peer)) declared_lost_.resize(static_cast<size_t>(peer) + 1);
    if (declared_lost_[static_cast<size_t>(peer)].empty()) declared_lost_[static_cast<size_t>(peer)] = why;
  }
  // An endpoint a shrink left out (Communicator::shrink): first_lost_endpoint no longer looks at it, so
  // the survivors' collectives are not failed by the very loss they shrank away from. Any thread.
  void retire_peer(int peer) {
    std::lock_guard lock(failure_mu_);
    if (retired_.size() <= static_cast<size_t>(peer)) retired_.resize(static_cast<size_t>(peer) + 1, false);
    retired_[static_cast<size_t>(peer)] = true;
  }
  bool retired(int peer) const {
    std::lock_guard lock(failure_mu_);
    return static_cast<size_t>(peer) < retired_.size() && retired_[static_cast<size_t>(peer)];
  }
  // Empty when `peer` looks alive: what check_peer says, else why it was declared lost.
  std::string lost_reason(int peer) {
    std::string why = check_peer(peer);
    if (!why.empty()) return why;
    std::lock_guard lock(failure_mu_);
    return static_cast<size_t>(peer) < declared_lost_.size() ? declared_lost_[static_cast<size_t>(peer)] : "";
  }

 private:
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::vector<std::string> declared_lost_;  // by peer; empty: not declared
  std::vector<bool> retired_;               // by peer: left out by a shrink
};

// The lowest endpoint but this one (and those a shrink retired) that lost_reason reports gone (`why`
// set), or -1: every endpoint of the transport, not only one communicator's members. A collective that
// has waited long on live peers asks it: where groups were split from one world (HSDP's shard and
// replica groups), a live peer may have stopped on a loss in another group, and the job recovers (or
// ends) as a whole.
inline int first_lost_endpoint(Transport& transport, std::string& why) {
  why.clear();
  for (int p = 0; p < transport.size(); ++p) {
    if (p == transport.rank() || transport.retired(p)) continue;
    why = transport.lost_reason(p);
    if (!why.empty()) return p;
  }
  return -1;
}

// "; also lost: rank 1 (why)" for every endpoint but this one and `known` that lost_reason reports
// gone, or empty. A PeerLostError carries it, so a survivor whose neighbour exited only because it
// lost a peer itself still names the rank that died first.
inline std::string other_lost_peers(Transport& transport, int known) {
  std::string lost;
  for (int p = 0; p < transport.size(); ++p) {
    if (p == known || p == transport.rank()) continue;
    const std::string why = transport.lost_reason(p);
    if (why.empty()) continue;
    lost += (lost.empty() ? "; also lost: rank " : ", rank ") + std::to_string(p) + " (" + why + ")";
  }
  return lost;
}

}  // namespace fsdp
