// safetensors in the forms weights travel in: BF16 (round to nearest even), Hugging Face Llama names
// with HF's q/k row order, and files that do not match the model (missing, extra, misshapen tensor).
// A tiny GQA Llama (dim 16, 4 heads, 2 kv heads, 2 layers) sharded over in-process ranks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>

#include "checkpoint_support.h"
#include "common/float_formats.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/checkpoint/convert.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/inspect.h"
#include "runtime/checkpoint/safetensors.h"
#include "spec/model_spec.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime::checkpoint {
namespace {

using testing::InProcJob;
using testing::ScratchDir;
using Params = std::map<std::string, std::vector<float>>;  // TorchTitan name -> full tensor

constexpr HfLlamaHeads kHeads{4, 2};

spec::ModelSpec tiny_llama() {
  return spec::make_llama("tiny", spec::ModelDims{.dim = 16,
                                                  .layers = 2,
                                                  .n_heads = kHeads.n_heads,
                                                  .n_kv_heads = kHeads.n_kv_heads,
                                                  .vocab = 12,
                                                  .ffn_hidden = spec::llama_ffn_hidden(16, 8, 0)});
}

// The model's parameters on every rank, each value unique to (tensor, index) and exercising the bf16
// rounding: random mantissa bits below the bf16 cut, including exact ties.
struct LlamaJob {
  LlamaJob(Communicator& c, bool fill) {
    FsdpOptions o;
    o.mesh = spec::Mesh::for_world(c.size(), 1);
    o.policy.param_dtype = DataType::kFloat32;
    fsdp = std::make_unique<FsdpModel>(tiny_llama(), o, c, tracker);
    fsdp->init_parameters([&](int u, std::span<float* const> p) {
      const auto& spec = fsdp->model().units.at(static_cast<size_t>(u));
      for (size_t k = 0; k < p.size(); ++k) {
        for (int64_t i = 0; i < spec.params[k].numel(); ++i) p[k][i] = fill ? value(u * 100 + static_cast<int>(k), i) : 0.f;
      }
    });
  }
  static float value(int tensor, int64_t i) {
    uint32_t x = static_cast<uint32_t>(tensor) * 2654435761u ^ static_cast<uint32_t>(i) * 40503u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const uint32_t low = i % 7 == 0 ? 0x8000u : (x & 0xffffu);  // every 7th an exact tie
    return std::bit_cast<float>(0x3c000000u + ((x >> 16) & 0x00ff0000u) + ((x & 0x7f) << 16) + low) *
           (i % 2 ? -1.f : 1.f);
  }
  Params params() {
    Params out;
    for (int u = 0; u < fsdp->num_units(); ++u) {
      const auto full = fsdp->gather_full_parameters(u);
      int64_t at = 0;
      for (const auto& ps : fsdp->model().units.at(static_cast<size_t>(u)).params) {
        out[ps.name].assign(full.begin() + at, full.begin() + at + ps.numel());
        at += ps.numel();
      }
    }
    return out;
  }
  // Parameters only (no optimizer), in `folder`.
  std::unique_ptr<Checkpointer> checkpointer(Communicator& c, const std::string& folder) {
    CheckpointOptions o;
    o.folder = folder;
    return std::make_unique<Checkpointer>(*fsdp, nullptr, c, o, tracker);
  }
  MemoryTracker tracker;
  std::unique_ptr<FsdpModel> fsdp;
};

Params exported_params(int n, const std::string& file, const SafetensorsFormat& format) {
  Params p;
  InProcJob job(n);
  job.run([&](Communicator& c) {
    LlamaJob t(c, true);
    export_safetensors(*t.fsdp, c, file, {{"format", "pt"}}, format);
    auto full = t.params();
    if (c.rank() == 0) p = std::move(full);
  });
  return p;
}

Params imported_params(int n, const std::string& file, const SafetensorsFormat& format) {
  Params p;
  InProcJob job(n);
  job.run([&](Communicator& c) {
    LlamaJob t(c, false);
    import_safetensors(*t.fsdp, c, file, format);
    auto full = t.params();
    if (c.rank() == 0) p = std::move(full);
  });
  return p;
}

// Independent bf16 rounding: of the two bf16 values around x (truncation and one ulp further from
// zero), the nearer in double arithmetic; on a tie the one with an even last mantissa bit.
uint16_t bf16_reference(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double dx = x, dlo = std::bit_cast<float>(uint32_t{lo} << 16), dhi = std::bit_cast<float>(uint32_t{hi} << 16);
  const double elo = std::fabs(dx - dlo), ehi = std::fabs(dhi - dx);
  if (elo != ehi) return elo < ehi ? lo : hi;
  return (lo & 1) == 0 ? lo : hi;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// HF's convert_llama_weights_to_hf: permute(w) = w.view(n, rows/n/2, 2, cols).transpose(1, 2).reshape(rows, cols),
// spelled out as index arithmetic on the 4-d view.
std::vector<float> hf_permute(const std::vector<float>& w, int64_t n, int64_t rows, int64_t cols) {
  const int64_t half = rows / n / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n; ++h)
    for (int64_t a = 0; a < half; ++a)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < cols; ++c) {
          // input index [h][a][b][c], output index [h][b][a][c]
          out[static_cast<size_t>(((h * 2 + b) * half + a) * cols + c)] =
              w[static_cast<size_t>(((h * half + a) * 2 + b) * cols + c)];
        }
  return out;
}

