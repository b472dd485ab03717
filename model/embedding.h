// Token embedding: a row lookup into tok_embeddings.weight (vocab, dim).
#pragma once

#include <cstdint>

#include "model/dims.h"
#include "common/memory_tracker.h"

namespace fsdp::model {

class Embedding {
 public:
  // Allocates nothing: backward needs only the tokens, which the caller keeps.
  Embedding(const spec::ModelDims& dims, MemoryTracker& tracker);

  // w: [tok_embeddings.weight (vocab, dim)]; tokens: (n_tokens) in [0, vocab), else std::out_of_range;
  // out: (n_tokens, dim).
  void forward(Weights w, const int32_t* tokens, int64_t n_tokens, float* out) const;
  // g: [d tok_embeddings.weight (vocab, dim)] += scatter-add of d_out: (n_tokens, dim) by token.
  void backward(Grads g, const int32_t* tokens, int64_t n_tokens, const float* d_out) const;

 private:
  void check_tokens(const int32_t* tokens, int64_t n_tokens) const;

  spec::ModelDims dims_;
};

}  // namespace fsdp::model
