// `--set` overrides that replace a whole reference (model, cluster) rather than a field in it.
#include <gtest/gtest.h>

#include <string>

#include "models/hf_import.h"
#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";

TEST(ScenarioOverrides, SetModelReplacesTheModelReference) {
  const Scenario base = load_scenario(kScenario);
  const Scenario gpt2 = load_scenario(kScenario, {"model=models/gpt2.json"});
  // Published counts: Llama-3.1-8B 8,030,261,248 parameters; GPT-2 small 124,439,808
  // (HF gpt2, tied embeddings counted once).
  EXPECT_EQ(base.model->parameter_count(), 8030261248);
  EXPECT_EQ(gpt2.model->parameter_count(), 124439808);
}

TEST(ScenarioOverrides, SetClusterReplacesTheClusterAndFieldOverridesStillApplyInsideIt) {
  const Scenario a100 = load_scenario(kScenario, {"cluster.nodes=2", "cluster=scenarios/clusters/dgx-a100.json", "training.global_batch=32"});
  EXPECT_EQ(a100.cluster.gpu.name.rfind("A100", 0), 0u) << a100.cluster.gpu.name;
  // The field override reaches inside the replacement, whatever the order on the command line.
  EXPECT_EQ(a100.cluster.world_size(), 16);
}

TEST(ScenarioOverrides, SetCalibrationFieldReachesTheCostModel) {
  const double shipped = CostModel(load_scenario(kScenario)).calibration().matmul_efficiency;
  const double wanted = shipped > 0.5 ? 0.42 : 0.61;  // any value other than the shipped one
  const Scenario s = load_scenario(kScenario, {"calibration.matmul_efficiency=" + std::to_string(wanted)});
  EXPECT_DOUBLE_EQ(CostModel(s).calibration().matmul_efficiency, wanted);
  // The other fields keep the GPU's defaults.
  EXPECT_DOUBLE_EQ(CostModel(s).calibration().hbm_efficiency, CostModel(load_scenario(kScenario)).calibration().hbm_efficiency);
}

