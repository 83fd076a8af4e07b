// The FSDP and ZeRO rules the planner's step follows, each named once: what each rank keeps
// sharded, when a unit reshards after forward, and in which hook backward prefetching issues
// the next unit's all-gather. planner/plan_*.cpp write the step by them; the wrap search's
// cost model (sim/wrap_search.cpp) reasons with the same functions.
#pragma once

#include "planner/scenario.h"

namespace fsdpsim::planner {

// ---- what each rank keeps sharded ---------------------------------------------------------

// The ZeRO stages (Rajbhandari et al., "ZeRO", arXiv:1910.02054: P_os, P_os+g, P_os+g+p):
// stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the parameters.
struct ShardedModelState {
  bool params = true;
  bool grads = true;
  bool optimizer_state = true;
};

// NO_SHARD (DDP) shards nothing; ZERO1 the optimizer state; SHARD_GRAD_OP and
// HYBRID_SHARD_ZERO2 are FSDP's ZeRO-2 but keep a sharded parameter all the same (it is the
// master copy the optimizer steps; only the unsharded copy lives on from forward to
// backward); FULL_SHARD and HYBRID_SHARD shard everything.
// DeepSpeed's ZeRO-2 (master_weights optimizer_state: the fp32 master lives in the optimizer
// partition) keeps the whole compute-dtype model on every rank instead, and all-gathers the
// updated partitions after the step (deepspeed/runtime/zero/stage_1_and_2.py,
// DeepSpeedZeroOptimizer.step: all_gather_dp_groups, "Gather the updated weights from everyone").
inline ShardedModelState sharded_model_state(const FsdpSpec& fsdp, const TrainingSpec& training) {
  const bool replicated = fsdp.strategy == Strategy::NO_SHARD;
  const bool zero1 = fsdp.strategy == Strategy::ZERO1;
  const bool zero2 = fsdp.strategy == Strategy::SHARD_GRAD_OP || fsdp.strategy == Strategy::HYBRID_SHARD_ZERO2;
  ShardedModelState s;
  s.params = !replicated && !zero1 && !(zero2 && training.master_weights == MasterWeights::optimizer_state);
  s.grads = !replicated && !zero1;
  s.optimizer_state = !replicated;
  return s;
}

// ---- reshard after forward ------------------------------------------------------------------

// Whether a unit frees its unsharded parameters in its post-forward hook. The root never does:
// backward needs them at once (FSDP1: _post_forward_reshard frees only `not state._is_root`
// handles of the RESHARD_AFTER_FORWARD strategies, torch/distributed/fsdp/_runtime_utils.py;
// FSDP2: FSDPState._lazy_init sets the root group's post_forward_mesh_info to None, "For the
// root, do not reshard after forward since for training, the parameters would be freed and
// all-gathered immediately", torch/distributed/fsdp/_fully_shard/_fsdp_state.py). The others
// do unless reshard_after_forward is false (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2, or FSDP2's
// reshard_after_forward=False), which keeps every unit gathered from forward to backward.
inline bool reshards_after_forward(const FsdpSpec& fsdp, bool is_root) {
  return !is_root && fsdp.reshard_after_forward != 0;
}

// FSDP2's reshard_after_forward=k with 1 < k < the shard group: after forward each rank keeps
// a 1/k slice of the gathered parameters, and the backward all-gather runs over those k ranks
// (_fsdp_init.py, _get_post_forward_mesh_info; FSDPParam.to_sharded_post_forward). k = 1 is
// false and k = the shard group is true (scenario.cpp stores them so).
inline bool reshards_to_smaller_group(const FsdpSpec& fsdp) {
  return fsdp.reshard_after_forward > 1 && fsdp.reshard_after_forward < fsdp.shard_group_size;
}

// ---- backward prefetch --------------------------------------------------------------------

// The hook in which backward prefetching issues the next unit's all-gather (in reverse
// forward order); none: the next unit gathers in its own pre-backward.
enum class BackwardPrefetchHook { none, pre_backward, post_backward };

// FSDP1 (FullyShardedDataParallel): BACKWARD_PRE prefetches in the pre-backward hook, before
// the unit's gradient computation; BACKWARD_POST in the post-backward hook, after it and
// before the reduce-scatter (torch/distributed/fsdp/_runtime_utils.py, _get_handles_to_prefetch:
// BACKWARD_PRE state with BackwardPrefetch.BACKWARD_PRE, BACKWARD_POST state with
// BackwardPrefetch.BACKWARD_POST).
// FSDP2 (fully_shard) has no such option: every pre-backward prefetches the next group in
// reverse post-forward order (FSDPState._pre_backward passes default_prefetch, and
// FSDPParamGroup.pre_backward calls _backward_prefetch, _fsdp_param_group.py). fsdp.version 2
// reads any backward_prefetch but NONE as that; NONE turns it off (docs/schema.md).
inline BackwardPrefetchHook backward_prefetch_hook(const FsdpSpec& fsdp) {
  if (fsdp.version == 2)
    return fsdp.backward_prefetch == BackwardPrefetch::none ? BackwardPrefetchHook::none
                                                             : BackwardPrefetchHook::pre_backward;
  switch (fsdp.backward_prefetch) {
    case BackwardPrefetch::pre: return BackwardPrefetchHook::pre_backward;
    case BackwardPrefetch::post: return BackwardPrefetchHook::post_backward;
    case BackwardPrefetch::none: return BackwardPrefetchHook::none;
  }
  return BackwardPrefetchHook::none;
}

}  // namespace fsdpsim::planner
