// The proof of a window of whole leaves (sim/internal/simgrid_window.h): colour refinement of the
// flow-link graph of the whole cluster and of the window together.
#include "sim/internal/simgrid_window.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "sim/internal/simgrid_flows.h"

namespace fsdpsim::sim::detail {

// The flows of one platform (the whole cluster or a window) and the links they cross.
struct WindowProver::Graph {
  std::vector<int> flow_group;               // the flow group's index in `groups`
  std::vector<int> flow_instance;            // the group instance it belongs to
  std::vector<double> flow_fraction;         // of the per-rank wire bytes
  std::vector<std::vector<int>> flow_links;  // route, as indices into the platform's links
  std::vector<std::pair<double, double>> link_figures;  // bandwidth, latency
};

namespace {

using FlowGraph = WindowProver::Graph;

FlowGraph flow_graph(const std::vector<GroupUse>& groups, const Platform& p) {
  FlowGraph g;
  for (std::size_t k = 0; k < groups.size(); ++k)
    for (int inst : window_instances(groups[k].layout, p))
      for (const RingEdge& e : collective_edges(groups[k].pattern, groups[k].layout, inst, p)) {
        g.flow_group.push_back(static_cast<int>(k));
        g.flow_instance.push_back(inst);
        g.flow_fraction.push_back(e.fraction);
        g.flow_links.push_back(p.route(e.src, e.dst));
      }
  for (const PlatformLink& l : p.links()) g.link_figures.push_back({l.bandwidth, l.latency_seconds});
  return g;
}

// Colour ids of signatures, in order of first appearance.
struct SignatureHash {
  std::size_t operator()(const std::vector<long long>& v) const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    for (long long x : v) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }
};
struct Palette {
  std::unordered_map<std::vector<long long>, int, SignatureHash> ids;
  int id(const std::vector<long long>& signature) {
    return ids.emplace(signature, static_cast<int>(ids.size())).first->second;
  }
};

std::string group_name(const planner::Schedule& s, const GroupUse& g) {
  return "group \"" + s.groups[g.group].name + "\"" + (g.pattern == FlowPattern::all_to_all ? " (all-to-all)" : "");
}

}  // namespace

Refinement refine_colours(const std::vector<std::vector<int>>& route, std::vector<int>& flow_colour,
                          std::vector<int>& link_colour, int max_rounds,
                          const std::function<bool(const std::vector<int>&)>& refuted) {
  const int flows = static_cast<int>(flow_colour.size()), links = static_cast<int>(link_colour.size());
  std::vector<std::vector<int>> carried(links);  // link -> flows
  for (int v = 0; v < flows; ++v)
    for (int l : route[v]) carried[l].push_back(v);
  // Each new colour keeps the old one in its signature, so classes only split: the colouring is
  // stable once a round splits none.
  auto classes = [](std::vector<int> c) {
    std::sort(c.begin(), c.end());
    return static_cast<std::size_t>(std::unique(c.begin(), c.end()) - c.begin());
  };
  std::size_t flow_classes = classes(flow_colour), link_classes = classes(link_colour);
  std::vector<long long> sig;
  Refinement out;
  while (out.rounds < max_rounds) {
    ++out.rounds;
    Palette fp, lp;
    std::vector<int> next_flow(flows), next_link(links);
    for (int v = 0; v < flows; ++v) {
      sig.assign(1, flow_colour[v]);
      for (int l : route[v]) sig.push_back(link_colour[l]);
      std::sort(sig.begin() + 1, sig.end());
      next_flow[v] = fp.id(sig);
    }
    for (int l = 0; l < links; ++l) {
      sig.assign(1, link_colour[l]);
      for (int v : carried[l]) sig.push_back(flow_colour[v]);
      std::sort(sig.begin() + 1, sig.end());
      next_link[l] = lp.id(sig);
    }
    flow_colour.swap(next_flow);
    link_colour.swap(next_link);
    const std::size_t f = fp.ids.size(), l = lp.ids.size();
    if (f == flow_classes && l == link_classes) {
      out.stable = true;
      return out;
    }
    flow_classes = f;
    link_classes = l;
    if (refuted && refuted(flow_colour)) return out;
  }
  return out;
}

