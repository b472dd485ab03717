// One FSDP unit (FSDP2's FSDPParamGroup): the parameters that are all-gathered together, e.g. one
// transformer block. It owns the rank's sharded state and the transient full-size buffers:
//
//   master shard (fp32, chunk_numel)  --copy-in, narrow-->  all-gather output (param dtype, flat, rank-major)
//        ^                                                      | all_gather (in place), then copy-out
//        | optimizer                                            v
//   grad shard (fp32)  <--accumulate--  reduce-scatter buffer  <--copy-in--  unsharded grads (fp32, param-major)
//                                      (reduce dtype, flat)                  unsharded params (full type, param-major)
//                                             ^
//                                             +--- add_grad: one parameter's gradient at a time (PyTorch front end)
//
// The full parameters are fp32 (values rounded to the param dtype; FsdpModel computes in fp32) or, for a
// front end that computes in the param dtype (PyTorch's bf16), in the param dtype: full_type. Where
// full_type is the param dtype (and the gather plain, over shared-memory windows, no group slice kept)
// there is no rank-major buffer: the all-gather writes every rank's rows straight into the unsharded parameters
// (Communicator::all_gather_into_runs), the copy-out done in the gather's own pass.
// The model sees only the param-major views (params(), grads()), never shards. All calls come from
// the rank's training thread; the collectives run on the communicators' progress engine meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/types/collective_kind.h"
#include "collectives/work.h"
#include "common/memory_tracker.h"
#include "runtime/process_groups.h"
#include "runtime/window_pool.h"
#include "spec/model_spec.h"
#include "spec/policy.h"
#include "spec/shard_layout.h"

namespace fsdp::runtime {

// Told about every collective the runtime issued once it finished: for the trace and overlap figures.
// `what` names it for the trace: name(collective), or "all_gather_backward" for the backward all-gather
// of reshard_after_forward = k.
using CommObserver =
    std::function<void(CollectiveKind collective, std::string_view what, int unit,
                       std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end,
                       int64_t bytes)>;

// Told when the runtime issues a collective, before it runs: the schedule as a front end drove it (tests
// compare the C++ and the torch front end's).
using IssueObserver = std::function<void(CollectiveKind collective, int unit)>;

class FsdpUnit {
 public:
  // full_type: kFloat32 or policy.param_dtype (std::invalid_argument otherwise).
  FsdpUnit(int index, const spec::UnitSpec& spec, const spec::Policy& policy, ProcessGroups& groups,
           MemoryTracker& tracker, DataType full_type = DataType::kFloat32);
  // Waits for collectives still in flight on this unit's buffers (a prefetch the next step never
  // used, or a step abandoned by an exception) so the engine never writes into freed memory.
  ~FsdpUnit();
  FsdpUnit(const FsdpUnit&) = delete;
  FsdpUnit& operator=(const FsdpUnit&) = delete;

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  const spec::UnitShardLayout& layout() const { return layout_; }
  const std::vector<std::string>& param_names() const { return param_names_; }
  // This rank's place in the unit's shard group (the expert FSDP group for an expert unit).
  int64_t shard_rank() const { return shard_rank_; }

  // The rank's fp32 master shard and gradient shard: chunk_numel elements each, padding zero.
  // Handing out the writable master marks its MXFP8 encoding stale (param_comm = mxfp8), so the shard
  // is quantised once per optimizer step, by its owner, however many times it is gathered.
  std::span<float> master_shard() {
    own_wire_stale_ = true;
    return {master_.data(), master_.size()};
  }
  std::span<float> grad_shard() { return {grad_.data(), grad_.size()}; }
  std::span<const float> grad_shard() const { return {grad_.data(), grad_.size()}; }

  // Sets the master shard from the full parameters (param-major fp32, numel of the unit).
  void load_full(const float* params);

  // --- parameters ---
  // Starts the all-gather unless the parameters are unsharded or on their way. In forward it gathers
  // over the shard group; in backward after reshard_after_forward = k, over the group of k.
  void start_unshard();
  // Waits for the all-gather and copies out into the param-major views.
  void wait_unshard();
  bool unsharded() const { return !params_.empty() && !gather_work_.valid(); }
  // Views of the full parameters, one per parameter in spec order; valid after wait_unshard(), and only
  // with full_type kFloat32 (empty otherwise).
  std::span<const float* const> params() const { return param_views_; }
  // The full parameters (param-major, full_type, numel of the unit); null while sharded.
  std::byte* full_params() { return unsharded() ? params_.data() : nullptr; }
  DataType full_type() const { return full_type_; }
  // Frees the full parameters. keep_for_backward keeps the slice a reshard-after-forward group needs.
  void reshard(bool keep_for_backward);

