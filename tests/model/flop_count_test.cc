// The planner prices a unit's compute on the matmul FLOPs it executes (sharding/cost_model.h
// unit_executed_flops_per_token); here the reference model counts its own (every gemm, model/ops.h
// matmul_flops) over a forward and backward of a block and of the output head, and the two must agree
// exactly. A missed or doubled matmul in either shows as a whole product's FLOPs.
#include <gtest/gtest.h>

#include "model/ops.h"
#include "model/output_head.h"
#include "model/transformer_block.h"
#include "sharding/cost_model.h"
#include "spec/model_spec.h"
#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {

// llama3-debug's shapes at a short sequence (grouped-query attention: 16 heads, 4 kv heads).
spec::ModelSpec debug_model() {
  return spec::make_llama("flops", spec::ModelDims{.dim = 64,
                                                   .layers = 1,
                                                   .n_heads = 4,
                                                   .n_kv_heads = 2,
                                                   .vocab = 96,
                                                   .ffn_hidden = spec::llama_ffn_hidden(64, 32, 0)});
}

constexpr int64_t kFlopBatch = 2;
constexpr int64_t kFlopSeq = 12;

std::vector<int64_t> sizes_of(const spec::UnitSpec& u) {
  std::vector<int64_t> s;
  for (const auto& p : u.params) s.push_back(p.numel());
  return s;
}
std::vector<bool> vectors_of(const spec::UnitSpec& u) {
  std::vector<bool> v;
  for (const auto& p : u.params) v.push_back(p.shape.size() < 2);
  return v;
}

double planned(const spec::ModelSpec& m, size_t unit) {
  const auto f = sharding::unit_executed_flops_per_token(m.units[unit], m.dims, kFlopSeq, /*fused_causal=*/false);
  return (f.forward + f.backward) * static_cast<double>(kFlopBatch * kFlopSeq);
}

TEST(FlopCount, BlockMatchesThePlannersExecutedFlops) {
  const spec::ModelSpec m = debug_model();
  const spec::ModelDims dims = m.dims;
  const spec::UnitSpec& unit = m.units[1];
  ASSERT_TRUE(unit.is_layer);
  std::mt19937 rng(3);
  ParamSet p(sizes_of(unit), vectors_of(unit), rng);
  MemoryTracker tracker;
  TransformerBlock block(dims, kFlopBatch, kFlopSeq, tracker);
  const auto x = random_floats(static_cast<size_t>(kFlopBatch * kFlopSeq * dims.dim), rng);
  std::vector<float> y(x.size()), dx(x.size());
  ops::reset_matmul_flops();
  block.forward(p.weights(), x.data(), y.data());
  const int64_t forward = ops::matmul_flops();
  block.backward(p.weights(), p.grad_views(), y.data(), dx.data());
  const auto f = sharding::unit_executed_flops_per_token(unit, m.dims, kFlopSeq, false);
  EXPECT_DOUBLE_EQ(static_cast<double>(forward), f.forward * kFlopBatch * kFlopSeq);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops::matmul_flops()), planned(m, 1));
}

TEST(FlopCount, OutputHeadMatchesThePlannersExecutedFlops) {
  const spec::ModelSpec m = debug_model();
  const spec::ModelDims dims = m.dims;
  const size_t last = m.units.size() - 1;
  std::mt19937 rng(4);
  ParamSet p(sizes_of(m.units[last]), vectors_of(m.units[last]), rng);
  MemoryTracker tracker;
  OutputHead head(dims, kFlopBatch, kFlopSeq, tracker);
  const auto x = random_floats(static_cast<size_t>(kFlopBatch * kFlopSeq * dims.dim), rng);
  std::vector<int32_t> targets(static_cast<size_t>(kFlopBatch * kFlopSeq));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int32_t>(i % static_cast<size_t>(dims.vocab));
  std::vector<float> dx(x.size());
  ops::reset_matmul_flops();
  head.forward(p.weights(), x.data(), targets.data());
  head.backward(p.weights(), p.grad_views(), 1.f, dx.data());
  EXPECT_DOUBLE_EQ(static_cast<double>(ops::matmul_flops()), planned(m, last));
}

}  // namespace
}  // namespace fsdp::model::testing
