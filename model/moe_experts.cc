#include "model/moe_experts.h"

#include <stdexcept>
#include <string>

#include "model/ops.h"

namespace fsdp::model {
namespace {

// Expert e's slice of the grouped arrays, starting at grouped row `first`.
SwigluSaved rows_of(const SwigluSaved& s, int64_t first, int64_t hidden) {
  const int64_t o = first * hidden;
  return {s.a1 + o, s.a3 + o, s.act + o, s.gate + o};
}

void check_weights(size_t n, const char* op) {
  if (n % 3 != 0) {
    throw std::invalid_argument(std::string(op) + ": expected 3 weights per expert (got " + std::to_string(n) + ")");
  }
}

}  // namespace

void grouped_experts_forward(Weights w, const int64_t* counts, const float* xg, int64_t dim, int64_t hidden,
                             const SwigluSaved& saved, float* yg) {
  check_weights(w.size(), "grouped_experts_forward");
  int64_t first = 0;
  for (size_t e = 0; e < w.size() / 3; ++e) {
    const int64_t c = counts[e];
    if (c > 0) {
      swiglu_ffn_forward(xg + first * dim, w[3 * e], w[3 * e + 1], w[3 * e + 2], c, dim, hidden,
                         rows_of(saved, first, hidden), yg + first * dim, 0.f);
    }
    first += c;
  }
}

void grouped_experts_backward(Weights w, Grads g, const int64_t* counts, const float* xg, int64_t dim, int64_t hidden,
                              const SwigluSaved& saved, float* dyg) {
  check_weights(w.size(), "grouped_experts_backward");
  if (g.size() != w.size()) throw std::invalid_argument("grouped_experts_backward: weights and gradients differ in count");
  int64_t first = 0;
  for (size_t e = 0; e < w.size() / 3; ++e) {
    const int64_t c = counts[e];
    if (c > 0) {
      float* block = dyg + first * dim;  // d yg in, d xg out (swiglu_ffn_backward allows it with beta 0)
      const SwigluSaved s = rows_of(saved, first, hidden);
      swiglu_ffn_backward(xg + first * dim, w[3 * e], w[3 * e + 1], w[3 * e + 2], c, dim, hidden, s, block, block,
                          0.f, g[3 * e], g[3 * e + 1], g[3 * e + 2]);
    }
    first += c;
  }
}

}  // namespace fsdp::model
