// NCCL's choices as fsdpsim models them (planner/collectives.h), shown the way people read a
// fabric: an nccl-tests-like table (`fsdpsim collectives`: size, time, algbw, busbw, and the
// algorithm, protocol and channels NCCL's tuner would pick) against published bus bandwidths
// (tests/data/validation/public_collectives.csv, each row citing its source), and, for a
// step, the choice per collective kind and process group (`estimate`).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/collectives.h"
#include "planner/cost_model.h"
#include "planner/published_collectives.h"
#include "planner/schedule.h"

namespace fsdpsim::sim {

using planner::PublishedCollective;

// Whether a row was measured on this GPU (the part before the first '-' of the catalog name,
// "H100" of "H100-SXM-80GB", appears in the row's GPU).
bool same_gpu_family(const std::string& catalog_gpu, const std::string& published_gpu);
// Whether a published row's interconnect ("NVLink4 NV18 via NVSwitch", "PCIe Gen5") is the
// node's kind; rows are compared only on their own kind of node.
bool same_interconnect(planner::IntraNodeKind kind, const std::string& published_intra);

struct CollectiveRow {
  planner::CollectiveKind kind = planner::CollectiveKind::all_reduce;
  double bytes = 0;
  planner::CollectiveEstimate estimate;
  std::vector<const PublishedCollective*> published;  // at this size, NVLS as in the model
};

struct CollectivesTable {
  planner::ClusterSpec cluster;
  planner::CollectiveGroup group;
  planner::NcclParams params;
  std::vector<CollectiveRow> rows;
  // Every published figure of this setup (GPU family, ranks, nodes, kind), each with the model at
  // its size and NVLS setting.
  struct Comparison {
    PublishedCollective published;
    planner::CollectiveEstimate model;
    double error = 0;  // (model - published) / published
  };
  std::vector<Comparison> comparisons;
};

// `sizes` in bytes (nccl-tests' buffer size: the gathered size for all-gather and reduce-scatter).
CollectivesTable collectives_table(const planner::ClusterSpec& cluster, const planner::CollectiveGroup& group,
                                   const std::vector<planner::CollectiveKind>& kinds, const std::vector<double>& sizes,
                                   const std::vector<PublishedCollective>& published);

std::string collectives_table_text(const CollectivesTable& table, const std::string& published_file);
nlohmann::json collectives_table_json(const CollectivesTable& table);

// A step's collectives by kind and process group: how many calls, the largest, and NCCL's choice
// for it as the cost model priced it (CostModel::collective).
struct CollectiveChoice {
  planner::CollectiveKind kind = planner::CollectiveKind::all_reduce;
  std::string group;  // "shard", "replicate", ...
  int ranks = 0, nodes = 0;
  int calls = 0;
  double largest_bytes = 0;
  planner::CollectiveEstimate estimate;  // of the largest
};
std::vector<CollectiveChoice> collective_choices(const planner::Schedule& schedule, const planner::CostModel& cost);
std::string collective_choices_text(const std::vector<CollectiveChoice>& choices);
nlohmann::json collective_choices_json(const std::vector<CollectiveChoice>& choices);

}  // namespace fsdpsim::sim
