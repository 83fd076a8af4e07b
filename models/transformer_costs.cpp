#include "models/transformer_costs.h"

#include <cmath>

namespace fsdpsim::models {

namespace {

// 16-bit activations; dropout masks are bytes; token ids are int64.
constexpr double kActivationBytes = 2;
constexpr double kMaskBytes = 1;
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
  }
  return p;
}

double as_double(std::int64_t n) { return static_cast<double>(n); }

}  // namespace

std::int64_t DecoderBlockShape::matmul_weights() const {
  const std::int64_t h = hidden_size, f = ffn_hidden_size;
  const std::int64_t attention = h * q_dim() + 2 * h * kv_dim() + q_dim() * h;  // q, k, v, out
  const std::int64_t mlp = (gated_mlp ? 3 : 2) * h * f;                           // (gate,) up, down
  return attention + mlp;
}

std::vector<CostItem> saved_tensors(const DecoderBlockShape& block, bool flash_attention) {
  const double E = kActivationBytes;
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), a = as_double(block.num_heads);
  // Flash attention handles GQA natively and saves k and v at their own size; the eager
  // path (Hugging Face's repeat_kv) materializes them per query head before the matmuls.
  const double kv = flash_attention ? as_double(block.kv_dim()) : q;
  std::vector<CostItem> items;
  if (block.parallel_residual) {
    items.push_back({"block input x: the input of both norms (one tensor)", E * h, 0});
  } else {
    items.push_back({"block input x: the attention norm's input", E * h, 0});
  }
  items.push_back({"attention norm output: the q/k/v projections' input", E * h, 0});
  items.push_back({"q (after rotary): an operand of QK^T", E * q, 0});
  items.push_back({"k (after rotary): an operand of QK^T", E * kv, 0});
  items.push_back({"v: an operand of AV", E * kv, 0});
  if (!flash_attention) {
    // Korthikanti's 5as/h: softmax output 2, dropout mask 1, dropout output 2 (x a*s^2*b).
    items.push_back({"softmax output: softmax's backward input and the AV operand", 0, E * a});
    if (block.attention_dropout) {
      items.push_back({"attention dropout mask", 0, kMaskBytes * a});
      items.push_back({"attention dropout output: the AV operand", 0, E * a});
    }
  }
  items.push_back({"attention output: the output projection's input", E * q, 0});
  if (block.residual_dropout) items.push_back({"attention output dropout mask", kMaskBytes * h, 0});
  if (!block.parallel_residual)
    items.push_back({"x + attention: the MLP norm's input", E * h, 0});
  items.push_back({"MLP norm output: the MLP's input", E * h, 0});
  if (block.gated_mlp) {
    items.push_back({"gate projection output: SiLU's input", E * f, 0});
    items.push_back({"SiLU output: a factor of the product", E * f, 0});
    items.push_back({"up projection output: a factor of the product", E * f, 0});
    items.push_back({"SiLU(gate)*up: the down projection's input", E * f, 0});
  } else {
    items.push_back({"fc1 output: GELU's input", E * f, 0});
    items.push_back({"GELU output: fc2's input", E * f, 0});
  }
  if (block.residual_dropout) items.push_back({"MLP output dropout mask", kMaskBytes * h, 0});
  return items;
}

