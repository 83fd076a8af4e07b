#include "sim/scenario_loader.h"
#include "sim/estimate.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace fsdpsim::sim {

namespace {

void count_gemm_sources(Estimate& e, const planner::CostModel& cost) {
  std::set<std::tuple<double, double, double, bool>> seen;
  for (const planner::KernelSet& k : e.plan.schedule.kernel_sets)
    for (const planner::GemmShape& g : k.gemms)
      if (seen.emplace(g.m, g.n, g.k, g.fp8).second && cost.gemm_from_table(g)) ++e.gemm_shapes_from_table;
  e.gemm_shapes = static_cast<int>(seen.size());
}

// The job outside the step: offload options, init, checkpoint save, and the verdict over all.
void add_job_phases(Estimate& e, const planner::Scenario& scenario) {
  e.offload_options = planner::offload_options(scenario, e.plan);
  e.init = planner::init_peak(scenario, e.plan, e.memory);
  planner::PhasePeak step;
  step.phase = "step";
  step.device_bytes = static_cast<double>(e.memory.peak_reserved_bytes);
  step.device_at = "peak reserved (caching-allocator model)";
  step.host_bytes_per_node = static_cast<double>(e.memory.peak_host_bytes) * scenario.cluster.gpus_per_node;
  step.host_at = "offloaded state and staging of the node's ranks";
  std::vector<planner::PhasePeak> phases = {step, e.init};
  if (scenario.checkpoint.enabled) {
    e.checkpoint = planner::checkpoint_save(scenario, e.plan, e.memory, e.calibration.pcie_gbps, &e.calibration.nccl);
    phases.push_back(e.checkpoint->peak);
  }
  e.job = planner::job_fit(phases, e.device_overhead_bytes, e.gpu_memory_bytes, scenario.cluster.host_memory_bytes);
}

}  // namespace

Estimate estimate_step(const planner::Scenario& scenario) {
  Estimate e;
  e.plan = planner::plan_step(scenario);
  const planner::CostModel cost(scenario);
  e.cluster = scenario.cluster;
  e.calibration = cost.calibration();
  e.attention_kernel = planner::to_string(cost.attention_kernel());
  // A model costed for eager attention materialises its scores: no fused kernel runs it.
  for (const planner::KernelSet& k : e.plan.schedule.kernel_sets)
    if (k.has_attention && k.scores_materialized) e.attention_kernel = "eager";
  count_gemm_sources(e, cost);
  e.gpu_memory_bytes = scenario.cluster.gpu.memory_bytes;
  planner::CollectiveMemo collectives;  // the overhead's NCCL estimates are the timing's
  e.overhead = planner::device_overhead(scenario, e.plan.schedule, cost, &collectives);
  e.device_overhead_bytes = e.overhead.total_bytes;
  e.memory = planner::replay_memory(e.plan.schedule, e.gpu_memory_bytes - e.device_overhead_bytes);
  e.costs = planner::price_ops(e.plan.schedule, cost, &collectives);
  e.timing = simulate(e.plan.schedule, e.costs);
  e.timed_memory = timed_memory(e.plan.schedule, e.timing);
  add_job_phases(e, scenario);
  return e;
}

SimgridResult simulate_estimate(const Estimate& e, const SimgridOptions& options) {
  SimgridResult r = simulate_simgrid(e.plan.schedule, e.costs, {e.cluster, e.calibration.nccl}, options);
  compare_with_analytic(r, e.plan.schedule, e.timing);
  return r;
}

SimgridResult simulate_scenario(const planner::Scenario& scenario, const SimgridOptions& options) {
  return simulate_estimate(estimate_step(scenario), options);
}

MicroBatchSearch find_max_micro_batch(const planner::ScenarioTemplate& base, double headroom_bytes) {
  MicroBatchSearch search;
  search.headroom_bytes = headroom_bytes;
  const std::int64_t accum = base.base().training.grad_accum;
  std::map<std::int64_t, bool> fits;
  auto try_batch = [&](std::int64_t mb) {
    if (fits.count(mb)) return fits[mb];
    const Estimate e = estimate_step(base.instantiate({"training.micro_batch=" + std::to_string(mb), "training.global_batch=null",
                                                       "training.grad_accum=" + std::to_string(accum)}));
    MicroBatchSearch::Trial t;
    t.micro_batch = mb;
    t.device_peak_bytes = e.device_peak_bytes();
    t.fits = t.device_peak_bytes + headroom_bytes <= e.gpu_memory_bytes;
    t.order = static_cast<int>(search.tried.size());
    search.tried.push_back(t);
    search.gpu_memory_bytes = e.gpu_memory_bytes;
    return fits[mb] = t.fits;
  };
  std::int64_t good = 0, bad = 0;
  for (std::int64_t mb = 1; mb <= kMaxMicroBatchSearched; mb *= 2) {
    if (try_batch(mb)) good = mb;
    else {
      bad = mb;
      break;
    }
  }
  if (bad == 0) {
    search.capped = true;
  } else {
    while (bad - good > 1) {
      const std::int64_t mid = (good + bad) / 2;
      if (try_batch(mid)) good = mid;
      else bad = mid;
    }
  }
  search.largest_fitting = good;
  std::sort(search.tried.begin(), search.tried.end(),
            [](const MicroBatchSearch::Trial& a, const MicroBatchSearch::Trial& b) { return a.micro_batch < b.micro_batch; });
  return search;
}

}  // namespace fsdpsim::sim
