// Issue "`fsdpsim sweep`": at least 2,000 configurations per second per core for
// Llama-3.1-8B on 64 GPUs with the analytic engine. BM_Sweep_* report items_per_second =
// configurations per second (per core for the one-thread run); the BM_Point_* benchmarks
// split one configuration into its stages (instantiate the scenario, plan as `estimate` does
// and as a sweep does, memory replay, cost model, engine) to show where the time goes.
#include <benchmark/benchmark.h>

#include <thread>

#include "planner/cost_model.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/sweep_space.h"
#include "sim/advice.h"
#include "sim/analytic.h"
#include "sim/sweep.h"
#include "sim/wrap_search.h"

namespace {

using namespace fsdpsim;

const std::string kFile = "bench_sweep.json";  // a name for reports; references resolve under the catalog root

// Llama-3.1-8B on 8 DGX H100 nodes (64 GPUs), one micro-step per step.
std::shared_ptr<const planner::ScenarioTemplate> llama8b_on_64() {
  static const auto t = planner::ScenarioTemplate::from_json(
      {{"model", "models/llama3.1-8b.json"},
       {"cluster", "scenarios/clusters/dgx-h100.json"},
       {"training", {{"global_batch", 64}, {"micro_batch", 1}, {"seq_len", 8192}, {"activation_checkpointing", "full"}}},
       {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}},
      kFile, {"cluster.nodes=8"});
  return t;
}

// Llama-3.1-405B on 128 DGX H100 nodes (1,024 GPUs), the same training settings: issue 19's
// "a 405B sweep within 2x of the 8B one per point" (126 blocks against 32).
std::shared_ptr<const planner::ScenarioTemplate> llama405b_on_1024() {
  static const auto t = planner::ScenarioTemplate::from_json(
      {{"model", "models/llama3.1-405b.json"},
       {"cluster", "scenarios/clusters/dgx-h100.json"},
       {"training", {{"global_batch", 1024}, {"micro_batch", 1}, {"seq_len", 8192}, {"activation_checkpointing", "full"}}},
       {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}},
      kFile, {"cluster.nodes=128"});
  return t;
}

// 80 configurations, all valid: strategy x checkpointing x prefetch depth x forward prefetch.
planner::SweepSpace space80(const std::shared_ptr<const planner::ScenarioTemplate>& base) {
  std::vector<planner::AxisSpec> specs;
  for (const char* a : {"fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP,HYBRID_SHARD:8,HYBRID_SHARD:16,HYBRID_SHARD:32",
                        "training.activation_checkpointing=none,full,2,4", "fsdp.prefetch_depth=1,2",
                        "fsdp.forward_prefetch=false,true"})
    specs.push_back(planner::parse_axis_spec(a));
  return planner::make_space(specs, base->context());
}

void run(benchmark::State& state, int threads,
         const std::shared_ptr<const planner::ScenarioTemplate>& base = llama8b_on_64()) {
  const planner::SweepSpace space = space80(base);
  sim::SweepOptions o;
  o.threads = threads;
  std::size_t points = 0;
  for (auto _ : state) {
    sim::SweepResult r = sim::run_sweep(base, space, o);
    if (r.evaluated != space.size()) state.SkipWithError("a point was skipped");
    points += r.evaluated;
    benchmark::DoNotOptimize(r.ranking.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(points));
  state.counters["threads"] = threads;
  state.counters["configs_per_s_per_core"] =
      benchmark::Counter(static_cast<double>(points) / threads, benchmark::Counter::kIsRate);
}

void BM_Sweep_Llama8B_64Gpus_OneCore(benchmark::State& state) { run(state, 1); }
BENCHMARK(BM_Sweep_Llama8B_64Gpus_OneCore)->Unit(benchmark::kMillisecond);  // CPU time: one core

void BM_Sweep_Llama8B_64Gpus_AllCores(benchmark::State& state) {
  run(state, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}
BENCHMARK(BM_Sweep_Llama8B_64Gpus_AllCores)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Sweep_Llama405B_1024Gpus_OneCore(benchmark::State& state) { run(state, 1, llama405b_on_1024()); }
BENCHMARK(BM_Sweep_Llama405B_1024Gpus_OneCore)->Unit(benchmark::kMillisecond);  // CPU time: one core

// `estimate`'s advice (sim/advice.h) for the 405B configuration above, which does not fit: its
// candidate changes (46: singles, then pairs) swept on one thread, CPU time. Memory-first: the
// candidates that do not fit are not timed.
void BM_Advice_Llama405B_1024Gpus_OneCore(benchmark::State& state) {
  const auto base = llama405b_on_1024();
  for (auto _ : state) {
    const sim::Advice a = sim::advise(base, 0, 5, 1);
    benchmark::DoNotOptimize(a.candidates);
    state.counters["candidates"] = static_cast<double>(a.candidates);
    state.counters["fitting"] = static_cast<double>(a.fitting.size());
  }
}
BENCHMARK(BM_Advice_Llama405B_1024Gpus_OneCore)->Unit(benchmark::kMillisecond);  // CPU time: one core

// ---- one configuration, stage by stage ----------------------------------------------------------

// Each stage for Llama-3.1-8B on 64 GPUs and for Llama-3.1-405B on 1,024 (126 blocks against
// 32): what grows with depth (issue 19).
using Base = std::shared_ptr<const planner::ScenarioTemplate> (*)();

const std::vector<std::string> kPoint = {"fsdp.strategy=FULL_SHARD", "training.activation_checkpointing=full"};

void BM_Point_Instantiate(benchmark::State& state, Base base) {
  const auto t = base();
  for (auto _ : state) benchmark::DoNotOptimize(t->instantiate(kPoint).world_size());
}
BENCHMARK_CAPTURE(BM_Point_Instantiate, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_Instantiate, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

void BM_Point_Plan(benchmark::State& state, Base base) {
  const planner::Scenario s = base()->instantiate(kPoint);
  std::size_t ops = 0;
  for (auto _ : state) {
    planner::Plan p = planner::plan_step(s);
    ops = p.schedule.ops.size();
    benchmark::DoNotOptimize(p.schedule.ops.data());
  }
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK_CAPTURE(BM_Point_Plan, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_Plan, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

// As a sweep plans: the per-model layout cached, no readable names.
void BM_Point_PlanForSweep(benchmark::State& state, Base base) {
  const planner::Scenario s = base()->instantiate(kPoint);
  planner::PlanCache cache;
  for (auto _ : state) {
    planner::Plan p = planner::plan_step(s, cache, planner::Naming::none);
    benchmark::DoNotOptimize(p.schedule.ops.data());
  }
}
BENCHMARK_CAPTURE(BM_Point_PlanForSweep, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_PlanForSweep, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

void BM_Point_MemoryReplay(benchmark::State& state, Base base) {
  const planner::Scenario s = base()->instantiate(kPoint);
  const planner::Plan p = planner::plan_step(s);
  for (auto _ : state) benchmark::DoNotOptimize(planner::replay_memory(p.schedule, 79e9).peak_reserved_bytes);
}
BENCHMARK_CAPTURE(BM_Point_MemoryReplay, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_MemoryReplay, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

void BM_Point_CostModel(benchmark::State& state, Base base) {
  const planner::Scenario s = base()->instantiate(kPoint);
  for (auto _ : state) {
    planner::CostModel cost(s);
    benchmark::DoNotOptimize(cost.peak_flops());
  }
}
BENCHMARK_CAPTURE(BM_Point_CostModel, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_CostModel, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

void BM_Point_Engine(benchmark::State& state, Base base) {
  const planner::Scenario s = base()->instantiate(kPoint);
  const planner::Plan p = planner::plan_step(s);
  const planner::CostModel cost(s);
  for (auto _ : state) benchmark::DoNotOptimize(sim::time_step(p.schedule, cost).step_seconds);
}
BENCHMARK_CAPTURE(BM_Point_Engine, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_Engine, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

void BM_Point_Full(benchmark::State& state, Base base) {
  const auto t = base();
  auto ev = sim::make_analytic_evaluator();
  const std::string key = sim::cost_key_of(kPoint);
  for (auto _ : state) benchmark::DoNotOptimize(ev->evaluate(t->instantiate(kPoint), key).step_seconds);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_Point_Full, Llama8B_64Gpus, llama8b_on_64)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Point_Full, Llama405B_1024Gpus, llama405b_on_1024)->Unit(benchmark::kMicrosecond);

// ---- the wrapping search on 32 blocks -------------------------------------------------------------

void BM_WrapSearch_Llama8B_DynamicProgram(benchmark::State& state) {
  const planner::Scenario s = llama8b_on_64()->instantiate({});
  const sim::SeparableModel m = sim::SeparableModel::build(s, sim::WrapObjective::exposed_comm);
  std::size_t states = 0;
  for (auto _ : state) benchmark::DoNotOptimize(m.best(8, 0, 0, true, &states).size());
  state.counters["states"] = static_cast<double>(states);
}
BENCHMARK(BM_WrapSearch_Llama8B_DynamicProgram)->Unit(benchmark::kMillisecond);

void BM_WrapSearch_Llama8B_BuildModel(benchmark::State& state) {
  const planner::Scenario s = llama8b_on_64()->instantiate({});
  for (auto _ : state)
    benchmark::DoNotOptimize(sim::SeparableModel::build(s, sim::WrapObjective::exposed_comm).blocks());
}
BENCHMARK(BM_WrapSearch_Llama8B_BuildModel)->Unit(benchmark::kMillisecond);

}  // namespace
