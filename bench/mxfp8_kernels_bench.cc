// Single-thread throughput of the MXFP8 kernels (collectives/types/mxfp8.h) on 4 Mi normal-distributed
// elements: the compute an MXFP8 collective adds per element. Median of 7 timed runs after one warm-up.
//
//   build/bench/fsdp-mxfp8-kernels-bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "collectives/types/mxfp8.h"
#include "common/float_formats.h"

int main() {
  using namespace fsdp;
  const size_t n = size_t{1} << 22;
  std::vector<float> x(n), out(n);
  std::vector<uint16_t> xb(n), outb(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < n; ++i) {
    x[i] = normal(rng);
    xb[i] = float_to_bf16(x[i]);
  }
  std::vector<uint8_t> wire(mx::wire_bytes(n));
  const mx::Format f{};
  auto report = [&](const char* what, auto&& fn) {
    fn();
    std::vector<double> ns;
    for (int k = 0; k < 7; ++k) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n);
    }
    std::nth_element(ns.begin(), ns.begin() + 3, ns.end());
    std::printf("%-24s %6.2f ns/element  %6.2f GB/s of bf16\n", what, ns[3], 2.0 / ns[3]);
  };
  report("quantize f32", [&] { mx::quantize(x.data(), DataType::kFloat32, n, wire.data(), f); });
  report("quantize bf16", [&] { mx::quantize(xb.data(), DataType::kBfloat16, n, wire.data(), f); });
  report("dequantize to f32", [&] { mx::dequantize(wire.data(), n, f.element, out.data(), DataType::kFloat32); });
  report("dequantize to bf16", [&] { mx::dequantize(wire.data(), n, f.element, outb.data(), DataType::kBfloat16); });
  report("dequantize_add (f32)", [&] { mx::dequantize_add(wire.data(), n, f.element, out.data()); });
  return 0;
}
