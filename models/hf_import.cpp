#include "models/hf_import.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "models/checked_arithmetic.h"
#include "models/json_input.h"
#include "models/transformer_costs.h"

namespace fsdpsim::models {

namespace {

using nlohmann::json;
using NormPlacement = DecoderBlockShape::NormPlacement;
using QkNorm = DecoderBlockShape::QkNorm;

// Larger dimensions are typos. The cap keeps every product of two dimensions (weight
// sizes, FLOP coefficients) exact in int64 and in double.
constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;
// Real models have a few hundred layers; the cap keeps the expanded tree small.
constexpr std::int64_t kMaxLayers = 10000;

enum class Family {
  llama, mistral, qwen2, qwen3, gemma2, gemma3_text, gemma3, phi3, olmo2, olmo3, smollm3, falcon, gpt2, gpt_neox,
  mpt,
  // Mixture-of-Experts: imported and planned (Llama-4 through its text_config); counted too.
  mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, gpt_oss, llama4, llama4_text, glm4_moe,
};

struct FamilyName {
  Family family;
  const char* model_type;
  const char* architecture;  // the causal-LM class, the root module's type
  bool moe;
};

// Hugging Face's port of MPT names its class MptForCausalLM; MosaicML's configs say MPTForCausalLM.
constexpr FamilyName kFamilies[] = {
    {Family::llama, "llama", "LlamaForCausalLM", false},
    {Family::mistral, "mistral", "MistralForCausalLM", false},
    {Family::qwen2, "qwen2", "Qwen2ForCausalLM", false},
    {Family::qwen3, "qwen3", "Qwen3ForCausalLM", false},
    {Family::gemma2, "gemma2", "Gemma2ForCausalLM", false},
    {Family::gemma3_text, "gemma3_text", "Gemma3ForCausalLM", false},
    {Family::gemma3, "gemma3", "Gemma3ForConditionalGeneration", false},
    {Family::phi3, "phi3", "Phi3ForCausalLM", false},
    {Family::olmo2, "olmo2", "Olmo2ForCausalLM", false},
    {Family::olmo3, "olmo3", "Olmo3ForCausalLM", false},
    {Family::smollm3, "smollm3", "SmolLM3ForCausalLM", false},
    {Family::falcon, "falcon", "FalconForCausalLM", false},
    {Family::gpt2, "gpt2", "GPT2LMHeadModel", false},
    {Family::gpt_neox, "gpt_neox", "GPTNeoXForCausalLM", false},
    {Family::mpt, "mpt", "MPTForCausalLM", false},
    {Family::mixtral, "mixtral", "MixtralForCausalLM", true},
    {Family::qwen2_moe, "qwen2_moe", "Qwen2MoeForCausalLM", true},
    {Family::qwen3_moe, "qwen3_moe", "Qwen3MoeForCausalLM", true},
    {Family::olmoe, "olmoe", "OlmoeForCausalLM", true},
    {Family::deepseek_v2, "deepseek_v2", "DeepseekV2ForCausalLM", true},
    {Family::deepseek_v3, "deepseek_v3", "DeepseekV3ForCausalLM", true},
    {Family::gpt_oss, "gpt_oss", "GptOssForCausalLM", true},
    {Family::llama4, "llama4", "Llama4ForConditionalGeneration", true},
    {Family::llama4_text, "llama4_text", "Llama4ForCausalLM", true},
    {Family::glm4_moe, "glm4_moe", "Glm4MoeForCausalLM", true},
};

const FamilyName& family_name(Family family) {
  for (const FamilyName& f : kFamilies)
    if (f.family == family) return f;
  return kFamilies[0];
}

bool imports_moe(Family family);

// The model types import_hf_config plans (`imported`) or only counts (count_hf_parameters).
std::string type_list(bool imported) {
  std::string list;
  for (const FamilyName& f : kFamilies)
    if ((!f.moe || imports_moe(f.family)) == imported) list += (list.empty() ? "" : ", ") + std::string(f.model_type);
  return list;
}

std::string supported_list() {
  const std::string counted_only = type_list(false);
  return type_list(true) + (counted_only.empty() ? "" : " (and, counted but not planned, " + counted_only + ")");
}

// ---- the keys of a config ------------------------------------------------------------
//
// Every key of a config is either read (a reader below gets it and checks it) or listed here
// as known not to change the parameter count or the compute (token ids, initialisation,
// numerics such as epsilons and rotary frequencies, generation settings). Anything else is an
// error naming it: a key the importer does not know may well change the sizes or the work
// (num_local_experts under a dense model_type, a sliding_window where none is modelled).

const std::set<std::string>& harmless_everywhere() {
  static const std::set<std::string> keys = {
      "transformers_version", "bos_token_id",   "eos_token_id",     "pad_token_id",        "sep_token_id",
      "decoder_start_token_id", "use_cache",    "initializer_range", "tokenizer_class",    "auto_map",
      "return_dict",          "output_attentions", "output_hidden_states", "torchscript",  "id2label",
      "label2id",             "problem_type",   "task_specific_params", "finetuning_task", "gradient_checkpointing",
      "use_return_dict"};
  return keys;
}

// Per family: numerics (epsilons, rotary frequencies and scaling: rotary is priced per token
// whatever its frequencies), the activation's name (SiLU and GELU variants are one elementwise
// kernel of the same size) and settings the modelling code does not read.
const std::set<std::string>& harmless_for(Family family) {
  static const std::map<Family, std::set<std::string>> keys = {
      {Family::llama, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "pretraining_tp", "hidden_act"}},
      {Family::mistral, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act"}},
      // use_mrope: Qwen2.5's released configs carry it (false); Qwen2Config does not define it and
      // Qwen2's modelling code never reads it (M-RoPE is Qwen2-VL's, priced per token as rotary is).
      {Family::qwen2, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "use_mrope"}},
      {Family::qwen3, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act"}},
      // query_pre_attn_scalar sets the attention's scale; cache_implementation is for generation.
      {Family::gemma2,
       {"rope_theta", "rope_parameters", "rms_norm_eps", "hidden_act", "hidden_activation", "query_pre_attn_scalar",
        "cache_implementation"}},
      // Gemma-3's image-text config around its text model: the image side's keys.
      {Family::gemma3,
       {"vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"}},
      {Family::gemma3_text,
       {"rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq", "rms_norm_eps", "hidden_act",
        "hidden_activation", "query_pre_attn_scalar", "cache_implementation"}},
      // partial_rotary_factor: rotary on part of each head; priced as if on all of it.
      {Family::phi3,
       {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "original_max_position_embeddings",
        "partial_rotary_factor", "interpolate_factor"}},
      {Family::olmo2, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act"}},
      {Family::olmo3, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act"}},
      // pretraining_tp: Llama's, which SmolLM3's released config carries and its class never reads.
      {Family::smollm3, {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "pretraining_tp"}},
      {Family::falcon, {"rope_theta", "rope_scaling", "layer_norm_epsilon", "activation"}},
      {Family::gpt2,
       {"activation_function", "layer_norm_epsilon", "n_ctx", "summary_activation", "summary_first_dropout",
        "summary_proj_to_labels", "summary_type", "summary_use_proj", "scale_attn_weights",
        "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_special", "predict_special_tokens",
        "output_past"}},
      {Family::gpt_neox, {"hidden_act", "layer_norm_eps", "rotary_emb_base", "rope_scaling", "classifier_dropout"}},
      // embedding_fraction scales the embedding's gradient; init_* and verbose are set-up.
      {Family::mpt, {"init_config", "init_device", "tokenizer_name", "verbose", "embedding_fraction"}},
      {Family::mixtral,
       {"rope_theta", "rms_norm_eps", "hidden_act", "router_aux_loss_coef", "output_router_logits",
        "router_jitter_noise"}},
      {Family::qwen2_moe,
       {"rope_theta", "rope_scaling", "rms_norm_eps", "hidden_act", "norm_topk_prob", "output_router_logits",
        "router_aux_loss_coef"}},
      {Family::qwen3_moe,
       {"rope_theta", "rope_scaling", "rms_norm_eps", "hidden_act", "norm_topk_prob", "output_router_logits",
        "router_aux_loss_coef"}},
      {Family::olmoe,
       {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "norm_topk_prob",
        "output_router_logits", "router_aux_loss_coef"}},
      // num_key_value_heads: MLA's shapes come from the lora ranks and head dims.
      {Family::deepseek_v2,
       {"rope_theta", "rope_scaling", "rms_norm_eps", "hidden_act", "norm_topk_prob", "routed_scaling_factor",
        "scoring_func", "n_group", "topk_group", "aux_loss_alpha", "seq_aux", "pretraining_tp", "ep_size",
        "num_key_value_heads"}},
      // head_dim: V3's rotary width (qk_rope_head_dim); rope_interleave: the rotary's layout.
      {Family::deepseek_v3,
       {"rope_theta", "rope_scaling", "rms_norm_eps", "hidden_act", "norm_topk_prob", "routed_scaling_factor",
        "scoring_func", "n_group", "topk_group", "aux_loss_alpha", "seq_aux", "pretraining_tp", "ep_size",
        "num_key_value_heads", "rope_interleave", "head_dim", "quantization_config"}},
      // quantization_config: the checkpoint's MXFP4 storage of the experts; counts do not change.
      // quantization_config: the released checkpoints store the experts in MXFP4; training holds
      // them in torch_dtype, and the counts do not change. initial_context_length: YaRN's base.
      // partial_rotary_factor: rotary on half of each head, priced as on all of it; the router's
      // numerics (sigmoid scores, groups, scaling) change no count and no FLOP of the ledgers.
      {Family::glm4_moe,
       {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "partial_rotary_factor",
        "routed_scaling_factor", "n_group", "topk_group", "norm_topk_prob"}},
      {Family::gpt_oss,
       {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "router_aux_loss_coef",
        "output_router_logits", "initial_context_length", "quantization_config"}},
      // attn_temperature_tuning, floor_scale, attn_scale: the NoPE layers scale q by a per-position
      // factor (one elementwise multiply, not priced); _attn_implementation_autoset: transformers'
      // bookkeeping of the kernel, which is the scenario's choice.
      {Family::llama4_text,
       {"rope_theta", "rope_scaling", "rope_parameters", "rms_norm_eps", "hidden_act", "router_aux_loss_coef",
        "router_jitter_noise", "output_router_logits", "for_llm_compressor", "cache_implementation",
        "attn_temperature_tuning", "floor_scale", "attn_scale", "_attn_implementation_autoset"}},
  };
  static const std::set<std::string> none;
  auto it = keys.find(family);
  return it == keys.end() ? none : it->second;
}

// Throws naming the first key neither read nor known to be harmless.
// The JSON type a harmless key has in transformers' config classes. A key the importer does not
// read still must not be malformed: `rope_theta: "x"` is a broken config (transformers would fail
// on it), not a number to ignore. Keys not listed here take any type.
enum class HarmlessType { number, string, boolean, object, token_ids };
const std::map<std::string, HarmlessType>& harmless_types() {
  using T = HarmlessType;
  static const std::map<std::string, HarmlessType> types = {
      {"rope_theta", T::number}, {"rms_norm_eps", T::number}, {"layer_norm_eps", T::number},
      {"layer_norm_epsilon", T::number}, {"initializer_range", T::number}, {"router_aux_loss_coef", T::number},
      {"router_jitter_noise", T::number}, {"routed_scaling_factor", T::number}, {"partial_rotary_factor", T::number},
      {"query_pre_attn_scalar", T::number}, {"rope_local_base_freq", T::number}, {"aux_loss_alpha", T::number},
      {"embedding_fraction", T::number}, {"rotary_emb_base", T::number}, {"summary_first_dropout", T::number},
      {"classifier_dropout", T::number}, {"attn_scale", T::number}, {"floor_scale", T::number},
      {"original_max_position_embeddings", T::number}, {"initial_context_length", T::number}, {"n_group", T::number},
      {"topk_group", T::number}, {"pretraining_tp", T::number}, {"ep_size", T::number}, {"n_ctx", T::number},
      {"mm_tokens_per_image", T::number},
      {"hidden_act", T::string}, {"hidden_activation", T::string}, {"activation", T::string},
      {"activation_function", T::string}, {"transformers_version", T::string}, {"tokenizer_class", T::string},
      {"cache_implementation", T::string}, {"scoring_func", T::string}, {"summary_type", T::string},
      {"use_cache", T::boolean}, {"norm_topk_prob", T::boolean}, {"output_router_logits", T::boolean},
      {"seq_aux", T::boolean}, {"return_dict", T::boolean}, {"output_attentions", T::boolean},
      {"output_hidden_states", T::boolean}, {"torchscript", T::boolean}, {"gradient_checkpointing", T::boolean},
      {"use_return_dict", T::boolean}, {"scale_attn_weights", T::boolean}, {"reorder_and_upcast_attn", T::boolean},
      {"scale_attn_by_inverse_layer_idx", T::boolean}, {"rope_interleave", T::boolean}, {"use_mrope", T::boolean},
      {"rope_scaling", T::object}, {"rope_parameters", T::object}, {"quantization_config", T::object},
      {"vision_config", T::object}, {"id2label", T::object}, {"label2id", T::object}, {"auto_map", T::object},
      {"bos_token_id", T::token_ids}, {"eos_token_id", T::token_ids}, {"pad_token_id", T::token_ids},
      {"sep_token_id", T::token_ids}, {"decoder_start_token_id", T::token_ids}};
  return types;
}

// A harmless key whose value transformers would refuse or divide by is a broken config, though it
// changes no count (the session-38 input audit found each accepted): an activation ACT2FN does not
// have, a rotary fraction outside (0, 1], a zero attention scale, no expert groups or more groups
// picked than there are.
void check_harmless_value(const JsonReader& r, const std::string& key, const json& value) {
  // transformers/activations.py ACT2CLS (the keys get_activation looks up, case-sensitive).
  static const std::set<std::string> activations = {
      "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
      "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2",
      "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "prelu", "xielu"};
  if (key == "hidden_act" || key == "hidden_activation" || key == "activation" || key == "activation_function") {
    if (!activations.count(value.get<std::string>()))
      r.fail(key, "expected an activation of transformers' ACT2FN (silu, gelu, gelu_new, gelu_pytorch_tanh, relu, ...), got " +
                      describe_json(value));
  } else if (key == "partial_rotary_factor") {
    const double f = value.get<double>();
    if (!(f > 0 && f <= 1)) r.fail(key, "expected the rotary fraction of each head, in (0, 1], got " + describe_json(value));
  } else if (key == "query_pre_attn_scalar") {
    if (!(value.get<double>() > 0)) r.fail(key, "expected a positive attention scale, got " + describe_json(value));
  } else if (key == "n_group") {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1)
      r.fail(key, "expected a number of expert groups >= 1, got " + describe_json(value));
  } else if (key == "topk_group") {
    const json& groups = r.object_value().contains("n_group") ? r.object_value().at("n_group") : json();
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
        (groups.is_number_integer() && value.get<std::int64_t>() > groups.get<std::int64_t>()))
      r.fail(key, "expected a number of groups from 1 to n_group (" + describe_json(groups) + "), got " +
                      describe_json(value));
  }
}

void check_harmless_type(const JsonReader& r, const std::string& key, const json& value) {
  const auto it = harmless_types().find(key);
  if (it == harmless_types().end() || value.is_null()) return;
  const auto token_id = [](const json& v) { return v.is_number_integer(); };
  switch (it->second) {
    case HarmlessType::number:
      if (!value.is_number()) r.fail(key, "expected a number, got " + describe_json(value));
      break;
    case HarmlessType::string:
      if (!value.is_string()) r.fail(key, "expected a string, got " + describe_json(value));
      break;
    case HarmlessType::boolean:
      if (!value.is_boolean()) r.fail(key, "expected true or false, got " + describe_json(value));
      break;
    case HarmlessType::object:
      if (!value.is_object()) r.fail(key, "expected an object, got " + describe_json(value));
      break;
    case HarmlessType::token_ids:
      if (!token_id(value) && !(value.is_array() && std::all_of(value.begin(), value.end(), token_id)))
        r.fail(key, "expected a token id or a list of them, got " + describe_json(value));
      break;
  }
  check_harmless_value(r, key, value);
}

void refuse_unread_keys(const JsonReader& r, Family family) {
  for (const std::string& key : r.unread_keys()) {
    if (harmless_everywhere().count(key) || harmless_for(family).count(key)) {
      check_harmless_type(r, key, r.object_value().at(key));
      continue;
    }
    r.fail(key, std::string("is not read by fsdpsim's ") + family_name(family).model_type +
                    " importer: it may change the parameter count or the compute, and fsdpsim does not guess "
                    "(docs/model-schema.md lists the keys each family reads and those it knows to be harmless)");
  }
}

// ---- reading the config ----------------------------------------------------------

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
  bool falcon_parallel = false, one_parallel_norm = false;
  bool position_embedding = false;  // learned absolute positions (GPT-2; MPT without ALiBi)
  bool liger = false;               // HfImportOptions::liger: Liger-Kernel's blocks, norms and loss
  bool alibi = false;
  std::string norm_type;
  NormPlacement norm_placement = NormPlacement::pre;
  QkNorm qk_norm = QkNorm::none;
  bool qk_norm_over_heads = false;  // OLMo-2: one norm over all heads (weight q_dim); else per head (head_dim)
  bool fused_qkv = false;           // Phi-3's qkv_proj (GPT-2, GPT-NeoX, MPT, Falcon: by family)
  bool fused_gate_up = false;       // Phi-3's gate_up_proj
  bool gelu_gate = false;           // GeGLU (Gemma)
  bool scaled_embedding = false;    // Gemma: the embedding's output times sqrt(hidden)
  bool logit_softcap = false;       // Gemma-2's final_logit_softcapping
  bool attention_softcap = false;   // Gemma-2's attn_logit_softcapping
  std::vector<std::int64_t> windows;  // per layer: sliding window in tokens, 0 = full attention
  // Mixture-of-Experts: `experts` routed experts of expert_ffn, top_k per token, in the layers
  // sparse_layers marks (empty: every layer); `ffn` is then the shared experts' width in a sparse
  // layer (0: none) and dense_ffn the MLP width of the dense layers.
  int experts = 0, top_k = 0;
  std::int64_t expert_ffn = 0;
  bool shared_expert_gate = false;  // Qwen2-MoE's sigmoid gate on the shared expert
  std::vector<bool> sparse_layers;
  std::int64_t dense_ffn = 0;
  // DeepSeek-V3's router keeps a per-expert score-correction bias (topk_method "noaux_tc").
  bool router_correction_bias = false;
  // DeepSeek's multi-head latent attention (kv_lora_rank 0: none); head_dim is then q's and k's.
  DecoderBlockShape::Mla mla;
  // Per layer: no rotary embedding (Llama-4's NoPE layers, which also skip its q/k norm); empty:
  // every layer as the family has it.
  std::vector<bool> nope_layers;
  // gpt-oss: a learned sink logit per head on the attention, biases on the router and the experts.
  bool attention_sinks = false;
  bool expert_bias = false;

  bool nope(std::int64_t layer) const {
    return !nope_layers.empty() && nope_layers[static_cast<std::size_t>(layer)];
  }

  bool sparse(std::int64_t layer) const {
    if (experts == 0) return false;
    return sparse_layers.empty() || sparse_layers[static_cast<std::size_t>(layer)];
  }

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t kv_dim() const { return kv_heads * head_dim; }
  bool llama_like() const {
    return family == Family::llama || family == Family::mistral || family == Family::qwen2 ||
           family == Family::qwen3 || family == Family::gemma2 || family == Family::gemma3_text ||
           family == Family::phi3 || family == Family::olmo2 || family == Family::olmo3 || family == Family::smollm3 ||
           family == Family::mixtral || family == Family::qwen2_moe || family == Family::qwen3_moe ||
           family == Family::olmoe || family == Family::deepseek_v2 ||
           family == Family::deepseek_v3 || family == Family::gpt_oss || family == Family::llama4_text ||
           family == Family::glm4_moe;
  }
};

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

// A key the family reads only to check that it is off (a feature that is not modelled).
void require_false(JsonReader& r, const std::string& key, const std::string& what) {
  if (r.boolean_or(key, false)) r.fail(key, what + " is not modelled; expected false");
}

// Parameter dtype: torch_dtype (or "dtype", its newer name), the dtype the checkpoint is
// stored in; fp32 when absent, as transformers loads without a torch_dtype argument. A config
// may carry both (transformers writes the new name beside the old); they must then agree.
DType read_dtype(JsonReader& r) {
  std::optional<DType> dtype;
  for (const std::string key : {"torch_dtype", "dtype"}) {
    if (!r.has(key)) continue;
    std::string name = r.string(key);
    if (name.rfind("torch.", 0) == 0) name = name.substr(6);
    auto parsed = parse_dtype(name);
    if (!parsed) r.fail(key, "expected float32, bfloat16 or float16; got \"" + name + "\"");
    if (dtype && *dtype != *parsed)
      r.fail(key, "is \"" + name + "\" where torch_dtype says " + dtype_name(*dtype) +
                      ": expected the same dtype under both names (dtype is torch_dtype's newer name)");
    dtype = *parsed;
  }
  return dtype.value_or(DType::fp32);
}

// Heads and head size; head_dim defaults to hidden/heads, which must then divide evenly.
void read_heads(JsonReader& r, HfArch& a, const std::string& heads_key, const std::string& kv_key,
                bool reads_head_dim, std::int64_t default_head_dim = 0) {
  a.heads = dimension(r, heads_key);
  a.kv_heads = kv_key.empty() ? a.heads : dimension_or(r, kv_key, a.heads);
  if (a.heads % a.kv_heads != 0)
    r.fail(kv_key, "expected a divisor of " + heads_key + " (" + std::to_string(a.heads) + "), got " +
                       std::to_string(a.kv_heads));
  if (reads_head_dim && r.has("head_dim")) {
    a.head_dim = dimension(r, "head_dim");
  } else if (reads_head_dim && default_head_dim > 0) {
    r.ignore("head_dim");
    a.head_dim = default_head_dim;
  } else {
    if (reads_head_dim) r.ignore("head_dim");
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

// ---- sliding windows ----

std::int64_t window_size(JsonReader& r, const std::string& key) {
  const std::int64_t w = r.positive_integer(key);
  if (w > kMaxDimension) r.fail(key, "expected a window of at most " + std::to_string(kMaxDimension) + " tokens");
  return w;
}

// transformers' layer_types: "full_attention" or "sliding_attention" per layer.
std::vector<std::int64_t> windows_from_layer_types(JsonReader& r, std::int64_t layers, std::int64_t window) {
  const json& types = r.array("layer_types");
  if (static_cast<std::int64_t>(types.size()) != layers)
    r.fail("layer_types", "expected one entry per layer (" + std::to_string(layers) + "), got " +
                              std::to_string(types.size()));
  std::vector<std::int64_t> windows;
  for (std::size_t i = 0; i < types.size(); ++i) {
    const std::string path = join_json_path(r.path_of("layer_types"), i);
    if (!types[i].is_string()) throw InputError(r.file(), path, "expected \"full_attention\" or \"sliding_attention\"");
    const std::string type = types[i].get<std::string>();
    if (type == "full_attention") {
      windows.push_back(0);
    } else if (type == "sliding_attention") {
      if (window <= 0) throw InputError(r.file(), path, "\"sliding_attention\" needs a sliding_window");
      windows.push_back(window);
    } else {
      throw InputError(r.file(), path, "expected \"full_attention\" or \"sliding_attention\", got \"" + type + "\"");
    }
  }
  return windows;
}

// Qwen2 / Qwen3: with use_sliding_window, layers from max_window_layers on use the window
// (transformers' Qwen2Config.layer_types); without it, sliding_window is ignored.
std::vector<std::int64_t> qwen_windows(JsonReader& r, std::int64_t layers) {
  const bool use = r.boolean_or("use_sliding_window", false);
  const std::int64_t window = use && r.has("sliding_window") ? window_size(r, "sliding_window") : 0;
  r.ignore("sliding_window");
  const std::int64_t from = r.integer_or("max_window_layers", 28);
  if (from < 0) r.fail("max_window_layers", "expected a layer index >= 0");
  if (r.has("layer_types")) return windows_from_layer_types(r, layers, window);
  if (use && window <= 0) r.fail("sliding_window", "is required when use_sliding_window is true");
  std::vector<std::int64_t> windows(static_cast<std::size_t>(layers), 0);
  for (std::int64_t i = from; use && i < layers; ++i) windows[static_cast<std::size_t>(i)] = window;
  return windows;
}

// Every layer with the config's sliding_window (Mistral, Phi-3), none when it is absent or null.
std::vector<std::int64_t> uniform_windows(JsonReader& r, std::int64_t layers) {
  const std::int64_t window = r.has("sliding_window") ? window_size(r, "sliding_window") : 0;
  r.ignore("sliding_window");
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), window);
}

// Gemma: sliding layers alternate with full ones. Gemma-2: even layers slide (pattern 2);
// Gemma-3: every sliding_window_pattern-th layer is full ((i + 1) % pattern == 0). The window's
// default applies to an absent key only: transformers keeps an explicit null, and a layer whose
// window is None attends to every earlier token (Gemma2Attention / Gemma3Attention:
// `config.sliding_window if self.is_sliding else None`).
std::vector<std::int64_t> gemma_windows(JsonReader& r, std::int64_t layers, std::int64_t default_window,
                                        std::int64_t default_pattern, bool reads_pattern) {
  const std::int64_t window = r.has("sliding_window")        ? window_size(r, "sliding_window")
                              : r.contains("sliding_window") ? 0  // null: no window
                                                             : default_window;
  r.ignore("sliding_window");
  std::int64_t pattern = default_pattern;
  if (reads_pattern) pattern = r.positive_integer_or("sliding_window_pattern", default_pattern);
  if (r.has("layer_types")) return windows_from_layer_types(r, layers, window);
  std::vector<std::int64_t> windows;
  for (std::int64_t i = 0; i < layers; ++i) windows.push_back((i + 1) % pattern == 0 ? 0 : window);
  return windows;
}

// ---- the families ----

// Shared by the Llama-like families: sizes, GQA, the embedding tie.
void read_decoder_sizes(JsonReader& r, HfArch& a, std::int64_t default_positions, bool default_tie,
                        std::int64_t default_head_dim = 0) {
  a.hidden = dimension(r, "hidden_size");
  a.layers = layer_count(r, "num_hidden_layers");
  read_heads(r, a, "num_attention_heads", "num_key_value_heads", true, default_head_dim);
  a.ffn = dimension(r, "intermediate_size");
  a.vocab = dimension(r, "vocab_size");
  a.max_seq = dimension_or(r, "max_position_embeddings", default_positions);
  a.tie = r.boolean_or("tie_word_embeddings", default_tie);
  a.attention_dropout = probability(r, "attention_dropout", 0);
  a.norm_type = "RMSNorm";
}

// Llama, Mistral, Qwen2: RMSNorm, rotary, SwiGLU, optional GQA. Defaults are those of the
// transformers config classes.
HfArch read_llama_like(JsonReader& r, Family family) {
  HfArch a;
  a.family = family;
  const std::int64_t default_positions = family == Family::llama     ? 2048
                                         : family == Family::mistral ? 4096 * 32
                                                                     : 32768;
  read_decoder_sizes(r, a, default_positions, false);
  if (family == Family::qwen2) {
    // Qwen2Attention: q, k, v with biases, o_proj without, whatever the config says.
    a.qkv_bias = true;
    a.out_bias = false;
    a.windows = qwen_windows(r, a.layers);
  } else {
    a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
    a.windows = family == Family::mistral ? uniform_windows(r, a.layers)
                                          : std::vector<std::int64_t>(static_cast<std::size_t>(a.layers), 0);
  }
  a.mlp_bias = family == Family::llama && r.boolean_or("mlp_bias", false);
  return a;
}

// Qwen3: Qwen2 with per-head q/k RMSNorm, head_dim 128 by default, attention_bias for q,k,v,o.
HfArch read_qwen3(JsonReader& r) {
  HfArch a;
  a.family = Family::qwen3;
  read_decoder_sizes(r, a, 32768, false, 128);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
  a.qk_norm = QkNorm::after_each_projection;
  a.windows = qwen_windows(r, a.layers);
  return a;
}

// Whether a soft-capping key sets a cap: a positive number, or null for none; absent, the default.
bool softcap(JsonReader& r, const std::string& key, bool by_default) {
  if (r.has(key)) {
    r.positive_number(key);
    return true;
  }
  const bool explicitly_null = r.contains(key);  // present, but null
  r.ignore(key);
  return explicitly_null ? false : by_default;
}

// Gemma-2 and Gemma-3 (text): head_dim 256 by default, tied embeddings, GeGLU, sandwich norms,
// the embedding scaled by sqrt(hidden), alternating sliding-window layers. Gemma-2 soft-caps the
// attention logits (50) and the final logits (30); Gemma-3 normalizes q and k instead.
HfArch read_gemma(JsonReader& r, Family family, const HfImportOptions& options) {
  HfArch a;
  a.family = family;
  const bool gemma3 = family == Family::gemma3_text;
  read_decoder_sizes(r, a, gemma3 ? 131072 : 8192, true, 256);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
  a.gelu_gate = true;
  a.norm_placement = NormPlacement::sandwich;
  a.scaled_embedding = true;
  if (gemma3) a.qk_norm = QkNorm::after_all_projections;
  // transformers' Gemma2Config writes the window twice (sliding_window_size, an alias).
  if (r.has("sliding_window_size") && r.has("sliding_window") &&
      r.integer("sliding_window_size") != r.integer("sliding_window")) {
    window_size(r, "sliding_window");  // a window that is no window is the key to name (0, -1)
    r.fail("sliding_window_size", "differs from sliding_window (" + std::to_string(r.integer("sliding_window_size")) +
                                      " against " + std::to_string(r.integer("sliding_window")) +
                                      "): transformers keeps them equal");
  }
  r.ignore("sliding_window_size");
  a.windows = gemma_windows(r, a.layers, 4096, gemma3 ? 6 : 2, gemma3);
  // Soft-capping, on when the key gives a cap (transformers' defaults: Gemma-2 50 and 30, Gemma-3 none).
  // FlashAttention (>= 2.6) applies the attention cap to each score inside the kernel (tanh in
  // registers: no HBM traffic, no memory); eager attention runs it as three kernels on the
  // s x s scores and keeps tanh's output (eager_score_chain).
  a.attention_softcap = softcap(r, "attn_logit_softcapping", !gemma3);
  a.logit_softcap = softcap(r, "final_logit_softcapping", !gemma3);
  if (gemma3) require_false(r, "use_bidirectional_attention", "bidirectional attention");
  return a;
}

// Phi-3 (and Phi-3.5, Phi-4): fused qkv_proj and gate_up_proj, no biases, residual and
// embedding dropout, one sliding window for every layer when the config gives one.
HfArch read_phi3(JsonReader& r) {
  HfArch a;
  a.family = Family::phi3;
  read_decoder_sizes(r, a, 4096, false);
  // Phi3Attention's projections have no bias; transformers does not read attention_bias.
  require_false(r, "attention_bias", "attention_bias (Phi3Attention has no biases)");
  // Phi-4-mini's released config carries keys of its remote code that transformers' Phi3 never
  // reads (the session-37 import audit: refused); at these values they say what Phi3 builds:
  // mlp_bias and lm_head_bias false (Phi3MLP and lm_head have no bias), full_attn_mod 1 (every
  // layer full attention; another value interleaves sliding layers, which is not modelled).
  // interpolate_factor is LongRoPE's numerics (harmless_for).
  require_false(r, "mlp_bias", "mlp_bias (Phi3MLP has no biases)");
  require_false(r, "lm_head_bias", "lm_head_bias (Phi3's lm_head has no bias)");
  if (r.integer_or("full_attn_mod", 1) != 1)
    r.fail("full_attn_mod", "other than 1 interleaves full and sliding layers (Phi-4-mini's remote code), which is not "
                            "modelled; expected 1");
  a.fused_qkv = true;
  a.fused_gate_up = true;
  a.residual_dropout = probability(r, "resid_pdrop", 0);
  a.embedding_dropout = probability(r, "embd_pdrop", 0);
  if (a.embedding_dropout > 0) r.fail("embd_pdrop", "embedding dropout on a Llama-like model is not modelled");
  a.windows = uniform_windows(r, a.layers);
  return a;
}

// OLMo-2 and OLMo-3: norms after each branch only (no norm before attention or MLP), q and k
// normalized over all heads. OLMo-3 (transformers' Olmo3Config) adds sliding-window attention:
// layer_types, else three sliding layers of sliding_window (4096) and a full one, in turn.
HfArch read_olmo(JsonReader& r, Family family) {
  HfArch a;
  a.family = family;
  read_decoder_sizes(r, a, 2048, false);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
  a.norm_placement = NormPlacement::post;
  a.qk_norm = QkNorm::after_each_projection;
  a.qk_norm_over_heads = true;
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
  if (family == Family::olmo3) {
    const std::int64_t window = r.has("sliding_window") ? window_size(r, "sliding_window") : 4096;
    r.ignore("sliding_window");
    if (r.has("layer_types")) {
      a.windows = windows_from_layer_types(r, a.layers, window);
    } else {
      for (std::int64_t i = 0; i < a.layers; ++i) a.windows[static_cast<std::size_t>(i)] = (i + 1) % 4 != 0 ? window : 0;
    }
  }
  return a;
}

// Falcon (transformers' FalconConfig): multi-query attention or GQA (new_decoder_architecture),
// a fused query_key_value, parallel attention and MLP with one norm (Falcon-7B) or two
// (ln_attn, ln_mlp: the new architecture's default), GELU MLP, LayerNorm with bias, tied head.
HfArch read_falcon(JsonReader& r, const HfImportOptions& options) {
  HfArch a;
  a.family = Family::falcon;
  a.hidden = dimension(r, "hidden_size");
  a.layers = layer_count(r, "num_hidden_layers");
  a.heads = dimension(r, "num_attention_heads");
  if (a.hidden % a.heads != 0) r.fail("num_attention_heads", "expected a divisor of hidden_size");
  a.head_dim = a.hidden / a.heads;
  a.vocab = dimension(r, "vocab_size");
  a.max_seq = dimension_or(r, "max_position_embeddings", 2048);
  a.tie = r.boolean_or("tie_word_embeddings", true);
  const bool new_architecture = r.boolean_or("new_decoder_architecture", false);
  const bool multi_query = r.boolean_or("multi_query", true);
  const bool parallel = r.boolean_or("parallel_attn", true);
  // FalconAttention: num_kv_heads if new_decoder_architecture or not multi_query, else 1.
  const std::int64_t kv = dimension_or(r, "num_kv_heads", a.heads);
  a.kv_heads = new_architecture || !multi_query ? kv : 1;
  if (a.heads % a.kv_heads != 0) r.fail("num_kv_heads", "expected a divisor of num_attention_heads");
  // Without the new architecture or multi-query, query_key_value is 3 x hidden whatever num_kv_heads says.
  if (!new_architecture && !multi_query && a.kv_heads != a.heads)
    r.fail("num_kv_heads", "differs from num_attention_heads, which the classic architecture ignores");
  a.ffn = dimension_or(r, "ffn_hidden_size", 4 * a.hidden);
  a.qkv_bias = a.out_bias = a.mlp_bias = r.boolean_or("bias", false);
  a.norm_bias = true;
  a.alibi = r.boolean_or("alibi", false);
  // Falcon's ALiBi path upcasts the scores to fp32 before the bias and casts them back inside
  // the softmax: a chain eager_score_chain() does not list.
  if (a.alibi && !options.flash_attention)
    r.fail("alibi", "with eager attention (Falcon's fp32 ALiBi score chain) is not modelled; import with flash attention");
  a.attention_dropout = probability(r, "attention_dropout", 0);
  const double hidden_dropout = probability(r, "hidden_dropout", 0);
  require_false(r, "apply_residual_connection_post_layernorm", "a residual taken after the norm");
  a.norm_type = "LayerNorm";
  a.fused_qkv = true;
  if (new_architecture && !parallel)
    r.fail("parallel_attn", "false with new_decoder_architecture (transformers' FalconDecoderLayer runs it parallel)");
  if (parallel) {
    const std::int64_t norms = r.has("num_ln_in_parallel_attn") ? r.positive_integer("num_ln_in_parallel_attn")
                                                                  : (new_architecture ? 2 : 1);
    if (norms != 1 && norms != 2) r.fail("num_ln_in_parallel_attn", "expected 1 or 2");
    if (!new_architecture && norms == 2)
      r.fail("num_ln_in_parallel_attn", "2 needs new_decoder_architecture (ln_attn and ln_mlp)");
    a.parallel_residual = a.falcon_parallel = true;
    a.one_parallel_norm = norms == 1;
    // dropout_add(mlp_output, residual, hidden_dropout): a residual dropout on the summed branches.
    if (hidden_dropout > 0) r.fail("hidden_dropout", "dropout in Falcon's parallel block is not modelled; expected 0");
  } else {
    r.ignore("num_ln_in_parallel_attn");
    // Sequential: dropout_add(attention_output, residual, attention_dropout), then the MLP's
    // dropout_add(..., hidden_dropout): one residual dropout probability for both.
    if (hidden_dropout != a.attention_dropout)
      r.fail("hidden_dropout", "differs from attention_dropout, which Falcon's sequential block uses after attention");
    a.residual_dropout = hidden_dropout;
  }
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
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
  require_false(r, "add_cross_attention", "cross-attention");
  a.position_embedding = true;
  a.fused_qkv = true;
  a.norm_type = "LayerNorm";
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
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
  a.fused_qkv = true;
  a.norm_type = "LayerNorm";
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
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
    for (const std::string& key : ffn.unread_keys())
      ffn.fail(key, "is not read by fsdpsim's mpt importer: it may change the parameter count or the compute");
  }
  const bool no_bias = r.boolean_or("no_bias", true);
  a.qkv_bias = a.out_bias = a.mlp_bias = !no_bias;
  a.tie = r.boolean_or("tie_word_embeddings", true);
  const bool learned_positions = r.boolean_or("learned_pos_emb", true);
  a.residual_dropout = probability(r, "resid_pdrop", 0);
  a.embedding_dropout = probability(r, "emb_pdrop", 0);
  if (r.has("logit_scale")) r.fail("logit_scale", "scaling the logits is not modelled; expected null");

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
    require_false(attn, "qk_ln", "LayerNorm on q and k");
    require_false(attn, "prefix_lm", "a prefix-LM mask");
    if (attn.has("clip_qkv")) attn.fail("clip_qkv", "clamping q, k and v is not modelled; expected null");
    // The kernel (attn_impl) is the scenario's choice; the others set the mask's numbers.
    for (const std::string key : {"attn_impl", "alibi_bias_max", "softmax_scale", "attn_uses_sequence_id"})
      attn.ignore(key);
    for (const std::string& key : attn.unread_keys())
      attn.fail(key, "is not read by fsdpsim's mpt importer: it may change the parameter count or the compute");
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
  a.fused_qkv = true;
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
  return a;
}

// The supported family whose transformers class is `name`, or null.
const FamilyName* family_of_architecture(const std::string& name) {
  for (const FamilyName& f : kFamilies)
    if (name == f.architecture) return &f;
  return nullptr;
}

Family detect_family(JsonReader& r) {
  if (r.has("model_type")) {
    const std::string type = r.string("model_type");
    for (const FamilyName& f : kFamilies)
      if (type == f.model_type) return f.family;
    // A model_type of remote code whose class is a supported one (Kimi-K2's "kimi_k2" with
    // DeepseekV3ForCausalLM): imported only when the user says so, since the remote code may
    // differ from transformers' class of that name.
    std::string hint;
    const json& classes = r.has("architectures") ? r.raw("architectures") : json();
    if (classes.is_array() && !classes.empty() && classes[0].is_string())
      if (const FamilyName* f = family_of_architecture(classes[0].get<std::string>()))
        hint = std::string("; its architectures names ") + f->architecture + ": if its code is transformers' (as Moonshot "
               "says of Kimi-K2's), set model_type to \"" + f->model_type + "\"";
    r.fail("model_type", "unsupported model_type \"" + type + "\"" + hint + "; supported: " + supported_list());
  }
  r.ignore("model_type");
  if (r.has("architectures")) {
    const json& classes = r.array("architectures");
    const std::string path = join_json_path(r.path_of("architectures"), 0);
    if (classes.empty() || !classes[0].is_string())
      throw InputError(r.file(), path, "expected a class name such as \"LlamaForCausalLM\"");
    const std::string name = classes[0].get<std::string>();
    if (name == "MptForCausalLM") return Family::mpt;
    if (const FamilyName* f = family_of_architecture(name)) return f->family;
    throw InputError(r.file(), path, "unsupported architecture \"" + name + "\"; supported model types: " +
                                         supported_list());
  }
  r.fail("model_type", "is required (or architectures): one of " + supported_list());
}

// ---- Mixture-of-Experts families the planner imports ----
// Every decoder layer must be sparse (Mixtral always; Qwen-MoE with decoder_sparse_step 1 and no
// mlp_only_layers): a model mixing dense and sparse layers is counted but not imported yet.

int expert_count(JsonReader& r, const std::string& key) {
  const std::int64_t n = r.positive_integer(key);
  if (n > 100000) r.fail(key, "expected at most 100000 experts, got " + std::to_string(n));
  return static_cast<int>(n);
}

int top_k_of(JsonReader& r, const std::string& key, int experts, const std::string& experts_key) {
  const std::int64_t k = r.positive_integer(key);
  if (k > experts)
    r.fail(key, "expected at most " + experts_key + " (" + std::to_string(experts) + "), got " + std::to_string(k));
  return static_cast<int>(k);
}

// Qwen2-MoE / Qwen3-MoE's layer kinds (Qwen2MoeDecoderLayer.__init__): layer i is sparse unless
// listed in mlp_only_layers, and when (i + 1) % decoder_sparse_step == 0.
std::vector<bool> qwen_sparse_layers(JsonReader& r, std::int64_t layers) {
  const std::int64_t step = r.positive_integer_or("decoder_sparse_step", 1);
  std::set<std::int64_t> dense;
  if (r.has("mlp_only_layers")) {
    const json& list = r.array("mlp_only_layers");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = join_json_path(r.path_of("mlp_only_layers"), i);
      if (!list[i].is_number_integer() || list[i].get<std::int64_t>() < 0 || list[i].get<std::int64_t>() >= layers)
        throw InputError(r.file(), path, "expected a layer index 0.." + std::to_string(layers - 1) + ", got " +
                                             describe_json(list[i]));
      dense.insert(list[i].get<std::int64_t>());
    }
  }
  std::vector<bool> sparse;
  for (std::int64_t i = 0; i < layers; ++i) sparse.push_back(!dense.count(i) && (i + 1) % step == 0);
  return sparse;
}

