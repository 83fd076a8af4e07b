// What torchtitan's default expert-parallel token dispatch does besides the two all-to-alls
// (read in pytorch/torchtitan at e1f7f318, 2025-11-21; the same code at 9603872e, 2025-10-11):
//
// - torchtitan/distributed/expert_parallel.py, ExpertParallel._token_dispatch: the split sizes
//   are exchanged first (all_to_all_single of num_tokens_per_expert, E int64 counts per rank,
//   then wait_tensor), summed per EP rank and copied to the host, the output splits with
//   `.to("cpu", non_blocking=False)` ("NOTE: this would incur a device-to-host sync"): the CPU
//   waits there for the GPU's queue before it can issue the token all-to-all, whose split sizes
//   are Python lists. The backward all-to-alls reuse the saved lists (no sync); a recompute under
//   activation checkpointing runs the forward, sync included, again.
// - torchtitan/models/moe/utils.py, _permute after the dispatch and _unpermute before the
//   combine: the received rows (grouped by source rank) are put in local-expert order, each
//   expert's group padded to TOKEN_GROUP_ALIGN_SIZE_M = 8 rows for torch._grouped_mm:
//     x = torch.vstack((x, x.new_zeros((x.shape[-1]))))   # a copy of the R received rows + a zero row
//     x = x[permuted_indices, :]                          # a gather of R_p rows
//     out_unpermuted = out.new_empty(input_shape)
//     out_unpermuted[permuted_indices, :] = out           # a scatter of R_p rows
//     out = out_unpermuted[:-1]                           # a view
//   with R_p = round_up(R + local_experts x 8, 8) (padded_max_len; the padding entries read and
//   write the zero row). These are kernels of their own, moving whole rows through HBM; the
//   block's cost ledger (models/transformer_costs.h) counts only the block's own gather and
//   combine (MoE.forward's x[token_indices] and routed_output_unsorted), which run with or
//   without expert parallelism.
#pragma once

namespace fsdpsim::planner {

// TOKEN_GROUP_ALIGN_SIZE_M (torchtitan/models/moe/utils.py): bf16 token groups are padded to
// multiples of 8 rows.
constexpr double kTokenGroupAlignRows = 8;

struct TokenPermutation {
  double rows = 0;         // R: rows the dispatch all-to-all received (the busiest rank's)
  double padded_rows = 0;  // R_p = round_up(ceil(R) + local_experts x 8, 8): permuted_indices' length
  // HBM bytes, counted in rows of hidden x dtype bytes, each row read or written once:
  //   forward: new_zeros writes 1 row; vstack reads R + 1 (the rows and the zero row), writes
  //     R + 1; the gather reads and writes R_p; the scatter reads and writes R_p: 2R + 3 + 4R_p.
  //   backward (autograd of the same, in reverse): the slice's backward (SliceBackward0) writes
  //     a zero gradient of R + 1 rows and copies R rows into it (3R + 1); the scatter's
  //     (IndexPutBackward0, for the values) gathers R_p rows (2R_p); the gather's
  //     (IndexBackward0: index_put_ with accumulate into zeros) writes R + 1 zero rows, reads
  //     the R_p gradient rows and reads and writes a destination row for each (R + 1 + 3R_p);
  //     vstack's (CatBackward0) is a view: 4R + 2 + 5R_p rows.
  // The int32 permuted_indices (4 bytes a row against 2 x hidden) are neglected.
  double forward_hbm_bytes = 0;
  double backward_hbm_bytes = 0;
};

// `rows` received by the rank, `hidden` features of `dtype_bytes` each, `local_experts` = E / ep.
TokenPermutation ep_token_permutation(double rows, int hidden, int local_experts, int dtype_bytes);

// The split-size exchange before a dispatch: each rank sends its num_tokens_per_expert, one
// int64 per expert (torch.histc of the int64 expert indices keeps their dtype): 8 x E bytes.
double split_sizes_send_bytes(int experts);
// ... and what the host copies back: input_splits and output_splits, ep int64 each: 16 x ep bytes.
double split_sizes_host_bytes(int expert_parallel);

}  // namespace fsdpsim::planner
