// What an op costs: the interface every engine (analytic, SimGrid) and the runtime's
// `verify` share. Compute from FLOPs and bytes at calibrated efficiencies, collectives
// from NCCL's own model (planner/collectives.h), CPU issue overhead per op, and the
// slowdown compute suffers while NCCL kernels run beside it.
//
// Every constant lives in a Calibration. Defaults per GPU type ship in
// scenarios/hardware/calibration.json with their sources; a scenario's "calibration"
// (a file `fsdpsim calibrate` wrote, or an inline object) overrides any of them.
// docs/cost-model.md gives the equations and the sources.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/json_input.h"
#include "models/model.h"
#include "planner/attention_model.h"
#include "planner/collectives.h"
#include "planner/gemm_model.h"
#include "planner/hardware.h"
#include "planner/schedule.h"

namespace fsdpsim::planner {

struct Scenario;

// One GEMM timed on the GPU (a calibration's "gemm_table": `fsdpsim calibrate --backend cuda`
// or a user's own measurements). dtype: "fp8" rows price fp8 GEMMs, other rows the GEMMs of
// the compute dtype they name.
struct MeasuredGemm {
  GemmShape shape;
  std::string dtype = "bf16";
  double seconds = 0;
};

struct Calibration {
  std::string name;  // where it came from: "defaults for H100-SXM-80GB" or the calibrate run
  // Compute: achieved fraction of the dtype's dense peak.
  double matmul_efficiency = 0;     // the model's GEMMs
  // fp8 GEMMs (training.matmul_dtype fp8): the large-GEMM ceiling as a fraction of the fp8 dense
  // peak. 0: the same fraction as matmul_efficiency (docs/cost-model.md, "fp8 training", says why).
  double fp8_matmul_efficiency = 0;
  // Measured GEMMs by shape: where one is near a GEMM's shape (measured_gemm_seconds), it prices
  // that GEMM instead of the shape model.
  std::vector<MeasuredGemm> gemm_table;
  // The shortest a memory-bound kernel takes on the GPU (launch and drain of a kernel moving
  // next to nothing): the floor of float8's scaling kernels and of every memory-bound kernel a
  // module's costs list (models::ModuleCosts::memory_bound_kernels).
  double memory_bound_kernel_floor_seconds = 0;
  double attention_efficiency = 0;  // fused (flash) attention, FLOPs counted as FlashAttention's
                                    // benchmarks count them (causal work halved)
  double causal_attention_work = 0.5;  // fraction of the no-discount FLOPs a causal kernel does
  // FlashAttention's backward does 5 matmuls where the forward does 2 (2.5x, the FA
  // benchmarks' convention); the schedule counts backward as 2x forward, so the attention
  // part of a backward op costs this much more.
  double attention_backward_work = 1.25;
  double hbm_efficiency = 0;        // streaming kernels (copies, casts, the optimizer): achieved fraction of HBM bandwidth
  // The memory-bound kernels of a module's forward, backward and recompute (norms, activation
  // functions, rotary, residual adds, the loss): the fraction of HBM bandwidth they sustain in
  // a training step. FITTED to published training throughputs, one number for every GPU (the
  // only such constant; scenarios/hardware/calibration.json "fitted" names its rows, and
  // `validate --leave-one-source-out` refits it without each source).
  double memory_bound_efficiency = 0;
  // Eager PyTorch moves this many times the fused memory-bound bytes the model files count
  // for a transformer block (fp32 upcasts and one kernel per elementwise op in RMSNorm,
  // rotary, SwiGLU); torch.compile fuses them back (training.torch_compile: factor 1).
  // Applies to the forward, backward and recompute of transformer blocks only.
  double eager_memory_bound_factor = 1;
  // CPU: time to issue an op. An op costs op_issue_seconds (FSDP hook / communication
  // call overhead, for non-compute ops) plus kernel_issue_seconds per kernel it launches;
  // a module's forward launches kernels_per_parameter_tensor kernels per parameter tensor
  // it owns (a Llama block: 9 tensors), its backward twice that.
  // When the module's costs list its kernels (matmuls, attention, memory_bound_kernels) and
  // the scenario states training.torch_compile, the kernels are counted instead: GEMMs,
  // attention calls and memory-bound kernels, the latter times eager_kernels_per_fused_kernel
  // when eager (CostModel::kernels).
  double op_issue_seconds = 0;
  double kernel_issue_seconds = 0;
  // Eager PyTorch (training.torch_compile false) issues a module's kernels op by op: Python and
  // the dispatcher record the autograd graph in forward (and in a checkpoint's recompute), the
  // autograd engine walks it in backward. These replace kernel_issue_seconds for the forward,
  // recompute and backward ops of modules in an eager run; measured per counted kernel on a
  // CPU-bound block (scenarios/hardware/calibration.json names the rows).
  double eager_forward_kernel_issue_seconds = 0;
  double eager_backward_kernel_issue_seconds = 0;
  double kernels_per_parameter_tensor = 0;
  double eager_kernels_per_fused_kernel = 1;
  // CUDA's launch queue: kernels one stream holds before a launch blocks the CPU (0: unbounded).
  double launch_queue_kernels = 0;
  // Interference: compute runs this much slower while a collective is in flight (0.1 = 10%).
  double compute_slowdown_under_comm = 0;
  // [GEMMs beside NCCL] The GEMM kernels' own slowdown while a collective is in flight, where it
  // differs from the other kernels' (compute_slowdown_under_comm): on Hopper, cuBLAS launches
  // persistent GEMMs (one CTA per SM), and beside NCCL's CTAs the last of them wait for a second
  // wave (1 = twice the time). Absent: GEMMs slow as the other kernels do; a calibration that
  // states compute_slowdown_under_comm alone unsets it (its figure is then for all compute).
  // price_ops weighs the two by the GEMMs' share of the module compute
  // (effective_compute_slowdown_under_comm).
  std::optional<double> gemm_slowdown_under_comm;
  // Host <-> device copies (CPU offload) and the CPU optimizer step.
  double pcie_gbps = 0;
  // One CPU thread's streaming rate (a rank's host ops on host_threads_per_rank threads), and
  // the node's sustained memory bandwidth its ranks' threads share ([CPU optimizer threads]).
  double host_optimizer_bytes_per_second = 0;
  double host_memory_bytes_per_second = 0;
  // GPU memory outside the step's allocations (planner/device_memory.h). The CUDA context's
  // share has no public figure: an assumption the calibration states and a user may set.
  double cuda_context_bytes = 0;
  // A measured total (CUDA context, cuBLAS workspaces, NCCL buffers: used minus torch's
  // reserved); when stated it replaces the modelled parts. Absent by default.
  std::optional<double> device_overhead_bytes;
  NcclParams nccl;
  std::map<std::string, std::string> sources;  // field -> where its value comes from

