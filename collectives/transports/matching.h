// Receive matching for transports that frame their own messages (shm, and the fabric transport over
// tcp, ucx and mpi): per peer, receives posted before their message arrived and messages that arrived
// before their receive, each kept in arrival order and matched by tag, so a pair's messages with
// equal tags match in send order. Also the loopback matching of self-sends and the size-mismatch text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "collectives/transports/message_header.h"
#include "collectives/transports/transport.h"

namespace fsdp {

struct PostedRecv {
  Tag tag;
  void* data;
  size_t bytes;
  RequestPtr request;
};

class ReceiveMatcher {
 public:
  struct Unexpected {
    MessageHeader header;
    // An inline payload copied out of the transport's buffers: small ones (a fingerprint, a barrier's
    // token) in the node itself, so a message that arrives before its receive costs no heap call.
    static constexpr size_t kInPlaceBytes = 64;
    std::byte in_place[kInPlaceBytes];
    std::vector<std::byte> spilled;
    const std::byte* eager() const { return spilled.empty() ? in_place : spilled.data(); }
  };

  // What irecv does with a receive: the earliest parked message with its tag goes to
  // deliver(header, eager payload, recv) at once; otherwise the receive fails if the peer is gone
  // (dead, with why and whether it was lost) or waits for its message.
  template <typename Deliver>
  void receive(PostedRecv recv, bool dead, const std::string& why, bool lost, Deliver&& deliver) {
    if (auto u = take_unexpected(recv.tag)) {
      deliver(u->header, u->eager(), recv);
    } else if (dead) {
      recv.request->fail(why, lost);
    } else {
      posted_.push_back(std::move(recv));
    }
  }

  // What a transport does with a message that arrived (its eager payload, if any, at `eager`, still
  // in the transport's buffer): to the earliest receive posted for its tag (deliver(header, eager,
  // recv)), or copied and parked for the receive to come.
  template <typename Deliver>
  void arrive(const MessageHeader& h, const std::byte* eager, size_t eager_bytes, Deliver&& deliver) {
    if (auto recv = take_posted(h)) {
      deliver(h, eager, *recv);
    } else {
      Unexpected& u = unexpected_.emplace_back();
      u.header = h;
      if (eager_bytes <= Unexpected::kInPlaceBytes) {
        if (eager_bytes) std::memcpy(u.in_place, eager, eager_bytes);
      } else {
        u.spilled.assign(eager, eager + eager_bytes);
      }
    }
  }

  void cancel(const RequestPtr& request) {
    posted_.remove_if([&](const PostedRecv& r) { return r.request == request; });
  }
  // Fails and forgets every posted receive: the peer is gone.
  void fail_all(const std::string& why, bool lost) {
    for (PostedRecv& r : posted_) r.request->fail(why, lost);
    posted_.clear();
  }

 private:
  // The earliest message parked with this tag, removed from the queue.
  std::optional<Unexpected> take_unexpected(const Tag& tag) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->header.tag() == tag) {
        Unexpected u = std::move(*it);
        unexpected_.erase(it);
        return u;
      }
    }
    return std::nullopt;
  }

  // The earliest receive posted for this message's tag, removed from the queue.
  std::optional<PostedRecv> take_posted(const MessageHeader& h) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (it->tag == h.tag()) {
        PostedRecv r = std::move(*it);
        posted_.erase(it);
        return r;
      }
    }
    return std::nullopt;
  }

  PooledList<PostedRecv> posted_{pooled<PostedRecv>()};
  PooledList<Unexpected> unexpected_{pooled<Unexpected>()};
};

// The error both sides of a size mismatch report, naming both ranks and sizes.
inline std::string size_mismatch_message(int sender, uint64_t sent, int receiver, uint64_t expected) {
  return "message size mismatch: rank " + std::to_string(sender) + " sent " + std::to_string(sent) + " bytes, rank " +
         std::to_string(receiver) + " expected " + std::to_string(expected) + " (do the ranks pass the same count?)";
}

// Sends and receives a rank posts to itself: matched in memory by tag, in posting order, with one
// memcpy, so a transport needs no loopback channel of its fabric.
class LoopbackMatcher {
 public:
  explicit LoopbackMatcher(int rank) : rank_(rank) {}

  void send(const Tag& tag, const void* data, size_t bytes, RequestPtr request) {
    post(sends_, recvs_, Posted{tag, const_cast<void*>(data), bytes, std::move(request)}, true);
  }
  void recv(const Tag& tag, void* data, size_t bytes, RequestPtr request) {
    post(recvs_, sends_, Posted{tag, data, bytes, std::move(request)}, false);
  }
  void cancel(const RequestPtr& request) {
    auto& queue = request->is_send() ? sends_ : recvs_;
    queue.remove_if([&](const Posted& p) { return p.request == request; });
  }

 private:
  struct Posted {
    Tag tag;
    void* data;
    size_t bytes;
    RequestPtr request;
  };

  void post(PooledList<Posted>& mine, PooledList<Posted>& other, Posted posted, bool is_send) {
    for (auto it = other.begin(); it != other.end(); ++it) {
      if (!(it->tag == posted.tag)) continue;
      Posted match = std::move(*it);
      other.erase(it);
      const Posted& s = is_send ? posted : match;
      const Posted& r = is_send ? match : posted;
      if (s.bytes != r.bytes) {
        const std::string why = size_mismatch_message(rank_, s.bytes, rank_, r.bytes);
        s.request->fail(why, false);
        r.request->fail(why, false);
        return;
      }
      if (s.bytes) std::memcpy(r.data, s.data, s.bytes);
      s.request->complete();
      r.request->complete();
      return;
    }
    mine.push_back(std::move(posted));
  }

  int rank_;
  PooledList<Posted> sends_{pooled<Posted>()};
  PooledList<Posted> recvs_{pooled<Posted>()};
};

}  // namespace fsdp
