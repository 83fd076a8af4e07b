#include "models/transformer_costs.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace fsdpsim::models {

namespace {

// 16-bit activations; dropout masks are bytes; token ids are int64.
constexpr double kActivationBytes = 2;
constexpr double kMaskBytes = 1;
constexpr double kFp32Bytes = 4;
constexpr double kTokenIdBytes = 8;
// The loss upcasts the logits to fp32 (Hugging Face's causal-LM loss does `logits.float()`).
constexpr double kLogitBytes = 4;

Polynomial monomial(double coeff, int b_pow, int s_pow) {
  Polynomial p;
  if (coeff != 0) p.terms.push_back({coeff, b_pow, s_pow});
  return p;
}

// b*s*(per token) + b*s^2*(per token per position), the shape of every ledger.
Polynomial ledger_polynomial(const std::vector<CostItem>& items) {
  Polynomial p;
  for (const CostItem& item : items) {
    p += monomial(item.bytes_per_token, 1, 1);
    p += monomial(item.bytes_per_token_per_position, 1, 2);
    p += monomial(item.bytes_per_position, 0, 1);
    p += monomial(item.bytes_fixed, 0, 0);
  }
  return p;
}

double as_double(std::int64_t n) { return static_cast<double>(n); }

}  // namespace

std::int64_t DecoderBlockShape::matmul_weights() const {
  const std::int64_t h = hidden_size, f = ffn_hidden_size;
  std::int64_t attention = h * q_dim() + 2 * h * kv_dim() + q_dim() * h;  // q, k, v, out
  if (is_mla()) {
    const std::int64_t q_path = mla.q_lora_rank > 0 ? h * mla.q_lora_rank + mla.q_lora_rank * q_dim() : h * q_dim();
    const std::int64_t kv_b_out = num_heads * (head_dim - mla.rope_head_dim + mla.v_head_dim);
    attention = q_path + h * (mla.kv_lora_rank + mla.rope_head_dim) + mla.kv_lora_rank * kv_b_out +
                attention_output_dim() * h;
  }
  const std::int64_t mlp = (gated_mlp ? 3 : 2) * h * f;                           // (gate,) up, down
  if (!is_moe()) return attention + mlp;
  // Router, the shared expert's gate, and top_k routed gated MLPs per token.
  const std::int64_t routed = std::int64_t{moe.top_k} * 3 * h * moe.expert_ffn_size;
  return attention + mlp + h * moe.experts + (moe.shared_expert_gate ? h : 0) + routed;
}

namespace {

using NormPlacement = DecoderBlockShape::NormPlacement;
using QkNorm = DecoderBlockShape::QkNorm;

bool sequential_norm_before_attention(const DecoderBlockShape& b) {
  return b.norm_placement != NormPlacement::post;
}
bool norms_the_branch_outputs(const DecoderBlockShape& b) {
  return b.norm_placement != NormPlacement::pre;
}
// The gated MLP's product, as the ledgers name it: "SiLU(gate)*up", "GELU(gate)*up".
std::string gated_product(const DecoderBlockShape& b) { return b.gate_activation + "(gate)*up"; }

// MLA's per-token widths (DecoderBlockShape::Mla): a heads, ql q_lora_rank, c kv_lora_rank,
// r rope_head_dim, n nope per head, dqk = n + r (head_dim), v v_head_dim.
struct MlaWidths {
  double a, ql, c, r, n, dqk, v;
};
MlaWidths mla_widths(const DecoderBlockShape& b) {
  const double r = static_cast<double>(b.mla.rope_head_dim), dqk = static_cast<double>(b.head_dim);
  return {static_cast<double>(b.num_heads), static_cast<double>(b.mla.q_lora_rank),
          static_cast<double>(b.mla.kv_lora_rank), r, dqk - r, dqk, static_cast<double>(b.mla.v_head_dim)};
}

// What MLA keeps for backward between the attention norm's output and the attention output
// (transformers' DeepseekV3Attention.forward): the low-rank path's norm inputs and outputs, the
// kv_b_proj output whose v half is attention's v (split gives views, which keep it whole), and
// the concatenated q and k attention reads. Rotary's backward needs only cos and sin; cat's and
// split's none.
std::vector<CostItem> mla_saved_tensors(const DecoderBlockShape& block) {
  const double E = kActivationBytes;
  const MlaWidths w = mla_widths(block);
  std::vector<CostItem> items;
  if (w.ql > 0) {
    items.push_back({"q_a_proj output: q_a_layernorm's input", E * w.ql, 0});
    items.push_back({"q_a_layernorm output: q_b_proj's input", E * w.ql, 0});
  }
  items.push_back({"kv_a_proj_with_mqa output (kv_lora_rank + rope): kv_a_layernorm's input is a view of it",
                   E * (w.c + w.r), 0});
  items.push_back({"kv_a_layernorm output: kv_b_proj's input", E * w.c, 0});
  items.push_back({"kv_b_proj output (heads x (nope + v)): v, an operand of AV, is a view of it", E * w.a * (w.n + w.v), 0});
  items.push_back({"q = cat(q_nope, rotated q_rope): an operand of QK^T", E * w.a * w.dqk, 0});
  items.push_back({"k = cat(k_nope, rotated k_rope expanded to every head): an operand of QK^T", E * w.a * w.dqk, 0});
  return items;
}

// MLA's memory-bound kernels in place of rotary on q and k: the two low-rank norms, rotary on
// the rope parts (q's per head, k's one shared head), and the two concatenations.
std::vector<CostItem> mla_memory_bound_kernels(const DecoderBlockShape& block) {
  const double E = kActivationBytes;
  const MlaWidths w = mla_widths(block);
  std::vector<CostItem> items;
  if (w.ql > 0) items.push_back({"q_a_layernorm: read, write", 2 * E * w.ql, 0});
  items.push_back({"kv_a_layernorm: read, write", 2 * E * w.c, 0});
  items.push_back({"rotary embedding on q's rope part (heads x rope) and k's (rope): read, write", 2 * E * (w.a * w.r + w.r), 0});
  items.push_back({"cat(q_nope, q_rope) into q: read, write", 2 * E * w.a * w.dqk, 0});
  items.push_back({"cat(k_nope, k_rope expanded) into k: read, write", 2 * E * w.a * w.dqk, 0});
  return items;
}

void add_norm_saved_tensors(std::vector<CostItem>& items, const std::string& norm, const std::string& input,
                            double width, double rows_per_token, bool python_rms_norm) {
  if (!python_rms_norm) {
    items.push_back({input, kActivationBytes * width, 0});
    return;
  }
  items.push_back({norm + ": fp32 copy of its input (x.float(), saved by pow and by the rsqrt product)",
                   kFp32Bytes * width, 0});
  items.push_back({norm + ": rsqrt(variance + eps), fp32, one per row", kFp32Bytes * rows_per_token, 0});
  items.push_back({norm + ": the normalised input cast to 16 bits (* weight's saved operand)", kActivationBytes * width, 0});
}

// [Python RMSNorm] Hugging Face's LlamaRMSNorm (and its copies in Mistral, Qwen2/3, Phi-3, ...):
//   x32 = x.to(float32); var = x32.pow(2).mean(-1, keepdim=True); x32 = x32 * rsqrt(var + eps)
//   return weight * x32.to(input_dtype)
// saves x32 (pow's and the product's input: 4 bytes per element), the rsqrt (4 bytes per row)
// and the 16-bit cast (the weight product's operand), and not its 16-bit input: ToCopyBackward
// keeps nothing. Measured on an H100 (tests/data/hardware/memory-h100-2026-11-27.csv): 33 fp32
// copies of 32 MiB alive at Llama-3.2-1B's forward peak, what the ledger counted as 16-bit inputs
// then missed (1,067 MiB low). Gemma's and OLMo-2's norms multiply by the weight in fp32 and save
// the fp32 product instead of its 16-bit cast (2 bytes per element more): not modelled.
void add_norm(std::vector<CostItem>& items, const DecoderBlockShape& block, const std::string& norm,
              const std::string& input, double width, double rows_per_token = 1) {
  add_norm_saved_tensors(items, norm, input, width, rows_per_token, block.eager_elementwise.python_rms_norm);
  // [Liger block kernels] LigerRMSNormFunction saves (X, RSTD): an fp32 rstd per row beside X.
  if (block.liger) items.push_back({norm + ": fp32 rstd, one per row (LigerRMSNorm)", kFp32Bytes * rows_per_token, 0});
}

}  // namespace

std::vector<CostItem> saved_tensors(const DecoderBlockShape& block, bool flash_attention) {
  const double E = kActivationBytes;
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), a = as_double(block.num_heads);
  // Flash attention handles GQA natively and saves k and v at their own size; the eager
  // path (Hugging Face's repeat_kv) materializes them per query head before the matmuls.
  const double kv = flash_attention ? as_double(block.kv_dim()) : q;
  const bool post_norms = norms_the_branch_outputs(block);
  std::vector<CostItem> items;
  if (block.parallel_residual) {
    items.push_back({block.one_parallel_norm ? "block input x: the norm's input"
                                             : "block input x: the input of both norms (one tensor)",
                     E * h, 0});
    items.push_back({block.one_parallel_norm ? "norm output: the input of the q/k/v projection and of the MLP"
                                             : "attention norm output: the q/k/v projections' input",
                     E * h, 0});
  } else if (sequential_norm_before_attention(block)) {
    add_norm(items, block, "attention norm", "block input x: the attention norm's input", h);
    items.push_back({"attention norm output: the q/k/v projections' input", E * h, 0});
  } else {
    items.push_back({"block input x: the q/k/v projections' input (no norm before attention)", E * h, 0});
  }
  if (block.qk_norm != QkNorm::none) {
    // A fused RMSNorm saves its input; rotary's backward needs only cos and sin.
    // One rsqrt per head and token (Qwen3, Gemma-3); OLMo-2 normalises over all heads (one per
    // token): 4 (heads - 1) bytes per token too many there, against kilobytes per token.
    add_norm(items, block, "q norm", "q projection output: the q norm's input", as_double(block.q_dim()),
             as_double(block.num_heads));
    add_norm(items, block, "k norm", "k projection output: the k norm's input", as_double(block.kv_dim()),
             as_double(block.num_kv_heads));
  }
  if (block.is_mla()) {
    for (const CostItem& item : mla_saved_tensors(block)) items.push_back(item);
  } else {
    items.push_back({"q (after rotary): an operand of QK^T", E * q, 0});
    items.push_back({"k (after rotary): an operand of QK^T", E * kv, 0});
    items.push_back({"v: an operand of AV", E * kv, 0});
  }
  if (!flash_attention) {
    for (const DecoderBlockShape::EagerScoreOp& op : block.eager.before_softmax)
      if (op.saves_output) items.push_back({op.what + ": its output, its backward's input", 0, E * a});
    // Korthikanti's 5as/h (softmax output 2, dropout mask 1, dropout output 2, x a*s^2*b) where
    // the softmax runs in 16 bits; where the family upcasts it (DecoderBlockShape::EagerSoftmax),
    // softmax saves its fp32 output and AV its 16-bit copy (or dropout's output).
    using EagerSoftmax = DecoderBlockShape::EagerSoftmax;
    if (block.eager.softmax == EagerSoftmax::activation_dtype) {
      items.push_back({"softmax output: softmax's backward input and the AV operand", 0, E * a});
    } else {
      items.push_back({"fp32 softmax output: softmax's backward input", 0, kFp32Bytes * a});
      if (!block.attention_dropout)
        items.push_back({"16-bit copy of the probabilities (.to(dtype)): the AV operand", 0, E * a});
    }
    if (block.attention_dropout) {
      items.push_back({"attention dropout mask", 0, kMaskBytes * a});
      items.push_back({"attention dropout output: the AV operand", 0, E * a});
    }
  }
  items.push_back({"attention output: the output projection's input", E * as_double(block.attention_output_dim()), 0});
  if (post_norms)
    add_norm(items, block, "post-attention norm", "attention output projection's output: the post-attention norm's input", h);
  if (block.residual_dropout) items.push_back({"attention output dropout mask", kMaskBytes * h, 0});
  if (!block.parallel_residual) {
    switch (block.norm_placement) {
      case NormPlacement::pre: add_norm(items, block, "MLP norm", "x + attention: the MLP norm's input", h); break;
      case NormPlacement::sandwich:
        add_norm(items, block, "pre-feedforward norm", "x + normed attention: the pre-feedforward norm's input", h);
        break;
      case NormPlacement::post: items.push_back({"x + normed attention: the MLP's input", E * h, 0}); break;
    }
  }
  if (block.parallel_residual) {
    if (!block.one_parallel_norm) items.push_back({"MLP norm output: the MLP's input", E * h, 0});
  } else if (sequential_norm_before_attention(block)) {
    items.push_back({"MLP norm output: the MLP's input", E * h, 0});
  }
  if (block.ffn_hidden_size == 0) {
    // A MoE block without shared experts: the routed part is moe_routed_saved_tensors().
  } else if (block.gated_mlp && block.liger) {
    // [Liger block kernels] LigerSiLUMulFunction (GELUMul for GeGLU) saves its two inputs and
    // recomputes the activation in backward; ensure_contiguous (ops/utils.py) copies Phi-3's
    // chunk views first, so the saved gate and up are those copies, not the gate_up output.
    const std::string copy = block.fused_gate_up ? " (contiguous copy of the gate_up output's half)" : "";
    items.push_back({"gate projection output" + copy + ": saved by Liger's " + block.gate_activation + "-and-multiply",
                     E * f, 0});
    items.push_back({"up projection output" + copy + ": saved by Liger's " + block.gate_activation + "-and-multiply",
                     E * f, 0});
    items.push_back({gated_product(block) + ": the down projection's input", E * f, 0});
  } else if (block.gated_mlp) {
    const std::string act = block.gate_activation;
    if (block.fused_gate_up) {
      // chunk(2) gives views: the activation's saved input (gate) and the product's saved
      // factor (up) keep the whole fused output alive.
      items.push_back({"gate_up projection output (2f): its gate half is " + act + "'s input, its up half a factor",
                       E * 2 * f, 0});
    } else {
      items.push_back({"gate projection output: " + act + "'s input", E * f, 0});
    }
    items.push_back({act + " output: a factor of the product", E * f, 0});
    if (!block.fused_gate_up) items.push_back({"up projection output: a factor of the product", E * f, 0});
    items.push_back({gated_product(block) + ": the down projection's input", E * f, 0});
  } else {
    items.push_back({"fc1 output: GELU's input", E * f, 0});
    items.push_back({"GELU output: fc2's input", E * f, 0});
  }
  if (post_norms)
    add_norm(items, block, "post-feedforward norm", "down projection output: the post-feedforward norm's input", h);
  if (block.residual_dropout) items.push_back({"MLP output dropout mask", kMaskBytes * h, 0});
  return items;
}

