// Single-thread throughput of the MXFP8 kernels (collectives/kernels/mxfp8.h) on 4 Mi normal-distributed
// elements, for every instruction set the kernels are built for that this CPU supports: the compute an
// MXFP8 collective adds per element. Median of 7 timed runs after one warm-up, each timed in this thread's
// CPU time (so a loaded host's waiting for a core does not count; its shared caches still do).
//
//   build/bench/fsdp-mxfp8-kernels-bench
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "collectives/kernels/mxfp8.h"
#include "common/float_formats.h"

double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

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
  std::string isa_label;
  auto report = [&](const char* what, auto&& fn) {
    fn();
    std::vector<double> ns;
    for (int k = 0; k < 7; ++k) {
      const double start = thread_cpu_ns();
      fn();
      ns.push_back((thread_cpu_ns() - start) / static_cast<double>(n));
    }
    std::nth_element(ns.begin(), ns.begin() + 3, ns.end());
    std::printf("%-9s %-32s %6.3f ns/element  %6.2f GB/s of bf16\n", isa_label.c_str(), what, ns[3], 2.0 / ns[3]);
  };
  for (mx::Isa isa : {mx::Isa::kBaseline, mx::Isa::kAvx2, mx::Isa::kAvx512}) {
    if (!mx::isa_supported(isa)) {
      std::printf("%-9s (not supported by this CPU)\n", std::string(mx::isa_name(isa)).c_str());
      continue;
    }
    mx::use_isa(isa);
    isa_label = mx::isa_name(isa);
    report("quantize f32", [&] { mx::quantize(x.data(), DataType::kFloat32, n, wire.data(), f); });
    report("quantize bf16", [&] { mx::quantize(xb.data(), DataType::kBfloat16, n, wire.data(), f); });
    report("dequantize to f32", [&] { mx::dequantize(wire.data(), n, f.element, out.data(), DataType::kFloat32); });
    report("dequantize to bf16", [&] { mx::dequantize(wire.data(), n, f.element, outb.data(), DataType::kBfloat16); });
    report("dequantize to f32 via bf16", [&] {  // FSDP's fused copy-out of bf16 parameters
      mx::dequantize_range(wire.data(), n, 0, n, f.element, out.data(), DataType::kFloat32, DataType::kBfloat16);
    });
    report("dequantize_add (f32)", [&] { mx::dequantize_add(wire.data(), n, f.element, out.data()); });
  }
  return 0;
}
