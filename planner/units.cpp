#include "planner/units.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "models/checked_arithmetic.h"
#include "models/json_input.h"

namespace fsdpsim::planner {

using models::Model;
using models::Module;
using models::Parameter;

std::int64_t Unit::numel() const {
  std::int64_t n = 0;
  for (const Parameter* p : params) n = checked_add(n, p->numel(), "a unit's elements");
  return n;
}

std::vector<std::string> block_types(const Model& model, const WrapSpec& wrap) {
  if (!wrap.block_types.empty()) return wrap.block_types;
  // A block type: a costed type that repeats, or one written with "repeat" (a model of one
  // layer has one block, and it is still the block).
  std::map<std::string, int> counts;
  std::set<std::string> declared_repeated;
  models::for_each_module(model.root, [&](const Module& m) {
    if (!m.costs || &m == &model.root) return;
    ++counts[m.type];
    if (m.repeated) declared_repeated.insert(m.type);
  });
  std::vector<std::string> types;
  for (const auto& [type, n] : counts)
    if (n > 1 || declared_repeated.count(type)) types.push_back(type);
  return types;
}

namespace {

// The model's transformer blocks (block_types), in forward order; an InputError when it has none.
std::vector<const Module*> blocks_of(const Model& model, const WrapSpec& wrap, const std::string& file) {
  const std::vector<std::string> types = block_types(model, wrap);
  std::vector<const Module*> blocks;
  models::for_each_module(model.root, [&](const Module& m) {
    if (&m != &model.root && std::find(types.begin(), types.end(), m.type) != types.end()) blocks.push_back(&m);
  });
  if (blocks.empty())
    throw InputError(file, "fsdp.wrap.policy", "the model has no transformer blocks to wrap (no module type with "
                                               "costs that repeats or is written with \"repeat\"); name them with fsdp.wrap.block_types");
  return blocks;
}

std::string parent_name(const Module& m) {
  const std::size_t dot = m.full_name.rfind('.');
  return dot == std::string::npos ? std::string() : m.full_name.substr(0, dot);
}

// [torchtitan's wrap] The modules outside the blocks that own parameters, in two sibling
// groups: those before the first block (the siblings of the first of them: the token
// embeddings) and those after the last block (the siblings of the last of them: the output
// layer, with the final norm where the norm is its sibling, as in torchtitan's own models; in
// Hugging Face's layout model.norm is not lm_head's sibling and stays in the root, h elements).
// Modules between blocks stay in the root.
std::pair<std::vector<const Module*>, std::vector<const Module*>> ends_outside_blocks(
    const Model& model, const std::vector<const Module*>& blocks) {
  std::vector<const Module*> before, after;
  bool seen_block = false;
  std::function<void(const Module&)> walk = [&](const Module& m) {
    if (std::find(blocks.begin(), blocks.end(), &m) != blocks.end()) {
      seen_block = true;
      after.clear();  // between two blocks
      return;
    }
    if (&m != &model.root && !m.params.empty()) (seen_block ? after : before).push_back(&m);
    for (const Module& c : m.children) walk(c);
  };
  walk(model.root);
  auto siblings_of = [](std::vector<const Module*> list, const Module* of) {
    if (!of) return list;
    const std::string parent = parent_name(*of);
    list.erase(std::remove_if(list.begin(), list.end(), [&](const Module* m) { return parent_name(*m) != parent; }),
               list.end());
    return list;
  };
  return {siblings_of(before, before.empty() ? nullptr : before.front()),
          siblings_of(after, after.empty() ? nullptr : after.back())};
}

// Groups of modules that each become one non-root unit, in forward order. `kept_after_forward`:
// the first module of the group kept unsharded after forward ([torchtitan's wrap]), or null.
std::vector<std::vector<const Module*>> wrapped_groups(const Model& model, const WrapSpec& wrap,
                                                       const std::string& file, const Module*& kept_after_forward) {
  kept_after_forward = nullptr;
  std::vector<std::vector<const Module*>> groups;
  switch (wrap.policy) {
    case WrapPolicy::root:
      break;
    case WrapPolicy::block:
    case WrapPolicy::every_k_blocks: {
      const std::vector<const Module*> blocks = blocks_of(model, wrap, file);
      const std::size_t k = wrap.policy == WrapPolicy::block ? 1 : static_cast<std::size_t>(wrap.every);
      for (std::size_t i = 0; i < blocks.size(); i += k)
        groups.emplace_back(blocks.begin() + i, blocks.begin() + std::min(blocks.size(), i + k));
      break;
    }
    case WrapPolicy::torchtitan: {
      const std::vector<const Module*> blocks = blocks_of(model, wrap, file);
      const auto [before, after] = ends_outside_blocks(model, blocks);
      if (!before.empty()) groups.push_back(before);
      for (const Module* b : blocks) groups.push_back({b});
      if (!after.empty()) {
        groups.push_back(after);
        kept_after_forward = after.front();
      }
      break;
    }
    case WrapPolicy::size: {
      // FSDP1's size_based_auto_wrap_policy: bottom-up, a module is wrapped when the
      // parameters not yet wrapped below it reach min_num_params. The root is always a unit.
      // Containers are never wrapped: the policy's EXCLUDE_WRAP_MODULES = {nn.ModuleList,
      // nn.ModuleDict} (torch/distributed/fsdp/wrap.py, size_based_auto_wrap_policy: when not
      // recursing it returns is_large and not isinstance(module, exclude_wrap_modules)); their
      // parameters pass up to the parent.
      auto excluded = [](const Module& m) { return m.type == "ModuleList" || m.type == "ModuleDict"; };
      std::function<std::int64_t(const Module&)> visit = [&](const Module& m) -> std::int64_t {
        std::int64_t unwrapped = 0;
        for (const Module& c : m.children) unwrapped += visit(c);
        for (const Parameter& p : m.params)
          if (p.tied_to.empty()) unwrapped += p.numel();
        if (&m != &model.root && unwrapped >= wrap.min_num_params && !excluded(m)) {
          groups.push_back({&m});
          return 0;
        }
        return unwrapped;
      };
      visit(model.root);
      break;
    }
    case WrapPolicy::modules: {
      for (std::size_t i = 0; i < wrap.modules.size(); ++i) {
        std::vector<const Module*> group;
        for (std::size_t k = 0; k < wrap.modules[i].size(); ++k) {
          const std::string& name = wrap.modules[i][k];
          std::string path = join_json_path("fsdp.wrap.modules", i);
          if (wrap.modules[i].size() > 1) path = join_json_path(path, k);
          const Module* m = model.find_module(name);
          if (!m || m == &model.root)
            throw InputError(file, path, "no module named \"" + name + "\" in model " + model.name +
                                             " (names are dotted paths such as model.layers.0)");
          group.push_back(m);
        }
        groups.push_back(group);
      }
      break;
    }
  }
  return groups;
}

}  // namespace

namespace {

// The module tree in forward (pre-order) order with dense indices: the sweep plans thousands
// of points, and keyed maps over module pointers and parameter names were a third of planning.
// Pointer -> index is a sorted array (one allocation, binary search) rather than a hash map
// (an allocation per module).
struct ModuleIndex {
  std::vector<const Module*> order;  // pre-order
  std::vector<int> parent;           // index of the parent, -1 for the root
  std::vector<std::pair<const Module*, int>> by_address;

