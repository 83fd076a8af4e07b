// `fsdpsim sweep` (planner/sweep_space.h, sim/sweep.h): axes and their shorthands, points as
// overrides over a base read once, skipped invalid combinations, ranking, Pareto front,
// recommendation, "nothing fits", and results that do not depend on the number of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "models/json_input.h"
#include "planner/sweep_space.h"
#include "sim/estimate.h"
#include "sim/sweep.h"

namespace fsdpsim::sim {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

// GPT-2 (124M) on two DGX H100 nodes: quick to plan, every strategy valid.
nlohmann::json gpt2_scenario() {
  return {{"model", "models/gpt2.json"},
          {"cluster", "scenarios/clusters/dgx-h100.json"},
          {"training", {{"global_batch", 64}, {"micro_batch", 1}, {"seq_len", 1024}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}, {"wrap", {{"policy", "block"}}}}}};
}

const std::string kScenarioFile = kRoot + "/scenarios/sweep_test.json";

std::shared_ptr<const planner::ScenarioTemplate> gpt2_template(std::vector<std::string> overrides = {"cluster.nodes=2"}) {
  return planner::ScenarioTemplate::from_json(gpt2_scenario(), kScenarioFile, overrides);
}

// What `fsdpsim estimate --set <base>... --set <point>...` parses: the reference a point must match.
planner::Scenario parsed_point(std::vector<std::string> base, const std::vector<std::string>& point) {
  base.insert(base.end(), point.begin(), point.end());
  return planner::parse_scenario(gpt2_scenario(), kScenarioFile, base);
}

planner::SweepSpace space_of(const planner::ScenarioTemplate& t, const std::vector<std::string>& axes) {
  std::vector<planner::AxisSpec> specs;
  for (const std::string& a : axes) specs.push_back(planner::parse_axis_spec(a));
  return planner::make_space(specs, t.context());
}

// A sweep with every point collected through the sink: the result keeps only the report's
// points (sim/sweep.h), the tests check them against all of them.
struct FullSweep {
  SweepResult result;
  std::vector<PointResult> points;  // every point, in point order
};

FullSweep run_collecting(std::shared_ptr<const planner::ScenarioTemplate> t, const planner::SweepSpace& space,
                         SweepOptions o) {
  FullSweep f;
  o.sink = [&](const PointResult& p) { f.points.push_back(p); };
  f.result = run_sweep(std::move(t), space, o);
  return f;
}

// ---- axes ------------------------------------------------------------------------------------

TEST(SweepAxes, CommasInsideJsonDoNotSplit) {
  planner::AxisSpec a = planner::parse_axis_spec(
      R"(fsdp.wrap=block, every:2 ,{"policy":"size","min_num_params":1000},root)");
  EXPECT_EQ(a.key, "fsdp.wrap");
  ASSERT_EQ(a.values.size(), 4u);
  EXPECT_EQ(a.values[1], "every:2");
  EXPECT_TRUE(a.values[2].is_object());
  planner::Axis x = planner::expand_axis(a, {16, 64});
  ASSERT_EQ(x.values.size(), 4u);
  EXPECT_EQ(x.values[1].overrides, std::vector<std::string>{R"(fsdp.wrap={"every":2,"policy":"every_k_blocks"})"});
  EXPECT_EQ(x.values[3].overrides, std::vector<std::string>{R"(fsdp.wrap={"policy":"root"})"});
}

TEST(SweepAxes, ShorthandsExpand) {
  const planner::AxisContext ctx{16, 64};
  planner::Axis s = planner::expand_axis(planner::parse_axis_spec("fsdp.strategy=FULL_SHARD,HYBRID_SHARD:*"), ctx);
  std::vector<std::string> labels;
  for (const auto& v : s.values) labels.push_back(v.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"FULL_SHARD", "HYBRID_SHARD:2", "HYBRID_SHARD:4", "HYBRID_SHARD:8"}));
  EXPECT_EQ(s.values[2].overrides, (std::vector<std::string>{"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=4",
                                                             "fsdp.reshard_after_forward=null"}));
  // The micro-batch keeps the global batch; gradient accumulation follows.
  planner::Axis mb = planner::expand_axis(planner::parse_axis_spec("training.micro_batch=1,2"), ctx);
  EXPECT_EQ(mb.values[1].overrides, (std::vector<std::string>{"training.micro_batch=2", "training.global_batch=64",
                                                              "training.grad_accum=null"}));
  planner::Axis ac = planner::expand_axis(planner::parse_axis_spec("training.activation_checkpointing=none,full,every:3"), ctx);
  EXPECT_EQ(ac.values[2].overrides, std::vector<std::string>{"training.activation_checkpointing=3"});
  planner::Axis raf = planner::expand_axis(planner::parse_axis_spec("fsdp.reshard_after_forward=true,false,2,true"), ctx);
  EXPECT_EQ(raf.values.size(), 3u) << "duplicates dropped";
  EXPECT_THROW(planner::expand_axis(planner::parse_axis_spec("fsdp.strategy=FULL_SHARD:8"), ctx), InputError);
  // On 3 nodes of 8 GPUs the groups that lie evenly on the nodes: 2, 4, 8 (3, 6 and 12 divide
  // the world of 24 but straddle nodes; planner::shard_group_spreads_evenly).
  planner::Axis three_nodes = planner::expand_axis(planner::parse_axis_spec("fsdp.strategy=HYBRID_SHARD:*"), {24, 48, 8});
  std::vector<std::string> groups;
  for (const auto& v : three_nodes.values) groups.push_back(v.label);
  EXPECT_EQ(groups, (std::vector<std::string>{"HYBRID_SHARD:2", "HYBRID_SHARD:4", "HYBRID_SHARD:8"}));
  EXPECT_THROW(planner::parse_axis_spec("no_equals_sign"), InputError);
  // A shard-group axis of its own decides the group: the strategy values do not reset it.
  planner::SweepSpace both = planner::make_space(
      {planner::parse_axis_spec("fsdp.strategy=HYBRID_SHARD"), planner::parse_axis_spec("fsdp.shard_group_size=*")}, ctx);
  EXPECT_EQ(both.axes[0].values[0].overrides,
            (std::vector<std::string>{"fsdp.strategy=HYBRID_SHARD", "fsdp.reshard_after_forward=null"}));
  EXPECT_EQ(both.size(), 3u);
}

