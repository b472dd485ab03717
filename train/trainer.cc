#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>

#include "collectives/types/errors.h"
#include "common/fault_injection.h"
#include "model/embedding.h"
#include "model/init.h"
#include "model/output_head.h"
#include "model/transformer_block.h"
#include "train/expert_exchange.h"

namespace fsdp::train {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::vector<int64_t> round_robin_data_ranks(int64_t data_parallel_size, int64_t world, int64_t rank) {
  std::vector<int64_t> ranks;
  for (int64_t d = rank; d < data_parallel_size; d += world) ranks.push_back(d);
  ranks.resize(static_cast<size_t>((data_parallel_size + world - 1) / world), -1);
  return ranks;
}

Trainer::Trainer(const TrainerOptions& options, Communicator& world, BatchSource batches)
    : options_(options), world_(world), batches_(std::move(batches)) {
  dims_ = options_.model.dims;
  spec::validate_transformer(dims_);
  if (options_.fsdp.policy.micro_batch < 1 || options_.fsdp.policy.seq_len < 1 || options_.fsdp.policy.grad_accum < 1) {
    throw std::invalid_argument("trainer: local_batch, seq_len and grad_accum must be positive");
  }
  // FsdpModel refuses a bad expert-parallel degree naming the config key; the blocks then hold its experts.
  fsdp_ = std::make_unique<runtime::FsdpModel>(options_.model, options_.fsdp, world_, tracker_);
  const uint64_t seed = options_.seed;
  // By name (model/init.h): an expert is initialised the same whichever rank holds it.
  fsdp_->init_parameters([&](int u, std::span<float* const> params) {
    model::init_parameters(fsdp_->model().units[static_cast<size_t>(u)], params, seed, options_.init);
  });
  const auto& units = fsdp_->model().units;
  for (int u = 1; u + 1 < static_cast<int>(units.size()); ++u) {
    if (units[static_cast<size_t>(u)].experts) {
      block_units_.back().experts = u;
    } else {
      block_units_.push_back({u, -1});
    }
  }
  if (static_cast<int64_t>(block_units_.size()) != dims_.layers) {
    throw std::logic_error("trainer: " + std::to_string(block_units_.size()) + " block units for " +
                           std::to_string(dims_.layers) + " layers");
  }
  if (fsdp_->expert_parallel() > 1) {
    exchange_ = std::make_unique<CommExpertExchange>(*fsdp_->expert_groups().expert_parallel);
  }
  if (options_.fsdp.policy.optimizer == spec::Optimizer::kAdamW) {
    optimizer_ = std::make_unique<runtime::AdamW>(*fsdp_, options_.adamw, tracker_);
  } else {
    optimizer_ = std::make_unique<runtime::SgdMomentum>(*fsdp_, options_.sgd, tracker_);
  }
  if (options_.fsdp.policy.redundancy == spec::Redundancy::kBuddy && world_.size() > 1) {
    mirror_ = std::make_unique<runtime::BuddyMirror>(*fsdp_, *optimizer_, tracker_);
    mirror_->sync();
  }
  const int64_t b = options_.fsdp.policy.micro_batch, t = options_.fsdp.policy.seq_len;
  embedding_ = std::make_unique<model::Embedding>(dims_, tracker_);
  for (int64_t i = 0; i < dims_.layers; ++i) {
    blocks_.push_back(std::make_unique<model::TransformerBlock>(
        dims_, b, t, tracker_, spec::block_ac(options_.fsdp.policy, i), exchange_.get()));
  }
  head_ = std::make_unique<model::OutputHead>(dims_, b, t, tracker_);
  const int64_t world_dp = options_.fsdp.mesh ? options_.fsdp.mesh->data_parallel_size() : world_.size();
  const int64_t global_dp = options_.data_parallel_size > 0 ? options_.data_parallel_size : world_dp;
  data_ranks_ = options_.data_ranks;
  if (data_ranks_.empty()) {
    data_ranks_.push_back(options_.fsdp.mesh ? options_.fsdp.mesh->data_parallel_rank(world_.rank()) : world_.rank());
  }
  for (int64_t d : data_ranks_) {
    if (d < -1 || d >= global_dp) {
      throw std::invalid_argument("trainer: data rank " + std::to_string(d) + " outside [0, " +
                                  std::to_string(global_dp) + ")");
    }
  }
  // 1 exactly when every rank computes its own rows: the arithmetic is then the same as without the option.
  share_ = static_cast<float>(static_cast<double>(world_dp) / static_cast<double>(global_dp));
  inputs_.resize(static_cast<size_t>(b * t));
  targets_.resize(static_cast<size_t>(b * t));
  hidden_.reset(tracker_, MemoryCategory::kActivations, static_cast<size_t>(b * t * dims_.dim));
}

Trainer::~Trainer() = default;

void Trainer::record(std::string_view what, Clock::time_point start) {
  if (compute_observer_) compute_observer_(what, start, Clock::now());
}

void Trainer::record(std::string_view phase, int unit, Clock::time_point start) {
  if (compute_observer_) record(std::string(phase) + " " + fsdp_->unit(unit).name(), start);
}

template <class T>
std::span<T* const> Trainer::block_params(std::span<T* const> dense, std::span<T* const> experts,
                                          std::vector<T*>& out) {
  out.assign(dense.begin(), dense.begin() + static_cast<std::ptrdiff_t>(model::kBlockExpertsAt));
  out.insert(out.end(), experts.begin(), experts.end());
  out.insert(out.end(), dense.begin() + static_cast<std::ptrdiff_t>(model::kBlockExpertsAt), dense.end());
  return out;
}

double Trainer::micro_step(int64_t step, int64_t micro, int64_t data_rank, bool last_micro) {
  const int64_t rows = options_.fsdp.policy.micro_batch * options_.fsdp.policy.seq_len;
  // A slot without rows runs on the rank's first data rank's batch at scale 0 (finite inputs, zero gradients).
  batches_(step, micro, data_rank >= 0 ? data_rank : std::max<int64_t>(data_ranks_.front(), 0), inputs_.data(),
           targets_.data());
  // Gradients stay unsharded across micro-batches and are reduced once, on the last (FSDP2's
  // set_requires_gradient_sync(False) pattern).
  fsdp_->set_requires_gradient_sync(last_micro);
  runtime::FsdpModel& fsdp = *fsdp_;
  const int last = fsdp.num_units() - 1;
  const int middle = fsdp.num_units() / 2;  // a block: where the in-step fault points fire (tests)
  float* x = hidden_.data();

  // Forward: unit 0 embeds, units 1..L are blocks, the last unit is the head.
  auto w = fsdp.pre_forward(0);
  auto t0 = Clock::now();
  embedding_->forward(w, inputs_.data(), rows, x);
  record("forward", 0, t0);
  fsdp.post_forward(0);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const BlockUnits b = block_units_[i];
    if (b.dense == middle) fault::point(fault::When::kInForward);  // its all-gather posted by the prefetch
    w = fsdp.pre_forward(b.dense);
    if (b.experts >= 0) w = block_params(w, fsdp.pre_forward(b.experts), merged_params_);
    t0 = Clock::now();
    blocks_[i]->forward(w, x, x);
    record("forward", b.dense, t0);
    if (b.experts >= 0) fsdp.post_forward(b.experts);
    fsdp.post_forward(b.dense);
  }
  w = fsdp.pre_forward(last);
  t0 = Clock::now();
  double loss = head_->forward(w, x, targets_.data());
  // The objective adds each MoE block's load-balancing loss over this micro-batch (0 for dense blocks).
  for (const auto& block : blocks_) loss += block->aux_loss();
  record("forward", last, t0);
  fsdp.post_forward(last);

