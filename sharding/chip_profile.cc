#include "sharding/chip_profile.h"

#include <cmath>

#include "common/toml_util.h"
#include "spec/mxfp8_wire.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kTB = 1e12;
constexpr double kUs = 1e-6;
constexpr double kTflops = 1e12;
constexpr double kMiB = 1024.0 * 1024.0;
// Where no measurement of a chip's achievable matmul rate is published (the Trainium chips): large
// bf16/fp8 GEMMs reach roughly 70-80% of the datasheet peak on current accelerators. An assumption.
constexpr double kAssumedMatmulEfficiency = 0.75;

// Sources in docs/planner.md (Chip profiles), one per figure; never fitted to a training result.
// Published chip-to-chip figures are totals over both directions; the model uses half. Network
// figures (NIC line rates) are per direction already. Memory is the capacity the driver reports
// (NVML's MiB for the NVIDIA parts), not the marketing figure. matmul_efficiency: the measured
// maximum achievable bf16 matmul rate over the peak (ml-engineering's MAMF table) where published.
std::vector<ChipProfile> make_presets() {
  std::vector<ChipProfile> v;
  v.push_back(ChipProfile{.name = "trn1",
                          .memory_bytes = 32 * kGiB,
                          .hbm_bytes_per_s = 820 * kGiB,
                          .intra_bytes_per_s = 384 * kGiB / 2,  // NeuronLink-v2 384 GiB/s per device
                          .intra_latency_s = 5 * kUs,
                          .inter_bytes_per_s = 6.25 * kGB,  // EFA 800 Gb/s per 16-chip trn1.32xlarge
                          .inter_latency_s = 20 * kUs,
                          .peak_flops_fp32 = 47.5 * kTflops,
                          .peak_flops_bf16 = 190 * kTflops,
                          .peak_flops_fp8 = 190 * kTflops,  // cFP8 at the bf16 rate
                          .matmul_efficiency = kAssumedMatmulEfficiency,
                          .chips_per_node = 16});
  v.push_back(ChipProfile{.name = "trn2",
                          .memory_bytes = 96 * kGiB,
                          .hbm_bytes_per_s = 2.9 * kTB,
                          .intra_bytes_per_s = 1.28 * kTB / 2,  // NeuronLink-v3 1.28 TB/s per chip
                          .intra_latency_s = 5 * kUs,
                          .inter_bytes_per_s = 25 * kGB,  // EFAv3 3.2 Tb/s per 16-chip trn2.48xlarge
                          .inter_latency_s = 20 * kUs,
                          .peak_flops_fp32 = 181 * kTflops,
                          .peak_flops_bf16 = 667 * kTflops,
                          .peak_flops_fp8 = 1299 * kTflops,
                          .matmul_efficiency = kAssumedMatmulEfficiency,
                          .chips_per_node = 16});
  v.push_back(ChipProfile{.name = "trn3",
                          .memory_bytes = 144 * kGiB,
                          .hbm_bytes_per_s = 4.9 * kTB,
                          .intra_bytes_per_s = 2.0 * kTB / 2,  // NeuronLink about 2 TB/s per chip
                          .intra_latency_s = 5 * kUs,
                          .inter_bytes_per_s = 25 * kGB,  // EFA 28.8 Tb/s per 144-chip UltraServer
                          .inter_latency_s = 20 * kUs,
                          .peak_flops_fp32 = 183 * kTflops,
                          .peak_flops_bf16 = 671 * kTflops,
                          .peak_flops_fp8 = 2517 * kTflops,  // MXFP8
                          .matmul_efficiency = kAssumedMatmulEfficiency,
                          .chips_per_node = 144});
  v.push_back(ChipProfile{.name = "a100",
                          .memory_bytes = 81920 * kMiB,  // "80 GB"
                          .hbm_bytes_per_s = 2.039 * kTB,
                          .intra_bytes_per_s = 600 * kGB / 2,  // NVLink 3: 600 GB/s total
                          .intra_latency_s = 3 * kUs,
                          .inter_bytes_per_s = 25 * kGB,  // one 200 Gb/s HDR NIC per GPU (DGX A100)
                          .inter_latency_s = 10 * kUs,
                          .peak_flops_fp32 = 19.5 * kTflops,
                          .peak_flops_bf16 = 312 * kTflops,
                          .peak_flops_fp8 = 312 * kTflops,  // no FP8 units: at the bf16 rate
                          .matmul_efficiency = 271.2 / 312,
                          .attention_efficiency = 0.50,  // FlashAttention-2 on A100: 50-73% of peak
                          .chips_per_node = 8});
  v.push_back(ChipProfile{.name = "h100",
                          .memory_bytes = 81559 * kMiB,  // "80 GB"
                          .hbm_bytes_per_s = 3.35 * kTB,
                          .intra_bytes_per_s = 900 * kGB / 2,  // NVLink 4: 900 GB/s total
                          .intra_latency_s = 3 * kUs,
                          .inter_bytes_per_s = 50 * kGB,  // one 400 Gb/s NIC per GPU
                          .inter_latency_s = 10 * kUs,
                          .peak_flops_fp32 = 67 * kTflops,
                          .peak_flops_bf16 = 989 * kTflops,
                          .peak_flops_fp8 = 1979 * kTflops,
                          .matmul_efficiency = 794.5 / 989,
                          .attention_efficiency = 0.35,  // FlashAttention-2 on H100 (FlashAttention-3 paper)
                          .chips_per_node = 8});
  // The 96 GB HBM2e H100 of Meta's Grand Teton hosts (TorchTitan's published runs): 2.4 TB/s, a 500 W
  // power limit, compute "between SXM and NVL" (835.5-989 TFLOPS bf16): the midpoint, and the
  // SXM part's measured efficiency (none is published for this one). 95.0 GiB as CUDA reports it.
  ChipProfile h100_hbm2e = v.back();
  h100_hbm2e.name = "h100-hbm2e";
  h100_hbm2e.memory_bytes = 95.0 * kGiB;
  h100_hbm2e.hbm_bytes_per_s = 2.4 * kTB;
  h100_hbm2e.peak_flops_fp32 = (60 + 67) / 2.0 * kTflops;
  h100_hbm2e.peak_flops_bf16 = (835.5 + 989) / 2 * kTflops;
  h100_hbm2e.peak_flops_fp8 = (1670.5 + 1979) / 2 * kTflops;
  v.push_back(h100_hbm2e);
  // H200: the H100's compute, NVLink and networking with more and faster HBM (141 GB HBM3e, 4.8 TB/s);
  // its bf16 MAMF is published as the H100's.
  ChipProfile h200 = v[v.size() - 2];
  h200.name = "h200";
  h200.memory_bytes = 143771 * kMiB;  // "141 GB"
  h200.hbm_bytes_per_s = 4.8 * kTB;
  v.push_back(h200);
  // This project's 2-core CI machine: a "chip" is one process; figures from /work/shared/baselines.md.
  v.push_back(ChipProfile{.name = "cpu",
                          .memory_bytes = 8 * kGiB,
                          .hbm_bytes_per_s = 15 * kGB,     // one-thread memcpy
                          .intra_bytes_per_s = 3.5 * kGB,  // shared-memory all-gather busbw at 64 MiB
                          .intra_latency_s = 1 * kUs,
                          .inter_bytes_per_s = 1 * kGB,  // TCP loopback busbw
                          .inter_latency_s = 50 * kUs,
                          .peak_flops_fp32 = 0.1 * kTflops,   // 2 cores x AVX2 FMA, order of magnitude
                          .peak_flops_bf16 = 0.05 * kTflops,  // no native bf16 matmul: converted to fp32
                          .peak_flops_fp8 = 0.05 * kTflops,
                          .matmul_efficiency = 0.5,
                          .chips_per_node = 2,
                          .fp32_compute = true,
                          // Each rank's progress engine copies on the cores its compute uses.
                          .comm_compute_contention = 1.0,
                          // The AVX-512 kernels on one thread (docs/mxfp8.md, Kernels): quantise f32,
                          // decode to f32 through bf16 (the fused copy-out).
                          .mxfp8_quantize_s_per_element = 0.67e-9,
                          .mxfp8_decode_s_per_element = 0.39e-9});
  return v;
}