// DeepSeek's layer kinds (DeepseekV2DecoderLayer.__init__): layer i has the MoE block when there
// are routed experts, i >= first_k_dense_replace and i % moe_layer_freq == 0.
std::vector<bool> deepseek_sparse_layers(JsonReader& r, std::int64_t layers, bool has_experts) {
  const std::int64_t first_dense = r.integer_or("first_k_dense_replace", 0);
  if (first_dense < 0) r.fail("first_k_dense_replace", "expected a number of layers >= 0");
  const std::int64_t frequency = r.positive_integer_or("moe_layer_freq", 1);
  std::vector<bool> sparse;
  for (std::int64_t i = 0; i < layers; ++i) sparse.push_back(has_experts && i >= first_dense && i % frequency == 0);
  return sparse;
}

// The attention_bias of DeepSeek's MLA and its low-rank shapes (DeepseekV3Attention.__init__):
// q_lora_rank (null: a plain q_proj), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
// v_head_dim. num_key_value_heads is not read by the attention (k and v are per head after
// kv_b_proj); q and k per head are nope + rope wide.
void read_mla(JsonReader& r, HfArch& a) {
  a.heads = dimension(r, "num_attention_heads");
  a.mla.q_lora_rank = r.has("q_lora_rank") ? dimension(r, "q_lora_rank") : 0;
  r.ignore("q_lora_rank");
  a.mla.kv_lora_rank = dimension(r, "kv_lora_rank");
  const std::int64_t nope = dimension(r, "qk_nope_head_dim");
  a.mla.rope_head_dim = dimension(r, "qk_rope_head_dim");
  a.mla.v_head_dim = dimension(r, "v_head_dim");
  a.head_dim = nope + a.mla.rope_head_dim;
  a.kv_heads = a.heads;
  for (const auto& [key, width] : {std::pair<const char*, std::int64_t>{"qk_nope_head_dim", a.heads * a.head_dim},
                                   {"v_head_dim", a.heads * (nope + a.mla.v_head_dim)}})
    if (width > kMaxDimension)
      r.fail(key, "num_attention_heads x the head dims exceeds " + std::to_string(kMaxDimension));
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
}

