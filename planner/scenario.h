// A scenario: which model, on which cluster, trained how, sharded how.
//
// load_scenario() resolves the model and cluster references, applies `--set` overrides
// (also inside referenced files), and checks that the configuration is possible
// (world size shards, micro-batch divides the global batch, ...). Every field has a
// default; docs/schema.md lists them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "planner/device_memory.h"
#include "planner/hardware.h"
#include "planner/schedule.h"

namespace fsdpsim::planner {

enum class Strategy { NO_SHARD, ZERO1, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2 };
std::string strategy_name(Strategy s);
bool is_hybrid(Strategy s);

// Whether consecutive groups of `group` ranks (a shard group: ranks g*k .. g*k + group - 1)
// lie evenly on nodes of `gpus_per_node` GPUs: within a node, a divisor of it; across nodes,
// a multiple of it. Otherwise groups straddle nodes unevenly, which no NCCL communicator
// layout the cost model prices (planner::check_group) describes. One node: any group.
bool shard_group_spreads_evenly(int group, int world, int gpus_per_node);

enum class Optimizer { adamw, adam, sgd_momentum, none };
// Optimizer state tensors per parameter element (AdamW: exp_avg and exp_avg_sq).
int optimizer_states_per_param(Optimizer o);
// How the optimizer's step runs on the GPU (training.optimizer_kernel). foreach: torch.optim's
// default on CUDA (_multi_tensor_adamw and kin): a sequence of _foreach_ ops, some of which
// materialise an intermediate list as large as the parameters they update (sqrt(exp_avg_sq),
// the bias-corrected step). fused: one kernel that reads and writes each element once, with no
// intermediates: torch.optim's fused=True (aten/src/ATen/native/cuda/fused_adamw_impl.cu),
// DeepSpeed's FusedAdam (its default for Adam/AdamW without offload) and Apex's FusedAdam.
enum class OptimizerKernel { foreach, fused };

// Where the fp32 master weights live. FSDP: the sharded parameter itself is the master
// (stored in master_dtype, cast to param_dtype for compute). DeepSpeed ZeRO: the model
// holds param_dtype weights and the optimizer keeps a master_dtype copy as extra state.
enum class MasterWeights { sharded_param, optimizer_state };

// torchtitan: [torchtitan's wrap] (planner/units.h), FSDP2 only.
enum class WrapPolicy { block, every_k_blocks, size, modules, root, torchtitan };
struct WrapSpec {
  WrapPolicy policy = WrapPolicy::block;
  int every = 1;                          // every_k_blocks: blocks per unit
  std::int64_t min_num_params = 100000000;  // size: FSDP1 size_based_auto_wrap_policy threshold
  // modules: full names of wrapped modules; an entry of several names is one unit
  // (FSDP2's fully_shard([m1, m2]): siblings, gathered together).
  std::vector<std::vector<std::string>> modules;
  std::vector<std::string> block_types;   // block / every_k_blocks: override the block type
};

// fsdp.wrap as a scenario, a --set or a sweep axis may write it: a wrap object, or the shorthand
// for one ("block", "root", "every:K" or "every_k_blocks:K", "size:N"), returned as the object.
// Anything else is an InputError naming `file` and `path`.
nlohmann::json wrap_object(const nlohmann::json& value, const std::string& file, const std::string& path);

// A positive integer written as text ("4", "4.0", "1e3"), as the wrap shorthand and the sweep's
// axis values take it; nullopt for anything else (empty, trailing characters, zero, a fraction,
// 9e18 or more).
std::optional<std::int64_t> positive_integer_text(const std::string& text);

// full / every_k: checkpoint whole blocks (save the input, recompute the block in
// backward). selective: torchtitan's op-level SAC (save matmul and attention outputs,
// recompute the rest), from the model's sac_* costs.
enum class Checkpointing { none, full, every_k, selective };
enum class BackwardPrefetch { none, pre, post };

struct TrainingSpec {
  std::int64_t global_batch = 0;  // sequences per optimizer step, all ranks
  bool global_batch_stated = false;  // given (training.global_batch), not derived from grad_accum
  std::int64_t micro_batch = 1;   // sequences per rank per forward/backward
  std::int64_t seq_len = 2048;
  std::int64_t grad_accum = 1;    // micro-steps per step (derived when not given)
  models::DType param_dtype = models::DType::bf16;   // all-gather dtype; compute dtype unless autocast()
  models::DType reduce_dtype = models::DType::fp32;  // gradient reduction dtype
  models::DType master_dtype = models::DType::fp32;  // stored parameter / optimizer dtype
  Optimizer optimizer = Optimizer::adamw;
  OptimizerKernel optimizer_kernel = OptimizerKernel::foreach;
  MasterWeights master_weights = MasterWeights::sharded_param;
  // training.host_threads_per_rank: the CPU threads each rank's optimizer step (and FSDP2's host
  // gradient accumulation) runs on under offload, OMP_NUM_THREADS; 0: every hardware thread
  // (OpenMP's default), the node's memory bandwidth then shared by its ranks. Unstated: the
  // launcher's default, which the planner picks ([CPU optimizer threads], planner/plan.cpp).
  std::optional<int> host_threads_per_rank;
  Checkpointing checkpointing = Checkpointing::none;
  int checkpoint_every = 1;  // every_k: checkpoint one block in k
  // Whether the transformer blocks run under torch.compile. compiled: fused elementwise
  // kernels, memory-bound work priced at the fused traffic the model files count; eager: the
  // calibration's eager_memory_bound_factor times that; unstated (the field absent): the
  // model files' fused traffic, as before the field existed.
  enum class Execution { unstated, eager, compiled };
  Execution execution = Execution::unstated;
  // training.loss: the cross-entropy's kernel (models::LossKind; docs/schema.md). Unstated: the
  // kind the model's output layer was imported with (its costs' "loss" object). The planner
  // recomputes the output layer's costs for a stated kind (planner/plan.cpp).
  std::optional<models::LossKind> loss;
  // training.attention: the attention kernel, one of kAttentionKernelNames, validated here and
  // stored by name ("eager" only for a model whose attention costs materialise the scores,
  // checked by the planner). "auto": the kernel the model's costs were imported for.
  std::string attention = "auto";
  // training.liger: Liger-Kernel's default patch (RMSNorm, rotary, SwiGLU/GeGLU, fused linear
  // cross-entropy; models::DecoderBlockShape::liger). Unstated: as the model was imported
  // (models::Model::liger); stated, it must match (an hf: model is imported for it).
  std::optional<bool> liger;
  // training.matmul_dtype: what the linear layers' GEMMs run in. param_dtype (the default), or
  // fp8: float8 training as torchao's convert_to_float8_training does it (Float8Linear,
  // tensorwise dynamic scaling), with torchtitan's filter: every nn.Linear whose weight dims are
  // multiples of 16, except the output layer; attention stays 16-bit. docs/cost-model.md, "fp8".
  models::DType matmul_dtype = models::DType::bf16;
  // float8 linears on top of a 16-bit param_dtype (param_dtype fp8 is the older, whole-model
  // fp8 of the memory model: every GEMM priced at the fp8 peak).
  bool float8_linears() const { return matmul_dtype == models::DType::fp8 && param_dtype != models::DType::fp8; }
  // Some of the model's matmuls run in fp8 (either way above): MFU and HFU then divide by the
  // GPU's dense fp8 peak (CostModel::mfu_peak_flops), which bounds them by 1.
  bool fp8_matmuls() const { return matmul_dtype == models::DType::fp8; }
  // "fp8" or "bf16": the dense peak MFU and HFU divide by (CostModel::mfu_peak_flops), named
  // once for the cost model and the reports.
  const char* mfu_peak_dtype() const { return fp8_matmuls() ? "fp8" : "bf16"; }
  // [Autocast over fp32 parameters] param_dtype fp32 with a 16-bit matmul_dtype: torch.autocast
  // runs the GEMMs and attention in matmul_dtype over parameters FSDP gathers in fp32 (Lightning's
  // FSDPStrategy "bf16-mixed": MixedPrecision(param_dtype=float32, reduce_dtype=bfloat16);
  // llama-recipes' bfSixteen_mixed; Composer's DEFAULT before 0.14). docs/cost-model.md says what
  // the plan holds: each Linear's weight cast at every use and its copy saved for backward.
  bool autocast() const {
    return param_dtype == models::DType::fp32 &&
           (matmul_dtype == models::DType::bf16 || matmul_dtype == models::DType::fp16);
  }
  // What GEMMs, attention and activations run in: matmul_dtype under autocast, else param_dtype.
  models::DType compute_dtype() const { return autocast() ? matmul_dtype : param_dtype; }
  // training.moe_imbalance: the busiest expert's routed tokens over the mean expert's (1: every
  // expert gets tokens x top_k / experts). It skews the grouped GEMMs and, under expert
  // parallelism, loads the busiest rank's experts and all-to-alls (planner/moe.h).
  double moe_imbalance = 1.0;
};

// The names training.attention accepts.
extern const std::vector<std::string> kAttentionKernelNames;

struct FsdpSpec {
  int version = 2;
  Strategy strategy = Strategy::FULL_SHARD;
  int shard_group_size = 0;  // ranks one parameter is sharded over (world, or the HSDP group)
  WrapSpec wrap;
  // Ranks the parameters are resharded to after forward: shard_group_size (true),
  // 0 (false: keep unsharded until backward), or k (FSDP2's int: a 1/k copy per rank).
  int reshard_after_forward = 0;
  bool forward_prefetch = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::pre;
  // fsdp.prefetch_depth (FSDP2 only): units each prefetch reaches ahead, as FSDP2's explicit
  // lists set them (FSDPModule.set_modules_to_backward_prefetch / set_modules_to_forward_prefetch
  // with the next k units). 1 is FSDP2's default backward prefetch of one group (and one unit
  // with forward_prefetch); k keeps up to k all-gathers in flight ahead of the running unit.
  int prefetch_depth = 1;
  bool limit_all_gathers = true;
  bool cpu_offload = false;  // FSDP's: CPUOffload(offload_params=True) / CPUOffloadPolicy
  // DeepSpeed ZeRO's offload (zero_optimization.offload_optimizer / offload_param, device none |
  // cpu | nvme; deepspeed/runtime/zero/offload_config.py): the optimizer state, fp32 master
  // and fp32 gradients on the host (or NVMe) with the optimizer step on the CPU; offload_param
  // (ZeRO-3 only) also the compute-dtype parameter partitions. For DeepSpeed's layout
  // (training.master_weights optimizer_state); FSDP's is cpu_offload.
  enum class OffloadDevice { none, cpu, nvme };
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;
  // DeepSpeed's offload pin_memory (default True in offload_config.py): host state page-locked.
  bool offload_pin_memory = true;
  // Gradient accumulation without communication (FSDP1 no_sync(), FSDP2
  // set_requires_gradient_sync(False) on every micro-step but the last): unsharded gradients
  // accumulate (FSDP2: in the reduce dtype) and are reduced once, in the last micro-step.
  bool sync_grads_every_micro_step = true;
  // fsdp.all_gather_dtype fp8: torchao's enable_fsdp_float8_all_gather (FSDP2 only): the
  // float8 linears' weights are cast to fp8 on the shard and all-gathered in fp8 (1 byte), the
  // unsharded weight is that fp8 tensor, and the scales come from one all-reduce of amaxes per
  // step (precompute_float8_dynamic_scale_for_fsdp). Other parameters gather in param_dtype.
  bool float8_all_gather = false;
  // A 16-bit dtype named in fsdp.all_gather_dtype (checked against training.param_dtype); absent:
  // "param_dtype", fp8, or not stated.
  std::optional<models::DType> all_gather_dtype_named;
  // fsdp.expert_parallel: ranks the routed experts of a MoE layer are split over (torchtitan's EP
  // degree, 1 = none). The EP groups are consecutive ranks within a shard group; the experts'
  // FSDP shards them over the shard group's other ranks (planner/moe.h).
  int expert_parallel = 1;
  // The strategy the scenario asked for when FSDP1 runs another ([FSDP1 at one rank],
  // planner/scenario.cpp): FullyShardedDataParallel runs NO_SHARD on a world of one rank.
  std::optional<Strategy> requested_strategy;
};

// How the model is built before sharding (the scenario's `init`; planner/job_memory.h):
// meta: on the meta device, materialised unit by unit (FSDP1 param_init_fn / to_empty, FSDP2
// fully_shard then to_empty, DeepSpeed zero.Init); cpu: on each rank's CPU (with
// sync_module_states, only rank 0's copy is real, the others on meta); cuda: on each GPU whole.
struct InitSpec {
  enum class Device { meta, cpu, cuda };
  Device device = Device::meta;
  bool stated = false;  // the scenario named an init (else meta, reported as the default)
  bool sync_module_states = false;  // rank 0's values broadcast unit by unit
};

// The checkpoint a job saves (the scenario's `checkpoint`; planner/job_memory.h). full: FSDP1
// FULL_STATE_DICT (FSDP2/DCP: get_model_state_dict with full_state_dict=True), unit by unit
// all-gathered; sharded: SHARDED_STATE_DICT / torch.distributed.checkpoint, each rank writes
// its own shards.
struct CheckpointSpec {
  bool enabled = false;  // the scenario has a `checkpoint` object
  enum class Kind { full, sharded };
  Kind kind = Kind::sharded;
  bool rank0_only = true;      // full: only rank 0 keeps the gathered state
  bool offload_to_cpu = true;  // full: each gathered tensor is copied to the CPU at once
  bool optimizer = true;       // the optimizer state is saved too
};

// ---- buffer sizes (issue 21): DeepSpeed ZeRO's buckets and DDP's ------------------------------

// The scenario's `deepspeed` object: DeepSpeed ZeRO's zero_optimization buffer knobs, by its
// names. Defaults are DeepSpeed's (deepspeedai/DeepSpeed@edaa722, deepspeed/runtime/zero/config.py,
// DeepSpeedZeroConfig): reduce_bucket_size and allgather_bucket_size pp_int(5e8) elements,
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9, stage3_max_reuse_distance 1e9,
// stage3_param_persistence_threshold 1e5, contiguous_gradients True, overlap_comm None = True
// under stage 3 and False otherwise (the overlap_comm_valid validator). Only for the DeepSpeed
// layout (training.master_weights optimizer_state) under ZERO1, SHARD_GRAD_OP or FULL_SHARD.
// ZeRO-1/2 read reduce_bucket_size, overlap_comm and contiguous_gradients (planner/plan_zero.cpp)
// and refuse the stage3_* fields (DeepSpeed no-ops there); ZeRO-3 reads those and the stage3_*
// fields (planner/plan_zero3.cpp) and sub_group_size (the optimizer step's sub-groups, stage3.py
// _create_fp16_sub_groups; refused under ZeRO-1/2: engine.py hands it to the stage-3 optimizer
// only). allgather_bucket_size is refused (a no-op under stages 1/2 with all_gather_into_tensor,
// unused under stage 3). Absent (`stated` false): the planner plans the reduction per unit (and
// ZeRO-3 as FSDP2), as before the object existed; sub_group_size keeps DeepSpeed's default, which
// ZeRO-Infinity's NVMe optimizer swap buffers read either way.
struct DeepSpeedSpec {
  bool stated = false;
  std::int64_t reduce_bucket_size = 500000000;     // elements per gradient reduction
  std::int64_t allgather_bucket_size = 500000000;  // elements per post-step parameter all-gather (stage 1/2)
  std::int64_t stage3_prefetch_bucket_size = 50000000;    // elements one prefetch gathers ahead (at most)
  std::int64_t stage3_max_live_parameters = 1000000000;   // gathered elements past which no prefetch starts
  std::int64_t stage3_max_reuse_distance = 1000000000;    // trace elements within which a reuse keeps a gather
  std::int64_t stage3_param_persistence_threshold = 100000;  // parameters of at most this many elements stay whole
  // Partition elements per optimizer sub-group (config.py: `sub_group_size: int = Field(pp_int(1e9), ge=0)`).
  std::int64_t sub_group_size = 1000000000;
  bool overlap_comm = false;  // resolved: the stated value, else stage 3
  bool contiguous_gradients = true;
};

// The scenario's `ddp` object (NO_SHARD only): torch.nn.parallel.DistributedDataParallel's Reducer.
// bucket_cap_mb: 25 by default (distributed.py: bucket_cap_mb None -> 25, bucket_bytes_cap =
// int(bucket_cap_mb * 1024 * 1024)); the first bucket in backward order is capped at
// dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB). gradient_as_bucket_view False by default: param.grad
// and the bucket are two copies. Absent: NO_SHARD all-reduces per unit (FSDP's NO_SHARD).
struct DdpSpec {
  bool stated = false;
  double bucket_cap_mb = 25.0;
  bool gradient_as_bucket_view = false;
  std::int64_t bucket_cap_bytes() const { return static_cast<std::int64_t>(bucket_cap_mb * 1024 * 1024); }
};
constexpr std::int64_t kDdpFirstBucketBytes = 1024 * 1024;  // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES

// The most memory an input may state, beyond any GPU: a GPU's memory, the memory outside its
// allocator, the headroom to keep free. Larger values are unit mistakes, and 1e308 overflowed to
// infinity once in bytes or kept the advice searching without end (the session-38 input audit).
constexpr double kPebibyteBytes = 1125899906842624.0;  // 2^50
constexpr double kMaxHeadroomGiB = 1048576;            // 2^20 GiB, a pebibyte

struct Scenario {
  std::string file;  // for error messages and reports
  std::string name;
  models::SharedModel model;  // shared by the scenario's copies: read-only once parsed
  ClusterSpec cluster;
  TrainingSpec training;
  FsdpSpec fsdp;
  nlohmann::json calibration;  // the calibration object (inline or loaded), may be null
  std::string calibration_file;
  nlohmann::json published;    // published figures of a real run, may be null
  // The SimGrid engine's options (sim/simgrid_options.h reads and checks them; every command
  // loads scenarios through sim::load_scenario, which does), may be null.
  nlohmann::json simulation;
  InitSpec init;
  CheckpointSpec checkpoint;
  // `allocator`: PYTORCH_CUDA_ALLOC_CONF's expandable_segments and max_split_size_mb, which
  // the plan's schedule carries to the memory replay and the runtime.
  AllocatorSettings allocator;
  DeepSpeedSpec deepspeed;  // `deepspeed` (buffer knobs)
  DdpSpec ddp;              // `ddp` (buffer knobs)
  // `nccl`: NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE, NCCL_MIN/MAX_NCHANNELS, which
  // size NCCL's buffers in the device overhead (planner/device_memory.h).
  NcclBufferSettings nccl;