TEST(HfLlama, NamesMapBothWaysAndOnlyLlamaNamesMap) {
  EXPECT_EQ(to_hf_name("tok_embeddings.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(to_hf_name("layers.11.attention.wq.weight"), "model.layers.11.self_attn.q_proj.weight");
  EXPECT_EQ(to_hf_name("layers.0.feed_forward.w1.weight"), "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(to_hf_name("layers.0.feed_forward.w2.weight"), "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(to_hf_name("layers.0.feed_forward.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(to_hf_name("layers.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(from_hf_name("model.layers.2.input_layernorm.weight"), "layers.2.attention_norm.weight");
  EXPECT_EQ(from_hf_name("model.norm.weight"), "norm.weight");
  for (const char* bad : {"fc0.weight", "layers.x.attention.wq.weight", "layers.1.attention.wq.bias", "layers..norm"}) {
    EXPECT_THROW(to_hf_name(bad), CheckpointError) << bad;
  }
  EXPECT_THROW(from_hf_name("model.layers.0.self_attn.rotary_emb.inv_freq"), CheckpointError);
  // Every parameter of a Llama: a bijection that round-trips.
  std::map<std::string, std::string> seen;
  for (const auto& u : tiny_llama().units) {
    for (const auto& p : u.params) {
      const std::string hf = to_hf_name(p.name);
      EXPECT_TRUE(seen.emplace(hf, p.name).second) << hf;
      EXPECT_EQ(from_hf_name(hf), p.name);
    }
  }
}

TEST(HfLlama, QkRowOrderIsHfPermute) {
  // One head of head_dim 4: TorchTitan pairs (0,1), (2,3) become HF halves (0,2), (1,3).
  EXPECT_EQ(hf_row_of("layers.0.attention.wq.weight", 1, 4, {1, 1}), 2);
  EXPECT_EQ(hf_row_of("layers.0.attention.wq.weight", 2, 4, {1, 1}), 1);
  EXPECT_EQ(hf_row_of("layers.0.attention.wv.weight", 1, 4, {1, 1}), 1);
  EXPECT_THROW(hf_row_of("layers.0.attention.wk.weight", 1, 6, {4, 4}), CheckpointError);
  // q: 4 heads x head_dim 4 = 16 rows; k: 2 kv heads x 4 = 8 rows; 3 columns of distinct values.
  for (const auto& [name, n, rows] : {std::tuple<std::string, int64_t, int64_t>{"layers.1.attention.wq.weight", 4, 16},
                                      {"layers.1.attention.wk.weight", 2, 8}}) {
    std::vector<float> w(static_cast<size_t>(rows * 3));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
    const auto want = hf_permute(w, n, rows, 3);
    std::vector<float> got(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = hf_row_of(name, r, rows, kHeads);
      std::memcpy(&got[static_cast<size_t>(to * 3)], &w[static_cast<size_t>(r * 3)], 3 * sizeof(float));
    }
    EXPECT_EQ(got, want) << name;
  }
}

// What the permutation is for: HF's attention (rotate_half RoPE, pairs (i, i + hd/2)) on the HF rows
// gives the same q.k scores as TorchTitan's (adjacent pairs (2i, 2i+1)) on TorchTitan's rows.
TEST(HfLlama, RotateHalfRopeOnHfRowsScoresLikeInterleavedRopeOnTorchTitanRows) {
  const int64_t heads = 2, hd = 8, dim = 6, rows = heads * hd;
  std::vector<double> wq(static_cast<size_t>(rows * dim)), wk(wq.size()), x(static_cast<size_t>(dim)),
      y(static_cast<size_t>(dim));
  for (size_t i = 0; i < wq.size(); ++i) {
    wq[i] = std::sin(0.7 * static_cast<double>(i) + 0.1);
    wk[i] = std::cos(1.3 * static_cast<double>(i) + 0.2);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.5 - 0.1 * static_cast<double>(i);
    y[i] = 0.3 * static_cast<double>(i) - 0.4;
  }
  auto hf_rows = [&](const std::vector<double>& w) {  // row hf_row_of(r) <- row r
    std::vector<double> out(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = hf_row_of("layers.0.attention.wq.weight", r, rows, {heads, heads});
      for (int64_t c = 0; c < dim; ++c) out[static_cast<size_t>(to * dim + c)] = w[static_cast<size_t>(r * dim + c)];
    }
    return out;
  };
  // rope(W v) at position p; pair i of a head is (2i, 2i+1) interleaved or (i, i + hd/2) halves.
  auto roped = [&](const std::vector<double>& w, const std::vector<double>& v, int64_t p, bool halves) {
    std::vector<double> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < dim; ++c) out[static_cast<size_t>(r)] += w[static_cast<size_t>(r * dim + c)] * v[static_cast<size_t>(c)];
    }
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        const size_t a = static_cast<size_t>(h * hd + (halves ? i : 2 * i));
        const size_t b = static_cast<size_t>(h * hd + (halves ? i + hd / 2 : 2 * i + 1));
        const double u = out[a], v2 = out[b];
        out[a] = u * std::cos(angle) - v2 * std::sin(angle);
        out[b] = u * std::sin(angle) + v2 * std::cos(angle);
      }
    }
    return out;
  };
  for (int64_t pq : {0, 3, 17}) {
    for (int64_t pk : {0, 5}) {
      const auto q_tt = roped(wq, x, pq, false), k_tt = roped(wk, y, pk, false);
      const auto q_hf = roped(hf_rows(wq), x, pq, true), k_hf = roped(hf_rows(wk), y, pk, true);
      for (int64_t h = 0; h < heads; ++h) {
        double s_tt = 0, s_hf = 0;
        for (int64_t d = 0; d < hd; ++d) {
          s_tt += q_tt[static_cast<size_t>(h * hd + d)] * k_tt[static_cast<size_t>(h * hd + d)];
          s_hf += q_hf[static_cast<size_t>(h * hd + d)] * k_hf[static_cast<size_t>(h * hd + d)];
        }
        EXPECT_NEAR(s_hf, s_tt, 1e-12 * (1 + std::fabs(s_tt))) << "head " << h << " positions " << pq << ", " << pk;
      }
    }
  }
}

// TorchTitan names -> HF file -> TorchTitan names, bitwise; the file holds HF's names and q/k rows.
TEST(SafetensorsFormats, HfRoundTripIsBitwiseAcrossDegrees) {
  ScratchDir dir;
  const std::string file = dir / "hf.safetensors";
  SafetensorsFormat hf;
  hf.hf = kHeads;
  const Params saved = exported_params(2, file, hf);

  const SafetensorsHeader header = read_safetensors_header(file);
  ASSERT_EQ(header.tensors.size(), saved.size());
  EXPECT_EQ(header.tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(header.tensors.back().name, "lm_head.weight");
  // HF's q_proj of layer 1 is HF's permute of TorchTitan's wq, read straight from the file.
  const std::string bytes = read_file(file);
  for (const auto& e : header.tensors) {
    if (e.name != "model.layers.1.self_attn.q_proj.weight" && e.name != "model.layers.1.self_attn.k_proj.weight") continue;
    const bool q = e.name.find("q_proj") != std::string::npos;
    const auto& w = saved.at(q ? "layers.1.attention.wq.weight" : "layers.1.attention.wk.weight");
    std::vector<float> in_file(w.size());
    std::memcpy(in_file.data(), bytes.data() + e.begin, w.size() * 4);
    EXPECT_EQ(in_file, hf_permute(w, q ? 4 : 2, e.shape[0], e.shape[1])) << e.name;
  }

  // Back at other degrees, through the collective import and through the model-less reader.
  for (int m : {1, 3}) {
    const Params back = imported_params(m, file, hf);
    for (const auto& [name, w] : saved) EXPECT_TRUE(bitwise_equal(back.at(name), w)) << name << " at M = " << m;
  }
  for (const auto& t : read_safetensors(file, hf)) EXPECT_TRUE(bitwise_equal(t.data, saved.at(t.name))) << t.name;

  // Model-less TorchTitan -> HF -> TorchTitan.
  std::vector<NamedTensor> tensors;
  for (const auto& t : read_safetensors(file, hf)) tensors.push_back(t);
  write_safetensors(dir / "again.safetensors", tensors, {{"format", "pt"}}, hf);
  EXPECT_TRUE(read_file(dir / "again.safetensors") == bytes) << "the model-less writer writes the same file";
}

// A checkpoint sharded over several files (as Hugging Face ships them) imports as one; a tensor in
// two files is refused naming both.
TEST(SafetensorsFormats, ShardedFilesImportAsOne) {
  ScratchDir dir;
  SafetensorsFormat hf;
  hf.hf = kHeads;
  const Params saved = exported_params(2, dir / "whole.safetensors", hf);
  const auto tensors = read_safetensors(dir / "whole.safetensors", hf);
  std::vector<std::string> shards;
  for (size_t k = 0; k < 3; ++k) {  // tensors k, k + 3, ... into file k
    std::vector<NamedTensor> part;
    for (size_t i = k; i < tensors.size(); i += 3) part.push_back(tensors[i]);
    shards.push_back(dir / ("model-0000" + std::to_string(k + 1) + "-of-00003.safetensors"));
    write_safetensors(shards.back(), part, {{"format", "pt"}}, hf);
  }
  Params back;
  {
    InProcJob job(3);
    job.run([&](Communicator& c) {
      LlamaJob t(c, false);
      EXPECT_EQ(import_safetensors(*t.fsdp, c, shards, hf).at("format"), "pt");
      auto full = t.params();
      if (c.rank() == 0) back = std::move(full);
    });
  }
  for (const auto& [name, w] : saved) EXPECT_TRUE(bitwise_equal(back.at(name), w)) << name;
  for (const auto& t : read_safetensors(shards, hf)) EXPECT_TRUE(bitwise_equal(t.data, saved.at(t.name))) << t.name;

  std::vector<std::string> twice = shards;
  twice.push_back(dir / "whole.safetensors");
  try {
    read_safetensors(twice, hf);
    ADD_FAILURE() << "a tensor in two files was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'model.embed_tokens.weight' is in both " + shards[0] + " and " +
                                         (dir / "whole.safetensors")),
              std::string::npos)
        << e.what();
  }
}

