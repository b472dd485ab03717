#include "runtime/fsdp_unit.h"

#include <cstring>
#include <stdexcept>

#include "collectives/quantized.h"
#include "collectives/kernels/reduce_kernels.h"
#include "runtime/flat_copy.h"

namespace fsdp::runtime {
namespace {

template <class Buffer>
std::byte* element_at(Buffer& buf, int64_t index, DataType type) {
  return buf.data() + index * static_cast<int64_t>(element_size(type));
}

uint8_t* bytes_of(TrackedBuffer<std::byte>& buf, size_t offset = 0) {
  return reinterpret_cast<uint8_t*>(buf.data()) + offset;
}

// What FSDP sends when a precision is MXFP8: E4M3 elements, scales rounded up (never saturating).
constexpr mx::Format kWireFormat{DataType::kFloat8E4M3, mx::ScaleRounding::kCeil};

}  // namespace

FsdpUnit::FsdpUnit(int index, const spec::UnitSpec& spec, const spec::Policy& policy, ProcessGroups& groups,
                   MemoryTracker& tracker, DataType full_type)
    : index_(index),
      name_(spec.name),
      policy_(policy),
      groups_(groups),
      tracker_(tracker),
      layout_(spec, groups.shard_degree()),
      shard_rank_(groups.shard_rank()),
      full_type_(full_type) {
  if (full_type != DataType::kFloat32 && full_type != policy.param_dtype) {
    throw std::invalid_argument("fsdp unit '" + name_ + "': full parameters in " + std::string(fsdp::name(full_type)) +
                                ", neither float32 nor the param dtype " + std::string(fsdp::name(policy.param_dtype)));
  }
  for (const auto& p : spec.params) param_names_.push_back(p.name);
  grad_written_.assign(spec.params.size(), false);
  // The all-gather can land in the parameters where copy-out would only copy: the full parameters are in
  // the param dtype, the gather plain (MXFP8 decodes), and no group slice is kept (reshard_after_forward
  // = k copies it out of the rank-major buffer); start_unshard does so where its chunk gets a window.
  // sharding/step_program.cc counts the memory alike.
  if (full_type_ == policy.param_dtype && policy.param_comm != spec::CommPrecision::kMxfp8 && !groups.reshard) {
    gather_runs_ = gather_runs(layout_, full_type_);
  }
  master_.reset(tracker_, MemoryCategory::kParamShards, static_cast<size_t>(layout_.chunk_numel()));
  grad_.reset(tracker_, MemoryCategory::kGradShards, static_cast<size_t>(layout_.chunk_numel()));
}

FsdpUnit::~FsdpUnit() {
  for (Work* w : {&gather_work_, &reduce_work_}) {
    if (!w->valid()) continue;
    try {
      w->wait();
    } catch (const std::exception&) {
      // The operation failed (a lost peer, an abort): the engine no longer touches the buffers.
    }
  }
}

void FsdpUnit::load_full(const float* params) {
  own_wire_stale_ = true;
  std::memset(master_.data(), 0, master_.size() * sizeof(float));
  extract_chunk(layout_, shard_rank_, params, master_.data());
}

void FsdpUnit::notify(CollectiveKind kind, std::string_view what, const Work& work, int64_t bytes) const {
  if (observer_ && *observer_) (*observer_)(kind, what, index_, work.started_at(), work.finished_at(), bytes);
}

void FsdpUnit::start_unshard() {
  if (unsharded() || gather_work_.valid()) return;
  if (issue_observer_ && *issue_observer_) (*issue_observer_)(CollectiveKind::kAllGather, index_);
  const DataType type = policy_.param_dtype;
  const size_t elem = element_size(type);
  if (!kept_.empty()) {
    // Backward after reshard_after_forward = k: each member of the group of k holds 1/k of the buffer
    // (plain memory: this all-gather runs over another communicator than the pool's).
    gather_out_.reset_for_overwrite(nullptr, tracker_, MemoryCategory::kAllGather,
                                    static_cast<size_t>(layout_.flat_numel()) * elem);
    Communicator& group = *groups_.reshard;
    const int64_t slice = layout_.flat_numel() / group.size();
    std::byte* mine = element_at(gather_out_, group.rank() * slice, type);
    std::memcpy(mine, kept_.data(), kept_.size());
    gather_name_ = "all_gather_backward";
    gather_work_ = group.all_gather(mine, gather_out_.data(), static_cast<size_t>(slice), type);
    return;
  }
  gather_name_ = "all_gather";
  if (!gather_runs_.empty() && groups_.gather_windows && !groups_.gather_windows->off()) {
    // The peers read this rank's chunk from a window; every chunk, this one too, lands in the
    // parameters over their runs, which count as the all-gather's memory until it finished. Where no
    // window was taken (the pool turned off, on every rank alike) the rank-major gather runs instead.
    gather_out_.reset_for_overwrite(groups_.gather_windows, tracker_, MemoryCategory::kAllGather,
                                    static_cast<size_t>(layout_.chunk_numel()) * elem);
    if (gather_out_.windowed()) {
      narrow_from_f32(gather_out_.data(), master_.data(), master_.size(), type);
      params_.reset_for_overwrite(tracker_, MemoryCategory::kAllGather, static_cast<size_t>(layout_.numel()) * elem);
      gather_work_ = groups_.shard_gather->all_gather_into_runs(
          gather_out_.data(), params_.data(), static_cast<size_t>(layout_.chunk_numel()), type, gather_runs_);
      return;
    }
    gather_out_.release();
  }
  start_rank_major_gather();
}

void FsdpUnit::start_rank_major_gather() {
  const DataType type = policy_.param_dtype;
  if (policy_.param_comm == spec::CommPrecision::kMxfp8) {
    // Only the wire slots: wait_unshard decodes them straight into the parameters (no param-dtype buffer).
    const size_t count = master_.size(), slot = mx::slot_bytes(count);
    if (own_wire_.empty()) own_wire_.reset(tracker_, MemoryCategory::kParamShards, slot);
    if (own_wire_stale_) {
      mx::quantize(master_.data(), DataType::kFloat32, count, bytes_of(own_wire_), kWireFormat);
      own_wire_stale_ = false;
    }
    Communicator& group = *groups_.shard_gather;
    gather_wire_.reset(tracker_, MemoryCategory::kAllGather, slot * group.size());
    uint8_t* mine = bytes_of(gather_wire_, slot * group.rank());
    std::memcpy(mine, own_wire_.data(), slot);
    gather_work_ = group.all_gather(mine, gather_wire_.data(), count, DataType::kFloat32, Wire::mxfp8(kWireFormat));
    return;
  }
  // Written whole by the all-gather (every rank's chunk, padding included); not zeroed first.
  gather_out_.reset_for_overwrite(groups_.gather_windows, tracker_, MemoryCategory::kAllGather,
                                  static_cast<size_t>(layout_.flat_numel()) * element_size(type));
  std::byte* mine = element_at(gather_out_, shard_rank_ * layout_.chunk_numel(), type);
  narrow_from_f32(mine, master_.data(), master_.size(), type);
  gather_work_ =
      groups_.shard_gather->all_gather(mine, gather_out_.data(), static_cast<size_t>(layout_.chunk_numel()), type);
}

void FsdpUnit::wait_unshard() {
  if (unsharded()) return;
  start_unshard();
  gather_work_.wait();
  const bool quantised = !gather_wire_.empty();  // param_comm = mxfp8
  const DataType type = policy_.param_dtype;
  const int64_t gathered = quantised ? gather_wire_.bytes() : layout_.flat_numel() * element_size(type);
  notify(CollectiveKind::kAllGather, gather_name_, gather_work_, gathered);
  gather_work_ = Work{};
  const bool from_kept = !kept_.empty();
  if (!params_.empty()) {  // all_gather_into_runs filled them (the rank-major gathers allocate them below)
    params_.set_category(MemoryCategory::kUnshardedParams);  // landed: the parameters from here on
    gather_out_.release();
    set_param_views();
    return;
  }

  // Either copy-out writes every row of every parameter. MXFP8 decodes every rank's slot in the same pass,
  // rounding to the param dtype on the way (the values a param-dtype gather buffer would have held).
  params_.reset_for_overwrite(tracker_, MemoryCategory::kUnshardedParams,
                              static_cast<size_t>(layout_.numel()) * element_size(full_type_));
  if (quantised) {
    copy_out_mxfp8(layout_, bytes_of(gather_wire_), kWireFormat.element, type, params_.data(), full_type_);
  } else {
    copy_out(layout_, gather_out_.data(), type, params_.data(), full_type_);
  }
  set_param_views();

  if (from_kept) {
    kept_.release();
  } else if (policy_.reshard.mode == spec::Reshard::Mode::kGroup && groups_.reshard) {
    // Keep this rank's 1/k of the gathered buffer (param dtype) for backward's all-gather inside the group of k.
    const int64_t slice = layout_.flat_numel() / groups_.reshard->size();
    const int64_t first = groups_.reshard->rank() * slice;
    kept_.reset(tracker_, MemoryCategory::kKeptParams, static_cast<size_t>(slice) * element_size(type));
    if (quantised) {
      mx::decode_gathered(bytes_of(gather_wire_), master_.size(), static_cast<size_t>(first),
                          static_cast<size_t>(slice), kWireFormat.element, kept_.data(), type, type);
    } else {
      std::memcpy(kept_.data(), element_at(gather_out_, first, type), kept_.size());
    }
  }
  gather_wire_.release();
  gather_out_.release();  // FSDP2 frees the all-gather output once copied out
}

void FsdpUnit::set_param_views() {
  param_views_.clear();
  if (full_type_ == DataType::kFloat32) {
    const auto* full = reinterpret_cast<const float*>(params_.data());
    for (int64_t off : param_major_offsets(layout_)) param_views_.push_back(full + off);
  }
}

void FsdpUnit::reshard(bool keep_for_backward) {
  if (!gather_work_.valid()) params_.release();  // an all-gather in flight into them keeps them until its wait
  param_views_.clear();
  if (!keep_for_backward) kept_.release();
}

std::span<float* const> FsdpUnit::grads(bool overwrite, bool* fresh) {
  if (holds_reduce_input()) {
    throw std::logic_error("fsdp unit '" + name_ + "': grads() while add_grad's gradients wait for their reduce");
  }
  if (fresh != nullptr) *fresh = grads_unsharded_.empty();
  if (grads_unsharded_.empty()) {
    const auto count = static_cast<size_t>(layout_.numel());
    if (overwrite) {
      grads_unsharded_.reset_for_overwrite(tracker_, MemoryCategory::kUnshardedGrads, count);
    } else {
      grads_unsharded_.reset(tracker_, MemoryCategory::kUnshardedGrads, count);
    }
    grad_views_.clear();
    for (int64_t off : param_major_offsets(layout_)) grad_views_.push_back(grads_unsharded_.data() + off);
  }
  return grad_views_;
}

DataType FsdpUnit::reduce_type() const {
  return policy_.grad_comm == spec::CommPrecision::kMxfp8 ? DataType::kFloat32 : policy_.reduce_dtype;
}

void FsdpUnit::reset_reduce_buf(bool zeroed, MemoryCategory category) {
  const auto& windows = policy_.grad_comm == spec::CommPrecision::kMxfp8 ? nullptr : groups_.reduce_windows;
  const size_t bytes = static_cast<size_t>(layout_.flat_numel()) * element_size(reduce_type());
  if (zeroed) {
    reduce_buf_.reset(windows, tracker_, category, bytes);
  } else {
    reduce_buf_.reset_for_overwrite(windows, tracker_, category, bytes);
  }
}

void FsdpUnit::add_grad(size_t param, const void* grad, DataType type) {
  if (param >= grad_written_.size()) {
    throw std::out_of_range("fsdp unit '" + name_ + "': add_grad of parameter " + std::to_string(param) + " of " +
                            std::to_string(grad_written_.size()));
  }
  if (reduce_work_.valid() || !grads_unsharded_.empty()) {
    throw std::logic_error("fsdp unit '" + name_ + "': add_grad while " +
                           (reduce_work_.valid() ? "its reduce-scatter is in flight" : "grads() holds gradients"));
  }
  if (reduce_buf_.empty()) {
    // Held as the unit's full gradients until the reduce-scatter starts (the memory of grads()'s buffer).
    // Not zeroed: every parameter's rows are written by its first gradient or zeroed before the reduce.
    reset_reduce_buf(/*zeroed=*/false, MemoryCategory::kUnshardedGrads);
    zero_padding(layout_, reduce_buf_.data(), reduce_type());
  }
  write_param_grad(layout_, param, grad, type, reduce_buf_.data(), reduce_type(), grad_written_[param]);
  grad_written_[param] = true;
}

void FsdpUnit::start_reduce_grads() {
  const bool in_place = holds_reduce_input();  // add_grad wrote the input
  if (grads_unsharded_.empty() && !in_place) {
    throw std::logic_error("fsdp unit '" + name_ + "': start_reduce_grads() without gradients (no backward ran)");
  }
  if (reduce_work_.valid()) {
    throw std::logic_error("fsdp unit '" + name_ + "': a reduce-scatter is already in flight");
  }
  if (issue_observer_ && *issue_observer_) (*issue_observer_)(CollectiveKind::kReduceScatter, index_);
  const DataType type = reduce_type();
  if (in_place) {
    for (size_t p = 0; p < grad_written_.size(); ++p) {
      if (!grad_written_[p]) zero_param_rows(layout_, p, reduce_buf_.data(), type);  // no gradient is zero
    }
    grad_written_.assign(grad_written_.size(), false);
    reduce_buf_.set_category(MemoryCategory::kReduceScatter);
  } else {
    reset_reduce_buf(/*zeroed=*/true, MemoryCategory::kReduceScatter);
    copy_in(layout_, grads_unsharded_.data(), reduce_buf_.data(), type);
    grads_unsharded_.release();
    grad_views_.clear();
  }
  const auto count = static_cast<size_t>(layout_.chunk_numel());
  Communicator& group = *groups_.shard_reduce;
  std::byte* mine = element_at(reduce_buf_, shard_rank_ * layout_.chunk_numel(), type);
  if (policy_.grad_comm == spec::CommPrecision::kMxfp8) {
    // An MXFP8 reduce-scatter quantises straight from f32 and hands back f32 sums; the f32 average lands
    // in place over this rank's chunk (finish_reduce_grads reads it there).
    const size_t half = mx::slot_bytes(count) * group.size();
    reduce_wire_.reset(tracker_, MemoryCategory::kReduceScatter, 2 * half);
    reduce_work_ = group.reduce_scatter(reduce_buf_.data(), mine, count, type, ReduceOp{ReduceKind::kAvg, 1.0},
                                        Wire::mxfp8(kWireFormat, bytes_of(reduce_wire_)));
    notify_bytes_ = static_cast<int64_t>(half);
    return;
  }
  reduce_work_ = group.reduce_scatter(reduce_buf_.data(), mine, count, type, groups_.grad_reduce);
  notify_bytes_ = static_cast<int64_t>(reduce_buf_.bytes());
}

void FsdpUnit::finish_reduce_grads() {
  if (!reduce_work_.valid()) return;
  const bool quantised = !reduce_wire_.empty();
  const DataType type = reduce_type();
  reduce_work_.wait();
  notify(CollectiveKind::kReduceScatter, "reduce_scatter", reduce_work_, notify_bytes_);
  reduce_work_ = Work{};
  std::byte* mine = element_at(reduce_buf_, shard_rank_ * layout_.chunk_numel(), type);
  const auto count = static_cast<size_t>(layout_.chunk_numel());
  if (quantised) reduce_wire_.release();
  if (groups_.replicate) {
    Work w = groups_.replicate->all_reduce(mine, mine, count, type, ReduceOp{ReduceKind::kAvg, 1.0});
    w.wait();
    notify(CollectiveKind::kAllReduce, "all_reduce", w, static_cast<int64_t>(count * element_size(type)));
  }
  if (grad_discarded_) {
    widen_to_f32(grad_.data(), mine, count, type, 1.0);
    grad_discarded_ = false;
  } else {
    accumulate_widened(grad_.data(), mine, count, type);
  }
  reduce_buf_.release();
}

void FsdpUnit::drop_unreduced_grads() {
  if (reduce_work_.valid()) reduce_work_.wait();  // the engine writes reduce_buf_ until then; its error surfaces
  reduce_work_ = Work{};
  reduce_wire_.release();
  grads_unsharded_.release();
  grad_views_.clear();
  reduce_buf_.release();
  grad_written_.assign(grad_written_.size(), false);
}

void FsdpUnit::zero_grad_shard() { std::memset(grad_.data(), 0, grad_.size() * sizeof(float)); }

void FsdpUnit::release_transients() {
  if (gather_work_.valid()) gather_work_.wait();
  gather_work_ = Work{};
  gather_out_.release();
  gather_wire_.release();
  kept_.release();
  reshard(false);
  drop_unreduced_grads();
}

}  // namespace fsdp::runtime