  int world_size() const { return cluster.world_size(); }
  int replicas() const { return world_size() / fsdp.shard_group_size; }
};

// The DeepSpeed ZeRO stage a scenario runs: DeepSpeed's layout (training.master_weights
// optimizer_state) under ZERO1 (1), SHARD_GRAD_OP (2) or FULL_SHARD (3); 0 for anything else.
int deepspeed_zero_stage(const Scenario& s);

// Where the shipped catalogs live: $FSDPSIM_ROOT; else, for an installed binary, <prefix>/share/fsdpsim
// beside <prefix>/bin (`cmake --install`); else the source tree the binary was built from.
std::string catalog_root();
// A JSON file of the shipped catalogs (`relative`, e.g. "scenarios/hardware/gpus.json", under
// catalog_root()), read once per process and path: sweeps look the catalogs up for thousands of
// points. `file` receives its path. Thread-safe.
const nlohmann::json& cached_catalog_file(const std::string& relative, std::string& file);
// Resolves a path the way scenario references are: as given (absolute or relative to the
// current directory), then relative to `relative_to` (a file's directory), then to the catalog root.
std::string resolve_path(const std::string& path, const std::string& relative_to);

// A scenario's "model", "cluster" or "calibration" field: an inline object, or a file path
// (for the model also hf:config.json) resolved beside the scenario, in the current directory,
// then under the catalog root. `file` is what errors inside it should name. Throws InputError
// naming the scenario file and `key` when there is no such file.
struct Reference {
  nlohmann::json json;
  std::string file;
  bool hf = false;  // imported from a Hugging Face config (hf:): its costs follow the attention it was imported for
};
// The attention an hf: model is imported for (HfImportOptions::flash_attention), from the
// scenario's training.attention: "eager" costs the materialised score matrices, a fused kernel's
// name (flash2, cudnn, ...) keeps them out of HBM, and "auto" imports it as the config's own
// "_import_options" say.
enum class AttentionImport { as_configured, eager, fused };
AttentionImport attention_import_for(const std::string& training_attention);
// What an hf: model is imported for: its attention, and Liger's kernels (training.liger; unset:
// as the config's "_import_options" say).
struct ModelImport {
  AttentionImport attention = AttentionImport::as_configured;
  std::optional<bool> liger;
  bool operator==(const ModelImport&) const = default;
};
ModelImport model_import_for(const TrainingSpec& training);
// An hf: model (key "model", "hf:config.json") is imported for `import`.
Reference load_reference(const nlohmann::json& value, const std::string& scenario_file, const std::string& key,
                         const ModelImport& import = {});

// What parse_scenario read on the way, the overrides applied: the scenario document (those
// inside the references apart), the model and cluster references and the calibration. A
// ScenarioTemplate of the same scenario is built from them without parsing it again
// (ScenarioTemplate::from_parsed: `estimate` and its advice share one parse).
struct ScenarioDocuments {
  nlohmann::json document;  // the whole-reference overrides and those outside the references applied
  Reference model;          // model.* overrides applied
  Reference cluster;        // cluster.* overrides applied
  nlohmann::json calibration;  // calibration.* overrides applied; null when there is none
  std::string calibration_file;  // the calibration reference's file ("" when none)
};

// `overrides` are "a.b.c=value" strings; a value that parses as JSON is taken as JSON,
// anything else as a string. `documents`, when given, receives what was read.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {});
Scenario parse_scenario(const nlohmann::json& json, const std::string& file,
                        const std::vector<std::string>& overrides = {}, ScenarioDocuments* documents = nullptr);

// The longest sequence a model can run as its file describes it: the rows of a learned position
// embedding (GPT-2's wpe: a hard limit), else the stated context (arch.max_seq_len: a rotary model
// runs past it only with a length extension the file does not describe); 0 when neither is stated.
struct ModelContext {
  std::int64_t tokens = 0;
  bool learned_positions = false;  // the limit is a position table's rows
  std::string table;               // the position embedding's module, when learned_positions
  std::string what;                // "learned position embedding (wpe, 1024 positions)", "stated context (...)"
};
ModelContext model_context(const models::Model& model);

// A warning when training.seq_len is longer than the model can run as written: beyond the rows of
// a learned position embedding (GPT-2's `wpe`: no such run exists), or beyond the context its
// config states (arch.max_seq_len: a rotary model runs past it only with RoPE scaling, which the
// model file does not describe); "" otherwise. The step is still planned as asked.
std::string context_length_warning(const Scenario& scenario);
// Why FSDP settings `f` cannot run expert parallelism of degree f.expert_parallel on nodes of
// gpus_per_node GPUs, "" when they can: what parse_fsdp refuses, and what the advice checks
// before it proposes a degree. Whether the degree divides the model's experts is the planner's
// check (it has the model).
std::string expert_parallel_error(const FsdpSpec& f, int gpus_per_node);

// Applies one override to a JSON document (exposed for tests and other verbs).
// `path_prefix`: where `document` sits in the file named, for the errors' paths ("cluster" for
// a scenario's inline cluster, so that an error reads cluster.nodes, not nodes).
void apply_override(nlohmann::json& document, const std::string& assignment, const std::string& file,
                    const std::string& path_prefix = "");

// Applies one model.* override (given without "model.") to a model document. The `arch` summary
// describes the module tree and changes nothing it holds, so an override of it is refused
// (`--set model.arch.num_layers=4` planned the 32-layer model as before), but for
// arch.max_seq_len, the context the scenario's sequence is checked against.
void apply_model_override(nlohmann::json& model, const std::string& assignment, const std::string& file,
                          const std::string& path_prefix = "");

// Whether an override replaces a whole reference (model=, cluster=, calibration=). These apply
// first, then the overrides that reach inside the references (model.x=, cluster.x=, ...).
bool replaces_reference(const std::string& assignment);

GpuSpec parse_gpu(const nlohmann::json& json, const std::string& name, const std::string& file,
                  const std::string& path);
GpuSpec find_gpu(const std::string& name);  // from scenarios/hardware/gpus.json
// scenarios/hardware/gpus.json under the catalog root (cached_catalog_file). `file` receives its path.
const nlohmann::json& gpu_catalog(std::string& file);
ClusterSpec parse_cluster(const nlohmann::json& json, const std::string& file, const std::string& path);

}  // namespace fsdpsim::planner
