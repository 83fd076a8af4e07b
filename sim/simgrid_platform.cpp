#include "sim/simgrid_platform.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace fsdpsim::sim {

const char* to_string(LinkKind k) {
  switch (k) {
    case LinkKind::nvlink_up: return "nvlink_up";
    case LinkKind::nvlink_down: return "nvlink_down";
    case LinkKind::pcie_up: return "pcie_up";
    case LinkKind::pcie_down: return "pcie_down";
    case LinkKind::host_bridge: return "host_bridge";
    case LinkKind::nic_up: return "nic_up";
    case LinkKind::nic_down: return "nic_down";
    case LinkKind::leaf_up: return "leaf_up";
    case LinkKind::leaf_down: return "leaf_down";
    case LinkKind::other: return "other";
  }
  return "other";
}

int default_nodes_per_leaf(const planner::ClusterSpec& cluster) {
  if (cluster.inter_topology == planner::InterNodeTopology::rail_optimized) return 32;
  return std::max(1, 32 / std::max(1, cluster.nics_per_node));
}

namespace {

// Per-node link slots, in this order within a node's block.
// NVSwitch: nvlink_up[G], nvlink_down[G], pcie_up[G], pcie_down[G], nic_up[N], nic_down[N]
// PCIe:     pcie_up[G], pcie_down[G], bridge[1], nic_up[N], nic_down[N]
std::string gbps_text(double bytes_per_second) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g GB/s", bytes_per_second / 1e9);
  return buf;
}

}  // namespace

Platform Platform::build(const planner::ClusterSpec& c, const planner::NcclParams& nccl, const FabricOptions& fabric,
                         int window_nodes) {
  return build_window(c, nccl, fabric, window_nodes, {});
}

Platform Platform::build_nodes(const planner::ClusterSpec& c, const planner::NcclParams& nccl,
                               const FabricOptions& fabric, const std::vector<int>& nodes) {
  if (nodes.empty()) throw std::invalid_argument("a window of chosen nodes needs at least one node");
  return build_window(c, nccl, fabric, 0, nodes);
}

