// Which ranks a collective's process group holds and the flows its algorithm sends.
//
// Layouts are the schedule's (planner::ProcessGroup: ranks are node-major, a group's members
// `stride` ranks apart; the planner gives HSDP's replicate group a stride of the shard size).
//
// A collective is sent as NCCL's rings send it (every algorithm, NVLS and Tree included, as
// ring-shaped flows at the chosen algorithm's speed; docs/simgrid.md): on one node, one ring
// through the group's GPUs in rank order; across nodes, one ring per NIC (rail) the group's
// local GPUs use. Ring k enters each node at the first local GPU on NIC k, visits the node's
// group GPUs in order, and leaves from the last one for the next node's entry GPU through
// NIC k (PXN). Each ring carries 1/R of the per-rank wire bytes; ring edges with the same
// source and destination are merged into one flow (so each collective holds one flow per link
// it shares with another: they progress at 1/k each, as the analytic engine's sharing does).
//
// An all-to-all is sent as NCCL's grouped send/recv sends it: every member sends one flow to
// every other member of its instance (n(n-1) flows), each 1/(n-1) of the per-rank wire bytes
// ((n-1)/n of the send buffer). Flows are not merged per node pair: two GPU pairs between the
// same nodes cross different links (each flow enters the fabric through the NIC of its
// destination's rail, over NVLink first when that NIC is another GPU's: PXN), so a merged
// flow would load the wrong NICs and PCIe links; only flows with identical ends, hence
// identical routes, are merged, as for rings. This traffic is what makes the fabric matter:
// on a fat tree, every rank's flows to the other leaves cross the leaf's uplinks at once.
#pragma once

#include <vector>

#include "planner/schedule.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim {

struct GroupLayout {
  int size = 1;        // ranks per instance
  int stride = 1;      // rank distance between consecutive members (1: a block)
  bool strided = false;
};

// The layout of schedule.groups[group] in a world of schedule.world_size ranks. Throws
// std::invalid_argument when the size does not divide the world.
GroupLayout group_layout(const planner::Schedule& schedule, int group);
int group_instances(const GroupLayout& layout, int world);
int group_instance(const GroupLayout& layout, int rank);
// Real ranks of one instance, in ring order.
std::vector<int> group_members(const GroupLayout& layout, int world, int instance);

// The traffic pattern a collective's flows follow: rings (all-gather, reduce-scatter,
// all-reduce; every algorithm is played as ring-shaped flows) or all-to-all (every pair).
enum class FlowPattern { ring = 0, all_to_all = 1 };
constexpr int kFlowPatternCount = 2;
FlowPattern flow_pattern(planner::OpKind kind);

// One flow of a collective: from a rank in the platform's window to a real rank (which may
// lie outside the window: its image receives), carrying `fraction` of the per-rank wire bytes.
struct RingEdge {
  int src = 0;
  int dst = 0;
  double fraction = 0;
};

// One ring of an instance: the ranks it visits in order (it closes from the last to the first),
// and the share of the per-rank wire bytes it carries (1 / rings).
struct Ring {
  std::vector<int> ranks;
  double share = 1;
};
// The rings of one instance over the whole cluster: one through the members on one node, one
// per rail (NIC) across nodes.
std::vector<Ring> rings(const GroupLayout& layout, int instance, const Platform& platform);

// The merged ring edges of one instance whose source lies in the platform's window: for a
// period, to real destinations (their images receive); for a window of chosen nodes, between its
// members, each ring contracted to them (simgrid_platform.h).
std::vector<RingEdge> ring_edges(const GroupLayout& layout, int instance, const Platform& platform);
// The all-to-all flows of one instance whose source lies in the platform's window: every
// member to every other, 1/(n-1) of the per-rank wire bytes each.
std::vector<RingEdge> all_to_all_edges(const GroupLayout& layout, int instance, const Platform& platform);
// The flows of one instance for the pattern.
std::vector<RingEdge> collective_edges(FlowPattern pattern, const GroupLayout& layout, int instance,
                                       const Platform& platform);

// Instances with at least one member in the platform's window, ascending (0..n-1 for a period).
std::vector<int> window_instances(const GroupLayout& layout, const Platform& platform);

// Sequential steps of the ring algorithm: n-1 (all-gather, reduce-scatter), 2(n-1) (all-reduce);
// 1 for all-to-all (NCCL sends to every peer at once: planner::NcclAllToAllModel, one batch
// of concurrent peers for the group sizes of expert parallelism).
int ring_steps(planner::OpKind kind, int ranks);

}  // namespace fsdpsim::sim
