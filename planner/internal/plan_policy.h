// Private to planner/: how the step is written. plan.cpp's skeleton walks the forward program
// (planner/plan_layout.h) once per micro-step, forward then backward, and issues the module
// computes, activations and gradients every framework has; at each unit's hooks it calls a
// FrameworkPolicy, which issues that framework's communication and the memory it holds:
//   plan_fsdp2.cpp       FSDP2 (fully_shard): FSDPParamGroup's unshard, wait_for_unshard, reshard
//   plan_fsdp1.cpp       FSDP1 (FullyShardedDataParallel): FlatParameter all-gathers, the
//                        limit_all_gathers rate limiter
//   plan_fsdp_grads.cpp  the gradient reduction both FSDP versions share
//   plan_zero.cpp        DDP (NO_SHARD) and ZeRO-1: replicated gradients reduced once per step;
//                        ZeRO-1/2's gather of the updated parameters after the optimizer step
//   plan_zero3.cpp       DeepSpeed ZeRO-3 with its `deepspeed` object: the parameter coordinator's
//                        fetch, prefetch and release rules, persistent parameters, reduce buckets
// Without the object DeepSpeed ZeRO-3 is planned as FSDP2, DeepSpeed ZeRO-2 as FSDP with replicated parameters
// (planner/fsdp_rules.h, sharded_model_state). StepContext (plan_context.cpp) is what the
// skeleton and the policy share: the schedule being written, the op and allocation building
// blocks, and the per-unit state both read.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <stdexcept>
#include <vector>

#include "models/checked_arithmetic.h"
#include "planner/fsdp_rules.h"
#include "planner/internal/plan_layout.h"

namespace fsdpsim::planner {

// An op's name or an allocation's label as prefix + subject + suffix, joined only when the
// plan keeps names: a sweep's plans do not, and building ~1,000 strings per plan was a
// tenth of a sweep point.
struct Name {
  Name(const char* p) : prefix(p) {}  // NOLINT: a plain literal is a name
  Name(const char* p, const std::string& s, const char* x = "") : prefix(p), subject(&s), suffix(x) {}
  // Sized once: appending to the prefix's string reallocated it up to twice per name.
  std::string str() const {
    const std::size_t p = std::strlen(prefix), x = std::strlen(suffix);
    std::string r;
    r.reserve(p + (subject ? subject->size() : 0) + x);
    r.append(prefix, p);
    if (subject) r += *subject;
    return r.append(suffix, x);
  }
  const char* prefix;
  const std::string* subject = nullptr;
  const char* suffix = "";
};

// The step's process groups, as indices into Schedule::groups (-1: the step has none).
struct StepGroups {
  int shard = -1;      // the ranks one parameter is sharded over
  int replicate = -1;  // one rank from each shard group (HSDP's all-reduce)
  int world = -1;      // every rank (DDP's all-reduce, ZeRO-1's reduce-scatter and gathers)
  int reshard = -1;    // FSDP2's reshard_after_forward=k group of k ranks
  int expert = -1;       // expert parallelism: the EP group (consecutive ranks), the all-to-alls
  int expert_shard = -1;  // the routed experts' FSDP group: the shard group's ranks ep apart
};

class StepContext {
 public:
  StepContext(const Scenario& scenario, const PlanCache::Layout& layout, Naming naming, Plan& plan);

  // ---- what the step is planned for
  const Scenario& scenario;
  const TrainingSpec& training;
  const FsdpSpec& fsdp;
  const PlanCache::Layout& layout;  // units, forward program, parameter indices
  Plan& plan;
  Schedule& schedule;
  const ShardedModelState sharded;
  StepGroups groups;

