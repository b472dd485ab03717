#include "collectives/transports/inproc.h"

#include <cstring>
#include <list>
#include <mutex>
#include <sstream>

namespace fsdp {
namespace {

// A posted operation waiting for its counterpart.
struct Posted {
  int peer;  // the other side's rank
  Tag tag;
  void* data;  // const for sends; never written through
  size_t bytes;
  RequestPtr request;
};

// Everything addressed to one receiver: sends no receive has matched yet, receives no send has.
struct Mailbox {
  std::mutex mu;
  PooledList<Posted> sends{pooled<Posted>()};
  PooledList<Posted> recvs{pooled<Posted>()};
};

PooledList<Posted>::iterator find(PooledList<Posted>& queue, int peer, const Tag& tag) {
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    if (it->peer == peer && it->tag == tag) return it;
  }
  return queue.end();
}

// Copies a matched pair and completes both sides, or fails both when sizes disagree.
void deliver(const Posted& send, const Posted& recv, int sender, int receiver) {
  if (send.bytes != recv.bytes) {
    std::ostringstream why;
    why << "message size mismatch: rank " << sender << " sent " << send.bytes << " bytes, rank " << receiver
        << " expected " << recv.bytes << " (do the ranks pass the same count?)";
    send.request->fail(why.str(), false);
    recv.request->fail(why.str(), false);
    return;
  }
  if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
  send.request->complete();
  recv.request->complete();
}

}  // namespace

class InProcFabric {
 public:
  explicit InProcFabric(int size) : boxes_(size) {}
  Mailbox& box(int rank) { return boxes_[rank]; }

 private:
  std::vector<Mailbox> boxes_;
};

namespace {

class InProcTransport final : public Transport {
 public:
  InProcTransport(std::shared_ptr<InProcFabric> fabric, int rank, int size)
      : fabric_(std::move(fabric)), rank_(rank), size_(size) {}

  std::string_view name() const override { return "inproc"; }
  bool shares_host_memory() const override { return true; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, const Tag& tag, const void* data, size_t bytes) override {
    auto request = requests_.make(peer, bytes, true);
    Posted send{rank_, tag, const_cast<void*>(data), bytes, request};
    Mailbox& box = fabric_->box(peer);
    std::unique_lock lock(box.mu);
    auto match = find(box.recvs, rank_, tag);
    if (match == box.recvs.end()) {
      box.sends.push_back(std::move(send));
      return request;
    }
    Posted recv = std::move(*match);
    box.recvs.erase(match);
    lock.unlock();
    deliver(send, recv, rank_, peer);
    return request;
  }

  RequestPtr irecv(int peer, const Tag& tag, void* data, size_t bytes) override {
    auto request = requests_.make(peer, bytes, false);
    Posted recv{peer, tag, data, bytes, request};
    Mailbox& box = fabric_->box(rank_);
    std::unique_lock lock(box.mu);
    auto match = find(box.sends, peer, tag);
    if (match == box.sends.end()) {
      box.recvs.push_back(std::move(recv));
      return request;
    }
    Posted send = std::move(*match);
    box.sends.erase(match);
    lock.unlock();
    deliver(send, recv, peer, rank_);
    return request;
  }

  // Matching happens when the second side posts, so there is nothing to drive.
  bool progress() override { return false; }

  void cancel(const RequestPtr& request) override {
    // A send waits in the receiver's box, a receive in our own.
    Mailbox& box = fabric_->box(request->is_send() ? request->peer() : rank_);
    std::lock_guard lock(box.mu);
    auto& queue = request->is_send() ? box.sends : box.recvs;
    queue.remove_if([&](const Posted& p) { return p.request == request; });
  }

 private:
  std::shared_ptr<InProcFabric> fabric_;
  int rank_;
  int size_;
  RequestPool requests_;
};

}  // namespace

std::vector<std::shared_ptr<Transport>> make_inproc_transports(int size) {
  auto fabric = std::make_shared<InProcFabric>(size);
  std::vector<std::shared_ptr<Transport>> endpoints;
  endpoints.reserve(size);
  for (int r = 0; r < size; ++r) endpoints.push_back(std::make_shared<InProcTransport>(fabric, r, size));
  return endpoints;
}

}  // namespace fsdp