// BF16 export rounds to nearest even (checked value by value against an independent rounding); the
// import of that file gives exactly those bf16 values, in TorchTitan and in HF names.
TEST(SafetensorsFormats, Bf16ExportRoundsToNearestEvenAndImports) {
  ScratchDir dir;
  for (bool use_hf : {false, true}) {
    SCOPED_TRACE(use_hf ? "HF names" : "TorchTitan names");
    const std::string file = dir / (use_hf ? "hf_bf16.safetensors" : "bf16.safetensors");
    SafetensorsFormat format;
    format.dtype = "BF16";
    if (use_hf) format.hf = kHeads;
    const Params saved = exported_params(3, file, format);
    const SafetensorsHeader header = read_safetensors_header(file);
    const std::string bytes = read_file(file);
    int64_t ties = 0;
    for (const auto& e : header.tensors) {
      EXPECT_EQ(e.dtype, "BF16");
      const std::string name = use_hf ? from_hf_name(e.name) : e.name;
      const auto& w = saved.at(name);
      ASSERT_EQ(e.end - e.begin, static_cast<int64_t>(w.size() * 2)) << e.name;
      const int64_t rows = e.shape[0], cols = static_cast<int64_t>(w.size()) / rows;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t fr = use_hf ? hf_row_of(name, r, rows, kHeads) : r;
        for (int64_t c = 0; c < cols; ++c) {
          const float x = w[static_cast<size_t>(r * cols + c)];
          uint16_t got = 0;
          std::memcpy(&got, bytes.data() + e.begin + (fr * cols + c) * 2, 2);
          ASSERT_EQ(got, bf16_reference(x)) << e.name << " [" << r << ", " << c << "] = " << x;
          ties += (std::bit_cast<uint32_t>(x) & 0xffffu) == 0x8000u;
        }
      }
    }
    EXPECT_GT(ties, 100) << "the values must include exact ties";

    const Params back = imported_params(2, file, format);
    for (const auto& [name, w] : saved) {
      std::vector<float> want(w.size());
      for (size_t i = 0; i < w.size(); ++i) want[i] = std::bit_cast<float>(uint32_t{bf16_reference(w[i])} << 16);
      EXPECT_TRUE(bitwise_equal(back.at(name), want)) << name;
    }
  }
}

