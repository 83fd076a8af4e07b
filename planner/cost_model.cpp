#include "planner/float8.h"
#include "planner/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "planner/scenario.h"
#include "planner/attention_model.h"
#include "planner/gemm_model.h"
#include "planner/units.h"

namespace fsdpsim::planner {

namespace fs = std::filesystem;

namespace {

// The catalog file is read once per process (sweeps estimate thousands of points).
const nlohmann::json& calibration_catalog(std::string& file) {
  return cached_catalog_file("scenarios/hardware/calibration.json", file);
}

double read_fraction(JsonReader& r, const std::string& key, double fallback) {
  if (!r.has(key)) {
    r.ignore(key);
    return fallback;
  }
  const double v = r.number(key);
  if (!(v > 0 && v <= 1)) r.fail(key, "expected a fraction in (0, 1], got " + describe_json(r.raw(key)));
  return v;
}

// calibration.gemm_table: [{"m", "n", "k", "dtype", "seconds"}, ...] (calibrate also writes
// "tflops" and "label", informative).
std::vector<MeasuredGemm> read_gemm_table(JsonReader& r) {
  std::vector<MeasuredGemm> table;
  const nlohmann::json& rows = r.array("gemm_table");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string at = join_json_path(r.path_of("gemm_table"), i);
    if (!rows[i].is_object()) throw InputError(r.file(), at, "expected a measured GEMM {m, n, k, dtype, seconds}, got " + describe_json(rows[i]));
    JsonReader row(rows[i], r.file(), at);
    MeasuredGemm g;
    auto side = [&](const char* key) {
      const double v = static_cast<double>(row.positive_integer(key));
      if (v > 1099511627776.0) row.fail(key, "expected a size in 1..2^40");
      return v;
    };
    g.shape.m = side("m");
    g.shape.n = side("n");
    g.shape.k = side("k");
    g.dtype = row.choice_or("dtype", {"bf16", "fp16", "fp32", "fp8"}, "bf16");
    g.shape.fp8 = g.dtype == "fp8";
    g.seconds = row.positive_number("seconds");
    row.ignore("tflops");
    row.ignore("label");
    row.finish();
    table.push_back(g);
  }
  return table;
}

Calibration read_calibration_at(const nlohmann::json& json, const std::string& file, const std::string& path,
                                const Calibration& base) {
  if (!json.is_object()) throw InputError(file, path, "expected a calibration object, got " + describe_json(json));
  JsonReader r(json, file, path);
  Calibration c = base;
  c.name = r.string_or("name", base.name);
  r.ignore("_comment");
  r.ignore("gpu");  // calibrate writes the GPU it measured; informative only
  // calibrate keeps its fits and goodness of fit under "fit": informative, but an object.
  if (r.has("fit") && !r.raw("fit").is_object())
    r.fail("fit", "expected an object (the fits `fsdpsim calibrate` writes), got " + describe_json(r.raw("fit")));
  r.ignore("fit");
  c.matmul_efficiency = read_fraction(r, "matmul_efficiency", c.matmul_efficiency);
  c.fp8_matmul_efficiency = read_fraction(r, "fp8_matmul_efficiency", c.fp8_matmul_efficiency);
  if (r.has("gemm_table")) c.gemm_table = read_gemm_table(r);
  else r.ignore("gemm_table");
  c.memory_bound_kernel_floor_seconds =
      r.nonnegative_number_or("memory_bound_kernel_floor_seconds", c.memory_bound_kernel_floor_seconds);
  c.attention_efficiency = read_fraction(r, "attention_efficiency", c.attention_efficiency);
  c.causal_attention_work = read_fraction(r, "causal_attention_work", c.causal_attention_work);
  c.attention_backward_work = r.positive_number_or("attention_backward_work", c.attention_backward_work);
  c.hbm_efficiency = read_fraction(r, "hbm_efficiency", c.hbm_efficiency);
  c.memory_bound_efficiency = read_fraction(r, "memory_bound_efficiency", c.memory_bound_efficiency);
  c.eager_memory_bound_factor = r.positive_number_or("eager_memory_bound_factor", c.eager_memory_bound_factor);
  c.op_issue_seconds = r.nonnegative_number_or("op_issue_seconds", c.op_issue_seconds);
  c.kernel_issue_seconds = r.nonnegative_number_or("kernel_issue_seconds", c.kernel_issue_seconds);
  c.eager_forward_kernel_issue_seconds =
      r.nonnegative_number_or("eager_forward_kernel_issue_seconds", c.eager_forward_kernel_issue_seconds);
  c.eager_backward_kernel_issue_seconds =
      r.nonnegative_number_or("eager_backward_kernel_issue_seconds", c.eager_backward_kernel_issue_seconds);
  c.kernels_per_parameter_tensor = r.nonnegative_number_or("kernels_per_parameter_tensor", c.kernels_per_parameter_tensor);
  c.eager_kernels_per_fused_kernel =
      r.positive_number_or("eager_kernels_per_fused_kernel", c.eager_kernels_per_fused_kernel);
  c.launch_queue_kernels = r.nonnegative_number_or("launch_queue_kernels", c.launch_queue_kernels);
  c.compute_slowdown_under_comm = r.nonnegative_number_or("compute_slowdown_under_comm", c.compute_slowdown_under_comm);
  // A calibration that states the compute's slowdown and not the GEMMs' means it for all compute
  // (a calibration file written before the GEMMs had a figure of their own, a user's --set): the
  // GEMM figure of the entries under it (Hopper's) does not stay behind it.
  if (r.has("gemm_slowdown_under_comm"))
    c.gemm_slowdown_under_comm = r.nonnegative_number_or("gemm_slowdown_under_comm", 0);
  else if (r.has("compute_slowdown_under_comm"))
    c.gemm_slowdown_under_comm.reset();
  c.pcie_gbps = r.positive_number_or("pcie_gbps", c.pcie_gbps);
  c.host_optimizer_bytes_per_second =
      r.positive_number_or("host_optimizer_bytes_per_second", c.host_optimizer_bytes_per_second);
  c.host_memory_bytes_per_second = r.positive_number_or("host_memory_bytes_per_second", c.host_memory_bytes_per_second);
  // Memory outside the allocator, at most a pebibyte: no GPU holds more, and a value like 1e308
  // made the advice search for a fitting configuration without end (the session-38 input audit).
  auto device_bytes = [&r](const char* key, double fallback) {
    const double bytes = r.nonnegative_number_or(key, fallback);
    if (bytes > kPebibyteBytes) r.fail(key, "expected at most 2^50 bytes (a pebibyte): memory outside the allocator");
    return bytes;
  };
  c.cuda_context_bytes = device_bytes("cuda_context_bytes", c.cuda_context_bytes);
  if (r.has("device_overhead_bytes")) c.device_overhead_bytes = device_bytes("device_overhead_bytes", 0);
  if (r.has("nccl")) {
    JsonReader n = r.object("nccl");
    c.nccl = NcclParams::from_json(n, base.nccl);
  } else {
    r.ignore("nccl");
  }
  if (r.has("sources")) {
    JsonReader s = r.object("sources");
    for (const auto& [key, value] : r.raw("sources").items()) c.sources[key] = s.string(key);
    s.finish();
  } else {
    r.ignore("sources");
  }
  r.finish();
  return c;
}

int count_tensors(const models::Module& m) {
  int n = 0;
  models::for_each_module(m, [&](const models::Module& x) { n += static_cast<int>(x.params.size()); });
  return n;
}

}  // namespace