  nlohmann::json to_json() const;
};

// The shipped defaults for the cluster's GPU type, then the scenario's calibration on top.
Calibration default_calibration(const ClusterSpec& cluster);
Calibration calibration_for(const Scenario& scenario);
// Reads a calibration object over `base` (fields it does not name keep base's values).
// Unknown fields, negative numbers and efficiencies outside (0, 1] are InputErrors naming
// the JSON path. "nccl" is read by NcclParams::from_json over base.nccl.
Calibration read_calibration(const nlohmann::json& json, const std::string& file, const Calibration& base);

// A warning when the schedule swaps to NVMe and the cluster does not state its NVMe bandwidth
// (the swaps then take no time); "" otherwise.
std::string nvme_untimed_warning(const ClusterSpec& cluster, const Schedule& schedule);

// A warning when more instances of a group that crosses nodes run on each node than the node
// has NICs (HSDP's replicate groups, one per local rank, on nodes with fewer NICs than GPUs):
// the cost model prices each NCCL communicator alone, as NCCL's tuner does, while the instances
// run at once and share the NICs, which the SimGrid engine models (docs/simgrid.md,
// "2026-12-06"); "" otherwise.
std::string shared_nic_warning(const ClusterSpec& cluster, const Schedule& schedule);

// A warning when the schedule's blocks run a fused attention kernel (a kernel set with attention
// whose scores stay on chip) that the attention model prices with constants borrowed from another
// architecture or kernel (planner/attention_model.h attention_constants: no published rows for it
// there), naming what they were fitted on, and for SDPA's mem-efficient kernel on Hopper what this
// workplace measured (docs/accuracy.md: 6-33% slower than priced); "" otherwise.
std::string borrowed_attention_warning(const ClusterSpec& cluster, AttentionKernel kernel, const Schedule& schedule);

// A warning when sliding-window layers whose keys reach past the window are priced with a kernel
// that applies the window itself (FlashAttention's local attention): the figures hold for
// transformers' flash_attention_2 and flex and torchtitan's FlexAttention, not for transformers'
// default sdpa, which passes a dense mask ([SDPA and sliding windows], planner/attention_model.h);
// "" otherwise.
std::string sliding_window_kernel_warning(AttentionKernel kernel, const Schedule& schedule);

// A kernel set's kernels priced one by one: what duration_seconds sums and issue_lead_seconds
// walks in launch order. A caller that prices every op keeps one per schedule.kernel_sets.
struct KernelSetTimes {
  bool priced = false;
  std::vector<double> gemms;          // KernelSet::gemms, in order
  std::vector<double> grouped_gemms;  // KernelSet::grouped_gemms, in order
  double attention = 0;               // the attention call (0 without one)
  double casts = 0;                   // float8's scaling kernels (0 without them)
  double gemm_seconds() const;        // the GEMMs and grouped GEMMs, summed in that order
  double total() const;               // all of them, summed in that order
};

class CostModel {
 public:
  CostModel(const ClusterSpec& cluster, Calibration calibration, models::DType compute_dtype);
  // Also counts each costed module's parameter tensors (the kernel-count estimate of
  // issue_seconds); without a scenario a compute op is taken to own one tensor.
  explicit CostModel(const Scenario& scenario);