TEST(SweepAxes, PointsAreTheProductLastAxisFastest) {
  planner::SweepSpace s = planner::make_space(
      {planner::parse_axis_spec("a.x=1,2,3"), planner::parse_axis_spec("a.y=true,false")}, {8, 8});
  EXPECT_EQ(s.size(), 6u);
  EXPECT_EQ(s.choice(0), (std::vector<int>{0, 0}));
  EXPECT_EQ(s.choice(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.choice(5), (std::vector<int>{2, 1}));
  EXPECT_EQ(s.overrides(s.choice(3)), (std::vector<std::string>{"a.x=2", "a.y=false"}));
  EXPECT_EQ(s.label(s.choice(3)), "a.x=2 a.y=false");
  EXPECT_THROW(planner::make_space({planner::parse_axis_spec("a.x=1"), planner::parse_axis_spec("a.x=2")}, {8, 8}),
               InputError);
  EXPECT_EQ(planner::SweepSpace{}.size(), 1u) << "no axes: the base scenario alone";
}

TEST(SweepFile, ObjectAndListForms) {
  const std::string file = kRoot + "/scenarios/sweeps/x.json";
  planner::SweepFile f = planner::parse_sweep_file(
      nlohmann::json::parse(R"({"scenario": "../llama3.1-8b-8xh100.json", "set": ["cluster.nodes=2"],
        "axes": {"training.micro_batch": [1, 2], "fsdp.strategy": "FULL_SHARD"},
        "headroom_gib": 4, "objective": "step_time", "top": 3})"),
      file);
  EXPECT_EQ(f.overrides, std::vector<std::string>{"cluster.nodes=2"});
  ASSERT_EQ(f.axes.size(), 2u);
  EXPECT_EQ(f.axes[0].key, "fsdp.strategy");  // an object's keys: alphabetical
  EXPECT_EQ(f.axes[0].values.size(), 1u);
  EXPECT_EQ(*f.headroom_gib, 4);
  EXPECT_EQ(*f.objective, "step_time");
  EXPECT_NE(f.scenario.find("llama3.1-8b-8xh100.json"), std::string::npos);
  planner::SweepFile g = planner::parse_sweep_file(
      nlohmann::json::parse(R"({"axes": [{"key": "training.micro_batch", "values": [4, 1]},
                                         {"key": "fsdp.strategy", "values": ["ZERO1"]}]})"),
      file);
  EXPECT_EQ(g.axes[0].key, "training.micro_batch");  // a list keeps its order
  try {
    planner::parse_sweep_file(nlohmann::json::parse(R"({"axes": {}, "headroom": 4})"), file);
    FAIL() << "an unknown field must be an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("headroom"), std::string::npos) << e.what();
  }
}

// ---- points ------------------------------------------------------------------------------------

// A point instantiated from the template (no file reads) is the scenario parse_scenario
// gives for the base overrides plus the point's, and evaluates to the same numbers as
// sim::estimate_step.
TEST(SweepPoints, TemplateMatchesParseScenarioAndEstimate) {
  auto t = gpt2_template();
  const std::vector<std::vector<std::string>> points = {
      {},
      {"fsdp.strategy=SHARD_GRAD_OP", "fsdp.reshard_after_forward=null"},
      {"training.micro_batch=2", "training.global_batch=64", "training.grad_accum=null",
       "training.activation_checkpointing=full"},
      {"cluster.nodes=4", "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8"},
      {"cluster.gpu=A100-SXM-80GB", "fsdp.version=1", "fsdp.backward_prefetch=BACKWARD_POST"},
      {"fsdp.wrap={\"policy\":\"every_k_blocks\",\"every\":3}", "fsdp.cpu_offload=true"},
      // Whole references replaced by a point (a model= axis used to keep the base model).
      {"model=models/gpt2-medium.json"},
      {"model.name=renamed", "model=models/gpt2-medium.json"},
      {"cluster.nodes=4", "cluster=scenarios/clusters/dgx-a100.json"},
      // ... and keep the base's overrides inside them, as estimate does: 2 nodes, 16 GPUs.
      {"cluster=scenarios/clusters/dgx-a100.json"},
      {"cluster=dgx-h200"},  // a catalog name, as --cluster takes it
  };
  auto evaluator = make_analytic_evaluator();
  for (const auto& o : points) {
    const planner::Scenario want = parsed_point({"cluster.nodes=2"}, o);
    const planner::Scenario& got = t->instantiate(o);
    EXPECT_EQ(got.world_size(), want.world_size());
    EXPECT_EQ(got.cluster.gpu.name, want.cluster.gpu.name);
    EXPECT_EQ(got.cluster.gpu.memory_bytes, want.cluster.gpu.memory_bytes);
    EXPECT_EQ(got.model->name, want.model->name);
    EXPECT_EQ(got.model->parameter_count(), want.model->parameter_count());
    EXPECT_EQ(got.training.grad_accum, want.training.grad_accum);
    EXPECT_EQ(got.fsdp.shard_group_size, want.fsdp.shard_group_size);
    EXPECT_EQ(got.fsdp.reshard_after_forward, want.fsdp.reshard_after_forward);
    const PointMetrics a = evaluator->evaluate(got, cost_key_of(o));
    const PointMetrics b = metrics_of(want);
    EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
    EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
    EXPECT_EQ(a.device_peak_bytes, b.device_peak_bytes);
    EXPECT_EQ(a.step_seconds, b.step_seconds);
    EXPECT_EQ(a.tokens_per_second_per_gpu, b.tokens_per_second_per_gpu);
    EXPECT_EQ(a.mfu, b.mfu);
    EXPECT_GT(a.step_seconds, 0);
  }
}

// [Replaced references keep the base's overrides] A point that replaces the model, the cluster
// or the calibration gets the base's model.*, cluster.* and calibration.* overrides inside the
// replacement, as parse_scenario (estimate) applies a replacement before the overrides beside
// it. Before, `sweep --gpus 64xH100 --axis cluster=...` planned each cluster on its file's one
// node (Llama-3.1-70B: 167 GiB a GPU where estimate's same point has 49 GiB).
TEST(SweepPoints, AReplacedReferenceKeepsTheBaseOverridesInsideIt) {
  const std::vector<std::string> base = {"cluster.nodes=2", "model.name=renamed", "calibration.pcie_gbps=7"};
  auto t = planner::ScenarioTemplate::from_json(gpt2_scenario(), kScenarioFile, base);
  const std::string calibration = "tests/data/hardware/calibration-h100-2026-11-27.json";
  auto evaluator = make_analytic_evaluator();
  for (const std::vector<std::string>& o : std::vector<std::vector<std::string>>{
           {"model=models/gpt2-medium.json"},
           {"cluster=scenarios/clusters/dgx-a100.json"},
           {"calibration=" + calibration},
           {"calibration=" + calibration, "calibration.pcie_gbps=9"},
           {"model=models/gpt2-medium.json", "model.name=again", "cluster=dgx-h200", "cluster.nodes=4"}}) {
    const planner::Scenario want = parsed_point(base, o);
    const planner::Scenario got = t->instantiate(o);
    SCOPED_TRACE(o.front());
    EXPECT_EQ(got.world_size(), want.world_size());
    EXPECT_EQ(got.cluster.gpu.name, want.cluster.gpu.name);
    EXPECT_EQ(got.model->name, want.model->name);
    EXPECT_EQ(got.calibration, want.calibration);
    const PointMetrics a = evaluator->evaluate(got, cost_key_of(o));
    const PointMetrics b = metrics_of(want);
    EXPECT_EQ(a.device_peak_bytes, b.device_peak_bytes);
    EXPECT_EQ(a.step_seconds, b.step_seconds);
  }
  // The figures themselves, by hand: 2 nodes of 8, the base's name, its PCIe figure unless the
  // point states its own.
  EXPECT_EQ(t->instantiate({"cluster=scenarios/clusters/dgx-a100.json"}).world_size(), 16);
  EXPECT_EQ(t->instantiate({"model=models/gpt2-medium.json"}).model->name, "renamed");
  EXPECT_EQ(t->instantiate({"calibration=" + calibration}).calibration["pcie_gbps"], 7);
  EXPECT_EQ(t->instantiate({"calibration=" + calibration, "calibration.pcie_gbps=9"}).calibration["pcie_gbps"], 9);
  EXPECT_EQ(t->instantiate({"model=models/gpt2-medium.json", "model.name=again", "cluster=dgx-h200",
                            "cluster.nodes=4"}).world_size(), 32);
}