  // ---- bytes per element
  const int param_dtype_bytes;       // param_dtype: all-gathers, unsharded parameters and gradients
  const int reduce_dtype_bytes;        // reduce_dtype: reduce-scatter and all-reduce
  const int master_dtype_bytes;        // master_dtype: optimizer state (and DeepSpeed's master copy)
  // The parameters as stored between steps (FSDP2's orig_dtype): FSDP stores them in the
  // master dtype; DeepSpeed ZeRO stores the model in the compute dtype and keeps the master
  // copy in the optimizer.
  const int stored_param_dtype_bytes;
  // Per unit, FSDP2's float8 all-gather (fsdp.all_gather_dtype fp8): the gathered elements that
  // are float8 linears' weights, which travel and stay unsharded in fp8 (1 byte); empty without it.
  std::vector<std::int64_t> float8_gathered_numel;
  // Bytes of unit u's all-gather output and unsharded parameters: param_dtype, except the float8 weights.
  std::int64_t gathered_param_bytes(int u) const;
  // A buffer of `elements` of `dtype_bytes` each, checked (models/checked_arithmetic.h). The
  // planner bounds every parameter-sized buffer once (plan.cpp, check_buffer_sizes_fit) and the
  // DeepSpeed buckets at 2^50 elements, so no input reaches an overflow here today: the check
  // keeps a product that a later change lets past those bounds from wrapping silently.
  static std::int64_t buffer_bytes(std::int64_t elements, std::int64_t dtype_bytes) {
    return checked_mul(elements, dtype_bytes, "a buffer's bytes (elements x dtype bytes)");
  }

  // ---- where the writing is
  int micro_step = 0;
  Phase phase = Phase::forward;
  int last_op = -1;  // the op issued last: CPU-order frees hang on it
  bool first_micro_step() const { return micro_step == 0; }
  bool last_micro_step() const { return micro_step == schedule.micro_steps - 1; }

  // ---- state the skeleton and the policies share
  // Per unit: the op after which its unsharded parameters are ready (the all-gather for FSDP1,
  // the copy-out for FSDP2), -1 while it is sharded; the unit's computes depend on it.
  std::vector<int> params_ready_op;
  // Per unit: its unsharded gradient allocations of this micro-step (autograd's, made by the
  // skeleton), freed by the post-backward that reduces them.
  std::vector<std::vector<int>> unsharded_grads;
  std::vector<char> has_grad;  // per parameter: its gradient was made this micro-step
  // Per unit: the sharded gradient the optimizer steps (-1 while none); persists over
  // micro-steps, freed by the optimizer step (zero_grad(set_to_none=True)).
  std::vector<int> sharded_grad;
  // Per unit: unsharded gradients summed over micro-steps without reduction (-1 while none).
  std::vector<int> accumulated_grad;
  std::vector<int> gradient_ready_ops;  // ops after which a unit's gradient is ready: the optimizer waits for them

  // ---- offload: where the state lives (FSDP's cpu_offload; DeepSpeed's offload_optimizer and
  // offload_param, planner/scenario.h)
  // The parameter shards live on the host and are copied in before each all-gather.
  bool params_on_host() const {
    return fsdp.cpu_offload || fsdp.offload_param != FsdpSpec::OffloadDevice::none;
  }
  // The reduced gradients go to the host and the optimizer steps there.
  bool optimizer_on_host() const {
    return fsdp.cpu_offload || fsdp.offload_optimizer != FsdpSpec::OffloadDevice::none;
  }
  // DeepSpeed's offload (not FSDP's): its fp32 gradients, master and states live in host
  // buffers made once (persistent), and the updated partitions are copied back to the GPU.
  bool deepspeed_offload() const { return fsdp.offload_optimizer != FsdpSpec::OffloadDevice::none; }
  // Page-locked or not: FSDP pins its offloaded parameters and gradients (FSDP1 _flat_param.py
  // pins _local_shard and _cpu_grad; FSDP2 CPUOffloadPolicy(pin_memory=True) by default), DeepSpeed
  // pins its offloaded state unless offload_pin_memory is false.
  Placement deepspeed_host_placement() const {
    return fsdp.offload_pin_memory ? Placement::pinned_host : Placement::pageable_host;
  }