namespace {

// How many of block_matmuls() run before attention: q, k, v, or their fused or low-rank forms.
int attention_input_matmuls(const std::vector<BlockMatmul>& matmuls) {
  int n = 0;
  while (n < static_cast<int>(matmuls.size()) && matmuls[n].name != "attention output projection") ++n;
  return n;
}

}  // namespace

std::vector<CostItem> memory_bound_kernels(const DecoderBlockShape& block, bool flash_attention) {
  const double E = kActivationBytes;
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), kv = as_double(block.kv_dim());
  const double a = as_double(block.num_heads);
  // A dropout reads and writes the tensor and writes its mask.
  const double dropout_per_element = 2 * E + kMaskBytes;
  const bool post_norms = norms_the_branch_outputs(block);
  std::vector<CostItem> items;
  // Where each kernel launches among block_matmuls(): the attention inputs (q, k, v or their
  // fused or low-rank forms), then the output projection, the MLP's input projection(s) and
  // its output projection. launched_after(n) places the kernels pushed since the last call.
  const std::vector<BlockMatmul> matmuls = block_matmuls(block);
  const int attention_inputs = attention_input_matmuls(matmuls);
  const int all_matmuls = static_cast<int>(matmuls.size());
  const int mlp_inputs = block.ffn_hidden_size == 0 ? 0 : all_matmuls - attention_inputs - 2;
  std::size_t placed = 0;
  auto launched_after = [&](int n) {
    for (; placed < items.size(); ++placed) items[placed].after_matmuls = n;
  };
  if (block.parallel_residual || sequential_norm_before_attention(block))
    items.push_back({block.one_parallel_norm ? "the block's norm: read x, write the normalized x"
                                             : "attention norm: read x, write the normalized x",
                     2 * E * h, 0});
  // A parallel block's MLP norm is placed with the attention norm (Falcon computes both first;
  // GPT-NeoX's runs after the attention branch: the difference is one kernel's place).
  if (block.parallel_residual && !block.one_parallel_norm) items.push_back({"MLP norm: read, write", 2 * E * h, 0});
  launched_after(0);
  // MLA's two low-rank norms run between its projections; placed with its rotary, after them all.
  if (block.qk_norm != QkNorm::none) items.push_back({"q and k norms: read and write q and k", 2 * E * (q + kv), 0});
  if (block.is_mla()) {
    for (const CostItem& item : mla_memory_bound_kernels(block)) items.push_back(item);
  } else if (block.rotary) {
    items.push_back({"rotary embedding: read and write q and k", 2 * E * (q + kv), 0});
  }
  if (!flash_attention) {
    // Flash attention keeps the scores on chip and is priced by its FLOPs; eager attention runs
    // the family's score chain kernel by kernel through HBM (DecoderBlockShape::EagerScoreChain).
    using EagerSoftmax = DecoderBlockShape::EagerSoftmax;
    const double F = kFp32Bytes;
    // Hugging Face's repeat_kv (expand, then reshape) copies k and v to every query head.
    if (kv != q) items.push_back({"repeat_kv: k and v copied to every query head (read kv, write q, each)", 2 * E * (kv + q), 0});
    for (const DecoderBlockShape::EagerScoreOp& op : block.eager.before_softmax)
      items.push_back({op.what + " on the scores: read, write", 0, (op.read_bytes + op.write_bytes) * a});
    switch (block.eager.softmax) {
      case EagerSoftmax::activation_dtype:
        items.push_back({"softmax: read, write the 16-bit probabilities", 0, 2 * E * a});
        break;
      case EagerSoftmax::fp32_output:
        items.push_back({"softmax(dtype=float32): read 16-bit scores, write fp32 probabilities", 0, (E + F) * a});
        items.push_back({"cast of the probabilities to 16 bits: read fp32, write", 0, (F + E) * a});
        break;
      case EagerSoftmax::fp32_input:
        items.push_back({"fp32 copy of the scores (.float()): read, write", 0, (E + F) * a});
        items.push_back({"softmax in fp32: read, write", 0, 2 * F * a});
        items.push_back({"cast of the probabilities to 16 bits: read fp32, write", 0, (F + E) * a});
        break;
    }
    if (block.attention_dropout)
      items.push_back({"attention dropout on the probabilities", 0, dropout_per_element * a});
  }
  launched_after(attention_inputs);
  if (post_norms) items.push_back({"post-attention norm: read, write", 2 * E * h, 0});
  if (block.residual_dropout)
    items.push_back({"attention output dropout", dropout_per_element * h, 0});
  if (!block.parallel_residual) {
    items.push_back({"residual add x + attention: read 2, write 1", 3 * E * h, 0});
    if (sequential_norm_before_attention(block))
      items.push_back({block.norm_placement == NormPlacement::sandwich ? "pre-feedforward norm: read, write"
                                                                       : "MLP norm: read, write",
                       2 * E * h, 0});
  }
  launched_after(attention_inputs + 1);
  if (block.ffn_hidden_size == 0) {
    // A MoE block without shared experts: moe_routed_memory_bound_kernels().
  } else if (block.gated_mlp) {
    items.push_back({gated_product(block) + ": read 2f, write f", 3 * E * f, 0});
  } else {
    items.push_back({"GELU: read f, write f", 2 * E * f, 0});
  }
  launched_after(attention_inputs + 1 + mlp_inputs);
  if (post_norms) items.push_back({"post-feedforward norm: read, write", 2 * E * h, 0});
  if (block.residual_dropout) items.push_back({"MLP output dropout", dropout_per_element * h, 0});
  if (block.parallel_residual) {
    items.push_back({block.falcon_parallel ? "mlp += attention, then + x: two adds, read 2, write 1 each"
                                           : "x + attention + MLP: two adds, read 2, write 1 each",
                     6 * E * h, 0});
  } else {
    items.push_back({"residual add + MLP: read 2, write 1", 3 * E * h, 0});
  }
  launched_after(all_matmuls);
  return items;
}

namespace {

// The order of a dense block's kernels from its memory_bound_kernels() (placed among the
// matmuls) and block_matmuls(), as block_launch_order gives it.
std::string launch_order_of(const std::vector<CostItem>& kernels, const std::vector<BlockMatmul>& matmuls) {
  const int attention_inputs = attention_input_matmuls(matmuls);
  std::string order;
  std::size_t next = 0;
  for (int launched = 0; launched <= static_cast<int>(matmuls.size()); ++launched) {
    for (; next < kernels.size() && kernels[next].after_matmuls == launched; ++next) order += 'm';
    if (launched == attention_inputs) order += 'a';  // after rotary (and eager's score chain)
    if (launched < static_cast<int>(matmuls.size())) order += 'g';
  }
  return order;
}

}  // namespace

std::string block_launch_order(const DecoderBlockShape& block, bool flash_attention) {
  if (block.is_moe()) return "";
  return launch_order_of(memory_bound_kernels(block, flash_attention), block_matmuls(block));
}

std::vector<BlockMatmul> block_matmuls(const DecoderBlockShape& block) {
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), kv = as_double(block.kv_dim());
  std::vector<BlockMatmul> out;
  auto add = [&](const char* name, double in, double features, bool bias) {
    out.push_back({name, in * features, features, !bias});
  };
  if (block.is_mla()) {
    // DeepseekV3Attention.forward's order; attention_bias gives q_a_proj, kv_a_proj_with_mqa and
    // o_proj biases (q_b_proj and kv_b_proj have none).
    const MlaWidths w = mla_widths(block);
    if (w.ql > 0) {
      add("q_a_proj", h, w.ql, block.qkv_bias);
      add("q_b_proj", w.ql, q, false);
    } else {
      add("q projection", h, q, false);
    }
    add("kv_a_proj_with_mqa", h, w.c + w.r, block.qkv_bias);
    add("kv_b_proj", w.c, w.a * (w.n + w.v), false);
  } else if (block.fused_qkv) {
    add("qkv projection", h, q + 2 * kv, block.qkv_bias);
  } else {
    add("q projection", h, q, block.qkv_bias);
    add("k projection", h, kv, block.qkv_bias);
    add("v projection", h, kv, block.qkv_bias);
  }
  add("attention output projection", as_double(block.attention_output_dim()), h, block.out_bias);
  if (block.ffn_hidden_size == 0) return out;  // a MoE block without shared experts
  if (block.gated_mlp && block.fused_gate_up) {
    add("gate_up projection", h, 2 * f, block.mlp_bias);
  } else if (block.gated_mlp) {
    add("gate projection", h, f, block.mlp_bias);
    add("up projection", h, f, block.mlp_bias);
  } else {
    add("fc1 (up projection)", h, f, block.mlp_bias);
  }
  add(block.gated_mlp ? "down projection" : "fc2 (down projection)", f, h, block.mlp_bias);
  return out;
}

namespace {

// torchtitan's policy: the n-th aten.mm of a block's forward is saved when n is odd.
std::vector<bool> sac_saves_matmul(const std::vector<BlockMatmul>& matmuls) {
  std::vector<bool> saved;
  int mm_count = 0;
  for (const BlockMatmul& m : matmuls) {
    if (m.aten_mm) ++mm_count;
    saved.push_back(m.aten_mm && mm_count % 2 == 1);
  }
  return saved;
}

}  // namespace

std::vector<CostItem> sac_saved_tensors(const DecoderBlockShape& block, bool flash_attention) {
  const double E = kActivationBytes;
  std::vector<CostItem> items;
  // The checkpoint wrapper holds its input for the recomputation.
  items.push_back({"block input x: the checkpoint's input", E * as_double(block.hidden_size), 0});
  const std::vector<BlockMatmul> matmuls = block_matmuls(block);
  const std::vector<bool> saved = sac_saves_matmul(matmuls);
  // The attention op runs between the q/k/v projection(s) and the output projection.
  const std::size_t attention_position = block.fused_qkv ? 1 : 3;
  int mm_count = 0;
  for (std::size_t i = 0; i < matmuls.size(); ++i) {
    if (i == attention_position && flash_attention)
      items.push_back({"attention output: the flash/efficient SDPA op's output", E * as_double(block.q_dim()), 0});
    if (matmuls[i].aten_mm) ++mm_count;
    if (!saved[i]) continue;
    items.push_back({matmuls[i].name + " output: aten.mm #" + std::to_string(mm_count) + " (odd, saved)",
                     E * matmuls[i].output_elements_per_token, 0});
  }
  return items;
}

namespace {

// Whether backward reads the block's last projection output: a post-feedforward norm saves it
// (its input); otherwise it feeds only the residual add (or a dropout, which saves its mask).
bool backward_reads_last_projection_output(const DecoderBlockShape& block) {
  return norms_the_branch_outputs(block);
}

}  // namespace

std::vector<CostItem> sac_unread_saved_tensors(const DecoderBlockShape& block, bool /*flash_attention*/) {
  const std::vector<BlockMatmul> matmuls = block_matmuls(block);
  const std::vector<bool> saved = sac_saves_matmul(matmuls);
  std::vector<CostItem> items;
  if (!matmuls.empty() && saved.back() && !backward_reads_last_projection_output(block))
    items.push_back({matmuls.back().name + " output: saved by the policy, read by no backward node",
                     kActivationBytes * matmuls.back().output_elements_per_token, 0});
  return items;
}

namespace {

// Which of block_matmuls() op-level SAC runs again in backward: every projection whose output
// is not kept, except the last when nothing after it saves a tensor (its output feeds only the
// residual add, which saves nothing, so recomputation stops before it). A residual dropout
// (its mask) or a post-feedforward norm (its input) after it makes backward need it.
std::vector<bool> sac_recomputes_matmul(const DecoderBlockShape& block, const std::vector<BlockMatmul>& matmuls) {
  const std::vector<bool> saved = sac_saves_matmul(matmuls);
  const bool last_needed = block.residual_dropout || backward_reads_last_projection_output(block);
  std::vector<bool> recomputed(matmuls.size(), false);
  for (std::size_t i = 0; i < matmuls.size(); ++i) {
    const bool last = i + 1 == matmuls.size();
    recomputed[i] = !saved[i] && !(last && !last_needed);
  }
  return recomputed;
}

}  // namespace

