#include "model/moe_dispatch.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace fsdp::model {

int64_t expert_capacity(float capacity_factor, int64_t n, int64_t k, int64_t num_experts) {
  if (capacity_factor <= 0.f) return -1;
  return static_cast<int64_t>(std::ceil(static_cast<double>(capacity_factor) * static_cast<double>(n * k) /
                                        static_cast<double>(num_experts)));
}

int64_t group_by_expert(const int32_t* expert, int64_t n, int64_t k, int64_t num_experts, int64_t capacity,
                        int64_t* counts, int32_t* row_of_choice, int32_t* token_of_row) {
  // Counting sort over (expert, token): a stable pass in token order keeps tokens ascending per expert.
  std::memset(counts, 0, sizeof(int64_t) * static_cast<size_t>(num_experts));
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t e = expert[i];
    if (e < 0 || e >= num_experts) {
      throw std::out_of_range("group_by_expert: choice " + std::to_string(i) + " names expert " + std::to_string(e) +
                              " of " + std::to_string(num_experts));
    }
    if (capacity < 0 || counts[e] < capacity) {
      row_of_choice[i] = static_cast<int32_t>(counts[e]++);  // rank within the expert for now
    } else {
      row_of_choice[i] = -1;
    }
  }
  std::vector<int64_t> offset(static_cast<size_t>(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e) offset[static_cast<size_t>(e) + 1] = offset[static_cast<size_t>(e)] + counts[e];
  for (int64_t i = 0; i < n * k; ++i) {
    if (row_of_choice[i] < 0) continue;
    const int64_t row = offset[static_cast<size_t>(expert[i])] + row_of_choice[i];
    row_of_choice[i] = static_cast<int32_t>(row);
    token_of_row[row] = static_cast<int32_t>(i / k);
  }
  return offset.back();
}

void gather_rows(const float* x, const int32_t* token_of_row, int64_t rows, int64_t dim, float* xg) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(xg + r * dim, x + static_cast<int64_t>(token_of_row[r]) * dim, sizeof(float) * static_cast<size_t>(dim));
  }
}

void scatter_add_rows(const float* dxg, const int32_t* token_of_row, int64_t rows, int64_t dim, float* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dx + static_cast<int64_t>(token_of_row[r]) * dim;
    const float* s = dxg + r * dim;
    for (int64_t c = 0; c < dim; ++c) d[c] += s[c];
  }
}

void combine_rows(const float* yg, const float* weight, const int32_t* row_of_choice, int64_t n, int64_t k,
                  int64_t dim, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    float* yt = y + t * dim;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = row_of_choice[t * k + j];
      if (row < 0) continue;
      const float w = weight[t * k + j];
      const float* src = yg + static_cast<int64_t>(row) * dim;
      for (int64_t c = 0; c < dim; ++c) yt[c] += w * src[c];
    }
  }
}

void combine_rows_backward(const float* dy, const float* yg, const float* weight, const int32_t* row_of_choice,
                           int64_t n, int64_t k, int64_t dim, float* dyg, float* dweight) {
  for (int64_t t = 0; t < n; ++t) {
    const float* dyt = dy + t * dim;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = row_of_choice[t * k + j];
      if (row < 0) {
        dweight[t * k + j] = 0.f;
        continue;
      }
      const float w = weight[t * k + j];
      const float* src = yg + static_cast<int64_t>(row) * dim;
      float* d = dyg + static_cast<int64_t>(row) * dim;
      double dot = 0;
      for (int64_t c = 0; c < dim; ++c) {
        dot += static_cast<double>(dyt[c]) * src[c];
        d[c] = w * dyt[c];
      }
      dweight[t * k + j] = static_cast<float>(dot);
    }
  }
}

void rows_per_owner(const int64_t* counts, int64_t num_experts, int64_t group, int64_t* send_rows) {
  const int64_t local = num_experts / group;
  for (int64_t p = 0; p < group; ++p) {
    send_rows[p] = 0;
    for (int64_t l = 0; l < local; ++l) send_rows[p] += counts[p * local + l];
  }
}

namespace {

// Copies each (s, l) block between the source-major layout and the expert-major one.
void regroup(const float* src, const int64_t* recv_counts, int64_t group, int64_t local, int64_t dim, float* dst,
             bool to_expert_major) {
  std::vector<int64_t> source_major(static_cast<size_t>(group * local));  // first row of block (s, l)
  int64_t row = 0;
  for (int64_t s = 0; s < group; ++s) {
    for (int64_t l = 0; l < local; ++l) {
      source_major[static_cast<size_t>(s * local + l)] = row;
      row += recv_counts[s * local + l];
    }
  }
  int64_t expert_row = 0;
  for (int64_t l = 0; l < local; ++l) {
    for (int64_t s = 0; s < group; ++s) {
      const int64_t rows = recv_counts[s * local + l];
      const int64_t from = to_expert_major ? source_major[static_cast<size_t>(s * local + l)] : expert_row;
      const int64_t to = to_expert_major ? expert_row : source_major[static_cast<size_t>(s * local + l)];
      std::memcpy(dst + to * dim, src + from * dim, sizeof(float) * static_cast<size_t>(rows * dim));
      expert_row += rows;
    }
  }
}

}  // namespace

void source_to_expert_major(const float* src, const int64_t* recv_counts, int64_t group, int64_t local, int64_t dim,
                            float* dst) {
  regroup(src, recv_counts, group, local, dim, dst, true);
}

void expert_to_source_major(const float* src, const int64_t* recv_counts, int64_t group, int64_t local, int64_t dim,
                            float* dst) {
  regroup(src, recv_counts, group, local, dim, dst, false);
}

}  // namespace fsdp::model