nlohmann::json Calibration::to_json() const {
  nlohmann::json table = nlohmann::json::array();
  for (const MeasuredGemm& g : gemm_table)
    table.push_back({{"m", g.shape.m}, {"n", g.shape.n}, {"k", g.shape.k}, {"dtype", g.dtype}, {"seconds", g.seconds}});
  nlohmann::json j = {{"name", name},
          {"matmul_efficiency", matmul_efficiency},
          {"attention_efficiency", attention_efficiency},
          {"causal_attention_work", causal_attention_work},
          {"attention_backward_work", attention_backward_work},
          {"hbm_efficiency", hbm_efficiency},
          {"memory_bound_efficiency", memory_bound_efficiency},
          {"eager_memory_bound_factor", eager_memory_bound_factor},
          {"op_issue_seconds", op_issue_seconds},
          {"kernel_issue_seconds", kernel_issue_seconds},
          {"eager_forward_kernel_issue_seconds", eager_forward_kernel_issue_seconds},
          {"eager_backward_kernel_issue_seconds", eager_backward_kernel_issue_seconds},
          {"kernels_per_parameter_tensor", kernels_per_parameter_tensor},
          {"eager_kernels_per_fused_kernel", eager_kernels_per_fused_kernel},
          {"launch_queue_kernels", launch_queue_kernels},
          {"compute_slowdown_under_comm", compute_slowdown_under_comm},
          {"pcie_gbps", pcie_gbps},
          {"host_optimizer_bytes_per_second", host_optimizer_bytes_per_second},
          {"host_memory_bytes_per_second", host_memory_bytes_per_second},
          {"cuda_context_bytes", cuda_context_bytes},
          {"memory_bound_kernel_floor_seconds", memory_bound_kernel_floor_seconds},
          {"nccl", nccl.to_json()},
          {"sources", sources}};
  if (fp8_matmul_efficiency > 0) j["fp8_matmul_efficiency"] = fp8_matmul_efficiency;
  if (device_overhead_bytes) j["device_overhead_bytes"] = *device_overhead_bytes;
  if (gemm_slowdown_under_comm) j["gemm_slowdown_under_comm"] = *gemm_slowdown_under_comm;
  if (!gemm_table.empty()) j["gemm_table"] = table;
  return j;
}

Calibration read_calibration(const nlohmann::json& json, const std::string& file, const Calibration& base) {
  return read_calibration_at(json, file, "", base);
}

namespace {

// The figures that make a GPU the part it is (its name and sources aside).
bool same_part(const GpuSpec& a, const GpuSpec& b) {
  return a.arch == b.arch && a.memory_bytes == b.memory_bytes && a.sm_count == b.sm_count &&
         a.peak_flops == b.peak_flops && a.hbm_bandwidth_bytes_per_second == b.hbm_bandwidth_bytes_per_second &&
         a.nvlink_generation == b.nvlink_generation && a.nvlink_links == b.nvlink_links &&
         a.nvlink_bandwidth_gbps == b.nvlink_bandwidth_gbps && a.nvls == b.nvls && a.xgmi_links == b.xgmi_links &&
         a.xgmi_bandwidth_gbps == b.xgmi_bandwidth_gbps;
}

// [Catalog twin] A GPU under a name the calibration catalog does not know, whose figures are a
// catalog GPU's (a cluster file that wrote the part out under its own name), is that part: it
// takes that GPU's calibration rather than the generic defaults meant for parts never measured.
// "" when no catalog GPU has its figures.
std::string catalog_twin(const GpuSpec& gpu) {
  std::string file;
  const nlohmann::json& catalog = gpu_catalog(file);
  for (const auto& [name, entry] : catalog.items()) {
    if (name.rfind("_", 0) == 0 || !entry.is_object()) continue;
    if (same_part(parse_gpu(entry, name, file, name), gpu)) return name;
  }
  return "";
}

}  // namespace

Calibration default_calibration(const ClusterSpec& cluster) {
  std::string file;
  const nlohmann::json& catalog = calibration_catalog(file);
  Calibration base;
  base.nccl = NcclParams::defaults_for(cluster);
  if (!catalog.contains("defaults")) throw InputError(file, "defaults", "is required: the calibration for any GPU");
  // "fitted" is not a GPU: it declares which values were fitted to published runs (read by
  // sim/validation.cpp for `validate --leave-one-source-out`); the values themselves are in the entries.
  if (catalog.contains("fitted") && !catalog["fitted"].is_array())
    throw InputError(file, "fitted", "expected an array of fit declarations, got " + describe_json(catalog["fitted"]));
  Calibration c = read_calibration_at(catalog["defaults"], file, "defaults", base);
  const std::string& gpu = cluster.gpu.name;
  if (!gpu.empty() && catalog.contains(gpu)) {
    c = read_calibration_at(catalog[gpu], file, gpu, c);
    if (c.name.empty() || c.name == base.name) c.name = "defaults for " + gpu;
  } else if (const std::string twin = catalog_twin(cluster.gpu); !twin.empty() && catalog.contains(twin)) {
    c = read_calibration_at(catalog[twin], file, twin, c);
    c.name = "defaults for " + twin + " (GPU \"" + gpu + "\" has its figures: [Catalog twin])";
  } else {
    c.name = "generic defaults (no calibration entry for GPU \"" + gpu + "\")";
  }
  return c;
}

Calibration calibration_for(const Scenario& scenario) {
  Calibration c = default_calibration(scenario.cluster);
  if (!scenario.calibration.is_null()) {
    const std::string defaults_name = c.name;
    const bool own_file = !scenario.calibration_file.empty() && scenario.calibration_file != scenario.file;
    c = read_calibration_at(scenario.calibration, own_file ? scenario.calibration_file : scenario.file,
                            own_file ? "" : "calibration", c);
    if (c.name == defaults_name)
      c.name = defaults_name + " + " + (own_file ? scenario.calibration_file : "the scenario's calibration");
  }
  return c;
}

