// Chip profiles: memory, links inside and between servers, and peak FLOP/s per dtype. Every preset
// number and its public source is listed in docs/planner.md. Bandwidths are bytes/s per chip in one
// direction (what a ring step can push), latencies seconds per hop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "spec/mesh.h"

namespace fsdp::sharding {

struct ChipProfile {
  std::string name;
  double memory_bytes = 0;       // device memory capacity
  double hbm_bytes_per_s = 0;    // device memory bandwidth
  double intra_bytes_per_s = 0;  // chip-to-chip inside a server, per chip, one direction
  double intra_latency_s = 0;    // per collective step inside a server (alpha)
  double inter_bytes_per_s = 0;  // network between servers, per chip, one direction
  double inter_latency_s = 0;
  double peak_flops_fp32 = 0;  // dense FLOP/s
  double peak_flops_bf16 = 0;
  double peak_flops_fp8 = 0;       // FP8 or MXFP8 dense
  double matmul_efficiency = 1.0;  // achievable fraction of peak for large matmuls (1 = pure roofline)
  // Fraction of peak the fused attention kernel reaches (its QK^T and PV products, forward and
  // backward); 0: matmul_efficiency (the CPU reference computes attention with the same GEMMs).
  double attention_efficiency = 0;
  int64_t chips_per_node = 1;      // default server size when the user does not give one
  // No low-precision matmul units (the CPU reference model): parameters are gathered in the param
  // dtype but computed on, with gradients and activations, in fp32.
  bool fp32_compute = false;
  // How much compute and collectives slow each other while they overlap, in [0, 1]
  // (sharding/schedule_sim.h): 0 where collectives have engines and links of their own (accelerators),
  // 1 where the same cores run both (a CPU: the progress engine's copies share the rank's core).
  double comm_compute_contention = 0;
  // MXFP8 communication's codec (collectives/kernels/mxfp8.h) on the training thread, seconds per element:
  // quantising from f32, and decoding to the compute dtype (the all-gather's copy-out; the reduce-scatter's
  // decode-and-add into f32 is priced the same). 0: derived from memory bandwidth, the bytes the kernel
  // reads and writes at hbm_bytes_per_s (an elementwise kernel on an accelerator is bandwidth-bound):
  // quantise 4 + 33/32 bytes, decode 33/32 + 2.
  double mxfp8_quantize_s_per_element = 0;
  double mxfp8_decode_s_per_element = 0;

  double bandwidth(spec::LinkLevel level) const {
    return level == spec::LinkLevel::kIntra ? intra_bytes_per_s : inter_bytes_per_s;
  }
  double latency(spec::LinkLevel level) const {
    return level == spec::LinkLevel::kIntra ? intra_latency_s : inter_latency_s;
  }
  // Peak for matmuls whose inputs are `compute` (fp16/bf16 -> bf16 peak, fp8 -> fp8 peak, else fp32).
  double peak_flops(DataType compute) const;
  double attention_fraction() const { return attention_efficiency > 0 ? attention_efficiency : matmul_efficiency; }
  // The codec per element: the figures above, or their bandwidth-derived defaults.
  double mxfp8_quantize_seconds_per_element() const;
  double mxfp8_decode_seconds_per_element() const;
};

// Throws PlanError when a field is zero, negative or not finite.
void validate(const ChipProfile& chip);

std::vector<std::string> chip_preset_names();    // trn1, trn2, trn3, a100, h100, h100-hbm2e, h200, cpu
ChipProfile chip_preset(std::string_view name);  // throws spec::SpecError naming the known chips

// A TOML profile file: a [chip] table with `base = "<preset>"` (optional) and any fields to override
// (memory_gib, hbm_tb_per_s, intra_gb_per_s, intra_latency_us, inter_gb_per_s, inter_latency_us,
// fp32_tflops, bf16_tflops, fp8_tflops, matmul_efficiency, chips_per_node, fp32_compute,
// comm_compute_contention, mxfp8_quantize_ns_per_element, mxfp8_decode_ns_per_element (0: from the
// memory bandwidth), name). Without a base every
// field is required, unless default_base names a preset to start from. Errors name the file and line.
ChipProfile parse_chip_profile(std::string_view toml_text, std::string_view source_name,
                               std::string_view default_base = {});
ChipProfile load_chip_profile_file(const std::string& path, std::string_view default_base = {});

}  // namespace fsdp::sharding