Platform Platform::build_window(const planner::ClusterSpec& c, const planner::NcclParams& nccl,
                                const FabricOptions& fabric, int window_nodes, const std::vector<int>& nodes) {
  Platform p;
  p.nodes_ = c.nodes;
  p.gpn_ = c.gpus_per_node;
  p.window_nodes_ = window_nodes <= 0 ? c.nodes : window_nodes;
  if (p.window_nodes_ > c.nodes || c.nodes % p.window_nodes_ != 0)
    throw std::invalid_argument("a window of " + std::to_string(p.window_nodes_) + " nodes does not divide " +
                                std::to_string(c.nodes) + " nodes");
  // An xGMI mesh is played as per-GPU ports of the GPU's summed xGMI bandwidth, like NVSwitch
  // ports: exact for rings over the whole node (RCCL spreads its channels evenly over every
  // link), optimistic for one pair of GPUs (one link, 1/links of it).
  p.nvswitch_ = c.intra_kind != planner::IntraNodeKind::pcie;
  p.rail_ = c.inter_topology == planner::InterNodeTopology::rail_optimized;
  const int nics_physical = std::max(1, c.nics_per_node);
  p.nics_ = std::min(nics_physical, p.gpn_);
  // More NICs than GPUs: one link per GPU carrying all of its NICs.
  const double nic_bw = c.nic_bandwidth_gbps * 1e9 * nics_physical / p.nics_;
  p.per_leaf_ = fabric.nodes_per_leaf > 0 ? fabric.nodes_per_leaf : default_nodes_per_leaf(c);
  p.per_leaf_ = std::min(p.per_leaf_, std::max(1, c.nodes));
  p.leaves_ = (c.nodes + p.per_leaf_ - 1) / p.per_leaf_;
  p.placement_ = fabric.placement;
  if (!nodes.empty()) {
    // Each chosen node as itself, and each leaf that holds one.
    p.real_node_window_.assign(p.nodes_, -1);
    for (int n : nodes) {
      if (n < 0 || n >= p.nodes_ || p.real_node_window_[n] >= 0)
        throw std::invalid_argument("node " + std::to_string(n) + " is not a node of the cluster's " +
                                    std::to_string(p.nodes_) + " or is named twice");
      p.real_node_window_[n] = 0;
    }
    p.real_leaf_window_.assign(p.leaves_, -1);
    for (int n = 0; n < p.nodes_; ++n)
      if (p.real_node_window_[n] >= 0) {
        p.real_node_window_[n] = static_cast<int>(p.window_node_real_.size());
        p.window_node_real_.push_back(n);
        p.real_leaf_window_[p.leaf_of(n)] = 0;
      }
    for (int l = 0; l < p.leaves_; ++l)
      if (p.real_leaf_window_[l] >= 0) {
        p.real_leaf_window_[l] = static_cast<int>(p.window_leaf_real_.size());
        p.window_leaf_real_.push_back(l);
      }
    p.window_nodes_ = static_cast<int>(p.window_node_real_.size());
    p.window_leaves_ = p.leaves_ > 1 ? static_cast<int>(p.window_leaf_real_.size()) : 0;
  } else if (p.leaves_ > 1) {
    if (p.window_nodes_ == p.nodes_) {
      p.window_leaves_ = p.leaves_;
    } else {
      if (p.placement_ != Placement::packed || p.window_nodes_ % p.per_leaf_ != 0)
        throw std::invalid_argument("a window must hold whole leaves of a packed placement");
      p.window_leaves_ = p.window_nodes_ / p.per_leaf_;
    }
  }

  const int G = p.gpn_, N = p.nics_;
  p.per_node_links_ = p.nvswitch_ ? 4 * G + 2 * N : 2 * G + 1 + 2 * N;
  const double intra_bw = c.intra_bandwidth_gbps * 1e9;
  double pcie_bw = fabric.gpu_pcie_gbps > 0 ? fabric.gpu_pcie_gbps * 1e9 : 0;
  std::string pcie_source = "simulation.fabric.gpu_pcie_gbps";
  if (pcie_bw <= 0) {
    const planner::NcclParams defaults = planner::NcclParams::defaults_for(c);
    const double gbps = nccl.gpu_pcie_bandwidth_gbps > 0 ? nccl.gpu_pcie_bandwidth_gbps : defaults.gpu_pcie_bandwidth_gbps;
    pcie_bw = (gbps > 0 ? gbps : c.nic_bandwidth_gbps) * 1e9;
    pcie_source = "the GPU's PCIe link as NCCL rates it (NcclParams.gpu_pcie_bandwidth_gbps)";
  }
  const double bridge_bw = fabric.host_bridge_gbps > 0 ? fabric.host_bridge_gbps * 1e9 : G * intra_bw;
  const std::string src_intra = c.sources.count("intra_node") ? c.sources.at("intra_node") : "cluster.intra_node.bandwidth_gbps";
  const std::string src_inter = c.sources.count("inter_node") ? c.sources.at("inter_node") : "cluster.inter_node.nic_gbps";
  const double latency = c.inter_latency_seconds;

  p.links_.reserve(static_cast<std::size_t>(p.window_nodes_) * p.per_node_links_ + 4 * p.window_leaves_ * N);
  auto add = [&](std::string name, LinkKind kind, double bw, double lat, std::string source) {
    PlatformLink l;
    l.name = std::move(name);
    l.kind = kind;
    l.bandwidth = l.nominal_bandwidth = bw;
    l.latency_seconds = lat;
    l.source = std::move(source);
    p.links_.push_back(std::move(l));
  };
  for (int n = 0; n < p.window_nodes_; ++n) {
    const std::string node = "node" + std::to_string(p.real_node_of(n));
    if (p.nvswitch_) {
      for (int g = 0; g < G; ++g) add(node + ".gpu" + std::to_string(g) + ".nvlink.up", LinkKind::nvlink_up, intra_bw, 0, src_intra);
      for (int g = 0; g < G; ++g) add(node + ".gpu" + std::to_string(g) + ".nvlink.down", LinkKind::nvlink_down, intra_bw, 0, src_intra);
      for (int g = 0; g < G; ++g) add(node + ".gpu" + std::to_string(g) + ".pcie.up", LinkKind::pcie_up, pcie_bw, 0, pcie_source);
      for (int g = 0; g < G; ++g) add(node + ".gpu" + std::to_string(g) + ".pcie.down", LinkKind::pcie_down, pcie_bw, 0, pcie_source);
    } else {
      for (int g = 0; g < G; ++g) add(node + ".gpu" + std::to_string(g) + ".pcie.up", LinkKind::pcie_up, intra_bw, 0, src_intra);
      for (int g = 0; g < G; ++g) add(node + ".gpu" + std::to_string(g) + ".pcie.down", LinkKind::pcie_down, intra_bw, 0, src_intra);
      add(node + ".bridge", LinkKind::host_bridge, bridge_bw, 0,
          fabric.host_bridge_gbps > 0 ? "simulation.fabric.host_bridge_gbps"
                                      : "assumed: carries every GPU's PCIe link at once (gpus_per_node x intra bandwidth)");
    }
    for (int k = 0; k < N; ++k) add(node + ".nic" + std::to_string(k) + ".up", LinkKind::nic_up, nic_bw, latency, src_inter);
    for (int k = 0; k < N; ++k) add(node + ".nic" + std::to_string(k) + ".down", LinkKind::nic_down, nic_bw, 0, src_inter);
  }
  p.leaf_base_ = static_cast<int>(p.links_.size());
  p.leaf_links_per_leaf_ = p.rail_ ? 2 * N : 2;
  const double over = std::max(1.0, c.oversubscription);
  char buf[256];
  for (int l = 0; l < p.window_leaves_; ++l) {
    const std::string leaf = "leaf" + std::to_string(p.window_leaf_real_.empty() ? l : p.window_leaf_real_[l]);
    if (p.rail_) {
      const double nominal = p.per_leaf_ * nic_bw;
      std::snprintf(buf, sizeof buf, "%d nodes per rail leaf x NIC %s / oversubscription %g", p.per_leaf_,
                    gbps_text(nic_bw).c_str(), over);
      for (int k = 0; k < N; ++k) {
        add(leaf + ".rail" + std::to_string(k) + ".up", LinkKind::leaf_up, nominal / over, latency, buf);
        p.links_.back().nominal_bandwidth = nominal;
        add(leaf + ".rail" + std::to_string(k) + ".down", LinkKind::leaf_down, nominal / over, 0, buf);
        p.links_.back().nominal_bandwidth = nominal;
      }
    } else {
      const double nominal = p.per_leaf_ * N * nic_bw;
      std::snprintf(buf, sizeof buf, "%d nodes per leaf x %d NICs x %s / oversubscription %g", p.per_leaf_, N,
                    gbps_text(nic_bw).c_str(), over);
      add(leaf + ".up", LinkKind::leaf_up, nominal / over, latency, buf);
      p.links_.back().nominal_bandwidth = nominal;
      add(leaf + ".down", LinkKind::leaf_down, nominal / over, 0, buf);
      p.links_.back().nominal_bandwidth = nominal;
    }
  }
  return p;
}