bool override_changes_cost_model(const std::string& assignment) {
  static const char* const kReadByCostModel[] = {"cluster",
                                                 "calibration",
                                                 "model",
                                                 "training.param_dtype",
                                                 "training.matmul_dtype",
                                                 "training.attention",
                                                 "training.torch_compile",
                                                 "training.optimizer_kernel",
                                                 "training.optimizer",
                                                 "fsdp.wrap"};
  const std::string_view key = std::string_view(assignment).substr(0, assignment.find('='));
  // `path` is `outer` or a field inside it.
  auto within = [](std::string_view outer, std::string_view path) {
    return path.substr(0, outer.size()) == outer && (path.size() == outer.size() || path[outer.size()] == '.');
  };
  for (const char* field : kReadByCostModel)
    if (within(field, key) || within(key, field)) return true;  // "cluster.gpu", or "training" (holds them)
  return false;
}

CollectiveKind collective_kind_of(OpKind kind) {
  switch (kind) {
    case OpKind::all_gather: return CollectiveKind::all_gather;
    case OpKind::reduce_scatter: return CollectiveKind::reduce_scatter;
    case OpKind::all_reduce: return CollectiveKind::all_reduce;
    case OpKind::all_to_all: return CollectiveKind::all_to_all;
    default: throw std::invalid_argument("op kind " + to_string(kind) + " is not a collective");
  }
}

namespace {

// Attention calls priced so far in this process: estimate_attention schedules every CTA of the
// call over the SMs (thousands per call; 13% of a 405B `estimate` that weighs 46 advice
// candidates, each with its own cost model), and the cost models of one process meet the same
// few calls again and again (every point of a sweep, every candidate of the advice). The result
// is a function of the key alone: the shape, the pass, the kernel and the device.
struct AttentionMemo {
  using Key = std::tuple<double, double, double, double, int, int, int, int, bool, bool,  // shape, pass
                         AttentionKernel, std::string, int, double, double, double>;     // kernel, device
  std::mutex mutex;
  std::map<Key, double> seconds;
};

AttentionMemo& attention_memo() {
  static AttentionMemo memo;
  return memo;
}

}  // namespace

CostModel::CostModel(const ClusterSpec& cluster, Calibration calibration, models::DType compute_dtype)
    : CostModel(cluster, std::move(calibration), compute_dtype, compute_dtype == models::DType::fp8 ? "fp8" : "bf16") {}

CostModel::CostModel(const ClusterSpec& cluster, Calibration calibration, models::DType compute_dtype,
                     const char* mfu_peak_dtype)
    : cluster_(cluster), calibration_(std::move(calibration)), mfu_peak_dtype_(mfu_peak_dtype) {
  static const auto no_modules = std::make_shared<const ModuleTable>();  // a cost model built without a model
  modules_ = no_modules;
  auto it = cluster_.gpu.peak_flops.find(models::dtype_name(compute_dtype));
  if (it == cluster_.gpu.peak_flops.end()) it = cluster_.gpu.peak_flops.find("bf16");
  peak_flops_ = it == cluster_.gpu.peak_flops.end() ? 0 : it->second;
  compute_dtype_bytes_ = models::dtype_bytes(compute_dtype);
  compute_dtype_name_ = models::dtype_name(compute_dtype);
  for (const MeasuredGemm& g : calibration_.gemm_table) {
    if (g.shape.fp8) fp8_gemm_table_.rows.push_back({g.shape, g.shape.flops() / g.seconds});
    else if (g.dtype == compute_dtype_name_) compute_gemm_table_.rows.push_back({g.shape, g.shape.flops() / g.seconds});
  }
  attention_kernel_ = default_attention_kernel(attention_device());
}

namespace {

// MFU's peak: the dense fp8 one where some linear runs in fp8. A model none of whose matmuls
// convert (GPT-2's Conv1D layers are not nn.Linear) runs every GEMM in 16-bit and keeps that
// peak (the session-35 fp8 audit: GPT-2 XL's MFU read half, divided by the fp8 peak).
const char* mfu_peak_dtype_of(const Scenario& s) {
  if (s.training.float8_linears() && !Float8Linears(s).converts_any()) return "bf16";
  return s.training.mfu_peak_dtype();
}

}  // namespace

CostModel::CostModel(const Scenario& scenario)
    : CostModel(scenario.cluster, calibration_for(scenario), scenario.training.compute_dtype(),
                mfu_peak_dtype_of(scenario)) {
  // training.attention names the fused kernel ("auto": what PyTorch's SDPA picks; "eager":
  // the model's costs materialise the scores, which the kernel sets say themselves).
  const std::string& attention = scenario.training.attention;
  if (attention == "auto")
    attention_kernel_ = *resolve_attention_kernel(attention, attention_device(),
                                                  !models::has_unequal_attention_head_dims(scenario.model->root));
  if (attention != "auto" && attention != "eager") {
    const std::optional<AttentionKernel> kernel = parse_attention_kernel(attention);
    if (!kernel) throw InputError(scenario.file, "training.attention", "an attention kernel name, got \"" + attention + "\"");
    if (!attention_kernel_available(*kernel, attention_device()))
      throw InputError(scenario.file, "training.attention",
                       "a kernel that runs on " + scenario.cluster.gpu.name + " (" + scenario.cluster.gpu.arch +
                           "): " + attention + " does not (default here: " + to_string(attention_kernel_) + ")");
    attention_kernel_ = *kernel;
  }
  model_parameter_tensors_ = static_cast<int>(scenario.model.parameter_tensors());
  fused_optimizer_ = scenario.training.optimizer_kernel == OptimizerKernel::fused;
  optimizer_states_ = optimizer_states_per_param(scenario.training.optimizer);
  if (scenario.training.execution == TrainingSpec::Execution::eager) execution_ = Execution::eager;
  if (scenario.training.execution == TrainingSpec::Execution::compiled) execution_ = Execution::compiled;
  // Run eagerly, the blocks take an eager factor: none otherwise.
  const bool eager = execution_ == Execution::eager;
  modules_ = module_table(scenario.model, eager ? block_types(*scenario.model, scenario.fsdp.wrap) : std::vector<std::string>{},
                          eager ? calibration_.eager_memory_bound_factor : 0.0);
}

// [Module tables] What the cost model holds of each costed module depends on the model and, run
// eagerly, the blocks' types and the calibration's default eager factor: build_module_table's
// arguments, which are this memo's key. The cost models of a sweep or of the advice's candidates
// are many (one per cluster or calibration) over one model, and walking its thousand-odd modules
// into the table was 3% of the 405B advice (docs/benchmarks.md, session 29). The entry for a
// model no longer alive never matches (SharedModel::weak).
std::shared_ptr<const CostModel::ModuleTable> CostModel::module_table(const models::SharedModel& model,
                                                                      const std::vector<std::string>& eager_block_types,
                                                                      double default_eager_factor) {
  struct Entry {
    std::weak_ptr<const models::Model> model;
    std::vector<std::string> eager_block_types;
    double default_eager_factor;
    std::shared_ptr<const ModuleTable> table;
  };
  static std::mutex mutex;
  static std::vector<Entry> entries;  // a few, the latest last
  constexpr std::size_t kEntries = 8;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : entries) {
      const std::shared_ptr<const models::Model> alive = e.model.lock();
      if (alive && alive.get() == model.address() && e.eager_block_types == eager_block_types &&
          e.default_eager_factor == default_eager_factor)
        return e.table;
    }
  }
  auto table = std::make_shared<const ModuleTable>(
      build_module_table(*model, eager_block_types, default_eager_factor));
  std::lock_guard<std::mutex> lock(mutex);
  if (entries.size() == kEntries) entries.erase(entries.begin());
  entries.push_back({model.weak(), eager_block_types, default_eager_factor, table});
  return table;
}

