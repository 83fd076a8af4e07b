#include "models/hf_import.h"

#include <cmath>
#include <filesystem>

#include "models/json_input.h"
#include "models/transformer_costs.h"

namespace fsdpsim::models {

namespace {

using nlohmann::json;

// Larger dimensions are typos. The cap keeps every product of two dimensions (weight
// sizes, FLOP coefficients) exact in int64 and in double.
constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;
// Real models have a few hundred layers; the cap keeps the expanded tree small.
constexpr std::int64_t kMaxLayers = 10000;

enum class Family { llama, mistral, qwen2, gpt2, gpt_neox, mpt };

struct FamilyName {
  Family family;
  const char* model_type;
  const char* architecture;  // the causal-LM class, the root module's type
};

// Hugging Face's port of MPT names its class MptForCausalLM; MosaicML's configs say MPTForCausalLM.
constexpr FamilyName kFamilies[] = {
    {Family::llama, "llama", "LlamaForCausalLM"},     {Family::mistral, "mistral", "MistralForCausalLM"},
    {Family::qwen2, "qwen2", "Qwen2ForCausalLM"},     {Family::gpt2, "gpt2", "GPT2LMHeadModel"},
    {Family::gpt_neox, "gpt_neox", "GPTNeoXForCausalLM"}, {Family::mpt, "mpt", "MPTForCausalLM"},
};

const FamilyName& family_name(Family family) {
  for (const FamilyName& f : kFamilies)
    if (f.family == family) return f;
  return kFamilies[0];
}

std::string supported_list() {
  std::string list;
  for (const FamilyName& f : kFamilies) list += (list.empty() ? "" : ", ") + std::string(f.model_type);
  return list;
}

// What the module builders need, read and checked from the config.
struct HfArch {
  Family family = Family::llama;
  DType dtype = DType::fp32;
  std::int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  std::int64_t max_seq = 0;
  bool tie = false;
  bool qkv_bias = false, out_bias = false, mlp_bias = false, norm_bias = false;
  double attention_dropout = 0, residual_dropout = 0, embedding_dropout = 0;
  bool parallel_residual = false;
  bool position_embedding = false;  // learned absolute positions (GPT-2; MPT without ALiBi)
  bool alibi = false;
  std::string norm_type;

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t kv_dim() const { return kv_heads * head_dim; }
  bool llama_like() const {
    return family == Family::llama || family == Family::mistral || family == Family::qwen2;
  }
};

// ---- reading the config ----------------------------------------------------------

std::int64_t dimension(JsonReader& r, const std::string& key) {
  std::int64_t n = r.positive_integer(key);
  if (n > kMaxDimension)
    r.fail(key, "expected at most " + std::to_string(kMaxDimension) + ", got " + std::to_string(n));
  return n;
}

std::int64_t dimension_or(JsonReader& r, const std::string& key, std::int64_t fallback) {
  return r.has(key) ? dimension(r, key) : fallback;
}

std::int64_t layer_count(JsonReader& r, const std::string& key) {
  std::int64_t n = r.positive_integer(key);
  if (n > kMaxLayers)
    r.fail(key, "expected at most " + std::to_string(kMaxLayers) + " layers, got " + std::to_string(n));
  return n;
}

double probability(JsonReader& r, const std::string& key, double fallback) {
  double p = r.number_or(key, fallback);
  if (p < 0 || p > 1) r.fail(key, "expected a dropout probability in [0, 1], got " + describe_json(r.raw(key)));
  return p;
}

// Parameter dtype: torch_dtype (or "dtype", its newer name), the dtype the checkpoint is
// stored in; fp32 when absent, as transformers loads without a torch_dtype argument.
DType read_dtype(JsonReader& r) {
  for (const std::string key : {"torch_dtype", "dtype"}) {
    if (!r.has(key)) {
      r.ignore(key);
      continue;
    }
    std::string name = r.string(key);
    if (name.rfind("torch.", 0) == 0) name = name.substr(6);
    auto dtype = parse_dtype(name);
    if (!dtype) r.fail(key, "expected float32, bfloat16 or float16; got \"" + name + "\"");
    return *dtype;
  }
  return DType::fp32;
}

// Heads and head size; head_dim defaults to hidden/heads, which must then divide evenly.
void read_heads(JsonReader& r, HfArch& a, const std::string& heads_key, const std::string& kv_key,
                bool reads_head_dim) {
  a.heads = dimension(r, heads_key);
  a.kv_heads = kv_key.empty() ? a.heads : dimension_or(r, kv_key, a.heads);
  if (a.heads % a.kv_heads != 0)
    r.fail(kv_key, "expected a divisor of " + heads_key + " (" + std::to_string(a.heads) + "), got " +
                       std::to_string(a.kv_heads));
  if (reads_head_dim && r.has("head_dim")) {
    a.head_dim = dimension(r, "head_dim");
  } else {
    if (a.hidden % a.heads != 0)
      r.fail(heads_key, "expected a divisor of the hidden size (" + std::to_string(a.hidden) + "), got " +
                            std::to_string(a.heads));
    a.head_dim = a.hidden / a.heads;
  }
  if (a.q_dim() > kMaxDimension)
    r.fail(reads_head_dim && r.has("head_dim") ? "head_dim" : heads_key,
           "heads x head_dim exceeds " + std::to_string(kMaxDimension));
}

void check_ffn(JsonReader& r, const HfArch& a, const std::string& key) {
  if (a.ffn < 1 || a.ffn > kMaxDimension)
    r.fail(key, "gives an MLP width of " + std::to_string(a.ffn) + "; expected 1.." + std::to_string(kMaxDimension));
}

// Llama, Mistral, Qwen2: RMSNorm, rotary, SwiGLU, optional GQA. Defaults are those of the
// transformers config classes.
HfArch read_llama_like(JsonReader& r, Family family) {
  HfArch a;
  a.family = family;
  a.hidden = dimension(r, "hidden_size");
  a.layers = layer_count(r, "num_hidden_layers");
  read_heads(r, a, "num_attention_heads", "num_key_value_heads", true);
  a.ffn = dimension(r, "intermediate_size");
  a.vocab = dimension(r, "vocab_size");
  const std::int64_t default_positions = family == Family::llama     ? 2048
                                         : family == Family::mistral ? 4096 * 32
                                                                     : 32768;
  a.max_seq = dimension_or(r, "max_position_embeddings", default_positions);
  a.tie = r.boolean_or("tie_word_embeddings", false);
  const bool attention_bias = r.boolean_or("attention_bias", false);
  if (family == Family::qwen2) {
    // Qwen2Attention: q, k, v with biases, o_proj without, whatever the config says.
    a.qkv_bias = true;
    a.out_bias = false;
  } else {
    a.qkv_bias = a.out_bias = attention_bias;
  }
  a.mlp_bias = r.boolean_or("mlp_bias", false);
  a.attention_dropout = probability(r, "attention_dropout", 0);
  a.norm_type = "RMSNorm";
  return a;
}

HfArch read_gpt2(JsonReader& r) {
  HfArch a;
  a.family = Family::gpt2;
  a.hidden = dimension(r, "n_embd");
  a.layers = layer_count(r, "n_layer");
  read_heads(r, a, "n_head", "", false);
  a.vocab = dimension(r, "vocab_size");
  a.max_seq = dimension_or(r, "n_positions", 1024);
  a.ffn = r.has("n_inner") ? dimension(r, "n_inner") : 4 * a.hidden;  // null means 4h
  check_ffn(r, a, "n_inner");
  a.tie = r.boolean_or("tie_word_embeddings", true);
  a.qkv_bias = a.out_bias = a.mlp_bias = a.norm_bias = true;
  a.attention_dropout = probability(r, "attn_pdrop", 0.1);
  a.residual_dropout = probability(r, "resid_pdrop", 0.1);
  a.embedding_dropout = probability(r, "embd_pdrop", 0.1);
  a.position_embedding = true;
  a.norm_type = "LayerNorm";
  return a;
}

HfArch read_gpt_neox(JsonReader& r) {
  HfArch a;
  a.family = Family::gpt_neox;
  a.hidden = dimension(r, "hidden_size");
  a.layers = layer_count(r, "num_hidden_layers");
  read_heads(r, a, "num_attention_heads", "", false);
  a.ffn = dimension(r, "intermediate_size");
  a.vocab = dimension(r, "vocab_size");
  a.max_seq = dimension_or(r, "max_position_embeddings", 2048);
  a.tie = r.boolean_or("tie_word_embeddings", false);
  a.parallel_residual = r.boolean_or("use_parallel_residual", true);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", true);
  a.mlp_bias = a.norm_bias = true;
  a.attention_dropout = probability(r, "attention_dropout", 0);
  a.residual_dropout = probability(r, "hidden_dropout", 0);
  a.embedding_dropout = a.residual_dropout;  // GPTNeoXModel.emb_dropout uses hidden_dropout
  double rotary_pct = r.number_or("rotary_pct", 0.25);
  if (!(rotary_pct > 0 && rotary_pct <= 1)) r.fail("rotary_pct", "expected a fraction in (0, 1]");
  a.norm_type = "LayerNorm";
  return a;
}

// MosaicML's MPT: d_model/n_heads/n_layers/expansion_ratio, attention options in
// attn_config, no biases anywhere when no_bias (the default of Hugging Face's MptConfig).
HfArch read_mpt(JsonReader& r) {
  HfArch a;
  a.family = Family::mpt;
  a.hidden = dimension(r, "d_model");
  a.layers = layer_count(r, "n_layers");
  a.vocab = dimension(r, "vocab_size");
  a.max_seq = dimension_or(r, "max_seq_len", 2048);
  const double ratio = r.number_or("expansion_ratio", 4);
  if (!(ratio > 0 && ratio <= static_cast<double>(kMaxDimension)))
    r.fail("expansion_ratio", "expected a positive number");
  a.ffn = static_cast<std::int64_t>(std::floor(ratio * static_cast<double>(a.hidden)));
  check_ffn(r, a, "expansion_ratio");
  if (r.has("ffn_config")) {
    JsonReader ffn = r.object("ffn_config");
    ffn.choice_or("ffn_type", {"mptmlp"}, "mptmlp");
    a.ffn = dimension_or(ffn, "ffn_hidden_size", a.ffn);
  }
  const bool no_bias = r.boolean_or("no_bias", true);
  a.qkv_bias = a.out_bias = a.mlp_bias = !no_bias;
  a.tie = r.boolean_or("tie_word_embeddings", true);
  const bool learned_positions = r.boolean_or("learned_pos_emb", true);
  a.residual_dropout = probability(r, "resid_pdrop", 0);
  a.embedding_dropout = probability(r, "emb_pdrop", 0);

  read_heads(r, a, "n_heads", "", false);
  if (r.has("attn_config")) {
    JsonReader attn = r.object("attn_config");
    a.alibi = attn.boolean_or("alibi", false);
    a.attention_dropout = probability(attn, "attn_pdrop", 0);
    const std::string attn_type = attn.choice_or(
        "attn_type", {"multihead_attention", "multiquery_attention", "grouped_query_attention"}, "multihead_attention");
    if (attn_type == "multiquery_attention") a.kv_heads = 1;
    if (attn_type == "grouped_query_attention") {
      a.kv_heads = dimension(attn, "kv_n_heads");
      if (a.heads % a.kv_heads != 0)
        attn.fail("kv_n_heads", "expected a divisor of n_heads (" + std::to_string(a.heads) + "), got " +
                                    std::to_string(a.kv_heads));
    }
  }
  a.position_embedding = learned_positions && !a.alibi;

  const std::string norm = r.choice_or(
      "norm_type", {"low_precision_layernorm", "layernorm", "low_precision_rmsnorm", "rmsnorm"},
      "low_precision_layernorm");
  a.norm_type = norm == "low_precision_layernorm" ? "LPLayerNorm"
                : norm == "layernorm"             ? "LayerNorm"
                : norm == "low_precision_rmsnorm" ? "LPRMSNorm"
                                                  : "RMSNorm";
  a.norm_bias = !no_bias && norm.find("rmsnorm") == std::string::npos;
  return a;
}

Family detect_family(JsonReader& r) {
  if (r.has("model_type")) {
    const std::string type = r.string("model_type");
    for (const FamilyName& f : kFamilies)
      if (type == f.model_type) return f.family;
    r.fail("model_type", "unsupported model_type \"" + type + "\"; supported: " + supported_list());
  }
  r.ignore("model_type");
  if (r.has("architectures")) {
    const json& classes = r.array("architectures");
    const std::string path = join_json_path(r.path_of("architectures"), 0);
    if (classes.empty() || !classes[0].is_string())
      throw InputError(r.file(), path, "expected a class name such as \"LlamaForCausalLM\"");
    const std::string name = classes[0].get<std::string>();
    if (name == "MptForCausalLM") return Family::mpt;
    for (const FamilyName& f : kFamilies)
      if (name == f.architecture) return f.family;
    throw InputError(r.file(), path, "unsupported architecture \"" + name + "\"; supported model types: " +
                                         supported_list());
  }
  r.fail("model_type", "is required (or architectures): one of " + supported_list());
}

HfArch read_arch(JsonReader& r) {
  const Family family = detect_family(r);
  HfArch a;
  switch (family) {
    case Family::llama:
    case Family::mistral:
    case Family::qwen2: a = read_llama_like(r, family); break;
    case Family::gpt2: a = read_gpt2(r); break;
    case Family::gpt_neox: a = read_gpt_neox(r); break;
    case Family::mpt: a = read_mpt(r); break;
  }
  a.dtype = read_dtype(r);
  return a;
}

// ---- building the module tree ----------------------------------------------------

const char* const kBlockCostSource =
    "docs/model-schema.md: matmul FLOPs 2*weights*b*s, attention 4*b*s^2*heads*head_dim (PaLM app. B); "
    "saved activations: Korthikanti et al. 2022 eq. 1, tensor by tensor; sac_*: torchtitan's op-level "
    "selective activation checkpointing policy (selective_ac_option='op'); *_transient_bytes: the largest "
    "moment of the forward/backward in eager autograd order, tensor by tensor";
const char* const kEdgeCostSource =
    "docs/model-schema.md: embedding, final norm, output layer and loss (Korthikanti et al. 2022 sec. 4.3); "
    "*_transient_bytes: the largest moment in eager autograd order (HF ForCausalLMLoss / torchtitan loss)";

json param(const std::string& name, const std::vector<std::int64_t>& shape, DType dtype) {
  return {{"name", name}, {"shape", shape}, {"dtype", dtype_name(dtype)}};
}

json module(const std::string& name, const std::string& type) { return {{"name", name}, {"type", type}}; }

json with_children(json m, std::vector<json> children) {
  m["children"] = std::move(children);
  return m;
}

// torch.nn.Linear: weight (out, in).
json linear(const std::string& name, std::int64_t in, std::int64_t out, bool bias, DType dtype,
            const std::string& type = "Linear") {
  json m = module(name, type);
  m["params"] = json::array({param("weight", {out, in}, dtype)});
  if (bias) m["params"].push_back(param("bias", {out}, dtype));
  return m;
}

// GPT-2's Conv1D stores the transposed weight (in, out); FSDP2 shards it along `in`.
json conv1d(const std::string& name, std::int64_t in, std::int64_t out, DType dtype) {
  json m = module(name, "Conv1D");
  m["params"] = json::array({param("weight", {in, out}, dtype), param("bias", {out}, dtype)});
  return m;
}

json norm(const std::string& name, const std::string& type, const HfArch& a) {
  json m = module(name, type);
  m["params"] = json::array({param("weight", {a.hidden}, a.dtype)});
  if (a.norm_bias) m["params"].push_back(param("bias", {a.hidden}, a.dtype));
  return m;
}

json embedding(const std::string& name, const std::string& type, std::int64_t rows, const HfArch& a) {
  json m = module(name, type);
  m["params"] = json::array({param("weight", {rows, a.hidden}, a.dtype)});
  return m;
}

json with_costs(json m, const ModuleCosts& costs, const std::string& source) {
  m["costs"] = costs_to_json(costs, source);
  return m;
}

// The embedding; with learned positions its costs also cover the position lookup, the add
// and the dropout (the position table gets no costs of its own: one costed "Embedding"
// type per model keeps block detection, which looks for repeated costed types, honest).
json token_embedding(const std::string& name, const std::string& type, const HfArch& a) {
  return with_costs(embedding(name, type, a.vocab, a),
                    token_embedding_costs(a.hidden, a.position_embedding, a.embedding_dropout > 0),
                    kEdgeCostSource);
}

json final_norm(const std::string& name, const std::string& type, const HfArch& a) {
  return with_costs(norm(name, type, a), final_norm_costs(a.hidden), kEdgeCostSource);
}

// The output projection (no bias in any supported family), tied to the embedding or not.
json output_projection(const std::string& name, const std::string& embedding_weight, const HfArch& a,
                       const HfImportOptions& options) {
  json m = module(name, "Linear");
  json weight = param("weight", {a.vocab, a.hidden}, a.dtype);
  if (a.tie) weight["tied_to"] = embedding_weight;
  m["params"] = json::array({weight});
  return with_costs(m, lm_head_costs(a.hidden, a.vocab, options.fp32_loss ? LossKind::fp32_upcast : LossKind::bf16), kEdgeCostSource);
}

DecoderBlockShape block_shape(const HfArch& a) {
  DecoderBlockShape s;
  s.hidden_size = a.hidden;
  s.num_heads = a.heads;
  s.num_kv_heads = a.kv_heads;
  s.head_dim = a.head_dim;
  s.ffn_hidden_size = a.ffn;
  s.gated_mlp = a.llama_like();
  s.parallel_residual = a.parallel_residual;
  s.rotary = a.llama_like() || a.family == Family::gpt_neox;
  s.alibi = a.alibi;
  s.attention_dropout = a.attention_dropout > 0;
  s.residual_dropout = a.residual_dropout > 0;
  // GPT-2's c_attn, GPT-NeoX's query_key_value and MPT's Wqkv compute q, k and v at once.
  s.fused_qkv = !a.llama_like();
  s.qkv_bias = a.qkv_bias;
  s.out_bias = a.out_bias;
  s.mlp_bias = a.mlp_bias;
  return s;
}

// A decoder block written once, repeated num_layers times; its children in forward order.
json repeated_block(const std::string& type, std::vector<json> children, const HfArch& a,
                    const HfImportOptions& options) {
  json block = with_children(module("{i}", type), std::move(children));
  block["repeat"] = a.layers;
  return with_costs(block, decoder_block_costs(block_shape(a), options.flash_attention), kBlockCostSource);
}

json llama_like_root(const HfArch& a, const HfImportOptions& options) {
  const std::string prefix = a.family == Family::llama ? "Llama" : a.family == Family::mistral ? "Mistral" : "Qwen2";
  const std::int64_t h = a.hidden, q = a.q_dim(), kv = a.kv_dim(), f = a.ffn;
  json attention = with_children(module("self_attn", prefix + "Attention"),
                                 {linear("q_proj", h, q, a.qkv_bias, a.dtype), linear("k_proj", h, kv, a.qkv_bias, a.dtype),
                                  linear("v_proj", h, kv, a.qkv_bias, a.dtype), linear("o_proj", q, h, a.out_bias, a.dtype)});
  json mlp = with_children(module("mlp", prefix + "MLP"),
                           {linear("gate_proj", h, f, a.mlp_bias, a.dtype), linear("up_proj", h, f, a.mlp_bias, a.dtype),
                            linear("down_proj", f, h, a.mlp_bias, a.dtype)});
  const std::string norm_type = prefix + a.norm_type;
  json block = repeated_block(prefix + "DecoderLayer",
                              {norm("input_layernorm", norm_type, a), attention,
                               norm("post_attention_layernorm", norm_type, a), mlp},
                              a, options);
  json model = with_children(module("model", prefix + "Model"),
                             {token_embedding("embed_tokens", "Embedding", a),
                              with_children(module("layers", "ModuleList"), {block}), final_norm("norm", norm_type, a)});
  return with_children(module("", prefix + "ForCausalLM"),
                       {model, output_projection("lm_head", "model.embed_tokens.weight", a, options)});
}

json gpt2_root(const HfArch& a, const HfImportOptions& options) {
  const std::int64_t h = a.hidden, f = a.ffn;
  json attention = with_children(module("attn", "GPT2Attention"),
                                 {conv1d("c_attn", h, 3 * h, a.dtype), conv1d("c_proj", h, h, a.dtype)});
  json mlp = with_children(module("mlp", "GPT2MLP"), {conv1d("c_fc", h, f, a.dtype), conv1d("c_proj", f, h, a.dtype)});
  json block = repeated_block("GPT2Block", {norm("ln_1", "LayerNorm", a), attention, norm("ln_2", "LayerNorm", a), mlp},
                              a, options);
  json transformer = with_children(module("transformer", "GPT2Model"),
                                   {token_embedding("wte", "Embedding", a), embedding("wpe", "Embedding", a.max_seq, a),
                                    with_children(module("h", "ModuleList"), {block}),
                                    final_norm("ln_f", "LayerNorm", a)});
  return with_children(module("", "GPT2LMHeadModel"),
                       {transformer, output_projection("lm_head", "transformer.wte.weight", a, options)});
}

json gpt_neox_root(const HfArch& a, const HfImportOptions& options) {
  const std::int64_t h = a.hidden, f = a.ffn;
  json attention = with_children(module("attention", "GPTNeoXAttention"),
                                 {linear("query_key_value", h, 3 * a.q_dim(), a.qkv_bias, a.dtype),
                                  linear("dense", a.q_dim(), h, a.out_bias, a.dtype)});
  json mlp = with_children(module("mlp", "GPTNeoXMLP"), {linear("dense_h_to_4h", h, f, a.mlp_bias, a.dtype),
                                                          linear("dense_4h_to_h", f, h, a.mlp_bias, a.dtype)});
  json block = repeated_block("GPTNeoXLayer",
                              {norm("input_layernorm", "LayerNorm", a), attention,
                               norm("post_attention_layernorm", "LayerNorm", a), mlp},
                              a, options);
  json model = with_children(module("gpt_neox", "GPTNeoXModel"),
                             {token_embedding("embed_in", "Embedding", a),
                              with_children(module("layers", "ModuleList"), {block}),
                              final_norm("final_layer_norm", "LayerNorm", a)});
  return with_children(module("", "GPTNeoXForCausalLM"), {model, output_projection("embed_out", "gpt_neox.embed_in.weight", a, options)});
}

// MosaicML's module names (transformer.blocks.{i}.attn.Wqkv); the logits come from the
// tied embedding, written here as an lm_head tied to transformer.wte.weight.
json mpt_root(const HfArch& a, const HfImportOptions& options) {
  const std::int64_t h = a.hidden, f = a.ffn;
  json attention_module = module("attn", a.kv_heads == a.heads ? "MultiheadAttention"
                                         : a.kv_heads == 1     ? "MultiQueryAttention"
                                                               : "GroupedQueryAttention");
  json attention = with_children(attention_module, {linear("Wqkv", h, a.q_dim() + 2 * a.kv_dim(), a.qkv_bias, a.dtype),
                                                    linear("out_proj", a.q_dim(), h, a.out_bias, a.dtype)});
  json mlp = with_children(module("ffn", "MPTMLP"), {linear("up_proj", h, f, a.mlp_bias, a.dtype),
                                                     linear("down_proj", f, h, a.mlp_bias, a.dtype)});
  json block = repeated_block("MPTBlock", {norm("norm_1", a.norm_type, a), attention, norm("norm_2", a.norm_type, a), mlp},
                              a, options);
  std::vector<json> children = {token_embedding("wte", "SharedEmbedding", a)};
  if (a.position_embedding) children.push_back(embedding("wpe", "Embedding", a.max_seq, a));
  children.push_back(with_children(module("blocks", "ModuleList"), {block}));
  children.push_back(final_norm("norm_f", a.norm_type, a));
  json transformer = with_children(module("transformer", "MPTModel"), children);
  return with_children(module("", "MPTForCausalLM"), {transformer, output_projection("lm_head", "transformer.wte.weight", a, options)});
}

json arch_summary(const HfArch& a) {
  return {{"family", family_name(a.family).model_type},
          {"num_layers", a.layers},
          {"hidden_size", a.hidden},
          {"num_heads", a.heads},
          {"num_kv_heads", a.kv_heads},
          {"ffn_hidden_size", a.ffn},
          {"vocab_size", a.vocab},
          {"max_seq_len", a.max_seq}};
}

// "models/hf/llama3.1-8b.json" -> "llama3.1-8b"; ".../Llama-3.1-8B/config.json" -> "Llama-3.1-8B".
std::string model_name_from(const std::string& file) {
  const std::filesystem::path path(file);
  const std::string stem = path.stem().string();
  const std::string parent = path.parent_path().filename().string();
  if ((stem.empty() || stem == "config") && !parent.empty() && parent != "." && parent != "..") return parent;
  return stem.empty() ? "hf-model" : stem;
}

}  // namespace

std::vector<std::string> supported_hf_model_types() {
  std::vector<std::string> types;
  for (const FamilyName& f : kFamilies) types.push_back(f.model_type);
  return types;
}

nlohmann::json import_hf_config(const nlohmann::json& config, const std::string& file,
                                const HfImportOptions& options) {
  JsonReader r(config, file);
  const HfArch a = read_arch(r);
  json root;
  switch (a.family) {
    case Family::llama:
    case Family::mistral:
    case Family::qwen2: root = llama_like_root(a, options); break;
    case Family::gpt2: root = gpt2_root(a, options); break;
    case Family::gpt_neox: root = gpt_neox_root(a, options); break;
    case Family::mpt: root = mpt_root(a, options); break;
  }
  root.erase("name");  // the root module is unnamed
  const std::string source = "Hugging Face config " + file + " (model_type " + family_name(a.family).model_type +
                             "), imported by fsdpsim with flash_attention=" +
                             (options.flash_attention ? "true" : "false") +
                             (options.fp32_loss ? "" : ", fp32_loss=false");
  return {{"name", model_name_from(file)}, {"source", source}, {"arch", arch_summary(a)}, {"root", root}};
}

Model load_hf_config(const std::string& path, const HfImportOptions& options) {
  return parse_model(import_hf_config(load_json_file(path), path, options), path);
}

}  // namespace fsdpsim::models
