// The all-to-all, and the MXFP8 all-gather and reduce-scatter (Wire::mxfp8, collectives/quantized.h), at
// world sizes 1-8, 16 and 144 over the in-process transport. The all-gather must equal decode(quantise(shard)) of
// every rank bit for bit; the reduce-scatter must equal the rank-order f32 sum of every decoded
// contribution bit for bit, and stay within the format's stated bound of the exact (double) sum.
#include "collectives/quantized.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>

#include "collectives/communicator.h"
#include "common/float_formats.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

const int kWorldSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 144};

CommOptions small_chunks(int n) {
  CommOptions o;
  o.chunk_bytes = n <= 16 ? 256 : 4096;  // several chunks per block at small n
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Gradient-like values: per-block magnitudes over a few binades, unique to (rank, index).
std::vector<float> values(size_t count, int rank, int salt) {
  std::mt19937 rng(static_cast<uint32_t>(rank * 7919 + salt));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-12, 2);
  std::vector<float> x(count);
  int e = 0;
  for (size_t i = 0; i < count; ++i) {
    if (i % mx::kBlockSize == 0) e = binade(rng);
    x[i] = std::ldexp(normal(rng), e);
  }
  return x;
}

class QuantizedCollectives : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, QuantizedCollectives, ::testing::ValuesIn(kWorldSizes),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST_P(QuantizedCollectives, AllToAllDeliversEveryBlock) {
  const int n = GetParam();
  InProcJob job(n, small_chunks(n));
  for (size_t count : {size_t{0}, size_t{1}, size_t{300}}) {
    job.run([&](Communicator& c) {
      const int r = c.rank();
      std::vector<int32_t> send(count * n), recv(count * n, -1);
      // Value unique to (source, destination, index), so a misplaced block fails at once.
      for (int d = 0; d < n; ++d) {
        for (size_t i = 0; i < count; ++i) send[d * count + i] = static_cast<int32_t>((r * 1000 + d) * 1000 + i);
      }
      c.all_to_all(send.data(), recv.data(), count, DataType::kInt32).wait();
      for (int s = 0; s < n; ++s) {
        for (size_t i = 0; i < count; ++i) {
          const auto want = static_cast<int32_t>((s * 1000 + r) * 1000 + i);
          if (recv[s * count + i] != want) {
            throw std::runtime_error("all_to_all rank " + std::to_string(r) + " from " + std::to_string(s) +
                                     " element " + std::to_string(i) + ": " + std::to_string(recv[s * count + i]) +
                                     " != " + std::to_string(want));
          }
        }
      }
    });
  }
}

TEST_P(QuantizedCollectives, AllGatherEqualsDecodedShardsBitwise) {
  const int n = GetParam();
  InProcJob job(n, small_chunks(n));
  for (const mx::Format f : {mx::Format{DataType::kFloat8E4M3}, mx::Format{DataType::kFloat8E5M2}}) {
    for (DataType t : {DataType::kFloat32, DataType::kBfloat16}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{77}, size_t{1024}}) {
        // Reference: every rank's shard through quantise and dequantise on its own.
        std::vector<std::vector<std::byte>> shards(n);
        std::vector<std::byte> want(count * n * element_size(t));
        for (int r = 0; r < n; ++r) {
          const auto x = values(count, r, 1);
          shards[r].resize(count * element_size(t));
          if (t == DataType::kFloat32) {
            if (count != 0) std::memcpy(shards[r].data(), x.data(), count * sizeof(float));  // data() may be null
          } else {
            for (size_t i = 0; i < count; ++i) {
              const uint16_t b = float_to_bf16(x[i]);
              std::memcpy(shards[r].data() + i * 2, &b, 2);
            }
          }
          std::vector<uint8_t> wire(mx::wire_bytes(count));
          mx::quantize(shards[r].data(), t, count, wire.data(), f);
          mx::dequantize(wire.data(), count, f.element, want.data() + r * count * element_size(t), t);
        }
        job.run([&](Communicator& c) {
          std::vector<std::byte> got(want.size(), std::byte{0xCD});
          std::vector<uint8_t> wire(mx::slot_bytes(count) * n);
          c.all_gather(shards[c.rank()].data(), wire.data(), count, t, Wire::mxfp8(f)).wait();
          mx::finish_all_gather(wire.data(), count, n, f.element, got.data(), t);
          // 8.25 bits per element written out, not through the codec's own formula: a byte per code and
          // one E8M0 scale per started block of 32, with no padding between the ranks' slots.
          const size_t expected_wire = (count + (count + 31) / 32) * n;
          if (wire.size() != expected_wire) {
            throw std::runtime_error("mxfp8 wire is " + std::to_string(wire.size()) + " bytes for " +
                                     std::to_string(count) + " x " + std::to_string(n) + " elements, want " +
                                     std::to_string(expected_wire) + " (8.25 bits per element)");
          }
          if (got != want) {
            throw std::runtime_error("mxfp8 all_gather differs on rank " + std::to_string(c.rank()) + ", " +
                                     std::string(name(t)) + ", count " + std::to_string(count));
          }
        });
      }
    }
  }
}

