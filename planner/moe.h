// Where a MoE layer's routed tokens go on one rank: how many experts the rank holds, how many
// tokens each of them runs, and how much of the layer's routed work and all-to-all traffic the
// busiest rank carries.
//
// Expert parallelism as torchtitan lays it out (torchtitan/models/llama4/infra/parallelize.py,
// apply_fsdp, read at 05a6cb38): the routed experts of each MoE layer are split on dim 0 over an
// EP group of `degree` ranks; a token is sent (all-to-all dispatch) to the ranks holding its
// top_k experts and its expert outputs come back (all-to-all combine). Every rank of the group
// sends its own tokens x top_k copies; a rank's experts receive the copies routed to them from
// the whole group.
//
// Token imbalance is one factor, `imbalance` = the busiest expert's tokens over the mean
// expert's (training.moe_imbalance). The busiest expert gets imbalance x mean, the other E - 1
// share the rest equally, so the E experts still run tokens x top_k copies in all. The busiest
// rank holds the busiest expert and E/degree - 1 others; its load over the mean rank's is
// rank_load_factor (1 without expert parallelism: one rank holds every expert).
#pragma once

#include "models/model.h"

namespace fsdpsim::planner {

struct ExpertRouting {
  int local_experts = 0;                  // experts this rank holds: E / degree
  double mean_tokens_per_expert = 0;      // tokens x top_k x degree / E
  double busiest_expert_tokens = 0;       // imbalance x the mean
  double other_expert_tokens = 0;         // (E - imbalance) / (E - 1) x the mean (the mean when E = 1)
  // The busiest rank's routed copies over the mean rank's (tokens x top_k): its experts' GEMM
  // rows and the copies its all-to-alls carry.
  double rank_load_factor = 1;
};

// The routed experts one rank of a `degree`-wide expert-parallel group holds (1: all of them).
inline int local_experts(const models::MoeSpec& moe, int degree) { return moe.experts / degree; }

// `tokens` routed by each rank (micro_batch x seq_len); `degree` divides moe.experts and
// 1 <= imbalance <= moe.experts (the planner checks both, naming the scenario's fields).
ExpertRouting expert_routing(const models::MoeSpec& moe, double tokens, int degree, double imbalance);

}  // namespace fsdpsim::planner