std::vector<FlopItem> sac_recomputed_matmuls(const DecoderBlockShape& block, bool flash_attention) {
  const std::vector<BlockMatmul> matmuls = block_matmuls(block);
  const std::vector<bool> recomputed = sac_recomputes_matmul(block, matmuls);
  std::vector<FlopItem> items;
  for (std::size_t i = 0; i < matmuls.size(); ++i) {
    if (!recomputed[i]) continue;
    items.push_back({matmuls[i].name + (matmuls[i].aten_mm ? " (aten.mm, even-numbered)" : " (aten.addmm, not in the save list)"),
                     2 * matmuls[i].multiply_adds_per_token, 0});
  }
  if (!flash_attention)
    items.push_back({"eager attention QK^T and AV (aten.bmm, not in the save list)", 0, 4 * as_double(block.q_dim())});
  return items;
}

// ---- Transient memory ---------------------------------------------------------------------
// Every moment below is derived, tensor by tensor, in docs/model-schema.md ("Transient memory").

namespace {

// embedding_dense_backward on CUDA (aten/src/ATen/native/cuda/Embedding.cu and
// EmbeddingBackwardKernel.cu): the sorted ids and their original positions, then four arrays
// per index (segment_offsets, partials_per_segment, partials_per_segment_offset,
// partial_segment_offset), all int64 for int64 ids: 6 x 8 bytes per index.
constexpr double kEmbeddingBackwardIndexBytes = 6 * 8;

CostItem per_token(std::string what, double bytes) { return {std::move(what), bytes, 0, 0}; }
CostItem per_token_per_position(std::string what, double bytes) { return {std::move(what), 0, bytes, 0}; }
CostItem per_position(std::string what, double bytes) { return {std::move(what), 0, 0, bytes}; }

// FlashAttention-2's backward keeps its fp32 dq accumulator with the head dimension rounded up
// (flash_api.cpp, mha_bwd: head_size_rounded = round_multiple(head_size, head_size <= 128 ? 32 : 64),
// head_size itself a multiple of 8). The sequence is rounded up to 128 too; that is neglected.
double flash_dq_accum_head_dim(std::int64_t head_dim) {
  auto round_up = [](std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; };
  const std::int64_t d = round_up(head_dim, 8);
  return as_double(round_up(d, d <= 128 ? 32 : 64));
}

// Builds a phase's moments: `held` is alive at every moment added (the residual stream's gradient).
struct MomentList {
  std::vector<TransientMoment>& out;
  std::vector<CostItem> held;
  void add(std::string when, std::vector<CostItem> items) {
    std::vector<CostItem> all = held;
    all.insert(all.end(), items.begin(), items.end());
    out.push_back({std::move(when), std::move(all)});
  }
};

// Eager attention's forward from QK^T's output to the probabilities AV reads
// (DecoderBlockShape::EagerScoreChain): each out-of-place kernel holds its input and its output;
// the softmax's output, and the 16-bit copy AV reads, are in saved_tensors().
void add_eager_score_chain_forward(MomentList& fw, const DecoderBlockShape& block) {
  using EagerSoftmax = DecoderBlockShape::EagerSoftmax;
  const double E = kActivationBytes, F = kFp32Bytes, a = as_double(block.num_heads);
  // The scores alive beside each kernel; one an op saves (saves_output) is in saved_tensors().
  std::vector<CostItem> scores = {per_token_per_position("QK^T scores", E * a)};
  for (const DecoderBlockShape::EagerScoreOp& op : block.eager.before_softmax) {
    if (!op.out_of_place) continue;  // no new tensor
    std::vector<CostItem> out;
    if (!op.saves_output) out.push_back(per_token_per_position(op.what + ": its output", E * a));
    std::vector<CostItem> alive = scores;
    alive.insert(alive.end(), out.begin(), out.end());
    fw.add(op.what, alive);
    scores = out;
  }
  if (block.eager.softmax == EagerSoftmax::fp32_input) {
    const CostItem upcast = per_token_per_position("fp32 copy of the scores (.float())", F * a);
    std::vector<CostItem> alive = scores;
    alive.push_back(upcast);
    fw.add(".float() on the scores", alive);
    fw.add("softmax in fp32 (its output is saved)", {upcast});
  } else {
    fw.add("softmax (its output is saved)", scores);
  }
  // Dropout saves only its mask: the 16-bit copy it reads lives until it returns.
  if (block.eager.softmax != EagerSoftmax::activation_dtype && block.attention_dropout)
    fw.add("attention dropout on the 16-bit copy of the probabilities (its mask and output are saved)",
           {per_token_per_position("16-bit copy of the probabilities", E * a)});
}

// Eager attention's backward from the probabilities' gradient (`d_probabilities`, what AV or
// dropout's backward wrote) to QK^T's output gradient, which it returns: the cast's backward
// writes an fp32 gradient where the softmax ran in fp32, _softmax_backward_data writes the
// softmax input's dtype, and each op before the softmax writes a new gradient or passes it on.
CostItem add_eager_score_chain_backward(MomentList& bw, const DecoderBlockShape& block, const CostItem& dv_attention,
                                        const CostItem& d_probabilities, const CostItem& d_scores) {
  using EagerSoftmax = DecoderBlockShape::EagerSoftmax;
  const double E = kActivationBytes, F = kFp32Bytes, a = as_double(block.num_heads);
  CostItem d_softmax_output = d_probabilities;
  if (block.eager.softmax != EagerSoftmax::activation_dtype) {
    d_softmax_output = per_token_per_position("fp32 gradient of the probabilities (the cast's backward)", F * a);
    bw.add("cast backward: the probabilities' gradient to fp32", {dv_attention, d_probabilities, d_softmax_output});
  }
  CostItem d = d_scores;
  if (block.eager.softmax == EagerSoftmax::fp32_input) {
    const CostItem d_fp32_scores = per_token_per_position("fp32 gradient of the scores", F * a);
    bw.add("softmax backward (fp32)", {dv_attention, d_softmax_output, d_fp32_scores});
    bw.add(".float() backward: the scores' gradient to 16 bits", {dv_attention, d_fp32_scores, d});
  } else {
    bw.add("softmax backward", {dv_attention, d_softmax_output, d});
  }
  const std::vector<DecoderBlockShape::EagerScoreOp>& ops = block.eager.before_softmax;
  for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
    if (!op->backward_writes_new_gradient) continue;
    const CostItem next = per_token_per_position(op->what + " backward: its input's gradient", E * a);
    bw.add(op->what + " backward", {dv_attention, d, next});
    d = next;
  }
  return d;
}

}  // namespace