  // ---- building blocks
  int add_op(OpKind kind, Stream stream, const Name& name, int unit, const std::string& module = "");
  Op& op(int id) { return schedule.ops[id]; }
  // A ZeRO-Infinity swap (OpKind nvme_read / nvme_write) of `bytes` on the host stream, after
  // `after` (none for -1). DeepSpeed drives its aio swappers from the training process's CPU
  // side, between the GPU's work (swap_tensor/partitioned_param_swapper.py,
  // partitioned_optimizer_swapper.py).
  int nvme_swap(OpKind kind, double bytes, const Name& name, int unit, int after);
  bool params_on_nvme() const { return fsdp.offload_param == FsdpSpec::OffloadDevice::nvme; }
  // The copy of unit u's offloaded parameter shard (params_on_host) to the GPU before its
  // all-gather, on the all-gather stream; with offload_param nvme the shard is first read from
  // NVMe into a pinned swap buffer, and never written back in forward or backward (released
  // unchanged: partition_parameters.py _partition_param, "partition released since it exists in
  // nvme"). Returns the h2d op; `device_shard` gets the shard's device copy.
  int copy_offloaded_shard_to_device(int u, int& device_shard);
  bool optimizer_on_nvme() const { return fsdp.offload_optimizer == FsdpSpec::OffloadDevice::nvme; }
  int new_alloc(std::int64_t bytes, MemCategory category, Stream stream, const Name& label, bool persistent = false,
                bool model_state = false);
  // An allocation made when `op` is issued, on its stream.
  int alloc_at(int op, std::int64_t bytes, MemCategory category, const Name& label, bool model_state = false);
  // Host memory (Placement pinned_host / pageable_host): made when `op` is issued, or (op < 0)
  // persistent, alive when the step starts.
  int host_alloc(int op, std::int64_t bytes, MemCategory category, Placement placement, const Name& label,
                 bool model_state = true);
  // What FSDP's cpu_offload pins for unit u's shard ([Pinned host blocks], planner/sharding.h).
  std::int64_t pinned_shard_bytes(int u, int bytes_per_element) const {
    return planner::pinned_shard_bytes(unit(u), shard(u), shard_rule_of(scenario), fsdp.shard_group_size, fsdp.expert_parallel,
                                       bytes_per_element);
  }
  // Frees happen in CPU order: `alloc` is released when `op` is issued (the op issued last:
  // free_now), and reset to -1. Nothing for -1.
  //
  // [Frees in planning order] A free is attached to an op planned at or after `free_floor`, which
  // the step builder sets to the op count once the first forward is planned: what the forward's
  // ops leave allocated stays allocated through all of them, in the plan and in its replay. The
  // [Hopeless plans] stop after the first forward (planner/plan.h) counts on it, and a plan that
  // broke it would be refused here, whether or not it stops.
  int free_floor = 0;
  void free_at(int op, int& alloc) {
    if (alloc < 0) return;
    if (op < free_floor)
      throw std::logic_error("the planner freed allocation " + std::to_string(alloc) + " at op " + std::to_string(op) +
                             ", planned before the first forward's end (op " + std::to_string(free_floor) +
                             "): [Frees in planning order]");
    schedule.ops[op].frees.push_back(alloc);
    alloc = -1;
  }
  void free_now(int& alloc) { free_at(last_op, alloc); }

  const Unit& unit(int u) const { return plan.units[u]; }
  const UnitShard& shard(int u) const { return plan.shards[u]; }
  const std::string& label(int u) const {  // the unit's name, "root" for the root
    static const std::string root = "root";
    return unit(u).is_root ? root : unit(u).name;
  }
  // Whether unit u is all-gathered before use: its parameters are sharded and it has some.
  bool needs_gather(int u) const { return sharded.params && shard(u).numel > 0; }
  // The group unit u's parameters are gathered and its gradients reduce-scattered over: the
  // expert data-parallel group for routed experts under expert parallelism, else the shard group.
  int shard_group_of(int u) const { return groups.expert_shard >= 0 && is_expert_unit(unit(u)) ? groups.expert_shard : groups.shard; }
  // The unit after u in `order` (forward_units or backward_units) that needs a gather; -1 if none.
  int next_unit_to_gather(const std::vector<int>& order, int u) const;
  // The last compute-stream op before `op` (0 if none).
  int last_compute_before(int op) const;

