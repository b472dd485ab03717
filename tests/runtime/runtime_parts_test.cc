// The runtime's small pieces on their own: layout copies, the learning-rate schedule.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <vector>

#include "collectives/quantized.h"
#include "common/float_formats.h"
#include "runtime/flat_copy.h"
#include "runtime/lr_schedule.h"
#include "common/memory_tracker.h"

namespace fsdp::runtime {
namespace {

spec::UnitSpec unit_of(std::vector<std::vector<int64_t>> shapes) {
  spec::UnitSpec u{"u", false, {}};
  for (size_t i = 0; i < shapes.size(); ++i) u.params.push_back(spec::ParamSpec{"p" + std::to_string(i), shapes[i]});
  return u;
}

TEST(FlatCopy, RoundTripsThroughTheRankMajorLayoutAtManyDegrees) {
  const auto unit = unit_of({{5, 3}, {7}, {}, {2, 2, 2}});
  for (int64_t n : {1, 2, 3, 4, 7, 16}) {
    spec::UnitShardLayout layout(unit, n);
    std::vector<float> params(static_cast<size_t>(layout.numel()));
    for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i) + 0.5f;
    std::vector<float> flat(static_cast<size_t>(layout.flat_numel()), -1.f);
    copy_in(layout, params.data(), flat.data(), DataType::kFloat32);
    // Every element sits where the layout says.
    const auto offsets = param_major_offsets(layout);
    for (size_t p = 0; p < unit.params.size(); ++p) {
      for (int64_t i = 0; i < unit.params[p].numel(); ++i) {
        ASSERT_EQ(flat[static_cast<size_t>(layout.flat_index(p, i))], params[static_cast<size_t>(offsets[p] + i)]);
      }
    }
    // Chunks extracted per rank are exactly the rank's slice of the flat buffer (padding zero).
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> chunk(static_cast<size_t>(layout.chunk_numel()), 0.f);
      extract_chunk(layout, r, params.data(), chunk.data());
      for (int64_t i = 0; i < layout.chunk_numel(); ++i) {
        const float in_flat = flat[static_cast<size_t>(r * layout.chunk_numel() + i)];
        ASSERT_EQ(chunk[static_cast<size_t>(i)], in_flat == -1.f ? 0.f : in_flat) << "n " << n << " rank " << r;
      }
    }
    std::vector<float> back(params.size(), 0.f);
    copy_out(layout, flat.data(), DataType::kFloat32, back.data());
    EXPECT_EQ(back, params) << "n " << n;
  }
}

TEST(FlatCopy, NarrowsToBf16OnceAndWidensBack) {
  const auto unit = unit_of({{3, 3}});
  spec::UnitShardLayout layout(unit, 2);
  std::vector<float> params{1.f, 1.00390625f, -2.5f, 3.14159f, 0.f, 1e-3f, 7.f, 8.f, 9.f};
  std::vector<uint16_t> flat(static_cast<size_t>(layout.flat_numel()));
  copy_in(layout, params.data(), flat.data(), DataType::kBfloat16);
  std::vector<float> back(params.size());
  copy_out(layout, flat.data(), DataType::kBfloat16, back.data());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(back[i], bf16_to_float(float_to_bf16(params[i])));
}

// The fused MXFP8 copy-out equals decoding every rank's slot into a param-dtype flat buffer and then
// copy_out, bit for bit (parameters whose rows split blocks and chunks; bf16 and f32 param dtypes).
TEST(FlatCopy, Mxfp8CopyOutEqualsDecodeThenCopyOut) {
  const auto unit = unit_of({{37, 5}, {7}, {}, {3, 33}, {1000}});
  for (int64_t n : {1, 2, 3, 8}) {
    spec::UnitShardLayout layout(unit, n);
    const auto chunk = static_cast<size_t>(layout.chunk_numel());
    const size_t slot = mx::slot_bytes(chunk);
    std::vector<float> params(static_cast<size_t>(layout.numel()));
    for (size_t i = 0; i < params.size(); ++i) params[i] = std::sin(static_cast<float>(i)) * std::ldexp(1.f, int(i % 23) - 9);
    std::vector<uint8_t> wire(slot * static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> c(chunk, 0.f);
      extract_chunk(layout, r, params.data(), c.data());
      mx::quantize(c.data(), DataType::kFloat32, chunk, wire.data() + r * slot, mx::Format{});
    }
    for (DataType t : {DataType::kBfloat16, DataType::kFloat32}) {
      std::vector<std::byte> flat(static_cast<size_t>(layout.flat_numel()) * element_size(t));
      mx::finish_all_gather(wire.data(), chunk, static_cast<int>(n), DataType::kFloat8E4M3, flat.data(), t);
      std::vector<float> want(params.size()), got(params.size(), -1.f);
      copy_out(layout, flat.data(), t, want.data());
      copy_out_mxfp8(layout, wire.data(), DataType::kFloat8E4M3, t, got.data());
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "n " << n << " element " << i;
      }
    }
  }
}

// The PyTorch front end's copy-in: each parameter's gradient written (then added) straight into the
// rank-major layout, padding zeroed, equals copy_in of the param-major sums; in f32 and bf16 reduce
// dtypes, from f32 and bf16 gradients.
TEST(FlatCopy, ParamGradsLandWhereCopyInPutsThem) {
  const auto unit = unit_of({{5, 3}, {7}, {}, {2, 2, 2}});
  for (int64_t n : {1, 2, 3, 4, 7}) {
    spec::UnitShardLayout layout(unit, n);
    const auto offsets = param_major_offsets(layout);
    const auto numel = static_cast<size_t>(layout.numel());
    std::vector<float> first(numel), second(numel), sum(numel);
    for (size_t i = 0; i < numel; ++i) {  // exact in bf16, and so are their sums
      first[i] = static_cast<float>(i % 17) - 8.f;
      second[i] = 0.25f * static_cast<float>(i % 5);
      sum[i] = first[i] + second[i];
    }
    for (DataType type : {DataType::kFloat32, DataType::kBfloat16}) {
      for (DataType grad_type : {DataType::kFloat32, DataType::kBfloat16}) {
        const size_t elem = element_size(type);
        std::vector<std::byte> want(static_cast<size_t>(layout.flat_numel()) * elem, std::byte{0});
        copy_in(layout, sum.data(), want.data(), type);
        std::vector<std::byte> got(want.size(), std::byte{0x7f});  // garbage where nothing writes
        zero_padding(layout, got.data(), type);
        for (size_t p = 0; p < unit.params.size(); ++p) {
          for (const auto* grads : {&first, &second}) {
            std::vector<std::byte> g(static_cast<size_t>(unit.params[p].numel()) * element_size(grad_type));
            copy_in(spec::UnitShardLayout(unit_of({{unit.params[p].numel()}}), 1), grads->data() + offsets[p], g.data(),
                    grad_type);
            write_param_grad(layout, p, g.data(), grad_type, got.data(), type, grads == &second);
          }
        }
        EXPECT_EQ(got, want) << "n " << n << " type " << name(type) << " grad " << name(grad_type);
        zero_param_rows(layout, 1, got.data(), type);
        for (int64_t i = 0; i < unit.params[1].numel(); ++i) {
          const auto at = static_cast<size_t>(layout.flat_index(1, i)) * elem;
          for (size_t b = 0; b < elem; ++b) ASSERT_EQ(got[at + b], std::byte{0}) << "n " << n << " element " << i;
        }
      }
    }
  }
}

// The copy-out into param-dtype full parameters (a front end computing in bf16) is the bf16 flat's runs.
TEST(FlatCopy, CopiesOutInTheParamDtype) {
  const auto unit = unit_of({{5, 3}, {7}});
  spec::UnitShardLayout layout(unit, 3);
  std::vector<float> params(static_cast<size_t>(layout.numel()));
  for (size_t i = 0; i < params.size(); ++i) params[i] = 1.f + static_cast<float>(i) / 7.f;
  std::vector<uint16_t> flat(static_cast<size_t>(layout.flat_numel()));
  copy_in(layout, params.data(), flat.data(), DataType::kBfloat16);
  std::vector<uint16_t> back(params.size());
  copy_out(layout, flat.data(), DataType::kBfloat16, back.data(), DataType::kBfloat16);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(back[i], float_to_bf16(params[i])) << i;
}

