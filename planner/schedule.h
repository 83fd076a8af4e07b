// The Schedule IR: one training step of one rank as ops in CPU issue order.
//
// The planner decides WHAT happens (ops, their cost inputs, the memory each allocates
// and frees); engines and the runtime decide WHEN. Ops run on streams in issue order;
// `deps` are cross-stream events (the op waits on the GPU); `cpu_waits` block the CPU
// before issuing the op (limit_all_gathers). Allocations and frees happen when the op is
// issued, which is when PyTorch's caching allocator sees them (its memory_allocated).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <nlohmann/json.hpp>

#include "planner/kernel_shapes.h"

namespace fsdpsim {
class JsonReader;  // models/json_input.h
}

namespace fsdpsim::planner {

// all_to_all (appended last so the older kinds keep their indices): Mixture-of-Experts
// expert-parallel dispatch and combine. Its comm_bytes is the per-rank SEND buffer, the whole
// of it: each member sends comm_bytes / ranks to every member (itself included, a local
// copy), so (ranks-1)/ranks of it leaves the rank; the receive buffer is as large (even
// splits). See planner/collectives.h (CollectiveKind::all_to_all) and docs/schema.md.
enum class OpKind {
  all_gather, reduce_scatter, all_reduce, copy_in, copy_out, compute_fwd, compute_bwd,
  recompute, optimizer, h2d, d2h, wait, all_to_all, nvme_read, nvme_write
};
enum class Phase { forward, backward, optimizer };
// nvme_read / nvme_write: ZeRO-Infinity's swaps between the node's NVMe and a pinned host buffer
// (DeepSpeed's aio swappers, offload_*=nvme), on the host stream; comm_bytes is what moves.
// all_to_all: the stream of expert-parallel all-to-alls (PyTorch runs them, like every c10d
// collective, on the process group's NCCL stream; the compute stream waits for them).
enum class Stream { compute, all_gather, reduce_scatter, all_reduce, copy, host, all_to_all };
enum class MemCategory {
  sharded_param, unsharded_param, sharded_grad, unsharded_grad, optimizer_state, activation,
  all_gather_buffer, reduce_scatter_buffer, temporary, input,
  workspace  // library workspaces held for the whole job (PyTorch's cuBLAS workspaces)
};
constexpr int kStreamCount = 7;
constexpr int kMemCategoryCount = 11;

// Where an allocation lives. Device memory goes through the caching allocator; host memory
// (CPU offload's state and staging) is counted apart, pinned (page-locked: what cudaMemcpyAsync
// needs to overlap, cudaHostAlloc / tensor.pin_memory()) or pageable (ordinary malloc: torch.optim's
// state on CPU tensors).
enum class Placement { device, pinned_host, pageable_host };
constexpr int kPlacementCount = 3;
std::string to_string(Placement p);
inline bool on_host(Placement p) { return p != Placement::device; }

std::string to_string(OpKind k);
std::string to_string(Stream s);
std::string to_string(MemCategory c);
std::string to_string(Phase p);
// Inline: the engines ask it per stream per event.
inline bool is_collective(OpKind k) {
  return k == OpKind::all_gather || k == OpKind::reduce_scatter || k == OpKind::all_reduce ||
         k == OpKind::all_to_all;
}
// A module's own kernels (forward, backward, or the forward again under checkpointing): the ops
// the cost model prices by the module's GEMMs, attention and memory-bound kernels.
inline bool is_module_compute(OpKind k) {
  return k == OpKind::compute_fwd || k == OpKind::compute_bwd || k == OpKind::recompute;
}

// A process group: `ranks` GPUs over `nodes` nodes, laid out with `stride`.
//
// Layout: world ranks are node-major. An instance's members are `stride` ranks apart:
// stride 1 is a block of consecutive ranks (FSDP's shard group), stride world/ranks takes
// one rank from each block (HSDP's replicate group). Instances tile the world: the ranks*stride
// ranks from (r / (ranks*stride)) * ranks*stride hold `stride` instances (group_members).
//
// One process group is one NCCL communicator: see [Communicator order] below.
struct ProcessGroup {
  std::string name;  // "shard", "replicate", "world", "reshard"
  int ranks = 1;
  int nodes = 1;
  int stride = 1;
};

struct Allocation {
  int id = 0;
  std::string label;  // what it is, e.g. "unsharded params of layers.3"
  std::int64_t bytes = 0;
  MemCategory category = MemCategory::temporary;
  Stream stream = Stream::compute;  // the stream whose allocator pool serves it
  bool persistent = false;  // alive before the step starts (sharded params, optimizer state)
  bool model_state = false;  // counted in model_state_bytes (what ZeRO's arithmetic counts)
  Placement placement = Placement::device;
  // recordStream: the block is used by ops of another stream than the one that allocated it, and
  // the framework called tensor.record_stream(that stream) before freeing it (FSDP1's unsharded
  // flat parameter, recorded on the compute stream). The caching allocator then cannot reuse it
  // until the work queued on that stream when it was freed has finished (planner/memory.h,
  // CachingAllocatorModel::free_after). -1: not recorded (freed blocks are reusable at once).
  int recorded_stream = -1;
  // The FSDP unit it belongs to (its parameters, their gradients, the activations of its
  // modules), -1 for none: what per-unit reports (estimate --by-unit) sum.
  int unit = -1;
  // [State made at the first step] Persistent state a job makes only during its first step: the
  // op of that step that makes it (torch.optim's state, made by the optimizer's first step()).
  // The step a job repeats starts with it alive; the first step runs without it until then, and
  // what the caching allocator keeps of that first step is where later steps run (memory.h,
  // replay_memory). -1: alive before the first step.
  int first_step_op = -1;
};

// The kernels a compute op runs, by shape: its GEMMs and its attention call. Ops of identical
// modules share one set (a 32-layer model has a handful), so an op holds an index.
struct KernelSet {
  std::vector<GemmShape> gemms;  // in launch order
  // The routed experts' projections of a MoE layer, one grouped kernel each (after `gemms`).
  std::vector<GroupedGemmShape> grouped_gemms;
  bool has_attention = false;
  AttentionShape attention;
  AttentionPass attention_pass = AttentionPass::forward;
  // The module's costs materialise the score matrix (a model imported with eager attention):
  // QK^T and AV run as batched matmuls, and the softmax traffic is already in the op's
  // hbm_bytes, so the cost model prices only the matmuls.
  bool scores_materialized = false;
  // Float8 training's scaling kernels (amax reductions and casts to fp8 of the float8 linears'
  // inputs, weights and output gradients: planner/float8.h), HBM bytes per kernel in launch
  // order; the cost model prices each as a memory-bound kernel with a launch floor.
  std::vector<double> cast_kernel_bytes;