  // Backward, last unit first; x now carries the gradient of the residual stream.
  w = fsdp.pre_backward(last);
  t0 = Clock::now();
  // The mean over the global batch: 1 / grad_accum per micro-step, and this world's share of the data ranks.
  const float loss_scale = data_rank >= 0 ? share_ / static_cast<float>(options_.fsdp.policy.grad_accum) : 0.0f;
  head_->backward(w, fsdp.grads(last), loss_scale, x);
  record("backward", last, t0);
  fsdp.post_backward(last);
  for (size_t i = blocks_.size(); i-- > 0;) {
    const BlockUnits b = block_units_[i];
    std::span<float* const> g;
    if (b.experts >= 0) {
      const auto we = fsdp.pre_backward(b.experts);
      w = block_params(fsdp.pre_backward(b.dense), we, merged_params_);
      g = block_params(fsdp.grads(b.dense), fsdp.grads(b.experts), merged_grads_);
    } else {
      w = fsdp.pre_backward(b.dense);
      g = fsdp.grads(b.dense);
    }
    t0 = Clock::now();
    blocks_[i]->backward(w, g, x, x, loss_scale);
    record("backward", b.dense, t0);
    if (b.experts >= 0) fsdp.post_backward(b.experts);
    fsdp.post_backward(b.dense);
    if (b.dense == middle && last_micro) fault::point(fault::When::kInBackward);  // its reduce-scatter in flight
  }
  fsdp.pre_backward(0);
  t0 = Clock::now();
  embedding_->backward(fsdp.grads(0), inputs_.data(), rows, x);
  record("backward", 0, t0);
  fsdp.post_backward(0);
  fsdp.finalize_backward();
  return loss;
}

