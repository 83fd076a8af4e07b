#include "planner/moe.h"

namespace fsdpsim::planner {

ExpertRouting expert_routing(const models::MoeSpec& moe, double tokens, int degree, double imbalance) {
  ExpertRouting r;
  const double experts = moe.experts;
  r.local_experts = local_experts(moe, degree);
  r.mean_tokens_per_expert = tokens * moe.top_k * degree / experts;
  r.busiest_expert_tokens = imbalance * r.mean_tokens_per_expert;
  r.other_expert_tokens =
      moe.experts > 1 ? (experts - imbalance) / (experts - 1) * r.mean_tokens_per_expert : r.mean_tokens_per_expert;
  const double busiest_rank_tokens = r.busiest_expert_tokens + (r.local_experts - 1) * r.other_expert_tokens;
  r.rank_load_factor = busiest_rank_tokens / (r.local_experts * r.mean_tokens_per_expert);
  return r;
}

}  // namespace fsdpsim::planner