  double flops() const;  // GEMM FLOPs plus attention FLOPs without a causal discount (as Op::flops)
};

// Op ids or allocation ids: most ops list a few, so they live inline (a plan has four lists
// per op; heap-allocating each was a tenth of a sweep point).
using IdList = boost::container::small_vector<int, 4>;

struct Op {
  int id = 0;
  OpKind kind = OpKind::compute_fwd;
  Stream stream = Stream::compute;
  std::string name;    // readable, e.g. "fwd layers.3"
  int unit = -1;       // FSDP unit, -1 if none
  std::string module;  // module full name it belongs to
  int micro_step = 0;
  Phase phase = Phase::forward;  // the pass that issues it
  // Cost inputs (the cost model turns them into seconds).
  double flops = 0;            // matrix + attention FLOPs
  double attention_flops = 0;  // the attention part of `flops`
  double hbm_bytes = 0;        // memory-bound traffic
  // The part of hbm_bytes that is eager attention's score matrix (the s^2 terms): kernels the
  // model files list one by one, so the eager factor (which multiplies per-token elementwise
  // chains) does not apply to it.
  double score_hbm_bytes = 0;
  double comm_bytes = 0;       // collective buffer size as NCCL counts it; copy size for h2d/d2h
  int group = -1;              // index into Schedule::groups for collectives
  int kernel_set = -1;         // index into Schedule::kernel_sets; -1: priced by flops alone
  IdList allocs;     // allocation ids made when the op is issued
  IdList frees;      // allocation ids released when the op is issued (after its allocs)
  IdList deps;       // ops that must finish before this op starts (cross-stream events)
  IdList cpu_waits;  // ops the CPU waits for before issuing this op
};

// PYTORCH_CUDA_ALLOC_CONF's settings the caching-allocator model follows (planner/memory.h):
// what the planner's replay and the runtime's allocator both play the schedule under.
struct AllocatorSettings {
  // expandable_segments:True: one segment per stream and pool that grows by mapping pages.
  bool expandable_segments = false;
  // max_split_size_mb, in bytes; the largest int64 stands for PyTorch's default (SIZE_MAX:
  // every block may be split).
  std::int64_t max_split_size_bytes = std::numeric_limits<std::int64_t>::max();
  bool max_split_size_set() const { return max_split_size_bytes != std::numeric_limits<std::int64_t>::max(); }
};

// [Job prelude] What a job does to GPU memory before its first step that shapes the caching
// allocator's cache every step then runs in: FSDP1 building its units one by one (each unit's
// parameters materialised in the stored dtype, flattened into one flat parameter, its shard
// cloned out, then the whole copies freed: torch/distributed/fsdp/_init_utils.py
// _init_param_handle_from_module, _flat_param.py flatten_tensors and _get_shard). Nothing the
// prelude makes stays allocated but the persistent state it makes (the shards), yet the
// segments it made stay reserved: PyTorch returns them only on empty_cache() or when a later
// cudaMalloc fails. The planner's replay and the runtime's executor play it, in order, before
// the first step. Each event allocates or frees one allocation; a persistent allocation made
// here is not made again at the step's start, and a non-persistent one must be freed here.
struct PreludeEvent {
  int allocation = 0;
  bool free = false;  // false: allocate it
};

struct Schedule {
  std::string name;
  AllocatorSettings allocator;
  int world_size = 1;
  int micro_steps = 1;
  double tokens_per_rank = 0;      // tokens one rank processes in the step
  double model_flops_per_rank = 0;  // 3 x forward FLOPs (6N + attention), for MFU
  // The CPU threads a rank's host ops (Stream::host: the offloaded optimizer step, FSDP2's host
  // gradient accumulation) run on; 0: every hardware thread of the node, its memory bandwidth
  // shared by the node's ranks. What the cost model prices those ops at ([CPU optimizer threads]).
  int host_threads_per_rank = 0;
  std::vector<ProcessGroup> groups;
  std::vector<KernelSet> kernel_sets;
  std::vector<Allocation> allocations;
  std::vector<PreludeEvent> prelude;  // [Job prelude]; empty: the step's state is made as it starts
  std::vector<Op> ops;  // CPU issue order; ops[i].id == i
};

// The FLOPs an op's kernels execute, for HFU and for the runtime's stand-in GEMMs. `Op::flops`
// counts attention in attention_flops' convention: the whole square, a sliding window's band
// already taken (what the cost model's kernel pricing and the model files count). A fused causal
// kernel skips the tiles above the diagonal, so it executes half of that: then, with no
// recompute, the step's executed FLOPs equal `model_flops_per_rank`, whose causal attention is
// the same half (models::attention_pair_fraction). Eager attention multiplies the whole score
// matrix and masks it afterwards (`KernelSet::scores_materialized`), and an op without a kernel
// set says nothing of a mask: both execute `flops` as they stand.
double executed_flops(const Op& op, const Schedule& schedule);

// Instances of a group in the world, the members of one (ascending, the ring order) and the
// instance a rank belongs to; see ProcessGroup's layout.
int group_instance_count(const Schedule& schedule, int group);
std::vector<int> group_members(const Schedule& schedule, int group, int instance);
int group_instance_of(const Schedule& schedule, int group, int rank);

// [Communicator order] Collectives of one process group run one at a time, in issue order,
// whichever stream issues them. A process group is one NCCL communicator, and:
// - PyTorch's ProcessGroupNCCL runs a communicator's collectives on its own NCCL stream,
//   which first waits for the caller's current stream (torch/csrc/distributed/c10d/
//   ProcessGroupNCCL.cpp, note [Sync Streams]);
// - NCCL itself orders the kernels of one communicator launched from different user streams
//   through the communicator's internal device stream (NVIDIA/nccl src/enqueue.cc,
//   ncclLaunchPrepare: the device stream waits on the user streams, then the launch stream
//   waits on the device stream).
// So FSDP1's and FSDP2's all-gather and reduce-scatter streams, which use one process group,
// do not overlap their collectives; HSDP's replicate all-reduce (another group) does overlap
// the shard group's. The analytic engine, the SimGrid engine and the runtime all obey it
// through this function: for each op, the collective issued last before it on the same
// process group (-1: none, or not a collective).
std::vector<int> previous_on_communicator(const Schedule& schedule);

nlohmann::json schedule_to_json(const Schedule& schedule);

// The "allocator" object of a scenario and of a schedule file: {"expandable_segments": bool,
// "max_split_size_mb": integer >= 20}, PYTORCH_CUDA_ALLOC_CONF's options of those names.
AllocatorSettings parse_allocator_settings(JsonReader& reader);
nlohmann::json allocator_settings_to_json(const AllocatorSettings& settings);

// An op as trace viewers show it (a Chrome trace event's "args"): id, kind, stream, unit,
// module, phase, micro-step, its nonzero cost inputs, its process group and the bytes it
// allocates and frees. The engines' and the runtime's traces add their own timings.
nlohmann::json op_trace_args(const Schedule& schedule, const Op& op);
// Checks ids, references, alloc-before-free, and that the dependency graph is acyclic;
// errors name the file, the JSON path and the op.
Schedule schedule_from_json(const nlohmann::json& json, const std::string& file);

// Whether some state of the schedule is made at the first step ([State made at the first
// step]): then the first step differs from the steady one, and what the caching allocator keeps
// depends on it.
bool makes_state_at_first_step(const Schedule& s);
// Per op, the allocations the first step makes at it ([State made at the first step]): what the
// planner's replay and the runtime's executor both make when they play the first step.
std::vector<std::vector<int>> made_at_first_step_by_op(const Schedule& s);
// [Job prelude] Per allocation, whether the prelude makes it (persistent state it makes is not
// made again when the step starts).
std::vector<char> made_in_prelude(const Schedule& s);

// Structural checks shared by the JSON reader and the planner's own tests: every reference
// in range, no op depending on itself, every allocation made once and freed at most once
// after it is made, no cycle.
void validate_schedule(const Schedule& schedule, const std::string& file);

// The most bytes a schedule's allocations may add up to, all of them, live or not: 2^62 (4
// EiB), far past any GPU. Bounding the total of all bounds every sum the memory replay and
// the runtime's allocator take, and leaves 2^62 below int64's limit for the caching
// allocator's rounding (at most 2 MiB per allocation), so none of them can overflow.
constexpr std::int64_t kMaxScheduleAllocationBytes = std::int64_t{1} << 62;
// The id of the allocation at which the running total of every allocation's bytes passes
// kMaxScheduleAllocationBytes; -1 when it never does.
int allocation_total_overflow(const Schedule& schedule);

}  // namespace fsdpsim::planner