CostModel::ModuleTable CostModel::build_module_table(const models::Model& model,
                                                     const std::vector<std::string>& eager_block_types,
                                                     double default_eager_factor) {
  ModuleTable modules;
  models::for_each_module(model.root, [&](const models::Module& m) {
    if (m.costs) modules[m.full_name].parameter_tensors = count_tensors(m);
  });
  // Modules whose costs list their memory-bound kernels (the importer's transformer blocks):
  // their kernels are counted (kernels(), memory_bound_seconds()). Each memory-bound kernel's
  // share of the module's per-token ("b*s") memory-bound bytes; its GEMMs: one per matmul in
  // forward (a routed matmul is one grouped kernel), two in backward (input and weight
  // gradients); its attention: one kernel in forward, three in backward (FlashAttention-2's
  // flash_bwd_dot_do_o_kernel, the dq/dk/dv kernel and flash_bwd_convert_dq_kernel:
  // Dao-AILab/flash-attention csrc/flash_attn/src/flash_bwd_launch_template.h).
  models::for_each_module(model.root, [&](const models::Module& m) {
    if (!m.costs || m.costs->memory_bound_kernels.empty()) return;
    ModuleKernels k;
    double per_token = 0;
    for (const models::Polynomial& p : m.costs->memory_bound_kernels) {
      double b_s = 0;
      for (const models::Polynomial::Term& t : p.terms)
        if (t.b_pow == 1 && t.s_pow == 1) b_s += t.coeff;
      k.memory_bound_shares.push_back(b_s);
      per_token += b_s;
    }
    for (double& share : k.memory_bound_shares) share = per_token > 0 ? share / per_token : 0.0;
    const double gemms = static_cast<double>(m.costs->matmuls.size());
    const double attention = m.costs->attention ? 1.0 : 0.0;
    k.forward_launches = gemms + attention;
    k.backward_launches = 2 * gemms + 3 * attention;
    k.launch_order = m.costs->launch_order;
    modules[m.full_name].kernels = std::move(k);
  });
  // The blocks run eagerly (none when compiled or unstated): their eager factor and kernels.
  if (!eager_block_types.empty()) {
    models::for_each_module(model.root, [&](const models::Module& m) {
      if (!m.costs || &m == &model.root ||
          std::find(eager_block_types.begin(), eager_block_types.end(), m.type) == eager_block_types.end())
        return;
      ModuleInfo& info = modules[m.full_name];
      info.eager_factor = m.costs->eager_hbm_factor.value_or(default_eager_factor);
      info.eager_kernels = m.costs->eager_kernels_per_fused_kernel;
    });
  }
  classify_modules(modules);
  return modules;
}

bool CostModel::ModuleKernels::operator==(const ModuleKernels& o) const {
  return forward_launches == o.forward_launches && backward_launches == o.backward_launches &&
         memory_bound_shares == o.memory_bound_shares && launch_order == o.launch_order;
}

bool CostModel::ModuleInfo::same_pricing(const ModuleInfo& o) const {
  return parameter_tensors == o.parameter_tensors && eager_factor == o.eager_factor && eager_kernels == o.eager_kernels &&
         kernels == o.kernels;
}

void CostModel::classify_modules(ModuleTable& modules) {
  std::vector<const ModuleInfo*> classes;  // one of each; a model has a handful (its block types, head, embedding)
  for (auto& entry : modules) {
    ModuleInfo& info = entry.second;  // a named reference: clang before 16 cannot capture a structured binding
    const auto same = std::find_if(classes.begin(), classes.end(), [&](const ModuleInfo* c) { return c->same_pricing(info); });
    info.module_class = static_cast<int>(same - classes.begin());
    if (same == classes.end()) classes.push_back(&info);
  }
}

double CostModel::mfu_peak_flops() const {
  auto it = cluster_.gpu.peak_flops.find(mfu_peak_dtype());
  return it == cluster_.gpu.peak_flops.end() ? peak_flops_ : it->second;
}

CostModel::NcclView CostModel::nccl_view(const ProcessGroup& g, bool whole_nics) const {
  // Every rank runs the same collective on its own instance of the group at the same time
  // (FSDP's ranks are symmetric): a group with fewer ranks per node than the node has GPUs
  // (HSDP's replicate group: one rank per node) has gpus_per_node / ranks_per_node instances
  // on each node, and they share the node's NICs. NCCL's model is per communicator, so each
  // instance gets its share: whole NICs while there are enough, else one NIC shared.
  NcclView view{cluster_, calibration_.nccl};
  const int ranks_per_node = g.nodes > 0 ? std::max(1, g.ranks / g.nodes) : 1;
  const int instances = g.nodes > 1 ? std::max(1, cluster_.gpus_per_node / ranks_per_node) : 1;
  if (instances > 1) {
    const int nics = std::max(1, view.nccl.nics_per_node > 0 ? view.nccl.nics_per_node : cluster_.nics_per_node);
    const double nic = view.nccl.nic_bandwidth_gbps > 0 ? view.nccl.nic_bandwidth_gbps : cluster_.nic_bandwidth_gbps;
    if (instances > nics) {
      view.nccl.nics_per_node = view.cluster.nics_per_node = 1;
      if (whole_nics)
        view.nic_sharers = static_cast<double>(instances) / nics;
      else
        view.nccl.nic_bandwidth_gbps = view.cluster.nic_bandwidth_gbps = nic * nics / instances;
    } else {
      view.nccl.nics_per_node = view.cluster.nics_per_node = nics / instances;
    }
  }
  return view;
}

const ProcessGroup& CostModel::group_of(const Op& op, const Schedule& schedule) const {
  if (op.group < 0 || op.group >= static_cast<int>(schedule.groups.size()))
    throw std::invalid_argument("collective op " + std::to_string(op.id) + " (" + op.name +
                                ") names no process group of the schedule");
  return schedule.groups[op.group];
}

