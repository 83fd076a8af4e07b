// Issue "Foundation and the memory planner": `fsdpsim estimate` end to end for
// Llama-3.1-405B on 1024 GPUs in under 100 ms on one core. This measures the library path
// the CLI takes: load the scenario (model catalog file, cluster, GPU catalog), plan the
// step, replay its memory.
#include <benchmark/benchmark.h>

#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace {

nlohmann::json llama405b_on_1024() {
  return {{"model", "models/llama3.1-405b.json"},
          {"cluster", "scenarios/clusters/dgx-h100.json"},
          {"training", {{"micro_batch", 1}, {"seq_len", 8192}, {"activation_checkpointing", "full"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

void BM_MemoryEstimate_Llama405B_1024Gpus(benchmark::State& state) {
  const nlohmann::json scenario = llama405b_on_1024();
  for (auto _ : state) {
    auto s = fsdpsim::planner::parse_scenario(scenario, "bench.json", {"cluster.nodes=128"});
    auto plan = fsdpsim::planner::plan_step(s);
    auto report = fsdpsim::planner::replay_memory(plan.schedule, s.cluster.gpu.memory_bytes);
    benchmark::DoNotOptimize(report.peak_allocated_bytes);
    state.counters["ops"] = static_cast<double>(plan.schedule.ops.size());
  }
}
BENCHMARK(BM_MemoryEstimate_Llama405B_1024Gpus)->Unit(benchmark::kMillisecond);

}  // namespace
