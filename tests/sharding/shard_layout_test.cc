// Sharding math: every element owned by exactly one rank, offsets consistent, 16 P / N for AdamW.
#include "spec/shard_layout.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sharding/cost_model.h"
#include "spec/mesh.h"
#include "spec/model_spec.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

spec::UnitSpec random_unit(std::mt19937_64& rng) {
  spec::UnitSpec u{"u", false, {}};
  const int params = std::uniform_int_distribution<int>(1, 5)(rng);
  for (int i = 0; i < params; ++i) {
    spec::ParamSpec p{"p" + std::to_string(i), {}, DataType::kFloat32, spec::ParamKind::kDense};
    const int rank = std::uniform_int_distribution<int>(0, 3)(rng);  // 0: scalar
    if (rank >= 1) p.shape.push_back(std::uniform_int_distribution<int64_t>(1, 1500)(rng));
    for (int d = 1; d < rank; ++d) p.shape.push_back(std::uniform_int_distribution<int64_t>(1, 3)(rng));
    u.params.push_back(p);
  }
  return u;
}

void check_unit(const spec::UnitSpec& spec, int64_t n) {
  SCOPED_TRACE("shard degree " + std::to_string(n));
  const spec::UnitShardLayout layout(spec, n);
  ASSERT_EQ(layout.params().size(), spec.params.size());
  std::vector<int> hits(static_cast<size_t>(layout.flat_numel()), 0);
  int64_t offset = 0;
  for (size_t p = 0; p < spec.params.size(); ++p) {
    const auto& pl = layout.params()[p];
    EXPECT_EQ(pl.numel(), spec.params[p].numel());
    EXPECT_EQ(pl.offset_in_chunk, offset);  // params in order, back to back
    offset += pl.shard_numel();
    EXPECT_EQ(pl.padded_rows % n, 0);
    EXPECT_GE(pl.padded_rows, pl.rows);
    EXPECT_LT(pl.padded_rows - pl.rows, n);  // minimal padding
    // Every row owned by exactly one rank; the union of the ranks' rows is [0, rows).
    std::vector<int> owners(static_cast<size_t>(pl.rows), 0);
    int64_t covered = 0;
    for (int64_t r = 0; r < n; ++r) {
      const spec::RowRange rows = pl.rows_of(r);
      ASSERT_LE(rows.begin, rows.end);
      EXPECT_LE(rows.size(), pl.rows_per_rank);
      covered += rows.size();
      for (int64_t i = rows.begin; i < rows.end; ++i) {
        ++owners[static_cast<size_t>(i)];
        EXPECT_EQ(pl.owner_of_row(i), r);
      }
    }
    EXPECT_EQ(covered, pl.rows);
    for (int c : owners) ASSERT_EQ(c, 1);
    // Every element lands in its owner's chunk at a distinct flat position.
    for (int64_t e = 0; e < pl.numel(); ++e) {
      const int64_t flat = layout.flat_index(p, e);
      ASSERT_GE(flat, 0);
      ASSERT_LT(flat, layout.flat_numel());
      const int64_t owner = layout.owner(p, e);
      ASSERT_EQ(flat / layout.chunk_numel(), owner);
      ASSERT_GE(flat, layout.flat_offset(p, owner));
      ASSERT_LT(flat, layout.flat_offset(p, owner) + pl.shard_numel());
      ++hits[static_cast<size_t>(flat)];
    }
  }
  EXPECT_EQ(offset, layout.chunk_numel());
  EXPECT_EQ(layout.flat_numel(), layout.chunk_numel() * n);
  int64_t used = 0;
  for (int h : hits) {
    ASSERT_LE(h, 1);
    used += h;
  }
  EXPECT_EQ(used, layout.numel());  // the rest is padding
  EXPECT_EQ(layout.padding_numel(), layout.flat_numel() - used);
}

TEST(ShardLayoutTest, PropertyEveryElementOwnedOnceRandomShapesWorld1To576) {
  std::mt19937_64 rng(20260101);
  std::vector<int64_t> worlds = {1, 2, 3, 7, 8, 13, 16, 64, 127, 144, 288, 432, 575, 576};
  for (int i = 0; i < 16; ++i) worlds.push_back(std::uniform_int_distribution<int64_t>(1, 576)(rng));
  for (int64_t n : worlds) {
    for (int k = 0; k < 3; ++k) check_unit(random_unit(rng), n);
  }
}