  // Seconds the op takes on its stream when nothing else runs. A compute op with a kernel set
  // costs its GEMMs by shape (planner/gemm_model.h), its attention call, and its memory-bound
  // bytes; `kernel_memo` (one entry per schedule.kernel_sets) lets a caller that prices every op
  // price each set once.
  double duration_seconds(const Op& op, const Schedule& schedule,
                          std::vector<KernelSetTimes>* kernel_memo = nullptr) const;
  // The GEMM part of duration_seconds: a kernel set's GEMMs and grouped GEMMs, or, for an op
  // without shapes, its matrix FLOPs at the GEMM ceiling ([GEMMs beside NCCL] weighs it).
  double gemm_seconds_of(const Op& op, const Schedule& schedule, std::vector<KernelSetTimes>* kernel_memo = nullptr) const;
  // The GEMMs and attention of one kernel set, without the op's memory-bound work: in all, and
  // kernel by kernel.
  double kernel_set_seconds(const KernelSet& kernels) const;
  KernelSetTimes kernel_set_times(const KernelSet& kernels) const;
  // The memory-bound part of an op: its HBM bytes (times the eager factor for an eager block).
  double memory_bound_seconds(const Op& op) const;
  // The GPU as the GEMM model sees it, in the compute dtype; and for fp8 operands (bf16 output,
  // the fp8 dense peak; std::invalid_argument on a GPU whose catalog entry lists none).
  GemmDevice gemm_device() const;
  GemmDevice fp8_gemm_device() const;
  // One GEMM: the calibration's measured table where it has a row near the shape, else the
  // shape model. gemm_from_table says which.
  double gemm_seconds(const GemmShape& gemm) const;
  bool gemm_from_table(const GemmShape& gemm) const;
  // Float8's scaling kernels of a set: each its bytes at the streaming bandwidth, at least the
  // memory-bound kernel floor.
  double cast_kernels_seconds(const KernelSet& kernels) const;
  // The GPU as the attention model sees it, and the attention of one kernel set.
  AttentionDevice attention_device() const;
  double attention_seconds(const KernelSet& kernels) const;
  // Eager attention's QK^T and AV (forward) or their four gradient GEMMs (backward), batched.
  double eager_attention_matmul_seconds(const AttentionShape& attention, AttentionPass pass) const;
  // The kernel fused attention runs on (training.attention, or what PyTorch's SDPA picks).
  AttentionKernel attention_kernel() const { return attention_kernel_; }
  // For collectives: NCCL's choice and its cost.
  CollectiveEstimate collective(const Op& op, const Schedule& schedule) const;
  // The ring graph NCCL searches for a process group (its instance's share of the node's NICs),
  // and an all-to-all op's point-to-point model: the channel counts NCCL's buffers follow.
  NcclGraph ring_graph(const ProcessGroup& group) const;
  NcclAllToAllModel all_to_all_model(const Op& op, const Schedule& schedule) const;
  // A ZeRO-Infinity swap (nvme_read / nvme_write): its bytes at this rank's share of the node's
  // NVMe bandwidth; 0 when the cluster does not state it (nvme_untimed_warning says so).
  double nvme_seconds(const Op& op) const;
  // CPU seconds to issue the op (for ops on Stream::host, the CPU time before it runs).
  double issue_seconds(const Op& op) const;
  // [Kernel pipelining] The part of the op's issue the GPU waits for before it can run the op's
  // kernels back to back (at most issue_seconds). The CPU issues kernel j of n at (j+1) c after
  // its issue began (c = issue_seconds / n), and the GPU starts it once it is issued and the
  // kernels before it are done; so from issue start T, with the GPU free at G, the op ends at
  //   max(G + D, T + max_j((j+1) c + sum_{i>=j} d_i)) = max(G, T + lead) + D,
  //   lead = max_j((j+1) c - sum_{i<j} d_i),
  // d_i the kernels' times in launch order, D their sum. An eager block whose long GEMMs come
  // last (a Llama block's MLP) waits for most of its issue; one that opens with them, almost
  // none. Walks the module's launch order (models::ModuleCosts::launch_order; reversed in
  // backward, where autograd runs the forward's nodes last to first); without it, or for a
  // kernel set that is not the order's (op-level SAC's recompute), the whole issue.
  // `lead_memo` keeps the leads already walked while pricing one schedule (a model's identical
  // blocks share theirs: the same kernel set, pass, bytes and kernel list give the same lead).
  struct IssueLeadMemo;
  double issue_lead_seconds(const Op& op, const Schedule& schedule, std::vector<KernelSetTimes>* kernel_memo = nullptr,
                            IssueLeadMemo* lead_memo = nullptr) const;
  // Kernels the op launches (the kernel-count estimate behind issue_seconds).
  double kernels(const Op& op) const;
  // Modules the cost model prices alike: two modules of one class have the same parameter
  // tensors, the same eager factor and the same kernel list (a model's identical blocks), so
  // every op cost above reads the same for their ops. -1: a module none of those name (priced
  // as no module is). price_ops keys its memo on it instead of the module's name.
  int module_class(const std::string& module) const {
    const ModuleInfo* m = module_info(module);
    return m ? m->module_class : -1;
  }
  // [GEMMs beside NCCL] The slowdown of module compute whose GEMMs take `gemm_share` of its time
  // (0..1): the GEMMs' (Calibration::gemm_slowdown_under_comm) and the other kernels'
  // (compute_slowdown_under_comm), weighed by their shares of the time alone.
  double effective_compute_slowdown_under_comm(double gemm_share) const;
  const Calibration& calibration() const { return calibration_; }
  const ClusterSpec& cluster() const { return cluster_; }
  double peak_flops() const { return peak_flops_; }  // dense peak of the compute dtype
  // The denominator of MFU and HFU: the GPU's dense bf16 peak, or its dense fp8 peak when some
  // of the model's matmuls run in fp8 (TrainingSpec::mfu_peak_dtype; without a scenario, when
  // the compute dtype is fp8), so that neither exceeds 1 (divided by the bf16 peak an fp8
  // step's MFU can: the GEMMs run at twice that rate).
  double mfu_peak_flops() const;
  // "bf16" or "fp8": the peak mfu_peak_flops is.
  const char* mfu_peak_dtype() const { return mfu_peak_dtype_; }

