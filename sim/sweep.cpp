#include "sim/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <unistd.h>

#include "models/bytes_text.h"
#include "models/json_input.h"
#include "planner/device_memory.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "sim/analytic.h"
#include "sim/estimate.h"

namespace fsdpsim::sim {

namespace {

// What must fit in the GPU: the caching allocator's reserved memory and the device overhead
// outside it. And a point's overage, > 0 when it does not fit (judge_fit). One definition for the
// points' metrics and for the edge where a replay gives up (reserved_within_overage).
double device_peak_of(std::int64_t reserved_bytes, double overhead_bytes) {
  return static_cast<double>(reserved_bytes) + overhead_bytes;
}
double overage_of(double device_peak_bytes, double headroom_bytes, double gpu_bytes) {
  return device_peak_bytes + headroom_bytes - gpu_bytes;
}

PointMetrics collect(const planner::Plan& plan, const planner::MemoryReport& memory, const StepTiming& timing,
                     double overhead_bytes, double gpu_bytes) {
  PointMetrics m;
  m.peak_allocated_bytes = memory.peak_allocated_bytes;
  m.peak_reserved_bytes = memory.peak_reserved_bytes;
  m.model_state_bytes = memory.model_state_bytes;
  m.device_overhead_bytes = overhead_bytes;
  m.gpu_memory_bytes = gpu_bytes;
  m.device_peak_bytes = device_peak_of(memory.peak_reserved_bytes, overhead_bytes);
  m.step_seconds = timing.step_seconds;
  m.compute_seconds = timing.compute_seconds;
  m.exposed_comm_seconds = timing.exposed_comm_seconds;
  m.optimizer_seconds = timing.optimizer_seconds;
  m.tokens_per_second_per_gpu = timing.tokens_per_second_per_gpu;
  m.mfu = timing.mfu;
  m.units = static_cast<int>(plan.units.size());
  m.exposed_comm_by_unit = timing.exposed_comm_by_unit;
  m.allocator_retries = memory.allocator_retries;
  return m;
}

double overage_of(const PointMetrics& m, double headroom_bytes) {
  return overage_of(m.device_peak_bytes, headroom_bytes, m.gpu_memory_bytes);
}

class AnalyticEvaluator : public Evaluator {
 public:
  // `untimed_past_headroom`: a point that does not fit with that headroom is not timed (see
  // make_memory_first_evaluator); none: every point is timed.
  // `closest` (with `untimed_past_headroom` only): give up replays past it (ClosestOverage).
  explicit AnalyticEvaluator(std::optional<double> untimed_past_headroom = std::nullopt,
                             std::shared_ptr<ClosestOverage> closest = nullptr)
      : untimed_past_headroom_(untimed_past_headroom), closest_(std::move(closest)) {}

  PointMetrics evaluate(const planner::Scenario& scenario, const std::string& cost_key) override {
    if (cost_key.empty())
      return evaluate_with(scenario, planner::plan_step(scenario), planner::CostModel(scenario), nullptr);
    auto it = costs_.find(cost_key);
    if (it == costs_.end()) {
      if (costs_.size() >= 64) costs_.clear();  // bounded: sweeps over clusters make many
      it = costs_.emplace(cost_key, std::make_unique<PerCostKey>(scenario)).first;
    }
    PerCostKey& k = *it->second;
    // A point keeps only figures: plan without the ops' readable names.
    const double gpu = scenario.cluster.gpu.memory_bytes;
    const planner::Plan plan =
        planner::plan_step(scenario, planner::thread_plan_cache(), planner::Naming::none, give_up_above_reserved(gpu, 0));
    if (plan.stopped_holding_bytes >= 0) return given_up_while_planning(plan, gpu);
    return evaluate_with(scenario, plan, k.cost, &k.collectives);
  }
  std::string name() const override { return "analytic"; }

 private:
  // What points with one cost key share: equal keys mean the same model, cluster and
  // calibration (sweep.h), so the same cost model and NCCL estimates.
  struct PerCostKey {
    explicit PerCostKey(const planner::Scenario& scenario) : cost(scenario) {}
    planner::CostModel cost;
    planner::CollectiveMemo collectives;
  };

  PointMetrics evaluate_with(const planner::Scenario& scenario, const planner::Plan& plan, const planner::CostModel& cost,
                             planner::CollectiveMemo* memo) const {
    const double gpu = scenario.cluster.gpu.memory_bytes;
    const double overhead = planner::device_overhead(scenario, plan.schedule, cost, memo).total_bytes;
    // As estimate_step: the allocator model's capacity is the GPU minus the device overhead.
    const planner::MemoryReport memory =
        planner::replay_memory(plan.schedule, gpu - overhead, give_up_above_reserved(gpu, overhead));
    if (untimed_past_headroom_) {
      PointMetrics untimed = collect(plan, memory, StepTiming{}, overhead, gpu);
      untimed.memory_lower_bound = memory.gave_up;
      const double overage = overage_of(untimed, *untimed_past_headroom_);
      if (closest_ && memory.gave_up) closest_->given_up += 1;
      if (closest_ && !memory.gave_up) lower_closest(std::max(overage, 0.0));
      if (overage > 0) return untimed;  // judge_fit's verdict: it does not fit
    }
    const StepTiming timing = time_step(plan.schedule, cost, memo);
    return collect(plan, memory, timing, overhead, gpu);
  }