namespace {

// How long a proof may refine before it gives up, in link crossings visited (a round visits each
// flow's route twice, once from each side): 10^8, a few seconds here. A round splits colours one
// hop further from where the graph differs, so rounds grow with the distance that a difference
// travels: DGX rings settle in 7 to 11 rounds (a node's in and out flows share no link), PCIe
// boxes in about twice the leaf's nodes (the host bridge carries both, so a node's colour tells
// its distance to the leaf's edge). A cluster that has not settled within the budget is taken
// whole rather than spend the run's time on its proof.
constexpr double kMaxCrossings = 1e8;

int max_rounds(const std::vector<std::vector<int>>& route) {
  double crossings = 0;
  for (const std::vector<int>& r : route) crossings += static_cast<double>(r.size());
  return static_cast<int>(std::clamp(kMaxCrossings / std::max(1.0, 2 * crossings), 64.0, 1e6));
}

// The flows and links of the given graphs taken together, coloured: flows by flow group and
// fraction, links by bandwidth and latency (what SimGrid's sharing sees; a flow's latency is its
// links'). Flows and links graph after graph.
struct Coloured {
  std::vector<std::vector<int>> route;  // flow -> links
  std::vector<int> flow_colour, link_colour;
};

Coloured initial_colours(const std::vector<const FlowGraph*>& graphs) {
  Coloured c;
  std::map<std::pair<int, double>, int> flow_ids;
  std::map<std::pair<double, double>, int> link_ids;
  for (const FlowGraph* g : graphs) {
    const int link_base = static_cast<int>(c.link_colour.size());
    for (std::size_t f = 0; f < g->flow_group.size(); ++f) {
      c.flow_colour.push_back(
          flow_ids.emplace(std::make_pair(g->flow_group[f], g->flow_fraction[f]), static_cast<int>(flow_ids.size()))
              .first->second);
      c.route.emplace_back();
      for (int l : g->flow_links[f]) c.route.back().push_back(link_base + l);
    }
    for (const auto& figures : g->link_figures)
      c.link_colour.push_back(link_ids.emplace(figures, static_cast<int>(link_ids.size())).first->second);
  }
  return c;
}

// The first group (index) whose instances in `g` do not all have every colour of the group's flows
// there (flow f of g has colour[f]); -1 when every instance does. Refinement only splits colours,
// so once an instance lacks a colour of its group, it lacks it in every later round.
int group_with_unlike_instances(const FlowGraph& g, const std::vector<int>& colour, int groups, int* instance) {
  for (int k = 0; k < groups; ++k) {
    std::set<int> all;
    std::map<int, std::set<int>> per_instance;
    for (std::size_t f = 0; f < g.flow_group.size(); ++f)
      if (g.flow_group[f] == k) {
        all.insert(colour[f]);
        per_instance[g.flow_instance[f]].insert(colour[f]);
      }
    for (const auto& [inst, colours] : per_instance)
      if (colours != all) {
        *instance = inst;
        return k;
      }
  }
  return -1;
}

// The first group whose flows in the window (colours from `base` on) do not have the colours of
// its flows in the cluster (colours before `base`); -1 when every group's do. Once a colour is on
// one side only, its splits are too.
int group_unlike_the_cluster(const FlowGraph& whole, const FlowGraph& window, const std::vector<int>& colour,
                             int groups) {
  const std::size_t base = whole.flow_group.size();
  for (int k = 0; k < groups; ++k) {
    std::set<int> in_whole, in_window;
    for (std::size_t f = 0; f < base; ++f)
      if (whole.flow_group[f] == k) in_whole.insert(colour[f]);
    for (std::size_t f = 0; f < window.flow_group.size(); ++f)
      if (window.flow_group[f] == k) in_window.insert(colour[base + f]);
    if (in_window != in_whole) return k;
  }
  return -1;
}

}  // namespace

WindowProver::WindowProver(const planner::Schedule& schedule, std::vector<GroupUse> groups, const Platform& whole)
    : schedule_(&schedule), groups_(std::move(groups)), whole_(std::make_unique<Graph>(flow_graph(groups_, whole))) {
  // Ranks alike: every instance of a group has every colour of the group's flows. Refining the
  // cluster alone splits its vertices as refining it beside a window does (a vertex's colour
  // depends on its own graph only), so this holds for every window or for none.
  const int n = static_cast<int>(groups_.size());
  Coloured c = initial_colours({whole_.get()});
  int instance = -1;
  const int rounds = max_rounds(c.route);
  const Refinement r = refine_colours(c.route, c.flow_colour, c.link_colour, rounds, [&](const std::vector<int>& colour) {
    return group_with_unlike_instances(*whole_, colour, n, &instance) >= 0;
  });
  const int k = group_with_unlike_instances(*whole_, c.flow_colour, n, &instance);
  if (k >= 0)
    ranks_differ_ = "the ranks are not alike: the flows of instance " + std::to_string(instance) + " of " +
                    group_name(schedule, groups_[k]) + " meet other link loads than those of another instance";
  else if (!r.stable)
    ranks_differ_ = "the colour refinement of the cluster's flows and links did not settle in " +
                    std::to_string(rounds) + " rounds";
}

WindowProver::~WindowProver() = default;

WindowProof WindowProver::prove(const Platform& window) const {
  WindowProof proof;
  if (!ranks_differ_.empty()) {
    proof.reason = ranks_differ_;
    return proof;
  }
  const FlowGraph window_graph = flow_graph(groups_, window);
  const int n = static_cast<int>(groups_.size());
  Coloured c = initial_colours({whole_.get(), &window_graph});
  const int rounds = max_rounds(c.route);
  const Refinement r = refine_colours(c.route, c.flow_colour, c.link_colour, rounds, [&](const std::vector<int>& colour) {
    return group_unlike_the_cluster(*whole_, window_graph, colour, n) >= 0;
  });
  proof.rounds = r.rounds;
  const int k = group_unlike_the_cluster(*whole_, window_graph, c.flow_colour, n);
  if (k >= 0) {
    proof.reason = "the flows of " + group_name(*schedule_, groups_[k]) + " in a window of " +
                   std::to_string(window.window_nodes()) + " nodes meet other link loads than in the whole cluster";
  } else if (!r.stable) {
    proof.reason = "the colour refinement of a window of " + std::to_string(window.window_nodes()) +
                   " nodes beside the cluster did not settle in " + std::to_string(rounds) + " rounds";
  } else {
    proof.exact = true;
  }
  return proof;
}

}  // namespace fsdpsim::sim::detail