  // ---- gradients
  // Autograd materialises a parameter's gradient (compute dtype, unpadded) when the backward
  // of the first module (in backward order) that uses it runs: allocated at `op`, per unit.
  void allocate_grads(int op, const std::vector<int>& params, const Name& name);
  void allocate_cublas_workspaces();
  void free_unsharded_grads(int op, int u);

 private:
  void count_float8_gathered_numel();  // fills float8_gathered_numel
  const Naming naming_;
  std::int64_t local_param_numel(int p) const;  // canonical parameter -> this rank's elements of it
};

// ---- DeepSpeed ZeRO-3's optimizer sub-groups (plan_zero3.cpp) --------------------------------
// stage3.py _create_fp16_sub_groups (deepspeedai/DeepSpeed@edaa722): the parameters, in the
// optimizer's order (one parameter group: model.parameters(), module pre-order, a tied weight
// once), are cut into sub-groups by their partitions' elements: a sub-group closes once it holds
// at least sub_group_size elements (the crossing parameter included) or at the last parameter;
// a sub_group_size of at least the whole partition makes one sub-group. A parameter's partition
// is DeepSpeed's, ceil(numel / W) elements (partition_parameters.py _partition_param: the
// parameter padded to a multiple of the W partitions).
struct OptimizerSubGroup {
  std::int64_t numel = 0;  // the rank's partition elements in it
  int params = 0;          // the parameters in it
};
std::vector<OptimizerSubGroup> deepspeed_sub_groups(const models::Model& model, int partition_ranks,
                                                   std::int64_t sub_group_size);
// [DeepSpeed's pinned blocks] What DeepSpeed's CPU-offloaded optimizer pins, in bytes as
// PyTorch's CachingHostAllocator holds them: it rounds every pinned block up to a power of two
// (aten/src/ATen/core/CachingHostAllocator.h allocate: c10::llvm::PowerOf2Ceil), and DeepSpeed
// pins few, large blocks (deepspeedai/DeepSpeed@edaa722): ZeRO-3 its 16-bit
// grad_partitions_flat_buffer (one block over the rank's partitions; stage3.py
// _setup_for_real_optimizer) and one fp32 gradient buffer per optimizer sub-group
// (initialize_optimizer_states: subgroup_gradient_buffer); ZeRO-1/2 the fp32 master and the fp32
// gradient partition of its one parameter group (stage_1_and_2.py). `partition_numel`: the rank's
// optimizer elements (ZeRO-1/2). Llama-3.1-70B on 64 GPUs, ZeRO-3: 2^32 + 2^32 + 2^29 B a rank
// where the exact sizes are 6.6 GB (the session-36 audit's 73.0 GB a node).
std::int64_t deepspeed_pinned_optimizer_bytes(const Scenario& scenario, std::int64_t partition_numel);
// The largest of them (partition elements): what DeepSpeed sizes its optimizer swap buffers by.
std::int64_t largest_deepspeed_sub_group(const models::Model& model, int partition_ranks, std::int64_t sub_group_size);

// A framework's hooks around each unit's forward and backward, named after PyTorch's
// (FSDPState._pre_forward/_post_forward/_pre_backward and the post-backward hook; FSDP1's
// _pre_forward, _post_forward, _pre_backward_hook, _post_backward_hook). The skeleton calls
// them in the order the hooks run: pre_forward before the unit's first module computes,
// post_forward after its last; pre_backward before its first backward compute, post_backward
// after its last.
class FrameworkPolicy {
 public:
  explicit FrameworkPolicy(StepContext& step) : step_(step) {}
  virtual ~FrameworkPolicy() = default;
  virtual void pre_forward(int unit) = 0;
  virtual void post_forward(int unit) = 0;
  virtual void pre_backward(int unit) = 0;
  virtual void post_backward(int unit) = 0;
  // After a micro-step's backward, its last post-backward done (FSDP2's root post-backward
  // final callback); not after the last micro-step's, which before_optimizer_step follows.
  virtual void after_backward() {}
  // Before the optimizer step: release what the last post-backward left for a later hook.
  virtual void before_optimizer_step() {}
  // After the optimizer step (`updated`: the op after which the updated partitions are in place).
  virtual void after_optimizer_step(int /*updated*/) {}
  // The sub-groups the optimizer steps one after another, each with its own transient fp32
  // gradient (DeepSpeed ZeRO-3); empty: one step over every shard.
  virtual std::vector<OptimizerSubGroup> optimizer_sub_groups() const { return {}; }

