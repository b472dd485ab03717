#include "runtime/window_pool.h"

#include <cstring>

#include "common/knobs.h"

namespace fsdp::runtime {

std::shared_ptr<WindowPool> WindowPool::create_for(Communicator& comm) {
  if (!knobs::kUnitWindows.get() || comm.size() < 2 || comm.host_count() > 1) return nullptr;
  return std::make_shared<WindowPool>(comm);
}

Window* WindowPool::take(size_t bytes) {
  std::lock_guard lock(mu_);
  if (off_) return nullptr;
  if (auto it = free_.find(bytes); it != free_.end() && !it->second.empty()) {
    Window* w = it->second.back();
    it->second.pop_back();
    return w;
  }
  auto w = std::make_unique<Window>(comm_.alloc_window(bytes));
  if (!w->shared()) {
    // Every rank got the same answer from alloc_window, so every rank turns its pool off here.
    off_ = true;
    return nullptr;
  }
  all_.push_back(std::move(w));
  return all_.back().get();
}

void WindowPool::give_back(Window* w) {
  std::lock_guard lock(mu_);
  free_[w->bytes()].push_back(w);
}

bool WindowPool::off() const {
  std::lock_guard lock(mu_);
  return off_;
}

int64_t WindowPool::reserved_bytes() const {
  std::lock_guard lock(mu_);
  int64_t total = 0;
  for (const auto& w : all_) total += static_cast<int64_t>(w->bytes());
  return total;
}

void CommBuffer::reset_for_overwrite(const std::shared_ptr<WindowPool>& pool, MemoryTracker& tracker,
                                     MemoryCategory category, size_t bytes) {
  release();
  if (bytes == 0) return;
  Window* w = pool ? pool->take(bytes) : nullptr;
  if (!w) {
    block_.reset_for_overwrite(tracker, category, bytes);
    return;
  }
  pool_ = pool;
  window_ = w;
  bytes_ = bytes;
  tracker_ = &tracker;
  category_ = category;
  tracker_->allocate(category_, static_cast<int64_t>(bytes_));
}

void CommBuffer::reset(const std::shared_ptr<WindowPool>& pool, MemoryTracker& tracker, MemoryCategory category,
                       size_t bytes) {
  reset_for_overwrite(pool, tracker, category, bytes);
  if (bytes > 0) std::memset(data(), 0, bytes);
}

void CommBuffer::set_category(MemoryCategory category) {
  block_.set_category(category);
  if (window_) {
    tracker_->release(category_, static_cast<int64_t>(bytes_));
    tracker_->allocate(category, static_cast<int64_t>(bytes_));
  }
  category_ = category;
}

void CommBuffer::release() {
  block_.release();
  if (!window_) return;
  tracker_->release(category_, static_cast<int64_t>(bytes_));
  pool_->give_back(window_);
  pool_.reset();
  window_ = nullptr;
  bytes_ = 0;
}

}  // namespace fsdp::runtime
