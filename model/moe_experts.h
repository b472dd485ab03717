// The routed experts of a MoE feed-forward, run grouped: the rows arrive expert-major (model/moe_dispatch.h)
// and expert e's SwiGLU (model/swiglu_ffn.h) is one GEMM per weight over its contiguous block of
// counts[e] rows. Under expert parallelism this is what runs on the rank that owns the experts, on the
// rows the all_to_all_v brought it; `w` then holds only the local experts.
#pragma once

#include <cstdint>

#include "model/dims.h"
#include "model/swiglu_ffn.h"

namespace fsdp::model {

// w: 3 pointers per expert in spec order (w1 (hidden, dim), w2 (dim, hidden), w3 (hidden, dim)), for
// experts 0..E-1 of `counts` (E = w.size() / 3). xg, yg: (rows, dim) with rows = sum(counts);
// saved: each of its arrays (rows, hidden). Writes yg.
void grouped_experts_forward(Weights w, const int64_t* counts, const float* xg, int64_t dim, int64_t hidden,
                             const SwigluSaved& saved, float* yg);
// dyg: (rows, dim), consumed: overwritten with d xg. ADDS into the experts' gradients g (same order as
// w); consumes `saved`.
void grouped_experts_backward(Weights w, Grads g, const int64_t* counts, const float* xg, int64_t dim, int64_t hidden,
                              const SwigluSaved& saved, float* dyg);

}  // namespace fsdp::model
