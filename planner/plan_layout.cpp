#include "planner/internal/plan_layout.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

#include "models/json_input.h"

namespace fsdpsim::planner {

using models::Module;
using Event = PlanCache::Layout::Event;

namespace {

// The forward program: unit hooks and module computes in forward order, with checkpoint
// regions; then the units in forward and backward order.
void make_forward_program(const Scenario& sc, PlanCache::Layout& l) {
  const TrainingSpec& t = sc.training;
  std::unordered_map<const Module*, std::vector<int>> starts, ends;
  for (const Unit& u : l.units) {
    starts[u.modules.front()].push_back(u.index);
    ends[u.modules.back()].push_back(u.index);
  }
  std::unordered_map<const Module*, int> unit_of;
  for (const Unit& u : l.units)
    for (const Module* m : u.modules) unit_of[m] = u.index;
  static const std::vector<int> none;
  auto units_at = [&](const std::unordered_map<const Module*, std::vector<int>>& map, const Module* m)
      -> const std::vector<int>& {
    auto it = map.find(m);
    return it == map.end() ? none : it->second;
  };
  std::vector<std::string> types = block_types(*sc.model, sc.fsdp.wrap);
  int block_index = 0;
  std::function<void(const Module&, int, int, bool)> walk = [&](const Module& m, int current_unit, int region,
                                                                 bool selective) {
    if (auto it = unit_of.find(&m); it != unit_of.end()) current_unit = it->second;
    for (int u : units_at(starts, &m)) l.forward.push_back({Event::pre, u, nullptr, -1});
    if (&m != &sc.model->root && std::find(types.begin(), types.end(), m.type) != types.end()) {
      const int i = block_index++;
      const bool checkpointed = t.checkpointing == Checkpointing::full ||
                                (t.checkpointing == Checkpointing::every_k && i % t.checkpoint_every == 0);
      if (checkpointed && region < 0) region = i;
      if (t.checkpointing == Checkpointing::selective) selective = true;
    }
    if (m.costs) {
      if (selective && m.costs->sac_saved_activation_bytes.empty())
        throw InputError(sc.file, "training.activation_checkpointing",
                         "selective checkpointing needs the model's sac_* costs, which module \"" + m.full_name +
                             "\" lacks (the Hugging Face importer writes them for dense blocks; it has no op-level SAC "
                             "ledger for MoE blocks nor for DeepSeek's multi-head latent attention)");
      // Units wrapped below a costed module (its subtree computes nothing of its own): their
      // pre-forward hooks run before the module's compute and their post-forward hooks after.
      std::vector<int> inner;
      for (const Module& c : m.children)
        models::for_each_module(c, [&](const Module& d) {
          for (int u : units_at(starts, &d)) inner.push_back(u);
        });
      for (int u : inner) l.forward.push_back({Event::pre, u, nullptr, -1});
      if (!inner.empty()) l.inner_units[static_cast<int>(l.forward.size())] = inner;
      l.forward.push_back({Event::compute, current_unit, &m, region, selective});
      for (auto it = inner.rbegin(); it != inner.rend(); ++it) l.forward.push_back({Event::post, *it, nullptr, -1});
      const std::vector<int>& ending = units_at(ends, &m);
      for (auto it = ending.rbegin(); it != ending.rend(); ++it) l.forward.push_back({Event::post, *it, nullptr, -1});
      return;  // nothing below a costed module computes (the model loader checks it)
    }
    for (const Module& c : m.children) walk(c, current_unit, region, selective);
    const std::vector<int>& ending = units_at(ends, &m);
    for (auto it = ending.rbegin(); it != ending.rend(); ++it) l.forward.push_back({Event::post, *it, nullptr, -1});
  };
  walk(sc.model->root, 0, -1, false);
  l.blocks = block_index;
  if (t.checkpointing != Checkpointing::none && block_index == 0)
    throw InputError(sc.file, "training.activation_checkpointing",
                     "the model has no transformer blocks to checkpoint");
  l.region_events.assign(l.blocks, {});
  for (std::size_t i = 0; i < l.forward.size(); ++i) {
    const Event& e = l.forward[i];
    if (e.kind == Event::pre && e.unit != 0) l.forward_units.push_back(e.unit);
    if (e.kind == Event::compute && e.region >= 0) l.region_events[e.region].push_back(static_cast<int>(i));
  }
  l.forward_units.insert(l.forward_units.begin(), 0);
  for (auto it = l.forward.rbegin(); it != l.forward.rend(); ++it)
    if (it->kind == Event::post) l.backward_units.push_back(it->unit);
}

// Dense indices for the canonical parameters (those the units own; a tied parameter is
// stored once, under the parameter it is tied to), and the ones each costed module uses.
// Indices rather than maps keyed by pointer or name: a sweep plans thousands of points.
void index_parameters(PlanCache::Layout& l) {
  l.unit_params.assign(l.units.size(), {});
  std::vector<std::pair<const models::Parameter*, int>> index;  // sorted by address
  for (const Unit& u : l.units)
    for (const models::Parameter* p : u.params) {
      const int i = static_cast<int>(l.param_owner.size());
      index.emplace_back(p, i);
      l.param_owner.push_back(u.index);
      l.params.push_back(p);
      l.param_numel.push_back(p->numel());
      l.unit_params[u.index].push_back(i);
    }
  std::sort(index.begin(), index.end());
  std::unordered_map<std::string, int> by_name;  // for tied parameters only, built on first use
  auto canonical = [&](const models::Parameter& p) {
    if (p.tied_to.empty()) {
      auto it = std::lower_bound(index.begin(), index.end(), std::make_pair(&p, -1));
      if (it == index.end() || it->first != &p) throw std::logic_error("parameter " + p.full_name + " has no unit");
      return it->second;
    }
    if (by_name.empty())
      for (const auto& [param, i] : index) by_name.emplace(param->full_name, i);
    return by_name.at(p.tied_to);
  };
  l.event_params.assign(l.forward.size(), {});
  for (std::size_t i = 0; i < l.forward.size(); ++i) {
    if (l.forward[i].kind != Event::compute) continue;
    models::for_each_module(*l.forward[i].module, [&](const Module& m) {
      for (const models::Parameter& p : m.params) l.event_params[i].push_back(canonical(p));
    });
  }
}

}  // namespace

// Whether a layout built for (wrap a, checkpointing a) serves (b): the fields each policy reads.
bool same_layout_inputs(const WrapSpec& a, Checkpointing ca, int every_a, const WrapSpec& b, Checkpointing cb,
                        int every_b) {
  // block_types names the checkpointed blocks under every policy.
  if (a.policy != b.policy || ca != cb || a.block_types != b.block_types) return false;
  if (ca == Checkpointing::every_k && every_a != every_b) return false;
  switch (a.policy) {
    case WrapPolicy::root: return true;
    case WrapPolicy::block:
    case WrapPolicy::torchtitan: return true;
    case WrapPolicy::every_k_blocks: return a.every == b.every;
    case WrapPolicy::size: return a.min_num_params == b.min_num_params;
    case WrapPolicy::modules: return a.modules == b.modules;
  }
  return false;
}

std::unique_ptr<PlanCache::Layout> make_layout(const Scenario& scenario) {
  auto l = std::make_unique<PlanCache::Layout>();
  l->wrap = scenario.fsdp.wrap;
  l->checkpointing = scenario.training.checkpointing;
  l->checkpoint_every = scenario.training.checkpoint_every;
  l->experts_wrapped = wraps_experts(scenario);
  l->modules_apart = fetches_per_module(scenario);
  l->model = scenario.model;
  l->unequal_head_dims = models::has_unequal_attention_head_dims(scenario.model->root);
  l->units = build_units(*scenario.model, scenario.fsdp.wrap, scenario.file, l->experts_wrapped, l->modules_apart);
  make_forward_program(scenario, *l);
  index_parameters(*l);
  return l;
}

}  // namespace fsdpsim::planner