const std::vector<ChipProfile>& presets() {
  static const std::vector<ChipProfile> kPresets = make_presets();
  return kPresets;
}

}  // namespace

double ChipProfile::peak_flops(DataType compute) const {
  switch (compute) {
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return peak_flops_bf16;
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      return peak_flops_fp8;
    default:
      return peak_flops_fp32;
  }
}

double ChipProfile::mxfp8_quantize_seconds_per_element() const {
  return mxfp8_quantize_s_per_element > 0 ? mxfp8_quantize_s_per_element
                                          : (4 + spec::kMxfp8BytesPerElement) / hbm_bytes_per_s;
}

double ChipProfile::mxfp8_decode_seconds_per_element() const {
  return mxfp8_decode_s_per_element > 0 ? mxfp8_decode_s_per_element
                                        : (spec::kMxfp8BytesPerElement + 2) / hbm_bytes_per_s;
}

void validate(const ChipProfile& c) {
  const std::string where = "chip '" + c.name + "': ";
  if (c.name.empty()) throw spec::SpecError("chip profile has no name");
  for (auto [v, field] : {std::pair{c.memory_bytes, "memory"},
                          {c.hbm_bytes_per_s, "memory bandwidth"},
                          {c.intra_bytes_per_s, "intra-server bandwidth"},
                          {c.inter_bytes_per_s, "inter-server bandwidth"},
                          {c.peak_flops_fp32, "fp32 FLOP/s"},
                          {c.peak_flops_bf16, "bf16 FLOP/s"},
                          {c.peak_flops_fp8, "fp8 FLOP/s"},
                          {c.matmul_efficiency, "matmul efficiency"}}) {
    if (!(v > 0) || !std::isfinite(v))
      throw spec::SpecError(where + field + " must be positive (got " + std::to_string(v) + ")");
  }
  if (c.intra_latency_s < 0 || c.inter_latency_s < 0) throw spec::SpecError(where + "latencies must not be negative");
  if (c.matmul_efficiency > 1) throw spec::SpecError(where + "matmul efficiency must be in (0, 1]");
  if (!(c.attention_efficiency >= 0 && c.attention_efficiency <= 1)) {
    throw spec::SpecError(where + "attention efficiency must be in [0, 1] (0: the matmul efficiency)");
  }
  if (!(c.comm_compute_contention >= 0 && c.comm_compute_contention <= 1)) {
    throw spec::SpecError(where + "comm_compute_contention must be in [0, 1] (got " +
                          std::to_string(c.comm_compute_contention) + ")");
  }
  for (auto [v, field] : {std::pair{c.mxfp8_quantize_s_per_element, "mxfp8 quantise time"},
                          {c.mxfp8_decode_s_per_element, "mxfp8 decode time"}}) {
    if (!(v >= 0) || !std::isfinite(v))
      throw spec::SpecError(where + field + " must not be negative (0: from bandwidth)");
  }
  if (c.chips_per_node <= 0 || c.chips_per_node > spec::kMaxChipsPerNode) {
    throw spec::SpecError(where + "chips per node must be 1.." + std::to_string(spec::kMaxChipsPerNode));
  }
}

