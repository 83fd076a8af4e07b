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

// One flow of a collective: from a rank in the platform's window to a real rank (which may
// lie outside the window: its image receives), carrying `fraction` of the per-rank wire bytes.
struct RingEdge {
  int src = 0;
  int dst = 0;
  double fraction = 0;
};

// The merged ring edges of one instance whose source lies in the platform's window.
std::vector<RingEdge> ring_edges(const GroupLayout& layout, int instance, const Platform& platform);

// Instances with at least one member in the platform's window.
std::vector<int> window_instances(const GroupLayout& layout, const Platform& platform);

// Sequential steps of the ring algorithm: n-1 (all-gather, reduce-scatter), 2(n-1) (all-reduce).
int ring_steps(planner::OpKind kind, int ranks);

}  // namespace fsdpsim::sim
