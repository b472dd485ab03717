#include "runtime/buddy_mirror.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/fault_injection.h"

namespace fsdp::runtime {
namespace {

Communicator& shard_comm(FsdpModel& model) {
  std::string why;
  if (model.expert_parallel() > 1) {
    why = "expert parallelism";
  } else if (model.mesh().replicate_degree() > 1) {
    why = "HSDP (replicate " + std::to_string(model.mesh().replicate_degree()) +
          ": the replicas already hold every shard)";
  } else if (model.mesh().shard_degree() < 2) {
    why = "a shard group of one rank";
  }
  if (!why.empty()) {
    throw std::invalid_argument("BuddyMirror: buddy redundancy is for plain FSDP over >= 2 ranks; refused " + why);
  }
  return *model.groups().shard_reduce;
}

}  // namespace

BuddyMirror::BuddyMirror(FsdpModel& model, ShardedOptimizer& opt, MemoryTracker& tracker)
    : model_(model), opt_(opt), tracker_(tracker), comm_(shard_comm(model)) {
  const int s = comm_.size();
  mirrored_ = (comm_.rank() + 1) % s;
  holder_ = (comm_.rank() - 1 + s) % s;
  int64_t at = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    const auto n = static_cast<size_t>(model.unit(u).layout().chunk_numel());
    offsets_.push_back(at);
    at += static_cast<int64_t>(n);
    params_.emplace_back(tracker, MemoryCategory::kRedundancy, n);
    auto& st = state_.emplace_back();
    for (int k = 0; k < opt.state_count(); ++k) st.emplace_back(tracker, MemoryCategory::kRedundancy, n);
  }
  offsets_.push_back(at);
}

std::span<float> BuddyMirror::params(int unit) {
  auto& p = params_.at(static_cast<size_t>(unit));
  return {p.data(), p.size()};
}

std::vector<std::span<float>> BuddyMirror::state(int unit) {
  std::vector<std::span<float>> out;
  for (auto& b : state_.at(static_cast<size_t>(unit))) out.emplace_back(b.data(), b.size());
  return out;
}

// Every send and receive posted before any wait: one message per buffer, all in flight together.
void BuddyMirror::post_exchange(std::vector<Work>& works, const std::vector<std::span<const float>>& own,
                                const std::vector<std::span<float>>& mirror) {
  for (size_t i = 0; i < own.size(); ++i) {
    works.push_back(comm_.recv(mirror[i].data(), mirror[i].size(), DataType::kFloat32, mirrored_));
    works.push_back(comm_.send(own[i].data(), own[i].size(), DataType::kFloat32, holder_));
  }
}

void BuddyMirror::sync() {
  std::vector<std::span<const float>> own;
  std::vector<std::span<float>> mirror;
  for (int u = 0; u < model_.num_units(); ++u) {
    own.emplace_back(model_.unit(u).master_shard());
    mirror.push_back(params(u));
    for (auto s : opt_.state(u)) own.emplace_back(s);
    for (auto s : state(u)) mirror.push_back(s);
  }
  std::vector<Work> works;
  post_exchange(works, own, mirror);
  for (auto& w : works) w.wait();
}

void BuddyMirror::begin_exchange() {
  if (!exchange_.empty()) {
    throw std::logic_error("BuddyMirror::begin_exchange on shard rank " + std::to_string(comm_.rank()) +
                           ": the previous exchange was not ended (call end_exchange)");
  }
  if (!holds_grads()) {
    grads_.reset_for_overwrite(tracker_, MemoryCategory::kRedundancy, static_cast<size_t>(offsets_.back()));
  }
  // One packed message each way: faster than a message per unit in every measurement (10-15% on the
  // debug model, 3-4x under heavy load: docs/fault_tolerance.md); the copy also frees the owner's
  // shards for clipping while the message is in flight.
  packed_.reset_for_overwrite(tracker_, MemoryCategory::kRedundancy, grads_.size());
  for (int u = 0; u < model_.num_units(); ++u) {
    const std::span<const float> g = std::as_const(model_.unit(u)).grad_shard();
    std::copy(g.begin(), g.end(), packed_.data() + offsets_[u]);
  }
  post_exchange(exchange_, {{packed_.data(), packed_.size()}}, {{grads_.data(), grads_.size()}});
  fault::point(fault::When::kInMirror);  // tests: a rank lost with its exchange half done
}

void BuddyMirror::end_exchange(float clip_scale) {
  while (!exchange_.empty()) {
    exchange_.back().wait();  // a failure leaves it and the rest to the destructor
    exchange_.pop_back();
  }
  packed_.release();
  if (clip_scale != 1.0f) {
    for (float& g : grads_) g *= clip_scale;  // FsdpModel::clip_grad_norm's multiply
  }
}

void BuddyMirror::exchange_grads() {
  begin_exchange();
  end_exchange(1.0f);
}

BuddyMirror::~BuddyMirror() {
  for (auto& w : exchange_) {
    try {
      w.wait();
    } catch (...) {  // the step failed already; its error is the one reported
    }
  }
}

void BuddyMirror::apply(double lr) { apply(lr, opt_.steps_taken()); }

void BuddyMirror::apply(double lr, int64_t step) {
  if (!holds_grads()) {
    throw std::logic_error("BuddyMirror::apply on shard rank " + std::to_string(comm_.rank()) +
                           ": no gradients received (call exchange_grads, or begin_exchange and end_exchange, first)");
  }
  for (int u = 0; u < model_.num_units(); ++u) {
    const auto n = static_cast<size_t>(offsets_[u + 1] - offsets_[u]);
    const std::vector<std::span<float>> st = state(u);
    opt_.update_shard(params(u), {grads_.data() + offsets_[u], n}, st, step, lr);
  }
  grads_.release();
}

}  // namespace fsdp::runtime
