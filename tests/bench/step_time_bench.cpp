// Issue "Step time: cost model, analytic engine, and a trace people can open": the analytic
// estimate of a Llama-3.1-70B step on 1024 GPUs (128 DGX H100 nodes, 80 block units,
// gradient accumulation 1) in under 50 ms, and a sweep-sized loop of 1,000 such estimates
// in under 10 s on one core. The parts (scenario load, plan, memory replay, cost model,
// engine) are timed separately to show where the time goes.
// Run: build/tests/fsdpsim_bench --benchmark_filter=Llama70B
#include <benchmark/benchmark.h>

#include "planner/cost_model.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "sim/analytic.h"
#include "sim/estimate.h"

namespace {

using namespace fsdpsim;

nlohmann::json llama70b() {
  return {{"model", "models/llama3.1-70b.json"},
          {"cluster", "scenarios/clusters/dgx-h100.json"},
          {"training", {{"micro_batch", 1}, {"seq_len", 8192}, {"grad_accum", 1}, {"activation_checkpointing", "full"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}
const std::vector<std::string> kOn1024 = {"cluster.nodes=128"};

void BM_Llama70B_1024Gpus_EstimateStep(benchmark::State& state) {
  // What `fsdpsim estimate` does per point: load the scenario, plan, replay memory, time.
  const nlohmann::json scenario = llama70b();
  for (auto _ : state) {
    const planner::Scenario s = planner::parse_scenario(scenario, "bench.json", kOn1024);
    const sim::Estimate e = sim::estimate_step(s);
    benchmark::DoNotOptimize(e.timing.step_seconds);
    state.counters["ops"] = static_cast<double>(e.plan.schedule.ops.size());
    state.counters["units"] = static_cast<double>(e.plan.units.size());
    state.counters["step_s"] = e.timing.step_seconds;
    state.counters["mfu"] = e.timing.mfu;
  }
}
BENCHMARK(BM_Llama70B_1024Gpus_EstimateStep)->Unit(benchmark::kMillisecond);

void BM_Llama70B_1024Gpus_Parts(benchmark::State& state) {
  // state.range(0): 0 load scenario, 1 plan, 2 memory replay, 3 cost model (engine inputs),
  // 4 engine (simulate), 5 timed memory.
  const planner::Scenario s = planner::parse_scenario(llama70b(), "bench.json", kOn1024);
  const planner::Plan plan = planner::plan_step(s);
  const planner::CostModel cost(s);
  const planner::OpCosts in = planner::price_ops(plan.schedule, cost);
  const sim::StepTiming timing = sim::simulate(plan.schedule, in);
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0: benchmark::DoNotOptimize(planner::parse_scenario(llama70b(), "bench.json", kOn1024).world_size()); break;
      case 1: benchmark::DoNotOptimize(planner::plan_step(s).schedule.ops.size()); break;
      case 2: benchmark::DoNotOptimize(planner::replay_memory(plan.schedule, 80e9).peak_allocated_bytes); break;
      case 3: benchmark::DoNotOptimize(planner::price_ops(plan.schedule, planner::CostModel(s)).duration_seconds.size()); break;
      case 4: benchmark::DoNotOptimize(sim::simulate(plan.schedule, in).step_seconds); break;
      case 5: benchmark::DoNotOptimize(sim::timed_memory(plan.schedule, timing).peak_allocated_bytes); break;
    }
  }
  static const char* names[] = {"load scenario", "plan", "memory replay", "cost model", "engine", "timed memory"};
  state.SetLabel(names[state.range(0)]);
}
BENCHMARK(BM_Llama70B_1024Gpus_Parts)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

void BM_Llama70B_1024Gpus_Sweep1000(benchmark::State& state) {
  // 1,000 estimates as a sweep makes them: each point its own overrides (FSDP version,
  // prefetch, reshard, checkpointing, micro-batch), parsed and estimated from scratch.
  const nlohmann::json scenario = llama70b();
  std::vector<std::vector<std::string>> points;
  for (int i = 0; points.size() < 1000; ++i) {
    std::vector<std::string> o = kOn1024;
    o.push_back("fsdp.version=" + std::to_string(1 + i % 2));
    // NONE is FSDP1's (version 1 at even i): FSDP2 always prefetches in backward.
    o.push_back(std::string("fsdp.backward_prefetch=") + (i % 6 == 0 ? "NONE" : "BACKWARD_PRE"));
    o.push_back(std::string("fsdp.reshard_after_forward=") + (i % 5 == 0 ? "false" : "true"));
    o.push_back(std::string("training.activation_checkpointing=") + (i % 7 == 0 ? "none" : "full"));
    o.push_back("training.micro_batch=" + std::to_string(1 + i % 4));
    points.push_back(o);
  }
  double sum = 0;
  for (auto _ : state) {
    for (const auto& o : points) sum += sim::estimate_step(planner::parse_scenario(scenario, "bench.json", o)).timing.step_seconds;
  }
  benchmark::DoNotOptimize(sum);
  state.counters["estimates"] = 1000;
}
BENCHMARK(BM_Llama70B_1024Gpus_Sweep1000)->Unit(benchmark::kSecond)->Iterations(1);

void BM_Llama70B_1024Gpus_Sweep1000_ParsedOnce(benchmark::State& state) {
  // The same 1,000 points with the scenario (and its model) parsed once and the swept
  // fields set on a copy: the planning + memory + time part of a sweep.
  const planner::Scenario base = planner::parse_scenario(llama70b(), "bench.json", kOn1024);
  double sum = 0;
  for (auto _ : state) {
    for (int i = 0; i < 1000; ++i) {
      planner::Scenario s = base;
      s.fsdp.version = 1 + i % 2;
      s.fsdp.backward_prefetch = i % 3 == 0 ? planner::BackwardPrefetch::none : planner::BackwardPrefetch::pre;
      s.fsdp.reshard_after_forward = i % 5 == 0 ? 0 : s.fsdp.shard_group_size;
      s.training.checkpointing = i % 7 == 0 ? planner::Checkpointing::none : planner::Checkpointing::full;
      s.training.micro_batch = 1 + i % 4;
      s.training.global_batch = s.training.micro_batch * s.world_size();
      sum += sim::estimate_step(s).timing.step_seconds;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.counters["estimates"] = 1000;
}
BENCHMARK(BM_Llama70B_1024Gpus_Sweep1000_ParsedOnce)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace
