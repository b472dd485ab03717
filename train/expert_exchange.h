// model::ExpertExchange over a communicator of the expert-parallel group (ProcessGroups::expert_parallel):
// the per-expert counts go out with one all_to_all of L int64 per peer, the token rows with one
// all_to_all_v of whole rows. Both block until done (each is bounded by the communicator's timeout);
// the MoE feed-forward needs their results before it can go on.
#pragma once

#include <chrono>
#include <functional>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "model/moe_expert_exchange.h"

namespace fsdp::train {

class CommExpertExchange : public model::ExpertExchange {
 public:
  // Told about every exchange once it is done ("all_to_all counts" or "all_to_all rows", the bytes this
  // rank sent), for the trace and the time the compute waited on it.
  using Observer = std::function<void(std::string_view what, std::chrono::steady_clock::time_point start,
                                      std::chrono::steady_clock::time_point end, int64_t bytes)>;

  explicit CommExpertExchange(Communicator& group) : group_(group) {}
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  int64_t size() const override { return group_.size(); }
  int64_t rank() const override { return group_.rank(); }
  // Throws InvalidArgument when num_experts is not a multiple of the group size.
  void exchange_counts(const int64_t* counts, int64_t num_experts, int64_t* recv_counts) override;
  void exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                     int64_t dim) override;

 private:
  Communicator& group_;
  Observer observer_;
  std::vector<size_t> send_counts_, send_displs_, recv_counts_, recv_displs_;
};

}  // namespace fsdp::train