CollectiveEstimate CostModel::collective(const Op& op, const Schedule& schedule) const {
  const ProcessGroup& g = group_of(op, schedule);
  const NcclView view = nccl_view(g, /*whole_nics=*/true);
  CollectiveEstimate e =
      estimate_collective(collective_kind_of(op.kind), op.comm_bytes, {g.ranks, g.nodes}, view.cluster, view.nccl);
  return view.nic_sharers > 1 ? share_the_nic(e, view) : e;
}

CollectiveEstimate CostModel::share_the_nic(CollectiveEstimate e, const NcclView& view) const {
  // [Shared NIC sharers] Each instance's communicator searches its rings on the NIC whole, as
  // NCCL does (it does not know of the other communicators), and picks its algorithm, protocol
  // and channels so. On the wire the instances share the NIC: each transfers at most its fair
  // share, nic / sharers, the rest of its route being faster. So the transfer is stretched to
  // that rate where the instance alone would cross the NIC faster; the latency stays. Before,
  // the graph search ran on the share itself, which NCCL's speed arrays round down (1.5625 GB/s
  // of a 12.5 GB/s NIC for 8 instances searched as 1.2: 23% slower) and which SimGrid, sizing
  // its flows by these times, inherited (the session-34 audit).
  const double busbw_of_transfer = e.transfer_bus_bandwidth_gbps();  // GB/s across the NIC alone
  if (!(busbw_of_transfer > 0)) return e;
  const double transfer = e.seconds - e.latency_seconds;
  const double nic = view.nccl.nic_bandwidth_gbps > 0 ? view.nccl.nic_bandwidth_gbps : view.cluster.nic_bandwidth_gbps;
  const double share = nic / view.nic_sharers;
  const double stretch = busbw_of_transfer / share;
  if (stretch <= 1) return e;
  const double seconds = e.latency_seconds + transfer * stretch;
  e.alg_bandwidth_gbps *= e.seconds / seconds;
  e.bus_bandwidth_gbps *= e.seconds / seconds;
  e.seconds = seconds;
  return e;
}

NcclGraph CostModel::ring_graph(const ProcessGroup& g) const {
  const NcclView view = nccl_view(g, /*whole_nics=*/true);
  return nccl_ring_graph({g.ranks, g.nodes}, view.cluster, view.nccl);
}

NcclAllToAllModel CostModel::all_to_all_model(const Op& op, const Schedule& schedule) const {
  const ProcessGroup& g = group_of(op, schedule);
  const NcclView view = nccl_view(g, /*whole_nics=*/false);
  return nccl_all_to_all_model(op.comm_bytes, {g.ranks, g.nodes}, view.cluster, view.nccl);
}

double CostModel::duration_seconds(const Op& op, const Schedule& schedule,
                                   std::vector<KernelSetTimes>* kernel_memo) const {
  switch (op.kind) {
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
    case OpKind::all_to_all:
      return collective(op, schedule).seconds;
    case OpKind::h2d:
    case OpKind::d2h:
      return op.comm_bytes / (calibration_.pcie_gbps * 1e9);
    case OpKind::nvme_read:
    case OpKind::nvme_write:
      return nvme_seconds(op);
    case OpKind::wait:
      return 0;
    case OpKind::optimizer:
    case OpKind::copy_out:
      // The CPU's own work (the offloaded optimizer step; FSDP2's host gradient accumulation,
      // [FSDP2 offload accumulation]): the bytes it moves at the rank's host rate.
      if (op.stream == Stream::host) return op.hbm_bytes / host_bytes_per_second(schedule);
      break;
    default:
      break;
  }
  if (op.kernel_set >= 0 && op.kernel_set < static_cast<int>(schedule.kernel_sets.size())) {
    KernelSetTimes local;
    return times_of(schedule.kernel_sets[op.kernel_set], op.kernel_set, kernel_memo, local).total() +
           memory_bound_seconds(op);
  }
  // No shapes (a hand-written model, a copy or the optimizer): matrix FLOPs at the GEMM
  // ceiling, attention at the calibrated attention efficiency.
  const double c = calibration_.causal_attention_work *
                   (op.kind == OpKind::compute_bwd ? calibration_.attention_backward_work : 1.0);
  const double attention = op.attention_flops * c / (peak_flops_ * calibration_.attention_efficiency);
  return (op.flops > 0 ? shapeless_matmul_seconds(op) + attention : 0.0) + memory_bound_seconds(op);
}

// [CPU optimizer threads] A rank's CPU ops stream their bytes on its threads, each at one
// thread's rate, and every rank of the node steps at once (they leave the same backward), so
// together they are bounded by the node's memory bandwidth: a rank gets at most its share.
// With every hardware thread (0) the share is the rate.
double CostModel::host_bytes_per_second(const Schedule& schedule) const {
  const double node_share = calibration_.host_memory_bytes_per_second / std::max(1, cluster_.gpus_per_node);
  if (schedule.host_threads_per_rank == 0) return node_share;
  return std::min(node_share, schedule.host_threads_per_rank * calibration_.host_optimizer_bytes_per_second);
}

double CostModel::shapeless_matmul_seconds(const Op& op) const {
  return std::max(0.0, op.flops - op.attention_flops) / (peak_flops_ * calibration_.matmul_efficiency);
}

CostModel::MemoryBoundTraffic CostModel::memory_bound_traffic(const Op& op) const {
  const bool module_compute = is_module_compute(op.kind);
  const ModuleInfo* module = module_compute ? module_info(op.module) : nullptr;
  const bool eager_block = module && module->eager_factor;
  const double eager = eager_block ? *module->eager_factor : 1.0;
  const double efficiency = module_compute ? calibration_.memory_bound_efficiency : calibration_.hbm_efficiency;
  MemoryBoundTraffic t;
  t.bytes_per_second = cluster_.gpu.hbm_bandwidth_bytes_per_second * efficiency;
  // Eager attention's score-matrix kernels stream b x a x s x s tensors (hundreds of MB and
  // more): they run at the bandwidth a large copy reaches (e_hbm), not at the fitted
  // memory_bound_efficiency, which stands for the block's many small per-token kernels.
  const double scores = std::min(op.score_hbm_bytes, op.hbm_bytes);
  t.score_seconds = scores / (cluster_.gpu.hbm_bandwidth_bytes_per_second * calibration_.hbm_efficiency);
  t.bytes = eager * (op.hbm_bytes - scores);
  if (!module || !module->kernels) return t;
  t.listed = &*module->kernels;
  // A backward runs two kernels per forward kernel (the schedule's 2x bytes split between
  // them); eagerly, each fused kernel is eager_kernels_per_fused_kernel kernels sharing its
  // (eager-factored) bytes.
  t.launches = (op.kind == OpKind::compute_bwd ? 2.0 : 1.0) *
               (eager_block ? module->eager_kernels.value_or(calibration_.eager_kernels_per_fused_kernel) : 1.0);
  return t;
}

