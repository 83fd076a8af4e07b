// The simulated cluster as links and routes, built from a scenario's ClusterSpec (or read
// from a user's SimGrid platform XML, see simgrid_engine.h).
//
// Each GPU is a host named "node<n>.gpu<g>". Links are one-directional (SimGrid SHARED
// links, one per direction) with the bandwidth of the figure they stand for:
//   NVSwitch node:  node<n>.gpu<g>.nvlink.{up,down}  GPU <-> NVSwitch port (cluster.intra_node)
//                   node<n>.gpu<g>.pcie.{up,down}    GPU <-> its NIC's PCIe switch (NCCL's PCIe figure)
//   PCIe node:      node<n>.gpu<g>.pcie.{up,down}    GPU <-> host bridge (cluster.intra_node)
//                   node<n>.bridge                    the shared host bridge (both directions)
//   every node:     node<n>.nic<k>.{up,down}         NIC <-> leaf switch (cluster.inter_node.nic_gbps)
//   between leaves: leaf<l>[.rail<k>].{up,down}      a leaf's uplinks to the spine layer, one
//                                                     aggregate per leaf (per rail leaf when
//                                                     rail-optimized): perfect ECMP over the spines,
//                                                     capacity = nodes_per_leaf x NIC bandwidth
//                                                     / oversubscription
// Routes (one per ordered pair of GPUs, as NCCL's rings use them):
//   same node:      NVSwitch  nvlink.up(a) -> nvlink.down(b)
//                   PCIe      pcie.up(a) -> bridge -> pcie.down(b)
//   other node:     through the NIC of the destination's rail (the NIC of its local index).
//                   NVSwitch: the source's own PCIe path when it shares that NIC, else PXN (over
//                   NVLink to the local GPU of the destination's index, then its PCIe path);
//                   leaf uplink and downlink when the nodes sit under different leaves;
//                   then the destination's NIC and PCIe path (PCIe nodes: through both bridges).
//
// Windows (rank symmetry): a platform may hold a window of a larger cluster, of one of two kinds.
// - A period: the first `window_nodes` nodes. Ranks and links of real node u live in window node
//   u mod window_nodes, leaf l in window leaf l mod window_leaves: a flow from a window rank to a
//   rank outside the window (the ring edge that leaves the window) lands on the image of its
//   destination, through the links the real edge crosses. The window is a period of the whole
//   cluster when every group's layout repeats with it (simgrid_engine.cpp chooses it).
// - Chosen nodes (build_nodes): some real nodes, each as itself (host and link names keep the
//   real node and leaf numbers; a leaf's uplinks exist when one of its nodes is in the window). No
//   real node outside it has an image: a ring that leaves the window is contracted to its members
//   inside it (simgrid_flows.h), so that the edge leaving the window lands where the ring comes
//   back into it, through the source's leaf uplink and the destination's downlink when those
//   differ. A node count that is not a multiple of the leaf has no period shorter than the
//   cluster, but a few nodes of a full leaf and the partial leaf can carry what every node
//   carries; whether they do is proved per run (simgrid_window.h), never assumed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "planner/collectives.h"
#include "planner/hardware.h"
#include "sim/simgrid_options.h"

namespace fsdpsim::sim {

enum class LinkKind { nvlink_up, nvlink_down, pcie_up, pcie_down, host_bridge, nic_up, nic_down, leaf_up, leaf_down, other };
const char* to_string(LinkKind k);

struct PlatformLink {
  std::string name;
  LinkKind kind = LinkKind::other;
  double bandwidth = 0;          // bytes/s as simulated (oversubscription, slow-link factors applied)
  double nominal_bandwidth = 0;  // bytes/s of the ideal fabric: what NCCL's model assumes
  double latency_seconds = 0;
  std::string source;            // where the figure comes from
};

// Leaf-switch size when the scenario does not say: a 64-port leaf with 32 ports down
// (non-blocking). Rail-optimized: 32 nodes per rail leaf (the DGX SuperPOD scalable unit of
// 32 nodes); fat-tree: 32 / NICs per node nodes (4 for 8-NIC nodes). Assumed; see docs/simgrid.md.
int default_nodes_per_leaf(const planner::ClusterSpec& cluster);

class Platform {
 public:
  // `window_nodes` must divide cluster.nodes (0: the whole cluster).
  static Platform build(const planner::ClusterSpec& cluster, const planner::NcclParams& nccl,
                        const FabricOptions& fabric, int window_nodes = 0);
  // A window of the real nodes `nodes` (at least one, each named once), every one as itself.
  static Platform build_nodes(const planner::ClusterSpec& cluster, const planner::NcclParams& nccl,
                              const FabricOptions& fabric, const std::vector<int>& nodes);