// The relative error of the reduce-scatter against the exact sum, by world size, for the report.
TEST_P(QuantizedCollectives, ReduceScatterSumsDecodedContributionsInF32) {
  const int n = GetParam();
  const size_t count = 77 * 3;  // per rank: several blocks and a tail
  InProcJob job(n, small_chunks(n));
  for (const mx::Format f : {mx::Format{DataType::kFloat8E4M3}, mx::Format{DataType::kFloat8E5M2}}) {
    std::vector<std::vector<float>> inputs(n);
    for (int r = 0; r < n; ++r) inputs[r] = values(count * n, r, 2);
    // Reference: per destination, the rank-order f32 sum of each source's decoded chunk, then / n;
    // and the exact mean in double, with the bound each contribution's quantisation allows.
    std::vector<float> want(count * n, 0.0f);
    std::vector<double> exact(count * n, 0.0), bound(count * n, 0.0);
    const double half_step = std::ldexp(1.0, f.element == DataType::kFloat8E4M3 ? -4 : -3);
    const int emin = f.element == DataType::kFloat8E4M3 ? -6 : -14;
    for (int d = 0; d < n; ++d) {
      std::copy_n(inputs[d].data() + d * count, count, want.data() + d * count);  // own chunk first, exact
      for (int r = 0; r < n; ++r) {
        const float* chunk = inputs[r].data() + d * count;
        std::vector<uint8_t> wire(mx::wire_bytes(count));
        mx::quantize(chunk, DataType::kFloat32, count, wire.data(), f);
        if (r != d) mx::dequantize_add(wire.data(), count, f.element, want.data() + d * count);
        for (size_t i = 0; i < count; ++i) {
          const double scale = std::ldexp(1.0, int{wire[count + i / mx::kBlockSize]} - 127);
          exact[d * count + i] += chunk[i];
          // Quantisation (per the format test's bound) plus f32 summation (n roundings at most).
          bound[d * count + i] += (r == d ? 0.0 : half_step * std::max(std::fabs(double{chunk[i]}), std::ldexp(scale, emin))) +
                                  n * std::ldexp(std::fabs(double{chunk[i]}), -23);
        }
      }
    }
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] /= static_cast<float>(n);
      exact[i] /= n;
      bound[i] /= n;
    }
    std::vector<double> err_sq(n), ref_sq(n);
    job.run([&](Communicator& c) {
      const int r = c.rank();
      std::vector<float> got(count, -1.0f);
      std::vector<uint8_t> wire(2 * mx::slot_bytes(count) * n);
      c.reduce_scatter(inputs[r].data(), got.data(), count, DataType::kFloat32, ReduceOp{ReduceKind::kAvg, 1.0},
                       Wire::mxfp8(f, wire.data()))
          .wait();
      for (size_t i = 0; i < count; ++i) {
        const size_t k = r * count + i;
        if (std::memcmp(&got[i], &want[k], sizeof(float)) != 0) {
          throw std::runtime_error("mxfp8 reduce_scatter rank " + std::to_string(r) + " element " +
                                   std::to_string(i) + ": " + std::to_string(got[i]) + " != " + std::to_string(want[k]));
        }
        const double err = std::fabs(got[i] - exact[k]);
        if (err > bound[k]) {
          throw std::runtime_error("mxfp8 reduce_scatter rank " + std::to_string(r) + " element " +
                                   std::to_string(i) + ": error " + std::to_string(err) + " > bound " +
                                   std::to_string(bound[k]));
        }
        err_sq[r] += err * err;
        ref_sq[r] += exact[k] * exact[k];
      }
    });
    double e = 0, x = 0;
    for (int r = 0; r < n; ++r) e += err_sq[r], x += ref_sq[r];
    std::cout << "mxfp8 reduce_scatter " << name(f.element) << " N=" << n << " relative rms error vs exact "
              << std::sqrt(e / x) << "\n";
  }
}