double CostModel::listed_kernel_seconds(const MemoryBoundTraffic& t, double share) const {
  return t.launches *
         std::max(share * t.bytes / t.launches / t.bytes_per_second, calibration_.memory_bound_kernel_floor_seconds);
}

double CostModel::memory_bound_seconds(const Op& op) const {
  if (!(op.hbm_bytes > 0)) return 0;
  const MemoryBoundTraffic t = memory_bound_traffic(op);
  if (!t.listed) return t.bytes / t.bytes_per_second + t.score_seconds;
  // Kernel by kernel: each listed kernel's share of the per-token bytes.
  double seconds = t.score_seconds;
  for (double share : t.listed->memory_bound_shares) seconds += listed_kernel_seconds(t, share);
  return seconds;
}

GemmDevice CostModel::gemm_device() const {
  GemmDevice d;
  d.sm_count = cluster_.gpu.sm_count;
  d.peak_flops = peak_flops_;
  d.hbm_bytes_per_second = cluster_.gpu.hbm_bandwidth_bytes_per_second;
  d.hbm_efficiency = calibration_.hbm_efficiency;
  d.large_gemm_efficiency = calibration_.matmul_efficiency;
  d.dtype_bytes = compute_dtype_bytes_;
  return d;
}

GemmDevice CostModel::fp8_gemm_device() const {
  auto peak = cluster_.gpu.peak_flops.find("fp8");
  if (peak == cluster_.gpu.peak_flops.end())
    throw std::invalid_argument("an fp8 GEMM on " + cluster_.gpu.name + ", whose catalog entry lists no fp8 peak");
  GemmDevice d = gemm_device();
  d.peak_flops = peak->second;
  d.dtype_bytes = 1;
  d.output_bytes = 2;  // torchao's Float8Linear asks torch._scaled_mm for a bf16 output
  d.large_gemm_efficiency =
      calibration_.fp8_matmul_efficiency > 0 ? calibration_.fp8_matmul_efficiency : calibration_.matmul_efficiency;
  return d;
}

bool CostModel::gemm_from_table(const GemmShape& g) const {
  const GemmTable& table = g.fp8 ? fp8_gemm_table_ : compute_gemm_table_;
  return !table.rows.empty() && measured_gemm_seconds(table, g).has_value();
}

double CostModel::gemm_seconds(const GemmShape& g) const {
  const GemmTable& table = g.fp8 ? fp8_gemm_table_ : compute_gemm_table_;
  if (!table.rows.empty())
    if (const std::optional<double> measured = measured_gemm_seconds(table, g)) return *measured;
  return estimate_gemm(g, g.fp8 ? fp8_gemm_device() : gemm_device()).seconds;
}

double CostModel::cast_kernels_seconds(const KernelSet& k) const {
  const double bytes_per_second = cluster_.gpu.hbm_bandwidth_bytes_per_second * calibration_.hbm_efficiency;
  double seconds = 0;
  for (double bytes : k.cast_kernel_bytes)
    seconds += std::max(bytes / bytes_per_second, calibration_.memory_bound_kernel_floor_seconds);
  return seconds;
}

double KernelSetTimes::gemm_seconds() const {
  double seconds = 0;
  for (double g : gemms) seconds += g;
  for (double g : grouped_gemms) seconds += g;
  return seconds;
}

double KernelSetTimes::total() const { return gemm_seconds() + attention + casts; }

KernelSetTimes CostModel::kernel_set_times(const KernelSet& k) const {
  KernelSetTimes t;
  t.priced = true;
  for (const GemmShape& g : k.gemms) t.gemms.push_back(gemm_seconds(g));
  if (!k.grouped_gemms.empty()) {
    const GemmDevice device = gemm_device();
    for (const GroupedGemmShape& g : k.grouped_gemms) t.grouped_gemms.push_back(estimate_grouped_gemm(g, device).seconds);
  }
  if (k.has_attention) t.attention = attention_seconds(k);
  if (!k.cast_kernel_bytes.empty()) t.casts = cast_kernels_seconds(k);
  return t;
}

double CostModel::kernel_set_seconds(const KernelSet& k) const { return kernel_set_times(k).total(); }

double CostModel::gemm_seconds_of(const Op& op, const Schedule& schedule, std::vector<KernelSetTimes>* kernel_memo) const {
  if (op.kernel_set >= 0 && op.kernel_set < static_cast<int>(schedule.kernel_sets.size())) {
    KernelSetTimes local;
    return times_of(schedule.kernel_sets[op.kernel_set], op.kernel_set, kernel_memo, local).gemm_seconds();
  }
  return op.flops > 0 ? shapeless_matmul_seconds(op) : 0.0;
}

double CostModel::effective_compute_slowdown_under_comm(double gemm_share) const {
  const double others = calibration_.compute_slowdown_under_comm;
  if (!calibration_.gemm_slowdown_under_comm) return others;
  const double share = std::clamp(gemm_share, 0.0, 1.0);
  return share * *calibration_.gemm_slowdown_under_comm + (1 - share) * others;
}

const KernelSetTimes& CostModel::times_of(const KernelSet& set, int index, std::vector<KernelSetTimes>* memo,
                                          KernelSetTimes& local) const {
  if (!memo) return local = kernel_set_times(set);
  KernelSetTimes& times = memo->at(index);
  if (!times.priced) times = kernel_set_times(set);
  return times;
}

// Eager attention's matmuls over every (query, key) pair (the mask is applied to the scores
// afterwards; the softmax and mask traffic is in the op's hbm_bytes): torch.matmul on
// [b, heads, s, d] runs one batched GEMM of b x heads equal problems, priced as a grouped GEMM
// (planner/gemm_model.h): with a head dim of 64 or 128 the s x s score write or read dominates,
// so these GEMMs are HBM-bound where a FLOP count at the GEMM ceiling would call them cheap.
// Forward: QK^T [s, d] x [d, s] and AV [s, s] x [s, dv]; backward: each one's input and
// operand gradients, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q.
double CostModel::eager_attention_matmul_seconds(const AttentionShape& a, AttentionPass pass) const {
  const double count = a.batch * a.heads, s_q = a.seq_q, s_kv = a.seq_kv;
  const double d = a.head_dim, dv = a.value_head_dim();
  std::vector<GemmShape> gemms;
  if (pass == AttentionPass::backward) {
    gemms = {{s_q, s_kv, dv}, {s_kv, dv, s_q}, {s_q, d, s_kv}, {s_kv, d, s_q}};
  } else {
    gemms = {{s_q, s_kv, d}, {s_q, dv, s_kv}};
  }
  const GemmDevice device = gemm_device();
  double seconds = 0;
  for (const GemmShape& g : gemms) seconds += estimate_grouped_gemm({{g}, {count}}, device).seconds;
  return seconds;
}