// Points that share a cost key share the worker's cost model and its NCCL estimates; group
// sizes and buffer sizes differ between them, and each point must still time as estimate does.
TEST(SweepPoints, SharedCollectiveEstimatesKeepEachPointExact) {
  auto t = gpt2_template();  // 16 GPUs on 2 nodes
  const std::vector<std::vector<std::string>> points = {
      {"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8"},
      {"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=4"},
      {},
      {"fsdp.strategy=SHARD_GRAD_OP", "fsdp.reshard_after_forward=null"},
      {"fsdp.wrap={\"policy\":\"every_k_blocks\",\"every\":2}"},  // another cost key (fsdp.wrap)
      {"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"},
  };
  auto evaluator = make_analytic_evaluator();
  for (const auto& o : points) {
    const planner::Scenario want = parsed_point({"cluster.nodes=2"}, o);
    const PointMetrics a = evaluator->evaluate(t->instantiate(o), cost_key_of(o));
    const PointMetrics b = metrics_of(want);
    EXPECT_EQ(a.step_seconds, b.step_seconds) << testing::PrintToString(o);
    EXPECT_EQ(a.exposed_comm_seconds, b.exposed_comm_seconds) << testing::PrintToString(o);
  }
}

// The cost model reads fsdp.wrap's block types (eager execution's memory-bound factor applies
// to blocks), so points that differ only there must not share a cached cost model.
TEST(SweepPoints, BlockTypesAreInTheCostKey) {
  auto t = gpt2_template({"cluster.nodes=2", "training.torch_compile=false"});
  const std::vector<std::vector<std::string>> points = {
      {"fsdp.wrap={\"policy\":\"root\"}"},
      {"fsdp.wrap={\"policy\":\"root\",\"block_types\":[\"NoSuchType\"]}"},
  };
  auto evaluator = make_analytic_evaluator();
  std::vector<double> steps;
  for (const auto& o : points) {
    const planner::Scenario want = parsed_point({"cluster.nodes=2", "training.torch_compile=false"}, o);
    const PointMetrics a = evaluator->evaluate(t->instantiate(o), cost_key_of(o));
    EXPECT_EQ(a.step_seconds, metrics_of(want).step_seconds) << o[0];
    steps.push_back(a.step_seconds);
  }
  EXPECT_NE(steps[0], steps[1]);  // the eager factor applied to the blocks only in the first
}

// The optimizer's kernel and kind set the step's launches (CostModel::kernels): points that
// differ only there must not share a cost model. Kills opt.kernel-not-in-cost-key.
TEST(SweepPoints, OptimizerKernelIsInTheCostKey) {
  const std::vector<std::string> base = {"cluster.nodes=2", "training.torch_compile=false",
                                         "calibration.kernel_issue_seconds=0.001"};
  auto t = gpt2_template(base);
  const std::vector<std::vector<std::string>> points = {
      {"training.optimizer_kernel=foreach"},
      {"training.optimizer_kernel=fused"},
      {"training.optimizer_kernel=fused", "training.optimizer=sgd_momentum"},
  };
  auto evaluator = make_analytic_evaluator();
  std::vector<double> steps;
  for (const auto& o : points) {
    const planner::Scenario want = parsed_point(base, o);
    const PointMetrics a = evaluator->evaluate(t->instantiate(o), cost_key_of(o));
    EXPECT_EQ(a.step_seconds, metrics_of(want).step_seconds) << o.back();
    steps.push_back(a.step_seconds);
  }
  EXPECT_GT(steps[0], steps[1]);  // 10 launches per 64 tensors against 1 per 36, at 1 ms each
}

// Base overrides that replace the model, cluster or calibration reach every point (the points
// used to keep the scenario file's cluster and calibration).
TEST(SweepPoints, MemoryFirstTimesOnlyThePointsThatFit) {
  // make_memory_first_evaluator (what the advice sweeps with): the same memory figures for every
  // point, the same timing for the points that fit, no timing for those that do not.
  auto t = gpt2_template();
  const planner::SweepSpace space = space_of(*t, {"fsdp.strategy=FULL_SHARD,NO_SHARD", "training.micro_batch=1,4",
                                                  "training.activation_checkpointing=none,full"});
  auto full = make_analytic_evaluator();
  std::vector<PointMetrics> timed;
  std::vector<double> peaks;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const std::vector<std::string> o = space.overrides(space.choice(i));
    timed.push_back(full->evaluate(t->instantiate(o), cost_key_of(o)));
    peaks.push_back(timed.back().device_peak_bytes);
  }
  // A headroom that leaves the GPU room for the smaller half of the points.
  std::sort(peaks.begin(), peaks.end());
  const double gpu = timed.front().gpu_memory_bytes;
  const double headroom = gpu - (peaks[peaks.size() / 2 - 1] + peaks[peaks.size() / 2]) / 2;
  auto memory_first = make_memory_first_evaluator(headroom);
  int fitting = 0, over = 0;
  for (std::size_t i = 0; i < space.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<std::string> o = space.overrides(space.choice(i));
    const PointMetrics m = memory_first->evaluate(t->instantiate(o), cost_key_of(o));
    const PointMetrics& x = timed[i];
    EXPECT_EQ(m.peak_allocated_bytes, x.peak_allocated_bytes);
    EXPECT_EQ(m.peak_reserved_bytes, x.peak_reserved_bytes);
    EXPECT_EQ(m.model_state_bytes, x.model_state_bytes);
    EXPECT_EQ(m.device_overhead_bytes, x.device_overhead_bytes);
    EXPECT_EQ(m.device_peak_bytes, x.device_peak_bytes);
    EXPECT_EQ(m.units, x.units);
    if (x.device_peak_bytes + headroom <= gpu) {
      ++fitting;
      EXPECT_EQ(m.step_seconds, x.step_seconds);
      EXPECT_EQ(m.tokens_per_second_per_gpu, x.tokens_per_second_per_gpu);
      EXPECT_EQ(m.mfu, x.mfu);
      EXPECT_EQ(m.exposed_comm_by_unit, x.exposed_comm_by_unit);
    } else {
      ++over;
      EXPECT_EQ(m.step_seconds, 0);
      EXPECT_EQ(m.tokens_per_second_per_gpu, 0);
      EXPECT_TRUE(m.exposed_comm_by_unit.empty());
    }
  }
  EXPECT_GT(fitting, 0);
  EXPECT_GT(over, 0);
}

TEST(SweepPoints, BaseOverridesThatReplaceReferences) {
  const std::vector<std::string> base = {"model=models/gpt2-medium.json", "cluster=scenarios/clusters/dgx-a100.json",
                                         "cluster.nodes=2", "calibration.pcie_gbps=7"};
  auto t = planner::ScenarioTemplate::from_json(gpt2_scenario(), kScenarioFile, base);
  auto evaluator = make_analytic_evaluator();
  for (const std::vector<std::string>& o : std::vector<std::vector<std::string>>{{}, {"fsdp.cpu_offload=true"}}) {
    const planner::Scenario want = parsed_point(base, o);
    const planner::Scenario& got = t->instantiate(o);
    EXPECT_EQ(got.model->name, want.model->name);
    EXPECT_EQ(got.model->parameter_count(), want.model->parameter_count());
    EXPECT_EQ(got.cluster.gpu.name, want.cluster.gpu.name);
    EXPECT_EQ(got.world_size(), want.world_size());
    const PointMetrics a = evaluator->evaluate(got, cost_key_of(o));
    const PointMetrics b = metrics_of(want);
    EXPECT_EQ(a.step_seconds, b.step_seconds);  // offload's host copies run at the overridden PCIe rate
    EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
  }
  EXPECT_EQ(t->instantiate({}).cluster.gpu.name.rfind("A100", 0), 0u);
}