// MXFP8 on the wire takes float data, sums or averages, and a scratch for the reduce-scatter's slots:
// anything else fails at the call, naming the collective and what is wrong.
TEST(QuantizedWire, ArgumentsAreChecked) {
  InProcJob job(2, small_chunks(2));
  job.run([](Communicator& c) {
    std::vector<float> in(8, 1.0f), out(4);
    std::vector<uint8_t> wire(2 * mx::slot_bytes(4) * 2);
    const Wire mx8 = Wire::mxfp8(mx::Format{}, wire.data());
    auto message = [](const std::function<void()>& call) {
      try {
        call();
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const std::string ints = message([&] { c.all_gather(in.data(), wire.data(), 4, DataType::kInt32, mx8); });
    const std::string max = message(
        [&] { c.reduce_scatter(in.data(), out.data(), 4, DataType::kFloat32, ReduceOp{ReduceKind::kMax}, mx8); });
    const std::string scratch = message([&] {
      c.reduce_scatter(in.data(), out.data(), 4, DataType::kFloat32, ReduceOp::sum(), Wire::mxfp8(mx::Format{}));
    });
    const std::string rank = " on rank " + std::to_string(c.rank()) + ": ";
    const std::pair<std::string, std::string> cases[] = {
        {ints, "all_gather" + rank + "mxfp8 on the wire takes float32 or bfloat16 data, not int32"},
        {max, "reduce_scatter" + rank + "mxfp8 on the wire sums or averages, not max"},
        {scratch, "reduce_scatter" + rank + "null wire scratch buffer with 20 bytes"}};
    for (const auto& [got, want] : cases) {
      if (got != want) throw std::runtime_error("got '" + got + "', want '" + want + "'");
    }
  });
}

// Why an all-to-all and not a ring: a ring reduce-scatter sends partial sums, which MXFP8 would
// re-quantise at each of the n-1 hops, so its error grows with n; the all-to-all quantises each
// contribution once. Computed here without communication (the ring's arithmetic, hop by hop).
TEST(QuantizedReduceScatter, AllToAllErrorDoesNotCompoundLikeARing) {
  const size_t count = 32 * 64;
  const mx::Format f{DataType::kFloat8E4M3};
  std::vector<uint8_t> wire(mx::wire_bytes(count));
  auto roundtrip = [&](std::vector<float>& v) {
    mx::quantize(v.data(), DataType::kFloat32, count, wire.data(), f);
    mx::dequantize(wire.data(), count, f.element, v.data(), DataType::kFloat32);
  };
  for (int n : {2, 4, 8, 16, 144}) {
    std::vector<double> exact(count, 0.0);
    std::vector<float> ring(count, 0.0f), a2a(count, 0.0f);
    for (int r = 0; r < n; ++r) {
      const auto x = values(count, r, 3);
      std::vector<float> q = x;
      roundtrip(q);
      for (size_t i = 0; i < count; ++i) {
        exact[i] += x[i];
        a2a[i] += r == n - 1 ? x[i] : q[i];  // the receiver's own chunk never travels
        ring[i] += x[i];  // the hop's own contribution joins the partial at full precision
      }
      if (r + 1 < n) roundtrip(ring);  // ... and the partial is quantised to go to the next rank
    }
    double e_ring = 0, e_a2a = 0, ref = 0;
    for (size_t i = 0; i < count; ++i) {
      e_ring += (ring[i] - exact[i]) * (ring[i] - exact[i]);
      e_a2a += (a2a[i] - exact[i]) * (a2a[i] - exact[i]);
      ref += exact[i] * exact[i];
    }
    e_ring = std::sqrt(e_ring / ref);
    e_a2a = std::sqrt(e_a2a / ref);
    std::cout << "mxfp8 e4m3 reduce-scatter N=" << n << " relative rms error: all-to-all " << e_a2a << ", ring "
              << e_ring << "\n";
    if (n >= 8) {
      EXPECT_LT(e_a2a, e_ring) << "N=" << n;
    }
  }
}

}  // namespace
}  // namespace fsdp::testing
