// How a unit's parameters are split over the ranks of its shard group, with the exact
// padding rules of FSDP1 (one flat parameter padded to a multiple of W) and FSDP2
// (each parameter padded on dim 0 to a multiple of W).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "planner/units.h"

namespace fsdpsim::planner {

struct UnitShard {
  std::int64_t numel = 0;            // the unit's parameters, unpadded
  std::int64_t local_numel = 0;      // one rank's padded shard (FSDP2: s_g = sum s_p; FSDP1: s)
  std::int64_t gathered_numel = 0;   // the all-gather output, W * local_numel
  std::int64_t optimizer_numel = 0;  // rank 0's unpadded shard, which the optimizer state covers
};

// The rules that cut a step's shards (shard_rule, below).
constexpr int kFlatShards = 1, kRowShards = 2, kPerParameterShards = 3, kRowShardsExpertsOnDim1 = 4;

// FSDP2: local rows ceil(d0/W), s_p = ceil(d0/W) * numel/d0. Under kRowShardsExpertsOnDim1
// (below) a routed expert weight [E, d1, ...] with W > E is cut on dim 1 instead:
// s_p = E * ceil(d1/W) * numel/(E d1).
std::int64_t fsdp2_local_numel(const models::Parameter& p, int world, int rule = kRowShards);
UnitShard shard_fsdp2(const Unit& unit, int world, int rule = kRowShards);
// FSDP1 (use_orig_params=False): N padded up to a multiple of W, s = N_padded / W.
UnitShard shard_fsdp1(const Unit& unit, int world);
// DeepSpeed ZeRO-3 (its layout, training.master_weights optimizer_state, with the parameters
// partitioned): each parameter flattened, padded to a multiple of W and split evenly
// (deepspeed/runtime/zero/partition_parameters.py, _aligned_size / _padding_size:
// numel + (W - numel % W) % W, partition_size = that / W): s = sum ceil(numel_p / W).
UnitShard shard_per_parameter(const Unit& unit, int world);

// Which rule cuts a step's shards: FSDP1's flat parameter (kFlatShards; also DeepSpeed ZeRO-1/2,
// which partition one flat buffer of the gradients and optimizer state), FSDP2's rows
// (kRowShards), DeepSpeed ZeRO-3's flattened parameters (kPerParameterShards). FSDP2's rows
// priced DeepSpeed's layout with up to a quarter too much state where small parameters meet
// large worlds (gemma3-1b on 1,024 GPUs: session 33's audit).
// kRowShardsExpertsOnDim1: FSDP2's rows with torchtitan's shard_placement_fn at expert parallel
// 1 (torchtitan/distributed/fsdp.py@b5bcd76: Shard(1) for the routed experts "when FSDP degree >
// num_experts to avoid padding"; [torchtitan's wrap], planner/units.h). The FSDP degree compared
// is the shard group here (torchtitan compares its whole data-parallel mesh, which under HSDP
// also counts the replicas).
int shard_rule(int fsdp_version, bool deepspeed_layout, bool params_sharded, bool torchtitan_placement = false);
UnitShard shard_unit(const Unit& unit, int world, int rule);

// Expert parallelism (FSDP2, torchtitan's layout: torchtitan/models/llama4/infra/parallelize.py,
// apply_fsdp, read at 05a6cb38): a unit of routed expert weights [E, d1, ...] holds E/ep experts
// per rank, and FSDP shards those over the shard group's other shard_group/ep ranks (the expert
// data-parallel mesh `efsdp`): on dim 0, or on dim 1 when efsdp x ep > E (torchtitan's
// _experts_shard_placement_fn, which avoids dim-0 padding when there are fewer local experts
// than shards). `numel` counts the rank's local experts only.
std::int64_t expert_local_numel(const models::Parameter& p, int shard_group, int expert_parallel);
UnitShard shard_expert_unit(const Unit& unit, int shard_group, int expert_parallel);
// Whether the unit holds routed expert weights (models::Parameter::experts).
bool is_expert_unit(const Unit& unit);

// [Pinned host blocks] PyTorch's CachingHostAllocator rounds every pinned allocation up to a
// power of two before cudaHostAlloc (aten/src/ATen/core/CachingHostAllocator.h, allocate:
// `roundSize = c10::llvm::PowerOf2Ceil(size)`): the host memory FSDP's cpu_offload pins for one
// unit's shard in `bytes_per_element`. FSDP1 pins the unit's flat shard, one block
// (FlatParamHandle: _local_shard.pin_memory(), and _cpu_grad alike); FSDP2 each parameter's
// padded shard, one block each (FSDPParam._init_sharded_param: pin_memory() per parameter;
// foreach_reduce's .to("cpu", non_blocking=True) per gradient).
std::int64_t pinned_block_bytes(std::int64_t bytes);
std::int64_t pinned_shard_bytes(const Unit& unit, const UnitShard& shard, int rule, int shard_group,
                                int expert_parallel, int bytes_per_element);

// [FSDP2 dim-0 padding] FSDP2 splits each parameter's dim 0 into shard-group chunks of
// ceil(d0/W) rows and pads every rank's chunk to that size (torch.chunk leaves the ranks past d0
// empty; _init_sharded_param pads them). A parameter with fewer rows than ranks (routed experts
// stacked [E, ...] over more ranks than E, a norm's weight over thousands of ranks) makes every
// rank hold a whole row, so rank 0's shards, and its gradients, optimizer state and all-gathers
// with them, outgrow an even split of the model (`rule`: shard_rule's; FSDP2's rules only). A warning when rank 0's shards exceed an even
// split by more than a quarter, naming the parameter that pads the most and, for routed experts
// outside expert parallelism, the layout that avoids it; empty otherwise (FSDP1 pads one flat
// parameter by fewer than W elements: never). `shards` parallel to `units`, as Plan holds them.
std::string padding_warning(const std::vector<Unit>& units, const std::vector<UnitShard>& shards, int shard_group,
                            int expert_parallel, int rule);

}  // namespace fsdpsim::planner
