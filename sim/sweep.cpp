#include "sim/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <thread>

#include "models/bytes_text.h"
#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "sim/analytic.h"
#include "sim/estimate.h"

namespace fsdpsim::sim {

namespace {

PointMetrics collect(const planner::Plan& plan, const planner::MemoryReport& memory, const StepTiming& timing,
                     double overhead_bytes, double gpu_bytes) {
  PointMetrics m;
  m.peak_allocated_bytes = memory.peak_allocated_bytes;
  m.peak_reserved_bytes = memory.peak_reserved_bytes;
  m.model_state_bytes = memory.model_state_bytes;
  m.device_overhead_bytes = overhead_bytes;
  m.gpu_memory_bytes = gpu_bytes;
  m.device_peak_bytes = static_cast<double>(memory.peak_reserved_bytes) + overhead_bytes;
  m.step_seconds = timing.step_seconds;
  m.compute_seconds = timing.compute_seconds;
  m.exposed_comm_seconds = timing.exposed_comm_seconds;
  m.optimizer_seconds = timing.optimizer_seconds;
  m.tokens_per_second_per_gpu = timing.tokens_per_second_per_gpu;
  m.mfu = timing.mfu;
  m.units = static_cast<int>(plan.units.size());
  m.exposed_comm_by_unit = timing.exposed_comm_by_unit;
  return m;
}

class AnalyticEvaluator : public Evaluator {
 public:
  PointMetrics evaluate(const planner::Scenario& scenario, const std::string& cost_key) override {
    if (cost_key.empty()) return evaluate_with(scenario, planner::plan_step(scenario), planner::CostModel(scenario), nullptr);
    auto it = costs_.find(cost_key);
    if (it == costs_.end()) {
      if (costs_.size() >= 64) costs_.clear();  // bounded: sweeps over clusters make many
      it = costs_.emplace(cost_key, std::make_unique<PerCostKey>(scenario)).first;
    }
    PerCostKey& k = *it->second;
    // A point keeps only figures: plan without the ops' readable names.
    return evaluate_with(scenario, planner::plan_step(scenario, k.plans, planner::Naming::none), k.cost, &k.collectives);
  }
  std::string name() const override { return "analytic"; }

 private:
  // What points with one cost key share: equal keys mean the same model, cluster and
  // calibration (sweep.h), so the same cost model, NCCL estimates and planner layouts.
  struct PerCostKey {
    explicit PerCostKey(const planner::Scenario& scenario) : cost(scenario) {}
    planner::CostModel cost;
    planner::CollectiveMemo collectives;
    planner::PlanCache plans;
  };

  static PointMetrics evaluate_with(const planner::Scenario& scenario, const planner::Plan& plan,
                                    const planner::CostModel& cost, planner::CollectiveMemo* memo) {
    const double gpu = scenario.cluster.gpu.memory_bytes;
    const double overhead = cost.calibration().device_overhead_bytes;
    // As estimate_step: the allocator model's capacity is the GPU minus the device overhead.
    const planner::MemoryReport memory = planner::replay_memory(plan.schedule, gpu - overhead);
    const StepTiming timing = time_step(plan.schedule, cost, memo);
    return collect(plan, memory, timing, overhead, gpu);
  }

