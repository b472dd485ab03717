// spec/checked_size.h and the sizes built on it: absurd dims are refused by name (SizeOverflow naming
// the field that drives them), never wrapped (the sanitizer build would call that undefined).
#include "spec/checked_size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "spec/model_spec.h"
#include "spec/shard_layout.h"

namespace fsdp::spec {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedSize, ProductsAndSumsFitOrNameTheQuantity) {
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x", "dim"), int64_t{1} << 62);
  EXPECT_EQ(checked_add(kMax - 1, 1, "x", "dim"), kMax);
  try {
    checked_mul(int64_t{1} << 32, int64_t{1} << 31, "the attention", "dim");
    ADD_FAILURE() << "no overflow";
  } catch (const SizeOverflow& e) {
    EXPECT_EQ(std::string(e.what()), "the attention: 4294967296 x 2147483648 overflows int64");
    EXPECT_EQ(e.driver(), "dim");
    EXPECT_TRUE(e.counted());
  }
  EXPECT_THROW(checked_add(kMax, 1, "x", "seq_len"), SizeOverflow);
  EXPECT_THROW(checked_mul(-(int64_t{1} << 62), 4, "x", "seq_len"), SizeOverflow);
}

// make_llama over debug_model_dims() with one field absurd: refused before anything is built, the
// SizeOverflow naming the field.
std::string refused_driver(ModelDims d) {
  try {
    make_llama("absurd", d);
  } catch (const SizeOverflow& e) {
    EXPECT_NE(std::string(e.what()).find("llama config 'absurd'"), std::string::npos) << e.what();
    return e.driver();
  }
  return "accepted";
}

TEST(CheckedSize, AbsurdLlamaDimsAreRefusedNamingTheField) {
  ModelDims d = debug_model_dims();
  d.dim = int64_t{1} << 40;  // dim x dim = 2^80
  d.ffn_hidden = llama_ffn_hidden(d.dim, 64, 0);
  EXPECT_EQ(refused_driver(d), "dim");
  d = debug_model_dims();
  d.layers = std::numeric_limits<int32_t>::max();  // one unit a block: not built
  EXPECT_EQ(refused_driver(d), "layers");
  d = debug_model_dims();
  d.vocab = int64_t{1} << 62;  // vocab x dim = 2^69
  EXPECT_EQ(refused_driver(d), "vocab");
  d.vocab = int64_t{1} << 50;  // 2^57 elements: fits int64, not the model's bound
  EXPECT_EQ(refused_driver(d), "vocab");
  d = debug_moe_model_dims();
  d.moe.num_experts = int64_t{1} << 40;
  EXPECT_EQ(refused_driver(d), "experts");
  d = debug_moe_model_dims();
  d.moe.num_shared_experts = int64_t{1} << 60;
  EXPECT_EQ(refused_driver(d), "shared_experts");
  d = debug_model_dims();
  d.layers = kMaxLayers + 1;
  EXPECT_EQ(refused_driver(d), "layers");
}

TEST(CheckedSize, ShardingOverAHugeDegreeIsRefusedNotWrapped) {
  const ModelSpec m = make_llama("debug", debug_model_dims());
  EXPECT_EQ(UnitShardLayout(m.units[0], int64_t{1} << 20).chunk_numel(), 128);  // one of 256 rows of 128
  try {
    UnitShardLayout(m.units[0], kMax / 2);
    ADD_FAILURE() << "no overflow";
  } catch (const SizeOverflow& e) {
    EXPECT_EQ(e.driver(), "shard_degree");
  }
}

}  // namespace
}  // namespace fsdp::spec
