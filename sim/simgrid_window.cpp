// The proof of a window of whole leaves (sim/internal/simgrid_window.h): colour refinement of the
// flow-link graph of the whole cluster and of the window together.
#include "sim/internal/simgrid_window.h"

#include <algorithm>
#include <cstdio>
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
struct Palette {
  std::map<std::vector<long long>, int> ids;
  int id(const std::vector<long long>& signature) {
    return ids.emplace(signature, static_cast<int>(ids.size())).first->second;
  }
};

std::string group_name(const planner::Schedule& s, const GroupUse& g) {
  return "group \"" + s.groups[g.group].name + "\"" + (g.pattern == FlowPattern::all_to_all ? " (all-to-all)" : "");
}

}  // namespace

int refine_colours(const std::vector<std::vector<int>>& route, std::vector<int>& flow_colour,
                   std::vector<int>& link_colour) {
  const int flows = static_cast<int>(flow_colour.size()), links = static_cast<int>(link_colour.size());
  std::vector<std::vector<int>> carried(links);  // link -> flows
  for (int v = 0; v < flows; ++v)
    for (int l : route[v]) carried[l].push_back(v);
  // Each new colour keeps the old one in its signature, so classes only split: the colouring is
  // stable once a round splits none (at most flows + links rounds).
  auto classes = [](const std::vector<int>& c) { return std::set<int>(c.begin(), c.end()).size(); };
  std::size_t flow_classes = classes(flow_colour), link_classes = classes(link_colour);
  std::vector<long long> sig;
  for (int rounds = 1;; ++rounds) {
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
    const std::size_t f = classes(flow_colour), l = classes(link_colour);
    if (f == flow_classes && l == link_classes) return rounds;
    flow_classes = f;
    link_classes = l;
  }
}

WindowProver::WindowProver(const planner::Schedule& schedule, std::vector<GroupUse> groups, const Platform& whole)
    : schedule_(&schedule), groups_(std::move(groups)), whole_(std::make_unique<Graph>(flow_graph(groups_, whole))) {}

WindowProver::~WindowProver() = default;

WindowProof WindowProver::prove(const Platform& window) const {
  const planner::Schedule& s = *schedule_;
  const std::vector<GroupUse>& groups = groups_;
  WindowProof proof;
  const FlowGraph window_graph = flow_graph(groups, window);
  const FlowGraph* graphs[2] = {whole_.get(), &window_graph};
  // One vertex set: the cluster's flows and links first, then the window's.
  std::vector<int> flow_base(2), link_base(2);
  int flows = 0, links = 0;
  for (int k = 0; k < 2; ++k) {
    flow_base[k] = flows;
    link_base[k] = links;
    flows += static_cast<int>(graphs[k]->flow_group.size());
    links += static_cast<int>(graphs[k]->link_figures.size());
  }
  std::vector<std::vector<int>> route(flows);  // flow -> links
  std::vector<int> flow_colour(flows), link_colour(links);
  {
    // Initial colours: flows by flow group and fraction, links by bandwidth and latency (what
    // SimGrid's sharing sees; a flow's latency is its links').
    std::map<std::pair<int, double>, int> flow_ids;
    std::map<std::pair<double, double>, int> link_ids;
    for (int k = 0; k < 2; ++k) {
      const FlowGraph& g = *graphs[k];
      for (std::size_t f = 0; f < g.flow_group.size(); ++f) {
        const int v = flow_base[k] + static_cast<int>(f);
        flow_colour[v] = flow_ids.emplace(std::make_pair(g.flow_group[f], g.flow_fraction[f]),
                                          static_cast<int>(flow_ids.size()))
                             .first->second;
        for (int l : g.flow_links[f]) route[v].push_back(link_base[k] + l);
      }
      for (std::size_t l = 0; l < g.link_figures.size(); ++l)
        link_colour[link_base[k] + static_cast<int>(l)] =
            link_ids.emplace(g.link_figures[l], static_cast<int>(link_ids.size())).first->second;
    }
  }
  proof.rounds = refine_colours(route, flow_colour, link_colour);
  // Per flow group: the colours of its flows in the cluster, in the window, and per instance of
  // the cluster.
  for (std::size_t k = 0; k < groups.size(); ++k) {
    std::set<int> in_whole, in_window;
    std::map<int, std::set<int>> per_instance;
    for (std::size_t f = 0; f < graphs[0]->flow_group.size(); ++f)
      if (graphs[0]->flow_group[f] == static_cast<int>(k)) {
        const int c = flow_colour[flow_base[0] + static_cast<int>(f)];
        in_whole.insert(c);
        per_instance[graphs[0]->flow_instance[f]].insert(c);
      }
    for (std::size_t f = 0; f < graphs[1]->flow_group.size(); ++f)
      if (graphs[1]->flow_group[f] == static_cast<int>(k)) in_window.insert(flow_colour[flow_base[1] + static_cast<int>(f)]);
    for (const auto& [inst, colours] : per_instance)
      if (colours != in_whole) {
        proof.reason = "the ranks are not alike: the flows of instance " + std::to_string(inst) + " of " +
                       group_name(s, groups[k]) + " meet other link loads than those of another instance";
        return proof;
      }
    if (in_window != in_whole) {
      proof.reason = "the flows of " + group_name(s, groups[k]) + " in a window of " +
                     std::to_string(window.window_nodes()) + " nodes meet other link loads than in the whole cluster";
      return proof;
    }
  }
  proof.exact = true;
  return proof;
}

}  // namespace fsdpsim::sim::detail