  explicit ModuleIndex(const Module& root) {
    add(root, -1);
    by_address.reserve(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) by_address.emplace_back(order[i], static_cast<int>(i));
    std::sort(by_address.begin(), by_address.end());
  }
  void add(const Module& m, int parent_index) {
    const int i = static_cast<int>(order.size());
    order.push_back(&m);
    parent.push_back(parent_index);
    for (const Module& c : m.children) add(c, i);
  }
  // Index of a module of this tree.
  int of(const Module* m) const {
    auto it = std::lower_bound(by_address.begin(), by_address.end(), std::make_pair(m, -1));
    if (it == by_address.end() || it->first != m) throw std::logic_error("module outside the model tree");
    return it->second;
  }
};

}  // namespace

std::vector<Unit> build_units(const Model& model, const WrapSpec& wrap, const std::string& file, bool wrap_experts,
                              bool modules_apart) {
  const Module* kept_after_forward = nullptr;
  std::vector<std::vector<const Module*>> groups = wrapped_groups(model, wrap, file, kept_after_forward);
  const ModuleIndex tree(model.root);
  if (wrap_experts) {
    models::for_each_module(model.root, [&](const Module& m) {
      if (m.experts <= 0) return;
      for (const auto& group : groups)
        if (std::find(group.begin(), group.end(), &m) != group.end())
          return;  // the wrap policy already made it a unit
      groups.push_back({&m});
    });
  }
  if (modules_apart) {
    std::vector<char> grouped(tree.order.size(), 0);  // in a group, or below a grouped module
    for (const auto& group : groups)
      for (const Module* m : group) grouped[tree.of(m)] = 1;
    std::set<std::string> tie_targets;
    for (const Module* m : tree.order)
      for (const Parameter& p : m->params)
        if (!p.tied_to.empty()) tie_targets.insert(p.tied_to);
    for (std::size_t i = 1; i < tree.order.size(); ++i) {
      if (grouped[tree.parent[i]]) grouped[i] = 1;
      const Module& m = *tree.order[i];
      if (grouped[i] || m.params.empty()) continue;
      const bool tied = std::any_of(m.params.begin(), m.params.end(), [&](const Parameter& p) {
        return !p.tied_to.empty() || tie_targets.count(p.full_name) > 0;
      });
      if (tied) continue;
      groups.push_back({&m});
      grouped[i] = 1;
    }
  }

  for (auto& group : groups) {
    std::sort(group.begin(), group.end(), [&](const Module* a, const Module* b) { return tree.of(a) < tree.of(b); });
    const int parent = tree.parent[tree.of(group.front())];
    for (const Module* m : group)
      if (tree.parent[tree.of(m)] != parent)
        throw InputError(file, "fsdp.wrap", "modules wrapped as one unit must be siblings: \"" + m->full_name +
                                                "\" and \"" + group.front()->full_name + "\" are not");
  }
  std::sort(groups.begin(), groups.end(),
            [&](const auto& a, const auto& b) { return tree.of(a.front()) < tree.of(b.front()); });

  std::vector<int> group_of(tree.order.size(), -1);  // wrapped module -> unit index
  std::vector<Unit> units(groups.size() + 1);
  units[0].index = 0;
  units[0].name = "<root>";
  units[0].modules = {&model.root};
  units[0].is_root = true;
  group_of[0] = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    Unit& u = units[g + 1];
    u.index = static_cast<int>(g + 1);
    u.name = groups[g].front()->full_name;
    u.modules = groups[g];
    for (const Module* m : groups[g]) {
      int& slot = group_of[tree.of(m)];
      if (slot >= 0) throw InputError(file, "fsdp.wrap", "module \"" + m->full_name + "\" is wrapped twice");
      slot = u.index;
    }
  }