TransientLedger block_transients(const DecoderBlockShape& block, bool flash_attention) {
  const double E = kActivationBytes, F = kFp32Bytes;
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), kv = as_double(block.kv_dim());
  const double a = as_double(block.num_heads);
  // K and V as the attention op sees them: flash attention takes GQA's k and v as they are;
  // eager attention gets them repeated per query head (Hugging Face's repeat_kv), as in
  // saved_tensors().
  const double kv_attention = flash_attention ? kv : q;
  const bool qk_norm = block.qk_norm != QkNorm::none;
  const bool post_norms = norms_the_branch_outputs(block);
  const bool neox_parallel = block.parallel_residual && !block.falcon_parallel;
  const bool falcon_parallel = block.parallel_residual && block.falcon_parallel;
  // OLMo-2's post-norm block feeds the residual stream itself to the projections: their input
  // gradients are summed into the stream's gradient buffer in place as each arrives, instead of
  // accumulating in a norm output's gradient first.
  const bool branch_input_is_stream = !block.parallel_residual && block.norm_placement == NormPlacement::post;
  TransientLedger ledger;

  // Forward. The block saves its norms' inputs and outputs, q, k, v, the attention output and
  // the MLP's intermediates (saved_tensors()); what is left is short-lived.
  MomentList fw{ledger.forward, {}};
  if (block.is_mla()) {
    // HF's locals q_pass and q_rot (views of q_b_proj's output and the rotated q rope) and k_rot
    // live until the attention forward returns, through the output projection.
    const MlaWidths w = mla_widths(block);
    fw.held = {per_token("q projection output (q_b_proj or q_proj), viewed by the local q_pass", E * q),
               per_token("rotated q rope part (the local q_rot)", E * w.a * w.r),
               per_token("rotated k rope part, one head (the local k_rot, expanded as a view)", E * w.r)};
    fw.add("cat(q_nope, q_rope) and cat(k_nope, k_rope): q and k are saved", {});
  } else if (block.rotary && block.liger) {
    // [Liger block kernels] liger_rotary_pos_emb rotates the projections' (or the norms')
    // outputs in place: the rotated q and k are those tensors, saved; nothing else is alive.
    fw.add("Liger's rotary embedding, in place on q and k (saved)", {});
  } else if (block.rotary) {
    if (qk_norm) {
      fw.add("rotary embedding on the normed q and k (the rotated q and k are saved; the projections' outputs are "
             "saved by the norms); HF keeps the normed q and k until both are rotated",
             {per_token("normed q, before rotary", E * q), per_token("normed k, before rotary", E * kv)});
    } else {
      fw.add("rotary embedding on q and k (the rotated q and k are saved); HF keeps the projections' outputs "
             "until both are rotated",
             {per_token("q projection output, before rotary", E * q),
              per_token("k projection output, before rotary", E * kv)});
    }
  }
  if (!flash_attention) add_eager_score_chain_forward(fw, block);
  if (block.residual_dropout) {
    fw.add("attention output dropout (its mask is saved)",
           {per_token("attention output projection's output", E * h), per_token("attention output after dropout", E * h)});
  } else if (post_norms) {
    fw.add("post-attention norm (its input, the projection's output, is saved), then the residual add (saved)",
           {per_token("normed attention output", E * h)});
  } else {
    fw.add("attention output projection", {per_token("attention output projection's output", E * h)});
  }
  if (block.is_mla()) fw.held.clear();  // the attention forward returned
  // A parallel block holds the attention branch's output until the final sum (GPT-NeoX's
  // attn_output, Falcon's attention_output).
  if (block.parallel_residual) fw.held.push_back(per_token("attention branch output, held until the final sum", E * h));
  if (block.residual_dropout) {
    fw.add("MLP output dropout (its mask is saved)",
           {per_token("MLP output projection's output", E * h), per_token("MLP output after dropout", E * h)});
  } else if (post_norms) {
    fw.add("post-feedforward norm (its input, the down projection's output, is saved)",
           {per_token("normed MLP output", E * h)});
  } else {
    fw.add("MLP output projection", {per_token("MLP output projection's output", E * h)});
  }
  if (block.gated_mlp && block.liger && block.fused_gate_up && block.ffn_hidden_size > 0)
    fw.add("Liger's contiguous copies of gate and up (saved) while the gate_up output is alive",
           {per_token("gate_up projection output (2f), chunked into two views", E * 2 * as_double(block.ffn_hidden_size))});
  if (neox_parallel) {
    fw.add("mlp + attention + x, the second add: the block output",
           {per_token("MLP branch output", E * h), per_token("mlp + attention", E * h),
            per_token("block output (the next module's input)", E * h)});
  } else if (falcon_parallel) {
    fw.add("mlp_output += attention_output (in place), then + x: the block output",
           {per_token("MLP branch output (the attention output added in place)", E * h),
            per_token("block output (the next module's input)", E * h)});
  } else {
    fw.add("residual add h + MLP: the block output",
           {per_token("MLP branch output", E * h), per_token("block output (the next module's input)", E * h)});
  }

  // Backward, in autograd's order: the MLP (down, product, up, activation, gate, norm), then the
  // attention (output projection, attention, rotary k then q, q/k norms, v, k, q projections,
  // norm).
  MomentList bw{ledger.backward,
                {per_token(neox_parallel
                               ? "gradient of the block output"
                               : "residual stream gradient: the block output's, summed in place into the block input's",
                           E * h)}};
  const CostItem d_down_input =
      per_token(block.gated_mlp ? "gradient of " + gated_product(block) + ", the down projection's input"
                                : "gradient of the activation output, fc2's input",
                E * f);
  if (block.residual_dropout || post_norms) {
    const CostItem d_down_output = per_token("gradient of the MLP output projection's output", E * h);
    bw.add(block.residual_dropout ? "MLP output dropout backward" : "post-feedforward norm backward", {d_down_output});
    bw.add("down projection backward (MmBackward0)", {d_down_output, d_down_input});
  } else {
    bw.add("down projection backward (MmBackward0)", {d_down_input});
  }
  // Where the MLP's input gradient goes: a norm output's gradient buffer (the first contribution,
  // which later ones are summed into in place) or, for OLMo-2, straight into the stream's.
  const CostItem d_mlp_input = per_token(branch_input_is_stream ? "MLP input gradient contribution (then summed into "
                                                                  "the stream's gradient in place)"
                                                                : "gradient of the MLP input (first contribution)",
                                         E * h);
  const CostItem d_mlp_input_second = per_token("second contribution, then summed in place into the first", E * h);
  auto with_mlp_input = [&](std::vector<CostItem> items, bool first_alive) {
    if (first_alive && !branch_input_is_stream) items.push_back(d_mlp_input);
    return items;
  };
  if (block.gated_mlp && block.liger) {
    // [Liger block kernels] The kernel's backward writes the gate's and up's gradients over
    // their saved outputs: only the product's gradient is new.
    bw.add("Liger's " + block.gate_activation + "-and-multiply backward: the gate's and up's gradients written in place",
           {d_down_input});
    if (block.fused_gate_up) {
      const CostItem d_gate_up = per_token("gradient of the gate_up output (chunk backward: cat of both halves)", E * 2 * f);
      bw.add("chunk backward (SplitBackward0)", {d_gate_up});
      bw.add("gate_up projection backward", {d_gate_up, d_mlp_input});
    } else {
      bw.add("up projection backward", {d_mlp_input});
      bw.add("gate projection backward",
             branch_input_is_stream ? std::vector<CostItem>{d_mlp_input}
                                    : std::vector<CostItem>{d_mlp_input, d_mlp_input_second});
    }
  } else if (block.gated_mlp) {
    const std::string act = block.gate_activation;
    const CostItem d_act = per_token("gradient of the " + act + " output", E * f);
    const CostItem d_up = per_token("gradient of the up projection output", E * f);
    const CostItem d_gate = per_token("gradient of the gate projection output (" + act + "'s input)", E * f);
    bw.add(gated_product(block) + " backward (MulBackward0): both factors' gradients while the product's is held",
           {d_down_input, d_act, d_up});
    if (block.fused_gate_up) {
      // up * act(gate) with gate, up = gate_up.chunk(2): the activation (created after the
      // chunk) goes first; the chunk's backward concatenates the two halves' gradients.
      bw.add(act + " backward", {d_up, d_act, d_gate});
      const CostItem d_gate_up = per_token("gradient of the gate_up output (chunk backward: cat of both halves)", E * 2 * f);
      bw.add("chunk backward (SplitBackward0)", {d_up, d_gate, d_gate_up});
      bw.add("gate_up projection backward", {d_gate_up, d_mlp_input});
    } else {
      bw.add("up projection backward (created after " + act + ", so differentiated before it)", {d_act, d_up, d_mlp_input});
      bw.add(act + " backward", with_mlp_input({d_act, d_gate}, true));
      bw.add("gate projection backward",
             branch_input_is_stream ? std::vector<CostItem>{d_gate, d_mlp_input}
                                    : std::vector<CostItem>{d_gate, d_mlp_input, d_mlp_input_second});
    }
  } else {
    const CostItem d_fc1 = per_token("gradient of fc1's output (the activation's input)", E * f);
    bw.add("activation (GELU) backward", {d_down_input, d_fc1});
    bw.add("fc1 backward", {d_fc1, d_mlp_input});
  }
  const CostItem d_norm_input = per_token("gradient of the norm's input, before it joins the stream", E * h);
  if (neox_parallel) {
    bw.add("MLP norm backward", {d_mlp_input, d_norm_input});
    // The output gradient is also buffered for the attention branch: the sum is out of place.
    const CostItem partial = per_token("block input gradient so far (residual + MLP branch)", E * h);
    bw.add("sum into the block input's gradient, out of place", {d_norm_input, partial});
    bw.held.push_back(partial);
  } else if (falcon_parallel) {
    // Falcon's norms ran before the attention branch: their backward comes after it, and the
    // MLP's input gradient waits in the norm output's gradient buffer meanwhile.
    bw.held.push_back(d_mlp_input);
  } else if (!branch_input_is_stream) {
    bw.add(block.norm_placement == NormPlacement::sandwich ? "pre-feedforward norm backward" : "MLP norm backward",
           {d_mlp_input, d_norm_input});
  }
  const CostItem d_attention_output =
      per_token("gradient of the attention output (output projection's input)", E * as_double(block.attention_output_dim()));
  if (block.residual_dropout || post_norms) {
    const CostItem d_o_output = per_token("gradient of the attention output projection's output", E * h);
    bw.add(block.residual_dropout ? "attention output dropout backward" : "post-attention norm backward", {d_o_output});
    if (neox_parallel) bw.held.erase(bw.held.begin());  // the output gradient dies with the branch's first node
    bw.add("attention output projection backward", {d_o_output, d_attention_output});
  } else {
    bw.add("attention output projection backward", {d_attention_output});
    if (neox_parallel) bw.held.erase(bw.held.begin());
  }
  const CostItem dq = per_token("dq", E * q), dk = per_token("dk", E * kv);
  const CostItem dv = per_token("dv", E * as_double(block.v_dim()));
  if (flash_attention) {
    std::vector<CostItem> items = {d_attention_output, dq, dk, dv};
    if (block.num_kv_heads != block.num_heads) {
      items.push_back(per_token("dk per query head (GQA; summed over the groups into dk)", E * q));
      items.push_back(per_token("dv per query head (GQA; summed over the groups into dv)", E * q));
    }
    items.push_back(per_token("fp32 dq accumulator", F * a * flash_dq_accum_head_dim(block.head_dim)));
    items.push_back(per_token("fp32 softmax_d (rowsum of dO*O)", F * a));
    bw.add("flash attention backward (mha_bwd)", items);
  } else {
    const CostItem d_probabilities = per_token_per_position("gradient of the attention probabilities", E * a);
    const CostItem d_dropped = per_token_per_position("gradient of the dropped-out probabilities", E * a);
    const CostItem d_scores = per_token_per_position("gradient of the scores", E * a);
    const CostItem dv_attention =
        per_token("dv as attention sees it", E * (block.is_mla() ? as_double(block.v_dim()) : kv_attention));
    const CostItem dk_attention = per_token("dk as attention sees it", E * kv_attention);
    bw.add("AV backward (bmm)",
           {d_attention_output, block.attention_dropout ? d_dropped : d_probabilities, dv_attention});
    if (block.attention_dropout) bw.add("attention dropout backward", {dv_attention, d_dropped, d_probabilities});
    const CostItem d_qk_output = add_eager_score_chain_backward(bw, block, dv_attention, d_probabilities, d_scores);
    bw.add("QK^T backward (bmm)", {dv_attention, d_qk_output, dq, dk_attention});
    if (kv_attention != kv)
      bw.add("repeat_kv backward: dk and dv summed over the query groups", {dq, dk_attention, dv_attention, dk});
  }
  // The gradients of q and k as their producers (rotary, else the norms or projections) leave them.
  CostItem dq_rotated = dq, dk_rotated = dk;
  if (block.rotary && block.liger && !block.is_mla()) {
    bw.add("Liger's rotary backward, in place on dq and dk", {dq, dk, dv});
  } else if (block.rotary && !block.is_mla()) {  // MLA's rotary runs on the rope parts: below
    const CostItem dq_before = per_token(qk_norm ? "gradient of the normed q (before rotary)" : "gradient of q before rotary", E * q);
    const CostItem dk_before = per_token(qk_norm ? "gradient of the normed k (before rotary)" : "gradient of k before rotary", E * kv);
    bw.add("rotary backward on k (k was rotated after q)", {dq, dk, dv, dk_before});
    bw.add("rotary backward on q", {dq, dq_before, dk_before, dv});
    dq_rotated = dq_before;
    dk_rotated = dk_before;
  }
  // The attention input's gradient: contributions from the q/k/v projection(s), accumulated in
  // the norm output's gradient buffer (first contribution, then later ones summed into it), or
  // in the stream's (OLMo-2), or, in Falcon's single-norm block, in the buffer the MLP's
  // contribution already holds.
  const bool into_held_buffer = falcon_parallel && block.one_parallel_norm;
  const CostItem d_in_first = per_token(branch_input_is_stream ? "attention input gradient contribution (then summed into "
                                                                 "the stream's gradient in place)"
                                                               : "gradient of the attention norm output (first contribution)",
                                        E * h);
  const CostItem d_in_next = per_token("next contribution, then summed in place into the first", E * h);
  // What a projection's backward writes and what of the input's gradient is alive with it:
  // the contribution written (and, after the first, the first one it is summed into).
  auto projection_outputs = [&](bool first_exists) -> std::vector<CostItem> {
    if (branch_input_is_stream) return {d_in_first};
    if (into_held_buffer) return {d_in_next};
    return first_exists ? std::vector<CostItem>{d_in_first, d_in_next} : std::vector<CostItem>{d_in_first};
  };
  auto plus = [](std::vector<CostItem> items, const std::vector<CostItem>& more) {
    items.insert(items.end(), more.begin(), more.end());
    return items;
  };
  // The first contribution, once written, while later nodes run (none when summed into G).
  auto first_if_kept = [&]() -> std::vector<CostItem> {
    if (branch_input_is_stream || into_held_buffer) return {};
    return {d_in_first};
  };
  if (block.is_mla()) {
    // Autograd's order (the highest sequence number first): cat(k) and cat(q) backward (narrow
    // views of dk and dq), the expand's sum and rotary's backward on the rope parts, the split of
    // kv_b_proj's output (dk_nope and dv concatenated), kv_b_proj, kv_a_layernorm, the split of
    // kv_a_proj_with_mqa's output, kv_a_proj_with_mqa; only then the split of q (created before
    // the kv path), so dq and rotary's dq_rope wait through the kv path; then q_b_proj,
    // q_a_layernorm, q_a_proj (or q_proj).
    const MlaWidths w = mla_widths(block);
    const CostItem dq_rope = per_token("gradient of q's rope part before rotary", E * w.a * w.r);
    const CostItem dk_rope = per_token("gradient of k's rope part before rotary (summed over the heads)", E * w.r);
    const CostItem d_kv_b = per_token("gradient of kv_b_proj's output (split backward: dk_nope and dv concatenated)",
                                      E * w.a * (w.n + w.v));
    const CostItem d_kv_norm_out = per_token("gradient of kv_a_layernorm's output", E * w.c);
    const CostItem d_kv_norm_in = per_token("gradient of kv_a_layernorm's input (c)", E * w.c);
    const CostItem d_kv_a = per_token("gradient of kv_a_proj_with_mqa's output (split backward: cat of c and k_rope)",
                                      E * (w.c + w.r));
    const CostItem d_q = per_token("gradient of the q projection's output (split backward: cat of q_nope and q_rope)", E * q);
    bw.add("rotary backward on the rope parts (q per head, k one head)", {dq, dk, dv, dq_rope, dk_rope});
    bw.add("split backward of kv_b_proj's output", {dq, dk, dv, dq_rope, dk_rope, d_kv_b});
    bw.add("kv_b_proj backward", {dq, dq_rope, dk_rope, d_kv_b, d_kv_norm_out});
    bw.add("kv_a_layernorm backward", {dq, dq_rope, dk_rope, d_kv_norm_out, d_kv_norm_in});
    bw.add("split backward of kv_a_proj_with_mqa's output", {dq, dq_rope, dk_rope, d_kv_norm_in, d_kv_a});
    bw.add("kv_a_proj_with_mqa backward", plus({dq, dq_rope, d_kv_a}, projection_outputs(false)));
    bw.add("split backward of q", plus({dq, dq_rope, d_q}, first_if_kept()));
    if (w.ql > 0) {
      const CostItem d_q_a_norm_out = per_token("gradient of q_a_layernorm's output", E * w.ql);
      const CostItem d_q_a = per_token("gradient of q_a_proj's output", E * w.ql);
      bw.add("q_b_proj backward", plus({d_q, d_q_a_norm_out}, first_if_kept()));
      bw.add("q_a_layernorm backward", plus({d_q_a_norm_out, d_q_a}, first_if_kept()));
      bw.add("q_a_proj backward", plus({d_q_a}, projection_outputs(true)));
    } else {
      bw.add("q projection backward", plus({d_q}, projection_outputs(true)));
    }
  } else if (block.fused_qkv) {
    const CostItem d_qkv = per_token("gradient of the fused qkv output (the split's backward concatenates)", E * (q + 2 * kv));
    bw.add("split backward: dq, dk, dv concatenated", {dq_rotated, dk_rotated, dv, d_qkv});
    bw.add("fused qkv projection backward", plus({d_qkv}, projection_outputs(false)));
  } else if (block.qk_norm == QkNorm::after_all_projections) {
    // Gemma-3: q_proj, k_proj, v_proj, q_norm, k_norm: the norms (created last) go first.
    const CostItem dq_projection = per_token("gradient of the q projection output", E * q);
    const CostItem dk_projection = per_token("gradient of the k projection output", E * kv);
    bw.add("k norm backward", {dq_rotated, dk_rotated, dv, dk_projection});
    bw.add("q norm backward", {dq_rotated, dq_projection, dk_projection, dv});
    bw.add("v projection backward", plus({dq_projection, dk_projection, dv}, projection_outputs(false)));
    bw.add("k projection backward", plus({dq_projection, dk_projection}, projection_outputs(true)));
    bw.add("q projection backward", plus({dq_projection}, projection_outputs(true)));
  } else if (block.qk_norm == QkNorm::after_each_projection) {
    // Qwen3, OLMo-2: q_proj, q_norm, k_proj, k_norm, v_proj.
    const CostItem dq_projection = per_token("gradient of the q projection output", E * q);
    const CostItem dk_projection = per_token("gradient of the k projection output", E * kv);
    bw.add("v projection backward", plus({dq_rotated, dk_rotated, dv}, projection_outputs(false)));
    bw.add("k norm backward", plus({dq_rotated, dk_rotated, dk_projection}, first_if_kept()));
    bw.add("k projection backward", plus({dq_rotated, dk_projection}, projection_outputs(true)));
    bw.add("q norm backward", plus({dq_rotated, dq_projection}, first_if_kept()));
    bw.add("q projection backward", plus({dq_projection}, projection_outputs(true)));
  } else {
    bw.add("v projection backward", plus({dq_rotated, dk_rotated, dv}, projection_outputs(false)));
    bw.add("k projection backward", plus({dq_rotated, dk_rotated}, projection_outputs(true)));
    bw.add("q projection backward", plus({dq_rotated}, projection_outputs(true)));
  }
  if (falcon_parallel) {
    if (block.one_parallel_norm) {
      // Both branches' contributions are in the norm output's gradient (the held buffer).
      bw.add("the block's norm backward (its input gradient is then summed in place into the stream)",
             {d_norm_input});
    } else {
      // ln_mlp ran after ln_attn, so its backward goes first, with ln_attn's output gradient waiting.
      bw.add("MLP norm (ln_mlp) backward (its input gradient is then summed in place into the stream)",
             {d_in_first, d_norm_input});
      bw.held.pop_back();  // the MLP input gradient dies with ln_mlp's backward
      bw.add("attention norm (ln_attn) backward (its input gradient is then summed in place into the stream)",
             {d_in_first, d_norm_input});
    }
  } else if (!branch_input_is_stream) {
    bw.add("attention norm backward (its input gradient is then summed in place into the stream)",
           {per_token("gradient of the attention norm output", E * h), d_norm_input});
  }
  return ledger;
}

