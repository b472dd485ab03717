#include "collectives/window.h"

#include <utility>

#include "collectives/core/window_table.h"

namespace fsdp {

void Window::reset() {
  if (table_) table_->remove(id_);
  if (tracker_) tracker_->release(category_, static_cast<int64_t>(bytes_));
  table_.reset();
  id_ = 0;
  data_ = nullptr;
  bytes_ = 0;
  shared_ = false;
  why_not_shared_.clear();
  tracker_ = nullptr;
}

void Window::swap(Window& o) noexcept {
  std::swap(table_, o.table_);
  std::swap(id_, o.id_);
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  std::swap(shared_, o.shared_);
  std::swap(why_not_shared_, o.why_not_shared_);
  std::swap(tracker_, o.tracker_);
  std::swap(category_, o.category_);
}

}  // namespace fsdp
