// The SwiGLU feed-forward over a run of token rows, shared by the dense block FFN, every routed expert
// and the MoE shared expert:  out = beta * out + (silu(x w1^T) * (x w3^T)) w2^T.
#pragma once

#include <cstdint>

namespace fsdp::model {

// What forward keeps for backward, each (rows, hidden): the w1 and w3 outputs, silu(w1 out), their
// product. Backward consumes them: gate becomes d gate, a1 and a3 their gradients.
struct SwigluSaved {
  float *a1, *a3, *act, *gate;
};

// x: (rows, dim); w1, w3: (hidden, dim); w2: (dim, hidden); out: (rows, dim).
void swiglu_ffn_forward(const float* x, const float* w1, const float* w2, const float* w3, int64_t rows,
                        int64_t dim, int64_t hidden, const SwigluSaved& s, float* out, float beta);
// dout: (rows, dim). ADDS into g1, g2, g3; dx: (rows, dim) = d x + dx_beta * dx. dout is read only
// before dx is written, so dx may alias dout when dx_beta is 0.
void swiglu_ffn_backward(const float* x, const float* w1, const float* w2, const float* w3, int64_t rows,
                         int64_t dim, int64_t hidden, const SwigluSaved& s, const float* dout, float* dx,
                         float dx_beta, float* g1, float* g2, float* g3);

}  // namespace fsdp::model