// An hf: model is imported for the scenario's training.attention (eager attention costs the
// score matrices): a sweep point that changes it gets its own import, with the base's model.*
// overrides, exactly as `estimate --set training.attention=...` parses it, from a base imported
// for either kernel. (Before, the point kept the base's import: eager points were refused,
// flash points under an eager base were costed with materialised scores.)
TEST(SweepPoints, AnHfModelIsImportedForEachPointsAttention) {
  for (const std::string base_attention : {"flash2", "eager"}) {
    SCOPED_TRACE("base attention " + base_attention);
    const nlohmann::json scenario = {
        {"model", "hf:models/hf/llama3.2-1b.json"},
        {"cluster", "scenarios/clusters/dgx-h100.json"},
        {"training", {{"global_batch", 8}, {"micro_batch", 1}, {"seq_len", 2048}, {"attention", base_attention}}}};
    const std::vector<std::string> base = {"model.name=renamed"};
    auto t = planner::ScenarioTemplate::from_json(scenario, kScenarioFile, base);
    auto evaluator = make_analytic_evaluator();
    std::int64_t eager_bytes = 0, flash_bytes = 0;
    for (const std::vector<std::string>& o : std::vector<std::vector<std::string>>{
             {"training.attention=eager"}, {"training.attention=flash2"}, {}, {"training.attention=eager"}}) {
      std::vector<std::string> all = base;
      all.insert(all.end(), o.begin(), o.end());
      const planner::Scenario want = planner::parse_scenario(scenario, kScenarioFile, all);
      const planner::Scenario& got = t->instantiate(o);
      EXPECT_EQ(got.model->name, "renamed");
      const PointMetrics a = evaluator->evaluate(got, cost_key_of(o));
      const PointMetrics b = metrics_of(want);
      EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
      EXPECT_EQ(a.peak_reserved_bytes, b.peak_reserved_bytes);
      EXPECT_EQ(a.step_seconds, b.step_seconds);
      (want.training.attention == "eager" ? eager_bytes : flash_bytes) = a.peak_allocated_bytes;
    }
    // The score matrices (32 heads x 2,048^2 per layer) make the eager import far larger.
    EXPECT_GT(eager_bytes, flash_bytes + (std::int64_t{1} << 30));
  }
}

// training.liger likewise decides an hf: model's import (Liger's blocks save less; the loss is
// the fused linear cross-entropy): a sweep over it gives each point the parse `estimate --set
// training.liger=...` gives, from a base with it stated either way or unstated.
TEST(SweepPoints, AnHfModelIsImportedForEachPointsLiger) {
  for (const std::string base_liger : {"true", "false", ""}) {
    SCOPED_TRACE("base liger " + base_liger);
    nlohmann::json scenario = {
        {"model", "hf:models/hf/llama3.2-1b.json"},
        {"cluster", "scenarios/clusters/dgx-h100.json"},
        {"training", {{"global_batch", 32}, {"micro_batch", 4}, {"seq_len", 4096}}}};
    if (!base_liger.empty()) scenario["training"]["liger"] = base_liger == "true";
    auto t = planner::ScenarioTemplate::from_json(scenario, kScenarioFile, {});
    auto evaluator = make_analytic_evaluator();
    std::int64_t liger_bytes = 0, eager_bytes = 0;
    for (const std::vector<std::string>& o : std::vector<std::vector<std::string>>{
             {"training.liger=true"}, {"training.liger=false"}, {}, {"training.liger=true"}}) {
      const planner::Scenario want = planner::parse_scenario(scenario, kScenarioFile, o);
      const planner::Scenario& got = t->instantiate(o);
      EXPECT_EQ(got.model->liger, want.model->liger);
      const PointMetrics a = evaluator->evaluate(got, cost_key_of(o));
      const PointMetrics b = metrics_of(want);
      EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
      EXPECT_EQ(a.step_seconds, b.step_seconds);
      (want.model->liger ? liger_bytes : eager_bytes) = a.peak_allocated_bytes;
    }
    // Each of the 16 blocks saves 32,768 bytes a token less (ScenarioOverrides.AnHfModelIsImportedForLiger):
    // 16,384 tokens x 16 x 32,768 = 8 GiB, and the fused loss keeps no fp32 logits.
    EXPECT_GT(eager_bytes, liger_bytes + (std::int64_t{8} << 30));
  }
}

// The same for a config whose "_import_options" import it for eager attention (ColossalAI's
// GPT-2 XL): "auto" keeps the config's import, an explicit fused kernel imports it fused, from a
// base of either. (Before session 31 every non-eager point kept the config's eager import.)
TEST(SweepPoints, AnHfModelConfiguredEagerIsImportedFusedForAFusedKernel) {
  for (const std::string base_attention : {"auto", "flash2"}) {
    SCOPED_TRACE("base attention " + base_attention);
    const nlohmann::json scenario = {
        {"model", "hf:models/hf/colossalai-gpt2-xl.json"},
        {"cluster", "scenarios/clusters/dgx-a100.json"},
        {"training", {{"global_batch", 8}, {"micro_batch", 1}, {"seq_len", 1024}, {"attention", base_attention}}}};
    auto t = planner::ScenarioTemplate::from_json(scenario, kScenarioFile, {});
    auto evaluator = make_analytic_evaluator();
    std::int64_t eager_bytes = 0, fused_bytes = 0;
    for (const std::vector<std::string>& o : std::vector<std::vector<std::string>>{
             {"training.attention=flash2"}, {"training.attention=auto"}, {}, {"training.attention=eager"},
             {"training.attention=flash2"}}) {
      const planner::Scenario want = planner::parse_scenario(scenario, kScenarioFile, o);
      const planner::Scenario& got = t->instantiate(o);
      const PointMetrics a = evaluator->evaluate(got, cost_key_of(o));
      const PointMetrics b = metrics_of(want);
      EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
      EXPECT_EQ(a.step_seconds, b.step_seconds);
      (want.training.attention == "flash2" ? fused_bytes : eager_bytes) = a.peak_allocated_bytes;
    }
    // The score matrices (25 heads x 1,024^2 per layer, 48 layers) make the eager import larger.
    EXPECT_GT(eager_bytes, fused_bytes + (std::int64_t{1} << 28));
  }
}

// `estimate` parses its scenario once and advises from a template of that parse
// (ScenarioTemplate::from_parsed): the template shares the scenario and gives the points a
// template parsing the JSON itself gives.
TEST(SweepPoints, TemplateFromAParsedScenarioSharesItAndGivesTheSamePoints) {
  const std::vector<std::string> base = {"cluster.nodes=2", "calibration.pcie_gbps=7", "model.name=renamed"};
  planner::ScenarioDocuments documents;
  auto parsed = std::make_shared<const planner::Scenario>(
      planner::parse_scenario(gpt2_scenario(), kScenarioFile, base, &documents));
  auto shared = planner::ScenarioTemplate::from_parsed(parsed, std::move(documents), kScenarioFile, base);
  auto own = planner::ScenarioTemplate::from_json(gpt2_scenario(), kScenarioFile, base);
  EXPECT_EQ(&shared->base(), parsed.get());
  EXPECT_EQ(shared->base().model->name, "renamed");
  // One evaluator per template: the two templates parse their models apart.
  auto evaluator_a = make_analytic_evaluator(), evaluator_b = make_analytic_evaluator();
  for (const std::vector<std::string>& o : std::vector<std::vector<std::string>>{
           {}, {"fsdp.cpu_offload=true"}, {"cluster.nodes=4"}, {"model.name=again"}, {"training.micro_batch=2"}}) {
    const planner::Scenario& x = shared->instantiate(o);
    const PointMetrics mx = evaluator_a->evaluate(x, cost_key_of(o));
    const std::string name = x.model->name, calibration_file = x.calibration_file;
    // Points without a model override hold the template's base model itself, not a copy.
    if (o != std::vector<std::string>{"model.name=again"}) {
      EXPECT_EQ(x.model.address(), parsed->model.address());
    }
    const planner::Scenario& y = own->instantiate(o);
    const PointMetrics my = evaluator_b->evaluate(y, cost_key_of(o));
    EXPECT_EQ(name, y.model->name);
    EXPECT_EQ(calibration_file, y.calibration_file);
    EXPECT_EQ(mx.step_seconds, my.step_seconds);
    EXPECT_EQ(mx.peak_reserved_bytes, my.peak_reserved_bytes);
    EXPECT_EQ(mx.device_peak_bytes, my.device_peak_bytes);
  }
}

