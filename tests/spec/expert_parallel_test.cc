// spec/expert_parallel.h: which units a rank holds under expert parallelism, and the degrees refused.
#include "spec/expert_parallel.h"

#include <gtest/gtest.h>

#include <string>

#include "spec/job_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {
namespace {

ModelSpec moe() { return make_llama("moe", debug_moe_model_dims()); }  // 8 experts, a shared expert

TEST(ExpertParallelUnits, EachBlockLosesItsExpertsToAUnitOfTheRanksOwn) {
  const ModelSpec full = moe();
  const int64_t layers = full.dims.layers;
  for (int64_t ep_rank = 0; ep_rank < 4; ++ep_rank) {
    const ModelSpec m = expert_parallel_units(full, 4, ep_rank, 8);
    ASSERT_EQ(m.units.size(), full.units.size() + static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      const UnitSpec& dense = m.units[static_cast<size_t>(1 + 2 * l)];
      const UnitSpec& experts = m.units[static_cast<size_t>(2 + 2 * l)];
      EXPECT_EQ(dense.name, "layers." + std::to_string(l));
      EXPECT_FALSE(dense.experts);
      for (const auto& p : dense.params) EXPECT_NE(p.kind, ParamKind::kExpert) << p.name;
      EXPECT_EQ(experts.name, "layers." + std::to_string(l) + ".moe.experts");
      EXPECT_TRUE(experts.experts);
      ASSERT_EQ(experts.params.size(), 6u);  // 2 of the 8 experts, w1 w2 w3 each
      const std::string first = "layers." + std::to_string(l) + ".moe.experts." + std::to_string(2 * ep_rank) + ".";
      EXPECT_EQ(experts.params.front().name, first + "w1.weight");
      EXPECT_EQ(experts.params.back().name,
                "layers." + std::to_string(l) + ".moe.experts." + std::to_string(2 * ep_rank + 1) + ".w3.weight");
    }
    EXPECT_EQ(m.units.front().name, full.units.front().name);
    EXPECT_EQ(m.units.back().name, full.units.back().name);
  }
  EXPECT_EQ(expert_parallel_units(full, 1, 0, 8).units.size(), full.units.size());
}

void expect_refused(const ModelSpec& m, int64_t ep, int64_t shard, const std::string& part) {
  try {
    check_expert_parallel(m, ep, shard);
    ADD_FAILURE() << "ep " << ep << " over shard " << shard << " accepted";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ExpertParallelUnits, RefusesDegreesNamingTheKey) {
  expect_refused(moe(), 3, 6, "parallelism.expert_parallel_degree = 3 must divide the number of experts 8");
  expect_refused(moe(), 4, 6, "parallelism.expert_parallel_degree = 4 must divide the data-parallel shard degree 6");
  expect_refused(make_llama("dense", debug_model_dims()), 2, 2, "needs a MoE model");
  expect_refused(moe(), 0, 2, "must be at least 1");
  EXPECT_NO_THROW(check_expert_parallel(moe(), 8, 8));
}

}  // namespace
}  // namespace fsdp::spec
