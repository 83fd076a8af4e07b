#include "planner/units.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "models/json_input.h"

namespace fsdpsim::planner {

using models::Model;
using models::Module;
using models::Parameter;

std::int64_t Unit::numel() const {
  std::int64_t n = 0;
  for (const Parameter* p : params) n += p->numel();
  return n;
}

std::vector<std::string> block_types(const Model& model, const WrapSpec& wrap) {
  if (!wrap.block_types.empty()) return wrap.block_types;
  std::map<std::string, int> counts;
  models::for_each_module(model.root, [&](const Module& m) {
    if (m.costs && &m != &model.root) ++counts[m.type];
  });
  std::vector<std::string> types;
  for (const auto& [type, n] : counts)
    if (n > 1) types.push_back(type);
  return types;
}

namespace {

// Groups of modules that each become one non-root unit, in forward order.
std::vector<std::vector<const Module*>> wrapped_groups(const Model& model, const WrapSpec& wrap,
                                                       const std::string& file) {
  std::vector<std::vector<const Module*>> groups;
  switch (wrap.policy) {
    case WrapPolicy::root:
      break;
    case WrapPolicy::block:
    case WrapPolicy::every_k_blocks: {
      std::vector<std::string> types = block_types(model, wrap);
      std::vector<const Module*> blocks;
      models::for_each_module(model.root, [&](const Module& m) {
        if (&m != &model.root && std::find(types.begin(), types.end(), m.type) != types.end())
          blocks.push_back(&m);
      });
      if (blocks.empty())
        throw InputError(file, "fsdp.wrap.policy", "the model has no transformer blocks to wrap (no repeated module "
                                                   "type with costs); name them with fsdp.wrap.block_types");
      const std::size_t k = wrap.policy == WrapPolicy::block ? 1 : static_cast<std::size_t>(wrap.every);
      for (std::size_t i = 0; i < blocks.size(); i += k)
        groups.emplace_back(blocks.begin() + i, blocks.begin() + std::min(blocks.size(), i + k));
      break;
    }
    case WrapPolicy::size: {
      // FSDP1's size_based_auto_wrap_policy: bottom-up, a module is wrapped when the
      // parameters not yet wrapped below it reach min_num_params. The root is always a unit.
      std::function<std::int64_t(const Module&)> visit = [&](const Module& m) -> std::int64_t {
        std::int64_t unwrapped = 0;
        for (const Module& c : m.children) unwrapped += visit(c);
        for (const Parameter& p : m.params)
          if (p.tied_to.empty()) unwrapped += p.numel();
        if (&m != &model.root && unwrapped >= wrap.min_num_params) {
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

std::vector<Unit> build_units(const Model& model, const WrapSpec& wrap, const std::string& file) {
  std::vector<std::vector<const Module*>> groups = wrapped_groups(model, wrap, file);

  // Forward (pre-order) position of every module, to order units and find first uses.
  std::map<const Module*, int> position;
  std::map<const Module*, const Module*> parent_of;
  int counter = 0;
  std::function<void(const Module&, const Module*)> number = [&](const Module& m, const Module* parent) {
    position[&m] = counter++;
    parent_of[&m] = parent;
    for (const Module& c : m.children) number(c, &m);
  };
  number(model.root, nullptr);

  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto& group = groups[g];
    std::sort(group.begin(), group.end(), [&](const Module* a, const Module* b) { return position[a] < position[b]; });
    for (const Module* m : group)
      if (parent_of[m] != parent_of[group.front()])
        throw InputError(file, "fsdp.wrap", "modules wrapped as one unit must be siblings: \"" + m->full_name +
                                                "\" and \"" + group.front()->full_name + "\" are not");
  }
  std::sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  std::map<const Module*, int> group_of;  // wrapped module -> unit index
  std::vector<Unit> units(groups.size() + 1);
  units[0].index = 0;
  units[0].name = "<root>";
  units[0].modules = {&model.root};
  units[0].is_root = true;
  group_of[&model.root] = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    Unit& u = units[g + 1];
    u.index = static_cast<int>(g + 1);
    u.name = groups[g].front()->full_name;
    u.modules = groups[g];
    for (const Module* m : groups[g]) {
      if (group_of.count(m))
        throw InputError(file, "fsdp.wrap", "module \"" + m->full_name + "\" is wrapped twice");
      group_of[m] = u.index;
    }
  }

  // The unit of a module: the nearest wrapped ancestor (itself included).
  auto unit_of = [&](const Module* m) {
    while (!group_of.count(m)) m = parent_of[m];
    return group_of[m];
  };
  for (Unit& u : units) {
    if (u.is_root) continue;
    u.parent = unit_of(parent_of[u.modules.front()]);
  }

  // Parameter owners. A tied parameter goes to the innermost unit enclosing all its users.
  std::map<std::string, const Module*> owner_module;
  std::map<std::string, std::vector<int>> users;  // canonical full name -> units using it
  models::for_each_module(model.root, [&](const Module& m) {
    for (const Parameter& p : m.params) {
      const std::string& canonical = p.tied_to.empty() ? p.full_name : p.tied_to;
      users[canonical].push_back(unit_of(&m));
    }
  });
  auto ancestors = [&](int u) {
    std::vector<int> chain;
    for (; u >= 0; u = units[u].parent) chain.push_back(u);
    return chain;
  };
  auto common_unit = [&](const std::vector<int>& list) {
    std::vector<int> common = ancestors(list.front());
    for (int u : list) {
      std::vector<int> chain = ancestors(u);
      std::set<int> in_chain(chain.begin(), chain.end());
      common.erase(std::remove_if(common.begin(), common.end(), [&](int c) { return !in_chain.count(c); }),
                   common.end());
    }
    return common.front();  // the deepest shared ancestor
  };
  for (const Parameter* p : model.parameters()) units[common_unit(users[p->full_name])].params.push_back(p);
  return units;
}

}  // namespace fsdpsim::planner
