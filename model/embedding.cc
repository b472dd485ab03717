#include "model/embedding.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace fsdp::model {

Embedding::Embedding(const spec::ModelDims& dims, MemoryTracker& /*tracker*/) : dims_(dims) {
  spec::validate_transformer(dims_);
}

void Embedding::check_tokens(const int32_t* tokens, int64_t n_tokens) const {
  for (int64_t i = 0; i < n_tokens; ++i) {
    if (tokens[i] < 0 || tokens[i] >= dims_.vocab) {
      throw std::out_of_range("Embedding: token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(dims_.vocab) + ")");
    }
  }
}

void Embedding::forward(Weights w, const int32_t* tokens, int64_t n_tokens, float* out) const {
  if (w.size() != kEmbeddingParams) throw std::invalid_argument("Embedding::forward: expected 1 weight");
  check_tokens(tokens, n_tokens);
  const int64_t d = dims_.dim;
  for (int64_t i = 0; i < n_tokens; ++i) {
    std::memcpy(out + i * d, w[0] + tokens[i] * d, sizeof(float) * static_cast<size_t>(d));
  }
}

void Embedding::backward(Grads g, const int32_t* tokens, int64_t n_tokens, const float* d_out) const {
  if (g.size() != kEmbeddingParams) throw std::invalid_argument("Embedding::backward: expected 1 gradient");
  check_tokens(tokens, n_tokens);
  const int64_t d = dims_.dim;
  for (int64_t i = 0; i < n_tokens; ++i) {
    float* row = g[0] + tokens[i] * d;
    const float* src = d_out + i * d;
    for (int64_t j = 0; j < d; ++j) row[j] += src[j];
  }
}

}  // namespace fsdp::model
