// fsdp-calibrate: measures the machine it runs on for the planner and writes a chip profile file
// (fsdp-plan --chip-file). What it measures, per rank (one process, --threads BLAS threads):
//   - GEMM throughput at the shapes the model runs (OpenBLAS through model/ops.h, the reference model's
//     own entry point): every weight matrix's forward, input-gradient and weight-gradient product at
//     micro-batch x seq-len rows, and attention's per-head T x T products; printed by shape, written as
//     fp32_tflops (their FLOP-weighted rate) with matmul_efficiency = 1;
//   - memory bandwidth: a triad (a = b + s c) over arrays far larger than the caches, as hbm_tb_per_s;
//   - the MXFP8 codec of MXFP8 communication (collectives/kernels/mxfp8.h, the kernels the runtime calls, at
//     the widest instruction set this CPU has): quantising f32 and decoding through bf16 into f32 (FSDP's
//     fused copy-out), as mxfp8_quantize_ns_per_element / mxfp8_decode_ns_per_element. The tool links the
//     collectives library for them; the planner library itself stays free of it.
// Links keep the base profile's figures; measure them with fsdp-bench (docs/planner.md, Calibration).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/kernels/mxfp8.h"
#include "model/blas_core.h"
#include "model/ops.h"
#include "sharding/chip_profile.h"
#include "spec/model_spec.h"
#include "spec/spec_error.h"

namespace fs = fsdp::sharding;

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    R"(usage: fsdp-calibrate [--model NAME] [--seq-len N] [--micro-batch N] [--threads N] [--base CHIP] [--out FILE]

  --model NAME      model preset whose matmul shapes are timed (default debugmodel_byte)
  --seq-len N       tokens per sequence (default 128)
  --micro-batch N   sequences per micro-step (default 4)
  --threads N       OpenBLAS threads, the rank's share of the cores (default 1)
  --base CHIP       preset the profile starts from (default cpu)
  --out FILE        write the [chip] profile there (default: print it)
)";

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median time of 7 runs of fn, each repeated until it takes >= 20 ms: the median, not the best, since
// training shares the machine as it is (other processes included) and fsdp-train's step is a median too.
template <class Fn>
double median_seconds(Fn fn) {
  int reps = 1;
  std::vector<double> times;
  while (times.size() < 7) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) fn();
    const double s = seconds_since(t0);
    if (s < 0.02 && times.empty() && reps < (1 << 20)) {
      reps *= 2;  // still finding a repeat count worth timing
      continue;
    }
    times.push_back(s / reps);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Shape {
  int64_t m, n, k;
  bool operator<(const Shape& o) const { return std::tie(m, n, k) < std::tie(o.m, o.n, o.k); }
};

// Every gemm one micro-step of a block and of the output head runs, with how often (m x k @ k x n).
std::map<Shape, int64_t> model_gemms(const fsdp::spec::ModelSpec& model, int64_t rows, int64_t seq) {
  std::map<Shape, int64_t> shapes;
  for (const auto& unit : model.units) {
    for (const auto& p : unit.params) {
      if (p.shape.size() != 2 || p.kind != fsdp::spec::ParamKind::kDense) continue;
      const int64_t out = p.shape[0], in = p.shape[1];
      ++shapes[{rows, out, in}];  // forward y = x W^T
      ++shapes[{rows, in, out}];  // input gradient dx = dy W
      ++shapes[{out, in, rows}];  // weight gradient dW = dy^T x
    }
    if (unit.is_layer && model.dims.n_heads > 0) {
      const int64_t heads = (rows / seq) * model.dims.n_heads, hd = model.dims.head_dim();
      shapes[{seq, seq, hd}] += 3 * heads;  // scores forward, again in backward, dP
      shapes[{seq, hd, seq}] += 4 * heads;  // PV, dV, dQ, dK
    }
  }
  return shapes;
}

double triad_bytes_per_s() {
  const size_t n = size_t{1} << 24;  // 64 MiB per array
  std::vector<float> a(n), b(n, 1.f), c(n, 2.f);
  const double s = median_seconds([&] {
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
  });
  if (a[n / 2] != 2.f) throw std::runtime_error("triad: wrong result");
  return 3.0 * static_cast<double>(n) * sizeof(float) / s;
}

struct Codec {
  double quantize_s = 0, decode_s = 0;  // per element
};