// F32 TorchTitan names: export at 2 ranks, import at 3, bitwise; F16 reads back as f16 values.
TEST(SafetensorsFormats, F32RoundTripIsBitwise) {
  ScratchDir dir;
  const std::string file = dir / "f32.safetensors";
  const Params saved = exported_params(2, file, {});
  const Params back = imported_params(3, file, {});
  for (const auto& [name, w] : saved) EXPECT_TRUE(bitwise_equal(back.at(name), w)) << name;

  // F16 (TorchTitan's export_dtype float16) reads back as the f16 values.
  SafetensorsFormat f16;
  f16.dtype = "F16";
  exported_params(2, dir / "f16.safetensors", f16);
  const Params halves = imported_params(1, dir / "f16.safetensors", {});
  for (const auto& [name, w] : saved) {
    std::vector<float> want(w.size());
    for (size_t i = 0; i < w.size(); ++i) want[i] = half_to_float(float_to_half(w[i]));
    EXPECT_TRUE(bitwise_equal(halves.at(name), want)) << name;
  }
}

// What fsdp-ckpt export / import do, without a job: a step directory saved at 2 ranks becomes the
// same safetensors bytes the job's collective export writes (F32 TorchTitan names, BF16 HF names),
// and an HF file becomes a weights-only step directory that verifies and loads at 3 ranks bitwise.
TEST(SafetensorsFormats, StepDirectoriesConvertAsTheJobExports) {
  ScratchDir dir;
  SafetensorsFormat hf_bf16;
  hf_bf16.dtype = "BF16";
  hf_bf16.hf = kHeads;
  const std::vector<std::pair<std::string, SafetensorsFormat>> formats = {{"f32", {}}, {"hf_bf16", hf_bf16}};
  Params saved;
  {
    InProcJob job(2);
    job.run([&](Communicator& c) {
      LlamaJob t(c, true);
      const auto ckpt = t.checkpointer(c, dir / "ckpt");
      ckpt->save(7, "tiny");
      for (const auto& [name, format] : formats) {
        export_safetensors(*t.fsdp, ckpt->comm(), dir / ("job_" + name + ".safetensors"), {{"format", "pt"}, {"step", "7"}},
                           format);
      }
      auto full = t.params();
      if (c.rank() == 0) saved = std::move(full);
    });
  }
  const auto tensors = read_step_dir_parameters(dir / "ckpt/step-7");
  ASSERT_EQ(tensors.size(), saved.size());
  for (const auto& t : tensors) EXPECT_TRUE(bitwise_equal(t.data, saved.at(t.name))) << t.name;
  const HfLlamaHeads heads = hf_heads_from_shapes(tensors, 4);
  EXPECT_EQ(heads.n_heads, 4);
  EXPECT_EQ(heads.n_kv_heads, 2);
  EXPECT_THROW(hf_heads_from_shapes(tensors, 3), CheckpointError);
  for (const auto& [name, format] : formats) {
    write_safetensors(dir / ("tool_" + name + ".safetensors"), tensors, {{"format", "pt"}, {"step", "7"}}, format);
    EXPECT_TRUE(read_file(dir / ("tool_" + name + ".safetensors")) == read_file(dir / ("job_" + name + ".safetensors")))
        << name;
  }

  SafetensorsFormat hf;
  hf.hf = kHeads;
  write_safetensors(dir / "hf.safetensors", tensors, {}, hf);
  write_weights_step_dir(dir / "imported", read_safetensors(dir / "hf.safetensors", hf));
  EXPECT_THROW(write_weights_step_dir(dir / "imported", tensors), CheckpointError);  // never overwritten
  const VerifyReport report = verify_checkpoint(dir / "imported");
  EXPECT_TRUE(report.ok()) << (report.errors.empty() ? "" : report.errors.front());
  InProcJob job(3);
  job.run([&](Communicator& c) {
    LlamaJob t(c, false);
    const LoadResult r = t.checkpointer(c, dir / "unused")->load_model(dir / "imported");
    EXPECT_EQ(r.step, 0);
    const Params got = t.params();
    if (c.rank() == 0) {
      for (const auto& [name, w] : saved) EXPECT_TRUE(bitwise_equal(got.at(name), w)) << name;
    }
  });
}

