// `--set` overrides that replace a whole reference (model, cluster) rather than a field in it.
#include <gtest/gtest.h>

#include <string>

#include "planner/cost_model.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";

TEST(ScenarioOverrides, SetModelReplacesTheModelReference) {
  const Scenario base = load_scenario(kScenario);
  const Scenario gpt2 = load_scenario(kScenario, {"model=models/gpt2.json"});
  // Published counts: Llama-3.1-8B 8,030,261,248 parameters; GPT-2 small 124,439,808
  // (HF gpt2, tied embeddings counted once).
  EXPECT_EQ(base.model.parameter_count(), 8030261248);
  EXPECT_EQ(gpt2.model.parameter_count(), 124439808);
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

}  // namespace
}  // namespace fsdpsim::planner