TEST(FlatCopy, AccumulatesWidenedValues) {
  std::vector<float> dst{1.f, 2.f};
  std::vector<uint16_t> src{float_to_bf16(0.5f), float_to_bf16(-4.f)};
  accumulate_widened(dst.data(), src.data(), 2, DataType::kBfloat16);
  EXPECT_EQ(dst, (std::vector<float>{1.5f, -2.f}));
}

// TorchTitan's lr_lambda (components/lr_scheduler.py, v0.2.x) transcribed as written: warm-up, decay
// spans and the 0-based step LambdaLR passes (training step s runs at lambda(s - 1)).
double torchtitan_factor(int64_t current_step, int64_t total_steps, int64_t warmup_steps, double decay_ratio,
                         DecayType type, double min_lr_factor) {
  if (warmup_steps > total_steps) warmup_steps = total_steps;
  int64_t decay_steps = total_steps - warmup_steps;
  if (decay_ratio >= 0) {
    decay_steps = static_cast<int64_t>(std::nearbyint(total_steps * decay_ratio));  // Python's round
    if (warmup_steps + decay_steps > total_steps) decay_steps = total_steps - warmup_steps;
  }
  const int64_t stable_steps = total_steps + 1 - warmup_steps - decay_steps;
  const int64_t warmup_stable_steps = warmup_steps + stable_steps;
  if (current_step < warmup_steps) return static_cast<double>(current_step + 1) / warmup_steps;
  if (current_step < warmup_stable_steps) return 1.0;
  const double progress = static_cast<double>(current_step + 1 - warmup_stable_steps) / decay_steps;
  double adjustment = 0;
  switch (type) {
    case DecayType::kLinear: adjustment = 1 - progress; break;
    case DecayType::kSqrt: adjustment = 1 - std::sqrt(progress); break;
    case DecayType::kCosine: adjustment = 0.5 * (1.0 + std::cos(M_PI * progress)); break;
  }
  return min_lr_factor + (1 - min_lr_factor) * adjustment;
}

TEST(LrSchedule, EveryStepIsTorchTitans) {
  for (int64_t total : {1, 2, 7, 10, 20, 101}) {
    for (int64_t warmup : {0, 1, 2, 5, 200}) {
      for (double ratio : {-1.0, 0.0, 0.25, 0.5, 0.8, 1.0}) {
        for (DecayType type : {DecayType::kLinear, DecayType::kCosine, DecayType::kSqrt}) {
          for (double min_factor : {0.0, 0.1}) {
            const int64_t decay_steps =
                ratio < 0 ? -1 : static_cast<int64_t>(std::nearbyint(static_cast<double>(total) * ratio));
            const LrSchedule s{.lr = 3.0, .total_steps = total, .warmup_steps = warmup, .decay_steps = decay_steps,
                               .decay = type, .min_lr_factor = min_factor};
            for (int64_t step = 1; step <= total; ++step) {
              EXPECT_NEAR(s.at(step), 3.0 * torchtitan_factor(step - 1, total, warmup, ratio, type, min_factor), 1e-15)
                  << "total " << total << " warmup " << warmup << " ratio " << ratio << " type "
                  << static_cast<int>(type) << " min " << min_factor << " step " << step;
            }
          }
        }
      }
    }
  }
}

TEST(LrSchedule, DebugJobNumbers) {
  // configs/debug_model.toml: 20 steps, warm-up 2, linear decay over the 18 after it.
  const LrSchedule s{.lr = 1.0, .total_steps = 20, .warmup_steps = 2, .decay_steps = -1, .decay = DecayType::kLinear,
                     .min_lr_factor = 0};
  EXPECT_DOUBLE_EQ(s.at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.at(2), 1.0);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);  // TorchTitan's one stable step
  EXPECT_DOUBLE_EQ(s.at(4), 1.0 - 1.0 / 18);
  EXPECT_DOUBLE_EQ(s.at(20), 1.0 / 18);  // the last step still learns
  EXPECT_DOUBLE_EQ(s.at(25), 0.0);       // past total_steps the minimum holds
  EXPECT_THROW(parse_decay_type("exp"), std::invalid_argument);
  EXPECT_EQ(parse_decay_type("sqrt"), DecayType::kSqrt);
}

}  // namespace
}  // namespace fsdp::runtime