// DeepSeek's router (topk_method): "greedy" and "group_limited_greedy" (V2) pick the top-k of the
// softmax scores (the latter within the best topk_group of n_group expert groups); "noaux_tc"
// (V3: sigmoid scores) adds a per-expert score-correction bias before picking, an
// [n_routed_experts] tensor the checkpoint stores (DeepSeek's modeling_deepseek.py: an
// nn.Parameter; transformers' DeepseekV3TopkRouter: a buffer). Group-limited picking is top-k
// over the n scores and the groups' sums, no matmul and no parameter: n_group and topk_group change
// neither the FLOPs nor the counts (the routed ledgers price one top-k over the n scores).
bool deepseek_correction_bias(JsonReader& r, Family family) {
  return r.choice_or("topk_method", {"greedy", "group_limited_greedy", "noaux_tc"},
                     family == Family::deepseek_v3 ? "noaux_tc" : "greedy") == "noaux_tc";
}

// DeepSeek's shared_experts and GLM-4.5's copy of them: one SwiGLU MLP n_shared_experts x
// moe_intermediate_size wide (`a.ffn`), every token through it; `fallback` is the config class's
// default count.
void read_shared_experts(JsonReader& r, HfArch& a, std::int64_t fallback) {
  const std::int64_t shared = r.integer_or("n_shared_experts", fallback);
  if (shared < 0 || shared * a.expert_ffn > kMaxDimension)
    r.fail("n_shared_experts", "expected 0.." + std::to_string(kMaxDimension / a.expert_ffn) + " shared experts");
  a.ffn = shared * a.expert_ffn;
}