 protected:
  StepContext& step_;
};

// FSDP2, FSDP1 and the replicated-gradient strategies (NO_SHARD, ZERO1); plan.cpp picks the
// scenario's.
std::unique_ptr<FrameworkPolicy> make_fsdp2_policy(StepContext& step);
std::unique_ptr<FrameworkPolicy> make_fsdp1_policy(StepContext& step);
std::unique_ptr<FrameworkPolicy> make_replicated_grads_policy(StepContext& step);
// DeepSpeed ZeRO-3 with its buffers stated (the scenario's `deepspeed` object; plan_zero3.cpp).
std::unique_ptr<FrameworkPolicy> make_deepspeed_zero3_policy(StepContext& step);

// ---- DeepSpeed's gradient buckets (plan_zero.cpp) -------------------------------------------
// A bucket: the gradient elements one reduction carries, and the unit whose post-backward
// completes it (the reduction is issued there). Parameters fill buckets in the order their
// gradients become ready in backward, approximated as the units' post-backward order and, within a
// unit, its parameters in reverse definition order; a bucket's reduction is issued at the end of
// the unit that completes it (the planner's hooks are per unit, not per parameter).
struct GradientBucket {
  std::int64_t numel = 0;
  int closing_unit = -1;
  // DeepSpeed's buckets: the units whose last gradient the bucket holds (their gradients are all
  // reduced once it is).
  std::vector<int> completes_units;
};
// The units in the order their post-backward hooks run.
std::vector<int> post_backward_order(const StepContext& step);
// DeepSpeed's reduce buckets of at most reduce_bucket_size elements (a larger parameter alone).
std::vector<GradientBucket> deepspeed_buckets(const StepContext& step, std::int64_t reduce_bucket_size);

// ZeRO-1 and DeepSpeed ZeRO-2 (parameters replicated, optimizer state sharded): after the
// optimizer step every rank all-gathers the parameters the others updated (plan_zero.cpp).
void all_gather_updated_params(StepContext& step, int optimizer_op);

// ---- the gradient reduction FSDP1 and FSDP2 share (plan_fsdp_grads.cpp) ----------------------

// Gradients of the unit's parameters no costed module covers (autograd makes them too): made
// at its post-backward, before the reduction.
void allocate_uncovered_grads(StepContext& step, int u);

// Gradient accumulation without communication (fsdp.grad_sync last_micro_step: FSDP1's
// no_sync(), FSDP2's set_requires_gradient_sync(False)): this micro-step's unsharded gradients
// are added into a kept sum of `accumulated_dtype_bytes` per element. Whether this micro-step
// reduces (the last one does, and every one when gradients sync every micro-step).
bool reduces_this_micro_step(StepContext& step, int u, int accumulated_dtype_bytes);

// A unit's reduce-scatter, issued after its copy-in, and the output it writes.
struct ReduceScatter {
  int op = -1;
  int output = -1;         // allocation: this rank's reduced shard (reduce dtype)
  bool output_is_grad = false;  // the output becomes the sharded gradient as it is
};
ReduceScatter issue_reduce_scatter(StepContext& step, int u, int copy_in, Stream stream);

// After the reduce-scatter: HSDP's all-reduce across replicas, then the reduced shard moves to
// host memory (CPU offload) or is cast and added into the sharded gradient (FSDP2's post-reduce
// in foreach_reduce; FSDP1's _post_reduce_grad).
void finish_reduction(StepContext& step, int u, const ReduceScatter& rs);

}  // namespace fsdpsim::planner