  // --- gradients ---
  // Full-gradient views in spec order, zeroed when first asked for; backward adds into them, and they
  // accumulate across micro-batches until reduced. `overwrite`: a buffer this call allocates is left
  // as the cache hands it (*fresh = true), for a caller that writes every element before the reduce
  // (the PyTorch front end copies each parameter's first gradient in and zeroes the ones that never come).
  std::span<float* const> grads(bool overwrite = false, bool* fresh = nullptr);
  // The other way in (FSDP2's foreach_reduce copy-in, without a param-major buffer): parameter `param`'s
  // full gradient (row-major, numel of the parameter, `type`: f32, bf16 or f16) written straight into
  // the reduce-scatter input (rank-major, reduce dtype, padding zeroed when it is allocated): copied the
  // first time since the last reduce, added after. Gradients accumulate there until start_reduce_grads,
  // which zeroes the rows of the parameters that never got one. Not mixed with grads() between reduces.
  void add_grad(size_t param, const void* grad, DataType type);
  bool has_unsharded_grads() const { return !grads_unsharded_.empty() || holds_reduce_input(); }
  // Copies the full gradients into the reduce-scatter buffer (reduce dtype), frees them, and starts
  // the reduce-scatter (average over the shard group); after add_grad, starts it on the input as it is.
  void start_reduce_grads();
  bool reduce_in_flight() const { return reduce_work_.valid(); }
  // Waits for it, all-reduces across replicas (HSDP), and adds the result into the grad shard.
  void finish_reduce_grads();

  // Drops the gradients not yet in the grad shard: the full ones, and a reduce-scatter's in flight once
  // it finished (a backward that raised, abandoned by the front end after the user may have zeroed the
  // shard's gradient). The grad shard keeps what earlier reduces wrote.
  void drop_unreduced_grads();

  void zero_grad_shard();
  // The grad shard's values are dropped (a front end whose gradient was set to None): the next
  // finish_reduce_grads writes the shard instead of adding to it, one pass instead of a zeroing and an
  // add. Until then the shard's contents are undefined.
  void discard_grad_shard() { grad_discarded_ = true; }
  // Drops every transient buffer; used when a step is abandoned (NaN loss) after its collectives finished.
  void release_transients();

  void set_observer(CommObserver* observer) { observer_ = observer; }
  void set_issue_observer(const IssueObserver* observer) { issue_observer_ = observer; }

 private:
  void notify(CollectiveKind kind, std::string_view what, const Work& work, int64_t bytes) const;
  // What the reduce-scatter carries: the reduce dtype, or f32 under grad_comm = mxfp8 (quantised from f32).
  DataType reduce_type() const;
  void reset_reduce_buf(bool zeroed, MemoryCategory category);
  void set_param_views();  // param_views_ over params_ (f32 full parameters only)
  // start_unshard's all-gather over the shard group into a rank-major buffer (MXFP8: its wire slots).
  void start_rank_major_gather();
  // add_grad's gradients are in reduce_buf_, not yet reduce-scattered.
  bool holds_reduce_input() const { return !reduce_buf_.empty() && !reduce_work_.valid(); }

  int index_;
  std::string name_;
  std::vector<std::string> param_names_;
  spec::Policy policy_;
  ProcessGroups& groups_;
  MemoryTracker& tracker_;
  spec::UnitShardLayout layout_;
  int64_t shard_rank_;

  TrackedBuffer<float> master_;
  TrackedBuffer<float> grad_;
  bool grad_discarded_ = false;  // discard_grad_shard(): the next reduce overwrites grad_
  // All-gather output, param dtype, while in flight: a window of the gather group's pool when the
  // plain all-gather over the shard group runs (runtime/window_pool.h), else a tracked block.
  CommBuffer gather_out_;
  Work gather_work_;
  std::string gather_name_;
  TrackedBuffer<std::byte> kept_;         // reshard_after_forward = k: this rank's slice of gather_out_
  DataType full_type_;
  TrackedBuffer<std::byte> params_;  // param-major full parameters (full_type_); gathered into when gather_runs_
  // copy_out as the all-gather's runs (flat_copy.h), where the gather lands in params_ itself; else empty.
  std::vector<GatherRun> gather_runs_;
  std::vector<const float*> param_views_;
  TrackedBuffer<float> grads_unsharded_;  // param-major full gradients
  std::vector<float*> grad_views_;
  CommBuffer reduce_buf_;  // reduce-scatter input (flat, reduce dtype); output in place; a window as gather_out_
  std::vector<bool> grad_written_;  // add_grad: parameters with a gradient in reduce_buf_ since the last reduce
  // param_comm = mxfp8: this rank's master shard quantised (mx::slot_bytes(chunk_numel)), and the
  // gathered slots of every rank while the all-gather is in flight.
  TrackedBuffer<std::byte> own_wire_;
  bool own_wire_stale_ = true;
  TrackedBuffer<std::byte> gather_wire_;
  // grad_comm = mxfp8: the per-destination quantised chunks, then the received ones (2 x shard slots).
  TrackedBuffer<std::byte> reduce_wire_;
  Work reduce_work_;
  int64_t notify_bytes_ = 0;  // what the reduce-scatter in flight sends, for the observer
  CommObserver* observer_ = nullptr;
  const IssueObserver* issue_observer_ = nullptr;
};

}  // namespace fsdp::runtime
