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

void BuddyMirror::exchange_grads() {
  if (!holds_grads()) {
    grads_.reset_for_overwrite(tracker_, MemoryCategory::kRedundancy, static_cast<size_t>(offsets_.back()));
  }
  // One packed message each way: faster than a message per unit in every measurement (10-15% on the
  // debug model, 3-4x under heavy load: docs/fault_tolerance.md), for a copy of the rank's grad shards
  // that lives only while the exchange runs.
  TrackedBuffer<float> out;
  out.reset_for_overwrite(tracker_, MemoryCategory::kRedundancy, grads_.size());
  for (int u = 0; u < model_.num_units(); ++u) {
    const std::span<const float> g = std::as_const(model_.unit(u)).grad_shard();
    std::copy(g.begin(), g.end(), out.data() + offsets_[u]);
  }
  std::vector<Work> works;
  post_exchange(works, {{out.data(), out.size()}}, {{grads_.data(), grads_.size()}});
  fault::point(fault::When::kInMirror);  // tests: a rank lost with its exchange half done
  for (auto& w : works) w.wait();
}

void BuddyMirror::apply(double lr) { apply(lr, opt_.steps_taken()); }

void BuddyMirror::apply(double lr, int64_t step) {
  if (!holds_grads()) {
    throw std::logic_error("BuddyMirror::apply on shard rank " + std::to_string(comm_.rank()) +
                           ": no gradients received (call exchange_grads first)");
  }
  for (int u = 0; u < model_.num_units(); ++u) {
    const auto n = static_cast<size_t>(offsets_[u + 1] - offsets_[u]);
    const std::vector<std::span<float>> st = state(u);
    opt_.update_shard(params(u), {grads_.data() + offsets_[u], n}, st, step, lr);
  }
  grads_.release();
}

}  // namespace fsdp::runtime
