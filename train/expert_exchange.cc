#include "train/expert_exchange.h"

#include <string>

#include "common/errors.h"

namespace fsdp::train {

void CommExpertExchange::exchange_counts(const int64_t* counts, int64_t num_experts, int64_t* recv_counts) {
  const int64_t p = size();
  if (num_experts % p != 0) {
    throw InvalidArgument("expert exchange (rank " + std::to_string(rank()) + "): " + std::to_string(num_experts) +
                          " experts do not split over an expert-parallel group of " + std::to_string(p));
  }
  // Peer q gets the counts of its own experts [q L, (q + 1) L): counts is laid out peer-major already.
  const auto start = std::chrono::steady_clock::now();
  group_.all_to_all(counts, recv_counts, static_cast<size_t>(num_experts / p), DataType::kInt64).wait();
  if (observer_) observer_("all_to_all counts", start, std::chrono::steady_clock::now(), num_experts * 8);
}

void CommExpertExchange::exchange_rows(const float* send, const int64_t* send_rows, float* recv,
                                       const int64_t* recv_rows, int64_t dim) {
  const auto p = static_cast<size_t>(size());
  send_counts_.assign(p, 0);
  send_displs_.assign(p, 0);
  recv_counts_.assign(p, 0);
  recv_displs_.assign(p, 0);
  size_t sent = 0, received = 0;
  for (size_t q = 0; q < p; ++q) {
    send_counts_[q] = static_cast<size_t>(send_rows[q] * dim);
    send_displs_[q] = sent;
    sent += send_counts_[q];
    recv_counts_[q] = static_cast<size_t>(recv_rows[q] * dim);
    recv_displs_[q] = received;
    received += recv_counts_[q];
  }
  const auto start = std::chrono::steady_clock::now();
  group_.all_to_all_v(send, send_counts_, send_displs_, recv, recv_counts_, recv_displs_, DataType::kFloat32).wait();
  if (observer_) {
    observer_("all_to_all rows", start, std::chrono::steady_clock::now(), static_cast<int64_t>(sent * sizeof(float)));
  }
}

}  // namespace fsdp::train
