// Gradient clipping over shards (runtime/grad_clip.h) against the naive norm of the full gradients:
// R x S ranks, each holding its 1/S chunk (zero-padded) of every unit's flat gradient, replicas alike,
// plus replicated tensors every rank holds whole; p = 1, 1.5, 2, 3, inf. And FsdpModel's L2 bits kept.
#include "runtime/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/errors.h"
#include "runtime/process_groups.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime {
namespace {

using testing::InProcJob;

constexpr double kInf = std::numeric_limits<double>::infinity();
const std::vector<size_t> kUnitNumel{37, 5, 64};  // 37 and 5 leave padding at most shard degrees

// The full gradients of every unit, the same on every rank: values of many magnitudes and both signs.
std::vector<std::vector<float>> full_gradients() {
  std::vector<std::vector<float>> units;
  for (size_t u = 0; u < kUnitNumel.size(); ++u) {
    std::vector<float> g(kUnitNumel[u]);
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = static_cast<float>(std::sin(1.0 + 7.3 * static_cast<double>(i) + 3.1 * static_cast<double>(u)) *
                                std::pow(1.7, static_cast<double>(i % 9)) * (u + 1));
    }
    units.push_back(g);
  }
  return units;
}

std::vector<std::vector<float>> replicated_tensors() { return {{0.25f, -3.5f, 1e-3f}, {42.0f}}; }

// Shard rank s's chunk of each unit (ceil(n / S) elements, zero-padded past the end).
std::vector<std::vector<float>> shards_of(const std::vector<std::vector<float>>& full, int64_t s, int64_t shards) {
  std::vector<std::vector<float>> out;
  for (const auto& g : full) {
    const size_t chunk = (g.size() + static_cast<size_t>(shards) - 1) / static_cast<size_t>(shards);
    std::vector<float> mine(chunk, 0.0f);
    for (size_t i = 0; i < chunk; ++i) {
      const size_t at = static_cast<size_t>(s) * chunk + i;
      if (at < g.size()) mine[i] = g[at];
    }
    out.push_back(mine);
  }
  return out;
}

double naive_norm(const std::vector<std::vector<float>>& tensors, double p) {
  double acc = 0;
  for (const auto& t : tensors) {
    for (float g : t) acc = p == kInf ? std::max(acc, std::abs(double{g})) : acc + std::pow(std::abs(double{g}), p);
  }
  return p == kInf ? acc : std::pow(acc, 1.0 / p);
}

std::vector<std::span<float>> spans(std::vector<std::vector<float>>& v) { return {v.begin(), v.end()}; }
std::vector<std::span<const float>> const_spans(const std::vector<std::vector<float>>& v) {
  return {v.begin(), v.end()};
}

struct Mesh2 {
  int64_t replicate, shard;
};

class GradClip : public ::testing::TestWithParam<Mesh2> {};

TEST_P(GradClip, NormAndClipEqualTheNaiveFullGradientsOnes) {
  const int64_t R = GetParam().replicate, S = GetParam().shard;
  auto full = full_gradients();
  auto rest = replicated_tensors();
  auto everything = full;
  everything.insert(everything.end(), rest.begin(), rest.end());
  InProcJob job(static_cast<int>(R * S));
  job.run([&](Communicator& world) {
    ProcessGroups groups = ProcessGroups::create(world, spec::Mesh::for_world(R * S, R));
    for (double p : {1.0, 1.5, 2.0, 3.0, kInf}) {
      for (bool with_rest : {false, true}) {
        auto mine = shards_of(full, groups.shard_rank(), S);
        auto replicated = with_rest ? rest : std::vector<std::vector<float>>{};
        const double want = naive_norm(with_rest ? everything : full, p);
        const std::string what =
            "p " + std::to_string(p) + (with_rest ? " with replicated" : "") + " rank " + std::to_string(world.rank());
        const double norm = total_grad_norm(const_spans(mine), const_spans(replicated), groups.shard_reduce.get(), p);
        EXPECT_NEAR(norm, want, 1e-12 * want) << what;

        // Clipping to half the norm: every element scaled by clip_scale's factor, the clipped norm half.
        const double max_norm = 0.5 * want;
        const auto before = mine;
        const auto rest_before = replicated;
        EXPECT_EQ(clip_grad_norm(spans(mine), spans(replicated), groups.shard_reduce.get(), max_norm, p), norm) << what;
        const float scale = clip_scale(norm, max_norm);
        EXPECT_NEAR(scale, max_norm / want, 1e-6) << what;
        for (size_t u = 0; u < mine.size(); ++u) {
          for (size_t i = 0; i < mine[u].size(); ++i) ASSERT_EQ(mine[u][i], before[u][i] * scale) << what;
        }
        for (size_t t = 0; t < replicated.size(); ++t) {
          for (size_t i = 0; i < replicated[t].size(); ++i) ASSERT_EQ(replicated[t][i], rest_before[t][i] * scale);
        }
        const double clipped =
            total_grad_norm(const_spans(mine), const_spans(replicated), groups.shard_reduce.get(), p);
        EXPECT_NEAR(clipped, max_norm, 1e-5 * max_norm) << what;
      }
    }
  });
}