  // The unit of a module: the nearest wrapped ancestor (itself included). Pre-order visits
  // a parent before its children, so one pass fills it.
  std::vector<int> unit_of(tree.order.size());
  for (std::size_t i = 0; i < tree.order.size(); ++i)
    unit_of[i] = group_of[i] >= 0 ? group_of[i] : unit_of[tree.parent[i]];
  for (Unit& u : units)
    if (!u.is_root) u.parent = unit_of[tree.parent[tree.of(u.modules.front())]];
  // [torchtitan's wrap] the group after the last block is kept unsharded after forward.
  for (Unit& u : units)
    if (kept_after_forward && !u.is_root && u.modules.front() == kept_after_forward) u.kept_unsharded_after_forward = true;

  // Parameter owners: a parameter's own module's unit; a parameter others are tied to goes
  // to the innermost unit enclosing all its users.
  std::unordered_map<std::string, std::vector<int>> tied_users;  // canonical full name -> units
  for (std::size_t i = 0; i < tree.order.size(); ++i)
    for (const Parameter& p : tree.order[i]->params)
      if (!p.tied_to.empty()) tied_users[p.tied_to].push_back(unit_of[i]);
  auto ancestors = [&](int u) {
    std::vector<int> chain;
    for (; u >= 0; u = units[u].parent) chain.push_back(u);
    return chain;
  };
  auto common_unit = [&](int own, const std::vector<int>& others) {
    std::vector<int> common = ancestors(own);  // deepest first
    for (int u : others) {
      const std::vector<int> chain = ancestors(u);
      common.erase(std::remove_if(common.begin(), common.end(),
                                  [&](int c) { return std::find(chain.begin(), chain.end(), c) == chain.end(); }),
                   common.end());
    }
    return common.front();  // the deepest shared ancestor (the root is always shared)
  };
  for (std::size_t i = 0; i < tree.order.size(); ++i)
    for (const Parameter& p : tree.order[i]->params) {
      if (!p.tied_to.empty()) continue;  // stored once, under the parameter it is tied to
      const auto tied = tied_users.empty() ? tied_users.end() : tied_users.find(p.full_name);
      const int owner = tied == tied_users.end() ? unit_of[i] : common_unit(unit_of[i], tied->second);
      units[owner].params.push_back(&p);
      if (owner != unit_of[i]) {
        units[unit_of[i]].tied_moved_out.push_back(&p);
        units[unit_of[i]].tied_moved_to = owner;
      }
    }
  return units;
}

int units_with_parameters(const std::vector<Unit>& units) {
  return static_cast<int>(std::count_if(units.begin(), units.end(), [](const Unit& u) { return !u.params.empty(); }));
}

std::vector<std::string> tied_weight_warnings(const std::vector<Unit>& units) {
  std::vector<std::string> out;
  for (const Unit& u : units) {
    if (u.tied_moved_out.empty()) continue;
    std::string names;
    for (const models::Parameter* p : u.tied_moved_out) names += (names.empty() ? "\"" : ", \"") + p->full_name + "\"";
    const Unit& to = units[u.tied_moved_to];
    std::string w = "fsdp.wrap: unit \"" + u.name + "\" cannot keep " + names +
                    ": tied to a module of another unit, FSDP keeps a tied weight in one flat parameter, so it "
                    "goes to the enclosing unit \"" + (to.is_root ? std::string("root") : to.name) + "\"";
    if (u.params.empty()) w += "; the unit is left without parameters (not counted as a unit)";
    out.push_back(w);
  }
  return out;
}

}  // namespace fsdpsim::planner