// Over 4 Mi elements (beyond the L2 cache, as FSDP's buffers are), values spread over many binades.
Codec mxfp8_codec() {
  const size_t n = size_t{1} << 22;
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * static_cast<float>(i)) * static_cast<float>(1 + i % 97);
  std::vector<uint8_t> wire(fsdp::mx::wire_bytes(n));
  const fsdp::mx::Format format{};
  const double q = median_seconds([&] { fsdp::mx::quantize(x.data(), fsdp::DataType::kFloat32, n, wire.data(), format); });
  const double d = median_seconds([&] {
    fsdp::mx::dequantize_range(wire.data(), n, 0, n, format.element, y.data(), fsdp::DataType::kFloat32,
                               fsdp::DataType::kBfloat16);
  });
  // A sanity check, not the format's tests: every element of one block within 1/8 of its largest.
  const size_t block = n / 3 / fsdp::mx::kBlockSize * fsdp::mx::kBlockSize;
  float amax = 0, err = 0;
  for (size_t i = block; i < block + fsdp::mx::kBlockSize; ++i) {
    amax = std::max(amax, std::abs(x[i]));
    err = std::max(err, std::abs(y[i] - x[i]));
  }
  if (!(err <= amax / 8)) throw std::runtime_error("mxfp8: the decode does not give back the input");
  return {q / static_cast<double>(n), d / static_cast<double>(n)};
}

int run(int argc, char** argv) {
  std::map<std::string, std::string> v{{"--model", "debugmodel_byte"}, {"--seq-len", "128"}, {"--micro-batch", "4"},
                                       {"--threads", "1"}, {"--base", "cpu"}, {"--out", ""}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (!v.count(arg) || i + 1 >= argc) {
      std::cerr << "fsdp-calibrate: unknown option or missing value '" << arg << "'\n\n" << kUsage;
      return 2;
    }
    v[arg] = argv[++i];
  }
  const fsdp::spec::ModelSpec model = fsdp::spec::resolve_model(v["--model"]);
  const int64_t seq = std::stoll(v["--seq-len"]), rows = seq * std::stoll(v["--micro-batch"]);
  fsdp::model::ops::set_blas_threads(std::stoi(v["--threads"]));
  fs::ChipProfile chip = fs::chip_preset(v["--base"]);

  std::printf("# fsdp-calibrate: %s, %lld rows, %s BLAS threads\n", v["--model"].c_str(),
              static_cast<long long>(rows), v["--threads"].c_str());
  std::printf("%8s %8s %8s %6s %12s\n", "m", "n", "k", "count", "GFLOP/s");
  double flops = 0, secs = 0;
  for (const auto& [s, count] : model_gemms(model, rows, seq)) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k), 0.01f), b(static_cast<size_t>(s.k * s.n), 0.02f),
        c(static_cast<size_t>(s.m * s.n));
    const double t = median_seconds([&] {
      fsdp::model::ops::gemm(false, false, s.m, s.n, s.k, 1.f, a.data(), s.k, b.data(), s.n, 0.f, c.data(), s.n);
    });
    const double f = 2.0 * static_cast<double>(s.m * s.n * s.k);
    std::printf("%8lld %8lld %8lld %6lld %12.2f\n", static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), static_cast<long long>(count), f / t / 1e9);
    flops += f * static_cast<double>(count);
    secs += t * static_cast<double>(count);
  }
  const double rate = flops / secs;
  const double bw = triad_bytes_per_s();
  const Codec codec = mxfp8_codec();
  std::printf("matmul %.2f GFLOP/s at the model's shapes (FLOP-weighted), memory %.2f GB/s (triad), mxfp8 quantise "
              "%.3f ns and decode %.3f ns per element (%s)\n",
              rate / 1e9, bw / 1e9, codec.quantize_s * 1e9, codec.decode_s * 1e9,
              std::string(fsdp::mx::isa_name(fsdp::mx::active_isa())).c_str());

  char text[1024];
  std::snprintf(text, sizeof text,
                "# fsdp-calibrate --model %s --seq-len %lld --micro-batch %s --threads %s\n"
                "[chip]\nbase = \"%s\"\nname = \"%s-calibrated\"\nfp32_tflops = %.6g\nbf16_tflops = %.6g\n"
                "fp8_tflops = %.6g\nmatmul_efficiency = 1.0\nhbm_tb_per_s = %.6g\n"
                "mxfp8_quantize_ns_per_element = %.4g\nmxfp8_decode_ns_per_element = %.4g\n",
                v["--model"].c_str(), static_cast<long long>(seq), v["--micro-batch"].c_str(), v["--threads"].c_str(),
                chip.name.c_str(), chip.name.c_str(), rate / 1e12, rate / 1e12, rate / 1e12, bw / 1e12,
                codec.quantize_s * 1e9, codec.decode_s * 1e9);
  // What the planner will read back: the same numbers, validated.
  (void)fs::parse_chip_profile(text, "fsdp-calibrate");
  if (v["--out"].empty()) {
    std::cout << text;
  } else {
    std::ofstream out(v["--out"]);
    out << text;
    if (!out) throw fsdp::spec::SpecError("cannot write '" + v["--out"] + "'");
    std::printf("wrote %s\n", v["--out"].c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::model::use_best_blas_core(argv, /*announce=*/true);  // first: it may restart this program
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "fsdp-calibrate: error: " << e.what() << "\n";
    return 1;
  }
}