// DeepSeek-V2 / V2-Lite / V2.5 / V3 (transformers' modeling_deepseek_v2.py / modeling_deepseek_v3.py):
// MLA, then a dense SwiGLU MLP of intermediate_size in the first first_k_dense_replace layers
// (and those off moe_layer_freq), else the MoE block: the router `gate` (h -> n_routed_experts;
// V3 also a score-correction bias), the routed experts of moe_intermediate_size, top
// num_experts_per_tok per token, and `shared_experts`, one SwiGLU MLP of n_shared_experts x
// moe_intermediate_size every token runs.
HfArch read_deepseek(JsonReader& r, Family family) {
  HfArch a;
  a.family = family;
  a.hidden = dimension(r, "hidden_size");
  a.layers = layer_count(r, "num_hidden_layers");
  read_mla(r, a);
  a.dense_ffn = dimension(r, "intermediate_size");
  a.vocab = dimension(r, "vocab_size");
  a.max_seq = dimension_or(r, "max_position_embeddings", 2048);
  a.tie = r.boolean_or("tie_word_embeddings", false);
  a.attention_dropout = probability(r, "attention_dropout", 0);
  a.norm_type = "RMSNorm";
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
  // n_routed_experts null (DeepseekV2Config's default): every layer dense.
  a.experts = r.has("n_routed_experts") ? expert_count(r, "n_routed_experts") : 0;
  r.ignore("n_routed_experts");
  a.top_k = a.experts > 0 ? top_k_of(r, "num_experts_per_tok", a.experts, "n_routed_experts") : 0;
  r.ignore("num_experts_per_tok");
  a.expert_ffn = dimension(r, "moe_intermediate_size");
  read_shared_experts(r, a, 0);
  a.sparse_layers = deepseek_sparse_layers(r, a.layers, a.experts > 0);
  a.router_correction_bias = deepseek_correction_bias(r, family);
  // V3's multi-token-prediction module is not built by transformers (not_modelled_note says so
  // in the imported model's source); the count is checked only.
  if (family == Family::deepseek_v3 && r.integer_or("num_nextn_predict_layers", 0) < 0)
    r.fail("num_nextn_predict_layers", "expected a number of layers >= 0");
  if (a.experts == 0) {
    a.ffn = a.dense_ffn;
    a.sparse_layers.clear();
  }
  return a;
}

// GLM-4.5 / GLM-4.5-Air (transformers' Glm4MoeConfig and modeling_glm4_moe.py): Llama's
// attention with q, k and v biases (attention_bias) and none on o_proj, q/k RMSNorms per head
// after the three projections when use_qk_norm, rotary on partial_rotary_factor of each head;
// the first first_k_dense_replace layers a SwiGLU MLP of intermediate_size, the others
// DeepSeek-V3's block: the router (Glm4MoeTopkRouter: weight [E, h] and an [E] score-correction
// bias the checkpoints store), E experts of moe_intermediate_size, top num_experts_per_tok, and
// shared_experts, one SwiGLU MLP of n_shared_experts x moe_intermediate_size. The multi-token-
// prediction layer (num_nextn_predict_layers) is not built by transformers (Glm4MoeModel ignores
// its weights); not_modelled_note says so.
HfArch read_glm4_moe(JsonReader& r) {
  HfArch a;
  a.family = Family::glm4_moe;
  read_decoder_sizes(r, a, 131072, false, 128);
  a.qkv_bias = r.boolean_or("attention_bias", false);
  a.out_bias = false;
  if (r.boolean_or("use_qk_norm", false)) a.qk_norm = QkNorm::after_all_projections;
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
  a.experts = expert_count(r, "n_routed_experts");
  a.top_k = top_k_of(r, "num_experts_per_tok", a.experts, "n_routed_experts");
  a.expert_ffn = dimension(r, "moe_intermediate_size");
  a.dense_ffn = a.ffn;
  read_shared_experts(r, a, 1);
  const std::int64_t first_dense = r.integer_or("first_k_dense_replace", 1);
  if (first_dense < 0) r.fail("first_k_dense_replace", "expected a number of layers >= 0");
  for (std::int64_t i = 0; i < a.layers; ++i) a.sparse_layers.push_back(i >= first_dense);
  a.router_correction_bias = true;
  if (r.integer_or("num_nextn_predict_layers", 0) < 0)
    r.fail("num_nextn_predict_layers", "expected a number of layers >= 0");
  return a;
}

// Mixtral (modeling_mixtral.py): Mistral's attention; MixtralSparseMoeBlock = router (h -> E,
// no bias) + E SwiGLU experts of intermediate_size, no shared expert.
HfArch read_mixtral(JsonReader& r) {
  HfArch a;
  a.family = Family::mixtral;
  read_decoder_sizes(r, a, 4096 * 32, false);
  a.windows = uniform_windows(r, a.layers);
  a.experts = expert_count(r, "num_local_experts");
  a.top_k = top_k_of(r, "num_experts_per_tok", a.experts, "num_local_experts");
  a.expert_ffn = a.ffn;
  a.ffn = 0;
  return a;
}

// OLMoE's clip_qkv: a clamp of q, k and v after their projections (OlmoeAttention), which the
// released OLMoE configs leave null; a value would add three elementwise kernels fsdpsim does not
// price, so it is refused rather than dropped.
void refuse_clip_qkv(JsonReader& r) {
  if (r.has("clip_qkv")) r.fail("clip_qkv", "clamping q, k and v is not modelled; expected null (OLMoE's released configs)");
  r.ignore("clip_qkv");
}

// OLMoE (modeling_olmoe.py): Llama's pre-norm block; q and k each normalized after its projection
// over all heads (OlmoeAttention: q_norm over hidden_size, k_norm over the kv heads' width, as
// OLMo-2's); OlmoeSparseMoeBlock = router (h -> E, no bias) + E SwiGLU experts of
// intermediate_size, top num_experts_per_tok, no shared expert.
HfArch read_olmoe(JsonReader& r) {
  HfArch a;
  a.family = Family::olmoe;
  read_decoder_sizes(r, a, 4096, false);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
  a.qk_norm = QkNorm::after_each_projection;
  a.qk_norm_over_heads = true;
  a.windows.assign(static_cast<std::size_t>(a.layers), 0);
  refuse_clip_qkv(r);
  a.experts = expert_count(r, "num_experts");
  a.top_k = top_k_of(r, "num_experts_per_tok", a.experts, "num_experts");
  a.expert_ffn = a.ffn;
  a.ffn = 0;
  return a;
}

// Qwen2-MoE / Qwen3-MoE (modeling_qwen2_moe.py, modeling_qwen3_moe.py): Qwen2's attention
// (q, k, v biases) or Qwen3's (q/k norms); the sparse block's router, E experts of
// moe_intermediate_size and (Qwen2-MoE) a shared expert with its sigmoid gate.
HfArch read_qwen_moe(JsonReader& r, Family family) {
  const bool qwen3 = family == Family::qwen3_moe;
  HfArch a;
  a.family = family;
  read_decoder_sizes(r, a, 32768, false, qwen3 ? 128 : 0);
  a.windows = qwen_windows(r, a.layers);
  if (qwen3) {
    a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
    a.qk_norm = QkNorm::after_each_projection;
    // Qwen3-Coder-480B-A35B's released config carries three keys Qwen3MoeConfig does not define
    // and modeling_qwen3_moe.py never reads (the session-37 import audit: it was refused); at
    // these values they say what transformers builds anyway: no q/k/v bias beside
    // attention_bias, no shared expert, q/k norms always.
    require_false(r, "qkv_bias", "qkv_bias true (a q/k/v bias transformers' Qwen3-MoE does not build)");
    if (r.integer_or("shared_expert_intermediate_size", 0) != 0)
      r.fail("shared_expert_intermediate_size", "a shared expert transformers' Qwen3-MoE does not build; expected 0");
    if (!r.boolean_or("use_qk_norm", true))
      r.fail("use_qk_norm", "false is not modelled: transformers' Qwen3-MoE always normalizes q and k; expected true");
  } else {
    a.qkv_bias = r.boolean_or("qkv_bias", true);
    a.out_bias = false;
  }
  a.experts = expert_count(r, "num_experts");
  a.top_k = top_k_of(r, "num_experts_per_tok", a.experts, "num_experts");
  a.expert_ffn = dimension(r, "moe_intermediate_size");
  a.sparse_layers = qwen_sparse_layers(r, a.layers);
  // intermediate_size is the width of the dense layers (mlp_only_layers, off decoder_sparse_step).
  a.dense_ffn = a.ffn;
  a.ffn = qwen3 ? 0 : r.integer_or("shared_expert_intermediate_size", 0);
  if (a.ffn < 0 || a.ffn > kMaxDimension) r.fail("shared_expert_intermediate_size", "expected 0.." + std::to_string(kMaxDimension));
  a.shared_expert_gate = a.ffn > 0;
  return a;
}

// gpt-oss (transformers' GptOssConfig and modeling_gpt_oss.py; OpenAI's model card, arXiv:2508.10925,
// sec. 2.1): q, k, v and o with biases (attention_bias, default true) and a learned sink logit per
// head (GptOssAttention.sinks [heads]); sliding-window layers alternating with full ones
// (layer_types; GptOssConfig's default: layer i slides when i is even, window sliding_window, 128);
// every layer's MLP the MoE block: the router (GptOssTopKRouter: weight [E, h], bias [E]) and E
// experts of intermediate_size (GptOssExperts: gate_up_proj [E, h, 2f] and down_proj [E, f, h],
// each with a bias), top num_experts_per_tok, no shared expert.
HfArch read_gpt_oss(JsonReader& r) {
  HfArch a;
  a.family = Family::gpt_oss;
  read_decoder_sizes(r, a, 131072, false, 64);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", true);
  a.attention_sinks = true;
  const std::int64_t window = r.has("sliding_window") ? window_size(r, "sliding_window") : 128;
  r.ignore("sliding_window");
  if (r.has("layer_types")) {
    a.windows = windows_from_layer_types(r, a.layers, window);
  } else {
    for (std::int64_t i = 0; i < a.layers; ++i) a.windows.push_back(i % 2 == 0 ? window : 0);
  }
  a.experts = expert_count(r, "num_local_experts");
  a.top_k = top_k_of(r, "num_experts_per_tok", a.experts, "num_local_experts");
  // OpenAI's own name for top-k, which the released configs carry beside num_experts_per_tok;
  // transformers reads only the latter, so a disagreement is a config error, not a choice.
  if (r.has("experts_per_token") && r.integer("experts_per_token") != a.top_k)
    r.fail("experts_per_token", "differs from num_experts_per_tok (" + std::to_string(a.top_k) +
                                    "), the key transformers reads");
  r.ignore("experts_per_token");
  // The SwiGLU's clamp (gate <= limit, |up| <= limit) is elementwise, priced as the SwiGLU kernel.
  if (r.has("swiglu_limit")) r.positive_number("swiglu_limit");
  r.ignore("swiglu_limit");
  a.expert_ffn = a.ffn;
  a.expert_bias = true;
  a.ffn = 0;
  return a;
}

// Llama-4's MoE layers (Llama4TextConfig.moe_layers): the listed ones, else every
// interleave_moe_layer_step-th layer from layer step - 1 (Scout: step 1, every layer; Maverick:
// step 2, the odd layers).
std::vector<bool> llama4_sparse_layers(JsonReader& r, std::int64_t layers) {
  const std::int64_t step = r.positive_integer_or("interleave_moe_layer_step", 1);
  std::vector<bool> sparse(static_cast<std::size_t>(layers), false);
  if (r.has("moe_layers")) {
    const json& list = r.array("moe_layers");
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number_integer() || list[i].get<std::int64_t>() < 0 || list[i].get<std::int64_t>() >= layers)
        throw InputError(r.file(), join_json_path(r.path_of("moe_layers"), i),
                         "expected a layer index 0.." + std::to_string(layers - 1) + ", got " + describe_json(list[i]));
      sparse[static_cast<std::size_t>(list[i].get<std::int64_t>())] = true;
    }
    return sparse;
  }
  r.ignore("moe_layers");
  for (std::int64_t i = step - 1; i < layers; i += step) sparse[static_cast<std::size_t>(i)] = true;
  return sparse;
}

