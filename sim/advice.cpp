#include "sim/advice.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "models/bytes_text.h"
#include "planner/device_memory.h"
#include "sim/estimate.h"

namespace fsdpsim::sim {

namespace {

using planner::Strategy;

// One candidate change: its kind (two changes of one kind never combine), a label and the
// assignments.
struct Change {
  std::string kind;
  std::string label;
  std::vector<std::string> overrides;
  int world = 0;  // the world size it gives (kind "gpus"); 0: the scenario's
  std::int64_t micro_batch = 0;  // kind "micro_batch": the micro-batch it sets
};

// More nodes (kind "gpus"), at `micro_batch`: the global batch kept where the new world divides
// it, else one micro-step (the global batch grows to micro-batch x world, said in the label).
// A hybrid strategy's shard group stays what it was (a node), not the new world.
Change more_nodes(const planner::Scenario& s, std::int64_t nodes, std::int64_t micro_batch) {
  const std::int64_t world = nodes * s.cluster.gpus_per_node;
  const std::int64_t global = s.training.global_batch;
  Change c{"gpus", std::to_string(world) + " GPUs (" + std::to_string(nodes) + " nodes)",
           {"cluster.nodes=" + std::to_string(nodes)}, static_cast<int>(world)};
  if (global % (micro_batch * world) == 0) {
    c.overrides.push_back("training.global_batch=" + std::to_string(global));
    c.overrides.push_back("training.grad_accum=null");
    if (micro_batch != s.training.micro_batch) c.label += ", grad accum " + std::to_string(global / (micro_batch * world));
  } else {
    c.overrides.push_back("training.global_batch=null");
    c.overrides.push_back("training.grad_accum=1");
    c.label += ", global batch " + std::to_string(micro_batch * world);
  }
  return c;
}

// A pair of changes as one. A smaller micro-batch with more nodes: the nodes' batch settle with
// the pair's micro-batch, and say the gradient accumulation of the new world (the micro-batch's
// own label gave the old world's).
std::vector<Change> pair_of(const planner::Scenario& s, const Change& a, const Change& b) {
  const Change* micro = a.kind == "micro_batch" ? &a : b.kind == "micro_batch" ? &b : nullptr;
  const Change* nodes = a.kind == "gpus" ? &a : b.kind == "gpus" ? &b : nullptr;
  if (!micro || !nodes) return {a, b};
  Change m = *micro;
  m.label = "micro-batch " + std::to_string(m.micro_batch);
  return {m, more_nodes(s, nodes->world / s.cluster.gpus_per_node, m.micro_batch)};
}

// Axis values from the sweep's own expansion (planner/sweep_space.h), each as a change.
void add_axis(std::vector<Change>& out, const std::string& kind, const std::string& key, const std::vector<nlohmann::json>& values,
              const planner::AxisContext& ctx, const std::string& prefix) {
  if (values.empty()) return;
  planner::AxisSpec spec{key, values, "", "--advise"};
  for (const planner::AxisValue& v : planner::expand_axis(spec, ctx).values) out.push_back({kind, prefix + v.label, v.overrides});
}

// Expert parallelism for a MoE model, as torchtitan runs it (FSDP2; FULL_SHARD, SHARD_GRAD_OP or
// HYBRID_SHARD): each power-of-two degree other than the scenario's that divides every MoE layer's
// experts and passes parse_fsdp's checks (planner::expert_parallel_error: the strategy, the shard
// group, whole nodes or one). Without it FSDP2 shards the stacked experts on dim 0, which pads
// when the experts are fewer than the ranks ([FSDP2 dim-0 padding], planner/sharding.h), and
// every rank gathers every expert: EP removes both. From FSDP1 the change includes FSDP2, and
// says so.
void add_expert_parallel(std::vector<Change>& out, const planner::Scenario& s) {
  std::int64_t experts = 0;  // the gcd of every MoE layer's experts
  models::for_each_module(s.model->root, [&](const models::Module& m) {
    if (m.costs && m.costs->moe) experts = std::gcd(experts, static_cast<std::int64_t>(m.costs->moe->experts));
  });
  planner::FsdpSpec with = s.fsdp;
  with.version = 2;
  for (int ep = 2; ep <= s.fsdp.shard_group_size && ep <= experts; ep *= 2) {
    with.expert_parallel = ep;
    if (ep == s.fsdp.expert_parallel || experts % ep != 0) continue;
    if (!planner::expert_parallel_error(with, s.cluster.gpus_per_node).empty()) continue;
    Change c{"expert_parallel", "expert parallel " + std::to_string(ep), {"fsdp.expert_parallel=" + std::to_string(ep)}};
    if (s.fsdp.version != 2) {
      c.label += " (FSDP2)";
      c.overrides.insert(c.overrides.begin(), "fsdp.version=2");
    }
    out.push_back(c);
  }
}

std::vector<Change> single_changes(const planner::Scenario& s, const planner::AxisContext& ctx) {
  std::vector<Change> out;
  const auto& t = s.training;
  const auto& f = s.fsdp;
  // Activation checkpointing: the ones that save more than the current.
  std::vector<nlohmann::json> ac;
  if (t.checkpointing == planner::Checkpointing::none) ac = {"selective", "full"};
  else if (t.checkpointing != planner::Checkpointing::full) ac = {"full"};
  add_axis(out, "checkpointing", "training.activation_checkpointing", ac, ctx, "activation checkpointing ");
  // A smaller micro-batch, the global batch kept (gradient accumulation grows), up to
  // kAdviceMaxMicroSteps micro-steps: a step is planned micro-step by micro-step, and halving a
  // micro-batch of 4,096 down to 1 planned 4,096 of them (the session-36 audit: `estimate` at
  // micro-batch 65,536 took 112 s and 8 GB, all of it in these candidates).
  std::vector<nlohmann::json> mb;
  const auto accumulation = [&](std::int64_t m) { return t.grad_accum * (t.micro_batch / m); };
  // Halving ends at 1 for an odd micro-batch too, unless the accumulation passes the cap first.
  for (std::int64_t m = t.micro_batch / 2; m >= 1 && accumulation(m) <= kAdviceMaxMicroSteps; m /= 2) mb.push_back(m);
  add_axis(out, "micro_batch", "training.micro_batch", mb, ctx, "micro-batch ");
  for (Change& c : out)
    if (c.kind == "micro_batch") {
      c.micro_batch = std::stoll(c.label.substr(c.label.rfind(' ') + 1));
      const std::int64_t per_step = c.micro_batch * s.world_size();
      if (per_step > 0 && t.global_batch % per_step == 0) c.label += " (grad accum " + std::to_string(t.global_batch / per_step) + ")";
    }
  // Every other strategy (with its default shard group and resharding). On one node a hybrid's
  // default shard group, the node, is the world, and it is its plain twin (no replicas to
  // all-reduce across): the same plan, listed once (the session-36 audit found HYBRID_SHARD
  // advised as a change to the FULL_SHARD it equals, and HYBRID_SHARD_ZERO2 beside SHARD_GRAD_OP).
  const auto plan_of = [&](Strategy st) {
    if (s.cluster.nodes > 1) return st;
    return st == Strategy::HYBRID_SHARD ? Strategy::FULL_SHARD : st == Strategy::HYBRID_SHARD_ZERO2 ? Strategy::SHARD_GRAD_OP : st;
  };
  std::vector<nlohmann::json> strategies;
  // The scenario's own strategy is its plain twin only with the whole world as its shard group.
  std::vector<Strategy> listed = {f.shard_group_size == s.world_size() ? plan_of(f.strategy) : f.strategy};
  for (Strategy st : {Strategy::FULL_SHARD, Strategy::HYBRID_SHARD, Strategy::SHARD_GRAD_OP, Strategy::HYBRID_SHARD_ZERO2,
                      Strategy::ZERO1, Strategy::NO_SHARD}) {
    if (std::find(listed.begin(), listed.end(), plan_of(st)) != listed.end()) continue;
    listed.push_back(plan_of(st));
    strategies.push_back(planner::strategy_name(st));
  }
  add_axis(out, "strategy", "fsdp.strategy", strategies, ctx, "strategy ");
  // Reshard after forward, where the strategy can.
  const bool reshards = f.strategy == Strategy::FULL_SHARD || f.strategy == Strategy::HYBRID_SHARD;
  if (reshards && f.reshard_after_forward != f.shard_group_size)
    out.push_back({"reshard", "reshard_after_forward true", {"fsdp.reshard_after_forward=true"}});
  if (!f.cpu_offload) out.push_back({"offload", "CPU offload", {"fsdp.cpu_offload=true"}});
  add_expert_parallel(out, s);
  // More nodes.
  for (int k : {2, 4, 8, 16, 32}) {
    const std::int64_t nodes = static_cast<std::int64_t>(s.cluster.nodes) * k;
    if (nodes * s.cluster.gpus_per_node > (1 << 20)) break;
    out.push_back(more_nodes(s, nodes, t.micro_batch));
  }
  return out;
}

struct Swept {
  std::vector<AdviceItem> fitting;
  // The candidates that do not fit, the closest first (the sweep's ranking: by overage, then
  // in candidate order), with their combination: memory figures only when swept memory-first.
  std::vector<std::pair<AdviceItem, std::vector<Change>>> over;
  std::size_t evaluated = 0;
};

// Whether a fitting candidate keeps the GPU count with a margin. Pairs are swept when fewer than
// three singles do, and when none of the advice's first few does, the best that does is added:
// the advice holds a way to stay on the GPUs the user has (the session-34 audit: 70B on 16 H100s
// was advised only more GPUs, while full checkpointing with CPU offload fits on the 16).
bool keeps_gpus_with_margin(const AdviceItem& item, int world) { return !item.near_capacity && item.gpus == world; }

// Sweeps `combos` (each one point) over `base`. Memory-first (make_memory_first_evaluator):
// the candidates that do not fit are not timed, as the advice shows only the closest of them.
// `closest` (memory-first only): replays give up past it (ClosestOverage).
Swept sweep_changes(const std::shared_ptr<const planner::ScenarioTemplate>& base, const std::vector<std::vector<Change>>& combos,
                    double headroom_bytes, int threads, bool memory_first,
                    const std::shared_ptr<ClosestOverage>& closest = nullptr) {
  planner::Axis axis;
  axis.key = "change";
  for (const auto& combo : combos) {
    planner::AxisValue v;
    std::map<std::string, std::string> last;  // key -> the value it was last set to
    for (const Change& c : combo) {
      v.label += (v.label.empty() ? "" : " + ") + c.label;
      for (const std::string& o : c.overrides) {
        // An assignment repeating the key's current value says nothing (the pair's two changes
        // both keep the global batch): left out of the point's --set line.
        const std::size_t eq = o.find('=');
        const std::string key = o.substr(0, eq), value = eq == std::string::npos ? "" : o.substr(eq + 1);
        const auto it = last.find(key);
        if (it != last.end() && it->second == value) continue;
        last[key] = value;
        v.overrides.push_back(o);
      }
    }
    axis.values.push_back(v);
  }
  Swept out;
  if (axis.values.empty()) return out;
  planner::SweepSpace space;
  space.axes.push_back(axis);
  SweepOptions options;
  options.threads = threads;
  options.headroom_bytes = headroom_bytes;
  options.objective = Objective::throughput;
  options.keep_top = axis.values.size();
  if (memory_first)
    options.evaluator = [headroom_bytes, closest] { return make_memory_first_evaluator(headroom_bytes, closest); };
  SweepResult r = run_sweep(base, space, options);
  out.evaluated = r.evaluated;
  for (std::size_t index : r.ranking) {
    const PointResult& p = r.point(index);
    if (p.status != PointStatus::ok) continue;
    AdviceItem item;
    const auto& combo = combos[index];
    for (const Change& c : combo) item.change += (item.change.empty() ? "" : " + ") + c.label;
    item.overrides = p.overrides;
    item.changes = static_cast<int>(combo.size());
    item.metrics = p.metrics;
    item.spare_bytes = -p.overage_bytes;
    item.near_capacity = p.near_capacity;
    item.gpus = base->base().world_size();
    for (const Change& c : combo)
      if (c.world > 0) item.gpus = c.world;
    if (p.fits) out.fitting.push_back(item);
    else out.over.emplace_back(item, combo);
  }
  return out;
}

// The closest of the candidates that do not fit: the single change closest to fitting, unless a
// pair is strictly closer. Null when there is none.
std::vector<std::pair<AdviceItem, std::vector<Change>>>* closest_list(Swept& one, Swept& two) {
  if (two.over.empty()) return one.over.empty() ? nullptr : &one.over;
  if (one.over.empty() || two.over.front().first.spare_bytes > one.over.front().first.spare_bytes) return &two.over;
  return &one.over;
}

bool any_given_up(const Swept& swept) {
  return std::any_of(swept.over.begin(), swept.over.end(), [](const auto& o) { return o.first.metrics.memory_lower_bound; });
}

// The closest candidate, timed (it was swept memory-first). One whose timing fails leaves the
// candidates, as a sweep that timed every candidate would have skipped it; the next closest
// takes its place. But a candidate given up was only known to be further than the closest of
// its time, which may be the one that left: then `exact_needed` (the candidates must be swept
// again without giving up) and no answer.
std::optional<AdviceItem> timed_closest(const std::shared_ptr<const planner::ScenarioTemplate>& base, Swept& one, Swept& two,
                                        std::size_t& candidates, double headroom_bytes, int threads, bool& exact_needed) {
  while (auto* list = closest_list(one, two)) {
    Swept timed = sweep_changes(base, {list->front().second}, headroom_bytes, threads, false);
    if (timed.evaluated == 1) return timed.over.empty() ? timed.fitting.front() : timed.over.front().first;
    list->erase(list->begin());
    --candidates;
    if (any_given_up(one) || any_given_up(two)) {
      exact_needed = true;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

// Cheapest first: changes that fit with a margin before those that fit only near capacity
// ([Near capacity]: their fit is not sure and their step time leaves out what a near miss
// costs); then the most tokens/s per GPU (the fewest GPU-hours per token), changes within 1% of
// each other's being the same cost (below the model's error), of which the fewest GPUs first
// (the same GPU-hours per token on a smaller booking); then fewer changes; then the most memory
// to spare (a step bound by communication runs as fast with full as with selective
// checkpointing: the one further from the GPU's edge first, as the sweep recommends).
void order_cheapest_first(std::vector<AdviceItem>& items) {
  constexpr double kSameCost = 0.01;
  auto by_throughput = [](const AdviceItem& a, const AdviceItem& b) {
    if (a.near_capacity != b.near_capacity) return !a.near_capacity;
    if (a.metrics.tokens_per_second_per_gpu != b.metrics.tokens_per_second_per_gpu)
      return a.metrics.tokens_per_second_per_gpu > b.metrics.tokens_per_second_per_gpu;
    if (a.changes != b.changes) return a.changes < b.changes;
    return a.spare_bytes > b.spare_bytes;
  };
  std::stable_sort(items.begin(), items.end(), by_throughput);
  // The groups of the same cost, each led by its fastest change, in that order.
  for (auto group = items.begin(); group != items.end();) {
    const double floor = (1.0 - kSameCost) * group->metrics.tokens_per_second_per_gpu;
    auto end = std::find_if(group, items.end(), [&](const AdviceItem& i) {
      return i.near_capacity != group->near_capacity || i.metrics.tokens_per_second_per_gpu < floor;
    });
    std::stable_sort(group, end, [](const AdviceItem& a, const AdviceItem& b) { return a.gpus < b.gpus; });
    group = end;
  }
}

namespace {

// [Advice and the job] The changes are swept and ranked on the step's memory, as a sweep's
// points are. The job has other phases: a change that fits the step can leave the init or a
// checkpoint save over (the session-30 audit: EP 2 fitted the step of DeepSeek-V2-Lite and left
// its full checkpoint save, clones on the GPU, over it). So each advised change is estimated whole once
// more, and its job verdict goes beside it. This is done only where some phase besides the step
// is judged: a stated checkpoint, an init on cpu or cuda, or a cluster that states its host memory.
void judge_jobs(const planner::ScenarioTemplate& base, double headroom_bytes, Advice& advice) {
  const planner::Scenario& s = base.base();
  const bool other_phases = s.checkpoint.enabled || s.init.device != planner::InitSpec::Device::meta ||
                            s.cluster.host_memory_bytes > 0;
  if (!other_phases) return;
  for (AdviceItem& item : advice.fitting) {
    const planner::Scenario changed = base.instantiate(item.overrides);
    const Estimate e = estimate_step(changed);
    item.job = planner::job_fit(e.job.phases, e.device_overhead_bytes, e.gpu_memory_bytes - headroom_bytes,
                                changed.cluster.host_memory_bytes);
  }
}

}  // namespace

Advice advise(std::shared_ptr<const planner::ScenarioTemplate> base, double headroom_bytes, std::size_t limit, int threads,
              bool give_up_past_closest, std::optional<double> base_overage) {
  Advice advice;
  advice.headroom_bytes = headroom_bytes;
  // A smaller micro-batch is advised keeping the global batch, stated or not: the batch the
  // run trains with is not the advice's to change.
  planner::AxisContext context = base->context();
  context.global_batch_stated = true;
  const std::vector<Change> singles = single_changes(base->base(), context);
  std::vector<std::vector<Change>> combos;
  for (const Change& c : singles) combos.push_back({c});
  // One for singles and pairs: a pair is shown only when strictly closer than every single, or
  // when it fits.
  const auto closest = give_up_past_closest ? std::make_shared<ClosestOverage>() : nullptr;
  const bool seeded = closest && base_overage && *base_overage > 0;
  if (seeded) closest->bytes = *base_overage;  // as if the base were swept
  Swept one = sweep_changes(base, combos, headroom_bytes, threads, true, closest), two;
  advice.candidates = one.evaluated;
  advice.fitting = one.fitting;
  const int world = base->base().world_size();
  const auto kept = static_cast<std::size_t>(std::count_if(
      advice.fitting.begin(), advice.fitting.end(), [&](const AdviceItem& i) { return keeps_gpus_with_margin(i, world); }));
  if (kept < std::min<std::size_t>(3, limit)) {
    // Pairs of changes of different kinds, leaving out those holding a change that fits alone
    // (that change is advice already; the pair only adds a cost).
    std::set<std::string> fits_alone;
    for (const AdviceItem& item : advice.fitting) fits_alone.insert(item.change);
    std::vector<std::vector<Change>> pairs;
    for (std::size_t i = 0; i < singles.size(); ++i)
      for (std::size_t j = i + 1; j < singles.size(); ++j)
        if (singles[i].kind != singles[j].kind && !fits_alone.count(singles[i].label) && !fits_alone.count(singles[j].label))
          pairs.push_back(pair_of(base->base(), singles[i], singles[j]));
    two = sweep_changes(base, pairs, headroom_bytes, threads, true, closest);
    advice.pairs_swept = true;
    advice.candidates += two.evaluated;
    advice.fitting.insert(advice.fitting.end(), two.fitting.begin(), two.fitting.end());
  }
  // Only when nothing fits is the closest shown: then, and only for it, the timing.
  if (advice.fitting.empty()) {
    // No candidate came closer than the base's overage: the closest was given up past it.
    if (seeded) {
      const auto* list = closest_list(one, two);
      if (list && list->front().first.metrics.memory_lower_bound)
        return advise(base, headroom_bytes, limit, threads, true, std::nullopt);
    }
    bool exact_needed = false;
    advice.closest = timed_closest(base, one, two, advice.candidates, headroom_bytes, threads, exact_needed);
    if (exact_needed) return advise(base, headroom_bytes, limit, threads, false);
  }
  if (closest) {
    advice.given_up = closest->given_up;
    advice.plans_stopped = closest->plans_stopped;
  }
  order_cheapest_first(advice.fitting);
  if (advice.fitting.size() > limit) {
    const auto first_kept = std::find_if(advice.fitting.begin(), advice.fitting.end(),
                                         [&](const AdviceItem& i) { return keeps_gpus_with_margin(i, world); });
    const bool kept_in_limit = first_kept < advice.fitting.begin() + static_cast<std::ptrdiff_t>(limit);
    std::optional<AdviceItem> extra;
    if (first_kept != advice.fitting.end() && !kept_in_limit) extra = *first_kept;
    advice.fitting.resize(limit);
    if (extra) {
      advice.fitting.push_back(*extra);
      advice.kept_gpus_added = true;
    }
  }
  judge_jobs(*base, headroom_bytes, advice);
  return advice;
}

namespace {

std::string shell_words(const std::vector<std::string>& overrides) {
  std::string out;
  for (const std::string& o : overrides) {
    const bool quote = o.find_first_of(" \"'{}[]*$;&|<>()\\") != std::string::npos;
    out += " --set " + (quote ? "'" + o + "'" : o);
  }
  return out;
}

}  // namespace

std::string advice_text(const Advice& a) {
  std::ostringstream out;
  out << "\nChanges that make it fit";
  if (a.headroom_bytes > 0) out << " with " << gib(a.headroom_bytes) << " to spare";
  out << " (" << a.candidates << " configurations swept" << (a.pairs_swept ? ", single changes and pairs" : "")
      << "; most tokens/s per GPU first)\n";
  if (a.fitting.empty()) {
    out << "none of them fits";
    if (a.closest)
      out << "; the closest is " << a.closest->change << ", still " << gib(-a.closest->spare_bytes) << " over (device peak "
          << gib(a.closest->metrics.device_peak_bytes) << ")";
    out << ". Try `fsdpsim sweep` over more axes, or a bigger GPU.\n";
    return out.str();
  }
  for (std::size_t i = 0; i < a.fitting.size(); ++i) {
    const AdviceItem& item = a.fitting[i];
    if (a.kept_gpus_added && i + 1 == a.fitting.size())
      out << "  and the cheapest that keeps the " << item.gpus << " GPUs:\n";
    char line[256];
    std::snprintf(line, sizeof line, "  %zu. %s\n     device peak %s (%s spare), %.0f tokens/s per GPU, step %.3f s, MFU %.1f%%\n",
                  i + 1, item.change.c_str(), gib(item.metrics.device_peak_bytes).c_str(), gib(item.spare_bytes).c_str(),
                  item.metrics.tokens_per_second_per_gpu, item.metrics.step_seconds, 100 * item.metrics.mfu);
    out << line;
    if (item.near_capacity)
      out << "     fits only near capacity: "
          << planner::near_capacity_warning(item.metrics.gpu_memory_bytes, item.metrics.device_peak_bytes,
                                            static_cast<double>(item.metrics.peak_reserved_bytes),
                                            item.metrics.allocator_retries)
          << "\n";
    out << "     " << shell_words(item.overrides).substr(1) << "\n";
    if (item.job && !item.job->fits)
      out << "     but the job does not fit: " << item.job->binding_phase << " (" << item.job->binding_resource
          << ") exceeds its memory by " << gib(-item.job->binding_margin_bytes) << "\n";
  }
  return out.str();
}

nlohmann::json advice_json(const Advice& a) {
  auto item_json = [](const AdviceItem& item) {
    return nlohmann::json{{"change", item.change},
                          {"overrides", item.overrides},
                          {"changes", item.changes},
                          {"device_peak_bytes", item.metrics.device_peak_bytes},
                          {"spare_bytes", item.spare_bytes},
                          {"near_capacity", item.near_capacity},
                          {"gpus", item.gpus},
                          {"step_seconds", item.metrics.step_seconds},
                          {"tokens_per_second_per_gpu", item.metrics.tokens_per_second_per_gpu},
                          {"mfu", item.metrics.mfu},
                          {"job_fits", item.job ? nlohmann::json(item.job->fits) : nlohmann::json(nullptr)},
                          {"job_binding_phase", item.job ? nlohmann::json(item.job->binding_phase) : nlohmann::json(nullptr)},
                          {"job_margin_bytes",
                           item.job ? nlohmann::json(item.job->binding_margin_bytes) : nlohmann::json(nullptr)}};
  };
  nlohmann::json fitting = nlohmann::json::array();
  for (const AdviceItem& item : a.fitting) fitting.push_back(item_json(item));
  return {{"fitting", fitting},
          {"candidates", a.candidates},
          {"pairs_swept", a.pairs_swept},
          {"last_keeps_the_gpu_count", a.kept_gpus_added},
          {"headroom_bytes", a.headroom_bytes},
          {"closest", a.closest ? item_json(*a.closest) : nlohmann::json(nullptr)}};
}

}  // namespace fsdpsim::sim
