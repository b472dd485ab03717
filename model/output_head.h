// Final RMSNorm, output projection and mean cross-entropy over all B*T tokens:
//   loss = mean_t( logsumexp(logits_t) - logits_t[target_t] ),  logits = output(norm(x)).
#pragma once

#include <cstdint>

#include "model/dims.h"
#include "common/memory_tracker.h"

namespace fsdp::model {

class OutputHead {
 public:
  OutputHead(const spec::ModelDims& dims, int64_t batch, int64_t seq, MemoryTracker& tracker);

  // w: [norm.weight (dim), output.weight (vocab, dim)]; x: (B*T, dim); targets: (B*T) in [0, vocab)
  // (else std::out_of_range). Returns the mean loss. Saves x, norm(x), its rstd, the softmax
  // probabilities (B*T, vocab) and the targets for backward.
  float forward(Weights w, const float* x, const int32_t* targets);
  // ADDS the gradients of loss_scale * mean loss into g (same order as w); writes dx: (B*T, dim).
  // Frees the saved tensors; throws std::logic_error without a preceding forward.
  void backward(Weights w, Grads g, float loss_scale, float* dx);

  void release_saved();
  int64_t saved_bytes() const { return saved_.bytes() + saved_targets_.bytes(); }

 private:
  spec::ModelDims dims_;
  int64_t rows_;
  MemoryTracker* tracker_;
  // Views: x (rows, dim), n (rows, dim), rstd (rows), probs (rows, vocab).
  TrackedBuffer<float> saved_;
  TrackedBuffer<int32_t> saved_targets_;
};

}  // namespace fsdp::model