 private:
  CostModel(const ClusterSpec& cluster, Calibration calibration, models::DType compute_dtype, const char* mfu_peak_dtype);

  // The cluster and NCCL constants one communicator of `group` sees.
  struct NcclView {
    ClusterSpec cluster;
    NcclParams nccl;
    // [Shared NIC sharers] Instances of the group that cross each NIC at once, when more than
    // one: the view is one instance's NIC whole (what its communicator sees), and the
    // collective's transfer is then stretched to the NIC's share (CostModel::collective).
    double nic_sharers = 1;
  };
  // What one instance of the group has. `whole_nics`: a NIC shared by several instances is seen
  // whole, with nic_sharers set (NCCL's own view, for its graph search); else it is one NIC of
  // its share of the bandwidth (the all-to-all model, which takes the links' figures as they are).
  NcclView nccl_view(const ProcessGroup& group, bool whole_nics) const;
  // One instance's collective, priced on its NIC whole, stretched to its share of the NIC.
  CollectiveEstimate share_the_nic(CollectiveEstimate e, const NcclView& view) const;
  const ProcessGroup& group_of(const Op& op, const Schedule& schedule) const;
  // An op without shapes: its matrix FLOPs at the GEMM ceiling (duration_seconds' GEMM part).
  double shapeless_matmul_seconds(const Op& op) const;
  // A rank's rate for its CPU ops (Stream::host), bytes per second.
  double host_bytes_per_second(const Schedule& schedule) const;
  // The kernel set's times, from `memo` when given (priced there once).
  const KernelSetTimes& times_of(const KernelSet& set, int index, std::vector<KernelSetTimes>* memo,
                                 KernelSetTimes& local) const;