TEST(SweepPoints, ModelOverridesParseTheirOwnModel) {
  auto t = gpt2_template();
  EXPECT_EQ(t->instantiate({}).model->name, t->base().model->name);
  EXPECT_EQ(t->instantiate({"model.name=renamed"}).model->name, "renamed");
  EXPECT_EQ(t->instantiate({}).model->name, t->base().model->name);
  EXPECT_EQ(t->instantiate({}).model->parameter_count(), t->base().model->parameter_count());
  // Each set of model overrides is parsed once and shared by its points (models::SharedModel).
  const planner::Scenario a = t->instantiate({"model.name=renamed"});
  const planner::Scenario b = t->instantiate({"model.name=renamed", "training.micro_batch=2"});
  EXPECT_EQ(a.model.address(), b.model.address());
  EXPECT_NE(a.model.address(), t->base().model.address());
  EXPECT_EQ(t->instantiate({"training.micro_batch=2"}).model.address(), t->base().model.address());
}

TEST(SweepPoints, InvalidCombinationsAreSkippedWithTheReason) {
  auto t = gpt2_template();  // 16 GPUs, global batch 64
  planner::SweepSpace space = space_of(*t, {"fsdp.strategy=FULL_SHARD,HYBRID_SHARD:3", "training.micro_batch=1,3"});
  SweepOptions o;
  o.threads = 2;
  const FullSweep f = run_collecting(t, space, o);
  const SweepResult& r = f.result;
  ASSERT_EQ(f.points.size(), 4u);
  EXPECT_EQ(r.total, 4u);
  EXPECT_EQ(f.points[0].status, PointStatus::ok);
  EXPECT_EQ(f.points[1].status, PointStatus::skipped);  // micro-batch 3 does not divide 64 over 16 ranks
  EXPECT_NE(f.points[1].reason.find("training.global_batch"), std::string::npos) << f.points[1].reason;
  EXPECT_NE(f.points[1].reason.find("not a multiple"), std::string::npos) << f.points[1].reason;
  EXPECT_EQ(f.points[1].reason.find(kRoot), std::string::npos) << "the base file is named once, not per point";
  EXPECT_EQ(f.points[2].status, PointStatus::skipped);  // a shard group of 3 does not divide 16
  EXPECT_NE(f.points[2].reason.find("shard_group_size"), std::string::npos) << f.points[2].reason;
  EXPECT_EQ(r.evaluated, 1u);
  EXPECT_EQ(r.skipped, 3u);
  EXPECT_EQ(r.not_evaluated, (std::vector<std::size_t>{1, 2, 3}));  // kept for the report, with their reasons
  EXPECT_EQ(r.point(1).reason, f.points[1].reason);
  EXPECT_FALSE(r.interrupted);
  ASSERT_TRUE(r.recommendation.found);
  EXPECT_EQ(r.recommendation.point, 0u);
}

// ---- ranking ----------------------------------------------------------------------------------

planner::SweepSpace wide_space(const planner::ScenarioTemplate& t) {
  return space_of(t, {"fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD:*", "training.micro_batch=1,2,4",
                      "training.activation_checkpointing=none,full", "fsdp.backward_prefetch=BACKWARD_PRE,NONE",
                      "fsdp.version=1,2"});
}

FullSweep wide_sweep(int threads, std::size_t keep_top = 10) {
  auto t = gpt2_template();
  SweepOptions o;
  o.threads = threads;
  o.headroom_bytes = 2.0 * 1024 * 1024 * 1024;
  o.keep_top = keep_top;
  o.rank_every_point = true;
  return run_collecting(t, wide_space(*t), o);
}

TEST(SweepRanking, IdenticalForOneAndManyThreads) {
  const FullSweep a = wide_sweep(1);
  const FullSweep b = wide_sweep(4);
  EXPECT_EQ(a.result.threads, 1);
  EXPECT_EQ(b.result.threads, 4);
  ASSERT_EQ(a.points.size(), b.points.size());
  EXPECT_GT(a.result.evaluated, 50u);
  for (std::size_t i = 0; i < a.points.size(); ++i) {
    const PointResult &x = a.points[i], &y = b.points[i];
    EXPECT_EQ(x.index, i);  // the sink sees the points in order whatever thread finished them
    EXPECT_EQ(y.index, i);
    EXPECT_EQ(x.label, y.label);
    EXPECT_EQ(x.status, y.status) << x.label;
    EXPECT_EQ(x.reason, y.reason);
    EXPECT_EQ(x.metrics.peak_reserved_bytes, y.metrics.peak_reserved_bytes) << x.label;
    EXPECT_EQ(x.metrics.step_seconds, y.metrics.step_seconds) << x.label;  // bit for bit
    EXPECT_EQ(x.metrics.tokens_per_second_per_gpu, y.metrics.tokens_per_second_per_gpu);
    EXPECT_EQ(x.metrics.mfu, y.metrics.mfu);
    EXPECT_EQ(x.fits, y.fits);
  }
  EXPECT_EQ(a.result.ranking, b.result.ranking);
  EXPECT_EQ(a.result.ranks, b.result.ranks);
  EXPECT_EQ(a.result.pareto, b.result.pareto);
  EXPECT_EQ(a.result.recommendation.point, b.result.recommendation.point);
  EXPECT_EQ(a.result.recommendation.why, b.result.recommendation.why);
}