// NoPE layers (Llama4TextConfig's and SmolLM3Config's no_rope_layers: 1 where the layer uses
// rotary, 0 where not); absent or empty, every no_rope_layer_interval-th layer (default 4) is NoPE.
std::vector<bool> nope_layers_of(JsonReader& r, std::int64_t layers) {
  const std::int64_t interval = r.positive_integer_or("no_rope_layer_interval", 4);
  std::vector<bool> nope;
  if (r.has("no_rope_layers") && !r.array("no_rope_layers").empty()) {
    const json& list = r.array("no_rope_layers");
    if (static_cast<std::int64_t>(list.size()) != layers)
      r.fail("no_rope_layers", "expected one entry per layer (" + std::to_string(layers) + "), got " +
                                   std::to_string(list.size()));
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number_integer() || (list[i].get<std::int64_t>() != 0 && list[i].get<std::int64_t>() != 1))
        throw InputError(r.file(), join_json_path(r.path_of("no_rope_layers"), i),
                         "expected 1 (rotary) or 0 (no rotary), got " + describe_json(list[i]));
      nope.push_back(list[i].get<std::int64_t>() == 0);
    }
    return nope;
  }
  r.ignore("no_rope_layers");
  for (std::int64_t i = 0; i < layers; ++i) nope.push_back((i + 1) % interval == 0);
  return nope;
}

// Llama-4's attention per layer (Llama4TextConfig.layer_types, by default "chunked_attention" on
// the rotary layers and "full_attention" on the NoPE ones): a chunked layer's token attends the
// earlier tokens of its own attention_chunk_size chunk (default 8192; null: no chunking). It is
// recorded as a window of the chunk's size, which is what its work is when the sequence fits one
// chunk (the usual training length, 8192) and an over-count beyond: a causal window w keeps
// w*s - w^2/2 (query, key) pairs, chunks of w keep s*w/2 (docs/model-schema.md).
std::vector<std::int64_t> llama4_windows(JsonReader& r, std::int64_t layers, const std::vector<bool>& nope) {
  const std::int64_t chunk = r.has("attention_chunk_size") ? window_size(r, "attention_chunk_size")
                             : r.contains("attention_chunk_size") ? 0
                                                                   : 8192;
  r.ignore("attention_chunk_size");
  std::vector<std::int64_t> windows;
  if (!r.has("layer_types")) {
    for (std::int64_t i = 0; i < layers; ++i) windows.push_back(nope[static_cast<std::size_t>(i)] ? 0 : chunk);
    return windows;
  }
  const json& types = r.array("layer_types");
  if (static_cast<std::int64_t>(types.size()) != layers)
    r.fail("layer_types", "expected one entry per layer (" + std::to_string(layers) + "), got " +
                              std::to_string(types.size()));
  for (std::size_t i = 0; i < types.size(); ++i) {
    const std::string path = join_json_path(r.path_of("layer_types"), i);
    const std::string type = types[i].is_string() ? types[i].get<std::string>() : "";
    if (type == "full_attention") {
      windows.push_back(0);
    } else if (type == "chunked_attention" && chunk > 0) {
      windows.push_back(chunk);
    } else if (type == "chunked_attention") {
      throw InputError(r.file(), path, "\"chunked_attention\" needs an attention_chunk_size");
    } else {
      throw InputError(r.file(), path, "expected \"full_attention\" or \"chunked_attention\", got " + describe_json(types[i]));
    }
  }
  return windows;
}

// Llama-4's text model (Llama4TextConfig, modeling_llama4.py): Llama attention (attention_bias for
// q, k, v, o) with, on the rotary layers and when use_qk_norm, a weightless L2 norm of q and k
// after the rotary; the MoE layers' feed_forward (Llama4TextMoe) a router (h -> E, no bias), E
// experts of intermediate_size (Llama4TextExperts: gate_up_proj [E, h, 2f], down_proj [E, f, h])
// with top num_experts_per_tok per token, and one shared expert of intermediate_size every token
// runs; the other layers' feed_forward a SwiGLU MLP of intermediate_size_mlp.
HfArch read_llama4_text(JsonReader& r) {
  HfArch a;
  a.family = Family::llama4_text;
  read_decoder_sizes(r, a, 4096 * 32, false, 128);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
  a.experts = expert_count(r, "num_local_experts");
  a.top_k = top_k_of(r, "num_experts_per_tok", a.experts, "num_local_experts");
  a.expert_ffn = a.ffn;  // intermediate_size: each routed expert and the shared expert
  a.dense_ffn = dimension(r, "intermediate_size_mlp");
  a.sparse_layers = llama4_sparse_layers(r, a.layers);
  a.nope_layers = nope_layers_of(r, a.layers);
  a.windows = llama4_windows(r, a.layers, a.nope_layers);
  if (r.boolean_or("use_qk_norm", true)) a.qk_norm = QkNorm::after_all_projections;
  return a;
}

// SmolLM3 (modular_smollm3.py): Llama's layers (attention_bias, mlp_bias) with no rotary on the
// NoPE layers (no_rope_layers); with use_sliding_window and a sliding_window, the NoPE layers
// slide (SmolLM3Config's layer_types), else every layer attends in full. The embedding is tied
// by default.
HfArch read_smollm3(JsonReader& r) {
  HfArch a;
  a.family = Family::smollm3;
  read_decoder_sizes(r, a, 32768, true);
  a.qkv_bias = a.out_bias = r.boolean_or("attention_bias", false);
  a.mlp_bias = r.boolean_or("mlp_bias", false);
  a.nope_layers = nope_layers_of(r, a.layers);
  const bool sliding = r.boolean_or("use_sliding_window", false);
  const std::int64_t window = r.has("sliding_window") ? window_size(r, "sliding_window") : 0;
  r.ignore("sliding_window");
  if (r.has("layer_types")) {
    a.windows = windows_from_layer_types(r, a.layers, window);
  } else {
    for (std::int64_t i = 0; i < a.layers; ++i) a.windows.push_back(a.nope(i) ? window : 0);
  }
  // SmolLM3Attention takes a layer's window only under use_sliding_window.
  if (!sliding) a.windows.assign(static_cast<std::size_t>(a.layers), 0);
  // Qwen2's max_window_layers, which SmolLM3's released config carries and its class never reads.
  if (r.integer_or("max_window_layers", 0) < 0) r.fail("max_window_layers", "expected a layer index >= 0");
  return a;
}

HfArch read_dense_arch(JsonReader& r, Family family, const HfImportOptions& options) {
  HfArch a;
  switch (family) {
    case Family::llama:
    case Family::mistral:
    case Family::qwen2: a = read_llama_like(r, family); break;
    case Family::qwen3: a = read_qwen3(r); break;
    case Family::gemma2:
    case Family::gemma3_text: a = read_gemma(r, family, options); break;
    case Family::phi3: a = read_phi3(r); break;
    case Family::olmo2:
    case Family::olmo3: a = read_olmo(r, family); break;
    case Family::smollm3: a = read_smollm3(r); break;
    case Family::falcon: a = read_falcon(r, options); break;
    case Family::gpt2: a = read_gpt2(r); break;
    case Family::gpt_neox: a = read_gpt_neox(r); break;
    case Family::mpt: a = read_mpt(r); break;
    case Family::mixtral: a = read_mixtral(r); break;
    case Family::olmoe: a = read_olmoe(r); break;
    case Family::qwen2_moe:
    case Family::qwen3_moe: a = read_qwen_moe(r, family); break;
    case Family::deepseek_v2:
    case Family::deepseek_v3: a = read_deepseek(r, family); break;
    case Family::gpt_oss: a = read_gpt_oss(r); break;
    case Family::llama4_text: a = read_llama4_text(r); break;
    case Family::glm4_moe: a = read_glm4_moe(r); break;
    default: break;
  }
  a.family = family;
  a.dtype = read_dtype(r);
  r.ignore("architectures");
  refuse_unread_keys(r, family);
  return a;
}

// ---- Mixture-of-Experts: parameter counts ----------------------------------------
//
// Each count lists the modules transformers builds for the family (the modelling file named at
// each), so that the totals can be checked against the model cards.

std::int64_t attention_params(std::int64_t h, std::int64_t q, std::int64_t kv, bool qkv_bias, bool out_bias) {
  return h * q + 2 * h * kv + q * h + (qkv_bias ? q + 2 * kv : 0) + (out_bias ? h : 0);
}
std::int64_t gated_mlp_params(std::int64_t h, std::int64_t f) { return 3 * h * f; }

struct MoeLayerCount {
  std::int64_t shared = 0;        // attention, norms, router, shared experts, a dense MLP
  std::int64_t per_expert = 0;    // one routed expert
  std::int64_t experts = 0;       // routed experts in the layer (0: a dense layer)
  std::int64_t top_k = 0;         // routed experts per token
};

HfParameterCount total_and_active(const std::vector<MoeLayerCount>& layers, std::int64_t embedding,
                                  std::int64_t outside_layers) {
  HfParameterCount c;
  c.moe = true;
  c.input_embedding = embedding;
  c.total = c.active = outside_layers;
  // Checked (models/checked_arithmetic.h): each factor is bounded where it is read (a dimension
  // at most 2^24, experts at most 2^24), but E experts of 3 x hidden x intermediate elements over
  // the layers are not, and wrapped silently (count_moe names the file).
  for (const MoeLayerCount& l : layers) {
    const std::int64_t routed = checked_mul(l.experts, l.per_expert, "a layer's routed experts' parameters");
    const std::int64_t active = checked_mul(std::min(l.top_k, l.experts), l.per_expert, "a layer's active experts' parameters");
    c.total = checked_add(c.total, checked_add(l.shared, routed, "a layer's parameters"), "the model's parameters");
    c.active = checked_add(c.active, checked_add(l.shared, active, "a layer's active parameters"), "the active parameters");
    c.routed_experts = checked_add(c.routed_experts, routed, "the routed experts' parameters");
  }
  return c;
}

// The input embedding, the final norm and the output layer (tied or not).
std::int64_t edges(std::int64_t vocab, std::int64_t hidden, bool tie) { return vocab * hidden * (tie ? 1 : 2) + hidden; }

// Mixtral (modeling_mixtral.py): Llama attention, block_sparse_moe = gate (h -> E, no bias) +
// E experts of w1, w2, w3 (h x f each).
HfParameterCount count_mixtral(JsonReader& r) {
  HfArch a;
  read_decoder_sizes(r, a, 4096 * 32, false);
  uniform_windows(r, a.layers);
  const std::int64_t experts = dimension(r, "num_local_experts"), top_k = dimension(r, "num_experts_per_tok");
  MoeLayerCount l;
  l.shared = attention_params(a.hidden, a.q_dim(), a.kv_dim(), false, false) + 2 * a.hidden + a.hidden * experts;
  l.per_expert = gated_mlp_params(a.hidden, a.ffn);
  l.experts = experts;
  l.top_k = top_k;
  return total_and_active(std::vector<MoeLayerCount>(static_cast<std::size_t>(a.layers), l), a.vocab * a.hidden,
                          edges(a.vocab, a.hidden, a.tie));
}

// OLMoE (modeling_olmoe.py): q, k, v, o (attention_bias on all four), q_norm over the heads' width
// and k_norm over the kv heads' width, two norms; every layer's mlp the gate (h -> E, no bias) and
// E experts of gate, up and down (h x intermediate_size each).
HfParameterCount count_olmoe(JsonReader& r) {
  HfArch a;
  read_decoder_sizes(r, a, 4096, false);
  const bool bias = r.boolean_or("attention_bias", false);
  refuse_clip_qkv(r);
  MoeLayerCount l;
  l.experts = dimension(r, "num_experts");
  l.top_k = dimension(r, "num_experts_per_tok");
  l.shared = attention_params(a.hidden, a.q_dim(), a.kv_dim(), bias, bias) + a.q_dim() + a.kv_dim() + 2 * a.hidden +
             a.hidden * l.experts;
  l.per_expert = gated_mlp_params(a.hidden, a.ffn);
  return total_and_active(std::vector<MoeLayerCount>(static_cast<std::size_t>(a.layers), l), a.vocab * a.hidden,
                          edges(a.vocab, a.hidden, a.tie));
}

// Qwen2-MoE / Qwen3-MoE (modeling_qwen2_moe.py, modeling_qwen3_moe.py): a layer is sparse unless
// listed in mlp_only_layers, and when (i + 1) % decoder_sparse_step == 0; a sparse layer has the
// gate (h -> E), E experts of moe_intermediate_size and (Qwen2-MoE) a shared expert of
// shared_expert_intermediate_size with its sigmoid gate (h -> 1); a dense one an MLP of
// intermediate_size. Qwen2-MoE: q, k, v biases; Qwen3-MoE: per-head q/k norms.
HfParameterCount count_qwen_moe(JsonReader& r, bool qwen3) {
  HfArch a;
  read_decoder_sizes(r, a, 32768, false, qwen3 ? 128 : 0);
  qwen_windows(r, a.layers);
  const bool qkv_bias = qwen3 ? r.boolean_or("attention_bias", false) : r.boolean_or("qkv_bias", true);
  const bool out_bias = qwen3 && qkv_bias;
  const std::int64_t experts = r.integer_or("num_experts", 0), top_k = dimension(r, "num_experts_per_tok");
  if (experts < 0) r.fail("num_experts", "expected a number of experts >= 0");
  const std::int64_t moe_ffn = dimension(r, "moe_intermediate_size");
  const std::int64_t shared_ffn = qwen3 ? 0 : r.integer_or("shared_expert_intermediate_size", 0);
  const std::vector<bool> sparse = qwen_sparse_layers(r, a.layers);
  std::vector<MoeLayerCount> layers;
  for (std::int64_t i = 0; i < a.layers; ++i) {
    MoeLayerCount l;
    l.shared = attention_params(a.hidden, a.q_dim(), a.kv_dim(), qkv_bias, out_bias) + 2 * a.hidden +
               (qwen3 ? 2 * a.head_dim : 0);
    if (experts > 0 && sparse[static_cast<std::size_t>(i)]) {
      l.shared += a.hidden * experts;
      if (shared_ffn > 0) l.shared += gated_mlp_params(a.hidden, shared_ffn) + a.hidden;
      l.per_expert = gated_mlp_params(a.hidden, moe_ffn);
      l.experts = experts;
      l.top_k = top_k;
    } else {
      l.shared += gated_mlp_params(a.hidden, a.ffn);
    }
    layers.push_back(l);
  }
  return total_and_active(layers, a.vocab * a.hidden, edges(a.vocab, a.hidden, a.tie));
}