  std::map<std::string, std::unique_ptr<PerCostKey>> costs_;
};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(double fraction) { return fixed(100.0 * fraction, 1) + "%"; }

// Objective value, lower is better.
double cost_of(const PointMetrics& m, Objective o) {
  switch (o) {
    case Objective::throughput: return -m.tokens_per_second_per_gpu;
    case Objective::step_time: return m.step_seconds;
    case Objective::memory: return m.device_peak_bytes;
  }
  return 0;
}

std::string differences(const SweepResult& r, std::size_t a, std::size_t b) {
  std::string out;
  const auto& ca = r.points[a].choice;
  const auto& cb = r.points[b].choice;
  for (std::size_t k = 0; k < r.space.axes.size() && k < ca.size() && k < cb.size(); ++k)
    if (ca[k] != cb[k]) {
      if (!out.empty()) out += ", ";
      out += r.space.axes[k].key + "=" + r.space.axes[k].values[cb[k]].label;
    }
  return out.empty() ? "same settings" : out;
}

// Recommends among `candidates` (fitting points, best first by `metric`), or none.
Recommendation recommend(const SweepResult& r, const std::vector<std::size_t>& candidates,
                         const std::function<const PointMetrics&(std::size_t)>& metric, double tolerance,
                         const std::string& engine_note) {
  Recommendation rec;
  if (candidates.empty()) return rec;
  const Objective o = r.objective;
  const std::size_t best = candidates.front();
  const PointMetrics& bm = metric(best);
  std::size_t pick = best;
  if (o != Objective::memory && tolerance > 0) {
    for (std::size_t i : candidates) {
      const PointMetrics& m = metric(i);
      const bool close = o == Objective::throughput
                             ? m.tokens_per_second_per_gpu >= (1.0 - tolerance) * bm.tokens_per_second_per_gpu
                             : m.step_seconds <= (1.0 + tolerance) * bm.step_seconds;
      if (close && m.device_peak_bytes < metric(pick).device_peak_bytes) pick = i;
    }
  }
  const PointMetrics& m = metric(pick);
  const double gpu = m.gpu_memory_bytes;
  const double cap = gpu - r.headroom_bytes;
  rec.found = true;
  rec.point = pick;
  std::string why;
  const std::string n = std::to_string(candidates.size()) + " configuration" + (candidates.size() == 1 ? "" : "s");
  if (o == Objective::memory)
    why = "least memory of " + n + " that fit";
  else if (pick == best)
    why = (o == Objective::throughput ? "highest tokens/s/GPU of " : "shortest step of ") + n + " that fit";
  else
    why = "within " + pct(tolerance) + " of the fastest (#" + std::to_string(best) + ", " +
          fixed(bm.tokens_per_second_per_gpu, 0) + " tokens/s/GPU) with " +
          gib(bm.device_peak_bytes - m.device_peak_bytes) + " less memory, of " + n + " that fit";
  why += " in " + gib(cap) + " (GPU " + gib(gpu) + " - headroom " + gib(r.headroom_bytes) + ")" + engine_note + ": " +
         fixed(m.tokens_per_second_per_gpu, 0) + " tokens/s/GPU, MFU " + pct(m.mfu) + ", step " +
         fixed(m.step_seconds, 4) + " s; device peak " + gib(m.device_peak_bytes) + " (" +
         gib(cap - m.device_peak_bytes) + " to spare).";
  if (m.step_seconds > 0)
    why += " Exposed communication is " + pct(m.exposed_comm_seconds / m.step_seconds) + " of the step.";
  // The runner-up: what differs and what it costs.
  for (std::size_t i : candidates) {
    if (i == pick) continue;
    const PointMetrics& x = metric(i);
    std::string cmp;
    if (o == Objective::memory)
      cmp = gib(x.device_peak_bytes - m.device_peak_bytes) + " more memory";
    else if (m.tokens_per_second_per_gpu > 0)
      cmp = pct(std::abs(1.0 - x.tokens_per_second_per_gpu / m.tokens_per_second_per_gpu)) +
            (x.tokens_per_second_per_gpu <= m.tokens_per_second_per_gpu ? " slower" : " faster") + ", " +
            (x.device_peak_bytes >= m.device_peak_bytes ? gib(x.device_peak_bytes - m.device_peak_bytes) + " more"
                                                        : gib(m.device_peak_bytes - x.device_peak_bytes) + " less") +
            " memory";
    why += " Next: #" + std::to_string(i) + " (" + differences(r, pick, i) + ") is " + cmp + ".";
    break;
  }
  rec.why = why;
  return rec;
}

}  // namespace

std::unique_ptr<Evaluator> make_analytic_evaluator() { return std::make_unique<AnalyticEvaluator>(); }

PointMetrics metrics_of(const planner::Scenario& scenario) {
  const Estimate e = estimate_step(scenario);
  return collect(e.plan, e.memory, e.timing, e.device_overhead_bytes, e.gpu_memory_bytes);
}

std::string to_string(Objective o) {
  switch (o) {
    case Objective::throughput: return "throughput";
    case Objective::step_time: return "step_time";
    case Objective::memory: return "memory";
  }
  return "throughput";
}

Objective parse_objective(const std::string& name) {
  if (name == "throughput" || name == "tokens_per_second") return Objective::throughput;
  if (name == "step_time") return Objective::step_time;
  if (name == "memory") return Objective::memory;
  throw std::invalid_argument("unknown objective \"" + name + "\" (expected throughput, step_time or memory)");
}

std::string to_string(PointStatus s) {
  switch (s) {
    case PointStatus::ok: return "ok";
    case PointStatus::skipped: return "skipped";
    case PointStatus::failed: return "failed";
    case PointStatus::not_run: return "not_run";
  }
  return "not_run";
}

std::string no_fit_message(const SweepResult& r) {
  if (!r.smallest_overage) return "";
  const PointResult& p = r.points[*r.smallest_overage];
  const double gpu = p.metrics.gpu_memory_bytes;
  return "No configuration fits: every one of the " + std::to_string(r.evaluated) + " evaluated points exceeds " +
         gib(gpu - r.headroom_bytes) + " (GPU " + gib(gpu) + " - headroom " + gib(r.headroom_bytes) +
         "). The smallest overage is " + gib(p.overage_bytes) + " at #" + std::to_string(p.index) +
         (p.label.empty() ? std::string() : " " + p.label) + " (device peak " + gib(p.metrics.device_peak_bytes) + ").";
}

// Points whose overrides reaching the cost model are equal share one (planner's rule).
std::string cost_key_of(const std::vector<std::string>& overrides) {
  std::string key = "k:";
  for (const std::string& o : overrides)
    if (planner::override_changes_cost_model(o)) key += o + "\n";
  return key;
}

SweepResult run_sweep(std::shared_ptr<const planner::ScenarioTemplate> base, const planner::SweepSpace& space,
                      const SweepOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  SweepResult result;
  result.space = space;
  result.headroom_bytes = options.headroom_bytes;
  result.objective = options.objective;
  const std::size_t n = space.size();
  if (n > (std::size_t{1} << 32)) throw std::invalid_argument("the sweep has too many points");
  result.points.resize(n);
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(std::max(threads, 1), n)));
  result.threads = threads;

  std::atomic<std::size_t> next{0}, done{0};
  auto cancelled = [&] { return options.cancel && options.cancel->load(std::memory_order_relaxed); };
  auto worker = [&] {
    planner::ScenarioInstancer instancer(base);
    std::unique_ptr<Evaluator> evaluator = options.evaluator ? options.evaluator() : make_analytic_evaluator();
    while (!cancelled()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= n) break;
      PointResult& p = result.points[i];
      p.index = i;
      p.choice = space.choice(i);
      p.overrides = space.overrides(p.choice);
      p.label = space.label(p.choice);
      try {
        const planner::Scenario& s = instancer.make(p.overrides);
        p.metrics = evaluator->evaluate(s, cost_key_of(p.overrides));
        p.status = PointStatus::ok;
        p.overage_bytes = p.metrics.device_peak_bytes + options.headroom_bytes - p.metrics.gpu_memory_bytes;
        p.fits = p.overage_bytes <= 0;
      } catch (const InputError& e) {
        p.status = PointStatus::skipped;
        p.reason = planner::reason_without_file(e);
      } catch (const std::exception& e) {
        p.status = PointStatus::failed;
        p.reason = e.what();
      }
      const std::size_t d = done.fetch_add(1) + 1;
      if (options.progress) options.progress(d, n);
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  for (std::size_t i = 0; i < n; ++i) {
    PointResult& p = result.points[i];
    if (p.status != PointStatus::not_run) continue;
    p.index = i;
    p.choice = space.choice(i);
    p.overrides = space.overrides(p.choice);
    p.label = space.label(p.choice);
    p.reason = "not evaluated (interrupted)";
  }
  result.interrupted = done.load() < n;
  rank_points(result, options.tolerance);
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

void rank_points(SweepResult& r, double tolerance) {
  r.evaluated = r.skipped = r.failed = r.fitting = 0;
  r.ranking.clear();
  r.pareto.clear();
  r.smallest_overage.reset();
  std::vector<std::size_t> fitting, other;
  for (const PointResult& p : r.points) {
    if (p.status == PointStatus::skipped) ++r.skipped;
    if (p.status == PointStatus::failed) ++r.failed;
    if (p.status != PointStatus::ok) continue;
    ++r.evaluated;
    (p.fits ? fitting : other).push_back(p.index);
  }
  r.fitting = fitting.size();
  const Objective o = r.objective;
  std::sort(fitting.begin(), fitting.end(), [&](std::size_t a, std::size_t b) {
    const double ca = cost_of(r.points[a].metrics, o), cb = cost_of(r.points[b].metrics, o);
    return ca < cb || (ca == cb && a < b);
  });
  std::sort(other.begin(), other.end(), [&](std::size_t a, std::size_t b) {
    const double oa = r.points[a].overage_bytes, ob = r.points[b].overage_bytes;
    return oa < ob || (oa == ob && a < b);
  });
  r.ranking = fitting;
  r.ranking.insert(r.ranking.end(), other.begin(), other.end());
  if (fitting.empty() && !other.empty()) r.smallest_overage = other.front();

  // Pareto front: no other point has both less (or equal) memory and more throughput.
  std::vector<std::size_t> cand = fitting.empty() ? other : fitting;
  std::sort(cand.begin(), cand.end(), [&](std::size_t a, std::size_t b) {
    const PointMetrics &ma = r.points[a].metrics, &mb = r.points[b].metrics;
    if (ma.device_peak_bytes != mb.device_peak_bytes) return ma.device_peak_bytes < mb.device_peak_bytes;
    if (ma.tokens_per_second_per_gpu != mb.tokens_per_second_per_gpu)
      return ma.tokens_per_second_per_gpu > mb.tokens_per_second_per_gpu;
    return a < b;
  });
  double best = -1;
  for (std::size_t i : cand) {
    const double t = r.points[i].metrics.tokens_per_second_per_gpu;
    if (t > best) {
      r.pareto.push_back(i);
      best = t;
    }
  }
  r.recommendation = recommend(r, fitting, [&](std::size_t i) -> const PointMetrics& { return r.points[i].metrics; },
                               tolerance, "");
}

void resimulate_top(SweepResult& r, std::size_t k, const Resimulator& resimulate, double tolerance) {
  r.resimulated_ranking.clear();
  std::vector<std::size_t> top;
  for (std::size_t i : r.ranking) {
    if (top.size() >= k) break;
    if (r.points[i].fits || r.fitting == 0) top.push_back(i);
  }
  for (std::size_t i : top) {
    PointResult& p = r.points[i];
    std::string note;
    std::optional<PointMetrics> m;
    try {
      m = resimulate(p, note);
    } catch (const std::exception& e) {
      note = e.what();
    }
    p.resimulation_note = note;
    if (!m) continue;
    // Memory is a property of the schedule: keep the analytic replay's unless the engine gave one.
    if (m->device_peak_bytes <= 0) {
      m->peak_allocated_bytes = p.metrics.peak_allocated_bytes;
      m->peak_reserved_bytes = p.metrics.peak_reserved_bytes;
      m->model_state_bytes = p.metrics.model_state_bytes;
      m->device_overhead_bytes = p.metrics.device_overhead_bytes;
      m->gpu_memory_bytes = p.metrics.gpu_memory_bytes;
      m->device_peak_bytes = p.metrics.device_peak_bytes;
    }
    p.resimulated = m;
    r.resimulated_ranking.push_back(i);
  }
  const Objective o = r.objective;
  std::sort(r.resimulated_ranking.begin(), r.resimulated_ranking.end(), [&](std::size_t a, std::size_t b) {
    const double ca = cost_of(*r.points[a].resimulated, o), cb = cost_of(*r.points[b].resimulated, o);
    return ca < cb || (ca == cb && a < b);
  });
  std::vector<std::size_t> fitting;
  for (std::size_t i : r.resimulated_ranking)
    if (r.points[i].resimulated->device_peak_bytes + r.headroom_bytes <= r.points[i].resimulated->gpu_memory_bytes)
      fitting.push_back(i);
  if (!fitting.empty())
    r.recommendation =
        recommend(r, fitting, [&](std::size_t i) -> const PointMetrics& { return *r.points[i].resimulated; }, tolerance,
                  " (timing re-simulated for the top " + std::to_string(top.size()) + ")");
}

}  // namespace fsdpsim::sim
