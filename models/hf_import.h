// Hugging Face config.json -> fsdpsim model JSON.
//
// Supported families (model_type, or architectures[0] when model_type is absent):
// llama, mistral, qwen2, gpt2, gpt_neox, mpt. The module tree mirrors the Hugging Face
// (for MPT: MosaicML) module names and class names, so wrap policies can name modules
// ("model.layers.3.self_attn") and block types ("LlamaDecoderLayer"). Decoder blocks are
// written once with "repeat"; costs sit on the blocks, the embedding, the final norm and
// the output projection (formulas in models/transformer_costs.h, docs/model-schema.md).
#pragma once

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
};

// The model JSON (the schema parse_model reads) for a Hugging Face config; `file` names
// the config in errors and in the model's "source". Throws InputError naming the file and
// the config key for an unsupported model_type or a missing or malformed field.
nlohmann::json import_hf_config(const nlohmann::json& config, const std::string& file,
                                const HfImportOptions& options = {});

// load_json_file + import_hf_config + parse_model.
Model load_hf_config(const std::string& path, const HfImportOptions& options = {});

// The model_type values import_hf_config accepts.
std::vector<std::string> supported_hf_model_types();

}  // namespace fsdpsim::models
