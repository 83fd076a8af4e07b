// `fsdpsim import-hf`: turn a Hugging Face config.json into a model JSON.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "models/hf_import.h"
#include "models/json_format.h"
#include "models/json_input.h"
#include "tools/commands.h"
#include "tools/output_file.h"

namespace fsdpsim::tools {

namespace {

// What was imported, in a few lines: the parameter count (unique: a tied weight once), the
// repeated blocks, the tied parameters, and where the JSON went.
std::string import_summary(const models::Model& m, const std::string& destination) {
  int blocks = 0, tied = 0;
  std::string block_type;
  models::for_each_module(m.root, [&](const models::Module& mod) {
    if (mod.repeated) {
      ++blocks;
      block_type = mod.type;
    }
    for (const models::Parameter& p : mod.params) tied += !p.tied_to.empty();
  });
  char count[64];
  std::snprintf(count, sizeof count, "%.2fB", static_cast<double>(m.parameter_count()) / 1e9);
  std::ostringstream out;
  out << "imported " << m.name << ": " << m.parameter_count() << " parameters (" << count << ")";
  if (blocks > 0) out << ", " << blocks << " x " << block_type;
  out << ", " << (tied > 0 ? std::to_string(tied) + " tied parameter(s)" : std::string("no tied parameters"));
  out << "; wrote " << destination << "\n";
  for (const std::string& left_out : m.not_modelled) out << "not modelled: " << left_out << "\n";
  return out.str();
}

}  // namespace

void add_import_command(CLI::App& app) {
  struct Options {
    std::string config, output;
    bool eager_attention = false, liger = false;
    std::string loss = "fp32_upcast";
  };
  auto o = std::make_shared<Options>();
  // The families the importer plans, from the importer itself (a list written here went stale).
  std::string families;
  for (const std::string& type : models::supported_hf_model_types()) families += (families.empty() ? "" : ", ") + type;
  CLI::App* cmd = app.add_subcommand("import-hf", "Convert a Hugging Face config.json (" + families + ") to a model JSON");
  cmd->add_option("config", o->config, "config.json, or the folder that holds it")->required();
  cmd->add_option("-o,--output", o->output, "Write to this file instead of stdout");
  cmd->add_flag("--eager-attention", o->eager_attention, "Save the s^2 attention scores (no flash attention)");
  CLI::Option* loss = cmd->add_option("--loss", o->loss,
                  "The loss the output layer's costs are computed for: fp32_upcast (logits.float(), the default) "
                  "or bf16 (cross-entropy on the 16-bit logits); a scenario's training.loss can swap in any kind. "
                  "Without it, and without --eager-attention, the config's own \"_import_options\" decide")
      ->check(CLI::IsMember({"fp32_upcast", "bf16"}));
  cmd->add_flag("--liger", o->liger,
                "Cost the blocks, norms and loss as Liger-Kernel's default patch runs them (LigerRMSNorm, rotary, "
                "SwiGLU/GeGLU, fused linear cross-entropy: the loss is then \"chunked\"; a scenario's training.loss "
                "can swap in another); dense families Liger patches")
      ->excludes(loss);
  cmd->callback([o, loss] {
    // A model's folder, as from_pretrained takes it (and as hf: does): its config.json.
    std::error_code ec;
    if (std::filesystem::is_directory(o->config, ec)) o->config = (std::filesystem::path(o->config) / "config.json").string();
    const nlohmann::json config = load_json_file(o->config);
    // The config's own _import_options first (what its catalog entry was made with), then the
    // flags given.
    models::HfImportOptions options = models::import_options_of(config, o->config);
    if (o->eager_attention) options.flash_attention = false;
    if (loss->count() > 0) options.fp32_loss = o->loss == "fp32_upcast";
    if (o->liger) options.liger = true;
    nlohmann::json model = models::import_hf_config(config, o->config, options);
    const models::Model parsed = models::parse_model(model, o->config);  // check it before writing it
    std::string text = models::format_json(model) + "\n";
    if (o->output.empty()) {
      std::cout << text;
    } else {
      write_output_file(o->output, text, "the model file");
    }
    // The summary goes to stderr, so stdout stays the model JSON when no -o is given.
    std::cerr << import_summary(parsed, o->output.empty() ? std::string("stdout") : o->output);
  });
}

}  // namespace fsdpsim::tools
