// torchtitan's default expert-parallel dispatch beyond the all-to-alls: planner/ep_dispatch.h.
#include "planner/ep_dispatch.h"

#include <cmath>

namespace fsdpsim::planner {

TokenPermutation ep_token_permutation(double rows, int hidden, int local_experts, int dtype_bytes) {
  TokenPermutation p;
  p.rows = std::ceil(rows);
  p.padded_rows = std::ceil((p.rows + local_experts * kTokenGroupAlignRows) / kTokenGroupAlignRows) * kTokenGroupAlignRows;
  const double row_bytes = static_cast<double>(hidden) * dtype_bytes;
  p.forward_hbm_bytes = (2 * p.rows + 3 + 4 * p.padded_rows) * row_bytes;
  p.backward_hbm_bytes = (4 * p.rows + 2 + 5 * p.padded_rows) * row_bytes;
  return p;
}

double split_sizes_send_bytes(int experts) { return 8.0 * experts; }

double split_sizes_host_bytes(int expert_parallel) { return 16.0 * expert_parallel; }

}  // namespace fsdpsim::planner