  // [Hopeless plans] The plan stopped where its replay is sure to hold more than
  // give_up_above_reserved with no device overhead; with the overhead (which only lowers that
  // edge, reserved_within_overage) the whole plan's replay would give up by then. Its figures are
  // lower bounds, as a replay's that gave up.
  PointMetrics given_up_while_planning(const planner::Plan& plan, double gpu) const {
    planner::MemoryReport memory;
    memory.peak_reserved_bytes = plan.stopped_holding_bytes;
    memory.gave_up = true;
    PointMetrics untimed = collect(plan, memory, StepTiming{}, 0, gpu);
    untimed.memory_lower_bound = true;
    closest_->given_up += 1;
    closest_->plans_stopped += 1;
    return untimed;
  }

  // A replay past the closest overage so far gives up; none without a ClosestOverage.
  std::int64_t give_up_above_reserved(double gpu, double overhead) const {
    if (!closest_) return planner::kNeverGiveUp;
    return reserved_within_overage(gpu, overhead, *untimed_past_headroom_, closest_->bytes.load());
  }

  void lower_closest(double overage) const {
    double seen = closest_->bytes.load();
    while (overage < seen && !closest_->bytes.compare_exchange_weak(seen, overage)) {
    }
  }

  std::optional<double> untimed_past_headroom_;
  std::shared_ptr<ClosestOverage> closest_;
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
  const auto& ca = r.point(a).choice;
  const auto& cb = r.point(b).choice;
  for (std::size_t k = 0; k < r.space.axes.size() && k < ca.size() && k < cb.size(); ++k)
    if (ca[k] != cb[k]) {
      if (!out.empty()) out += ", ";
      out += r.space.axes[k].key + "=" + r.space.axes[k].values[cb[k]].label;
    }
  return out.empty() ? "same settings" : out;
}

bool near_capacity_of(const PointMetrics& m) {
  return planner::near_capacity(m.gpu_memory_bytes, m.device_peak_bytes, static_cast<double>(m.peak_reserved_bytes),
                                m.allocator_retries);
}

// [Near capacity] (planner/device_memory.h) What a point that fits only near capacity risks, for
// the recommendation: "" for a point with a margin.
std::string near_capacity_note(const PointMetrics& m) {
  if (!near_capacity_of(m)) return "";
  const double spare_mib = (m.gpu_memory_bytes - m.device_peak_bytes) / (1024.0 * 1024.0);
  std::string note = fixed(spare_mib, 0) + " MiB to spare";
  if (m.allocator_retries > 0)
    note += ", and the allocator model frees its cache " + std::to_string(m.allocator_retries) +
            (m.allocator_retries == 1 ? " time" : " times") + " in the step";
  return note + ": a real run may retry allocations (each synchronizes the device) or run out of memory, "
                "and the step time includes neither";
}

// Recommends among `candidates` (fitting points, best first by `metric`), or none. The
// candidates need not be every point that fits (`fitting` of them): the best two, and every
// point not dominated by an earlier one in memory, give the same choice (StreamingRanking).
// `fit_phrase` says which points the candidates are ("that fit", "that fit with a margin").
Recommendation recommend(const SweepResult& r, const std::vector<std::size_t>& candidates, std::size_t fitting,
                         const std::function<const PointMetrics&(std::size_t)>& metric, double tolerance,
                         const std::string& engine_note, const std::string& fit_phrase = "that fit") {
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
  const std::string n = std::to_string(fitting) + " configuration" + (fitting == 1 ? "" : "s");
  if (o == Objective::memory)
    why = "least memory of " + n + " " + fit_phrase;
  else if (pick == best)
    why = (o == Objective::throughput ? "highest tokens/s/GPU of " : "shortest step of ") + n + " " + fit_phrase;
  else
    why = "within " + pct(tolerance) + " of the fastest (#" + std::to_string(best) + ", " +
          fixed(bm.tokens_per_second_per_gpu, 0) + " tokens/s/GPU) with " +
          gib(bm.device_peak_bytes - m.device_peak_bytes) + " less memory, of " + n + " " + fit_phrase;
  why += (r.space.gpu_varies() ? ", each in its own GPU's memory; this one in " : " in ") + gib(cap) + " (GPU " +
         gib(gpu) + " - headroom " + gib(r.headroom_bytes) + ")" + engine_note + ": " +
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

std::int64_t reserved_within_overage(double gpu_bytes, double overhead_bytes, double headroom_bytes, double bound) {
  auto overage = [&](std::int64_t reserved) {
    return overage_of(device_peak_of(reserved, overhead_bytes), headroom_bytes, gpu_bytes);
  };
  const double guess = std::floor(gpu_bytes - overhead_bytes - headroom_bytes + bound);
  if (!(guess < 0x1p62)) return planner::kNeverGiveUp;  // infinite (no bound yet) or beyond any GPU
  if (guess < 0) return -1;                              // any reserved memory is past it
  // The guess is off by the sum's rounding at most: step to the exact edge.
  auto edge = static_cast<std::int64_t>(guess);
  while (edge >= 0 && overage(edge) > bound) --edge;
  while (overage(edge + 1) <= bound) ++edge;
  return edge;
}

std::unique_ptr<Evaluator> make_memory_first_evaluator(double headroom_bytes, std::shared_ptr<ClosestOverage> closest) {
  return std::make_unique<AnalyticEvaluator>(headroom_bytes, std::move(closest));
}

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
  const PointResult& p = r.point(*r.smallest_overage);
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

namespace {

// The report's view of a sweep, built point by point in point order: the top of the ranking,
// the Pareto fronts, the recommendation's candidates, the first skipped points. A point is kept
// (in SweepResult::points) while one of these holds it, so memory grows with what they hold,
// not with the points.
class StreamingRanking {
 public:
  StreamingRanking(SweepResult& r, std::size_t keep_top, bool rank_every_point)
      : r_(r), keep_top_(std::max<std::size_t>(keep_top, 2)), rank_every_point_(rank_every_point) {}

  void add(PointResult&& p) {
    const std::size_t i = p.index;
    if (p.status == PointStatus::skipped) ++r_.skipped;
    if (p.status == PointStatus::failed) ++r_.failed;
    if ((p.status == PointStatus::skipped || p.status == PointStatus::failed) && r_.not_evaluated.size() < kShownNotEvaluated) {
      r_.not_evaluated.push_back(i);
      hold(i);
    }
    if (p.status == PointStatus::ok) {
      ++r_.evaluated;
      const PointMetrics& m = p.metrics;
      if (p.fits) {
        ++r_.fitting;
        keep_best(best_fitting_, {cost_of(m, r_.objective), i});
        add_to_front(front_fitting_, m, i);
        add_to_candidates(candidates_, m, i);
        if (p.near_capacity) {
          ++r_.fitting_near_capacity;
        } else {
          keep_best(best_with_margin_, {cost_of(m, r_.objective), i});
          add_to_candidates(candidates_with_margin_, m, i);
        }
      } else {
        keep_best(best_other_, {p.overage_bytes, i});
      }
      add_to_front(front_all_, m, i);
      if (rank_every_point_)
        keys_.push_back({p.fits ? cost_of(m, r_.objective) : p.overage_bytes, static_cast<std::uint32_t>(i), !p.fits});
    }
    if (held_.count(i)) r_.points.emplace(i, std::move(p));
  }

  void finish(double tolerance) {
    for (const auto& [key, i] : best_fitting_) r_.ranking.push_back(i);
    for (const auto& [key, i] : best_other_) r_.ranking.push_back(i);
    if (r_.ranking.size() > keep_top_) r_.ranking.resize(keep_top_);
    if (r_.fitting == 0 && !best_other_.empty()) r_.smallest_overage = best_other_.begin()->second;
    for (const auto& [key, tokens] : r_.fitting ? front_fitting_ : front_all_) r_.pareto.push_back(std::get<2>(key));
    // [Near capacity] The recommendation is a point that fits with a margin when one does; a
    // faster one that fits only near capacity is named beside it. With none, the best that fits,
    // saying so.
    const std::size_t with_margin = r_.fitting - r_.fitting_near_capacity;
    auto metric = [&](std::size_t i) -> const PointMetrics& { return r_.point(i).metrics; };
    if (with_margin > 0) {
      const std::string phrase = r_.fitting_near_capacity == 0
                                     ? "that fit"
                                     : "that fit with a margin (" + std::to_string(r_.fitting_near_capacity) +
                                           " more fit only near capacity)";
      r_.recommendation = recommend(r_, candidate_order(best_with_margin_, candidates_with_margin_), with_margin, metric,
                                    tolerance, "", phrase);
      const std::size_t fastest = best_fitting_.begin()->second;
      const PointMetrics& f = r_.point(fastest).metrics;
      const PointMetrics& m = r_.point(r_.recommendation.point).metrics;
      if (r_.point(fastest).near_capacity && r_.objective != Objective::memory)
        r_.recommendation.why += " Not recommended: #" + std::to_string(fastest) + " (" + r_.point(fastest).label + "), " +
                                 pct(f.tokens_per_second_per_gpu / m.tokens_per_second_per_gpu - 1.0) +
                                 " more tokens/s/GPU, fits only near capacity (" + near_capacity_note(f) + ").";
    } else {
      r_.recommendation = recommend(r_, candidate_order(best_fitting_, candidates_), r_.fitting, metric, tolerance, "");
      if (r_.recommendation.found)
        r_.recommendation.why += " Every point that fits does so only near capacity; this one with " +
                                 near_capacity_note(r_.point(r_.recommendation.point).metrics) + ".";
    }
    if (rank_every_point_) fill_ranks();
  }

 private:
  static constexpr std::size_t kShownNotEvaluated = 8;
  using Ranked = std::pair<double, std::size_t>;  // (what ranks it, lower first; index)
  // Memory vs throughput: (device peak, -tokens/s, index) ascending, as the front is listed.
  using FrontKey = std::tuple<double, double, std::size_t>;

  void hold(std::size_t i) { ++held_[i]; }
  void release(std::size_t i) {
    auto it = held_.find(i);
    if (--it->second > 0) return;
    held_.erase(it);
    r_.points.erase(i);
  }

  void keep_best(std::set<Ranked>& best, const Ranked& x) {
    best.insert(x);
    hold(x.second);
    if (best.size() > keep_top_) {
      const auto last = std::prev(best.end());
      const std::size_t i = last->second;
      best.erase(last);
      release(i);
    }
  }

  // A point is on the front when every point before it in FrontKey order has less throughput
  // (the batch rule: sort by the key, keep rising throughput). Throughput rises along the front,
  // so the point just before it decides; the points after it that it now dominates leave.
  void add_to_front(std::map<FrontKey, double>& front, const PointMetrics& m, std::size_t i) {
    const double tokens = m.tokens_per_second_per_gpu;
    const FrontKey key{m.device_peak_bytes, -tokens, i};
    auto next = front.upper_bound(key);
    if (next != front.begin() && std::prev(next)->second >= tokens) return;
    while (next != front.end() && next->second <= tokens) {
      release(std::get<2>(next->first));
      next = front.erase(next);
    }
    front.emplace(key, tokens);
    hold(i);
  }

  // The recommendation takes, among fitting points within the tolerance of the best, the least
  // memory, ties to the earlier in the ranking. A point with at least the memory of one ranked
  // before it can never be that pick: only the points with less memory than every point ranked
  // before them are candidates (a front in (objective, memory), kept as add_to_front keeps its).
  void add_to_candidates(std::map<Ranked, double>& candidates, const PointMetrics& m, std::size_t i) {
    const Ranked key{cost_of(m, r_.objective), i};
    const double memory = m.device_peak_bytes;
    auto next = candidates.upper_bound(key);
    if (next != candidates.begin() && std::prev(next)->second <= memory) return;
    while (next != candidates.end() && next->second >= memory) {
      release(next->first.second);
      next = candidates.erase(next);
    }
    candidates.emplace(key, memory);
    hold(i);
  }

  // Candidates for the recommendation, best first: the undominated points and the best ones.
  static std::vector<std::size_t> candidate_order(const std::set<Ranked>& best,
                                                  const std::map<Ranked, double>& undominated) {
    std::set<Ranked> all(best.begin(), best.end());
    for (const auto& [key, memory] : undominated) all.insert(key);
    std::vector<std::size_t> order;
    for (const auto& [key, i] : all) order.push_back(i);
    return order;
  }

  // Every evaluated point's rank: the points that fit by the objective, then the rest by overage.
  void fill_ranks() {
    std::sort(keys_.begin(), keys_.end(), [](const RankKey& a, const RankKey& b) {
      if (a.over != b.over) return a.over < b.over;
      return a.value < b.value || (a.value == b.value && a.index < b.index);
    });
    r_.ranks.assign(r_.total, 0);
    for (std::size_t k = 0; k < keys_.size(); ++k) r_.ranks[keys_[k].index] = static_cast<std::uint32_t>(k + 1);
    std::vector<RankKey>().swap(keys_);
  }

  struct RankKey {
    double value;  // the objective's cost (fits) or the overage
    std::uint32_t index;
    bool over;  // does not fit
  };

  SweepResult& r_;
  std::size_t keep_top_;
  bool rank_every_point_;
  std::map<std::size_t, int> held_;  // kept point -> how many of the structures below hold it
  std::set<Ranked> best_fitting_, best_other_;
  std::set<Ranked> best_with_margin_;                     // of best_fitting_'s kind, not near capacity
  std::map<FrontKey, double> front_fitting_, front_all_;  // -> tokens/s/GPU
  std::map<Ranked, double> candidates_;                   // -> device peak
  std::map<Ranked, double> candidates_with_margin_;       // the same among points not near capacity
  std::vector<RankKey> keys_;
};

// Hands out point indices to the workers and puts finished points back in point order. At
// most `window` finished points wait for an earlier one; past that a worker waits before
// taking another point (the earlier one is in a worker's hands, so it comes).
class PointQueue {
 public:
  PointQueue(std::size_t n, std::size_t window, const std::atomic<bool>* cancel)
      : n_(n), window_(window), cancel_(cancel) {}

  std::optional<std::size_t> claim() {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return stopped() || next_ >= n_ || next_ < emitted_ + window_; });
    if (stopped() || next_ >= n_) return std::nullopt;
    return next_++;
  }

  // Emits `p` and every finished point after it that was waiting, in order (one thread at a time).
  template <class Emit>
  void finish(PointResult&& p, Emit&& emit) {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_.emplace(p.index, std::move(p));
    try {
      for (auto it = waiting_.begin(); it != waiting_.end() && it->first == emitted_; it = waiting_.erase(it)) {
        emit(std::move(it->second));
        ++emitted_;
      }
    } catch (...) {
      failed_ = true;  // the sink failed (a full disk): stop handing out points
      room_.notify_all();
      throw;
    }
    room_.notify_all();
  }

  std::size_t claimed() const { return next_; }

 private:
  bool stopped() const { return failed_ || (cancel_ && cancel_->load(std::memory_order_relaxed)); }

  const std::size_t n_, window_;
  const std::atomic<bool>* cancel_;
  std::mutex mutex_;
  std::condition_variable room_;
  std::size_t next_ = 0, emitted_ = 0;
  bool failed_ = false;
  std::map<std::size_t, PointResult> waiting_;
};

PointResult unevaluated_point(const planner::SweepSpace& space, std::size_t i) {
  PointResult p;
  p.index = i;
  p.choice = space.choice(i);
  p.overrides = space.overrides(p.choice);
  p.label = space.label(p.choice);
  return p;
}

// Whether an evaluated point fits, and by how much it misses (run_sweep and merge_sweep alike).
void judge_fit(PointResult& p, double headroom_bytes) {
  p.overage_bytes = overage_of(p.metrics, headroom_bytes);
  p.fits = p.overage_bytes <= 0;
  p.near_capacity = p.fits && near_capacity_of(p.metrics);
}

// Evaluates a point (p.overrides): its metrics, or why it was skipped (bad input) or failed.
// The fit is left to judge_fit.
void evaluate_point(PointResult& p, const planner::ScenarioTemplate& base, Evaluator& evaluator) {
  try {
    const planner::Scenario s = base.instantiate(p.overrides);
    p.metrics = evaluator.evaluate(s, cost_key_of(p.overrides));
    p.status = PointStatus::ok;
  } catch (const InputError& e) {
    p.status = PointStatus::skipped;
    p.reason = planner::reason_without_file(e);
  } catch (const std::exception& e) {
    p.status = PointStatus::failed;
    p.reason = e.what();
  }
}

// Runs work(w) for w = 0 .. workers - 1: worker 0 on the calling thread, the others on threads of
// their own. Once all have stopped, rethrows the first exception any of them threw;
// `on_error` runs when one throws (under the lock that keeps the first), e.g. to stop the rest.
void run_workers(int workers, const std::function<void(int)>& work, const std::function<void()>& on_error = {}) {
  std::mutex error_mutex;
  std::exception_ptr error;
  auto guarded = [&](int w) {
    try {
      work(w);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      if (on_error) on_error();
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(std::max(workers - 1, 0)));
  for (int w = 1; w < workers; ++w) helpers.emplace_back(guarded, w);
  guarded(0);
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

std::size_t SweepResult::rank_of(std::size_t index) const {
  if (index < ranks.size()) return ranks[index];
  const auto it = std::find(ranking.begin(), ranking.end(), index);
  return it == ranking.end() ? 0 : static_cast<std::size_t>(it - ranking.begin()) + 1;
}

bool SweepResult::on_pareto_front(std::size_t index) const {
  return std::find(pareto.begin(), pareto.end(), index) != pareto.end();
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
  result.total = n;
  const Shard shard = options.shard;
  if (shard.count == 0 || shard.index >= shard.count) throw std::invalid_argument("a shard outside its sweep");
  const std::size_t mine = shard.points(n);  // the points this process evaluates
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(std::max(threads, 1), mine)));
  result.threads = threads;

  StreamingRanking ranking(result, options.keep_top, options.rank_every_point);
  auto emit = [&](PointResult&& p) {
    p.index = shard.point(p.index);
    if (options.sink) options.sink(p);
    ranking.add(std::move(p));
  };
  // Reordering room: a few hundred points a thread (a point waiting is a few KB).
  // The queue counts the shard's points (k); shard.point(k) is the point of the space.
  PointQueue queue(mine, 256 * static_cast<std::size_t>(threads), options.cancel);
  std::atomic<std::size_t> done{0};
  auto already_evaluated = [&options](std::size_t point) -> const PointResult* {
    if (!options.evaluated) return nullptr;
    const auto it = options.evaluated->find(point);
    return it == options.evaluated->end() ? nullptr : &it->second;
  };
  // An exception (the sink's or an evaluator's setup) is rethrown once every worker has stopped.
  run_workers(threads, [&](int) {
    std::unique_ptr<Evaluator> evaluator = options.evaluator ? options.evaluator() : make_analytic_evaluator();
    while (const std::optional<std::size_t> k = queue.claim()) {
      PointResult p = unevaluated_point(space, shard.point(*k));
      p.index = *k;  // the queue's order until it is emitted
      if (const PointResult* known = already_evaluated(shard.point(*k))) {
        p.status = known->status;
        p.reason = known->reason;
        p.metrics = known->metrics;
      } else {
        evaluate_point(p, *base, *evaluator);
      }
      if (p.status == PointStatus::ok) judge_fit(p, options.headroom_bytes);
      queue.finish(std::move(p), emit);
      const std::size_t d = done.fetch_add(1) + 1;
      if (options.progress) options.progress(d, mine);
    }
  });
  // Interrupted: the points never handed out, in order, for the sinks.
  for (std::size_t k = queue.claimed(); k < mine; ++k) {
    PointResult p = unevaluated_point(space, shard.point(k));
    p.index = k;
    p.reason = "not evaluated (interrupted)";
    emit(std::move(p));
  }
  result.interrupted = done.load() < mine;
  ranking.finish(options.tolerance);
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Shard parse_shard(const std::string& text) {
  const std::string expected = "expected i/N: this process's shard i of N (0 <= i < N), e.g. 0/4";
  const std::size_t slash = text.find('/');
  auto number = [&](const std::string& digits) {
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("\"" + text + "\": " + expected);
    return static_cast<std::size_t>(std::stoul(digits));
  };
  if (slash == std::string::npos) throw std::invalid_argument("\"" + text + "\": " + expected);
  Shard shard;
  shard.index = number(text.substr(0, slash));
  shard.count = number(text.substr(slash + 1));
  if (shard.count == 0 || shard.index >= shard.count) throw std::invalid_argument("\"" + text + "\": " + expected);
  return shard;
}

namespace {

std::string hex_double(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// The fields of a record, space-separated; the reason last, as a JSON string (it may hold
// spaces and newlines).
constexpr const char* kRecordTag = "p";

double read_double(const std::string& field, const std::string& line) {
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  if (field.empty() || *end != '\0') throw std::invalid_argument("not a number \"" + field + "\" in the record: " + line);
  return v;
}

std::int64_t read_int(const std::string& field, const std::string& line) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(field.c_str(), &end, 10);
  if (field.empty() || *end != '\0') throw std::invalid_argument("not an integer \"" + field + "\" in the record: " + line);
  if (errno == ERANGE)  // strtoll clamps to 2^63 - 1 silently otherwise
    throw std::invalid_argument("an integer past 64 bits \"" + field + "\" in the record: " + line);
  return v;
}

PointStatus status_named(const std::string& name, const std::string& line) {
  for (PointStatus s : {PointStatus::ok, PointStatus::skipped, PointStatus::failed, PointStatus::not_run})
    if (to_string(s) == name) return s;
  throw std::invalid_argument("unknown status \"" + name + "\" in the record: " + line);
}

}  // namespace

std::string point_record(const PointResult& p) {
  const PointMetrics& m = p.metrics;
  std::string out = std::string(kRecordTag) + " " + std::to_string(p.index) + " " + to_string(p.status);
  if (p.status == PointStatus::ok) {
    out += " " + std::to_string(m.peak_allocated_bytes) + " " + std::to_string(m.peak_reserved_bytes) + " " +
           std::to_string(m.model_state_bytes) + " " + std::to_string(m.allocator_retries);
    for (double v : {m.device_overhead_bytes, m.gpu_memory_bytes, m.device_peak_bytes, m.step_seconds, m.compute_seconds,
                     m.exposed_comm_seconds, m.optimizer_seconds, m.tokens_per_second_per_gpu, m.mfu})
      out += " " + hex_double(v);
    out += " " + std::to_string(m.units) + " " + std::to_string(m.exposed_comm_by_unit.size());
    for (double v : m.exposed_comm_by_unit) out += " " + hex_double(v);
  }
  return out + " " + nlohmann::json(p.reason).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

PointResult parse_point_record(const std::string& line, const planner::SweepSpace& space) {
  const std::size_t quote = line.find('"');
  if (quote == std::string::npos) throw std::invalid_argument("a record without its reason: " + line);
  std::vector<std::string> f;
  {
    std::size_t at = 0;
    while (at < quote) {
      const std::size_t space_at = line.find(' ', at);
      if (space_at == std::string::npos || space_at >= quote) break;
      f.push_back(line.substr(at, space_at - at));
      at = space_at + 1;
    }
  }
  if (f.size() < 3 || f[0] != kRecordTag) throw std::invalid_argument("not a sweep point record: " + line);
  const std::int64_t index = read_int(f[1], line);
  if (index < 0 || static_cast<std::size_t>(index) >= space.size())
    throw std::invalid_argument("point " + f[1] + " is outside the sweep's " + std::to_string(space.size()) + " points");
  PointResult p = unevaluated_point(space, static_cast<std::size_t>(index));
  p.status = status_named(f[2], line);
  // The reason goes through the one JSON reader (models/json_input.h), like every input.
  try {
    p.reason = parse_json_text(line.substr(quote), "the record's reason").get<std::string>();
  } catch (const InputError& e) {
    throw std::invalid_argument(std::string("a record whose reason is not a JSON string (") + e.what() + "): " + line);
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument("a record whose reason is not a JSON string: " + line);
  }
  if (p.status != PointStatus::ok) {
    if (f.size() != 3) throw std::invalid_argument("a record with metrics for a point not evaluated: " + line);
    return p;
  }
  constexpr std::size_t kFixed = 3 + 4 + 9 + 2;  // tag, index, status; integers; doubles; units, count
  if (f.size() < kFixed) throw std::invalid_argument("a record with too few metrics: " + line);
  PointMetrics& m = p.metrics;
  // Every figure a point has is a finite, non-negative number: a shard file edited or damaged
  // otherwise (nan, inf, -5 bytes merged with exit 0 before, the session-30 audit) is refused.
  auto no_point_has = [&](const std::string& v) {
    return std::invalid_argument("a figure that no point has (" + v + ") in the record: " + line);
  };
  auto figure = [&](double v) {
    if (!std::isfinite(v) || v < 0) throw no_point_has(std::to_string(v));
    return v;
  };
  auto count = [&](std::int64_t v) {  // kept an integer: bytes past 2^53 would not survive a double
    if (v < 0) throw no_point_has(std::to_string(v));
    return v;
  };
  m.peak_allocated_bytes = count(read_int(f[3], line));
  m.peak_reserved_bytes = count(read_int(f[4], line));
  m.model_state_bytes = count(read_int(f[5], line));
  m.allocator_retries = count(read_int(f[6], line));
  double* doubles[] = {&m.device_overhead_bytes, &m.gpu_memory_bytes, &m.device_peak_bytes,
                       &m.step_seconds,          &m.compute_seconds,  &m.exposed_comm_seconds,
                       &m.optimizer_seconds,     &m.tokens_per_second_per_gpu, &m.mfu};
  for (std::size_t k = 0; k < 9; ++k) *doubles[k] = figure(read_double(f[7 + k], line));
  const std::int64_t units = read_int(f[16], line);
  if (units < 0 || units > std::numeric_limits<int>::max())
    throw std::invalid_argument("a unit count outside 0.." + std::to_string(std::numeric_limits<int>::max()) +
                                " in the record: " + line);
  m.units = static_cast<int>(units);
  const std::int64_t by_unit = read_int(f[17], line);
  if (by_unit < 0 || f.size() != kFixed + static_cast<std::size_t>(by_unit))
    throw std::invalid_argument("a record whose per-unit list does not have its length: " + line);
  for (std::size_t k = 0; k < static_cast<std::size_t>(by_unit); ++k)
    m.exposed_comm_by_unit.push_back(figure(read_double(f[kFixed + k], line)));
  return p;
}

SweepResult merge_sweep(const planner::SweepSpace& space, const SweepOptions& options,
                        const std::function<std::optional<PointResult>()>& next) {
  const auto start = std::chrono::steady_clock::now();
  SweepResult result;
  result.space = space;
  result.headroom_bytes = options.headroom_bytes;
  result.objective = options.objective;
  result.total = space.size();
  result.threads = std::max(options.threads, 1);
  StreamingRanking ranking(result, options.keep_top, options.rank_every_point);
  std::size_t expected = 0, done = 0;
  while (std::optional<PointResult> p = next()) {
    if (p->index != expected)
      throw std::invalid_argument("point " + std::to_string(p->index) + " came where point " + std::to_string(expected) +
                                  " was due (a shard missing, given twice, or of another sweep?)");
    ++expected;
    if (p->status == PointStatus::ok) judge_fit(*p, options.headroom_bytes);
    if (p->status != PointStatus::not_run) ++done;
    if (options.sink) options.sink(*p);
    ranking.add(std::move(*p));
  }
  if (expected != result.total)
    throw std::invalid_argument("the shards hold " + std::to_string(expected) + " of the sweep's " +
                                std::to_string(result.total) + " points (a shard missing?)");
  result.interrupted = done < result.total;
  ranking.finish(options.tolerance);
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

double resident_bytes() {
  std::ifstream in("/proc/self/statm");
  double pages_total = 0, pages_resident = 0;
  if (!(in >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

SweepCost estimate_sweep_cost(std::shared_ptr<const planner::ScenarioTemplate> base, const planner::SweepSpace& space,
                              const SweepOptions& options, double sample_seconds) {
  SweepCost c;
  c.points = space.size();
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  c.threads = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(std::max(threads, 1), c.points)));
  const double before = resident_bytes();
  // Cost keys the space can make (a worker caches up to 64 cost models, AnalyticEvaluator).
  double keys = 1;
  for (const planner::Axis& a : space.axes) {
    std::set<std::string> distinct;
    for (const planner::AxisValue& v : a.values) distinct.insert(cost_key_of(v.overrides));
    keys = std::min(64.0, keys * static_cast<double>(distinct.size()));
  }
  // The sample: points spread evenly over the space, on as many workers as the sweep will run
  // (each with its own evaluator, as run_sweep's): a sample on one thread left the sweep's other
  // threads idle while it ran (64 of the 336 points of scenarios/sweeps/llama3.1-8b-64xh100.json:
  // two threads could not be more than 1.7x one). It stops taking points once its time is up.
  double grown = 0, keys_per_worker = 1;
  auto sampled_points = std::make_shared<std::map<std::size_t, PointResult>>();
  if (c.points > 0) {
    const std::size_t most = std::min<std::size_t>(c.points, 64);
    const int workers = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(c.threads), most));
    auto point_of = [&](std::size_t k) {
      return static_cast<std::size_t>(static_cast<double>(k) * static_cast<double>(c.points) / most);
    };
    std::vector<std::optional<PointResult>> results(most);
    std::vector<std::set<std::string>> seen_keys(static_cast<std::size_t>(workers));
    std::atomic<std::size_t> next{0};
    std::atomic<bool> time_up{false};
    const auto start = std::chrono::steady_clock::now();
    auto seconds_since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    run_workers(
        workers,
        [&](int w) {
          std::unique_ptr<Evaluator> evaluator = options.evaluator ? options.evaluator() : make_analytic_evaluator();
          for (std::size_t k = 0; !time_up && (k = next++) < most;) {
            // A skipped or failed point costs what it costs: timed as well.
            PointResult p = unevaluated_point(space, point_of(k));
            evaluate_point(p, *base, *evaluator);
            if (p.status == PointStatus::ok) seen_keys[static_cast<std::size_t>(w)].insert(cost_key_of(p.overrides));
            results[k] = std::move(p);
            if (seconds_since_start() >= sample_seconds) time_up = true;
          }
        },
        [&] { time_up = true; });
    const double elapsed = seconds_since_start();
    for (std::size_t k = 0; k < most; ++k)
      if (results[k]) {
        (*sampled_points)[point_of(k)] = std::move(*results[k]);
        ++c.sampled;
      }
    // One thread's time a point: the workers' time over the points they evaluated together.
    c.seconds_per_point = c.sampled ? elapsed * workers / static_cast<double>(c.sampled) : 0;
    c.sampled_points = sampled_points;
    grown = std::max(0.0, resident_bytes() - before) / workers;
    double keys_seen = 0;
    for (const std::set<std::string>& k : seen_keys) keys_seen += static_cast<double>(k.size());
    keys_per_worker = std::max(1.0, keys_seen / workers);
  }
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  c.seconds = c.seconds_per_point * static_cast<double>(c.points) / std::min<double>(c.threads, cores);
  const double per_worker = grown * std::max(1.0, keys / keys_per_worker);
  // Ranks: 16 bytes a point while sweeping (SweepOptions::rank_every_point); in flight: the
  // reorder room of 256 points a thread at ~16 KB each (a point with its labels and metrics).
  const double ranks = options.rank_every_point ? 16.0 * static_cast<double>(c.points) : 0;
  const double in_flight = 256.0 * c.threads * 16e3;
  c.memory_bytes = before + c.threads * per_worker + ranks + in_flight;
  c.memory_basis = "this process " + std::to_string(static_cast<long long>(before / (1 << 20))) + " MiB, " +
                   std::to_string(c.threads) + " worker" + (c.threads == 1 ? "" : "s") + " of " +
                   std::to_string(static_cast<long long>(per_worker / (1 << 20))) + " MiB, ranks of " +
                   std::to_string(c.points) + " points";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu points at %.3g ms a point on one thread (%zu sampled), %d thread%s", c.points,
                1e3 * c.seconds_per_point, c.sampled, c.threads, c.threads == 1 ? "" : "s");
  c.time_basis = buf;
  return c;
}

void resimulate_top(SweepResult& r, std::size_t k, const Resimulator& resimulate, double tolerance) {
  r.resimulated_ranking.clear();
  std::vector<std::size_t> top;
  for (std::size_t i : r.ranking) {
    if (top.size() >= k) break;
    if (r.point(i).fits || r.fitting == 0) top.push_back(i);
  }
  for (std::size_t i : top) {
    PointResult& p = r.point(i);
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
      m->allocator_retries = p.metrics.allocator_retries;
    }
    // So is the wrapping (its units: the resimulated JSON read 0, the session-30 audit).
    if (m->units <= 0) m->units = p.metrics.units;
    p.resimulated = m;
    r.resimulated_ranking.push_back(i);
  }
  const Objective o = r.objective;
  std::sort(r.resimulated_ranking.begin(), r.resimulated_ranking.end(), [&](std::size_t a, std::size_t b) {
    const double ca = cost_of(*r.point(a).resimulated, o), cb = cost_of(*r.point(b).resimulated, o);
    return ca < cb || (ca == cb && a < b);
  });
  // [Near capacity] As the ranking's recommendation: among points that fit with a margin when any does.
  std::vector<std::size_t> fitting, with_margin;
  for (std::size_t i : r.resimulated_ranking) {
    const PointMetrics& m = *r.point(i).resimulated;
    if (m.device_peak_bytes + r.headroom_bytes > m.gpu_memory_bytes) continue;
    fitting.push_back(i);
    if (!near_capacity_of(m)) with_margin.push_back(i);
  }
  if (!with_margin.empty()) fitting = with_margin;
  if (!fitting.empty())
    r.recommendation =
        recommend(r, fitting, fitting.size(), [&](std::size_t i) -> const PointMetrics& { return *r.point(i).resimulated; },
                  tolerance,
                  " (timing re-simulated for the top " + std::to_string(top.size()) + ")");
}

}  // namespace fsdpsim::sim