AttentionDevice CostModel::attention_device() const {
  AttentionDevice d;
  d.arch = cluster_.gpu.arch;
  d.sm_count = cluster_.gpu.sm_count;
  d.peak_flops = peak_flops_;
  d.hbm_bytes_per_second = cluster_.gpu.hbm_bandwidth_bytes_per_second;
  d.matmul_efficiency = calibration_.matmul_efficiency;
  return d;
}

double CostModel::attention_seconds(const KernelSet& k) const {
  const AttentionShape& a = k.attention;
  if (k.scores_materialized) return eager_attention_matmul_seconds(a, k.attention_pass);
  const AttentionDevice device = attention_device();
  const AttentionMemo::Key key{a.batch, a.seq_q, a.seq_kv, a.window, a.heads, a.kv_heads, a.head_dim,
                               a.value_head_dim(), a.causal, k.attention_pass == AttentionPass::backward,
                               attention_kernel_, device.arch, device.sm_count, device.peak_flops,
                               device.hbm_bytes_per_second, device.matmul_efficiency};
  AttentionMemo& memo = attention_memo();
  {
    std::lock_guard<std::mutex> lock(memo.mutex);
    auto hit = memo.seconds.find(key);
    if (hit != memo.seconds.end()) return hit->second;
  }
  const double seconds = estimate_attention(a, k.attention_pass, attention_kernel_, device).seconds;
  std::lock_guard<std::mutex> lock(memo.mutex);
  memo.seconds.emplace(key, seconds);
  return seconds;
}

double CostModel::kernels(const Op& op) const {
  if (op.stream == Stream::host) return 0;  // the CPU's own work launches no kernel
  switch (op.kind) {
    case OpKind::compute_fwd:
    case OpKind::recompute:
    case OpKind::compute_bwd: {
      // Counted when the costs list the kernels and the scenario says whether it is compiled.
      const ModuleInfo* module = module_info(op.module);
      if (module && module->kernels && execution_ != Execution::unstated) {
        const ModuleKernels& k = *module->kernels;
        const double memory_bound = static_cast<double>(k.memory_bound_shares.size()) *
                                    (op.kind == OpKind::compute_bwd ? 2.0 : 1.0) *
                                    (module->eager_factor
                                         ? module->eager_kernels.value_or(calibration_.eager_kernels_per_fused_kernel)
                                         : 1.0);
        return (op.kind == OpKind::compute_bwd ? k.backward_launches : k.forward_launches) + memory_bound;
      }
      int tensors = 1;
      if (module) tensors = std::max(1, module->parameter_tensors);
      const double k = std::max(1.0, tensors * calibration_.kernels_per_parameter_tensor);
      return op.kind == OpKind::compute_bwd ? 2 * k : k;
    }
    case OpKind::optimizer: {
      const int tensors = std::max(1, model_parameter_tensors_);
      // A fused step is one multi-tensor kernel per chunk of tensors over its lists (params,
      // grads and each state: depth 4 for AdamW, 3 for SGD with momentum), which packs
      // depth_to_max_tensors = {110, 64, 48, 36, 30}[depth - 1] tensors per launch (PyTorch's
      // MultiTensorApply.cuh; DeepSpeed's and Apex's multi_tensor_apply.cuh use the same table).
      if (fused_optimizer_) {
        static constexpr int kMaxTensorsOfDepth[] = {110, 64, 48, 36, 30};
        const int depth = std::clamp(2 + optimizer_states_, 1, 5);
        return std::ceil(tensors / static_cast<double>(kMaxTensorsOfDepth[depth - 1]));
      }
      // torch.optim's foreach AdamW: about 10 _foreach_ ops per step, each launching one
      // multi-tensor kernel per chunk of tensors (multi_tensor_apply packs up to 64 tensors
      // of a depth-2 list, MultiTensorApply.cuh depth_to_max_tensors).
      return 10.0 * std::ceil(tensors / 64.0);
    }
    case OpKind::wait:
    case OpKind::nvme_read:   // aio on the CPU: no kernel
    case OpKind::nvme_write:
      return 0;
    default:
      return 1;
  }
}

// The node's ranks swap at once (every rank steps its optimizer together, and ZeRO-3 fetches the
// same unit on every rank), so each gets 1/gpus_per_node of the drives' bandwidth.
double CostModel::nvme_seconds(const Op& op) const {
  const double node_gbps = op.kind == OpKind::nvme_read ? cluster_.nvme_read_gbps : cluster_.nvme_write_gbps;
  if (node_gbps <= 0) return 0;
  return op.comm_bytes / (node_gbps * 1e9 / std::max(1, cluster_.gpus_per_node));
}

std::string nvme_untimed_warning(const ClusterSpec& cluster, const Schedule& schedule) {
  if (cluster.nvme_read_gbps > 0 && cluster.nvme_write_gbps > 0) return "";
  for (const Op& op : schedule.ops)
    if (op.kind == OpKind::nvme_read || op.kind == OpKind::nvme_write)
      return "the step swaps to NVMe (offload_optimizer/offload_param \"nvme\") but the cluster does not state "
             "its NVMe bandwidth (cluster.nvme.read_gbps, write_gbps): the swaps are not timed";
  return "";
}

std::string shared_nic_warning(const ClusterSpec& cluster, const Schedule& schedule) {
  const int nics = std::max(1, cluster.nics_per_node);
  for (std::size_t g = 0; g < schedule.groups.size(); ++g) {
    const ProcessGroup& group = schedule.groups[g];
    if (group.nodes <= 1 || group.ranks % group.nodes != 0) continue;
    const int instances = cluster.gpus_per_node / (group.ranks / group.nodes);  // per node
    if (instances <= nics) continue;
    const bool used = std::any_of(schedule.ops.begin(), schedule.ops.end(), [&](const Op& op) {
      return is_collective(op.kind) && op.group == static_cast<int>(g);
    });
    if (!used) continue;
    // What CostModel::nccl_view gives each instance: one NIC of nics x bandwidth / instances.
    char share[64];
    std::snprintf(share, sizeof share, "%.3g GB/s", cluster.nic_bandwidth_gbps * nics / instances);
    return std::to_string(instances) + " instances of the " + group.name + " group (" + std::to_string(group.ranks) +
           " ranks over " + std::to_string(group.nodes) + " nodes) cross nodes at once through each node's " +
           std::to_string(nics) + " NIC" + (nics == 1 ? "" : "s") + ": each instance's collectives are priced with " +
           "its share, " + share + " (`fsdpsim simulate` shares the NICs flow by flow); the share is as right as " +
           "cluster.inter_node.nics_per_node (" + std::to_string(nics) + ")";
  }
  return "";
}

