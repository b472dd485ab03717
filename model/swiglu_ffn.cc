#include "model/swiglu_ffn.h"

#include "model/ops.h"

namespace fsdp::model {

void swiglu_ffn_forward(const float* x, const float* w1, const float* w2, const float* w3, int64_t rows,
                        int64_t dim, int64_t hidden, const SwigluSaved& s, float* out, float beta) {
  ops::linear_forward(x, w1, rows, dim, hidden, s.a1);
  ops::linear_forward(x, w3, rows, dim, hidden, s.a3);
  ops::swiglu_forward(s.a1, s.a3, s.act, s.gate, rows * hidden);
  ops::linear_forward(s.gate, w2, rows, hidden, dim, out, beta);
}

void swiglu_ffn_backward(const float* x, const float* w1, const float* w2, const float* w3, int64_t rows,
                         int64_t dim, int64_t hidden, const SwigluSaved& s, const float* dout, float* dx,
                         float dx_beta, float* g1, float* g2, float* g3) {
  ops::linear_backward_weight(dout, s.gate, rows, hidden, dim, g2);
  float* dgate = s.gate;  // the product is not read again
  ops::linear_backward_input(dout, w2, rows, hidden, dim, dgate);
  ops::swiglu_backward(dgate, s.act, s.a1, s.a3, rows * hidden);  // a1, a3 <- their gradients
  ops::linear_backward_weight(s.a1, x, rows, dim, hidden, g1);
  ops::linear_backward_weight(s.a3, x, rows, dim, hidden, g3);
  ops::linear_backward_input(s.a1, w1, rows, dim, hidden, dx, dx_beta);
  ops::linear_backward_input(s.a3, w3, rows, dim, hidden, dx, 1.f);
}

}  // namespace fsdp::model