  int nodes() const { return nodes_; }                // real cluster
  int window_nodes() const { return window_nodes_; }
  int gpus_per_node() const { return gpn_; }
  int world() const { return nodes_ * gpn_; }
  int window_ranks() const { return window_nodes_ * gpn_; }
  int nics_per_node() const { return nics_; }          // NIC links per node (at most one per GPU)
  int nodes_per_leaf() const { return per_leaf_; }
  int leaves() const { return leaves_; }               // real
  int window_leaves() const { return window_leaves_; }
  Placement placement() const { return placement_; }
  bool nvswitch() const { return nvswitch_; }
  bool rail_optimized() const { return rail_; }

  int node_of(int rank) const { return rank / gpn_; }
  int nic_of(int gpu) const { return gpu * nics_ / gpn_; }  // NIC a local GPU index uses
  int leaf_of(int node) const;                              // real leaf of a real node
  // A window of chosen nodes (build_nodes) rather than a period.
  bool node_window() const { return !real_node_window_.empty(); }
  // The real nodes of a window of chosen nodes, ascending (empty for a period).
  const std::vector<int>& window_node_list() const { return window_node_real_; }
  // The window node that stands for real node `node`: its image in a period, itself in a window
  // of chosen nodes (-1 when it lies outside).
  int window_node_of(int node) const { return real_node_window_.empty() ? node % window_nodes_ : real_node_window_[node]; }
  int real_node_of(int window_node) const { return window_node_real_.empty() ? window_node : window_node_real_[window_node]; }
  // The window rank of real rank `rank` (-1 outside a window of chosen nodes) and back.
  int window_rank(int rank) const {
    const int w = window_node_of(node_of(rank));
    return w < 0 ? -1 : w * gpn_ + rank % gpn_;
  }
  int real_rank(int window_rank) const { return real_node_of(window_rank / gpn_) * gpn_ + window_rank % gpn_; }
  // Whether real rank `rank` runs on a window host as itself (not as an image).
  bool in_window(int rank) const {
    return real_node_window_.empty() ? rank < window_ranks() : real_node_window_[node_of(rank)] >= 0;
  }
  std::string host_name(int window_rank) const;

  // The links a flow from real rank `src` (in the window) to real rank `dst` crosses, as
  // indices into links(). Empty for src == dst.
  std::vector<int> route(int src, int dst) const;
  double route_latency(const std::vector<int>& route) const;

  const std::vector<PlatformLink>& links() const { return links_; }
  std::vector<PlatformLink>& links() { return links_; }
  // Multiplies the bandwidth of every link whose name matches (fnmatch glob); returns how
  // many matched.
  int scale_links(const std::string& pattern, double factor);
  std::string description() const;  // one line: "4 nodes x 8 GPUs, NVSwitch 450 GB/s, ..."

  // The platform as SimGrid XML (a Full zone with the routes of `pairs`, window ranks).
  std::string to_xml(const std::vector<std::pair<int, int>>& pairs) const;

 private:
  static Platform build_window(const planner::ClusterSpec& cluster, const planner::NcclParams& nccl,
                               const FabricOptions& fabric, int window_nodes, const std::vector<int>& nodes);
  int link_index(int window_node, LinkKind kind, int index) const;
  int leaf_link(int window_leaf, int rail, bool up) const;
  int window_leaf_of(int leaf) const { return real_leaf_window_.empty() ? leaf % window_leaves_ : real_leaf_window_[leaf]; }

  int nodes_ = 1, window_nodes_ = 1, gpn_ = 1, nics_ = 1, per_leaf_ = 1, leaves_ = 1, window_leaves_ = 0;
  Placement placement_ = Placement::packed;
  bool nvswitch_ = true, rail_ = true;
  int per_node_links_ = 0, leaf_base_ = 0, leaf_links_per_leaf_ = 0;
  std::vector<PlatformLink> links_;
  // Windows of chosen nodes only (empty for a period): window node -> real node, real node -> window node
  // (-1 outside), and the same for leaves.
  std::vector<int> window_node_real_, real_node_window_, window_leaf_real_, real_leaf_window_;
};

}  // namespace fsdpsim::sim