TransientLedger token_embedding_transients(std::int64_t hidden_size, bool adds_position_embedding,
                                           bool embedding_dropout, bool scales_output) {
  const double E = kActivationBytes, F = kFp32Bytes, h = as_double(hidden_size);
  TransientLedger ledger;
  if (scales_output) {
    if (adds_position_embedding || embedding_dropout)
      throw std::invalid_argument("a scaled embedding with position rows or dropout is not modelled");
    // Gemma: hidden_states = inputs_embeds * normalizer; both alive while the product is written.
    ledger.forward.push_back({"embedding gather, then the scaling by sqrt(hidden_size)",
                              {per_token("gathered rows (inputs_embeds)", E * h),
                               per_token("scaled rows: the first block's input (saved by it)", E * h)}});
    ledger.backward.push_back({"scaling backward (MulBackward0)", {per_token("gradient of the embedding output", E * h),
                                                                   per_token("gradient of the gathered rows", E * h)}});
    ledger.backward.push_back(
        {"token embedding backward (embedding_dense_backward; its weight gradient is a parameter gradient)",
         {per_token("gradient of the gathered rows", E * h),
          per_token("fp32 per-index partial sums (grad_weight_per_segment)", F * h),
          per_token("sorted ids, positions and segment arrays (int64)", kEmbeddingBackwardIndexBytes)}});
    return ledger;
  }
  if (!adds_position_embedding) {
    ledger.forward.push_back({"embedding gather", {per_token("gathered rows: the first block's input (saved by it)", E * h)}});
  } else {
    // GPT2Model.forward keeps inputs_embeds and position_embeds in locals.
    std::vector<CostItem> alive = {per_token("token rows (inputs_embeds)", E * h),
                                   per_position("position rows (position_embeds, shared by the batch)", E * h),
                                   per_token("token + position rows", E * h)};
    ledger.forward.push_back({"token and position gathers, then their sum", alive});
    if (embedding_dropout) {
      alive.push_back(per_token("embedding dropout output: the first block's input", E * h));
      ledger.forward.push_back({"embedding dropout (its mask is saved)", alive});
    }
  }
  CostItem gradient = per_token("gradient of the embedding output", E * h);
  if (embedding_dropout) {
    const CostItem before = per_token("gradient before dropout", E * h);
    ledger.backward.push_back({"embedding dropout backward", {gradient, before}});
    gradient = before;
  }
  if (adds_position_embedding)
    ledger.backward.push_back(
        {"position embedding backward: the gradient summed over the batch, then embedding_dense_backward",
         {gradient, per_position("position rows' gradient (sum over the batch)", E * h),
          per_position("fp32 per-index partial sums", F * h),
          per_position("sorted ids, positions and segment arrays (int64)", kEmbeddingBackwardIndexBytes)}});
  ledger.backward.push_back({"token embedding backward (embedding_dense_backward; its weight gradient is a parameter gradient)",
                             {gradient, per_token("fp32 per-index partial sums (grad_weight_per_segment)", F * h),
                              per_token("sorted ids, positions and segment arrays (int64)", kEmbeddingBackwardIndexBytes)}});
  return ledger;
}

TransientLedger final_norm_transients(std::int64_t hidden_size) {
  const double E = kActivationBytes, h = as_double(hidden_size);
  TransientLedger ledger;
  ledger.forward.push_back({"final norm", {per_token("norm output: the output layer's input (saved by it)", E * h)}});
  ledger.backward.push_back({"final norm backward",
                             {per_token("gradient of the norm output (the output layer's input gradient)", E * h),
                              per_token("gradient of the norm input (the last block's output gradient)", E * h)}});
  return ledger;
}

namespace {

// The output layer's tensors, per token unless the name says otherwise (E = 2: 16-bit).
struct LossShape {
  double h = 0;       // hidden size
  double V = 0;       // vocabulary size
  double tokens = 0;  // b*s, for the kinds whose chunking depends on it (chunked)
  bool softcap = false;  // Gemma-2's final_logit_softcapping before the loss
  bool compiled = true;  // chunked_output: each chunk's cross-entropy compiled (else eager)
};

// Gemma2ForCausalLM.forward (transformers): logits = logits / cap; logits = torch.tanh(logits);
// logits = logits * cap, each a new 16-bit V-wide tensor, the previous one dropped as `logits`
// is rebound. tanh saves its output (the module's saved activations); the division and the
// multiplication by a Python scalar save nothing. Forward: the lm_head output and its quotient
// coexist, then the quotient while tanh writes (its output is saved), then the capped logits,
// which the loss reads as its 16-bit logits. Backward, after the loss has produced the capped
// logits' 16-bit gradient: each op holds its input gradient while writing its output gradient.
void add_softcap_forward(const LossShape& x, std::vector<TransientMoment>& forward) {
  const double E = kActivationBytes, V = x.V;
  forward.push_back({"logits / final_logit_softcapping: the projection's output and the quotient",
                     {per_token("16-bit logits (the projection's output)", E * V), per_token("logits / cap", E * V)}});
  forward.push_back({"tanh (its output is saved)", {per_token("logits / cap", E * V)}});
  forward.push_back({"* final_logit_softcapping: the capped logits the loss reads", {per_token("capped 16-bit logits", E * V)}});
}

void add_softcap_backward(const LossShape& x, std::vector<TransientMoment>& backward) {
  const double E = kActivationBytes, V = x.V;
  const CostItem d_capped = per_token("16-bit gradient of the capped logits", E * V);
  const CostItem d_tanh = per_token("gradient of tanh's output", E * V);
  const CostItem d_quotient = per_token("gradient of logits / cap", E * V);
  const CostItem d_logits = per_token("gradient of the projection's output", E * V);
  backward.push_back({"* cap backward (MulBackward0)", {d_capped, d_tanh}});
  backward.push_back({"tanh backward (TanhBackward0)", {d_tanh, d_quotient}});
  backward.push_back({"/ cap backward (DivBackward0)", {d_quotient, d_logits}});
}

CostItem fixed(std::string what, double bytes) { return {std::move(what), 0, 0, 0, bytes}; }

CostItem input_gradient(const LossShape& x) {
  return per_token("gradient of the output layer's input", kActivationBytes * x.h);
}

// Where a loss's backward ends, whatever its kind writes the logits' gradient in: a softcap's
// backward (Gemma 2) from `d_logits16`, then the output projection's, whose weight gradient
// appears there (weight_gradient_moment).
void end_loss_backward(const LossShape& x, const CostItem& d_logits16, TransientLedger& ledger) {
  if (x.softcap) add_softcap_backward(x, ledger.backward);
  ledger.weight_gradient_moment = static_cast<int>(ledger.backward.size());
  ledger.backward.push_back(
      {"output projection backward (MmBackward0; its weight gradient is a parameter gradient)",
       {x.softcap ? per_token("gradient of the projection's output", kActivationBytes * x.V) : d_logits16,
        input_gradient(x)}});
}

TransientLedger fp32_upcast_loss_transients(const LossShape& x) {
  const double E = kActivationBytes, V = x.V;
  const CostItem logits16 = per_token("16-bit logits", E * V);
  const CostItem logits32 = per_token("fp32 logits (logits.float())", kLogitBytes * V);
  const CostItem d_log_probs = per_token("fp32 gradient of the log-probabilities", kLogitBytes * V);
  const CostItem d_logits32 = per_token("fp32 gradient of the logits", kLogitBytes * V);
  const CostItem d_logits16 = per_token("16-bit gradient of the logits", E * V);
  TransientLedger ledger;
  if (x.softcap) add_softcap_forward(x, ledger.forward);
  ledger.forward.push_back({"logits.float(): the 16-bit logits and their fp32 copy", {logits16, logits32}});
  ledger.forward.push_back({"log_softmax (its output, the log-probabilities, is saved); the 16-bit logits are still "
                            "referenced (HF's logits, torchtitan's pred)",
                            {logits16, logits32}});
  ledger.backward = {
      {"nll_loss backward: zeros, then the loss gradient scattered at the targets", {d_log_probs}},
      {"log_softmax backward (LogSoftmaxBackward0): its input gradient is held while it writes its output",
       {d_log_probs, d_logits32}},
      {"logits.float() backward (ToCopyBackward0): the gradient cast to 16 bits", {d_logits32, d_logits16}},
  };
  end_loss_backward(x, d_logits16, ledger);
  return ledger;
}

// F.cross_entropy straight on the 16-bit logits: log_softmax writes 16-bit log-probabilities
// (saved), nll_loss's backward a 16-bit gradient, log_softmax's backward the logits' gradient.
TransientLedger bf16_loss_transients(const LossShape& x) {
  const double E = kActivationBytes, V = x.V;
  const CostItem logits16 = per_token("16-bit logits", E * V);
  const CostItem d_log_probs = per_token("16-bit gradient of the log-probabilities", E * V);
  const CostItem d_logits16 = per_token("16-bit gradient of the logits", E * V);
  TransientLedger ledger;
  if (x.softcap) add_softcap_forward(x, ledger.forward);
  ledger.forward.push_back(
      {"log_softmax on the 16-bit logits (its output is saved; the logits are still referenced)", {logits16}});
  ledger.backward = {
      {"nll_loss backward: zeros, then the loss gradient scattered at the targets", {d_log_probs}},
      {"log_softmax backward (LogSoftmaxBackward0): its input gradient is held while it writes its output",
       {d_log_probs, d_logits16}},
  };
  end_loss_backward(x, d_logits16, ledger);
  return ledger;
}

// flash-attn's CrossEntropyLoss (Dao-AILab/flash-attention flash_attn/ops/triton/cross_entropy.py@0251105): the forward kernel
// reads the 16-bit logits once and writes fp32 losses, z-losses and log-sum-exps per row; the
// logits and the log-sum-exps are saved; with inplace_backward=True the backward kernel writes
// the logits' gradient over the saved logits. Liger's LigerCrossEntropyLoss keeps the same
// V-wide buffer (it writes the gradient over the logits already in forward).
TransientLedger fused_loss_transients(const LossShape& x) {
  TransientLedger ledger;
  ledger.forward = {{"cross_entropy_fwd_kernel: one pass over the 16-bit logits (saved for backward)",
                     {per_token("fp32 losses per row", kFp32Bytes), per_token("fp32 z-losses per row", kFp32Bytes)}}};
  ledger.backward = {
      {"cross_entropy_bwd_kernel (inplace_backward=True): the logits' gradient written over the saved logits", {}},
      {"output projection backward (MmBackward0; its weight gradient is a parameter gradient)", {input_gradient(x)}},
  };
  ledger.weight_gradient_moment = 1;
  return ledger;
}

// Liger's fused linear cross-entropy (linkedin/Liger-Kernel src/liger_kernel/ops/fused_linear_cross_entropy.py@ead96b6,
// fused_linear_cross_entropy_forward, reduction "mean",
// accum_dtype None, no bias): everything happens in forward, chunk by chunk; backward returns
// the gradients (grad_output is 1.0 when the loss is not scaled: no element_mul).
TransientLedger chunked_loss_transients(const LossShape& x) {
  const double E = kActivationBytes, h = x.h, V = x.V;
  const double chunk_share = liger_chunk_tokens(x.tokens, static_cast<std::int64_t>(h), static_cast<std::int64_t>(V)) /
                             x.tokens;  // the largest chunk's tokens per token of the micro-batch
  const CostItem grad_weight = fixed("grad_weight accumulator (zeros_like(weight), the weight's dtype)", E * V * h);
  const CostItem losses = per_token("fp32 per-token losses (loss_1d)", kFp32Bytes);
  const CostItem mask = per_token("target != ignore_index (bool)", 1);
  const CostItem logits = per_token("one chunk's 16-bit logits, then their gradient (in place)", chunk_share * E * V);
  TransientLedger ledger;
  ledger.forward = {
      {"grad_input and grad_weight zeroed, loss_1d and the target mask allocated", {grad_weight, losses, mask}},
      {"a chunk: logits_chunk = _input_chunk @ weight.t(), then liger_cross_entropy_kernel writes their gradient in place",
       {grad_weight, losses, mask, logits}},
      {"grad_input[chunk] = grad_logits_chunk @ weight: the product, then its copy into the slice",
       {grad_weight, losses, mask, logits, per_token("the chunk's input gradient (a temporary)", chunk_share * E * h)}},
      {"grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float(): the 16-bit product and its fp32 copy",
       {grad_weight, losses, mask, logits, fixed("the chunk's weight gradient (16-bit mm output)", E * V * h),
        fixed("its fp32 copy (.float())", kFp32Bytes * V * h)}},
  };
  // grad_input is saved (the module's saved activation); grad_weight becomes the parameter
  // gradient, which the planner allocates at the backward op.
  ledger.backward = {{"LigerFusedLinearCrossEntropyFunction.backward: returns the gradients computed in forward", {}}};
  return ledger;
}

// Apple's Cut Cross-Entropy (apple/ml-cross-entropy cut_cross_entropy/cce.py@d42911f, defaults: filter_eps "auto", no fp32
// accumulation, reduction "mean"): the logits exist only in on-chip tiles. Forward saves the
// input e, the fp32 log-sum-exps and (filter_eps set) the fp32 mean logit per vocabulary entry;
// backward recomputes the logits tile by tile into de = zeros_like(e) and dc = zeros_like(c).
TransientLedger cut_loss_transients(const LossShape& x) {
  const CostItem order = fixed("vocabulary order (sort_logit_avg: argsort of logit_avg, int32)", 4 * x.V);
  TransientLedger ledger;
  ledger.forward = {{"cce_lse_forward_kernel and indexed_neg_dot_forward_kernel: the fp32 log-sum-exps (saved) and "
                     "the targets' negative logits, summed into the loss in place",
                     {per_token("fp32 negative target logits (neg_dot, then nll)", kFp32Bytes)}}};
  ledger.backward = {
      {"sort_logit_avg: the vocabulary ordered by mean logit", {order}},
      {"cce_backward_kernel: de (the output layer's input gradient) and dc (a parameter gradient) accumulated tile by tile",
       {order, input_gradient(x)}},
  };
  return ledger;
}

// torchtune's chunked-output cross-entropy (pytorch/torchtune@bd2a0fc torchtune/modules/loss/
// ce_chunked_output_loss.py CEWithChunkedOutputLoss, and cross_entropy_loss.py LinearCrossEntropyLoss,
// which runs the projection inside the chunk): the tokens split in num_output_chunks = 8, each
// chunk's F.cross_entropy(logits.float()) compiled (apply_compile_strategy; torchtune's recipes
// compile it with compile: True). AOTAutograd's partitioner keeps the chunk's 16-bit logits (a
// matmul output it will not recompute) and a per-row statistic, not the fp32 log-probabilities
// eager would (4V a token), and Inductor fuses the upcast into its reductions. In backward the
// chunks' cross-entropies run first (created after every projection chunk, so higher in
// autograd's order); each releases its saved logits once it has written their 16-bit gradient,
// so the chunks done hold gradients where their logits were: beyond the saved logits, one
// chunk's gradient. Then the projection chunks' backward writes the input gradient's chunks and
// tensor_split's backward concatenates them.
constexpr double kTorchtuneOutputChunks = 8;  // num_output_chunks' default (both classes)
// Eager (compile: False), each chunk runs logits.float() and F.cross_entropy as fp32_upcast does,
// on an eighth of the tokens: log_softmax saves the chunk's fp32 log-probabilities (4V a token
// over the chunks), the 16-bit logits (2V, every chunk) are alive through the loss's forward and
// dropped before backward (torchtune's recipes `del logits`); in backward the first chunk's
// log-probabilities' and logits' fp32 gradients (4V/8 each) are the largest moment, later
// chunks' released log-probabilities making room for their 16-bit gradients.
TransientLedger chunked_output_loss_transients(const LossShape& x) {
  const double E = kActivationBytes, chunk = x.V / kTorchtuneOutputChunks;
  TransientLedger ledger;
  if (x.compiled) {
    ledger.forward = {{"the projection chunks (16-bit logits, saved) and each chunk's compiled cross-entropy", {}}};
    ledger.backward = {
        {"a chunk's compiled cross-entropy backward: its 16-bit gradient beside its logits, which it then releases",
         {per_token("one chunk's 16-bit logits gradient", E * chunk)}}};
  } else {
    ledger.forward = {{"a chunk's logits.float() and log_softmax (its fp32 output saved) while every chunk's 16-bit "
                       "logits are alive",
                       {per_token("the 16-bit logits, every chunk", E * x.V),
                        per_token("one chunk's fp32 copy (logits.float())", kLogitBytes * chunk)}}};
    ledger.backward = {{"a chunk's log_softmax backward: its log-probabilities' and logits' fp32 gradients",
                        {per_token("one chunk's fp32 gradient of the log-probabilities", kLogitBytes * chunk),
                         per_token("one chunk's fp32 gradient of the logits", kLogitBytes * chunk)}}};
  }
  ledger.backward.push_back({"projection chunks' backward (MmBackward0; the weight gradient is a parameter gradient), "
                             "then tensor_split's backward concatenating the input gradient's chunks",
                             {per_token("the input gradient's chunks", E * x.h), input_gradient(x)}});
  ledger.weight_gradient_moment = 1;
  return ledger;
}

TransientLedger loss_transients(const LossShape& x, LossKind kind) {
  switch (kind) {
    case LossKind::fp32_upcast: return fp32_upcast_loss_transients(x);
    case LossKind::bf16: return bf16_loss_transients(x);
    case LossKind::fused: return fused_loss_transients(x);
    case LossKind::chunked: return chunked_loss_transients(x);
    case LossKind::cut: return cut_loss_transients(x);
    case LossKind::chunked_output: return chunked_output_loss_transients(x);
  }
  return fp32_upcast_loss_transients(x);
}

LossShape loss_shape(std::int64_t hidden_size, std::int64_t vocab_size, LossKind kind, double tokens, bool softcap,
                     bool compiled) {
  if (kind == LossKind::chunked && !(tokens >= 1))
    throw std::invalid_argument("the chunked loss's costs depend on the tokens per micro-batch (b*s >= 1)");
  // The fused kernels take a softcap argument of their own (Liger, Cut Cross-Entropy), which
  // changes what they compute; not modelled.
  if (softcap && kind != LossKind::fp32_upcast && kind != LossKind::bf16)
    throw std::invalid_argument("the " + loss_kind_name(kind) +
                                " loss with soft-capped logits (final_logit_softcapping) is not modelled; "
                                "fp32_upcast and bf16 are");
  return {as_double(hidden_size), as_double(vocab_size), tokens, softcap, compiled};
}

}  // namespace