std::vector<std::string> chip_preset_names() {
  std::vector<std::string> names;
  for (const auto& c : presets()) names.push_back(c.name);
  return names;
}

ChipProfile chip_preset(std::string_view name) {
  for (const auto& c : presets()) {
    if (c.name == name) return c;
  }
  std::string known;
  for (const auto& c : presets()) known += (known.empty() ? "" : ", ") + c.name;
  throw spec::SpecError("unknown chip '" + std::string(name) + "' (known chips: " + known +
                        "; or give a profile file with --chip-file)");
}

namespace {

ChipProfile parse_chip_profile_document(std::string_view text, std::string_view src, std::string_view default_base) {
  using namespace toml_util;
  const toml::table doc = parse(text, src);
  check_keys(src, doc, "the top level", {"chip"});
  const toml::node* cn = doc.get("chip");
  if (cn == nullptr || !cn->is_table()) throw spec::SpecError(std::string(src) + ": missing [chip] table");
  const toml::table& t = *cn->as_table();
  check_keys(src, t, "[chip]",
             {"base", "name", "memory_gib", "hbm_tb_per_s", "intra_gb_per_s", "intra_latency_us", "inter_gb_per_s",
              "inter_latency_us", "fp32_tflops", "bf16_tflops", "fp8_tflops", "matmul_efficiency",
              "attention_efficiency", "chips_per_node",
              "fp32_compute", "comm_compute_contention", "mxfp8_quantize_ns_per_element",
              "mxfp8_decode_ns_per_element"});
  ChipProfile c;
  auto base = get_string(src, t, "base");
  if (base) {
    try {
      c = chip_preset(*base);
    } catch (const spec::SpecError& e) {
      fail(src, *t.get("base"), e.what());
    }
  } else if (!default_base.empty()) {
    c = chip_preset(default_base);
    base = std::string(default_base);
  }
  if (auto v = get_string(src, t, "name")) c.name = *v;
  struct Field {
    const char* key;
    double* out;
    double scale;
  };
  const Field fields[] = {
      {"memory_gib", &c.memory_bytes, kGiB},         {"hbm_tb_per_s", &c.hbm_bytes_per_s, kTB},
      {"intra_gb_per_s", &c.intra_bytes_per_s, kGB}, {"intra_latency_us", &c.intra_latency_s, kUs},
      {"inter_gb_per_s", &c.inter_bytes_per_s, kGB}, {"inter_latency_us", &c.inter_latency_s, kUs},
      {"fp32_tflops", &c.peak_flops_fp32, kTflops},  {"bf16_tflops", &c.peak_flops_bf16, kTflops},
      {"fp8_tflops", &c.peak_flops_fp8, kTflops},    {"matmul_efficiency", &c.matmul_efficiency, 1.0},
  };
  for (const auto& f : fields) {
    if (auto v = get_number(src, t, f.key)) {
      const bool latency = std::string_view(f.key).ends_with("latency_us");
      if (latency ? *v < 0 : *v <= 0) {
        fail(src, *t.get(f.key), std::string(f.key) + " must be " + (latency ? "non-negative" : "positive"));
      }
      *f.out = *v * f.scale;
    } else if (!base && std::string_view(f.key) != "matmul_efficiency") {
      fail(src, t, std::string("profile without 'base' needs '") + f.key + "'");
    }
  }
  if (auto v = get_int(src, t, "chips_per_node")) c.chips_per_node = *v;
  if (auto v = get_bool(src, t, "fp32_compute")) c.fp32_compute = *v;
  if (auto v = get_number(src, t, "comm_compute_contention")) c.comm_compute_contention = *v;
  if (auto v = get_number(src, t, "attention_efficiency")) {
    if (!(*v >= 0 && *v <= 1)) fail(src, *t.get("attention_efficiency"), "attention_efficiency must be in [0, 1] (0: matmul_efficiency)");
    c.attention_efficiency = *v;
  }
  // Optional even without a base: 0 (the default) derives the codec time from the memory bandwidth.
  for (auto [key, out] : {std::pair{"mxfp8_quantize_ns_per_element", &c.mxfp8_quantize_s_per_element},
                          {"mxfp8_decode_ns_per_element", &c.mxfp8_decode_s_per_element}}) {
    if (auto v = get_number(src, t, key)) {
      if (!(*v >= 0)) fail(src, *t.get(key), std::string(key) + " must be non-negative (0: from the memory bandwidth)");
      *out = *v * 1e-9;
    }
  }
  if (c.name.empty()) fail(src, t, "profile needs a 'name' or a 'base'");
  try {
    validate(c);
  } catch (const spec::SpecError& e) {
    throw spec::SpecError(std::string(src) + ": " + e.what());
  }
  return c;
}

}  // namespace

ChipProfile parse_chip_profile(std::string_view text, std::string_view src, std::string_view default_base) {
  return spec::as_spec_error([&] { return parse_chip_profile_document(text, src, default_base); });
}

ChipProfile load_chip_profile_file(const std::string& path, std::string_view default_base) {
  return parse_chip_profile(spec::as_spec_error([&] { return toml_util::read_file(path); }), path, default_base);
}

}  // namespace fsdp::sharding