StepStats Trainer::step() {
  const auto start = Clock::now();
  if (pending_) throw std::logic_error("trainer: step " + std::to_string(pending_->stats.step) + " is still pending");
  const int64_t step = step_ + 1;
  fault::set_step(step);
  StepStats stats;
  stats.step = step;
  const int64_t accum = options_.fsdp.policy.grad_accum;
  const auto with_rows = std::count_if(data_ranks_.begin(), data_ranks_.end(), [](int64_t d) { return d >= 0; });
  stats.tokens = options_.fsdp.policy.micro_batch * options_.fsdp.policy.seq_len * accum * with_rows;
  double local_loss = 0;
  for (size_t d = 0; d < data_ranks_.size(); ++d) {
    for (int64_t m = 0; m < accum; ++m) {
      const bool last = d + 1 == data_ranks_.size() && m == accum - 1;
      const double loss = micro_step(step, m, data_ranks_[d], last);
      if (data_ranks_[d] >= 0) local_loss += loss / static_cast<double>(accum);
    }
  }
  local_loss *= static_cast<double>(share_);
  // The buddy's gradient shard travels while the loss and the norm are reduced; it is clipped on arrival.
  if (mirror_) mirror_->begin_exchange();
  // Every rank holds the same global mean afterwards, so all take the same decision about it.
  world_.all_reduce(&local_loss, &stats.loss, 1, DataType::kFloat64, ReduceOp{ReduceKind::kAvg, 1.0}).wait();
  stats.grad_norm = fsdp_->clip_grad_norm(options_.max_norm);
  stats.lr = options_.lr.at(step);
  if (mirror_) mirror_->end_exchange(runtime::FsdpModel::clip_scale(stats.grad_norm, options_.max_norm));
  if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm)) {
    if (mirror_) mirror_->drop_grads();
    if (!options_.skip_nonfinite) {
      throw NonFiniteLoss("step " + std::to_string(step) + ": " +
                          (std::isfinite(stats.loss) ? "gradient norm" : "loss") + " is not finite (loss " +
                          std::to_string(stats.loss) + ", grad_norm " + std::to_string(stats.grad_norm) +
                          "); lower the learning rate or set training.skip_nonfinite_steps = true to skip such steps");
    }
    stats.skipped = true;
    step_ = step;
  } else {
    pending_ = Pending{stats};
    if (options_.commit && !options_.commit(step)) {
      // Another rank's recovery closed the vote first: a member was lost, and this rank recovers too.
      throw AbortedError(
          ErrorContext{world_.rank(), -1, "step_commit_vote", static_cast<uint64_t>(step), 0},
          "step " + std::to_string(step) + " was dropped: another rank closed its vote (a member was lost)");
    }
    apply_pending_step(/*prefetch=*/true);
  }
  pending_.reset();
  fsdp_->zero_grad();
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

void Trainer::sync_redundancy() {
  if (mirror_) mirror_->sync();
}

std::optional<StepStats> Trainer::apply_pending_step(bool prefetch) {
  if (!pending_) return std::nullopt;
  const auto t0 = Clock::now();
  // The next step's first all-gathers start as each unit is updated, so they overlap the remaining
  // updates. A failure to start one must not stop the updates halfway (a shard half-updated is lost for
  // recovery): it is held until every unit and the mirror are updated, then thrown.
  std::exception_ptr failed;
  const auto after_unit = [this, &failed, prefetch](int u) {
    if (u == fsdp_->num_units() / 2) fault::point(fault::When::kInOptimizer);  // half the units updated (tests)
    if (!prefetch || failed) return;
    try {
      fsdp_->prefetch_next_step(u);
    } catch (...) {
      failed = std::current_exception();
    }
  };
  const StepStats stats = pending_->stats;
  optimizer_->step(*fsdp_, stats.lr, after_unit);
  if (mirror_) mirror_->apply(stats.lr);
  step_ = stats.step;
  pending_.reset();
  record("optimizer", t0);
  if (failed) std::rethrow_exception(failed);
  return stats;
}

}  // namespace fsdp::train