double liger_chunk_tokens(double tokens, std::int64_t hidden_size, std::int64_t vocab_size) {
  // inc_factor = triton.cdiv(V, H); chunk_size = triton.next_power_of_2(triton.cdiv(BT, inc_factor)).
  const double inc_factor = std::ceil(as_double(vocab_size) / as_double(hidden_size));
  const double wanted = std::ceil(tokens / inc_factor);
  double chunk = 1;
  while (chunk < wanted) chunk *= 2;
  return std::min(chunk, tokens);  // one chunk when it covers the micro-batch
}

TransientLedger lm_head_transients(std::int64_t hidden_size, std::int64_t vocab_size, LossKind kind, double tokens,
                                   bool logit_softcap, bool compiled_loss) {
  return loss_transients(loss_shape(hidden_size, vocab_size, kind, tokens, logit_softcap, compiled_loss), kind);
}

Polynomial moment_bytes(const TransientMoment& moment) { return ledger_polynomial(moment.tensors); }

Polynomial peak_transient_bytes(const std::vector<TransientMoment>& moments) {
  double per_token = 0, per_token_per_position = 0, per_position = 0, fixed_bytes = 0;
  for (const TransientMoment& m : moments) {
    double t = 0, tp = 0, p = 0, f = 0;
    for (const CostItem& item : m.tensors) {
      t += item.bytes_per_token;
      tp += item.bytes_per_token_per_position;
      p += item.bytes_per_position;
      f += item.bytes_fixed;
    }
    per_token = std::max(per_token, t);
    per_token_per_position = std::max(per_token_per_position, tp);
    per_position = std::max(per_position, p);
    fixed_bytes = std::max(fixed_bytes, f);
  }
  Polynomial out = monomial(per_token, 1, 1);
  out += monomial(per_token_per_position, 1, 2);
  out += monomial(per_position, 0, 1);
  out += monomial(fixed_bytes, 0, 0);
  return out;
}

Polynomial largest_transient_tensor(const TransientLedger& ledger) {
  double t = 0, tp = 0, p = 0, f = 0;
  for (const auto* moments : {&ledger.forward, &ledger.backward})
    for (const TransientMoment& m : *moments)
      for (const CostItem& item : m.tensors) {
        t = std::max(t, item.bytes_per_token);
        tp = std::max(tp, item.bytes_per_token_per_position);
        p = std::max(p, item.bytes_per_position);
        f = std::max(f, item.bytes_fixed);
      }
  Polynomial out = monomial(t, 1, 1);
  out += monomial(tp, 1, 2);
  out += monomial(p, 0, 1);
  out += monomial(f, 0, 0);
  return out;
}

std::size_t largest_moment(const std::vector<TransientMoment>& moments, double micro_batch, double seq_len) {
  std::size_t best = 0;
  double best_bytes = -1;
  for (std::size_t i = 0; i < moments.size(); ++i) {
    const double bytes = moment_bytes(moments[i]).at(micro_batch, seq_len);
    if (bytes > best_bytes) {
      best = i;
      best_bytes = bytes;
    }
  }
  return best;
}

namespace {
ModuleCosts moe_block_costs(const DecoderBlockShape& block, bool flash_attention);

// QK^T (2 x heads x head_dim FLOPs per query-key pair) and AV (2 x heads x v_head_dim):
// 4 x q_dim when v's head dim is q's and k's.
double attention_flops_per_token_per_position(const DecoderBlockShape& block) {
  const std::int64_t v_head_dim = block.is_mla() ? block.mla.v_head_dim : block.head_dim;
  return 2 * as_double(block.num_heads) * as_double(block.head_dim + v_head_dim);
}

AttentionSpec attention_spec(const DecoderBlockShape& block) {
  AttentionSpec a{static_cast<int>(block.num_heads), static_cast<int>(block.num_kv_heads),
                  static_cast<int>(block.head_dim), true, static_cast<double>(block.window)};
  if (block.is_mla()) a.v_head_dim = static_cast<int>(block.mla.v_head_dim);
  return a;
}
}  // namespace

// ---- Mixture-of-Experts ---------------------------------------------------------------------
//
// The routed part of a MoE layer as transformers' MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock
// and torchtitan's MoE run it, per token (n experts, k = top_k, fe the expert width):
//   router_logits = gate(x)                      (mm, h -> n; x is the MLP norm's output)
//   probs = softmax(router_logits.float())       (fp32, n; saved: softmax's backward reads its output)
//   weights, idx = topk(probs, k)                (fp32 k, int64 k; topk's backward scatters by idx)
//   xs = x[token of each (token, expert) pair]   (k copies of x, grouped by expert: the experts' input)
//   gate_up = grouped_mm(xs, gate_up_proj)       (2fe per copy; chunk(2) views keep it whole)
//   act = silu(gate) * up                        (SiLU output fe, product fe per copy)
//   ys = grouped_mm(act, down_proj)              (h per copy; saved: the weighting's backward reads it)
//   out = sum over the k copies of ys * weight   (index_add / scatter-add into h)
// Each expert's gated MLP keeps what a dense one keeps (saved_tensors: 8f), per routed copy.
std::vector<CostItem> moe_routed_saved_tensors(const DecoderBlockShape& block) {
  const double E = kActivationBytes, F = 4, ids = kTokenIdBytes;
  const double h = as_double(block.hidden_size), fe = as_double(block.moe.expert_ffn_size);
  const double n = block.moe.experts, k = block.moe.top_k;
  std::vector<CostItem> items = {
      {"router probabilities (fp32 softmax output): softmax's backward input", F * n, 0},
      {"top-k routing weights (fp32): the combine's scale", F * k, 0},
      {"top-k expert indices (int64): the dispatch and combine scatter by them", ids * k, 0},
      {"dispatched tokens, k copies of the hidden state: the experts' gate_up input", E * h * k, 0},
      {"experts' gate_up output (2fe per copy; chunk(2) views keep it whole)", E * 2 * fe * k, 0},
      {"experts' SiLU output: a factor of the product", E * fe * k, 0},
      {"experts' SiLU(gate)*up: the down projection's input", E * fe * k, 0},
      {"experts' outputs: the routing weights' gradient reads them", E * h * k, 0},
  };
  if (block.moe.shared_expert_gate)
    items.push_back({"shared expert gate's sigmoid output and the shared expert's output (the scale's two factors)",
                     E * (1 + h), 0});
  return items;
}

std::vector<CostItem> moe_routed_memory_bound_kernels(const DecoderBlockShape& block) {
  const double E = kActivationBytes, F = 4;
  const double h = as_double(block.hidden_size), fe = as_double(block.moe.expert_ffn_size);
  const double n = block.moe.experts, k = block.moe.top_k;
  std::vector<CostItem> items = {
      {"router softmax in fp32: read the logits 2n, write 4n", (E + F) * n, 0},
      {"top-k over the probabilities: read 4n, write k weights and indices", F * n + 12 * k, 0},
      {"dispatch: gather k copies of the hidden state (read and write h per copy)", 2 * E * h * k, 0},
      {"experts' SiLU(gate)*up: read 2fe, write fe per copy", 3 * E * fe * k, 0},
      {"combine: scale each copy by its weight (read, write h per copy)", 2 * E * h * k, 0},
      {"combine: sum the k copies into the output (read h per copy, write h)", E * h * (k + 1), 0},
  };
  if (block.moe.shared_expert_gate)
    items.push_back({"shared expert gate: sigmoid, scale the shared output, add (read 2h, write h)", 3 * E * h, 0});
  return items;
}