// DeepSeek-V2 / V3 (modeling_deepseek_v2.py, modeling_deepseek_v3.py): multi-head latent
// attention (q through a low-rank q_a_proj / q_a_layernorm / q_b_proj, or one q_proj without
// q_lora_rank; kv_a_proj_with_mqa to kv_lora_rank + the rope dims, kv_a_layernorm, kv_b_proj to
// the heads' nope and v dims; o_proj from the heads' v dims), the first first_k_dense_replace
// layers (and those off moe_layer_freq) dense, the others with a gate (h -> E), E experts and
// n_shared_experts experts' worth of shared MLP. V3's router also has a per-expert score
// correction bias (topk_method "noaux_tc"), stored in the checkpoint.
HfParameterCount count_deepseek(JsonReader& r, Family family) {
  const HfArch a = read_deepseek(r, family);
  const std::int64_t h = a.hidden, ql = a.mla.q_lora_rank, c = a.mla.kv_lora_rank, rope = a.mla.rope_head_dim;
  const std::int64_t nope = a.head_dim - rope, bias = a.qkv_bias ? 1 : 0;
  std::int64_t attention = ql > 0 ? (h * ql + bias * ql) + ql + ql * a.q_dim() : h * a.q_dim();
  attention += h * (c + rope) + bias * (c + rope) + c + c * a.heads * (nope + a.mla.v_head_dim);
  attention += a.heads * a.mla.v_head_dim * h + bias * h;
  std::vector<MoeLayerCount> layers;
  for (std::int64_t i = 0; i < a.layers; ++i) {
    MoeLayerCount l;
    l.shared = attention + 2 * h;
    if (a.sparse(i)) {
      l.shared += h * a.experts + (a.router_correction_bias ? a.experts : 0);
      if (a.ffn > 0) l.shared += gated_mlp_params(h, a.ffn);
      l.per_expert = gated_mlp_params(h, a.expert_ffn);
      l.experts = a.experts;
      l.top_k = a.top_k;
    } else {
      l.shared += gated_mlp_params(h, a.dense_ffn);
    }
    layers.push_back(l);
  }
  return total_and_active(layers, a.vocab * h, edges(a.vocab, h, a.tie));
}

// GLM-4.5 (read_glm4_moe), counted from its shapes apart from the module tree: q, k, v (biases when
// attention_bias) and o; per-head q/k norms (use_qk_norm); two norms; the first
// first_k_dense_replace layers a SwiGLU MLP of intermediate_size, the others the router (h -> E
// and the [E] correction bias), E experts of moe_intermediate_size and n_shared_experts of them
// shared.
HfParameterCount count_glm4_moe(JsonReader& r) {
  const HfArch a = read_glm4_moe(r);
  const std::int64_t h = a.hidden;
  std::vector<MoeLayerCount> layers;
  for (std::int64_t i = 0; i < a.layers; ++i) {
    MoeLayerCount l;
    l.shared = attention_params(h, a.q_dim(), a.kv_dim(), a.qkv_bias, a.out_bias) +
               (a.qk_norm != QkNorm::none ? 2 * a.head_dim : 0) + 2 * h;
    if (a.sparse(i)) {
      l.shared += h * a.experts + a.experts + gated_mlp_params(h, a.ffn);  // router, its correction bias, shared experts
      l.per_expert = gated_mlp_params(h, a.expert_ffn);
      l.experts = a.experts;
      l.top_k = a.top_k;
    } else {
      l.shared += gated_mlp_params(h, a.dense_ffn);
    }
    layers.push_back(l);
  }
  return total_and_active(layers, a.vocab * h, edges(a.vocab, h, a.tie));
}

// gpt-oss (read_gpt_oss): attention with biases on q, k, v and o and a sink logit per head; the
// router (h -> E, with bias); E experts, each gate_up_proj (h x 2f) and down_proj (f x h) with biases.
HfParameterCount count_gpt_oss(JsonReader& r) {
  const HfArch a = read_gpt_oss(r);
  const std::int64_t h = a.hidden, f = a.expert_ffn, n = a.experts;
  MoeLayerCount l;
  l.shared = attention_params(h, a.q_dim(), a.kv_dim(), a.qkv_bias, a.out_bias) + a.heads + 2 * h + h * n + n;
  l.per_expert = h * 2 * f + 2 * f + f * h + h;
  l.experts = n;
  l.top_k = a.top_k;
  return total_and_active(std::vector<MoeLayerCount>(static_cast<std::size_t>(a.layers), l), a.vocab * h,
                          edges(a.vocab, h, a.tie));
}

// Llama-4's text model (read_llama4_text): Llama attention (its q/k L2 norm has no weights); the
// MoE layers a router (h -> E), E experts (gate_up h x 2f, down f x h) and one shared expert of
// intermediate_size; the other layers a dense MLP of intermediate_size_mlp.
HfParameterCount count_llama4_text(JsonReader& r) {
  const HfArch a = read_llama4_text(r);
  const std::int64_t h = a.hidden;
  std::vector<MoeLayerCount> layers;
  for (std::int64_t i = 0; i < a.layers; ++i) {
    MoeLayerCount l;
    l.shared = attention_params(h, a.q_dim(), a.kv_dim(), a.qkv_bias, a.out_bias) + 2 * h;
    if (a.sparse(i)) {
      l.shared += h * a.experts + gated_mlp_params(h, a.ffn);
      l.per_expert = gated_mlp_params(h, a.expert_ffn);
      l.experts = a.experts;
      l.top_k = a.top_k;
    } else {
      l.shared += gated_mlp_params(h, a.dense_ffn);  // intermediate_size_mlp
    }
    layers.push_back(l);
  }
  return total_and_active(layers, a.vocab * h, edges(a.vocab, h, a.tie));
}

// The MoE families import_hf_config builds a model for (the others are counted only).
bool imports_moe(Family family) {
  return family == Family::mixtral || family == Family::qwen2_moe || family == Family::qwen3_moe ||
         family == Family::olmoe || family == Family::deepseek_v2 || family == Family::deepseek_v3 || family == Family::gpt_oss ||
         family == Family::llama4 || family == Family::llama4_text || family == Family::glm4_moe;
}

HfParameterCount count_moe(JsonReader& r, Family family) {
  HfParameterCount c;
  try {
    switch (family) {
      case Family::mixtral: c = count_mixtral(r); break;
      case Family::qwen2_moe: c = count_qwen_moe(r, false); break;
      case Family::qwen3_moe: c = count_qwen_moe(r, true); break;
      case Family::olmoe: c = count_olmoe(r); break;
      case Family::deepseek_v2:
      case Family::deepseek_v3: c = count_deepseek(r, family); break;
      case Family::gpt_oss: c = count_gpt_oss(r); break;
      case Family::llama4_text: c = count_llama4_text(r); break;
      case Family::glm4_moe: c = count_glm4_moe(r); break;
      default: break;
    }
  } catch (const ArithmeticOverflow& e) {
    // The routed experts are what a count past 2^63 is made of: named at the experts' key.
    const char* experts = family == Family::qwen2_moe || family == Family::qwen3_moe || family == Family::olmoe
                              ? "num_experts"
                          : family == Family::deepseek_v2 || family == Family::deepseek_v3 || family == Family::glm4_moe
                              ? "n_routed_experts"
                                                                                           : "num_local_experts";
    r.fail(experts, std::string("expected a model whose parameter count fits in 64-bit integers: ") + e.what());
  }
  read_dtype(r);
  r.ignore("architectures");
  refuse_unread_keys(r, family);
  return c;
}

const char* const kLlama4TextOnly =
    "the vision tower and its projector: the text model (text_config) only is imported";

// Llama-4's image-text config (Llama4Config) around its text model: the keys of the image side,
// which the text model does not read, and the output layer's tie (Llama4ForConditionalGeneration
// keeps it untied; a tie across the image-text model is not modelled).
void read_llama4_outer_keys(JsonReader& r) {
  require_false(r, "tie_word_embeddings", "tying the image-text model's output layer");
  for (const std::string key : {"vision_config", "boi_token_index", "eoi_token_index", "image_token_index",
                                "architectures", "model_type"})
    r.ignore(key);
}

// The text_config of a Llama-4 image-text config, which must be a llama4_text one.
JsonReader llama4_text_config(JsonReader& r) {
  JsonReader text = r.object("text_config");
  text.choice_or("model_type", {"llama4_text"}, "llama4_text");
  return text;
}

// Llama-4's image-text config: the text model in text_config.
HfParameterCount count_llama4(JsonReader& r) {
  JsonReader text = llama4_text_config(r);
  HfParameterCount c = count_moe(text, Family::llama4_text);
  c.note = kLlama4TextOnly;
  read_dtype(r);
  read_llama4_outer_keys(r);
  refuse_unread_keys(r, Family::llama4);
  return c;
}

// Llama-4's image-text config imported as transformers' text-only Llama4ForCausalLM over its
// text_config (torchtitan's Llama-4 is text-only too); the parameters' dtype is the text
// config's, else the outer config's.
HfArch read_llama4(JsonReader& r, const HfImportOptions& options) {
  JsonReader text = llama4_text_config(r);
  const bool text_dtype = text.has("torch_dtype") || text.has("dtype");
  HfArch a = read_dense_arch(text, Family::llama4_text, options);
  const DType outer_dtype = read_dtype(r);
  if (!text_dtype) a.dtype = outer_dtype;
  read_llama4_outer_keys(r);
  refuse_unread_keys(r, Family::llama4);
  return a;
}

const char* const kGemma3TextOnly =
    "the vision tower (SigLIP) and its projector: the text model (text_config) only is imported";

// Gemma-3's image-text config (transformers' Gemma3Config, Gemma3ForConditionalGeneration: the
// 4B, 12B and 27B checkpoints) imported as its text model, Gemma3ForCausalLM over text_config,
// as a text-only fine-tune runs it. Its text_config is written as a diff against
// Gemma3TextConfig's defaults (google/gemma-3-27b-it states no vocab_size), so the sizes it
// leaves out take those defaults (transformers models/gemma3/configuration_gemma3.py,
// Gemma3TextConfig.__init__: vocab_size 262,208, hidden_size 2,304, intermediate_size 9,216, 26
// layers, 8 heads, 4 KV heads, head_dim 256). The parameters' dtype is the text config's, else
// the outer config's.
HfArch read_gemma3(JsonReader& r, const HfImportOptions& options) {
  r.object("text_config");  // an object, or the error names it
  json text = r.raw("text_config");
  const std::pair<const char*, std::int64_t> defaults[] = {
      {"vocab_size", 262208}, {"hidden_size", 2304},        {"intermediate_size", 9216}, {"num_hidden_layers", 26},
      {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256}};
  for (const auto& [key, value] : defaults)
    if (!text.contains(key) || text[key].is_null()) text[key] = value;
  JsonReader reader(text, r.file(), r.path_of("text_config"));
  reader.choice_or("model_type", {"gemma3_text"}, "gemma3_text");
  const bool text_dtype = reader.has("torch_dtype") || reader.has("dtype");
  HfArch a = read_dense_arch(reader, Family::gemma3_text, options);
  const DType outer_dtype = read_dtype(r);
  if (!text_dtype) a.dtype = outer_dtype;
  if (!r.boolean_or("tie_word_embeddings", true))
    r.fail("tie_word_embeddings", "an untied output layer of the image-text model is not modelled; expected true");
  for (const std::string key : {"architectures", "model_type"}) r.ignore(key);
  refuse_unread_keys(r, Family::gemma3);
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

json norm_of(const std::string& name, const std::string& type, std::int64_t size, const HfArch& a) {
  json m = module(name, type);
  m["params"] = json::array({param("weight", {size}, a.dtype)});
  if (a.norm_bias) m["params"].push_back(param("bias", {size}, a.dtype));
  return m;
}

json norm(const std::string& name, const std::string& type, const HfArch& a) { return norm_of(name, type, a.hidden, a); }

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
                    token_embedding_costs(a.hidden, a.position_embedding, a.embedding_dropout > 0, a.scaled_embedding),
                    kEdgeCostSource);
}

json final_norm(const std::string& name, const std::string& type, const HfArch& a) {
  return with_costs(norm(name, type, a),
                    final_norm_costs(a.hidden, !a.liger && type.find("RMSNorm") != std::string::npos), kEdgeCostSource);
}

// The output projection (no bias in any supported family), tied to the embedding or not.
json output_projection(const std::string& name, const std::string& embedding_weight, const HfArch& a,
                       const HfImportOptions& options) {
  json m = module(name, "Linear");
  json weight = param("weight", {a.vocab, a.hidden}, a.dtype);
  if (a.tie) weight["tied_to"] = embedding_weight;
  m["params"] = json::array({weight});
  // Liger's default patch replaces the causal LM's forward with its fused linear cross-entropy,
  // whose chunks depend on the micro-batch's tokens: the file holds its costs at one sequence of
  // the model's context (1,024 tokens where the config states none), which the planner recomputes
  // at every point's b*s (resolve_loss in planner/plan.cpp).
  const LossKind loss = a.liger ? LossKind::chunked : options.fp32_loss ? LossKind::fp32_upcast : LossKind::bf16;
  const double tokens = loss == LossKind::chunked ? static_cast<double>(a.max_seq > 0 ? a.max_seq : 1024) : 0;
  return with_costs(m, lm_head_costs(a.hidden, a.vocab, loss, tokens, a.logit_softcap), kEdgeCostSource);
}

// What the family's transformers eager_attention_forward does to the scores between QK^T and
// AV (DecoderBlockShape::EagerScoreChain), read in huggingface/transformers (docs/model-schema.md,
// "Eager attention, op by op"). Per score: 2 bytes for a 16-bit score tensor, 1 for a bool mask.
DecoderBlockShape::EagerScoreChain eager_score_chain(const HfArch& a) {
  using Op = DecoderBlockShape::EagerScoreOp;
  using Softmax = DecoderBlockShape::EagerSoftmax;
  DecoderBlockShape::EagerScoreChain chain;  // Llama's shared path: scale, mask add, fp32 softmax
  const Op mask_add{"causal mask add (+ attention_mask, broadcast over the heads)", 4, 2, true, false};
  switch (a.family) {
    case Family::gpt2:
      // modeling_gpt2.py: attn_weights / torch.full([], sqrt(d)), + attention_mask (older
      // releases: torch.where on the causal bias), softmax in the scores' dtype.
      chain.before_softmax = {{"scale (/ sqrt(head_dim) as a 0-dim tensor)", 2, 2, true, true}, mask_add};
      chain.softmax = Softmax::activation_dtype;
      break;
    case Family::falcon:
      // modeling_falcon.py (no ALiBi): attention_scores /= sqrt(d) in place, then
      // softmax(attention_scores + attention_mask, dtype=hidden_states.dtype).
      chain.before_softmax = {{"scale (/= sqrt(head_dim), in place)", 2, 2, false, true}, mask_add};
      chain.softmax = Softmax::activation_dtype;
      break;
    case Family::mpt:
      // modeling_mpt.py: matmul * softmax_scale, + position_bias (ALiBi), masked_fill with the
      // bool mask, softmax(attention_scores.float()).to(value_states.dtype).
      chain.before_softmax = {{"scale (* softmax_scale)", 2, 2, true, true}};
      if (a.alibi) chain.before_softmax.push_back({"ALiBi bias add (+ position_bias)", 2, 2, true, false});
      chain.before_softmax.push_back({"causal mask (masked_fill with the bool mask)", 3, 2, true, true});
      chain.softmax = Softmax::fp32_input;
      break;
    case Family::llama4:
    case Family::llama4_text:
      // modeling_llama4.py: matmul / sqrt(head_dim), + causal_mask, softmax(attn_weights.float()).
      chain.before_softmax = {{"scale (/ sqrt(head_dim))", 2, 2, true, true}, mask_add};
      chain.softmax = Softmax::fp32_input;
      break;
    case Family::gpt_oss:
      // modeling_gpt_oss.py: * scaling, + causal_mask, cat with the sink logits, minus the row
      // maximum (max's backward scatters into a new score-sized gradient), softmax in the
      // scores' dtype; AV reads the probabilities without the sink column (a view).
      chain.before_softmax = {{"scale (attn_weights * scaling)", 2, 2, true, true},
                              mask_add,
                              {"cat with the sink logits", 2, 2, true, false},
                              {"row maximum (max(dim=-1))", 2, 0, false, true},
                              {"minus the row maximum", 2, 2, true, false}};
      chain.softmax = Softmax::activation_dtype;
      break;
    default:
      break;  // Llama's eager_attention_forward, which the other families copy
  }
  if (a.attention_softcap) {
    // modeling_gemma2.py eager_attention_forward: after the scale, attn_weights / softcap, tanh,
    // * softcap, then the mask and the fp32 softmax; tanh's backward reads its output.
    chain.before_softmax.insert(chain.before_softmax.begin() + 1,
                                {{"soft-cap divide (/ softcap)", 2, 2, true, true},
                                 {"soft-cap tanh", 2, 2, true, true, true},
                                 {"soft-cap multiply (* softcap)", 2, 2, true, true}});
  }
  return chain;
}

