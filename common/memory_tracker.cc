#include "common/memory_tracker.h"


namespace fsdp {

std::string_view name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParamShards: return "param_shards";
    case MemoryCategory::kGradShards: return "grad_shards";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kAllGather: return "all_gather_buffers";
    case MemoryCategory::kUnshardedParams: return "unsharded_params";
    case MemoryCategory::kKeptParams: return "kept_params";
    case MemoryCategory::kReduceScatter: return "reduce_scatter_buffers";
    case MemoryCategory::kUnshardedGrads: return "unsharded_grads";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kRedundancy: return "redundancy";
    case MemoryCategory::kOther: return "other";
    case MemoryCategory::kCount: break;
  }
  return "?";
}

void MemoryTracker::Counter::add(int64_t bytes) {
  const int64_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void MemoryTracker::allocate(MemoryCategory c, int64_t bytes) {
  by_category_[static_cast<size_t>(c)].add(bytes);
  total_.add(bytes);
}

void MemoryTracker::release(MemoryCategory c, int64_t bytes) {
  by_category_[static_cast<size_t>(c)].current.fetch_sub(bytes, std::memory_order_relaxed);
  total_.current.fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryTracker::reset_peaks() {
  for (auto& c : by_category_) c.peak.store(c.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
  total_.peak.store(total_.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace fsdp