  ClusterSpec cluster_;
  Calibration calibration_;
  double peak_flops_ = 0;
  const char* mfu_peak_dtype_ = "bf16";  // MFU's peak (mfu_peak_flops)
  int compute_dtype_bytes_ = 2;
  std::string compute_dtype_name_ = "bf16";
  GemmTable compute_gemm_table_, fp8_gemm_table_;  // calibration.gemm_table split by dtype
  AttentionKernel attention_kernel_ = AttentionKernel::flash2;
  // Costed modules whose costs list their kernels: the forward's and the backward's GEMM and
  // attention launches, and each memory-bound kernel's share of the module's per-token
  // memory-bound bytes (empty: the costs list none; the bytes are then priced as one lump).
  struct ModuleKernels {
    double forward_launches = 0, backward_launches = 0;  // GEMMs and attention calls
    std::vector<double> memory_bound_shares;
    std::string launch_order;  // models::ModuleCosts::launch_order ("" when not known)
    bool operator==(const ModuleKernels& o) const;
  };
  // What the cost model holds of a costed module, by its full name: one map, so that an op's
  // module is looked up once (a 126-block model has about a thousand of them).
  struct ModuleInfo {
    int parameter_tensors = 0;  // its parameter tensors (counted as at least one)
    // A transformer block run eagerly (not compiled): the factor its per-token memory-bound
    // bytes take, the model's own eager_hbm_factor, else the calibration's.
    std::optional<double> eager_factor;
    // ... and the kernels it launches eagerly per listed memory-bound kernel when its costs say
    // (models::ModuleCosts::eager_kernels_per_fused_kernel), else the calibration's.
    std::optional<double> eager_kernels;
    std::optional<ModuleKernels> kernels;  // when its costs list its kernels
    int module_class = -1;                 // module_class()
    // Whether every op cost reads the same of the two (classify_modules).
    bool same_pricing(const ModuleInfo& o) const;
  };
  const ModuleInfo* module_info(const std::string& module) const {
    const auto it = modules_->find(module);
    return it == modules_->end() ? nullptr : &it->second;
  }