// A file with a tensor missing, one too many, or one of another shape is refused naming the tensor.
TEST(SafetensorsFormats, MismatchedFilesAreRefusedNamingTheTensor) {
  ScratchDir dir;
  SafetensorsFormat hf;
  hf.hf = kHeads;
  exported_params(1, dir / "good.safetensors", hf);
  const auto good = read_safetensors(dir / "good.safetensors", hf);

  struct Case {
    const char* what;
    std::function<void(std::vector<NamedTensor>&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"missing", [](auto& t) { t.erase(t.begin() + 3); }, "tensor 'model.layers.0.self_attn.v_proj.weight' is missing"},
      {"extra", [](auto& t) { t.push_back(NamedTensor{"layers.2.ffn_norm.weight", {16}, std::vector<float>(16)}); },
       "tensor 'model.layers.2.post_attention_layernorm.weight' is not in the model"},
      {"misshapen",
       [](auto& t) {
         for (auto& x : t) {
           if (x.name == "norm.weight") x = NamedTensor{x.name, {15}, std::vector<float>(15)};
         }
       },
       "tensor 'model.norm.weight' has shape [15], the model's is [16]"},
  };
  for (const auto& c : cases) {
    auto tensors = good;
    c.edit(tensors);
    const std::string file = dir / (std::string(c.what) + ".safetensors");
    write_safetensors(file, tensors, {}, hf);
    InProcJob job(2);
    job.run([&](Communicator& comm) {
      LlamaJob t(comm, false);
      try {
        import_safetensors(*t.fsdp, comm, file, hf);
        ADD_FAILURE() << c.what << " was accepted";
      } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << c.what << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      }
    });
  }
  // A tensor of a dtype other than F32, BF16 and F16 is named too.
  std::string bytes = read_file(dir / "good.safetensors");
  const size_t at = bytes.find("\"BF16\"") == std::string::npos ? bytes.find("\"F32\"") : std::string::npos;
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"I32\"");
  const std::string ints = dir / "ints.safetensors";
  {
    File f = File::create_new(ints);
    f.pwrite_all(bytes.data(), bytes.size(), 0);
  }
  EXPECT_THROW(
      {
        try {
          read_safetensors(ints, hf);
        } catch (const CheckpointError& e) {
          EXPECT_NE(std::string(e.what()).find("is I32; F32, BF16 and F16 are read"), std::string::npos) << e.what();
          throw;
        }
      },
      CheckpointError);
}

}  // namespace
}  // namespace fsdp::runtime::checkpoint
