#include "collectives/transports/hybrid.h"

#include <algorithm>
#include <string>

#include "collectives/types/errors.h"

namespace fsdp {
namespace {

class HybridTransport final : public Transport {
 public:
  HybridTransport(int rank, const std::vector<int>& host_of, std::shared_ptr<Transport> local,
                  std::shared_ptr<Transport> remote)
      : rank_(rank), size_(static_cast<int>(host_of.size())), local_(std::move(local)), remote_(std::move(remote)) {
    local_index_.assign(host_of.size(), -1);
    for (size_t r = 0; r < host_of.size(); ++r) {
      if (host_of[r] != host_of[static_cast<size_t>(rank)]) continue;
      local_index_[r] = static_cast<int>(local_ranks_.size());
      local_ranks_.push_back(static_cast<int>(r));
    }
    if (local_->size() != static_cast<int>(local_ranks_.size()) || local_->rank() != local_index_[static_cast<size_t>(rank)]) {
      throw InvalidArgument("hybrid transport: the local transport has rank " + std::to_string(local_->rank()) + " of " +
                            std::to_string(local_->size()) + ", the host layout says " +
                            std::to_string(local_index_[static_cast<size_t>(rank)]) + " of " +
                            std::to_string(local_ranks_.size()));
    }
    if (remote_->size() != size_ || remote_->rank() != rank) {
      throw InvalidArgument("hybrid transport: the remote transport has rank " + std::to_string(remote_->rank()) +
                            " of " + std::to_string(remote_->size()) + ", the job " + std::to_string(rank) + " of " +
                            std::to_string(size_));
    }
    name_ = std::string(local_->name()) + "+" + std::string(remote_->name());
  }

  std::string_view name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, const Tag& tag, const void* data, size_t bytes) override {
    return wrap(peer, bytes, true, route(peer, [&](Transport& t, int p) { return t.isend(p, tag, data, bytes); }));
  }
  RequestPtr irecv(int peer, const Tag& tag, void* data, size_t bytes) override {
    return wrap(peer, bytes, false, route(peer, [&](Transport& t, int p) { return t.irecv(p, tag, data, bytes); }));
  }

  bool progress() override {
    bool moved = local_->progress();
    moved |= remote_->progress();
    // Hand finished inner requests' outcomes to the callers' requests (job-rank peers).
    std::erase_if(pending_, [&](Pair& p) {
      if (p.inner->pending()) return false;
      if (p.inner->done()) {
        p.outer->complete();
      } else {
        p.outer->fail(via(p.outer->peer()) + p.inner->error(), p.inner->peer_lost());
      }
      moved = true;
      return true;
    });
    return moved;
  }

  void cancel(const RequestPtr& request) override {
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pair& p) { return p.outer == request; });
    if (it == pending_.end()) return;
    (is_local(it->outer->peer()) ? *local_ : *remote_).cancel(it->inner);
    pending_.erase(it);
  }

  std::string check_peer(int peer) override {
    if (peer < 0 || peer >= size_) return {};
    const std::string why = is_local(peer) ? local_->check_peer(local_index_[static_cast<size_t>(peer)])
                                           : remote_->check_peer(peer);
    return why.empty() ? why : via(peer) + why;
  }

 private:
  struct Pair {
    RequestPtr outer, inner;
  };

  bool is_local(int peer) const { return local_index_[static_cast<size_t>(peer)] >= 0; }

  template <typename Post>
  RequestPtr route(int peer, Post post) {
    if (peer < 0 || peer >= size_) throw InvalidArgument("hybrid transport: peer " + std::to_string(peer) + " is outside [0, " + std::to_string(size_) + ")");
    return is_local(peer) ? post(*local_, local_index_[static_cast<size_t>(peer)]) : post(*remote_, peer);
  }

  RequestPtr wrap(int peer, size_t bytes, bool is_send, RequestPtr inner) {
    auto outer = requests_.make(peer, bytes, is_send);
    if (inner->done()) {
      outer->complete();
    } else if (inner->failed()) {
      outer->fail(via(peer) + inner->error(), inner->peer_lost());
    } else {
      pending_.push_back(Pair{outer, std::move(inner)});
    }
    return outer;
  }

  // Which of the two carried it; the inner transports name job ranks themselves (world.cc gives the
  // shared-memory segment its host's job ranks).
  std::string via(int peer) const { return std::string((is_local(peer) ? local_ : remote_)->name()) + ": "; }

  int rank_, size_;
  RequestPool requests_;
  std::shared_ptr<Transport> local_, remote_;
  std::vector<int> local_index_;  // job rank -> index on this host, -1 when elsewhere
  std::vector<int> local_ranks_;
  std::vector<Pair> pending_;
  std::string name_;
};

}  // namespace

std::shared_ptr<Transport> make_hybrid_transport(int rank, const std::vector<int>& host_of_rank,
                                                 std::shared_ptr<Transport> local, std::shared_ptr<Transport> remote) {
  if (rank < 0 || rank >= static_cast<int>(host_of_rank.size())) {
    throw InvalidArgument("make_hybrid_transport: rank " + std::to_string(rank) + " outside the layout of " +
                          std::to_string(host_of_rank.size()) + " ranks");
  }
  if (!local || !remote) throw InvalidArgument("make_hybrid_transport: null transport");
  return std::make_shared<HybridTransport>(rank, host_of_rank, std::move(local), std::move(remote));
}

}  // namespace fsdp
