// Hugging Face config.json -> fsdpsim model JSON.
//
// Supported families (model_type, or architectures[0] when model_type is absent): llama,
// mistral, qwen2, qwen3, gemma2, gemma3_text, gemma3, phi3, olmo2, olmo3, smollm3, falcon, gpt2,
// gpt_neox, mpt and the MoE families below. The
// module tree mirrors the Hugging Face (for MPT: MosaicML) module names and class names, so
// wrap policies can name modules ("model.layers.3.self_attn") and block types
// ("LlamaDecoderLayer"). Decoder blocks are written once with "repeat" when every layer is
// the same, else one per layer (Gemma's alternating sliding-window layers); costs sit on the
// blocks, the embedding, the final norm and the output projection (formulas in
// models/transformer_costs.h, docs/model-schema.md).
//
// Every key of a config is read or known not to change the parameter count or the compute;
// any other key is an InputError naming it (docs/model-schema.md lists both per family).
//
// Mixture-of-Experts families: mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2 and deepseek_v3
// (multi-head latent attention), gpt_oss, llama4 (its text_config), llama4_text and glm4_moe are
// imported and counted (count_hf_parameters); layers with and without experts are written as
// runs of repeated blocks ("first_index").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace fsdpsim::models {

struct HfImportOptions {
  // Fused attention (FlashAttention / SDPA flash kernels): the b*a*s^2 score matrices are
  // never written to HBM nor saved for backward. false: eager attention as in Korthikanti
  // et al. 2022 (softmax output, dropout mask and output saved).
  bool flash_attention = true;
  // The loss upcasts the logits to fp32 (Hugging Face's ForCausalLMLoss `logits.float()`,
  // torchtitan's `pred.float()`). false: cross-entropy on the 16-bit logits (KempnerForge,
  // 2022-era GPT-2 code). Changes the output layer's saved and transient bytes; the output
  // layer's costs record the kind ("loss": fp32_upcast or bf16) so that a scenario's
  // training.loss can swap in another.
  bool fp32_loss = true;
  // Liger-Kernel's default patch for the family (training.liger; DecoderBlockShape::liger says
  // what each kernel saves): RMSNorm, rotary, SwiGLU/GeGLU and the fused linear cross-entropy
  // (the output layer's loss is then LossKind::chunked, whatever fp32_loss says). The dense
  // families Liger patches: llama, mistral, qwen2, qwen3, gemma2, gemma3(_text), phi3, olmo2,
  // olmo3, smollm3; import_hf_config refuses the others (its MoE experts' kernels are not
  // modelled).
  bool liger = false;
};


// How the config says its model is imported: its "_import_options" object ({"flash_attention":
// false, "fp32_loss": false}: the configs of models/hf/ whose runs used eager attention or a loss
// on 16-bit logits), else the defaults. What the catalog entry of that name was made with, so an
// hf: reference or `import-hf` of the config gives the catalog's model (the session-30 audit:
// hf:models/hf/kempnerforge-7b.json peaked at 44.7 GB where the catalog's kempnerforge-7b does at
// 32.1). Throws InputError naming the file and the key for another key or a value not a boolean.
HfImportOptions import_options_of(const nlohmann::json& config, const std::string& file);

// The model JSON (the schema parse_model reads) for a Hugging Face config; `file` names
// the config in errors and in the model's "source". Throws InputError naming the file and
// the config key for an unsupported model_type or a missing or malformed field.
nlohmann::json import_hf_config(const nlohmann::json& config, const std::string& file,
                                const HfImportOptions& options = {});

// load_json_file + import_hf_config + parse_model.
Model load_hf_config(const std::string& path, const HfImportOptions& options = {});

// The model_type values import_hf_config accepts (the imported MoE families included).
std::vector<std::string> supported_hf_model_types();
// The Mixture-of-Experts model_type values count_hf_parameters counts (import_hf_config imports
// every one of them: mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, gpt_oss, llama4
// through its text_config, and llama4_text).
std::vector<std::string> counted_moe_model_types();

// A config's parameters, counted from the modules transformers builds for it.
struct HfParameterCount {
  std::int64_t total = 0;            // every parameter once (a tied one once)
  // What one token's forward uses: everything but the routed experts, plus its top-k of them
  // in each MoE layer (the router and shared experts included). Equal to total when dense.
  std::int64_t active = 0;
  // The input embedding table (vocab x hidden): a row lookup per token, which some model
  // cards leave out of their active count (DeepSeek's, gpt-oss's).
  std::int64_t input_embedding = 0;
  std::int64_t routed_experts = 0;   // parameters of all routed experts (0 when dense)
  bool moe = false;
  std::string note;                  // what was left out, if anything (Llama-4's vision tower)
};

// Counts a supported dense config (its imported model's parameter_count) or a MoE one (the
// families listed above). Throws InputError as import_hf_config does, for MoE configs too.
HfParameterCount count_hf_parameters(const nlohmann::json& config, const std::string& file);

}  // namespace fsdpsim::models