// One layer's shape: `sparse`, whether its MLP is the MoE block (HfArch::sparse); `nope`, whether
// it has no rotary (HfArch::nope: Llama-4's NoPE layers, which normalize neither q nor k either).
DecoderBlockShape block_shape(const HfArch& a, std::int64_t window, bool sparse, bool nope) {
  DecoderBlockShape s;
  s.hidden_size = a.hidden;
  s.num_heads = a.heads;
  s.num_kv_heads = a.kv_heads;
  s.head_dim = a.head_dim;
  s.ffn_hidden_size = sparse || a.experts == 0 ? a.ffn : a.dense_ffn;
  s.mla = a.mla;
  s.gated_mlp = a.llama_like();
  s.gate_activation = a.gelu_gate ? "GELU" : "SiLU";
  s.fused_gate_up = a.fused_gate_up;
  s.parallel_residual = a.parallel_residual;
  s.falcon_parallel = a.falcon_parallel;
  s.one_parallel_norm = a.one_parallel_norm;
  s.norm_placement = a.norm_placement;
  s.qk_norm = nope ? QkNorm::none : a.qk_norm;
  s.rotary = !a.alibi && a.family != Family::gpt2 && a.family != Family::mpt && !nope;
  s.alibi = a.alibi;
  s.attention_dropout = a.attention_dropout > 0;
  s.residual_dropout = a.residual_dropout > 0;
  // GPT-2's c_attn, GPT-NeoX's query_key_value, MPT's Wqkv, Falcon's query_key_value and
  // Phi-3's qkv_proj compute q, k and v at once.
  s.fused_qkv = a.fused_qkv;
  s.qkv_bias = a.qkv_bias;
  s.out_bias = a.out_bias;
  s.mlp_bias = a.mlp_bias;
  s.window = window;
  s.eager = eager_score_chain(a);
  // GPT-2, GPT-NeoX, Falcon and MPT normalise with nn.LayerNorm (one native kernel; MPT's
  // LPLayerNorm too without autocast); the others with Python RMSNorms. Only GPT-2's default
  // activation, gelu_new, is Python (NewGELUActivation); the others call F.gelu or F.silu.
  s.eager_elementwise.python_rms_norm = a.norm_type.find("RMSNorm") != std::string::npos;
  s.eager_elementwise.python_gelu = a.family == Family::gpt2;
  // [Liger block kernels] (models/transformer_costs.h): every RMSNorm of the family is
  // LigerRMSNorm (the class is replaced before the model is built, as axolotl and LLaMA-Factory
  // do; the HF Trainer's instance patch leaves Qwen3's and OLMo-2's q/k norms eager).
  s.liger = a.liger;
  if (a.liger) s.eager_elementwise.python_rms_norm = false;
  if (sparse) {
    s.moe.experts = a.experts;
    s.moe.top_k = a.top_k;
    s.moe.expert_ffn_size = a.expert_ffn;
    s.moe.shared_expert_gate = a.shared_expert_gate;
  }
  return s;
}

