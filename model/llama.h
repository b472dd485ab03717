// The reference Llama 3 decoder (TorchTitan's architecture) in fp32 over OpenBLAS, one module per FSDP
// unit: Embedding ("tok_embeddings"), TransformerBlock ("layers.i"), OutputHead ("output").
// The runtime all-gathers a unit and passes views of its parameters in spec::make_llama order;
// the model never sees shards. Chaining for one micro-batch of B sequences of T tokens:
//
//   embedding.forward(w_emb, tokens, B*T, x);             // x: (B*T, dim)
//   for each block: block[i].forward(w_i, x, x);          // in place
//   float loss = head.forward(w_out, x, targets);
//   head.backward(w_out, g_out, 1.f, dx);                 // dx: (B*T, dim)
//   for each block, last first: block[i].backward(w_i, g_i, dx, dx);
//   embedding.backward(g_emb, tokens, B*T, dx);
//
// Shapes, saved tensors and tests: docs/model.md.
#pragma once

#include "model/attention.h"
#include "model/dims.h"
#include "model/embedding.h"
#include "model/init.h"
#include "model/output_head.h"
#include "model/transformer_block.h"
