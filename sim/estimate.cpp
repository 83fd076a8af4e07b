#include "sim/scenario_loader.h"
#include "sim/estimate.h"

#include <algorithm>
#include <functional>
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
  e.init = planner::init_peak(scenario, e.plan);
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
  e.mfu_peak_dtype = cost.mfu_peak_dtype();
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

namespace {

// Doubling over the candidate values (values[0], values[1], values[3], values[7], ...: the k-th
// value for k = 1, 2, 4, ...) while they fit, then bisection between the last that fits and the
// first that does not. `values` ascend; `overrides(value)` are the --set assignments that make
// the scenario of a value.
FitSearch largest_fitting(const planner::ScenarioTemplate& base, double headroom_bytes,
                          const std::vector<std::int64_t>& values,
                          const std::function<std::vector<std::string>(std::int64_t)>& overrides) {
  FitSearch search;
  search.headroom_bytes = headroom_bytes;
  std::map<std::int64_t, bool> fits;
  auto try_value = [&](std::int64_t value) {
    if (fits.count(value)) return fits[value];
    const Estimate e = estimate_step(base.instantiate(overrides(value)));
    FitSearch::Trial t;
    t.value = value;
    t.device_peak_bytes = e.device_peak_bytes();
    t.fits = t.device_peak_bytes + headroom_bytes <= e.gpu_memory_bytes;
    // Said with the trial (it was said on stderr only, the session-36 audit): the answer may be
    // a near miss.
    t.near_capacity = t.fits && planner::near_capacity(e.gpu_memory_bytes, t.device_peak_bytes,
                                                       static_cast<double>(e.memory.peak_reserved_bytes),
                                                       e.memory.allocator_retries);
    t.order = static_cast<int>(search.tried.size());
    search.tried.push_back(t);
    search.gpu_memory_bytes = e.gpu_memory_bytes;
    return fits[value] = t.fits;
  };
  // good and bad count values: the k-th is values[k - 1]; 0 is "none".
  const auto value_at = [&](std::int64_t k) { return values[static_cast<std::size_t>(k - 1)]; };
  const std::int64_t count = static_cast<std::int64_t>(values.size());
  std::int64_t good = 0, bad = 0;
  for (std::int64_t k = 1; k <= count; k *= 2) {
    if (try_value(value_at(k))) good = k;
    else {
      bad = k;
      break;
    }
  }
  if (bad == 0 && count > 0) {
    // Doubling stopped below the last value: try it too, so that a fitting last value is found.
    if (good < count && !try_value(value_at(count))) bad = count;
    else good = std::max(good, count);
  }
  if (bad == 0) {
    search.capped = good > 0;
  } else {
    while (bad - good > 1) {
      const std::int64_t mid = (good + bad) / 2;
      if (try_value(value_at(mid))) good = mid;
      else bad = mid;
    }
  }
  search.largest_fitting = good > 0 ? value_at(good) : 0;
  std::sort(search.tried.begin(), search.tried.end(),
            [](const FitSearch::Trial& a, const FitSearch::Trial& b) { return a.value < b.value; });
  return search;
}

}  // namespace

// Every multiple of `step` up to `max_value`.
std::vector<std::int64_t> multiples(std::int64_t step, std::int64_t max_value) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = step; x <= max_value; x += step) v.push_back(x);
  return v;
}

FitSearch find_max_micro_batch(const planner::ScenarioTemplate& base, double headroom_bytes) {
  const planner::TrainingSpec& t = base.base().training;
  if (t.global_batch_stated) {
    // The stated global batch is kept, as --micro-batch, a sweep's micro-batch axis and the
    // deadline search keep it: the micro-batches that divide each rank's share of it, the gradient
    // accumulation following (the session-36 audit: the search kept the accumulation, so its
    // answer changed the batch and `estimate --micro-batch` refused it).
    const std::int64_t per_rank = t.global_batch / base.base().world_size();
    std::vector<std::int64_t> divisors;
    for (std::int64_t m = 1; m <= std::min(per_rank, kMaxMicroBatchSearched); ++m)
      if (per_rank % m == 0) divisors.push_back(m);
    FitSearch search = largest_fitting(base, headroom_bytes, divisors, [](std::int64_t mb) {
      return std::vector<std::string>{"training.micro_batch=" + std::to_string(mb), "training.grad_accum=null"};
    });
    search.global_batch_kept = t.global_batch;
    return search;
  }
  const std::string accum = std::to_string(t.grad_accum);
  return largest_fitting(base, headroom_bytes, multiples(1, kMaxMicroBatchSearched), [&](std::int64_t mb) {
    return std::vector<std::string>{"training.micro_batch=" + std::to_string(mb), "training.global_batch=null",
                                    "training.grad_accum=" + accum};
  });
}

FitSearch find_max_seq_len(const planner::ScenarioTemplate& base, double headroom_bytes) {
  const planner::ModelContext context = planner::model_context(*base.base().model);
  std::int64_t max_value = kMaxSeqLenSearched;
  std::string cap;
  if (context.tokens > 0) {
    max_value = context.tokens;
    cap = context.learned_positions
              ? "the model's " + context.what + ": no longer sequence runs"
              : "the model's " + context.what + ": longer needs a length extension (RoPE scaling), which the model "
                                                "file does not describe";
  }
  FitSearch search = largest_fitting(base, headroom_bytes, multiples(kSeqLenSearchStep, max_value), [](std::int64_t seq) {
    return std::vector<std::string>{"training.seq_len=" + std::to_string(seq)};
  });
  if (search.capped) search.cap = cap.empty() ? "the longest searched: it may fit longer" : cap;
  return search;
}

}  // namespace fsdpsim::sim
