#include "planner/job_memory.h"

#include <algorithm>
#include <limits>

#include "planner/fsdp_rules.h"
#include "planner/internal/plan_policy.h"

namespace fsdpsim::planner {

namespace {

using Device = FsdpSpec::OffloadDevice;

// DeepSpeed's defaults (deepspeedai/DeepSpeed@edaa722, deepspeed/runtime/zero/offload_config.py and
// config.py), the same the planner's NVMe swap buffers use (plan.cpp make_nvme_swap_buffers; the
// optimizer's are sized by the largest sub-group of deepspeed.sub_group_size, deepspeed_sub_groups).
constexpr double kOptimizerSwapBuffers = 4;    // offload_optimizer.buffer_count
constexpr double kParamSwapBuffers = 5;        // offload_param.buffer_count
constexpr double kParamSwapBufferElements = 1e8;  // offload_param.buffer_size

// FSDP1's sync_module_states broadcasts in buckets of 250 MiB (torch/distributed/fsdp/_init_utils.py,
// PARAM_BROADCAST_BUCKET_SIZE, through torch.distributed.utils._sync_params_and_buffers, which
// flattens each bucket into one tensor).
constexpr double kBroadcastBucketBytes = 250.0 * 1024 * 1024;

// What one rank keeps, in elements and bytes per element, from the plan's shards.
struct RankShape {
  double param_elements = 0;      // the parameters this rank stores (its shard, or all when replicated)
  double optimizer_elements = 0;  // what its optimizer state covers
  double model_elements = 0;      // the whole model, unpadded: every expert (what a full state dict holds)
  double local_model_elements = 0;  // the parameters this rank's units cover, unpadded: its EP-local experts
  double largest_unit_elements = 0;          // the largest unit's parameters, unpadded
  double largest_unit_shard_elements = 0;    // the largest local shard
  double largest_unit_gathered_elements = 0;  // the largest non-root unit gathered whole (every expert)
  double root_gathered_elements = 0;
  double largest_sub_group_elements = 0;     // DeepSpeed ZeRO-3's largest optimizer sub-group (partition elements)
  double fsdp_offload_pinned_bytes = 0;      // FSDP cpu_offload: the parameter and gradient shards' pinned blocks
  double largest_param_elements = 0;         // the largest parameter, whole (every expert)
  int stored_bytes = 4, master_bytes = 4, compute_bytes = 2, states = 2, master_copy = 0;
  bool params_sharded = true, grads_sharded = true;
};

// What a full state dict gathers of a unit: the unit whole, over the shard group (its all-gather
// output, padding included), and an expert unit also over the expert-parallel group
// (DTensor::full_tensor on both mesh dimensions: every expert).
double gathered_whole(const Unit& unit, const UnitShard& shard) {
  return std::max(static_cast<double>(shard.gathered_numel), static_cast<double>(unit.numel()));
}

RankShape rank_shape(const Scenario& sc, const Plan& plan) {
  RankShape r;
  const ShardedModelState sharded = sharded_model_state(sc.fsdp, sc.training);
  r.params_sharded = sharded.params;
  r.grads_sharded = sharded.grads;
  const bool deepspeed_layout = sc.training.master_weights == MasterWeights::optimizer_state;
  r.master_bytes = models::dtype_bytes(sc.training.master_dtype);
  r.compute_bytes = models::dtype_bytes(sc.training.param_dtype);
  r.stored_bytes = deepspeed_layout ? r.compute_bytes : r.master_bytes;
  r.states = optimizer_states_per_param(sc.training.optimizer);
  r.master_copy = deepspeed_layout && sc.training.optimizer != Optimizer::none ? 1 : 0;
  for (std::size_t i = 0; i < plan.units.size(); ++i) {
    const UnitShard& sh = plan.shards[i];
    r.param_elements += static_cast<double>(sharded.params ? sh.local_numel : sh.numel);
    r.optimizer_elements += static_cast<double>(sharded.optimizer_state ? sh.optimizer_numel : sh.numel);
    // Under expert parallelism a unit's shard counts the rank's local experts (UnitShard::numel);
    // the unit itself holds them all (Unit::numel): a full state dict and a model built whole
    // before parallelize hold every expert (the session-30 audit: a full checkpoint of Mixtral
    // at EP 8 came out 81 GiB instead of 522).
    const double whole = static_cast<double>(plan.units[i].numel());
    r.model_elements += whole;
    r.local_model_elements += static_cast<double>(sh.numel);
    const double whole_gathered = gathered_whole(plan.units[i], sh);
    if (plan.units[i].is_root)
      r.root_gathered_elements = whole_gathered;
    else
      r.largest_unit_gathered_elements = std::max(r.largest_unit_gathered_elements, whole_gathered);
    r.largest_unit_elements = std::max(r.largest_unit_elements, static_cast<double>(sh.numel));
    r.largest_unit_shard_elements = std::max(r.largest_unit_shard_elements, static_cast<double>(sh.local_numel));
    for (const models::Parameter* p : plan.units[i].params)
      r.largest_param_elements = std::max(r.largest_param_elements, static_cast<double>(p->numel()));
    if (!deepspeed_layout && sh.numel > 0)
      r.fsdp_offload_pinned_bytes += 2.0 * static_cast<double>(pinned_shard_bytes(
                                               plan.units[i], sh, shard_rule_of(sc), sc.fsdp.shard_group_size,
                                               sc.fsdp.expert_parallel, r.stored_bytes));
  }
  if (deepspeed_layout)
    r.largest_sub_group_elements = static_cast<double>(
        largest_deepspeed_sub_group(*sc.model, sc.fsdp.shard_group_size, sc.deepspeed.sub_group_size));
  return r;
}

// [zero.Init] DeepSpeed ZeRO-3's zero.Init builds the model on the GPU module by module and never
// flattens it: each parameter is made in the default dtype (fp32), then cast to the 16-bit dtype
// (deepspeed/runtime/zero/partition_parameters.py@edaa722, zero_wrapper_for_fp_tensor_constructor:
// the tensor is made, then `.to(dtype)`), and when the module's __init__ returns its own
// parameters are partitioned (_post_init_method over named_parameters(recurse=False)). The
// transient is therefore the module's earlier parameters in 16 bits while its next one exists in
// both dtypes: max over modules and their parameters in order of (sum of the earlier ones x b_o
// + this one x (b + b_o)). A tied parameter makes no tensor. (The session-36 audit: fsdpsim
// charged FSDP1's materialise-and-flatten of the largest unit, 19.0 GB for Llama-3.1-70B on 64
// GPUs where this gives 8.5 GB.)
double zero_init_transient_bytes(const models::Module& root, double construct_bytes, double stored_bytes) {
  double peak = 0;
  models::for_each_module(root, [&](const models::Module& m) {
    double earlier = 0;
    for (const models::Parameter& p : m.params) {
      if (!p.tied_to.empty()) continue;
      const double n = static_cast<double>(p.numel());
      peak = std::max(peak, earlier + n * (construct_bytes + stored_bytes));
      earlier += n * stored_bytes;
    }
  });
  return peak;
}

struct OffloadSetting {
  bool fsdp_cpu_offload = false;
  Device optimizer = Device::none;
  Device param = Device::none;
  bool operator==(const OffloadSetting& o) const {
    return fsdp_cpu_offload == o.fsdp_cpu_offload && optimizer == o.optimizer && param == o.param;
  }
};

std::string device_name(Device d) { return d == Device::cpu ? "cpu" : d == Device::nvme ? "nvme" : "none"; }

std::string setting_name(const OffloadSetting& s) {
  if (s.fsdp_cpu_offload) return "fsdp cpu_offload";
  if (s.optimizer == Device::none && s.param == Device::none) return "none";
  std::string n = "offload_optimizer=" + device_name(s.optimizer);
  if (s.param != Device::none) n += ", offload_param=" + device_name(s.param);
  return n;
}

// One setting's host and device state, per rank then times the ranks of a node. The same
// allocations the planner makes (plan.cpp make_persistent_state, plan_fsdp_grads.cpp
// finish_reduction), summed without the step.
OffloadOption option_of(const OffloadSetting& s, const RankShape& r, const Scenario& sc) {
  OffloadOption o;
  o.name = setting_name(s);
  const double gpn = sc.cluster.gpus_per_node;
  const double params = r.param_elements * r.stored_bytes;
  const double state = r.optimizer_elements * (r.states + r.master_copy) * r.master_bytes;
  const double replicated_grads = r.grads_sharded ? 0 : r.local_model_elements * r.stored_bytes;
  if (s.fsdp_cpu_offload) {
    // Pinned parameter shard and gradient shard, in the host allocator's power-of-two blocks
    // ([Pinned host blocks]); torch.optim's state in ordinary memory.
    o.pinned_bytes_per_node = gpn * r.fsdp_offload_pinned_bytes;
    o.pageable_bytes_per_node = gpn * state;
    o.device_state_bytes = replicated_grads;
    return o;
  }
  double pinned = 0, pageable = 0, nvme = 0, device = params + replicated_grads;
  double& deepspeed_host = sc.fsdp.offload_pin_memory ? pinned : pageable;
  const double fp32_grads = r.optimizer_elements * r.master_bytes;
  if (s.optimizer == Device::cpu) {
    // [DeepSpeed's host buffers] (planner/plan.cpp): the states in ordinary memory, the fp32
    // master pinned under ZeRO-1/2 only, the fp32 gradient pinned, and ZeRO-3's gradient
    // partitions in the model's dtype pinned too.
    // Pinned, in the host allocator's power-of-two blocks ([DeepSpeed's pinned blocks]).
    const bool zero3 = deepspeed_zero_stage(sc) == 3;
    const double master = r.optimizer_elements * r.master_copy * r.master_bytes;
    pageable += state - master;
    if (zero3) pageable += master;
    if (sc.fsdp.offload_pin_memory)
      pinned += static_cast<double>(
          deepspeed_pinned_optimizer_bytes(sc, static_cast<std::int64_t>(r.optimizer_elements)));
    else
      pageable += fp32_grads + (zero3 ? r.optimizer_elements * r.compute_bytes : master);
  } else if (s.optimizer == Device::nvme) {
    nvme += state + fp32_grads;
    pinned += kOptimizerSwapBuffers * r.largest_sub_group_elements * 4;
  } else {
    device += state;
  }
  if (s.param == Device::cpu) {
    deepspeed_host += params;
    device -= params;
  } else if (s.param == Device::nvme) {
    nvme += params;
    pinned += kParamSwapBuffers * kParamSwapBufferElements * r.compute_bytes;
    device -= params;
  }
  o.pinned_bytes_per_node = gpn * pinned;
  o.pageable_bytes_per_node = gpn * pageable;
  o.nvme_bytes_per_node = gpn * nvme;
  o.device_state_bytes = device;
  return o;
}

std::string gb_text(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

std::vector<OffloadOption> offload_options(const Scenario& sc, const Plan& plan) {
  const RankShape r = rank_shape(sc, plan);
  std::vector<OffloadSetting> settings;
  if (sc.training.master_weights == MasterWeights::sharded_param) {
    settings = {{false, Device::none, Device::none}, {true, Device::none, Device::none}};
  } else {
    settings = {{false, Device::none, Device::none}, {false, Device::cpu, Device::none}};
    if (r.params_sharded && reshards_after_forward(sc.fsdp, false)) settings.push_back({false, Device::cpu, Device::cpu});
    settings.push_back({false, Device::nvme, Device::none});
    if (r.params_sharded && reshards_after_forward(sc.fsdp, false)) settings.push_back({false, Device::nvme, Device::nvme});
  }
  const OffloadSetting own{sc.fsdp.cpu_offload, sc.fsdp.offload_optimizer, sc.fsdp.offload_param};
  if (std::find(settings.begin(), settings.end(), own) == settings.end()) settings.push_back(own);
  std::vector<OffloadOption> out;
  for (const OffloadSetting& s : settings) {
    out.push_back(option_of(s, r, sc));
    out.back().is_scenario = s == own;
  }
  return out;
}

// Building the model, then sharding it (b: the construction dtype, the master dtype torch
// builds parameters in; S: this rank's sharded parameters as the step keeps them):
// - meta, FSDP2: fully_shard on meta, then to_empty allocates only the shards: S.
// - cpu, FSDP2: fully_shard moves each unit's parameters to the GPU whole, then shards them
//   (torch/distributed/fsdp/_fully_shard/_fully_shard.py: _move_states_to_device before
//   FSDPParamGroup): S + max N_u b + its shard.
// - meta, FSDP1 (param_init_fn / to_empty) and DeepSpeed (zero.Init): unit by unit the
//   parameters are materialised whole (N_u b) and flattened into a FlatParameter (another
//   N_u b) before the shard is kept: S + 2 max N_u b. (FlatParamHandle.flatten_tensors cats the
//   unit's parameters into a new tensor, torch/distributed/fsdp/_flat_param.py.)
// - cpu: each rank builds the whole model in its host memory (N b), or with sync_module_states
//   only rank 0 does (the others on meta, broadcast to); the GPU then sees it unit by unit as
//   above.
// - cuda: the whole model on each GPU (N b), plus the largest unit's flat copy (FSDP1) or new
//   shard (FSDP2) while it is sharded.
// sync_module_states (FSDP1) adds the broadcast's bucket: at most 250 MiB or the largest unit.
PhasePeak init_peak(const Scenario& sc, const Plan& plan) {
  const RankShape r = rank_shape(sc, plan);
  const double b = r.master_bytes;
  const double model = r.model_elements * b;
  const double unit = r.largest_unit_elements * b;
  // The parameters the step keeps on this GPU (none when offloaded to the host or NVMe).
  const bool params_off_device = sc.fsdp.cpu_offload || sc.fsdp.offload_param != Device::none;
  const double shards = params_off_device ? 0 : r.param_elements * r.stored_bytes;
  const bool deepspeed_layout = sc.training.master_weights == MasterWeights::optimizer_state;
  const bool zero_init = deepspeed_layout && r.params_sharded && sc.init.device == InitSpec::Device::meta;
  const bool per_unit_materialisation = sc.fsdp.version == 1 && !deepspeed_layout;
  PhasePeak p;
  p.phase = "init";
  std::string how;
  switch (sc.init.device) {
    case InitSpec::Device::meta:
    case InitSpec::Device::cpu:
      if (zero_init) {
        p.device_bytes = shards + zero_init_transient_bytes(sc.model->root, b, r.stored_bytes);
        p.device_at = "the partitions + one module's parameters made in fp32 and cast (zero.Init; no flat copy)";
      } else if (deepspeed_layout) {
        // DeepSpeed without zero.Init: the engine casts the module to the 16-bit dtype and moves it
        // to the GPU whole (engine.py _configure_distributed_model: module.to(device)); ZeRO-3 then
        // partitions it (its partitions made while the whole model is there); ZeRO-1/2 keep it as
        // their replicated parameters. (Session 33: priced as zero.Init, 9 GB a GPU for
        // Llama-2-70B on 64 H100s where the move needs 138 GB.)
        const double whole = r.model_elements * r.stored_bytes;
        p.device_bytes = r.params_sharded ? whole + shards : std::max(whole, shards);
        // ZeRO-1/2 have no zero.Init: whatever init says, the engine moves the built model.
        p.device_at = r.params_sharded
                          ? "the whole model moved to the GPU by DeepSpeed's engine (no zero.Init: init \"meta\") + the partitions made from it"
                          : "the whole model moved to the GPU by DeepSpeed's engine (ZeRO-1/2 have no zero.Init)";
      } else if (per_unit_materialisation) {
        p.device_bytes = shards + 2 * unit;
        p.device_at = "the sharded parameters + the largest unit materialised and flattened (" + gb_text(2 * unit) + ")";
      } else if (sc.init.device == InitSpec::Device::meta) {
        p.device_bytes = shards;
        p.device_at = "the sharded parameters (fully_shard before materialising)";
      } else {
        // fully_shard moves the unit's parameters to the GPU whole (_move_states_to_device),
        // then makes their shards (FSDPParam._init_sharded_param) before the whole ones go.
        p.device_bytes = shards + unit + r.largest_unit_shard_elements * b;
        p.device_at = "the sharded parameters + the largest unit moved to the GPU whole and its new shard";
      }
      break;
    case InitSpec::Device::cuda:
      if (per_unit_materialisation) {
        p.device_bytes = model + unit;
        p.device_at = "the whole model + the largest unit's flat copy";
      } else if (deepspeed_layout) {
        // The engine casts the built model to the 16-bit dtype parameter by parameter.
        p.device_bytes = model + r.largest_param_elements * r.stored_bytes;
        p.device_at = "the whole model + the largest parameter cast to the 16-bit dtype";
      } else {
        p.device_bytes = model + r.largest_unit_shard_elements * b;
        p.device_at = "the whole model + the largest unit's new shard";
      }
      break;
  }
  if (sc.init.sync_module_states && sc.fsdp.version == 1) {
    p.device_bytes += std::min(kBroadcastBucketBytes, unit);
    p.device_at += " + a sync_module_states broadcast bucket";
  }
  if (sc.init.device == InitSpec::Device::cpu) {
    const int copies = sc.init.sync_module_states ? 1 : sc.cluster.gpus_per_node;
    p.host_bytes_per_node = copies * model;
    p.host_at = sc.init.sync_module_states ? "rank 0's whole model (the other ranks build on meta)"
                                           : std::to_string(copies) + " ranks' whole models";
  } else {
    p.host_at = "nothing (the model is not built on the CPU)";
  }
  // Offloaded state made during init lives on the host from then on: the step's persistent host
  // state, but for torch.optim's state, made at the first step() (Optimizer._init_group), not
  // at init. DeepSpeed makes its partitions and states when the engine is built.
  const bool lazy_optimizer = sc.training.master_weights != MasterWeights::optimizer_state;
  double host_state = 0;
  for (const Allocation& a : plan.schedule.allocations)
    if (a.persistent && on_host(a.placement) && !(lazy_optimizer && a.category == MemCategory::optimizer_state))
      host_state += static_cast<double>(a.bytes);
  if (host_state > 0) {
    const std::string offloaded = "the offloaded state of " + std::to_string(sc.cluster.gpus_per_node) + " ranks";
    p.host_at = sc.init.device == InitSpec::Device::cpu ? p.host_at + " + " + offloaded : offloaded;
  }
  p.host_bytes_per_node += host_state * sc.cluster.gpus_per_node;
  return p;
}

// FULL_STATE_DICT (FSDP1 FullStateDictConfig; FSDP2's get_model_state_dict with
// full_state_dict=True holds the same on the host, gathering tensor by tensor on the GPU): the
// state-dict hooks unshard each unit in full precision
// (_unshard_fsdp_state_params, writeback=False: the stored dtype), clone its parameters and
// reshard it. The root's pre-hook unshards the root and its post-hook reshards it, so the
// root stays gathered while every other unit is (torch/distributed/fsdp/_state_dict_utils.py,
// _full_pre_state_dict_hook / _full_post_state_dict_hook). offload_to_cpu copies each clone to
// the CPU at once; rank0_only keeps them on rank 0 only. The optimizer state
// (FSDP.optim_state_dict, full) is gathered parameter by parameter in the same way.
// SHARDED_STATE_DICT / DCP: each rank writes its own shards; the writer stages one tensor at a
// time in host memory (torch.distributed.checkpoint FileSystemWriter).
CheckpointSave checkpoint_save(const Scenario& sc, const Plan& plan, const MemoryReport& step, double pcie_gbps,
                               const NcclParams* nccl) {
  const RankShape r = rank_shape(sc, plan);
  const CheckpointSpec& c = sc.checkpoint;
  CheckpointSave save;
  save.peak.phase = "checkpoint save";
  const double gpn = sc.cluster.gpus_per_node;
  const double base = static_cast<double>(step.allocated_at_start);  // the GPU's state between steps
  const int state_tensors = c.optimizer ? r.states + r.master_copy : 0;
  double copied = 0;  // bytes the busiest GPU copies to its host
  if (c.kind == CheckpointSpec::Kind::full) {
    const double model = r.model_elements * r.stored_bytes;
    const double optimizer = r.model_elements * state_tensors * r.master_bytes;
    if (sc.fsdp.version == 2) {
      // FSDP2's get_state_dict gathers one DTensor at a time (_gather_state_dict: full_tensor()
      // per tensor, each moved to the CPU or dropped before the next), the optimizer state's
      // tensors alike: the largest parameter whole, in the larger of its dtypes (the session-36
      // audit: FSDP1's unit-at-a-time figure read 30.1 GB for 17.4 GB on 70B over 64 GPUs).
      const double largest_tensor =
          r.largest_param_elements * std::max(r.stored_bytes, state_tensors > 0 ? r.master_bytes : 0);
      save.peak.device_bytes = base + largest_tensor + (c.offload_to_cpu ? 0 : model + optimizer);
      save.peak.device_at = c.offload_to_cpu ? "state + the largest parameter gathered (FSDP2 gathers tensor by tensor)"
                                             : "state + the largest parameter gathered + the whole model's clones on the GPU";
    } else {
      const double gathered_model = (r.root_gathered_elements + r.largest_unit_gathered_elements) * r.stored_bytes;
      const double model_pass = base + gathered_model + (c.offload_to_cpu ? 0 : model);
      const double largest_gathered = std::max(r.root_gathered_elements, r.largest_unit_gathered_elements);
      const double optimizer_pass = base + largest_gathered * state_tensors * r.master_bytes +
                                    (c.offload_to_cpu ? 0 : model + optimizer);
      if (model_pass >= optimizer_pass) {
        save.peak.device_bytes = model_pass;
        save.peak.device_at = c.offload_to_cpu ? "state + the root and the largest unit all-gathered in full precision"
                                               : "state + the root and largest unit gathered + the whole model's clones on the GPU";
      } else {
        save.peak.device_bytes = optimizer_pass;
        save.peak.device_at = "state + the largest unit's optimizer state gathered";
      }
    }
    // Without offload_to_cpu the clones stay on the GPU (FSDP1's param_hook clones the unsharded
    // parameter where it is; FSDP2's _iterate_state_dict moves a tensor to the CPU only with
    // cpu_offload): the host holds none of it (torch.save later copies one storage at a time).
    save.rank0_host_bytes = c.offload_to_cpu ? model + optimizer : 0;
    save.peak.host_bytes_per_node = (c.rank0_only ? 1 : gpn) * save.rank0_host_bytes;
    save.peak.host_at = !c.offload_to_cpu ? "nothing: the gathered clones stay on the GPU"
                        : c.rank0_only    ? "rank 0: the whole model"
                                          : "every rank: the whole model";
    if (c.optimizer && c.offload_to_cpu) save.peak.host_at += " and optimizer state";
    save.bytes_written_per_node = model + optimizer;  // rank 0 writes it
    save.bytes_written_total = save.bytes_written_per_node;
    copied = model + optimizer;
    if (nccl) {
      // Each unit is all-gathered once in the stored dtype, and once per saved optimizer-state
      // tensor in the master dtype, over the shard group.
      const int ranks = sc.fsdp.shard_group_size;
      const CollectiveGroup group{ranks, (ranks + sc.cluster.gpus_per_node - 1) / sc.cluster.gpus_per_node};
      for (std::size_t u = 0; u < plan.shards.size(); ++u) {
        const UnitShard& sh = plan.shards[u];
        if (sh.numel == 0) continue;
        const double gathered = gathered_whole(plan.units[u], sh);
        save.gather_seconds +=
            estimate_collective(CollectiveKind::all_gather, gathered * r.stored_bytes, group, sc.cluster, *nccl).seconds;
        if (state_tensors > 0)
          save.gather_seconds += state_tensors * estimate_collective(CollectiveKind::all_gather, gathered * r.master_bytes,
                                                                     group, sc.cluster, *nccl)
                                                     .seconds;
      }
    }
  } else {
    // DCP writes each tensor's own elements once (torch.distributed.checkpoint: a DTensor's
    // local chunk without FSDP2's dim-0 padding, which is not part of the tensor; what replicas
    // hold once, dedup_save_plans): the whole model and its state, spread over the ranks. (It
    // was every rank's padded shard: Mixtral at EP 1 on 64 GPUs, 8 expert rows over 64 ranks,
    // came out 7.76x the model, 4,050 GiB.)
    // DeepSpeed ZeRO-3 saves each rank's fp32 flat groups and optimizer state, not its 16-bit
    // partitions (stage3.py _rigid_state_dict: OPTIMIZER_STATE_DICT and FP32_FLAT_GROUPS; the
    // module state dict holds ZeRO-3's empty placeholders).
    const bool params_in_master_only = deepspeed_zero_stage(sc) == 3 && state_tensors > 0;
    const double whole = (params_in_master_only ? 0.0 : r.model_elements * r.stored_bytes) +
                         r.model_elements * state_tensors * r.master_bytes;
    save.peak.device_bytes = base;
    save.peak.device_at = "state only (each rank writes its shards as they are)";
    double largest_tensor =
        std::max(r.largest_unit_shard_elements * r.stored_bytes,
                 c.optimizer && state_tensors > 0 ? r.largest_unit_shard_elements * r.master_bytes : 0.0);
    if (sc.training.master_weights == MasterWeights::optimizer_state && state_tensors > 0) {
      // DeepSpeed's torch.save copies one storage at a time to the host (torch/serialization.py
      // _save: storage.cpu()), and its storages are flat: ZeRO-3's fp32 groups and states one
      // per optimizer sub-group, ZeRO-1/2's one per parameter group (this rank's whole
      // partition). (The session-36 audit: a unit's shard, 1.05 GB a node for Llama-3.1-70B on
      // 64 GPUs, where a 1e9-element sub-group stages 4 GB a rank, 32 GB a node.)
      const double flat = deepspeed_zero_stage(sc) == 3 ? r.largest_sub_group_elements : r.optimizer_elements;
      largest_tensor = std::max(largest_tensor, flat * r.master_bytes);
    }
    save.rank0_host_bytes = largest_tensor;
    save.peak.host_bytes_per_node = gpn * largest_tensor;
    save.peak.host_at = "each rank stages its largest tensor (one at a time)";
    save.bytes_written_total = whole;
    save.bytes_written_per_node = whole / sc.cluster.nodes;
    copied = whole / static_cast<double>(sc.world_size());
  }
  // Offloaded state is already on the host: it stays there during the save.
  save.peak.host_bytes_per_node += static_cast<double>(step.allocated_at_start_host) * gpn;
  save.copy_seconds = pcie_gbps > 0 ? copied / (pcie_gbps * 1e9) : 0;
  if (sc.cluster.storage_write_gbps > 0)
    save.write_seconds = save.bytes_written_per_node / (sc.cluster.storage_write_gbps * 1e9);
  return save;
}

JobFit job_fit(const std::vector<PhasePeak>& phases, double device_overhead_bytes, double gpu_memory_bytes,
               double host_memory_bytes) {
  JobFit fit;
  fit.phases = phases;
  double least = std::numeric_limits<double>::infinity();
  auto consider = [&](const PhasePeak& p, const char* resource, double margin) {
    if (margin < least) {
      least = margin;
      fit.binding_phase = p.phase;
      fit.binding_resource = resource;
      fit.binding_margin_bytes = margin;
    }
  };
  for (const PhasePeak& p : phases) {
    consider(p, "GPU", gpu_memory_bytes - (p.device_bytes + device_overhead_bytes));
    if (host_memory_bytes > 0) consider(p, "host", host_memory_bytes - p.host_bytes_per_node);
  }
  fit.fits = fit.binding_margin_bytes >= 0;
  return fit;
}

std::string job_remedy(const Scenario& sc, const JobFit& fit) {
  if (fit.fits || fit.binding_phase == "step") return "";
  const bool gpu = fit.binding_resource == "GPU";
  const CheckpointSpec& c = sc.checkpoint;
  if (fit.binding_phase == "checkpoint save" && c.kind == CheckpointSpec::Kind::full) {
    if (gpu && !c.offload_to_cpu) return "checkpoint.offload_to_cpu true (each clone goes to the host as it is made)";
    if (!gpu && !c.rank0_only) return "checkpoint.rank0_only true (rank 0 alone keeps the gathered state)";
    return "checkpoint.state_dict sharded (nothing gathered: each rank writes its shards)";
  }
  if (fit.binding_phase == "init") {
    const bool fsdp1 = sc.fsdp.version == 1 && sc.training.master_weights != MasterWeights::optimizer_state;
    if (!gpu && sc.init.device == InitSpec::Device::cpu && !sc.init.sync_module_states && fsdp1)
      return "init.sync_module_states true (rank 0 builds the model on the host alone), or init.device meta";
    if (sc.init.device != InitSpec::Device::meta) return "init.device meta (each unit materialised as it is sharded)";
  }
  return "";
}

}  // namespace fsdpsim::planner