// The CLI's resource guard evaluates a sample of the points first (estimate_sweep_cost); the
// sweep takes those results (SweepOptions::evaluated) instead of evaluating them again, and
// every point's figures stay those of a sweep that evaluates them all.
TEST(SweepRanking, SampledPointsAreTakenNotEvaluatedAgain) {
  auto t = gpt2_template();
  const planner::SweepSpace space = wide_space(*t);
  // The analytic evaluator, counting its calls.
  struct Counting : Evaluator {
    explicit Counting(std::atomic<int>& calls) : calls_(calls) {}
    PointMetrics evaluate(const planner::Scenario& s, const std::string& key) override {
      ++calls_;
      return inner_->evaluate(s, key);
    }
    std::string name() const override { return "counting"; }
    std::atomic<int>& calls_;
    std::unique_ptr<Evaluator> inner_ = make_analytic_evaluator();
  };
  std::atomic<int> calls{0};
  SweepOptions o;
  o.threads = 2;
  o.headroom_bytes = 2.0 * 1024 * 1024 * 1024;
  o.rank_every_point = true;
  o.evaluator = [&calls] { return std::make_unique<Counting>(calls); };
  const FullSweep all = run_collecting(t, space, o);
  const int every_point = calls.exchange(0);

  const SweepCost cost = estimate_sweep_cost(t, space, o, 60.0);
  const int sampled = calls.exchange(0);
  ASSERT_TRUE(cost.sampled_points);
  EXPECT_EQ(cost.sampled_points->size(), cost.sampled);
  EXPECT_EQ(cost.sampled, 64u);  // the space has more points than the sample's most
  EXPECT_GT(sampled, 10);        // the sample's valid points reached the evaluator
  // A doctored sample: the sweep must show it, so it took the sample's figures as they are.
  auto planted = std::make_shared<std::map<std::size_t, PointResult>>(*cost.sampled_points);
  std::size_t marked = space.size();
  for (auto& [i, p] : *planted)
    if (p.status == PointStatus::ok) {
      marked = i;
      p.metrics.step_seconds = 1234.5;
      break;
    }
  ASSERT_LT(marked, space.size());

  o.evaluated = cost.sampled_points;
  const FullSweep taken = run_collecting(t, space, o);
  EXPECT_EQ(calls.exchange(0), every_point - sampled);
  ASSERT_EQ(taken.points.size(), all.points.size());
  for (std::size_t i = 0; i < all.points.size(); ++i) {
    const PointResult &x = all.points[i], &y = taken.points[i];
    EXPECT_EQ(x.status, y.status) << x.label;
    EXPECT_EQ(x.reason, y.reason) << x.label;
    EXPECT_EQ(x.metrics.step_seconds, y.metrics.step_seconds) << x.label;  // bit for bit
    EXPECT_EQ(x.metrics.peak_reserved_bytes, y.metrics.peak_reserved_bytes) << x.label;
    EXPECT_EQ(x.metrics.exposed_comm_by_unit, y.metrics.exposed_comm_by_unit) << x.label;
    EXPECT_EQ(x.fits, y.fits) << x.label;
    EXPECT_EQ(x.overage_bytes, y.overage_bytes) << x.label;
  }
  EXPECT_EQ(all.result.ranking, taken.result.ranking);
  EXPECT_EQ(all.result.recommendation.point, taken.result.recommendation.point);

  o.evaluated = planted;
  const FullSweep doctored = run_collecting(t, space, o);
  EXPECT_EQ(doctored.points[marked].metrics.step_seconds, 1234.5);
}

TEST(SweepRanking, ParetoFrontAndRecommendation) {
  const FullSweep f = wide_sweep(2);
  const SweepResult& r = f.result;
  const std::vector<PointResult>& all = f.points;
  ASSERT_GT(r.fitting, 2u);
  // The ranking: points that fit first, by tokens/s/GPU (ties by index), then the rest by overage.
  for (std::size_t k = 0; k + 1 < r.ranking.size(); ++k) {
    const PointResult &a = all[r.ranking[k]], &b = all[r.ranking[k + 1]];
    if (a.fits && b.fits)
      EXPECT_TRUE(a.metrics.tokens_per_second_per_gpu > b.metrics.tokens_per_second_per_gpu ||
                  (a.metrics.tokens_per_second_per_gpu == b.metrics.tokens_per_second_per_gpu && a.index < b.index));
    else
      EXPECT_TRUE(a.fits || a.overage_bytes <= b.overage_bytes);
  }
  // Pareto: no fitting point has at most the memory and more throughput than a front point;
  // every other fitting point is dominated by one on the front.
  const std::set<std::size_t> front(r.pareto.begin(), r.pareto.end());
  for (std::size_t i : r.pareto) {
    EXPECT_TRUE(all[i].fits);
    for (const PointResult& p : all) {
      if (p.status != PointStatus::ok || !p.fits || p.index == i) continue;
      EXPECT_FALSE(p.metrics.device_peak_bytes <= all[i].metrics.device_peak_bytes &&
                   p.metrics.tokens_per_second_per_gpu > all[i].metrics.tokens_per_second_per_gpu);
    }
  }
  for (const PointResult& p : all) {
    if (p.status != PointStatus::ok || !p.fits || front.count(p.index)) continue;
    bool dominated = false;
    for (std::size_t i : r.pareto)
      dominated |= all[i].metrics.device_peak_bytes <= p.metrics.device_peak_bytes &&
                   all[i].metrics.tokens_per_second_per_gpu >= p.metrics.tokens_per_second_per_gpu;
    EXPECT_TRUE(dominated) << p.label;
  }
  // The recommendation: within 1% of the fastest, the least memory.
  ASSERT_TRUE(r.recommendation.found);
  const PointResult& best = all[r.ranking.front()];
  const PointResult& rec = all[r.recommendation.point];
  EXPECT_TRUE(rec.fits);
  EXPECT_GE(rec.metrics.tokens_per_second_per_gpu, 0.99 * best.metrics.tokens_per_second_per_gpu);
  for (const PointResult& p : all) {
    if (p.status != PointStatus::ok || !p.fits) continue;
    if (p.metrics.tokens_per_second_per_gpu >= 0.99 * best.metrics.tokens_per_second_per_gpu) {
      EXPECT_GE(p.metrics.device_peak_bytes, rec.metrics.device_peak_bytes);
    }
  }
  EXPECT_NE(r.recommendation.why.find("tokens/s/GPU"), std::string::npos);
  EXPECT_NE(r.recommendation.why.find("Next: #"), std::string::npos) << r.recommendation.why;
  EXPECT_TRUE(no_fit_message(r).empty());
}