TransientLedger moe_routed_transients(const DecoderBlockShape& block) {
  const double E = kActivationBytes, F = 4;
  const double h = as_double(block.hidden_size), fe = as_double(block.moe.expert_ffn_size);
  const double n = block.moe.experts, k = block.moe.top_k;
  TransientLedger ledger;
  MomentList fw{ledger.forward, {}};
  fw.add("router: the bf16 logits while softmax writes the (saved) fp32 probabilities",
         {per_token("router logits", E * n)});
  fw.add("combine: the scaled copies while they are summed into the output",
         {per_token("expert outputs x routing weights", E * h * k), per_token("MoE output", E * h)});
  // Backward, in autograd order (the forward reversed); G, the residual stream's gradient, is
  // held throughout.
  MomentList bw{ledger.backward, {per_token("G: the residual stream's gradient", E * h)}};
  bw.add("combine backward: the gradient of the scaled copies, and of the unscaled outputs",
         {per_token("d(scaled copies)", E * h * k), per_token("d(expert outputs)", E * h * k)});
  bw.add("experts' down projection backward (grouped)",
         {per_token("d(expert outputs)", E * h * k), per_token("d(SiLU(gate)*up)", E * fe * k)});
  bw.add("experts' SiLU(gate)*up backward",
         {per_token("d(SiLU(gate)*up)", E * fe * k), per_token("d(SiLU output)", E * fe * k),
          per_token("d(up)", E * fe * k)});
  bw.add("experts' gate_up projection backward (grouped): d(gate_up) concatenated, d(dispatched tokens)",
         {per_token("d(gate_up output)", E * 2 * fe * k), per_token("d(dispatched tokens)", E * h * k)});
  bw.add("dispatch backward: the copies' gradients summed into the MLP norm output's gradient",
         {per_token("d(dispatched tokens)", E * h * k), per_token("d(MLP norm output)", E * h)});
  bw.add("router backward: softmax's fp32 gradient, the logits' gradient",
         {per_token("d(probabilities), fp32", F * n), per_token("d(router logits)", E * n),
          per_token("d(MLP norm output)", E * h)});
  return ledger;
}

double liger_eager_kernels_per_fused_kernel(const DecoderBlockShape& block, bool flash_attention) {
  // [Liger block kernels] Each of Liger's norms, its rotary (q and k in one launch) and its gated
  // activation is one kernel, as the listed fused kernels are; the eager copies left are
  // repeat_kv's of k and v, as calibration.json's count of an eager Llama block has them (24
  // eager kernels for its 6 listed: 4; under Liger 8 for 6).
  const double listed = static_cast<double>(memory_bound_kernels(block, flash_attention).size());
  if (!(listed > 0)) return 1;
  const bool repeat_kv = flash_attention && block.num_kv_heads != block.num_heads;
  return (listed + (repeat_kv ? 2 : 0)) / listed;
}

double eager_hbm_factor(const DecoderBlockShape& block, bool flash_attention) {
  // Bytes per element each eager chain moves beyond its fused kernel (calibration.json's
  // eager_memory_bound_factor source, counted on Llama's modeling code): a Python RMSNorm
  // 36 against 4; rotary (q * cos + rotate_half(q) * sin: mul, neg, cat, mul, add) 20 against
  // 4; SwiGLU as F.silu then the product, 10 against the fused 6 per f; gelu_new 36 against 4.
  constexpr double kPythonRmsNormExtra = 36 - 4, kRotaryExtra = 20 - 4, kGatedExtra = 10 - 6, kPythonGeluExtra = 36 - 4;
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), kv = as_double(block.kv_dim());
  double fused = 0;
  for (const CostItem& item : memory_bound_kernels(block, flash_attention)) fused += item.bytes_per_token;
  if (!(fused > 0)) return 1;
  double extra = 0;
  if (block.eager_elementwise.python_rms_norm) {
    const bool post_norms = norms_the_branch_outputs(block);
    const double h_norms = block.parallel_residual ? (block.one_parallel_norm ? 1 : 2)
                                                   : (sequential_norm_before_attention(block) ? 2 : 0) + (post_norms ? 2 : 0);
    double width = h_norms * h;
    if (block.qk_norm != DecoderBlockShape::QkNorm::none) width += q + kv;
    if (block.is_mla()) width += mla_widths(block).ql + mla_widths(block).c;
    extra += kPythonRmsNormExtra * width;
  }
  // [Liger block kernels] Liger's rotary and gated activation are the fused kernels counted in
  // `fused` (its RMSNorm clears python_rms_norm): nothing extra.
  if (block.is_mla()) {
    const MlaWidths w = mla_widths(block);
    extra += kRotaryExtra * (w.a * w.r + w.r);
  } else if (block.rotary && !block.liger) {
    extra += kRotaryExtra * (q + kv);
  }
  if (block.gated_mlp && !block.liger) extra += kGatedExtra * f;
  else if (block.eager_elementwise.python_gelu) extra += kPythonGeluExtra * f;
  // repeat_kv's copies of k and v before SDPA (eager attention lists them already).
  if (flash_attention && kv != q) extra += 2 * kActivationBytes * (kv + q);
  // Layout copies (read and write): the attention output's transpose(1, 2).contiguous() before
  // the output projection; with eager attention, torch.matmul folds [b, heads, s, d] operands
  // to 3-D with reshape, which copies q (a transposed view) and, where repeat_kv did not copy
  // them already (one query head per kv head), k and v.
  const double copy = 2 * kActivationBytes;
  extra += copy * as_double(block.attention_output_dim());
  if (!flash_attention) extra += copy * (q + (kv == q ? 2 * kv : 0));
  return (fused + extra) / fused;
}

namespace {

// Eager attention's backward reads and writes, per token per key, what its score chain's
// backward kernels move (DecoderBlockShape::EagerScoreChain), rather than the planner's default
// of twice the forward: dropout's backward (the gradient and the mask in, a gradient out), the
// cast's (16 bits in, fp32 out), _softmax_backward_data (the gradient and the saved output in,
// the input's gradient out), .float()'s, and the ops before the softmax that write a new
// gradient (as many bytes as their forward). AV's and QK^T's backward are GEMMs.
double eager_score_backward_bytes_per_key(const DecoderBlockShape& block) {
  using EagerSoftmax = DecoderBlockShape::EagerSoftmax;
  const double E = kActivationBytes, F = kFp32Bytes;
  double bytes = block.attention_dropout ? 2 * E + kMaskBytes : 0;
  switch (block.eager.softmax) {
    case EagerSoftmax::activation_dtype: bytes += 3 * E; break;
    case EagerSoftmax::fp32_output: bytes += (E + F) + (2 * F + E); break;
    case EagerSoftmax::fp32_input: bytes += (E + F) + 3 * F + (F + E); break;
  }
  for (const DecoderBlockShape::EagerScoreOp& op : block.eager.before_softmax)
    if (op.backward_writes_new_gradient) bytes += op.read_bytes + op.write_bytes + (op.saves_output ? E : 0);
  return bytes * as_double(block.num_heads);
}

// An eager block's backward traffic: twice the forward's per-token bytes (the planner's rule,
// docs/cost-model.md) and the score chain's backward bytes.
Polynomial eager_block_backward_hbm_bytes(const Polynomial& forward, const DecoderBlockShape& block) {
  Polynomial p;
  for (const Polynomial::Term& t : forward.terms)
    if (t.s_pow < 2) p += monomial(2 * t.coeff, t.b_pow, t.s_pow);
  p += monomial(eager_score_backward_bytes_per_key(block), 1, 2);
  return p;
}

}  // namespace

ModuleCosts decoder_block_costs(const DecoderBlockShape& block, bool flash_attention) {
  if (block.is_moe()) return moe_block_costs(block, flash_attention);
  ModuleCosts c;
  c.attention_flops = monomial(attention_flops_per_token_per_position(block), 1, 2);
  c.forward_flops = monomial(2 * as_double(block.matmul_weights()), 1, 1);
  c.forward_flops += c.attention_flops;
  const std::vector<CostItem> kernels = memory_bound_kernels(block, flash_attention);
  c.forward_hbm_bytes = ledger_polynomial(kernels);
  if (!flash_attention) c.backward_hbm_bytes = eager_block_backward_hbm_bytes(c.forward_hbm_bytes, block);
  c.eager_hbm_factor = eager_hbm_factor(block, flash_attention);
  if (block.liger) c.eager_kernels_per_fused_kernel = liger_eager_kernels_per_fused_kernel(block, flash_attention);
  for (const CostItem& item : kernels) c.memory_bound_kernels.push_back(ledger_polynomial({item}));
  c.saved_activation_bytes = ledger_polynomial(saved_tensors(block, flash_attention));
  c.input_bytes = monomial(kActivationBytes * as_double(block.hidden_size), 1, 1);
  // Op-level SAC has no ledger for MLA (its low-rank path's mm outputs): no sac_* costs, so the
  // planner refuses "selective" for the model, as for MoE blocks.
  if (!block.is_mla()) {
    c.sac_saved_activation_bytes = ledger_polynomial(sac_saved_tensors(block, flash_attention));
    c.sac_unread_bytes = ledger_polynomial(sac_unread_saved_tensors(block, flash_attention));
    for (const FlopItem& item : sac_recomputed_matmuls(block, flash_attention)) {
      c.sac_recompute_flops += monomial(item.flops_per_token, 1, 1);
      c.sac_recompute_flops += monomial(item.flops_per_token_per_position, 1, 2);
    }
  }
  const TransientLedger transients = block_transients(block, flash_attention);
  c.forward_transient_bytes = peak_transient_bytes(transients.forward);
  c.backward_transient_bytes = peak_transient_bytes(transients.backward);
  c.transient_tensor_bytes = largest_transient_tensor(transients);
  const std::vector<BlockMatmul> matmuls = block_matmuls(block);
  const std::vector<bool> recomputed = sac_recomputes_matmul(block, matmuls);
  for (std::size_t i = 0; i < matmuls.size(); ++i) {
    const double out = matmuls[i].output_elements_per_token;
    c.matmuls.push_back({matmuls[i].name, matmuls[i].multiply_adds_per_token / out, out,
                         !block.is_mla() && recomputed[i]});
  }
  c.attention = attention_spec(block);
  c.launch_order = launch_order_of(kernels, matmuls);  // a dense block (MoE blocks return above)
  return c;
}

namespace {

// A MoE block: the dense ledgers of its attention half and shared experts, plus the routed part.
// Every moment is per token (flash or eager attention alike for the routed part), so the
// coefficient-wise maximum over the two ledgers' moments is the exact peak of the dense half's
// b*s^2 moments and the routed moments together.
ModuleCosts moe_block_costs(const DecoderBlockShape& block, bool flash_attention) {
  ModuleCosts c;
  const double h = as_double(block.hidden_size), fe = as_double(block.moe.expert_ffn_size);
  c.attention_flops = monomial(attention_flops_per_token_per_position(block), 1, 2);
  c.forward_flops = monomial(2 * as_double(block.matmul_weights()), 1, 1);
  c.forward_flops += c.attention_flops;
  std::vector<CostItem> saved = saved_tensors(block, flash_attention);
  for (const CostItem& item : moe_routed_saved_tensors(block)) saved.push_back(item);
  std::vector<CostItem> kernels = memory_bound_kernels(block, flash_attention);
  double dense = 0;  // the attention half's and shared experts' bytes per token
  for (const CostItem& item : kernels) dense += item.bytes_per_token;
  for (const CostItem& item : moe_routed_memory_bound_kernels(block)) kernels.push_back(item);
  c.forward_hbm_bytes = ledger_polynomial(kernels);
  if (!flash_attention) c.backward_hbm_bytes = eager_block_backward_hbm_bytes(c.forward_hbm_bytes, block);
  {
    // The attention half's eager chains, counted by eager_hbm_factor; the routed experts' kernels
    // are taken at their fused bytes (their eager chains are not counted).
    double all = 0;
    for (const CostItem& item : kernels) all += item.bytes_per_token;
    if (all > 0) c.eager_hbm_factor = 1 + (eager_hbm_factor(block, flash_attention) - 1) * dense / all;
  }
  for (const CostItem& item : kernels) c.memory_bound_kernels.push_back(ledger_polynomial({item}));
  c.saved_activation_bytes = ledger_polynomial(saved);
  c.input_bytes = monomial(kActivationBytes * h, 1, 1);
  TransientLedger transients = block_transients(block, flash_attention);
  const TransientLedger routed = moe_routed_transients(block);
  transients.forward.insert(transients.forward.end(), routed.forward.begin(), routed.forward.end());
  transients.backward.insert(transients.backward.end(), routed.backward.begin(), routed.backward.end());
  c.forward_transient_bytes = peak_transient_bytes(transients.forward);
  c.backward_transient_bytes = peak_transient_bytes(transients.backward);
  c.transient_tensor_bytes = largest_transient_tensor(transients);
  // Attention (and shared experts), the router, then the routed experts; SAC flags unused.
  for (const BlockMatmul& m : block_matmuls(block)) {
    const double out = m.output_elements_per_token;
    c.matmuls.push_back({m.name, m.multiply_adds_per_token / out, out, false, false});
  }
  c.matmuls.push_back({"router (gate)", h, static_cast<double>(block.moe.experts), false, false});
  if (block.moe.shared_expert_gate) c.matmuls.push_back({"shared expert gate", h, 1, false, false});
  c.matmuls.push_back({"experts' gate_up projection", h, 2 * fe, false, true});
  c.matmuls.push_back({"experts' down projection", fe, h, false, true});
  c.moe = MoeSpec{block.moe.experts, block.moe.top_k, block.hidden_size};
  c.attention = attention_spec(block);
  return c;
}

}  // namespace

