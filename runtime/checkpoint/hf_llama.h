// Hugging Face Llama names for TorchTitan's Llama parameters, and the row order HF uses for q and k.
//
//   tok_embeddings.weight                    <-> model.embed_tokens.weight
//   layers.N.attention.{wq,wk,wv,wo}.weight  <-> model.layers.N.self_attn.{q,k,v,o}_proj.weight
//   layers.N.feed_forward.{w1,w2,w3}.weight  <-> model.layers.N.mlp.{gate,down,up}_proj.weight
//   layers.N.attention_norm.weight           <-> model.layers.N.input_layernorm.weight
//   layers.N.ffn_norm.weight                 <-> model.layers.N.post_attention_layernorm.weight
//   norm.weight                              <-> model.norm.weight
//   output.weight                            <-> lm_head.weight
//
// RoPE: TorchTitan rotates adjacent pairs (2i, 2i+1) of each head, HF's LlamaAttention rotates halves
// (i, i + head_dim/2). HF's convert_llama_weights_to_hf therefore permutes the rows of wq and wk
// within each head: HF row h*hd + j*hd/2 + i holds TorchTitan row h*hd + 2i + j (i < hd/2, j in {0,1}).
// Every other tensor keeps its rows. A pure renaming and row permutation: round trips are bitwise.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp::runtime::checkpoint {

// Heads of the model, needed for the q/k row permutation (head_dim = rows of wq / n_heads).
struct HfLlamaHeads {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // 0: same as n_heads
};

// Throws CheckpointError naming the tensor when it is not a Llama parameter of the table above.
std::string to_hf_name(const std::string& torchtitan_name);
std::string from_hf_name(const std::string& hf_name);

// The row of the HF tensor that holds row `row` of TorchTitan's tensor `torchtitan_name` (rows = its
// shape[0]); the identity except for wq and wk. Throws when rows does not split into the heads' pairs.
int64_t hf_row_of(const std::string& torchtitan_name, int64_t row, int64_t rows, const HfLlamaHeads& heads);

}  // namespace fsdp::runtime::checkpoint