// FsdpModel::clip_grad_norm's L2 norm as it was computed before grad_clip existed (one double sum of
// g * g over the shards in order, all-reduced, sqrt): the same bits, so fsdp-train's losses and the
// buddy mirror's bitwise copies did not move.
TEST_P(GradClip, L2NormKeepsFsdpModelsBits) {
  const int64_t R = GetParam().replicate, S = GetParam().shard;
  const auto full = full_gradients();
  InProcJob job(static_cast<int>(R * S));
  job.run([&](Communicator& world) {
    ProcessGroups groups = ProcessGroups::create(world, spec::Mesh::for_world(R * S, R));
    auto mine = shards_of(full, groups.shard_rank(), S);
    double local = 0;
    for (const auto& shard : mine) {
      for (float g : shard) local += static_cast<double>(g) * g;
    }
    double total = local;
    groups.shard_reduce->all_reduce(&local, &total, 1, DataType::kFloat64, ReduceOp::sum()).wait();
    EXPECT_EQ(total_grad_norm(const_spans(mine), {}, groups.shard_reduce.get(), 2.0), std::sqrt(total));
  });
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, GradClip, ::testing::Values(Mesh2{1, 1}, Mesh2{1, 2}, Mesh2{2, 1}, Mesh2{1, 3}, Mesh2{2, 2}, Mesh2{3, 2}),
    [](const auto& info) { return std::to_string(info.param.replicate) + "x" + std::to_string(info.param.shard); });

TEST(GradClipScale, LeavesGradientsBelowTheNormOrNonFiniteAndWithClippingOff) {
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_scale(2.0, 0.0), 1.0f);  // max_norm <= 0: off
  EXPECT_EQ(clip_scale(kInf, 1.0), 1.0f);
  EXPECT_EQ(clip_scale(std::nan(""), 1.0), 1.0f);
  EXPECT_EQ(clip_scale(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  std::vector<std::vector<float>> g{{1.0f, std::nanf(""), 2.0f}};
  EXPECT_TRUE(std::isnan(clip_grad_norm(spans(g), {}, nullptr, 1.0, 2.0)));
  EXPECT_EQ(g[0][0], 1.0f);  // not scaled
  // A NaN survives the max norm (the collectives' max would drop it): infinite there.
  InProcJob job(2);
  job.run([&](Communicator& world) {
    std::vector<std::vector<float>> mine{{world.rank() == 0 ? std::nanf("") : 1.0f}};
    EXPECT_FALSE(std::isfinite(total_grad_norm(const_spans(mine), {}, &world, kInf)));
  });
}

TEST(GradClipScale, RefusesWhatIsNotANorm) {
  std::vector<std::vector<float>> g{{1.0f}};
  for (double p : {0.0, -2.0, -kInf, std::nan("")}) {
    EXPECT_THROW(total_grad_norm(const_spans(g), {}, nullptr, p), InvalidArgument) << p;
  }
}

}  // namespace
}  // namespace fsdp::runtime