std::vector<CostItem> memory_bound_kernels(const DecoderBlockShape& block, bool flash_attention) {
  const double E = kActivationBytes;
  const double h = as_double(block.hidden_size), f = as_double(block.ffn_hidden_size);
  const double q = as_double(block.q_dim()), kv = as_double(block.kv_dim());
  const double a = as_double(block.num_heads);
  // A dropout reads and writes the tensor and writes its mask.
  const double dropout_per_element = 2 * E + kMaskBytes;
  std::vector<CostItem> items;
  items.push_back({"attention norm: read x, write the normalized x", 2 * E * h, 0});
  if (block.rotary) items.push_back({"rotary embedding: read and write q and k", 2 * E * (q + kv), 0});
  if (!flash_attention) {
    // Flash attention keeps the scores on chip and is priced by its FLOPs; unfused, the
    // score matrix goes through HBM.
    items.push_back({"scale, causal mask and softmax on the scores (fused): read, write", 0, 2 * E * a});
    if (block.alibi) items.push_back({"ALiBi bias add on the scores: read, write", 0, 2 * E * a});
    if (block.attention_dropout)
      items.push_back({"attention dropout on the probabilities", 0, dropout_per_element * a});
  }
  if (block.residual_dropout)
    items.push_back({"attention output dropout", dropout_per_element * h, 0});
  if (!block.parallel_residual)
    items.push_back({"residual add x + attention: read 2, write 1", 3 * E * h, 0});
  items.push_back({"MLP norm: read, write", 2 * E * h, 0});
  if (block.gated_mlp) {
    items.push_back({"SiLU(gate)*up: read 2f, write f", 3 * E * f, 0});
  } else {
    items.push_back({"GELU: read f, write f", 2 * E * f, 0});
  }
  if (block.residual_dropout) items.push_back({"MLP output dropout", dropout_per_element * h, 0});
  if (block.parallel_residual) {
    items.push_back({"x + attention + MLP: two adds, read 2, write 1 each", 6 * E * h, 0});
  } else {
    items.push_back({"residual add + MLP: read 2, write 1", 3 * E * h, 0});
  }
  return items;
}

ModuleCosts decoder_block_costs(const DecoderBlockShape& block, bool flash_attention) {
  ModuleCosts c;
  const double attention_per_token_per_position = 4 * as_double(block.q_dim());
  c.attention_flops = monomial(attention_per_token_per_position, 1, 2);
  c.forward_flops = monomial(2 * as_double(block.matmul_weights()), 1, 1);
  c.forward_flops += c.attention_flops;
  c.forward_hbm_bytes = ledger_polynomial(memory_bound_kernels(block, flash_attention));
  c.saved_activation_bytes = ledger_polynomial(saved_tensors(block, flash_attention));
  c.input_bytes = monomial(kActivationBytes * as_double(block.hidden_size), 1, 1);
  return c;
}

ModuleCosts token_embedding_costs(std::int64_t hidden_size, bool adds_position_embedding,
                                  bool embedding_dropout) {
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
  c.input_bytes = monomial(kTokenIdBytes, 1, 1);
  return c;
}

ModuleCosts final_norm_costs(std::int64_t hidden_size) {
  const double E = kActivationBytes, h = as_double(hidden_size);
  ModuleCosts c;
  c.forward_hbm_bytes = monomial(2 * E * h, 1, 1);
  c.saved_activation_bytes = monomial(E * h, 1, 1);  // the norm's input
  c.input_bytes = monomial(E * h, 1, 1);
  return c;
}

ModuleCosts lm_head_costs(std::int64_t hidden_size, std::int64_t vocab_size) {
  const double E = kActivationBytes, h = as_double(hidden_size), V = as_double(vocab_size);
  ModuleCosts c;
  c.forward_flops = monomial(2 * h * V, 1, 1);
  // Cast of the logits to fp32 (read 2V, write 4V) and a log-softmax over them (read and
  // write 4V); the GEMM's own output is priced by its FLOPs.
  c.forward_hbm_bytes = monomial((E + kLogitBytes) * V + 2 * kLogitBytes * V, 1, 1);
  // The projection keeps its input; the cross-entropy keeps its fp32 log-probabilities
  // (Korthikanti et al. 2022, section 4.3: 2sbh + 4sbv).
  c.saved_activation_bytes = monomial(E * h + kLogitBytes * V, 1, 1);
  c.input_bytes = monomial(E * h, 1, 1);
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
  put("saved_activation_bytes", costs.saved_activation_bytes);
  put("input_bytes", costs.input_bytes);
  if (!source.empty()) out["source"] = source;
  return out;
}

}  // namespace fsdpsim::models