// The decoder blocks under their ModuleList, written with "repeat": once when every layer has the
// same modules, else once per run of consecutive layers of one kind (DeepSeek's first dense layers,
// then its MoE ones; Qwen-MoE's mlp_only_layers), each run's "first_index" its first layer.
// `children_of(sparse)` gives a layer's modules. When a run's layers differ in their attention
// window (Gemma's alternating sliding-window and full layers) or in having rotary (Llama-4's NoPE
// layers), the block lists one costs object per (window, rotary) in "costs_variants" (first-seen
// order) and each copy's variant in "costs_of_copy".
std::vector<json> decoder_blocks(const std::string& type, const std::function<std::vector<json>(bool)>& children_of,
                                 const HfArch& a, const HfImportOptions& options) {
  std::vector<json> blocks;
  for (std::int64_t start = 0, end = 0; start < a.layers; start = end) {
    const bool sparse = a.sparse(start);
    for (end = start + 1; end < a.layers && a.sparse(end) == sparse;) ++end;
    // A layer's variant: its window and whether it has no rotary (Llama-4's NoPE layers).
    std::vector<std::pair<std::int64_t, bool>> distinct;
    std::vector<std::int64_t> variant_of_layer;
    for (std::int64_t i = start; i < end; ++i) {
      const std::pair<std::int64_t, bool> variant{a.windows[static_cast<std::size_t>(i)], a.nope(i)};
      auto it = std::find(distinct.begin(), distinct.end(), variant);
      if (it == distinct.end()) it = distinct.insert(distinct.end(), variant);
      variant_of_layer.push_back(it - distinct.begin());
    }
    auto costs_for = [&](const std::pair<std::int64_t, bool>& variant) {
      return costs_to_json(
          decoder_block_costs(block_shape(a, variant.first, sparse, variant.second), options.flash_attention),
          kBlockCostSource);
    };
    json block = with_children(module("{i}", type), children_of(sparse));
    block["repeat"] = end - start;
    if (start > 0 || end < a.layers) block["first_index"] = start;
    if (distinct.size() == 1) {
      block["costs"] = costs_for(distinct.front());
    } else {
      json variants = json::array();
      for (const auto& variant : distinct) variants.push_back(costs_for(variant));
      block["costs_variants"] = std::move(variants);
      block["costs_of_copy"] = variant_of_layer;
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

// Every layer with the same modules.
std::vector<json> decoder_blocks(const std::string& type, const std::vector<json>& children, const HfArch& a,
                                 const HfImportOptions& options) {
  return decoder_blocks(type, [&](bool) { return children; }, a, options);
}

// A SwiGLU MLP's projections (LlamaMLP, a shared expert, DeepseekV3MLP): gate_proj, up_proj
// (h -> f), down_proj (f -> h).
std::vector<json> gated_mlp_projections(std::int64_t h, std::int64_t f, bool bias, DType dtype) {
  return {linear("gate_proj", h, f, bias, dtype), linear("up_proj", h, f, bias, dtype),
          linear("down_proj", f, h, bias, dtype)};
}

// DeepSeek's multi-head latent attention projections (DeepseekV3Attention.__init__, in forward
// order): q_a_proj, q_a_layernorm, q_b_proj (or one q_proj without q_lora_rank),
// kv_a_proj_with_mqa (h -> kv_lora_rank + rope), kv_a_layernorm, kv_b_proj (kv_lora_rank ->
// heads x (nope + v)), o_proj (heads x v -> h). attention_bias: q_a_proj, kv_a_proj_with_mqa, o_proj.
std::vector<json> mla_projections(const std::string& norm_type, const HfArch& a) {
  const std::int64_t h = a.hidden, ql = a.mla.q_lora_rank, c = a.mla.kv_lora_rank, rope = a.mla.rope_head_dim;
  const std::int64_t nope = a.head_dim - rope, v = a.mla.v_head_dim;
  std::vector<json> projections;
  if (ql > 0) {
    projections = {linear("q_a_proj", h, ql, a.qkv_bias, a.dtype), norm_of("q_a_layernorm", norm_type, ql, a),
                   linear("q_b_proj", ql, a.q_dim(), false, a.dtype)};
  } else {
    projections = {linear("q_proj", h, a.q_dim(), false, a.dtype)};
  }
  projections.push_back(linear("kv_a_proj_with_mqa", h, c + rope, a.qkv_bias, a.dtype));
  projections.push_back(norm_of("kv_a_layernorm", norm_type, c, a));
  projections.push_back(linear("kv_b_proj", c, a.heads * (nope + v), false, a.dtype));
  projections.push_back(linear("o_proj", a.heads * v, h, a.out_bias, a.dtype));
  return projections;
}

// A sparse MoE block as transformers builds it (MixtralSparseMoeBlock's `block_sparse_moe`,
// Qwen2MoeSparseMoeBlock's `mlp`), in forward order: the router `gate` (h -> E), the routed
// experts stacked as grouped parameters (transformers' MixtralExperts: gate_up_proj [E, 2fe, h],
// down_proj [E, h, fe]; torchtitan's GroupedExperts holds the same elements as w1, w3, w2), then
// Qwen2-MoE's shared expert and its gate (h -> 1).
// DeepSeek's MoE block (DeepseekV3MoE) is `mlp` with the same router and experts, its
// `shared_experts` one MLP of n_shared_experts x moe_intermediate_size and, for V3, the router's
// score-correction bias [E] (DeepseekV3TopkRouter).
// gpt-oss's MLP (GptOssMLP), in forward order: the router (GptOssTopKRouter: weight [E, h], bias
// [E]), then the experts (GptOssExperts: gate_up_proj [E, h, 2fe], down_proj [E, fe, h], each with
// its bias).
json gpt_oss_moe_block(const HfArch& a) {
  const std::int64_t h = a.hidden, fe = a.expert_ffn, n = a.experts;
  json router = module("router", "GptOssTopKRouter");
  router["params"] = json::array({param("weight", {n, h}, a.dtype), param("bias", {n}, a.dtype)});
  json experts = module("experts", "GptOssExperts");
  experts["experts"] = n;
  experts["params"] = json::array({param("gate_up_proj", {n, h, 2 * fe}, a.dtype),
                                   param("gate_up_proj_bias", {n, 2 * fe}, a.dtype),
                                   param("down_proj", {n, fe, h}, a.dtype), param("down_proj_bias", {n, h}, a.dtype)});
  return with_children(module("mlp", "GptOssMLP"), {router, experts});
}

// Llama-4's MoE feed_forward (Llama4TextMoe), in forward order: the router (Llama4Router, h -> E,
// no bias), the experts (Llama4TextExperts: gate_up_proj [E, h, 2fe], down_proj [E, fe, h]), the
// shared expert (Llama4TextMLP of intermediate_size).
json llama4_moe_block(const HfArch& a) {
  const std::int64_t h = a.hidden, fe = a.expert_ffn, n = a.experts;
  json experts = module("experts", "Llama4TextExperts");
  experts["experts"] = n;
  experts["params"] = json::array({param("gate_up_proj", {n, h, 2 * fe}, a.dtype), param("down_proj", {n, fe, h}, a.dtype)});
  return with_children(module("feed_forward", "Llama4TextMoe"),
                       {linear("router", h, n, false, a.dtype, "Llama4Router"), experts,
                        with_children(module("shared_expert", "Llama4TextMLP"),
                                      gated_mlp_projections(h, a.ffn, false, a.dtype))});
}

json moe_block(const std::string& prefix, const HfArch& a) {
  if (a.family == Family::gpt_oss) return gpt_oss_moe_block(a);
  if (a.family == Family::llama4_text) return llama4_moe_block(a);
  const std::int64_t h = a.hidden, fe = a.expert_ffn, f = a.ffn, n = a.experts;
  // DeepSeek's block and GLM-4.5's copy of it: shared_experts, class ...MoE.
  const bool deepseek = a.family == Family::deepseek_v2 || a.family == Family::deepseek_v3 || a.family == Family::glm4_moe;
  json experts = module("experts", prefix + "Experts");
  experts["experts"] = n;
  experts["params"] = json::array({param("gate_up_proj", {n, 2 * fe, h}, a.dtype), param("down_proj", {n, h, fe}, a.dtype)});
  json gate = linear("gate", h, n, false, a.dtype, a.router_correction_bias ? prefix + "TopkRouter" : "Linear");
  if (a.router_correction_bias) gate["params"].push_back(param("e_score_correction_bias", {n}, a.dtype));
  std::vector<json> children = {gate, experts};
  if (f > 0) {
    children.push_back(with_children(module(deepseek ? "shared_experts" : "shared_expert", prefix + "MLP"),
                                     gated_mlp_projections(h, f, false, a.dtype)));
    if (a.shared_expert_gate) children.push_back(linear("shared_expert_gate", h, 1, false, a.dtype));
  }
  const std::string name = a.family == Family::mixtral ? "block_sparse_moe" : "mlp";
  return with_children(module(name, prefix + (deepseek ? "MoE" : "SparseMoeBlock")), children);
}

// A Llama-like decoder layer's children in forward order: the norms where the family puts them
// around the attention and the MLP (or MoE block).
std::vector<json> decoder_block_children(const HfArch& a, const std::string& norm_type, const json& attention,
                                         const json& mlp) {
  std::vector<json> block;
  switch (a.norm_placement) {
    case NormPlacement::pre:
      block = {norm("input_layernorm", norm_type, a), attention, norm("post_attention_layernorm", norm_type, a), mlp};
      break;
    case NormPlacement::sandwich:
      block = {norm("input_layernorm", norm_type, a), attention, norm("post_attention_layernorm", norm_type, a),
               norm("pre_feedforward_layernorm", norm_type, a), mlp, norm("post_feedforward_layernorm", norm_type, a)};
      break;
    case NormPlacement::post:
      block = {attention, norm("post_attention_layernorm", norm_type, a), mlp,
               norm("post_feedforward_layernorm", norm_type, a)};
      break;
  }
  return block;
}

// Llama, Mistral, Qwen2/3, Gemma-2/3, Phi-3, OLMo-2, the MoE families and DeepSeek: transformers'
// module names, children in forward order (Gemma's four norms, OLMo-2's post-norms, Phi-3's fused
// projections, q/k norms, DeepSeek's MLA).
json llama_like_root(const HfArch& a, const HfImportOptions& options) {
  static const std::map<Family, std::string> prefixes = {
      {Family::llama, "Llama"}, {Family::mistral, "Mistral"}, {Family::qwen2, "Qwen2"},
      {Family::qwen3, "Qwen3"}, {Family::gemma2, "Gemma2"},   {Family::gemma3_text, "Gemma3"},
      {Family::phi3, "Phi3"},   {Family::olmo2, "Olmo2"},     {Family::olmo3, "Olmo3"},     {Family::mixtral, "Mixtral"},
      {Family::smollm3, "SmolLM3"}, {Family::qwen2_moe, "Qwen2Moe"}, {Family::qwen3_moe, "Qwen3Moe"},
      {Family::olmoe, "Olmoe"},
      {Family::deepseek_v2, "DeepseekV2"}, {Family::deepseek_v3, "DeepseekV3"},
      {Family::gpt_oss, "GptOss"}, {Family::llama4_text, "Llama4Text"}, {Family::glm4_moe, "Glm4Moe"}};
  const std::string prefix = prefixes.at(a.family);
  const std::int64_t h = a.hidden, q = a.q_dim(), kv = a.kv_dim(), f = a.ffn;
  const std::string norm_type = prefix + a.norm_type;
  const std::int64_t q_norm_size = a.qk_norm_over_heads ? q : a.head_dim;
  const std::int64_t k_norm_size = a.qk_norm_over_heads ? kv : a.head_dim;
  std::vector<json> projections;
  if (a.mla.kv_lora_rank > 0) {
    projections = mla_projections(norm_type, a);
  } else if (a.fused_qkv) {
    projections = {linear("qkv_proj", h, q + 2 * kv, a.qkv_bias, a.dtype)};
  } else if (a.qk_norm == QkNorm::after_each_projection) {
    projections = {linear("q_proj", h, q, a.qkv_bias, a.dtype), norm_of("q_norm", norm_type, q_norm_size, a),
                   linear("k_proj", h, kv, a.qkv_bias, a.dtype), norm_of("k_norm", norm_type, k_norm_size, a),
                   linear("v_proj", h, kv, a.qkv_bias, a.dtype)};
  } else {
    projections = {linear("q_proj", h, q, a.qkv_bias, a.dtype), linear("k_proj", h, kv, a.qkv_bias, a.dtype),
                   linear("v_proj", h, kv, a.qkv_bias, a.dtype)};
    // Llama-4's q/k norm (Llama4TextL2Norm) has no weight: no module to list.
    if (a.qk_norm == QkNorm::after_all_projections && a.family != Family::llama4_text) {
      projections.push_back(norm_of("q_norm", norm_type, q_norm_size, a));
      projections.push_back(norm_of("k_norm", norm_type, k_norm_size, a));
    }
  }
  if (a.mla.kv_lora_rank == 0) projections.push_back(linear("o_proj", q, h, a.out_bias, a.dtype));
  json attention = with_children(module("self_attn", prefix + "Attention"), projections);
  // gpt-oss: one learned logit per head joins each row's softmax (GptOssAttention.sinks).
  if (a.attention_sinks) attention["params"] = json::array({param("sinks", {a.heads}, a.dtype)});
  // A dense layer's MLP: intermediate_size wide (dense_ffn in a family with MoE layers).
  const std::int64_t f_dense = a.experts > 0 ? a.dense_ffn : f;
  const json dense_mlp = with_children(
      module(a.family == Family::llama4_text ? "feed_forward" : "mlp", prefix + "MLP"),
      a.fused_gate_up ? std::vector<json>{linear("gate_up_proj", h, 2 * f_dense, a.mlp_bias, a.dtype),
                                          linear("down_proj", f_dense, h, a.mlp_bias, a.dtype)}
                      : gated_mlp_projections(h, f_dense, a.mlp_bias, a.dtype));
  const json sparse_mlp = a.experts > 0 ? moe_block(prefix, a) : json();
  auto block_of = [&](bool sparse) { return decoder_block_children(a, norm_type, attention, sparse ? sparse_mlp : dense_mlp); };
  json model = with_children(module("model", prefix + (a.family == Family::gemma3_text ? "TextModel" : "Model")),
                             {token_embedding("embed_tokens",
                                              a.family == Family::gemma3_text ? "Gemma3TextScaledWordEmbedding" : "Embedding",
                                              a),
                              with_children(module("layers", "ModuleList"),
                                            decoder_blocks(prefix + "DecoderLayer", block_of, a, options)),
                              final_norm("norm", norm_type, a)});
  // Llama-4's text-only causal LM is Llama4ForCausalLM over a Llama4TextModel.
  return with_children(module("", (a.family == Family::llama4_text ? "Llama4" : prefix) + "ForCausalLM"),
                       {model, output_projection("lm_head", "model.embed_tokens.weight", a, options)});
}


// transformers' FalconForCausalLM; a block's children in forward order (Falcon-40B's ln_attn and
// ln_mlp both run first).
json falcon_root(const HfArch& a, const HfImportOptions& options) {
  const std::int64_t h = a.hidden, f = a.ffn;
  json attention = with_children(module("self_attention", "FalconAttention"),
                                 {linear("query_key_value", h, a.q_dim() + 2 * a.kv_dim(), a.qkv_bias, a.dtype),
                                  linear("dense", a.q_dim(), h, a.out_bias, a.dtype)});
  json mlp = with_children(module("mlp", "FalconMLP"), {linear("dense_h_to_4h", h, f, a.mlp_bias, a.dtype),
                                                        linear("dense_4h_to_h", f, h, a.mlp_bias, a.dtype)});
  std::vector<json> block;
  if (!a.parallel_residual) {
    block = {norm("input_layernorm", "LayerNorm", a), attention, norm("post_attention_layernorm", "LayerNorm", a), mlp};
  } else if (a.one_parallel_norm) {
    block = {norm("input_layernorm", "LayerNorm", a), attention, mlp};
  } else {
    block = {norm("ln_attn", "LayerNorm", a), norm("ln_mlp", "LayerNorm", a), attention, mlp};
  }
  json transformer = with_children(module("transformer", "FalconModel"),
                                   {token_embedding("word_embeddings", "Embedding", a),
                                    with_children(module("h", "ModuleList"),
                                                  decoder_blocks("FalconDecoderLayer", block, a, options)),
                                    final_norm("ln_f", "LayerNorm", a)});
  return with_children(module("", "FalconForCausalLM"),
                       {transformer, output_projection("lm_head", "transformer.word_embeddings.weight", a, options)});
}

json gpt2_root(const HfArch& a, const HfImportOptions& options) {
  const std::int64_t h = a.hidden, f = a.ffn;
  json attention = with_children(module("attn", "GPT2Attention"),
                                 {conv1d("c_attn", h, 3 * h, a.dtype), conv1d("c_proj", h, h, a.dtype)});
  json mlp = with_children(module("mlp", "GPT2MLP"), {conv1d("c_fc", h, f, a.dtype), conv1d("c_proj", f, h, a.dtype)});
  std::vector<json> block = {norm("ln_1", "LayerNorm", a), attention, norm("ln_2", "LayerNorm", a), mlp};
  json transformer = with_children(module("transformer", "GPT2Model"),
                                   {token_embedding("wte", "Embedding", a), embedding("wpe", "Embedding", a.max_seq, a),
                                    with_children(module("h", "ModuleList"), decoder_blocks("GPT2Block", block, a, options)),
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
  std::vector<json> block = {norm("input_layernorm", "LayerNorm", a), attention,
                             norm("post_attention_layernorm", "LayerNorm", a), mlp};
  json model = with_children(module("gpt_neox", "GPTNeoXModel"),
                             {token_embedding("embed_in", "Embedding", a),
                              with_children(module("layers", "ModuleList"), decoder_blocks("GPTNeoXLayer", block, a, options)),
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
  std::vector<json> block = {norm("norm_1", a.norm_type, a), attention, norm("norm_2", a.norm_type, a), mlp};
  std::vector<json> children = {token_embedding("wte", "SharedEmbedding", a)};
  if (a.position_embedding) children.push_back(embedding("wpe", "Embedding", a.max_seq, a));
  children.push_back(with_children(module("blocks", "ModuleList"), decoder_blocks("MPTBlock", block, a, options)));
  children.push_back(final_norm("norm_f", a.norm_type, a));
  json transformer = with_children(module("transformer", "MPTModel"), children);
  return with_children(module("", "MPTForCausalLM"), {transformer, output_projection("lm_head", "transformer.wte.weight", a, options)});
}

json arch_summary(const HfArch& a) {
  json summary = {{"family", family_name(a.family).model_type},
          {"num_layers", a.layers},
          {"hidden_size", a.hidden},
          {"num_heads", a.heads},
          {"num_kv_heads", a.kv_heads},
          {"ffn_hidden_size", a.ffn},
          {"vocab_size", a.vocab},
          {"max_seq_len", a.max_seq}};
  if (a.experts > 0) {
    summary["num_experts"] = a.experts;
    summary["experts_per_token"] = a.top_k;
    summary["expert_ffn_hidden_size"] = a.expert_ffn;
  }
  return summary;
}

// What the config describes that the imported model leaves out (the model's "not_modelled"):
// DeepSeek-V3's and GLM-4.5's multi-token-prediction module (num_nextn_predict_layers:
// model.layers.61 in V3's checkpoint), which transformers' causal-LM classes do not build
// (DeepseekV3Model makes num_hidden_layers layers; its _keys_to_ignore_on_load_unexpected skips
// model.layers.61); the vision tower of an image-text config imported as its text model.
std::vector<std::string> not_modelled(const json& config, Family family) {
  std::vector<std::string> out;
  auto it = config.find("num_nextn_predict_layers");
  if (it != config.end() && it->is_number_integer() && it->get<std::int64_t>() > 0)
    out.push_back("num_nextn_predict_layers=" + std::to_string(it->get<std::int64_t>()) +
                  ": the multi-token-prediction module (transformers' " + family_name(family).architecture +
                  " does not build it)");
  if (family == Family::llama4) out.push_back(kLlama4TextOnly);
  if (family == Family::gemma3) out.push_back(kGemma3TextOnly);
  return out;
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
  for (const FamilyName& f : kFamilies)
    if (!f.moe || imports_moe(f.family)) types.push_back(f.model_type);
  return types;
}

std::vector<std::string> counted_moe_model_types() {
  std::vector<std::string> types;
  for (const FamilyName& f : kFamilies)
    if (f.moe) types.push_back(f.model_type);
  return types;
}

HfParameterCount count_hf_parameters(const nlohmann::json& config, const std::string& file) {
  JsonReader r(config, file);
  const Family family = detect_family(r);
  if (family == Family::llama4) return count_llama4(r);
  if (family_name(family).moe) return count_moe(r, family);
  const json imported = import_hf_config(config, file);  // the counts do not depend on the options
  HfParameterCount c;
  c.total = c.active = parse_model(imported, file).parameter_count();
  c.input_embedding = imported["arch"]["vocab_size"].get<std::int64_t>() * imported["arch"]["hidden_size"].get<std::int64_t>();
  if (family == Family::gemma3) c.note = kGemma3TextOnly;
  return c;
}

namespace {

// The dense families whose modeling code Liger-Kernel patches (MODEL_TYPE_TO_APPLY_LIGER_FN in
// src/liger_kernel/transformers/monkey_patch.py@ead96b6). Falcon, GPT-2, GPT-NeoX and MPT have
// no Liger patch; its MoE patches (mixtral, qwen3_moe, gpt_oss) change the experts' kernels,
// which moe_routed_saved_tensors does not model.
bool liger_patches(Family family) {
  switch (family) {
    case Family::llama: case Family::mistral: case Family::qwen2: case Family::qwen3: case Family::gemma2:
    case Family::gemma3_text: case Family::gemma3: case Family::phi3: case Family::olmo2: case Family::olmo3:
    case Family::smollm3:
      return true;
    default:
      return false;
  }
}

}  // namespace

nlohmann::json import_hf_config(const nlohmann::json& config, const std::string& file,
                                const HfImportOptions& options) {
  JsonReader r(config, file);
  const Family family = detect_family(r);
  if (options.liger && !liger_patches(family))
    throw InputError(file, "model_type",
                     std::string("Liger-Kernel's kernels (training.liger, --liger) are modelled for the dense families "
                                 "it patches (llama, mistral, qwen2, qwen3, gemma2, gemma3, gemma3_text, phi3, olmo2, "
                                 "olmo3, smollm3), not \"") +
                         family_name(family).model_type + "\"");
  HfArch a = family == Family::llama4   ? read_llama4(r, options)
             : family == Family::gemma3 ? read_gemma3(r, options)
                                        : read_dense_arch(r, family, options);
  a.liger = options.liger;
  if (a.liger && a.logit_softcap)
    throw InputError(file, "final_logit_softcapping",
                     "Liger's fused linear cross-entropy (training.liger's loss) is not modelled with soft-capped logits "
                     "(it takes the cap into its kernel); import without Liger, or without final_logit_softcapping");
  json root;
  switch (a.family) {
    case Family::falcon: root = falcon_root(a, options); break;
    case Family::gpt2: root = gpt2_root(a, options); break;
    case Family::gpt_neox: root = gpt_neox_root(a, options); break;
    case Family::mpt: root = mpt_root(a, options); break;
    default: root = llama_like_root(a, options); break;
  }
  root.erase("name");  // the root module is unnamed
  const std::string source = "Hugging Face config " + file + " (model_type " + family_name(family).model_type +
                             "), imported by fsdpsim with flash_attention=" +
                             (options.flash_attention ? "true" : "false") +
                             (options.fp32_loss ? "" : ", fp32_loss=false") + (options.liger ? ", liger=true" : "");
  json model = {{"name", model_name_from(file)}, {"source", source}};
  if (const std::vector<std::string> left_out = not_modelled(config, family); !left_out.empty())
    model["not_modelled"] = left_out;
  if (options.liger) model["liger"] = true;
  model["arch"] = arch_summary(a);
  model["root"] = root;
  return model;
}

Model load_hf_config(const std::string& path, const HfImportOptions& options) {
  return parse_model(import_hf_config(load_json_file(path), path, options), path);
}

HfImportOptions import_options_of(const nlohmann::json& config, const std::string& file) {
  HfImportOptions options;
  if (!config.is_object() || !config.contains("_import_options")) return options;
  JsonReader r(config["_import_options"], file, "_import_options");
  options.flash_attention = r.boolean_or("flash_attention", options.flash_attention);
  options.fp32_loss = r.boolean_or("fp32_loss", options.fp32_loss);
  options.liger = r.boolean_or("liger", options.liger);
  r.finish();
  return options;
}

}  // namespace fsdpsim::models
