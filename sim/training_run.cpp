#include "sim/training_run.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <optional>

#include "models/json_input.h"

namespace fsdpsim::sim {

TrainingRun training_run(const Estimate& e, const planner::Scenario& sc, double tokens, double usd_per_gpu_hour) {
  TrainingRun r;
  r.tokens = tokens;
  r.tokens_per_step = static_cast<double>(sc.training.global_batch) * static_cast<double>(sc.training.seq_len);
  r.steps = std::ceil(tokens / r.tokens_per_step);
  r.step_seconds = e.timing.step_seconds;
  r.seconds = r.steps * r.step_seconds;
  r.gpus = sc.world_size();
  r.gpu_hours = r.seconds * r.gpus / 3600.0;
  r.usd_per_gpu_hour = usd_per_gpu_hour;
  r.usd = r.gpu_hours * usd_per_gpu_hour;
  return r;
}

const DeadlineSearch::Trial* DeadlineSearch::answer() const {
  for (const Trial& t : tried)
    if (t.nodes == fewest_nodes) return &t;
  return nullptr;
}

const DeadlineSearch::Trial* DeadlineSearch::fastest() const {
  const Trial* best = nullptr;
  for (const Trial& t : tried)
    if (t.fits && (!best || t.run.seconds < best->run.seconds)) best = &t;
  return best;
}

namespace {

// The node counts the search may try, ascending, and the largest with why no more were tried.
std::vector<std::int64_t> allowed_node_counts(const planner::Scenario& s, DeadlineSearch& search) {
  const std::int64_t gpus_per_node = s.cluster.gpus_per_node;
  const std::int64_t micro_batch = s.training.micro_batch;
  std::int64_t max_nodes = kMaxDeadlineGpus / gpus_per_node;
  if (search.batch_stated) {
    // A micro-step a GPU at least: the stated batch spreads over global / micro-batch GPUs.
    max_nodes = std::min(max_nodes, s.training.global_batch / (micro_batch * gpus_per_node));
    search.max_nodes_reason = "the global batch of " + std::to_string(s.training.global_batch) +
                              " sequences at micro-batch " + std::to_string(micro_batch) + " spreads over " +
                              std::to_string(max_nodes * gpus_per_node) +
                              " GPUs at most (a larger training.global_batch goes further)";
  } else {
    search.max_nodes_reason = "the most GPUs searched (" + std::to_string(kMaxDeadlineGpus) + ")";
  }
  search.max_nodes = max_nodes;
  std::vector<std::int64_t> nodes;
  for (std::int64_t n = 1; n <= max_nodes; ++n) {
    const std::int64_t world = n * gpus_per_node;
    if (search.batch_stated && s.training.global_batch % (micro_batch * world) != 0) continue;
    // A hybrid strategy's shard group (a node, or the nodes it states) must tile the world.
    if (planner::is_hybrid(s.fsdp.strategy) && world % s.fsdp.shard_group_size != 0) continue;
    nodes.push_back(n);
  }
  return nodes;
}

}  // namespace

DeadlineSearch find_nodes_for_deadline(const planner::ScenarioTemplate& base, double tokens, double deadline_seconds,
                                       double usd_per_gpu_hour, double headroom_bytes) {
  const planner::Scenario& s = base.base();
  DeadlineSearch search;
  search.tokens = tokens;
  search.deadline_seconds = deadline_seconds;
  search.headroom_bytes = headroom_bytes;
  search.batch_stated = s.training.global_batch_stated;
  const std::vector<std::int64_t> nodes = allowed_node_counts(s, search);

  std::map<std::size_t, bool> meets;  // by index into `nodes`
  auto try_index = [&](std::size_t i) {
    if (meets.count(i)) return meets[i];
    const std::int64_t n = nodes[i];
    std::vector<std::string> overrides{"cluster.nodes=" + std::to_string(n)};
    if (search.batch_stated) {
      overrides.push_back("training.global_batch=" + std::to_string(s.training.global_batch));
      overrides.push_back("training.grad_accum=null");
    } else {
      overrides.push_back("training.global_batch=null");
      overrides.push_back("training.grad_accum=" + std::to_string(s.training.grad_accum));
    }
    planner::Scenario point;
    try {
      point = base.instantiate(overrides);
    } catch (const InputError& e) {
      // What the scenario refuses at that size (e.g. an expert-parallel group): said with the count.
      throw InputError::with_note(e, " (on " + std::to_string(n) + " nodes, tried by --deadline-days)");
    }
    const Estimate e = estimate_step(point);
    DeadlineSearch::Trial t;
    t.nodes = n;
    t.gpus = point.world_size();
    t.global_batch = point.training.global_batch;
    t.grad_accum = point.training.grad_accum;
    t.device_peak_bytes = e.device_peak_bytes();
    t.gpu_memory_bytes = e.gpu_memory_bytes;
    t.fits = t.device_peak_bytes + headroom_bytes <= e.gpu_memory_bytes;
    t.run = training_run(e, point, tokens, usd_per_gpu_hour);
    t.meets = t.fits && t.run.seconds <= deadline_seconds;
    t.order = static_cast<int>(search.tried.size());
    search.tried.push_back(t);
    return meets[i] = t.meets;
  };

  // Doubling over the allowed counts' indices (1, 2, 4, ... nodes where every count is allowed),
  // then bisection between the last that missed and the first that met. Index 0 is tried first,
  // so a first meet past it has a miss below it.
  std::optional<std::size_t> met;
  std::size_t missed = 0;
  // The trial before the last, by copy: `tried` grows (and may move) with every trial.
  std::optional<DeadlineSearch::Trial> previous;
  for (std::size_t k = 1; k <= nodes.size() && !met; k *= 2) {
    if (try_index(k - 1)) {
      met = k - 1;
      break;
    }
    missed = k - 1;
    const DeadlineSearch::Trial last = search.tried.back();
    if (previous && !previous->fits && !last.fits && last.device_peak_bytes >= previous->device_peak_bytes) {
      search.stopped = "more nodes stopped lowering the device peak (" + std::to_string(previous->nodes) + " and " +
                       std::to_string(last.nodes) +
                       " nodes do not fit): what does not fit is not the sharded state; activation checkpointing "
                       "or a smaller micro-batch may (estimate --advise)";
      break;
    }
    previous = last;
  }
  if (!met && search.stopped.empty() && !nodes.empty() && missed + 1 < nodes.size() && try_index(nodes.size() - 1))
    met = nodes.size() - 1;
  if (met) {
    std::size_t lo = missed, hi = *met;
    while (hi > 0 && hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (try_index(mid)) hi = mid;
      else lo = mid;
    }
    search.fewest_nodes = nodes[hi];
  }
  std::sort(search.tried.begin(), search.tried.end(),
            [](const DeadlineSearch::Trial& a, const DeadlineSearch::Trial& b) { return a.nodes < b.nodes; });
  return search;
}

}  // namespace fsdpsim::sim