// The streamed ranking against the whole one computed from every point afterwards (sort all,
// sweep the front, scan for the recommendation): the same top, ranks, front and pick, whether
// the sweep keeps 3 ranked points or all of them; and it keeps few points.
TEST(SweepRanking, StreamedEqualsTheWholeRanking) {
  for (const Objective objective : {Objective::throughput, Objective::step_time, Objective::memory}) {
    SCOPED_TRACE(to_string(objective));
    auto t = gpt2_template();
    SweepOptions o;
    o.threads = 2;
    o.headroom_bytes = 76.5 * 1024 * 1024 * 1024;  // 3.15 GiB left: some points fit, some do not
    o.objective = objective;
    o.tolerance = 0.05;
    o.rank_every_point = true;
    o.keep_top = 3;
    const FullSweep few = run_collecting(t, wide_space(*t), o);
    o.keep_top = 100000;
    const FullSweep every = run_collecting(t, wide_space(*t), o);
    const std::vector<PointResult>& all = few.points;

    // The whole ranking, by hand.
    auto cost = [&](const PointMetrics& m) {
      return objective == Objective::throughput ? -m.tokens_per_second_per_gpu
             : objective == Objective::step_time ? m.step_seconds
                                                 : m.device_peak_bytes;
    };
    std::vector<std::size_t> fitting, other;
    for (const PointResult& p : all)
      if (p.status == PointStatus::ok) (p.fits ? fitting : other).push_back(p.index);
    ASSERT_GT(fitting.size(), 3u);
    ASSERT_GT(other.size(), 3u);
    std::stable_sort(fitting.begin(), fitting.end(),
                     [&](std::size_t a, std::size_t b) { return cost(all[a].metrics) < cost(all[b].metrics); });
    std::stable_sort(other.begin(), other.end(),
                     [&](std::size_t a, std::size_t b) { return all[a].overage_bytes < all[b].overage_bytes; });
    std::vector<std::size_t> whole = fitting;
    whole.insert(whole.end(), other.begin(), other.end());
    EXPECT_EQ(every.result.ranking, whole);
    EXPECT_EQ(few.result.ranking, std::vector<std::size_t>(whole.begin(), whole.begin() + 3));
    for (std::size_t k = 0; k < whole.size(); ++k) EXPECT_EQ(few.result.rank_of(whole[k]), k + 1);

    // The front: by memory, then throughput, keeping rising throughput.
    std::vector<std::size_t> by_memory = fitting;
    std::sort(by_memory.begin(), by_memory.end(), [&](std::size_t a, std::size_t b) {
      const PointMetrics &x = all[a].metrics, &y = all[b].metrics;
      if (x.device_peak_bytes != y.device_peak_bytes) return x.device_peak_bytes < y.device_peak_bytes;
      if (x.tokens_per_second_per_gpu != y.tokens_per_second_per_gpu)
        return x.tokens_per_second_per_gpu > y.tokens_per_second_per_gpu;
      return a < b;
    });
    std::vector<std::size_t> front;
    double best_tokens = -1;
    for (std::size_t i : by_memory)
      if (all[i].metrics.tokens_per_second_per_gpu > best_tokens) {
        front.push_back(i);
        best_tokens = all[i].metrics.tokens_per_second_per_gpu;
      }
    EXPECT_EQ(few.result.pareto, front);

    // The pick: the least memory within the tolerance of the best, the earlier in the ranking on a tie.
    const PointMetrics& b = all[fitting.front()].metrics;
    std::size_t pick = fitting.front();
    if (objective != Objective::memory)
      for (std::size_t i : fitting) {
        const PointMetrics& m = all[i].metrics;
        const bool close = objective == Objective::throughput
                               ? m.tokens_per_second_per_gpu >= 0.95 * b.tokens_per_second_per_gpu
                               : m.step_seconds <= 1.05 * b.step_seconds;
        if (close && m.device_peak_bytes < all[pick].metrics.device_peak_bytes) pick = i;
      }
    ASSERT_TRUE(few.result.recommendation.found);
    EXPECT_EQ(few.result.recommendation.point, pick);
    EXPECT_EQ(few.result.recommendation.why, every.result.recommendation.why);
    EXPECT_NE(few.result.recommendation.why.find(std::to_string(fitting.size()) + " configurations that fit"),
              std::string::npos)
        << few.result.recommendation.why;

    // Kept: the ranked top, the fronts and the candidates, not every point.
    EXPECT_LT(few.result.points.size(), all.size() / 2) << all.size() << " points";
    for (std::size_t i : few.result.ranking) EXPECT_EQ(few.result.points.count(i), 1u);
    for (std::size_t i : few.result.pareto) EXPECT_EQ(few.result.points.count(i), 1u);
  }
}