TEST(ShardLayoutTest, HsdpEveryShardGroupOwnsEveryElementOnce) {
  // 4 x 144 chips as replicate 4 x shard 144: each replica's shard group holds a full copy.
  const spec::Mesh mesh = spec::Mesh::create(spec::MeshSpec{4, 144, 4, 144});
  std::mt19937_64 rng(7);
  const spec::UnitSpec spec = random_unit(rng);
  const spec::UnitShardLayout layout(spec, mesh.shard_degree());
  for (int64_t replica = 0; replica < mesh.replicate_degree(); ++replica) {
    for (size_t p = 0; p < spec.params.size(); ++p) {
      const auto& pl = layout.params()[p];
      std::vector<int> owners(static_cast<size_t>(pl.rows), 0);
      for (int64_t s = 0; s < mesh.shard_degree(); ++s) {
        const int64_t rank = replica * mesh.shard_degree() + s;
        EXPECT_EQ(mesh.replica_index(rank), replica);
        const spec::RowRange rows = pl.rows_of(mesh.shard_rank(rank));
        for (int64_t i = rows.begin; i < rows.end; ++i) ++owners[static_cast<size_t>(i)];
      }
      for (int c : owners) ASSERT_EQ(c, 1);
    }
  }
}

TEST(ShardLayoutTest, Fsdp2PaddingExample) {
  // 10 rows over 4 ranks: 3 rows each, padded to 12; rank 3 holds row 9 and two padding rows.
  const spec::UnitSpec spec{"u", false, {spec::ParamSpec{"a", {10, 2}}, spec::ParamSpec{"b", {3}}}};
  const spec::UnitShardLayout layout(spec, 4);
  const auto& a = layout.params()[0];
  EXPECT_EQ(a.rows_per_rank, 3);
  EXPECT_EQ(a.padded_rows, 12);
  EXPECT_EQ(a.rows_of(3).begin, 9);
  EXPECT_EQ(a.rows_of(3).end, 10);
  const auto& b = layout.params()[1];
  EXPECT_EQ(b.rows_per_rank, 1);
  EXPECT_EQ(b.offset_in_chunk, 6);
  EXPECT_EQ(b.rows_of(3).size(), 0);  // padding only
  EXPECT_EQ(b.ranks_with_rows(), 3);
  EXPECT_EQ(layout.chunk_numel(), 7);
  EXPECT_EQ(layout.flat_numel(), 28);
  // Row 4 of a (elements 8, 9) is rank 1's second row: 1 * 7 + 0 + 1 * 2.
  EXPECT_EQ(layout.flat_index(0, 8), 9);
  EXPECT_EQ(layout.flat_index(1, 2), 2 * 7 + 6);
  EXPECT_THROW(spec::UnitShardLayout(spec, 0), spec::SpecError);
}

TEST(ShardLayoutTest, AdamWModelStatesAre16POverN) {
  for (const char* name : {"llama3-debug", "llama3-8b", "llama3-405b"}) {
    const spec::ModelSpec m = spec::model_preset(name);
    for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{144}, int64_t{576}}) {
      SCOPED_TRACE(std::string(name) + " over " + std::to_string(n));
      const auto units = spec::shard_model(m, n);
      int64_t shard_numel = 0;
      int64_t padding = 0;
      for (const auto& u : units) {
        shard_numel += u.chunk_numel();
        padding += u.padding_numel();
      }
      const int64_t states = param_shard_bytes(m, units) + grad_shard_bytes(m, units) +
                             optimizer_state_bytes(shard_numel, spec::Optimizer::kAdamW);
      const double ideal = 16.0 * static_cast<double>(m.num_params()) / static_cast<double>(n);
      EXPECT_GE(static_cast<double>(states), ideal);
      // Exactly 16 bytes per padded element: the only difference from 16 P / N is padding.
      EXPECT_EQ(states, 16 * shard_numel);
      EXPECT_EQ(shard_numel * n, m.num_params() + padding);
      EXPECT_LE(static_cast<double>(states) - ideal, 16.0 * static_cast<double>(padding) / static_cast<double>(n) + 1);
      if (n == 1) {
        EXPECT_EQ(static_cast<double>(states), ideal);
      }
    }
  }
}

}  // namespace
}  // namespace fsdp::sharding