int Platform::leaf_of(int node) const {
  if (leaves_ <= 1) return 0;
  return placement_ == Placement::packed ? node / per_leaf_ : node % leaves_;
}

std::string Platform::host_name(int window_rank) const {
  return "node" + std::to_string(real_node_of(window_rank / gpn_)) + ".gpu" + std::to_string(window_rank % gpn_);
}

int Platform::link_index(int n, LinkKind kind, int i) const {
  const int G = gpn_, N = nics_;
  int off = 0;
  if (nvswitch_) {
    switch (kind) {
      case LinkKind::nvlink_up: off = i; break;
      case LinkKind::nvlink_down: off = G + i; break;
      case LinkKind::pcie_up: off = 2 * G + i; break;
      case LinkKind::pcie_down: off = 3 * G + i; break;
      case LinkKind::nic_up: off = 4 * G + i; break;
      case LinkKind::nic_down: off = 4 * G + N + i; break;
      default: throw std::logic_error("no such link in an NVSwitch node");
    }
  } else {
    switch (kind) {
      case LinkKind::pcie_up: off = i; break;
      case LinkKind::pcie_down: off = G + i; break;
      case LinkKind::host_bridge: off = 2 * G; break;
      case LinkKind::nic_up: off = 2 * G + 1 + i; break;
      case LinkKind::nic_down: off = 2 * G + 1 + N + i; break;
      default: throw std::logic_error("no such link in a PCIe node");
    }
  }
  return n * per_node_links_ + off;
}

int Platform::leaf_link(int wl, int rail, bool up) const {
  const int base = leaf_base_ + wl * leaf_links_per_leaf_;
  if (rail_) return base + 2 * rail + (up ? 0 : 1);
  return base + (up ? 0 : 1);
}