// Every point exceeds memory: the sweep says so and names the smallest overage.
TEST(SweepRanking, NothingFitsNamesTheSmallestOverage) {
  // A 40 GiB GPU with 30 GiB of headroom leaves 10 GiB: Llama-2-7B does not fit on 8 GPUs.
  nlohmann::json j = {{"model", "models/llama2-7b.json"},
                      {"cluster", "scenarios/clusters/dgx-h100.json"},
                      {"training", {{"global_batch", 16}, {"micro_batch", 1}, {"seq_len", 4096}}},
                      {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  auto t = planner::ScenarioTemplate::from_json(j, kRoot + "/scenarios/nothing_fits.json", {});
  planner::SweepSpace space =
      space_of(*t, {"fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP,NO_SHARD", "training.activation_checkpointing=none,full",
                    "training.micro_batch=1,2,3"});
  SweepOptions o;
  o.threads = 2;
  o.headroom_bytes = 72.0 * 1024 * 1024 * 1024;
  const FullSweep f = run_collecting(t, space, o);
  const SweepResult& r = f.result;
  ASSERT_GT(r.evaluated, 5u);
  EXPECT_EQ(r.fitting, 0u);
  EXPECT_FALSE(r.recommendation.found);
  ASSERT_TRUE(r.smallest_overage.has_value());
  double smallest = 1e300;
  std::size_t at = 0;
  for (const PointResult& p : f.points)
    if (p.status == PointStatus::ok) {
      EXPECT_FALSE(p.fits);
      EXPECT_GT(p.overage_bytes, 0);
      if (p.overage_bytes < smallest) {
        smallest = p.overage_bytes;
        at = p.index;
      }
    }
  EXPECT_EQ(*r.smallest_overage, at);
  EXPECT_EQ(r.ranking.front(), at);
  const std::string msg = no_fit_message(r);
  EXPECT_NE(msg.find("No configuration fits"), std::string::npos) << msg;
  EXPECT_NE(msg.find("#" + std::to_string(at) + " " + r.point(at).label), std::string::npos) << msg;
  char overage[64];
  std::snprintf(overage, sizeof overage, "%.2f GiB", smallest / (1024.0 * 1024.0 * 1024.0));
  EXPECT_NE(msg.find(std::string("smallest overage is ") + overage), std::string::npos) << msg;
  EXPECT_FALSE(r.pareto.empty()) << "with nothing fitting, the front is over all points";
}

TEST(SweepRanking, CancelStopsAndKeepsWhatIsDone) {
  auto t = gpt2_template();
  planner::SweepSpace space = space_of(*t, {"training.micro_batch=1,2,4", "fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP,NO_SHARD"});
  std::atomic<bool> cancel{false};
  SweepOptions o;
  o.threads = 1;
  o.cancel = &cancel;
  o.progress = [&](std::size_t done, std::size_t) {
    if (done == 4) cancel.store(true);
  };
  const FullSweep f = run_collecting(t, space, o);
  const SweepResult& r = f.result;
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.evaluated + r.skipped + r.failed, 4u);
  ASSERT_EQ(f.points.size(), 9u) << "the sink sees the points not run too";
  std::size_t not_run = 0;
  for (const PointResult& p : f.points) not_run += p.status == PointStatus::not_run;
  EXPECT_EQ(not_run, 5u);
  EXPECT_EQ(f.points.back().label, space.label(space.choice(8)));
  EXPECT_EQ(f.points.back().reason, "not evaluated (interrupted)");
  EXPECT_TRUE(r.recommendation.found) << "ranks what is done";
}

TEST(SweepRanking, ResimulationHookReordersTheTop) {
  SweepResult r = wide_sweep(2).result;
  ASSERT_GE(r.fitting, 3u);
  const std::size_t first = r.ranking[0], third = r.ranking[2];
  // A fake engine that finds the third point twice as fast as the analytic engine did.
  resimulate_top(
      r, 3,
      [&](const PointResult& p, std::string& note) -> std::optional<PointMetrics> {
        PointMetrics m = p.metrics;
        if (p.index == third) {
          m.step_seconds /= 2;
          m.tokens_per_second_per_gpu *= 2;
        }
        m.device_peak_bytes = 0;  // memory: keep the schedule's
        m.units = 0;              // and the wrapping's units (the engine reports none)
        note = "fake engine";
        return m;
      },
      0.0);
  ASSERT_EQ(r.resimulated_ranking.size(), 3u);
  EXPECT_EQ(r.resimulated_ranking.front(), third);
  EXPECT_EQ(r.recommendation.point, third);
  EXPECT_EQ(r.point(third).resimulated->device_peak_bytes, r.point(third).metrics.device_peak_bytes);
  EXPECT_GT(r.point(third).metrics.units, 0);
  EXPECT_EQ(r.point(third).resimulated->units, r.point(third).metrics.units);
  EXPECT_EQ(r.point(first).resimulation_note, "fake engine");
  EXPECT_NE(r.recommendation.why.find("re-simulated"), std::string::npos);
}

// ---- distributed sweeps (shards and their merge) -------------------------------------------------

TEST(SweepShards, ParseShard) {
  const Shard s = parse_shard("2/5");
  EXPECT_EQ(s.index, 2u);
  EXPECT_EQ(s.count, 5u);
  EXPECT_TRUE(s.owns(7));
  EXPECT_FALSE(s.owns(8));
  EXPECT_EQ(s.points(12), 2u);  // 2 and 7
  EXPECT_EQ(s.points(13), 3u);  // and 12
  EXPECT_EQ(s.points(2), 0u);
  for (const char* bad : {"5/5", "1/0", "1", "a/3", "-1/3", "1/3/4", ""})
    EXPECT_THROW(parse_shard(bad), std::invalid_argument) << bad;
}

TEST(SweepShards, RecordsReadBackBitForBit) {
  auto t = gpt2_template();
  const planner::SweepSpace space = wide_space(*t);
  PointResult p;
  p.index = 5;
  p.status = PointStatus::ok;
  p.metrics.peak_allocated_bytes = 123456789012;
  p.metrics.peak_reserved_bytes = 0;
  p.metrics.step_seconds = 0.1 + 0.2;  // not a short decimal
  p.metrics.mfu = std::nextafter(0.5, 1.0);
  p.metrics.tokens_per_second_per_gpu = std::numeric_limits<double>::max();
  p.metrics.compute_seconds = std::numeric_limits<double>::denorm_min();
  p.metrics.units = 3;
  p.metrics.allocator_retries = 7;
  p.metrics.exposed_comm_by_unit = {1e-300, -0.0, 3.5};
  const PointResult q = parse_point_record(point_record(p), space);
  EXPECT_EQ(q.metrics.allocator_retries, 7);  // what judges a merged point near capacity
  EXPECT_EQ(q.index, 5u);
  EXPECT_EQ(q.label, space.label(space.choice(5)));  // from the space, not the record
  EXPECT_EQ(q.metrics.peak_allocated_bytes, p.metrics.peak_allocated_bytes);
  EXPECT_EQ(q.metrics.peak_reserved_bytes, 0);
  EXPECT_EQ(q.metrics.step_seconds, p.metrics.step_seconds);
  EXPECT_EQ(q.metrics.mfu, p.metrics.mfu);
  EXPECT_EQ(q.metrics.tokens_per_second_per_gpu, p.metrics.tokens_per_second_per_gpu);
  EXPECT_EQ(q.metrics.compute_seconds, p.metrics.compute_seconds);
  EXPECT_EQ(q.metrics.units, 3);
  ASSERT_EQ(q.metrics.exposed_comm_by_unit.size(), 3u);
  EXPECT_TRUE(std::signbit(q.metrics.exposed_comm_by_unit[1]));
  EXPECT_EQ(q.metrics.exposed_comm_by_unit[0], 1e-300);
  // A figure no point has (a negative byte count, an infinite rate) is refused, not read back.
  PointResult negative = p;
  negative.metrics.peak_reserved_bytes = -1;
  EXPECT_THROW(parse_point_record(point_record(negative), space), std::invalid_argument);
  PointResult infinite = p;
  infinite.metrics.tokens_per_second_per_gpu = std::numeric_limits<double>::infinity();
  EXPECT_THROW(parse_point_record(point_record(infinite), space), std::invalid_argument);

  PointResult skipped;
  skipped.index = 1;
  skipped.status = PointStatus::skipped;
  skipped.reason = "a \"quoted\" reason\nover two lines, é";
  const std::string line = point_record(skipped);
  EXPECT_EQ(line.find('\n'), std::string::npos);  // one record, one line
  const PointResult r = parse_point_record(line, space);
  EXPECT_EQ(r.status, PointStatus::skipped);
  EXPECT_EQ(r.reason, skipped.reason);

  EXPECT_THROW(parse_point_record("p 99999 ok \"\"", space), std::invalid_argument);  // outside the space
  EXPECT_THROW(parse_point_record("p 1 ok 1 2 \"\"", space), std::invalid_argument);    // metrics cut short
  EXPECT_THROW(parse_point_record("p 1 done \"\"", space), std::invalid_argument);
}

// Three shards, each run alone, their records read back and merged: every point, the ranking, the
// ranks, the fronts and the recommendation equal one process's sweep of the whole space.
TEST(SweepShards, MergedShardsEqualOneProcess) {
  const FullSweep whole = wide_sweep(2);
  auto t = gpt2_template();
  const planner::SweepSpace space = wide_space(*t);
  constexpr std::size_t kShards = 3;
  std::vector<std::vector<std::string>> records(kShards);
  for (std::size_t k = 0; k < kShards; ++k) {
    SweepOptions o;
    o.threads = 1;
    o.shard = Shard{k, kShards};
    o.sink = [&records, k](const PointResult& p) { records[k].push_back(point_record(p)); };
    const SweepResult part = run_sweep(t, space, o);
    EXPECT_EQ(part.evaluated + part.skipped + part.failed, o.shard.points(space.size()));
  }
  SweepOptions o;
  o.headroom_bytes = 2.0 * 1024 * 1024 * 1024;
  o.keep_top = 10;
  o.rank_every_point = true;
  std::vector<PointResult> merged_points;
  o.sink = [&merged_points](const PointResult& p) { merged_points.push_back(p); };
  std::size_t i = 0;
  const SweepResult merged = merge_sweep(space, o, [&]() -> std::optional<PointResult> {
    if (i >= space.size()) return std::nullopt;
    const std::size_t index = i++;
    return parse_point_record(records[index % kShards][index / kShards], space);
  });
  ASSERT_EQ(merged_points.size(), whole.points.size());
  for (std::size_t k = 0; k < merged_points.size(); ++k) {
    const PointResult &x = whole.points[k], &y = merged_points[k];
    EXPECT_EQ(point_record(x), point_record(y));
    EXPECT_EQ(x.fits, y.fits);
    EXPECT_EQ(x.overage_bytes, y.overage_bytes);
    EXPECT_EQ(x.overrides, y.overrides);
  }
  const SweepResult& a = whole.result;
  EXPECT_EQ(a.evaluated, merged.evaluated);
  EXPECT_EQ(a.skipped, merged.skipped);
  EXPECT_EQ(a.fitting, merged.fitting);
  EXPECT_EQ(a.ranking, merged.ranking);
  EXPECT_EQ(a.ranks, merged.ranks);
  EXPECT_EQ(a.pareto, merged.pareto);
  EXPECT_EQ(a.not_evaluated, merged.not_evaluated);
  EXPECT_EQ(a.recommendation.point, merged.recommendation.point);
  EXPECT_EQ(a.recommendation.why, merged.recommendation.why);
  EXPECT_FALSE(merged.interrupted);

  // A shard missing: its points come out of order, which the merge refuses.
  std::size_t j = 0;
  EXPECT_THROW(merge_sweep(space, o,
                           [&]() -> std::optional<PointResult> {
                             while (j < space.size() && j % kShards == 1) ++j;
                             if (j >= space.size()) return std::nullopt;
                             const std::size_t index = j++;
                             return parse_point_record(records[index % kShards][index / kShards], space);
                           }),
               std::invalid_argument);
}

}  // namespace
}  // namespace fsdpsim::sim