ModuleCosts token_embedding_costs(std::int64_t hidden_size, bool adds_position_embedding,
                                  bool embedding_dropout, bool scales_output) {
  const double E = kActivationBytes, h = as_double(hidden_size);
  ModuleCosts c;
  // The gather reads a row per token and writes it; the ids are read once.
  c.forward_hbm_bytes = monomial(kTokenIdBytes + 2 * E * h, 1, 1);
  // Backward scatters the gradient rows by token id: the ids are saved.
  c.saved_activation_bytes = monomial(kTokenIdBytes, 1, 1);
  if (adds_position_embedding) {
    // Position rows are gathered once per sequence position (shape (1, s, h)), then added.
    c.forward_hbm_bytes += monomial(kTokenIdBytes + 2 * E * h, 0, 1);
    c.forward_hbm_bytes += monomial(3 * E * h, 1, 1);
    c.saved_activation_bytes += monomial(kTokenIdBytes, 0, 1);
  }
  if (embedding_dropout) {
    c.forward_hbm_bytes += monomial((2 * E + kMaskBytes) * h, 1, 1);
    c.saved_activation_bytes += monomial(kMaskBytes * h, 1, 1);
  }
  // The scaling reads the gathered rows and writes the scaled ones (a multiply by a constant
  // saves nothing for backward).
  if (scales_output) c.forward_hbm_bytes += monomial(2 * E * h, 1, 1);
  c.input_bytes = monomial(kTokenIdBytes, 1, 1);
  const TransientLedger transients =
      token_embedding_transients(hidden_size, adds_position_embedding, embedding_dropout, scales_output);
  c.forward_transient_bytes = peak_transient_bytes(transients.forward);
  c.backward_transient_bytes = peak_transient_bytes(transients.backward);
  c.transient_tensor_bytes = largest_transient_tensor(transients);
  return c;
}

ModuleCosts final_norm_costs(std::int64_t hidden_size, bool python_rms_norm) {
  const double E = kActivationBytes, h = as_double(hidden_size);
  ModuleCosts c;
  c.forward_hbm_bytes = monomial(2 * E * h, 1, 1);
  std::vector<CostItem> saved;  // [Python RMSNorm]: its fp32 copy, rsqrt and cast; else its input
  add_norm_saved_tensors(saved, "final norm", "the norm's input", h, 1, python_rms_norm);
  c.saved_activation_bytes = ledger_polynomial(saved);
  c.input_bytes = monomial(E * h, 1, 1);
  const TransientLedger transients = final_norm_transients(hidden_size);
  c.forward_transient_bytes = peak_transient_bytes(transients.forward);
  c.backward_transient_bytes = peak_transient_bytes(transients.backward);
  c.transient_tensor_bytes = largest_transient_tensor(transients);
  return c;
}

ModuleCosts lm_head_costs(std::int64_t hidden_size, std::int64_t vocab_size, LossKind kind, double tokens,
                          bool logit_softcap, bool compiled_loss) {
  const LossShape x = loss_shape(hidden_size, vocab_size, kind, tokens, logit_softcap, compiled_loss);
  const double E = kActivationBytes, h = x.h, V = x.V;
  ModuleCosts c;
  c.forward_flops = monomial(2 * h * V, 1, 1);
  c.matmuls.push_back({"output projection (logits)", h, V, false});
  c.input_bytes = monomial(E * h, 1, 1);
  // torchtune's chunks run eagerly do fp32_upcast's work and keep what it keeps, an eighth of the
  // tokens at a time (chunked_output_loss_transients has what differs: the transients).
  const bool eager_chunks = kind == LossKind::chunked_output && !x.compiled;
  switch (eager_chunks ? LossKind::fp32_upcast : kind) {
    case LossKind::fp32_upcast:
      // Cast of the logits to fp32 (read 2V, write 4V) and a log-softmax over them (read and
      // write 4V); the GEMM's own output is priced by its FLOPs.
      c.forward_hbm_bytes = monomial((E + kLogitBytes) * V + 2 * kLogitBytes * V, 1, 1);
      // The projection keeps its input; the cross-entropy keeps its fp32 log-probabilities
      // (Korthikanti et al. 2022, section 4.3: 2sbh + 4sbv).
      c.saved_activation_bytes = monomial(E * h + kLogitBytes * V, 1, 1);
      break;
    case LossKind::bf16:
      // A log-softmax over the 16-bit logits (read and write 2V); its 16-bit output is saved.
      c.forward_hbm_bytes = monomial(2 * E * V, 1, 1);
      c.saved_activation_bytes = monomial(E * h + E * V, 1, 1);
      break;
    case LossKind::fused:
      // Forward reads the logits once; backward reads them and writes their gradient (the
      // default 2x forward). Per-row outputs (12 bytes per token) are neglected. Saved: the
      // projection's input, the 16-bit logits and the fp32 log-sum-exp per row.
      c.forward_hbm_bytes = monomial(E * V, 1, 1);
      c.saved_activation_bytes = monomial(E * h + E * V + kFp32Bytes, 1, 1);
      break;
    case LossKind::chunked: {
      // Forward runs the logits' GEMM and both gradient GEMMs (grad_input, grad_weight: 2hV
      // each); backward runs nothing. Memory-bound per token: grad_input zeroed (2h), the CE
      // kernel's two reads and one write of the chunk's logits (3 x 2V), the slice copy of the
      // chunk's input gradient (read and write 2h); per chunk: .float() of the V x h product
      // (read 2Vh, write 4Vh) and the accumulation into grad_weight (read 2Vh + 4Vh, write 2Vh);
      // once: grad_weight zeroed (2Vh).
      const double chunk = liger_chunk_tokens(x.tokens, hidden_size, vocab_size);
      const double chunks = std::ceil(x.tokens / chunk);
      c.forward_kernel_flops = monomial(3 * 2 * h * V, 1, 1);
      c.backward_flops = Polynomial{};
      c.backward_hbm_bytes = Polynomial{};
      c.forward_hbm_bytes = monomial(3 * E * h + 3 * E * V, 1, 1);
      c.forward_hbm_bytes += monomial(E * V * h + chunks * (E + kFp32Bytes + kFp32Bytes + 2 * E) * V * h, 0, 0);
      // Kept for backward: grad_input (the input is not saved).
      c.saved_activation_bytes = monomial(E * h, 1, 1);
      break;
    }
    case LossKind::cut:
      // Forward: the log-sum-exp GEMM (2hV) and the targets' dot products (2h); backward
      // recomputes the logits (2hV) and runs both gradient GEMMs (4hV), an upper bound: the
      // default filter_eps skips tiles whose softmax gradient rounds to zero, which depends on
      // the data. No V-wide tensor reaches HBM; backward zeroes de (2h per token) and dc (2Vh).
      c.forward_kernel_flops = monomial(2 * h * V + 2 * h, 1, 1);
      c.backward_flops = monomial(3 * 2 * h * V, 1, 1);
      c.backward_hbm_bytes = monomial(E * h, 1, 1);
      *c.backward_hbm_bytes += monomial(E * V * h, 0, 0);
      // Saved: the input e, the fp32 log-sum-exp per token, the fp32 mean logit per vocabulary entry.
      c.saved_activation_bytes = monomial(E * h + kFp32Bytes, 1, 1);
      c.saved_activation_bytes += monomial(kFp32Bytes * V, 0, 0);
      break;
    case LossKind::chunked_output:
      // Each chunk's compiled forward reads its 16-bit logits twice (a looped max, then the sum of
      // exponentials); its backward reads them once and writes their gradient. Saved: the
      // projection's input, the 16-bit logits and an fp32 statistic per row
      // (chunked_output_loss_transients).
      c.forward_hbm_bytes = monomial(2 * E * V, 1, 1);
      c.backward_hbm_bytes = monomial(2 * E * V, 1, 1);
      c.saved_activation_bytes = monomial(E * h + E * V + kFp32Bytes, 1, 1);
      break;
  }
  if (logit_softcap) {
    // logits / cap, tanh, * cap: each reads and writes the 16-bit logits; tanh keeps its output.
    c.forward_hbm_bytes += monomial(3 * 2 * E * V, 1, 1);
    c.saved_activation_bytes += monomial(E * V, 1, 1);
  }
  const TransientLedger transients = loss_transients(x, kind);
  c.forward_transient_bytes = peak_transient_bytes(transients.forward);
  c.backward_transient_bytes = peak_transient_bytes(transients.backward);
  if (transients.weight_gradient_moment > 0)
    c.backward_transient_after_grads_bytes = peak_transient_bytes(std::vector<TransientMoment>(
        transients.backward.begin() + transients.weight_gradient_moment, transients.backward.end()));
  c.transient_tensor_bytes = largest_transient_tensor(transients);
  c.loss = LossHead{vocab_size, hidden_size, kind, logit_softcap};
  return c;
}

nlohmann::json polynomial_to_json(const Polynomial& polynomial) {
  Polynomial merged;
  merged += polynomial;  // one entry per monomial
  nlohmann::json out = nlohmann::json::object();
  for (const Polynomial::Term& t : merged.terms) {
    if (t.coeff == 0) continue;
    const std::string key = Polynomial::monomial_name(t.b_pow, t.s_pow);
    const bool integral = std::floor(t.coeff) == t.coeff && std::fabs(t.coeff) < 9.0e15;
    if (integral) {
      out[key] = static_cast<std::int64_t>(t.coeff);
    } else {
      out[key] = t.coeff;
    }
  }
  return out;
}

nlohmann::json costs_to_json(const ModuleCosts& costs, const std::string& source) {
  nlohmann::json out = nlohmann::json::object();
  auto put = [&](const char* key, const Polynomial& p) {
    nlohmann::json value = polynomial_to_json(p);
    if (!value.empty()) out[key] = std::move(value);
  };
  put("forward_flops", costs.forward_flops);
  put("attention_flops", costs.attention_flops);
  put("forward_hbm_bytes", costs.forward_hbm_bytes);
  if (!costs.memory_bound_kernels.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const Polynomial& p : costs.memory_bound_kernels) list.push_back(polynomial_to_json(p));
    out["memory_bound_kernels"] = std::move(list);
  }
  if (!costs.launch_order.empty()) out["launch_order"] = costs.launch_order;
  put("saved_activation_bytes", costs.saved_activation_bytes);
  put("input_bytes", costs.input_bytes);
  put("sac_saved_activation_bytes", costs.sac_saved_activation_bytes);
  put("sac_recompute_flops", costs.sac_recompute_flops);
  put("sac_unread_bytes", costs.sac_unread_bytes);
  put("forward_transient_bytes", costs.forward_transient_bytes);
  put("backward_transient_bytes", costs.backward_transient_bytes);
  put("backward_transient_after_grads_bytes", costs.backward_transient_after_grads_bytes);
  put("transient_tensor_bytes", costs.transient_tensor_bytes);
  if (!costs.matmuls.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const Matmul& m : costs.matmuls) {
      nlohmann::json j = {{"name", m.name},
                          {"in", static_cast<std::int64_t>(m.in_features)},
                          {"out", static_cast<std::int64_t>(m.out_features)}};
      if (m.sac_recomputed) j["sac_recomputed"] = true;
      if (m.routed) j["routed"] = true;
      list.push_back(std::move(j));
    }
    out["matmuls"] = std::move(list);
  }
  if (costs.attention) {
    const AttentionSpec& a = *costs.attention;
    out["attention"] = {{"heads", a.heads}, {"kv_heads", a.kv_heads}, {"head_dim", a.head_dim}, {"causal", a.causal}};
    if (a.v_head_dim > 0 && a.v_head_dim != a.head_dim) out["attention"]["v_head_dim"] = a.v_head_dim;
    if (a.window > 0) {
      if (std::floor(a.window) == a.window && a.window < 9.0e15) {
        out["attention"]["window"] = static_cast<std::int64_t>(a.window);
      } else {
        out["attention"]["window"] = a.window;
      }
    }
  }
  if (costs.moe)
    out["moe"] = {{"experts", costs.moe->experts}, {"top_k", costs.moe->top_k}, {"hidden_size", costs.moe->hidden_size}};
  // Set but zero (a backward that runs nothing) is written as an empty object.
  if (costs.forward_kernel_flops) out["forward_kernel_flops"] = polynomial_to_json(*costs.forward_kernel_flops);
  if (costs.backward_flops) out["backward_flops"] = polynomial_to_json(*costs.backward_flops);
  if (costs.backward_hbm_bytes) out["backward_hbm_bytes"] = polynomial_to_json(*costs.backward_hbm_bytes);
  if (costs.eager_hbm_factor) out["eager_hbm_factor"] = *costs.eager_hbm_factor;
  if (costs.eager_kernels_per_fused_kernel) out["eager_kernels_per_fused_kernel"] = *costs.eager_kernels_per_fused_kernel;
  if (costs.loss) {
    out["loss"] = {{"vocab_size", costs.loss->vocab_size},
                   {"hidden_size", costs.loss->hidden_size},
                   {"kind", loss_kind_name(costs.loss->kind)}};
    if (costs.loss->logit_softcap) out["loss"]["logit_softcap"] = true;
  }
  if (!source.empty()) out["source"] = source;
  return out;
}

}  // namespace fsdpsim::models