 public:
  struct IssueLeadMemo {
    // What a lead depends on: the kernel set's times, the pass, the op's traffic, its issue and
    // the module's kernel list (compared by content: each block has its own).
    struct Entry {
      int kernel_set = -1;
      OpKind kind = OpKind::compute_fwd;
      double bytes = 0, launches = 0, score_seconds = 0, issue = 0;
      bool bytes_priced = false;
      const ModuleKernels* kernels = nullptr;
      double lead = 0;
    };
    std::vector<Entry> entries;
  };

 private:
  // An op's memory-bound traffic as memory_bound_seconds prices it.
  struct MemoryBoundTraffic {
    double bytes = 0;                        // per-token chains (eager-factored), score matrix excluded
    double bytes_per_second = 0;             // at memory_bound_efficiency (hbm_efficiency off modules)
    double score_seconds = 0;                // eager attention's score-matrix kernels
    const ModuleKernels* listed = nullptr;   // the module's kernels, when its costs list them
    double launches = 1;                     // launches of each listed fused kernel
  };
  MemoryBoundTraffic memory_bound_traffic(const Op& op) const;
  // One listed fused kernel (the share of `t.bytes` its costs give it), all its launches, each
  // at least the launch floor.
  double listed_kernel_seconds(const MemoryBoundTraffic& t, double share) const;
  enum class Execution { unstated, eager, compiled };  // training.torch_compile
  Execution execution_ = Execution::unstated;
  using ModuleTable = std::unordered_map<std::string, ModuleInfo>;
  // [Module tables] Built once per model and, run eagerly, blocks' types and default eager factor
  // (empty and 0 otherwise), and shared by every cost model that has them (cost_model.cpp).
  std::shared_ptr<const ModuleTable> modules_;
  static std::shared_ptr<const ModuleTable> module_table(const models::SharedModel& model,
                                                         const std::vector<std::string>& eager_block_types,
                                                         double default_eager_factor);
  static ModuleTable build_module_table(const models::Model& model, const std::vector<std::string>& eager_block_types,
                                        double default_eager_factor);
  static void classify_modules(ModuleTable& modules);  // numbers the modules' classes once the entries are filled
  int model_parameter_tensors_ = 0;
  bool fused_optimizer_ = false;  // training.optimizer_kernel fused
  int optimizer_states_ = 2;  // state tensors per parameter of training.optimizer
};

// Whether a scenario override ("a.b=value") can change the CostModel made from the scenario.
// CostModel(const Scenario&) reads the cluster, the calibration, the model (its modules'
// parameter tensors), training.param_dtype and training.matmul_dtype (the compute dtype,
// TrainingSpec::compute_dtype; MFU's peak), training.attention,
// training.torch_compile (eager blocks), training.optimizer and training.optimizer_kernel (the
// step's kernel launches) and fsdp.wrap (which modules are blocks); nothing else.
// An override of an object that holds one of them ("training") can too. A sweep shares one cost
// model among points whose overrides differ only in other fields.
bool override_changes_cost_model(const std::string& assignment);

// Which collective an op kind is (all_gather, reduce_scatter, all_reduce); throws
// std::invalid_argument for other kinds.
CollectiveKind collective_kind_of(OpKind kind);

}  // namespace fsdpsim::planner
