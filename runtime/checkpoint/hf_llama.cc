#include "runtime/checkpoint/hf_llama.h"

#include <array>
#include <string_view>
#include <utility>

#include "runtime/checkpoint/errors.h"

namespace fsdp::runtime::checkpoint {

namespace {

using Pair = std::pair<std::string_view, std::string_view>;  // TorchTitan, HF

constexpr std::array<Pair, 3> kTopLevel = {{
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
}};

// Within layers.N. (TorchTitan) and model.layers.N. (HF).
constexpr std::array<Pair, 9> kPerLayer = {{
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
}};

// "<prefix><digits>.<rest>" -> (digits, rest); false when it does not have that form.
bool split_layer(std::string_view name, std::string_view prefix, std::string_view& index, std::string_view& rest) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  for (size_t i = 0; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  index = name.substr(0, dot);
  rest = name.substr(dot + 1);
  return true;
}

// from_first: map first -> second of each pair, else second -> first.
std::string map_name(const std::string& name, bool from_first, std::string_view from_layer, std::string_view to_layer,
                     const char* direction) {
  for (const auto& p : kTopLevel) {
    if (name == (from_first ? p.first : p.second)) return std::string(from_first ? p.second : p.first);
  }
  std::string_view index, rest;
  if (split_layer(name, from_layer, index, rest)) {
    for (const auto& p : kPerLayer) {
      if (rest == (from_first ? p.first : p.second)) {
        return std::string(to_layer) + std::string(index) + "." + std::string(from_first ? p.second : p.first);
      }
    }
  }
  throw CheckpointError("tensor '" + name + "' has no " + direction +
                        " name: only the Llama parameters of runtime/checkpoint/hf_llama.h map");
}

}  // namespace

std::string to_hf_name(const std::string& torchtitan_name) {
  return map_name(torchtitan_name, true, "layers.", "model.layers.", "Hugging Face");
}

std::string from_hf_name(const std::string& hf_name) {
  return map_name(hf_name, false, "model.layers.", "layers.", "TorchTitan");
}

int64_t hf_row_of(const std::string& torchtitan_name, int64_t row, int64_t rows, const HfLlamaHeads& heads) {
  std::string_view index, rest;
  if (!split_layer(torchtitan_name, "layers.", index, rest)) return row;
  int64_t n = 0;
  if (rest == "attention.wq.weight") {
    n = heads.n_heads;
  } else if (rest == "attention.wk.weight") {
    n = heads.n_kv_heads > 0 ? heads.n_kv_heads : heads.n_heads;
  } else {
    return row;
  }
  if (n <= 0 || rows % n != 0 || (rows / n) % 2 != 0) {
    throw CheckpointError("tensor '" + torchtitan_name + "': " + std::to_string(rows) + " rows do not split into " +
                          std::to_string(n) + " heads of an even head_dim (the q/k permutation needs n_heads)");
  }
  const int64_t hd = rows / n, half = hd / 2;
  const int64_t h = row / hd, within = row % hd;  // within = 2i + j
  return h * hd + (within % 2) * half + within / 2;
}

}  // namespace fsdp::runtime::checkpoint