// fsdp.wrap's shorthand (what a sweep axis takes) is the object it stands for, in a --set as in a
// scenario file; a bad shorthand names the field and what was expected.
TEST(ScenarioOverrides, WrapShorthandIsTheObjectItStandsFor) {
  auto units = [](const std::string& set) { return load_scenario(kScenario, {set}).fsdp.wrap; };
  const WrapSpec every2 = units("fsdp.wrap=every:2");
  EXPECT_EQ(every2.policy, WrapPolicy::every_k_blocks);
  EXPECT_EQ(every2.every, 2);
  const WrapSpec object = units(R"(fsdp.wrap={"policy":"every_k_blocks","every":2})");
  EXPECT_EQ(object.policy, every2.policy);
  EXPECT_EQ(object.every, every2.every);
  const WrapSpec size = units("fsdp.wrap=size:5e7");
  EXPECT_EQ(size.policy, WrapPolicy::size);
  EXPECT_EQ(size.min_num_params, 50000000);
  EXPECT_EQ(units("fsdp.wrap=root").policy, WrapPolicy::root);
  EXPECT_EQ(units("fsdp.wrap=torchtitan").policy, WrapPolicy::torchtitan);
  EXPECT_EQ(units("fsdp.wrap=every_k_blocks:3").every, 3);
  for (const std::string bad : {"fsdp.wrap=every:0", "fsdp.wrap=every:x", "fsdp.wrap=blocks", "fsdp.wrap=5"}) {
    try {
      load_scenario(kScenario, {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.json_path(), "fsdp.wrap") << bad;
      EXPECT_NE(std::string(e.what()).find(bad == "fsdp.wrap=every:0" || bad == "fsdp.wrap=every:x"
                                               ? "blocks per unit (a positive integer)"
                                               : "expected a wrap policy (block, root, torchtitan, every:K, size:N)"),
                std::string::npos)
          << e.what();
    }
  }
}

// A sequence longer than the model can run is said: GPT-2's learned position embedding has 1,024
// rows (models/gpt2.json transformer.wpe [1024, 768]); Llama-3.1-8B states a 131,072-token
// context (config.json max_position_embeddings). At the limit, nothing.
TEST(ScenarioOverrides, ASequenceLongerThanTheModelRunsIsWarned) {
  const std::string gpt2 = "model=models/gpt2.json";
  EXPECT_EQ(context_length_warning(load_scenario(kScenario, {gpt2, "training.seq_len=1024"})), "");
  const std::string past = context_length_warning(load_scenario(kScenario, {gpt2, "training.seq_len=1025"}));
  EXPECT_NE(past.find("training.seq_len 1025 is longer than the 1024 positions of the model's learned position "
                      "embedding (transformer.wpe)"),
            std::string::npos)
      << past;
  EXPECT_EQ(context_length_warning(load_scenario(kScenario, {"training.seq_len=131072"})), "");
  const std::string llama = context_length_warning(load_scenario(kScenario, {"training.seq_len=131073"}));
  EXPECT_NE(llama.find("longer than the model's stated context (arch.max_seq_len 131072)"), std::string::npos) << llama;
}

// An hf: model is imported for the scenario's attention kernel, whether training.attention is in
// the file or set on the command line (the model is loaded before the field overrides apply):
// eager attention saves Llama's fp32 softmax output and its 16-bit copy, 6 bytes per token per
// key per head (tests/models/transformer_costs_test.cpp, SavedActivations.LlamaGeneralization);
// Llama-3.2-1B has 32 heads, so the block's b*s^2 coefficient is 6 x 32 = 192.
// The b*s^2 coefficient of a block's saved activations: the score matrices eager attention keeps.
double score_coefficient(const Scenario& s, const std::string& block_name) {
  const models::Module* block = s.model->find_module(block_name);
  EXPECT_TRUE(block && block->costs) << block_name;
  double coefficient = 0;
  if (block && block->costs)
    for (const models::Polynomial::Term& t : block->costs->saved_activation_bytes.terms)
      if (t.s_pow == 2) coefficient += t.coeff;
  return coefficient;
}

TEST(ScenarioOverrides, AnHfModelIsImportedForTheScenariosAttention) {
  auto quadratic = [](const Scenario& s) { return score_coefficient(s, "model.layers.0"); };
  const std::vector<std::string> hf = {"model=hf:models/hf/llama3.2-1b.json"};
  EXPECT_EQ(quadratic(load_scenario(kScenario, hf)), 0.0);  // flash attention: nothing quadratic
  std::vector<std::string> eager = hf;
  eager.push_back("training.attention=eager");
  EXPECT_EQ(quadratic(load_scenario(kScenario, eager)), 192.0);
  nlohmann::json file = load_json_file(kScenario);
  file["training"]["attention"] = "eager";
  EXPECT_EQ(quadratic(parse_scenario(file, kScenario, hf)), 192.0);
  // A later override wins, as every override does.
  eager.push_back("training.attention=flash2");
  EXPECT_EQ(quadratic(load_scenario(kScenario, eager)), 0.0);
}

// training.liger imports an hf: model with Liger-Kernel's blocks (tests/models/transformer_costs_test.cpp,
// LigerKernels). Llama-3.2-1B's block by hand (h 2048, q 2048, kv 512, f 8192), bytes per token:
// eager, each Python norm's fp32 copy, rsqrt and cast 2 x (6h + 4) = 24,584, the norm outputs
// 2 x 2h = 8,192, q, k, v 2 x 3,072 = 6,144, the attention output 4,096, gate, SiLU's output, up and
// the product 4 x 2f = 65,536: 108,552; Liger, the norms' inputs and rstd 2 x (2h + 4) = 8,200 and
// three of the MLP's four 49,152: 75,784. Stated for a model file costed otherwise (the catalog's
// Llama-3.1-8B), or false for a Liger import, it is refused naming the field.
TEST(ScenarioOverrides, AnHfModelIsImportedForLiger) {
  auto per_token = [](const Scenario& s) { return s.model->find_module("model.layers.0")->costs->saved_activation_bytes.at(1, 1); };
  const std::string hf = "model=hf:models/hf/llama3.2-1b.json";
  EXPECT_EQ(per_token(load_scenario(kScenario, {hf})), 108'552.0);
  const Scenario liger = load_scenario(kScenario, {hf, "training.liger=true"});
  EXPECT_TRUE(liger.model->liger);
  EXPECT_EQ(per_token(liger), 75'784.0);
  EXPECT_EQ(liger.model->find_module("lm_head")->costs->loss->kind, models::LossKind::chunked);
  nlohmann::json file = load_json_file(kScenario);
  file["training"]["liger"] = true;
  EXPECT_EQ(per_token(parse_scenario(file, kScenario, {hf})), 75'784.0);
  EXPECT_EQ(per_token(parse_scenario(file, kScenario, {hf, "training.liger=false"})), 108'552.0);
  EXPECT_NO_THROW(plan_step(liger));
  // training.loss still names the loss over Liger's default.
  EXPECT_NO_THROW(plan_step(load_scenario(kScenario, {hf, "training.liger=true", "training.loss=fp32_upcast"})));
  auto refused = [](const Scenario& s, const std::string& says) {
    try {
      plan_step(s);
      ADD_FAILURE() << "planned";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("training.liger"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(load_scenario(kScenario, {"training.liger=true"}), "hf:<config.json>");
  nlohmann::json liger_model = models::import_hf_config(load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/models/hf/llama3.2-1b.json"),
                                                        "llama3.2-1b.json", {true, true, true});
  nlohmann::json inline_model = load_json_file(kScenario);
  inline_model["model"] = liger_model;
  EXPECT_NO_THROW(plan_step(parse_scenario(inline_model, kScenario, {})));  // unstated: the model's
  inline_model["training"]["liger"] = false;
  refused(parse_scenario(inline_model, kScenario, {}), "costed for Liger's kernels");
  EXPECT_THROW(load_scenario(kScenario, {hf, "training.liger=\"yes\""}), InputError);
}

// An explicit fused kernel imports an hf: model for fused attention even where its config's
// "_import_options" say eager (ColossalAI's GPT-2 XL: transformers' 2022 eager GPT2Attention);
// "auto" keeps the config's. Before session 31 flash2 kept the eager import: the step was priced
// with the score matrices under the name flash2. GPT-2's eager attention saves its fp32 softmax
// output and the 16-bit dropout output and mask: the block's b*s^2 coefficient is the importer's,
// 25 heads; fused attention has none.
TEST(ScenarioOverrides, AnExplicitFusedKernelImportsAnHfModelForFusedAttention) {
  auto quadratic = [](const Scenario& s) { return score_coefficient(s, "transformer.h.0"); };
  const std::string gpt2 = "model=hf:models/hf/colossalai-gpt2-xl.json";
  EXPECT_GT(quadratic(load_scenario(kScenario, {gpt2})), 0.0);  // auto: as its config says (eager)
  EXPECT_GT(quadratic(load_scenario(kScenario, {gpt2, "training.attention=eager"})), 0.0);
  EXPECT_EQ(quadratic(load_scenario(kScenario, {gpt2, "training.attention=flash2"})), 0.0);
  EXPECT_EQ(quadratic(load_scenario(kScenario, {gpt2, "training.attention=\"cudnn\""})), 0.0);
  EXPECT_NO_THROW(plan_step(load_scenario(kScenario, {gpt2, "training.attention=flash2", "training.seq_len=1024"})));
}

// A model file costed for eager attention cannot be priced as a fused kernel: a fused kernel's
// name is refused naming the field, where it used to be priced eager under that name.
TEST(ScenarioOverrides, AFusedKernelIsRefusedForAModelCostedForEagerAttention) {
  const std::vector<std::string> gpt2 = {"model=models/colossalai-gpt2-xl.json", "training.seq_len=1024"};
  EXPECT_NO_THROW(plan_step(load_scenario(kScenario, gpt2)));  // auto: the model's (eager)
  std::vector<std::string> flash = gpt2;
  flash.push_back("training.attention=flash2");
  const Scenario s = load_scenario(kScenario, flash);
  try {
    plan_step(s);
    ADD_FAILURE() << "flash2 was priced for a model costed for eager attention";
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), "training.attention");
    EXPECT_NE(std::string(e.what()).find("was costed for eager attention"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpsim::planner
