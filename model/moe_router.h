// Token-choice top-k router of a MoE feed-forward (TorchTitan's TokenChoiceTopKRouter, as facts):
//   logits = x gate^T                       (n, E)
//   scores = softmax(logits) per token, or sigmoid(logits) per entry (spec::MoeSpec::score)
//   expert = the k largest scores per token; ties go to the lower expert index, and the k choices are
//            listed by descending score (then ascending index), so routing is a pure function of the scores
//   weight = scores of the chosen experts, / their sum if route_norm, * route_scale        (n, k)
// and the load-balancing auxiliary loss over the n tokens of the call (one micro-batch: "batch-level",
// as Switch Transformer; DeepSeek-V2's expert-level loss has the same form over a batch):
//   f_e = E / (k n) * (number of tokens that chose e)        1 for every expert when balanced
//   P_e = 1/n * sum_t p_te, p = the scores (softmax) or the scores over their row sum (sigmoid, as
//         DeepSeek-V3's sequence-wise loss normalises them)
//   aux = aux_loss_coeff * sum_e f_e P_e                       = aux_loss_coeff when balanced
// f is counted before any capacity drop and carries no gradient; P does.
#pragma once

#include <cstdint>

#include "model/dims.h"

namespace fsdp::model {

// x: (n, dim); gate: (E, dim). Writes scores (n, E), kept for backward; expert (n, k); weight (n, k).
// Returns the auxiliary loss (0 when aux_loss_coeff is 0).
double router_forward(const spec::MoeSpec& moe, const float* x, const float* gate, int64_t n, int64_t dim,
                      float* scores, int32_t* expert, float* weight);

// dweight: (n, k) = d loss / d weight; aux_scale = d loss / d aux (the loss scale of the step).
// ADDS d gate into dgate (E, dim) and d x into dx (n, dim). Uses `scores` as scratch (d logits).
void router_backward(const spec::MoeSpec& moe, const float* x, const float* gate, int64_t n, int64_t dim, float* scores,
                     const int32_t* expert, const float* dweight, float aux_scale, float* dgate, float* dx);

}  // namespace fsdp::model
