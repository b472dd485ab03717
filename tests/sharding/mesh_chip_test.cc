// Meshes up to 144 chips per server and many servers; chip profiles and profile files.
#include <gtest/gtest.h>

#include "sharding/chip_profile.h"
#include "spec/mesh.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

std::string error_of(const spec::MeshSpec& s) {
  try {
    spec::Mesh::create(s);
  } catch (const spec::SpecError& e) {
    return e.what();
  }
  return "";
}

TEST(MeshTest, ReplicateTimesShard) {
  const spec::Mesh m = spec::Mesh::create(spec::MeshSpec{4, 144, 4, spec::kRestOfWorld});
  EXPECT_EQ(m.world_size(), 576);
  EXPECT_EQ(m.shard_degree(), 144);
  EXPECT_EQ(m.replicate_degree(), 4);
  EXPECT_EQ(m.shard_level(), spec::LinkLevel::kIntra);  // a shard group is one server
  EXPECT_EQ(m.replicate_level(), spec::LinkLevel::kInter);
  EXPECT_EQ(m.shard_rank(150), 6);
  EXPECT_EQ(m.replica_index(150), 1);
  const spec::Mesh fsdp = spec::Mesh::create(spec::MeshSpec{4, 144, 1, spec::kRestOfWorld});
  EXPECT_EQ(fsdp.shard_degree(), 576);
  EXPECT_EQ(fsdp.shard_level(), spec::LinkLevel::kInter);
  EXPECT_EQ(fsdp.nodes_spanned_by_block(576), 4);
  const spec::Mesh small = spec::Mesh::create(spec::MeshSpec{1, 8, 2, 4});
  EXPECT_EQ(small.replicate_level(), spec::LinkLevel::kIntra);
  // Groups of 96 over servers of 144 straddle a boundary.
  EXPECT_EQ(spec::Mesh::create(spec::MeshSpec{4, 144, spec::kRestOfWorld, 96}).nodes_spanned_by_block(96), 2);
  EXPECT_EQ(spec::Mesh::create(spec::MeshSpec{2, 8, spec::kRestOfWorld, 4}).replicate_level(), spec::LinkLevel::kInter);
}

TEST(MeshTest, RefusesDegreesThatDoNotDivide) {
  EXPECT_NE(error_of(spec::MeshSpec{1, 144, spec::kRestOfWorld, 100})
                .find("world size 144 is not divisible by parallelism.data_parallel_shard_degree = 100"),
            std::string::npos);
  EXPECT_NE(error_of(spec::MeshSpec{4, 144, 7, spec::kRestOfWorld})
                .find("world size 576 is not divisible by parallelism.data_parallel_replicate_degree = 7"),
            std::string::npos);
  EXPECT_NE(error_of(spec::MeshSpec{1, 144, 2, 144}).find("= 288, but the world size is 144"), std::string::npos);
  EXPECT_NE(error_of(spec::MeshSpec{0, 8}).find("nodes is 0"), std::string::npos);
  EXPECT_NE(error_of(spec::MeshSpec{1, -8}).find("chips per node is -8"), std::string::npos);
  EXPECT_NE(error_of(spec::MeshSpec{1, 145}).find("must be 1..144"), std::string::npos);
  EXPECT_NE(error_of(spec::MeshSpec{1, 8, -2, spec::kRestOfWorld}).find("must be positive"), std::string::npos);
}

