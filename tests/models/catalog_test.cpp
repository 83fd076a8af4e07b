// The shipped catalog: models/<name>.json is import_hf_config(models/hf/<name>.json).
//
// To regenerate after changing the importer or the cost formulas:
//   FSDPSIM_REGENERATE_CATALOG=1 build/tests/test_models --gtest_filter='Catalog.*'
// then review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>

#include "models/hf_import.h"
#include "models/json_format.h"
#include "models/json_input.h"
#include "models/model.h"
#include "test_paths.h"

namespace fsdpsim::models {
namespace {

using testing_paths::catalog_path;
using testing_paths::repo_path;

bool regenerating() {
  const char* flag = std::getenv("FSDPSIM_REGENERATE_CATALOG");
  return flag && std::string(flag) == "1";
}

std::set<std::string> hf_config_names() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(repo_path("models/hf")))
    if (entry.path().extension() == ".json") names.insert(entry.path().stem().string());
  return names;
}

// The catalog entry as the importer makes it; the config is named by its repository path
// so the entry's "source" does not depend on where the checkout lives. A config may say how
// its entry is imported: "_import_options": {"flash_attention": false, "fp32_loss": false}
// (models::import_options_of, which hf: references and `import-hf` read too).
nlohmann::json imported(const std::string& name) {
  const std::string relative = "models/hf/" + name + ".json";
  const nlohmann::json config = load_json_file(repo_path(relative));
  return import_hf_config(config, relative, import_options_of(config, relative));
}

TEST(Catalog, ShipsTheListedModels) {
  const std::set<std::string> configs = hf_config_names();
  for (const char* name : {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama2-7b", "llama2-13b", "llama2-70b",
                           "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mistral-7b", "qwen2-7b", "pythia-1.4b",
                           "gpt-neox-20b", "mpt-7b", "llama2-34b", "kempnerforge-7b", "kempnerforge-13b",
                           "kempnerforge-70b", "colossalai-gpt2-xl", "colossalai-gpt2-12b", "qwen3-0.6b", "gemma2-9b",
                           "gemma3-1b", "phi3.5-mini", "olmo2-7b", "falcon-7b", "llama3.2-1b", "mixtral-8x7b",
                           "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "deepseek-v3", "gemma3-27b", "glm-4.5-air"}) {
    EXPECT_TRUE(configs.count(name)) << "models/hf/" << name << ".json is missing";
    EXPECT_TRUE(std::filesystem::exists(catalog_path(name))) << "models/" << name << ".json is missing";
  }
}

TEST(Catalog, EntriesEqualTheImportOfTheirHfConfig) {
  for (const std::string& name : hf_config_names()) {
    SCOPED_TRACE(name);
    const nlohmann::json expected = imported(name);
    if (regenerating()) {
      std::ofstream out(catalog_path(name));
      out << format_json(expected) << "\n";
      ASSERT_TRUE(out.good()) << "cannot write " << catalog_path(name);
      continue;
    }
    ASSERT_TRUE(std::filesystem::exists(catalog_path(name)))
        << "models/" << name << ".json is missing; run with FSDPSIM_REGENERATE_CATALOG=1";
    EXPECT_EQ(load_json_file(catalog_path(name)), expected)
        << "models/" << name << ".json is stale; run with FSDPSIM_REGENERATE_CATALOG=1 and review the diff";
  }
}

TEST(Catalog, EntriesParseAndStayCompact) {
  for (const std::string& name : hf_config_names()) {
    SCOPED_TRACE(name);
    Model m = load_model_file(catalog_path(name));
    EXPECT_EQ(m.name, name);
    EXPECT_GT(m.parameter_count(), 0);
    std::ifstream in(catalog_path(name));
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    // A block whose layers differ (Gemma's sliding-window and full layers) lists one costs
    // object per variant: each more may take about 60 lines; a MoE block's router, experts and
    // shared expert about 30 more; a model whose layers are runs of different kinds (DeepSeek's
    // dense layers, then its MoE ones: each run with its "first_index") one block per run, each
    // more about 60 lines.
    // A block's memory_bound_kernels list is one line, or up to about 12 when it wraps (GPT-2's
    // dropouts: 14 kernels).
    std::size_t extra_variants = 0, moe_blocks = 0, runs = 0, kernel_lists = 0;
    const nlohmann::json entry = load_json_file(catalog_path(name));
    std::function<void(const nlohmann::json&)> visit = [&](const nlohmann::json& j) {
      if (j.is_object()) {
        if (j.contains("costs_variants")) extra_variants += j["costs_variants"].size() - 1;
        if (j.contains("moe")) ++moe_blocks;
        if (j.contains("first_index")) ++runs;
        if (j.contains("memory_bound_kernels")) ++kernel_lists;
        for (const auto& [key, value] : j.items()) visit(value);
      } else if (j.is_array()) {
        for (const auto& value : j) visit(value);
      }
    };
    visit(entry);
    const int extra_runs = runs > 1 ? static_cast<int>(runs) - 1 : 0;
    // 160: the output layer's costs carry backward_transient_after_grads_bytes (a line or two more).
    EXPECT_LT(lines, 160 + 60 * static_cast<int>(extra_variants) + 30 * static_cast<int>(moe_blocks) + 60 * extra_runs +
                         12 * static_cast<int>(kernel_lists))
        << "blocks should be written once with \"repeat\"";
  }
}

TEST(Catalog, ImportOptionsInTheConfigAreHonoured) {
  // The ColossalAI GPT-2 runs (2022) used Hugging Face's eager attention.
  Model eager = load_model_file(catalog_path("colossalai-gpt2-xl"));
  Model flash = load_model_file(catalog_path("gpt2-xl"));
  EXPECT_EQ(eager.parameter_count(), flash.parameter_count());
  EXPECT_NE(eager.source.find("flash_attention=false"), std::string::npos);
  const double b = 1, s = 1024, h = 1600, a = 25;
  // Korthikanti et al. eq. 1 exactly (GPT-2 has dropout everywhere): s*b*h*(34 + 5*a*s/h).
  EXPECT_EQ(eager.find_module("transformer.h.0")->costs->saved_activation_bytes.at(b, s), s * b * h * (34 + 5 * a * s / h));
  EXPECT_EQ(flash.find_module("transformer.h.0")->costs->saved_activation_bytes.at(b, s), s * b * h * 34);
}

TEST(JsonFormat, RoundTripsAndKeepsShortValuesOnOneLine) {
  const nlohmann::json model = imported("llama3.1-8b");
  const std::string text = format_json(model);
  EXPECT_EQ(nlohmann::json::parse(text), model);
  EXPECT_NE(text.find(R"({"name": "weight", "shape": [128256, 4096], "dtype": "bf16"})"), std::string::npos);
  // Readable key order: the name first, the tree last.
  EXPECT_EQ(text.find("{\n  \"name\": \"llama3.1-8b\""), 0u);
  EXPECT_GT(text.find("\"root\""), text.find("\"arch\""));
  EXPECT_EQ(format_json(nlohmann::json::array()), "[]");
  EXPECT_EQ(format_json(nlohmann::json::object()), "{}");
}

}  // namespace
}  // namespace fsdpsim::models