std::vector<int> Platform::route(int src, int dst) const {
  std::vector<int> r;
  if (src == dst) return r;
  const int na = node_of(src), nb = node_of(dst), ga = src % gpn_, gb = dst % gpn_;
  const int wa = window_node_of(na), wb = window_node_of(nb);
  if (wa < 0 || wb < 0)
    throw std::logic_error("a route from rank " + std::to_string(src) + " to rank " + std::to_string(dst) +
                           " leaves the window of whole leaves");
  if (na == nb) {
    if (nvswitch_) {
      r = {link_index(wa, LinkKind::nvlink_up, ga), link_index(wa, LinkKind::nvlink_down, gb)};
    } else {
      r = {link_index(wa, LinkKind::pcie_up, ga), link_index(wa, LinkKind::host_bridge, 0),
           link_index(wa, LinkKind::pcie_down, gb)};
    }
    return r;
  }
  const int k = nic_of(gb);
  if (nvswitch_) {
    if (nic_of(ga) != k) {  // PXN: over NVLink to the GPU of the destination's rail
      r.push_back(link_index(wa, LinkKind::nvlink_up, ga));
      r.push_back(link_index(wa, LinkKind::nvlink_down, gb));
      r.push_back(link_index(wa, LinkKind::pcie_up, gb));
    } else {
      r.push_back(link_index(wa, LinkKind::pcie_up, ga));
    }
    r.push_back(link_index(wa, LinkKind::nic_up, k));
  } else {
    r.push_back(link_index(wa, LinkKind::pcie_up, ga));
    r.push_back(link_index(wa, LinkKind::host_bridge, 0));
    r.push_back(link_index(wa, LinkKind::nic_up, k));
  }
  const int la = leaf_of(na), lb = leaf_of(nb);
  if (la != lb) {
    r.push_back(leaf_link(window_leaf_of(la), k, true));
    r.push_back(leaf_link(window_leaf_of(lb), k, false));
  }
  r.push_back(link_index(wb, LinkKind::nic_down, k));
  if (nvswitch_) {
    r.push_back(link_index(wb, LinkKind::pcie_down, gb));
  } else {
    r.push_back(link_index(wb, LinkKind::host_bridge, 0));
    r.push_back(link_index(wb, LinkKind::pcie_down, gb));
  }
  return r;
}

double Platform::route_latency(const std::vector<int>& route) const {
  double l = 0;
  for (int i : route) l += links_[i].latency_seconds;
  return l;
}

int Platform::scale_links(const std::string& pattern, double factor) {
  int matched = 0;
  for (PlatformLink& l : links_)
    if (fnmatch(pattern.c_str(), l.name.c_str(), 0) == 0) {
      l.bandwidth *= factor;
      ++matched;
    }
  return matched;
}

std::string Platform::description() const {
  std::ostringstream out;
  out << nodes_ << " node" << (nodes_ > 1 ? "s" : "") << " x " << gpn_ << " GPUs, "
      << (nvswitch_ ? "NVSwitch" : "PCIe host bridge");
  if (!links_.empty()) out << " " << gbps_text(links_[0].nominal_bandwidth) << " per GPU";
  if (nodes_ > 1) {
    out << ", " << nics_ << " NIC" << (nics_ > 1 ? "s" : "") << " per node, "
        << (rail_ ? "rail-optimized" : "fat-tree") << " leaves of " << per_leaf_ << " node" << (per_leaf_ > 1 ? "s" : "")
        << " (" << leaves_ << " lea" << (leaves_ > 1 ? "ves" : "f") << ", " << to_string(placement_) << ")";
  }
  return out.str();
}

std::string Platform::to_xml(const std::vector<std::pair<int, int>>& pairs) const {
  std::ostringstream out;
  out.precision(17);
  out << "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      << "<!-- fsdpsim: " << description() << " -->\n"
      << "<platform version=\"4.1\">\n  <zone id=\"fsdpsim\" routing=\"Full\">\n";
  for (int r = 0; r < window_ranks(); ++r) out << "    <host id=\"" << host_name(r) << "\" speed=\"1Gf\"/>\n";
  for (const PlatformLink& l : links_)
    out << "    <link id=\"" << l.name << "\" bandwidth=\"" << l.bandwidth << "Bps\" latency=\"" << l.latency_seconds
        << "s\"/>\n";
  for (const auto& [src, dst] : pairs) {
    const std::vector<int> r = route(src, dst);
    if (r.empty()) continue;
    out << "    <route src=\"" << host_name(window_rank(src)) << "\" dst=\"" << host_name(window_rank(dst))
        << "\" symmetrical=\"NO\">";
    for (int i : r) out << "<link_ctn id=\"" << links_[i].name << "\"/>";
    out << "</route>\n";
  }
  out << "  </zone>\n</platform>\n";
  return out.str();
}

}  // namespace fsdpsim::sim
