// What a MoE feed-forward under expert parallelism needs from the ranks of its expert-parallel group:
// two exchanges, each one all_to_all among the P ranks (runtime/expert_exchange.h implements them over a
// communicator; tests may do it in memory). The model never sees ranks beyond this.
#pragma once

#include <cstdint>

namespace fsdp::model {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int64_t size() const = 0;  // P, the expert-parallel degree
  virtual int64_t rank() const = 0;  // this rank's place in the group: it owns experts [rank * L, (rank + 1) * L)

  // counts: (E) rows this rank sends per expert, E = P * L. Writes recv_counts (P, L): the rows source
  // s sends for this rank's local expert l.
  virtual void exchange_counts(const int64_t* counts, int64_t num_experts, int64_t* recv_counts) = 0;
  // send: (sum(send_rows), dim), send_rows[p] rows for peer p one after another; recv: (sum(recv_rows),
  // dim), recv_rows[s] rows from source s one after another (an all_to_all_v of rows).
  virtual void exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                             int64_t dim) = 0;
};

}  // namespace fsdp::model
