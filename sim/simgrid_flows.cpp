#include "sim/internal/simgrid_flows.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace fsdpsim::sim {

GroupLayout group_layout(const planner::Schedule& schedule, int group) {
  if (group < 0 || group >= static_cast<int>(schedule.groups.size()))
    throw std::invalid_argument("no process group " + std::to_string(group) + " in the schedule");
  const planner::ProcessGroup& g = schedule.groups[group];
  const int world = schedule.world_size;
  if (g.ranks < 1 || world % g.ranks != 0)
    throw std::invalid_argument("process group \"" + g.name + "\" of " + std::to_string(g.ranks) +
                                " ranks does not divide the world of " + std::to_string(world));
  if (g.stride < 1 || (world / g.ranks) % g.stride != 0)
    throw std::invalid_argument("process group \"" + g.name + "\" of " + std::to_string(g.ranks) + " ranks with stride " +
                                std::to_string(g.stride) + " does not tile the world of " + std::to_string(world));
  GroupLayout l;
  l.size = g.ranks;
  l.stride = g.stride;  // the layout the planner wrote (planner::ProcessGroup)
  l.strided = g.ranks > 1 && g.stride > 1;
  return l;
}

int group_instances(const GroupLayout& l, int world) { return world / l.size; }

// As planner::group_instance_of and planner::group_members, on the layout alone.
int group_instance(const GroupLayout& l, int rank) {
  const int span = l.size * l.stride;
  return (rank / span) * l.stride + rank % l.stride;
}

std::vector<int> group_members(const GroupLayout& l, int world, int instance) {
  std::vector<int> m(l.size);
  const int first = (instance / l.stride) * l.size * l.stride + instance % l.stride;
  for (int t = 0; t < l.size; ++t) m[t] = first + t * l.stride;
  (void)world;
  return m;
}

std::vector<int> window_instances(const GroupLayout& l, const Platform& p) {
  const int wr = p.window_ranks();
  std::vector<int> out;
  if (p.node_window()) {
    // Instances with a member on a window node (the window holds real ranks, not images).
    std::vector<char> seen(static_cast<std::size_t>(group_instances(l, p.world())), 0);
    for (int w = 0; w < wr; ++w) seen[group_instance(l, p.real_rank(w))] = 1;
    for (int i = 0; i < static_cast<int>(seen.size()); ++i)
      if (seen[i]) out.push_back(i);
  } else if (l.strided) {
    for (int i = 0; i < std::min(l.stride, wr); ++i) out.push_back(i);
  } else {
    const int n = (wr + l.size - 1) / l.size;
    for (int i = 0; i < n; ++i) out.push_back(i);
  }
  return out;
}

FlowPattern flow_pattern(planner::OpKind kind) {
  return kind == planner::OpKind::all_to_all ? FlowPattern::all_to_all : FlowPattern::ring;
}

int ring_steps(planner::OpKind kind, int ranks) {
  if (ranks <= 1 || kind == planner::OpKind::all_to_all) return 1;
  return kind == planner::OpKind::all_reduce ? 2 * (ranks - 1) : ranks - 1;
}

std::vector<Ring> rings(const GroupLayout& layout, int instance, const Platform& p) {
  const int G = p.gpus_per_node();
  const std::vector<int> members = group_members(layout, p.world(), instance);
  if (members.size() < 2) return {};
  // Members by node, in ring order (members are sorted by rank, hence by node).
  std::vector<int> nodes;
  std::vector<std::vector<int>> locals;
  for (int m : members) {
    const int node = p.node_of(m);
    if (nodes.empty() || nodes.back() != node) {
      nodes.push_back(node);
      locals.emplace_back();
    }
    locals.back().push_back(m % G);
  }
  if (nodes.size() == 1) return {{members, 1.0}};
  // Rails: the distinct NICs of the first node's local GPUs (the layouts are regular: every
  // node holds the same local indices). Ring r enters each node at its GPU entry[r] (the node's
  // first local GPU when it has no such GPU), visits the node's GPUs from there in order, and
  // leaves from the one before it for the next node.
  const std::vector<int>& lset = locals.front();
  std::vector<int> rails, entry;
  for (int l : lset) {
    const int k = p.nic_of(l);
    if (std::find(rails.begin(), rails.end(), k) == rails.end()) {
      rails.push_back(k);
      entry.push_back(l);
    }
  }
  const double share = 1.0 / static_cast<double>(rails.size());
  std::vector<Ring> out(rails.size());
  for (std::size_t r = 0; r < rails.size(); ++r) {
    out[r].share = share;
    for (std::size_t j = 0; j < nodes.size(); ++j) {
      const std::vector<int>& loc = locals[j];
      const int ppn = static_cast<int>(loc.size());
      auto start = std::find(loc.begin(), loc.end(), entry[r]);
      const int s = start == loc.end() ? 0 : static_cast<int>(start - loc.begin());
      for (int i = 0; i < ppn; ++i) out[r].ranks.push_back(nodes[j] * G + loc[(s + i) % ppn]);
    }
  }
  return out;
}

std::vector<RingEdge> ring_edges(const GroupLayout& layout, int instance, const Platform& p) {
  std::map<std::pair<int, int>, double> merged;
  for (const Ring& ring : rings(layout, instance, p)) {
    // A period: the edges whose source lies in the window, to real destinations (their images
    // receive). A window of chosen nodes: the ring contracted to its members in the window, so
    // that the edge leaving the window lands on the member where the ring comes back into it.
    std::vector<int> visit;
    if (p.node_window()) {
      for (int r : ring.ranks)
        if (p.in_window(r)) visit.push_back(r);
    }
    const std::vector<int>& cycle = p.node_window() ? visit : ring.ranks;
    const std::size_t n = cycle.size();
    for (std::size_t i = 0; i < n; ++i) {
      const int src = cycle[i], dst = cycle[(i + 1) % n];
      if (!p.in_window(src) || src == dst) continue;
      merged[{src, dst}] += ring.share;
    }
  }
  std::vector<RingEdge> out;
  out.reserve(merged.size());
  for (const auto& [key, fraction] : merged) out.push_back({key.first, key.second, fraction});
  return out;
}

std::vector<RingEdge> all_to_all_edges(const GroupLayout& layout, int instance, const Platform& p) {
  const std::vector<int> members = group_members(layout, p.world(), instance);
  const int n = static_cast<int>(members.size());
  if (n < 2) return {};
  const double fraction = 1.0 / (n - 1);
  std::vector<RingEdge> out;
  // A window of chosen nodes keeps the flows between its own members only: an instance that straddles the
  // window's edge loads the window's links less than the cluster's, which the window's proof
  // (simgrid_window.h) finds.
  for (int src : members) {
    if (!p.in_window(src)) continue;
    for (int dst : members)
      if (dst != src && (!p.node_window() || p.in_window(dst))) out.push_back({src, dst, fraction});
  }
  return out;
}

std::vector<RingEdge> collective_edges(FlowPattern pattern, const GroupLayout& layout, int instance, const Platform& p) {
  return pattern == FlowPattern::all_to_all ? all_to_all_edges(layout, instance, p) : ring_edges(layout, instance, p);
}

}  // namespace fsdpsim::sim
