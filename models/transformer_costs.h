// Per-architecture cost formulas for decoder-only transformers: FLOPs, memory-bound HBM
// traffic and the activations kept for backward, as polynomials in micro-batch b and
// sequence length s (see docs/model-schema.md for the derivations and the sources).
//
// Conventions (the same for every family):
// - FLOPs count matrix multiplications only (2 per multiply-add), as MFU does; elementwise
//   work is priced by the bytes it moves instead.
// - Attention FLOPs: 4*b*s^2*(heads*head_dim) for QK^T and AV, no causal discount
//   (PaLM, Chowdhery et al. 2022, appendix B).
// - Activations are 16-bit (2 bytes per element); dropout masks 1 byte per element;
//   token ids int64.
// - Saved activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation
//   in Large Transformer Models", section 4.1, eq. 1: s*b*h*(34 + 5*a*s/h) bytes per GPT
//   layer; the formulas below list every saved tensor, so SwiGLU, GQA, parallel residuals
//   and flash attention change the terms they touch and nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace fsdpsim::models {

// What the cost formulas need to know about one decoder block.
struct DecoderBlockShape {
  std::int64_t hidden_size = 0;      // h
  std::int64_t num_heads = 0;        // a (query heads)
  std::int64_t num_kv_heads = 0;     // key/value heads (GQA when < num_heads)
  std::int64_t head_dim = 0;         // d
  std::int64_t ffn_hidden_size = 0;  // f
  bool gated_mlp = false;            // SwiGLU: gate, up, down projections; else fc1-GELU-fc2
  bool parallel_residual = false;    // GPT-NeoX: attention and MLP both read the block input
  bool rotary = false;               // rotary embedding applied to q and k
  bool alibi = false;                // ALiBi bias added to the attention scores
  bool attention_dropout = false;    // dropout on the attention probabilities (p > 0)
  bool residual_dropout = false;     // dropout on the attention and MLP outputs (p > 0)

  std::int64_t q_dim() const { return num_heads * head_dim; }
  std::int64_t kv_dim() const { return num_kv_heads * head_dim; }
  // Weight elements of the block's matrix multiplications (biases and norms excluded).
  std::int64_t matmul_weights() const;
};

// One line of a cost ledger: bytes per token (the b*s term) and bytes per token per
// position (the b*s^2 term, attention score matrices).
struct CostItem {
  std::string what;
  double bytes_per_token = 0;
  double bytes_per_token_per_position = 0;
};

// The tensors one block keeps for backward, each with its size; the sum is the block's
// saved_activation_bytes. With flash attention the score matrices are never stored.
std::vector<CostItem> saved_tensors(const DecoderBlockShape& block, bool flash_attention);
// The block's memory-bound kernels (norms, residual adds, rotary, activation function,
// dropout, and the softmax when attention is not fused), each with the bytes it reads and
// writes once; the sum is the block's forward_hbm_bytes.
std::vector<CostItem> memory_bound_kernels(const DecoderBlockShape& block, bool flash_attention);

ModuleCosts decoder_block_costs(const DecoderBlockShape& block, bool flash_attention);
// The token embedding: a gather, plus (GPT-2) the position-embedding gather and add and the
// embedding dropout when those are computed alongside it.
ModuleCosts token_embedding_costs(std::int64_t hidden_size, bool adds_position_embedding,
                                  bool embedding_dropout);
ModuleCosts final_norm_costs(std::int64_t hidden_size);
// The output projection and the cross-entropy loss on its fp32 logits.
ModuleCosts lm_head_costs(std::int64_t hidden_size, std::int64_t vocab_size);

// A polynomial as the model JSON writes it: {"b*s": 123, "b*s^2": 4}; integral
// coefficients are written as integers. Zero terms are left out.
nlohmann::json polynomial_to_json(const Polynomial& polynomial);
// A "costs" object for the model JSON; empty polynomials are left out.
nlohmann::json costs_to_json(const ModuleCosts& costs, const std::string& source);

}  // namespace fsdpsim::models