std::string borrowed_attention_warning(const ClusterSpec& cluster, AttentionKernel kernel, const Schedule& schedule) {
  if (kernel == AttentionKernel::eager) return "";
  const bool fused = std::any_of(schedule.kernel_sets.begin(), schedule.kernel_sets.end(),
                                 [](const KernelSet& k) { return k.has_attention && !k.scores_materialized; });
  if (!fused) return "";
  std::string borrowed;
  // Whether a pass borrows depends on the kernel, the arch and the pass, not on the shape.
  for (AttentionPass pass : {AttentionPass::forward, AttentionPass::backward}) {
    const AttentionKernelConstants c = attention_constants(kernel, cluster.gpu.arch, pass, 128, true);
    if (c.fitted_on.find("borrowed") != std::string::npos) {
      borrowed = c.fitted_on;
      break;
    }
  }
  if (borrowed.empty()) return "";
  std::string w = "attention kernel " + to_string(kernel) + " on " + cluster.gpu.name + " (" + cluster.gpu.arch +
                  ") is priced with constants fitted elsewhere (" + borrowed + ")";
  if (kernel == AttentionKernel::mem_efficient && cluster.gpu.arch == "hopper")
    w += "; on an H100 and an H200 this kernel measured 6-17% slower than it is priced here at head dim 128 and "
         "19-33% slower at head dim 64 (docs/accuracy.md, \"Attention kernels on both GPUs against the model\")";
  return w;
}

std::string sliding_window_kernel_warning(AttentionKernel kernel, const Schedule& schedule) {
  if (!kernel_applies_window(kernel)) return "";
  const bool windowed = std::any_of(schedule.kernel_sets.begin(), schedule.kernel_sets.end(), [](const KernelSet& k) {
    return k.has_attention && !k.scores_materialized && k.attention.window > 0 && k.attention.window < k.attention.seq_kv;
  });
  if (!windowed) return "";
  return "the sliding-window layers are priced with " + to_string(kernel) +
         "'s local attention (transformers' flash_attention_2 or flex, torchtitan's FlexAttention); transformers' "
         "default sdpa applies the window as a dense mask, computing the whole square and keeping a 16-bit mask per "
         "layer: --set training.attention=mem_efficient (or cudnn) prices that path";
}

double CostModel::issue_seconds(const Op& op) const {
  const bool module_compute = is_module_compute(op.kind);
  if (!module_compute) return calibration_.op_issue_seconds + kernels(op) * calibration_.kernel_issue_seconds;
  // An eager module's kernels cost what eager dispatch costs per kernel (Python in forward and
  // recompute, the autograd engine in backward); compiled code launches them from Inductor's
  // wrapper, and a run that does not say is priced as the fused kernels it is costed as.
  if (execution_ != Execution::eager) return kernels(op) * calibration_.kernel_issue_seconds;
  return kernels(op) * (op.kind == OpKind::compute_bwd ? calibration_.eager_backward_kernel_issue_seconds
                                                       : calibration_.eager_forward_kernel_issue_seconds);
}

double CostModel::issue_lead_seconds(const Op& op, const Schedule& schedule, std::vector<KernelSetTimes>* memo,
                                     IssueLeadMemo* lead_memo) const {
  const double issue = issue_seconds(op);
  const bool module_compute = is_module_compute(op.kind);
  if (!module_compute || !(issue > 0) || execution_ == Execution::unstated) return issue;
  const ModuleInfo* info = module_info(op.module);
  if (!info || !info->kernels || info->kernels->launch_order.empty()) return issue;
  if (op.kernel_set < 0 || op.kernel_set >= static_cast<int>(schedule.kernel_sets.size())) return issue;
  const KernelSet& set = schedule.kernel_sets[op.kernel_set];
  const std::string& order = info->kernels->launch_order;  // the module's (ModuleKernels)
  const bool backward = op.kind == OpKind::compute_bwd;
  const std::size_t matmuls = static_cast<std::size_t>(std::count(order.begin(), order.end(), 'g'));
  const bool attention = order.find('a') != std::string::npos;
  if (set.gemms.size() != (backward ? 2 : 1) * matmuls || !set.grouped_gemms.empty() || set.has_attention != attention)
    return issue;
  const MemoryBoundTraffic traffic = memory_bound_traffic(op);
  const bool bytes_priced = op.hbm_bytes > 0;  // as memory_bound_seconds: no bytes, no time
  const ModuleKernels& module = *info->kernels;
  const IssueLeadMemo::Entry key{op.kernel_set, op.kind, traffic.bytes, traffic.launches, traffic.score_seconds,
                                 issue, bytes_priced, &module, 0.0};
  if (lead_memo)
    for (const IssueLeadMemo::Entry& e : lead_memo->entries)
      if (e.kernel_set == key.kernel_set && e.kind == key.kind && e.bytes == key.bytes && e.launches == key.launches &&
          e.score_seconds == key.score_seconds && e.issue == key.issue && e.bytes_priced == key.bytes_priced &&
          (e.kernels == key.kernels || (e.kernels->launch_order == module.launch_order &&
                                        e.kernels->memory_bound_shares == module.memory_bound_shares)))
        return e.lead;
  KernelSetTimes local;
  const KernelSetTimes& times = times_of(set, op.kernel_set, memo, local);
  const std::vector<double>& shares = module.memory_bound_shares;
  const double per_kernel = issue / kernels(op);
  // Kernels issued so far, and the GPU time of the kernels before the next one.
  double issued = 0, before = 0, lead = 0;
  // `count` kernels of equal length, `seconds` in all: the lead is linear in j across them, so
  // its largest value is at the first or the last.
  auto launch = [&](double count, double seconds) {
    lead = std::max(lead, (issued + 1) * per_kernel - before);
    lead = std::max(lead, (issued + count) * per_kernel - before - seconds * (count - 1) / count);
    issued += count;
    before += seconds;
  };
  const std::size_t n = order.size();
  std::size_t memory_bound = backward ? shares.size() : 0, gemm = backward ? matmuls : 0;
  for (std::size_t step = 0; step < n; ++step) {
    const char kernel = order[backward ? n - 1 - step : step];
    if (kernel == 'm') {
      const std::size_t i = backward ? --memory_bound : memory_bound++;
      launch(traffic.launches, bytes_priced ? listed_kernel_seconds(traffic, shares.at(i)) : 0.0);
    } else if (kernel == 'g') {
      // A backward GEMM node runs the input gradient, then the weight gradient.
      const std::size_t j = backward ? --gemm : gemm++;
      if (backward) {
        launch(1, times.gemms.at(2 * j));
        launch(1, times.gemms.at(2 * j + 1));
      } else {
        launch(1, times.gemms.at(j));
      }
    } else {
      launch(backward ? 3 : 1, times.attention + (bytes_priced ? traffic.score_seconds : 0.0));
    }
  }
  lead = std::min(lead, issue);
  if (lead_memo) {
    IssueLeadMemo::Entry entry = key;
    entry.lead = lead;
    lead_memo->entries.push_back(entry);
  }
  return lead;
}

}  // namespace fsdpsim::planner