TEST(ChipProfileTest, PresetsAndUnknownChip) {
  for (const auto& n : chip_preset_names()) EXPECT_NO_THROW(validate(chip_preset(n))) << n;
  const ChipProfile trn3 = chip_preset("trn3");
  EXPECT_DOUBLE_EQ(trn3.memory_bytes, 144.0 * (1 << 30));
  EXPECT_EQ(trn3.chips_per_node, 144);
  EXPECT_DOUBLE_EQ(trn3.peak_flops(DataType::kFloat8E4M3), 2517e12);
  EXPECT_DOUBLE_EQ(chip_preset("h100").peak_flops(DataType::kBfloat16), 989e12);
  EXPECT_DOUBLE_EQ(chip_preset("h200").memory_bytes, 143771.0 * (1 << 20));  // NVML's MiB of the "141 GB"
  EXPECT_DOUBLE_EQ(chip_preset("a100").peak_flops(DataType::kBfloat16), 312e12);
  EXPECT_DOUBLE_EQ(chip_preset("trn1").memory_bytes, 32.0 * (1 << 30));
  // The 96 GB H100's compute lies between the SXM and NVL parts': the midpoint.
  EXPECT_DOUBLE_EQ(chip_preset("h100-hbm2e").peak_flops(DataType::kBfloat16), (835.5e12 + 989e12) / 2);
  try {
    chip_preset("tpu9");
    FAIL();
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "unknown chip 'tpu9' (known chips: trn1, trn2, trn3, a100, h100, h100-hbm2e, h200, cpu"),
              std::string::npos);
  }
}

TEST(ChipProfileTest, ProfileFileOverridesPreset) {
  const ChipProfile c = parse_chip_profile(
      "[chip]\nbase = \"h100\"\nname = \"h100-96\"\nmemory_gib = 96\n"
      "inter_gb_per_s = 100\n",
      "p.toml");
  EXPECT_EQ(c.name, "h100-96");
  EXPECT_DOUBLE_EQ(c.memory_bytes, 96.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.inter_bytes_per_s, 100e9);
  EXPECT_DOUBLE_EQ(c.peak_flops_bf16, 989e12);  // kept from the base
  const ChipProfile d = parse_chip_profile("[chip]\nmemory_gib = 32\n", "p.toml", "trn2");
  EXPECT_EQ(d.name, "trn2");
  EXPECT_DOUBLE_EQ(d.memory_bytes, 32.0 * (1 << 30));
  // The MXFP8 codec: measured figures, or 0 to derive them from the (overridden) memory bandwidth.
  const ChipProfile e = parse_chip_profile(
      "[chip]\nbase = \"cpu\"\nmxfp8_quantize_ns_per_element = 1.5\nmxfp8_decode_ns_per_element = 0.5\n", "p.toml");
  EXPECT_DOUBLE_EQ(e.mxfp8_quantize_seconds_per_element(), 1.5e-9);
  EXPECT_DOUBLE_EQ(e.mxfp8_decode_seconds_per_element(), 0.5e-9);
  const ChipProfile f = parse_chip_profile("[chip]\nbase = \"h100\"\nhbm_tb_per_s = 1\n", "p.toml");
  EXPECT_DOUBLE_EQ(f.mxfp8_decode_seconds_per_element(), (33.0 / 32 + 2) / 1e12);
}

TEST(ChipProfileTest, ProfileFileErrorsNameTheLine) {
  auto error = [](const std::string& text) {
    try {
      parse_chip_profile(text, "p.toml");
    } catch (const spec::SpecError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("[chip]\nbase = \"h100\"\nmemory_gib = -4\n").find("p.toml:3: memory_gib must be positive"),
            std::string::npos);
  EXPECT_NE(error("[chip]\nbase = \"h100\"\nmemroy_gib = 4\n").find("p.toml:3: unknown key 'memroy_gib'"),
            std::string::npos);
  EXPECT_NE(error("[chip]\nbase = \"x9\"\n").find("p.toml:2: unknown chip 'x9'"), std::string::npos);
  EXPECT_NE(error("[chip]\nname = \"new\"\nmemory_gib = 4\n").find("needs 'hbm_tb_per_s'"), std::string::npos);
  EXPECT_NE(error("[chip\n").find("p.toml:1:"), std::string::npos);
  EXPECT_NE(error("[chip]\nbase = \"cpu\"\nmxfp8_decode_ns_per_element = -1\n")
                .find("p.toml:3: mxfp8_decode_ns_per_element must be non-negative"),
            std::string::npos);
}

}  // namespace
}  // namespace fsdp::sharding
