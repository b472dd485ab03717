// Receive matching for transports that frame their own messages (shm, tcp): per peer, receives
// posted before their message arrived and messages that arrived before their receive, each kept in
// arrival order and matched by tag, so a pair's messages with equal tags match in send order.
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "collectives/transports/transport.h"

namespace fsdp {

struct PostedRecv {
  Tag tag;
  void* data;
  size_t bytes;
  RequestPtr request;
};

// Header: the transport's frame header, with tag_context and tag_op fields.
template <typename Header>
class ReceiveMatcher {
 public:
  struct Unexpected {
    Header header;
    std::vector<std::byte> eager;  // an inline payload copied out of the transport's buffers
  };

  // The earliest message parked with this tag, removed from the queue.
  std::optional<Unexpected> take_unexpected(const Tag& tag) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->header.tag_context == tag.context && it->header.tag_op == tag.op) {
        Unexpected u = std::move(*it);
        unexpected_.erase(it);
        return u;
      }
    }
    return std::nullopt;
  }

  // The earliest receive posted for this message's tag, removed from the queue.
  std::optional<PostedRecv> take_posted(const Header& h) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (it->tag.context == h.tag_context && it->tag.op == h.tag_op) {
        PostedRecv r = std::move(*it);
        posted_.erase(it);
        return r;
      }
    }
    return std::nullopt;
  }

  void post(PostedRecv recv) { posted_.push_back(std::move(recv)); }
  void park(const Header& h, std::vector<std::byte> eager) { unexpected_.push_back(Unexpected{h, std::move(eager)}); }
  void cancel(const RequestPtr& request) {
    posted_.remove_if([&](const PostedRecv& r) { return r.request == request; });
  }
  // Fails and forgets every posted receive: the peer is gone.
  void fail_all(const std::string& why, bool lost) {
    for (PostedRecv& r : posted_) r.request->fail(why, lost);
    posted_.clear();
  }

 private:
  std::list<PostedRecv> posted_;
  std::list<Unexpected> unexpected_;
};

}  // namespace fsdp
