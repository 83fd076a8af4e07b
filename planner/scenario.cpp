#include "planner/scenario.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>

#include "models/checked_arithmetic.h"
#include "models/hf_import.h"
#include "models/json_input.h"
#include "planner/catalog.h"

namespace fsdpsim::planner {

namespace fs = std::filesystem;

namespace {
// The largest world the planner takes (its schedules and SimGrid platforms are built per
// rank), and the most GPUs one node may hold (NVL72 racks hold 72; a little room above).
constexpr int kMaxWorld = 1 << 20;
constexpr int kMaxGpusPerNode = 1024;
// A bound on fsdp.prefetch_depth that only rejects nonsense; a depth past the last unit
// prefetches every remaining unit.
constexpr int kMaxPrefetchDepth = 1 << 16;
}  // namespace

std::string strategy_name(Strategy s) {
  switch (s) {
    case Strategy::NO_SHARD: return "NO_SHARD";
    case Strategy::ZERO1: return "ZERO1";
    case Strategy::SHARD_GRAD_OP: return "SHARD_GRAD_OP";
    case Strategy::FULL_SHARD: return "FULL_SHARD";
    case Strategy::HYBRID_SHARD: return "HYBRID_SHARD";
    case Strategy::HYBRID_SHARD_ZERO2: return "HYBRID_SHARD_ZERO2";
  }
  return "FULL_SHARD";
}

const std::vector<std::string> kAttentionKernelNames = {"auto",   "flash2", "flash3",        "cudnn", "mem_efficient",
                                                       "triton", "flash1_triton", "eager"};

bool is_hybrid(Strategy s) { return s == Strategy::HYBRID_SHARD || s == Strategy::HYBRID_SHARD_ZERO2; }

bool shard_group_spreads_evenly(int group, int world, int gpus_per_node) {
  if (gpus_per_node <= 0 || world <= gpus_per_node) return true;
  return group <= gpus_per_node ? gpus_per_node % group == 0 : group % gpus_per_node == 0;
}

int optimizer_states_per_param(Optimizer o) {
  switch (o) {
    case Optimizer::adamw:
    case Optimizer::adam: return 2;
    case Optimizer::sgd_momentum: return 1;
    case Optimizer::none: return 0;
  }
  return 0;
}

namespace {
// An installed binary's data: <prefix>/share/fsdpsim beside <prefix>/bin/fsdpsim (`cmake
// --install`), when it holds the GPU catalog; "" otherwise (a binary in the build tree).
std::string installed_data_root() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path share = exe.parent_path().parent_path() / "share" / "fsdpsim";
  return fs::is_regular_file(share / "scenarios/hardware/gpus.json", ec) ? share.string() : "";
}
}  // namespace

std::string catalog_root() {
  if (const char* env = std::getenv("FSDPSIM_ROOT"); env && *env) return env;
  static const std::string installed = installed_data_root();
  if (!installed.empty()) return installed;
#ifdef FSDPSIM_SOURCE_ROOT
  return FSDPSIM_SOURCE_ROOT;
#else
  return ".";
#endif
}

namespace {
// A name the system cannot look up (too long, say) is a file that is not there: the caller's
// "no file" error names it. The throwing overloads made it a bare std::filesystem_error
// (found by the scenario fuzzer, tests/fuzz/).
bool exists_quietly(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}
}  // namespace

std::string resolve_path(const std::string& path, const std::string& relative_to) {
  fs::path p(path);
  if (p.is_absolute() || exists_quietly(p)) return path;
  if (!relative_to.empty()) {
    fs::path candidate = fs::path(relative_to) / p;
    if (exists_quietly(candidate)) return candidate.string();
  }
  fs::path candidate = fs::path(catalog_root()) / p;
  if (exists_quietly(candidate)) return candidate.string();
  return path;  // the caller's open fails with a message naming it
}

ModelContext model_context(const models::Model& model) {
  // A position embedding: an Embedding named for positions (GPT-2's wpe, OPT's embed_positions,
  // BERT-style position_embeddings), whose rows are the positions it can index.
  ModelContext c;
  models::for_each_module(model.root, [&](const models::Module& m) {
    const bool positional = m.name == "wpe" || m.name.find("position") != std::string::npos;
    if (!c.table.empty() || m.type != "Embedding" || !positional) return;
    for (const models::Parameter& p : m.params)
      if (p.name == "weight" && !p.shape.empty()) {
        c.table = m.full_name;
        c.tokens = p.shape[0];
      }
  });
  if (!c.table.empty()) {
    c.learned_positions = true;
    c.what = "learned position embedding (" + c.table + ", " + std::to_string(c.tokens) + " positions)";
  } else if (model.arch.max_seq_len > 0) {
    c.tokens = model.arch.max_seq_len;
    c.what = "stated context (arch.max_seq_len " + std::to_string(c.tokens) + ")";
  }
  return c;
}

std::string context_length_warning(const Scenario& scenario) {
  const std::int64_t seq = scenario.training.seq_len;
  const ModelContext context = model_context(*scenario.model);
  const std::string asked = "training.seq_len " + std::to_string(seq);
  if (context.tokens <= 0 || seq <= context.tokens) return "";
  if (context.learned_positions)
    return asked + " is longer than the " + std::to_string(context.tokens) +
           " positions of the model's learned position embedding (" + context.table +
           "): the model cannot run it as written (predicted as asked)";
  return asked + " is longer than the model's stated context (arch.max_seq_len " + std::to_string(context.tokens) +
         "): it runs past it only with RoPE scaling or another length extension, which the model file does "
         "not describe (predicted as asked)";
}

std::optional<std::int64_t> positive_integer_text(const std::string& text) {
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(d > 0 && d < 9e18) || std::floor(d) != d) return std::nullopt;
  return static_cast<std::int64_t>(d);
}

nlohmann::json wrap_object(const nlohmann::json& value, const std::string& file, const std::string& path) {
  const std::string expected = "expected a wrap policy (block, root, torchtitan, every:K, size:N) or a wrap object, got ";
  if (value.is_object()) return value;
  if (!value.is_string()) throw InputError(file, path, expected + describe_json(value));
  const std::string s = value.get<std::string>();
  if (s == "block" || s == "root" || s == "torchtitan") return {{"policy", s}};
  // K or N of the shorthand: a positive integer, written as text.
  auto count = [&](const std::string& text, const std::string& what) {
    if (const auto n = positive_integer_text(text)) return *n;
    throw InputError(file, path, "expected " + what + " (a positive integer), got " + describe_json(text));
  };
  const auto colon = s.find(':');
  if (colon != std::string::npos) {
    const std::string name = s.substr(0, colon), arg = s.substr(colon + 1);
    if (name == "every" || name == "every_k_blocks")
      return {{"policy", "every_k_blocks"}, {"every", count(arg, "blocks per unit")}};
    if (name == "size") return {{"policy", "size"}, {"min_num_params", count(arg, "a parameter count")}};
  }
  throw InputError(file, path, expected + "\"" + s + "\"");
}

namespace {

std::string directory_of(const std::string& file) {
  return fs::path(file).parent_path().string();
}

// What training.matmul_dtype and fsdp.all_gather_dtype accept besides fp8.
std::string fp8_or_param_dtype(models::DType param_dtype) {
  return "expected fp8 or the param_dtype (\"param_dtype\" or " + models::dtype_name(param_dtype) + ")";
}

models::DType dtype_field(JsonReader& r, const std::string& key, models::DType fallback) {
  auto name = r.string_or(key);
  if (!name) return fallback;
  auto dtype = models::parse_dtype(*name);
  if (!dtype) r.fail(key, "expected fp32, bf16, fp16 or fp8; got \"" + *name + "\"");
  return *dtype;
}

WrapSpec parse_wrap(JsonReader r) {
  WrapSpec w;
  std::string policy = r.choice_or("policy", {"block", "every_k_blocks", "size", "modules", "root", "torchtitan"}, "block");
  if (policy == "block") w.policy = WrapPolicy::block;
  if (policy == "torchtitan") w.policy = WrapPolicy::torchtitan;
  if (policy == "every_k_blocks") {
    w.policy = WrapPolicy::every_k_blocks;
    w.every = r.int_in("every", 1, 1000000);
  }
  if (policy == "size") {
    w.policy = WrapPolicy::size;
    w.min_num_params = r.positive_integer_or("min_num_params", w.min_num_params);
  }
  if (policy == "modules") {
    w.policy = WrapPolicy::modules;
    const auto& list = r.array("modules");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = join_json_path(r.path_of("modules"), i);
      std::vector<std::string> group;
      if (list[i].is_string()) group.push_back(list[i].get<std::string>());
      else if (list[i].is_array() && !list[i].empty())
        for (std::size_t k = 0; k < list[i].size(); ++k) {
          if (!list[i][k].is_string())
            throw InputError(r.file(), join_json_path(path, k), "expected a module name string");
          group.push_back(list[i][k].get<std::string>());
        }
      else
        throw InputError(r.file(), path, "expected a module name or a non-empty list of sibling module names");
      w.modules.push_back(group);
    }
  }
  if (policy == "root") w.policy = WrapPolicy::root;
  if (r.has("block_types")) {
    const auto& list = r.array("block_types");
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string())
        throw InputError(r.file(), join_json_path(r.path_of("block_types"), i), "expected a module type string");
      w.block_types.push_back(list[i].get<std::string>());
    }
  }
  r.finish();
  return w;
}

Strategy parse_strategy(JsonReader& r) {
  std::string s = r.choice_or("strategy",
                              {"NO_SHARD", "ZERO1", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD",
                               "HYBRID_SHARD_ZERO2", "ZERO2", "ZERO3"},
                              "FULL_SHARD");
  if (s == "NO_SHARD") return Strategy::NO_SHARD;
  if (s == "ZERO1") return Strategy::ZERO1;
  if (s == "SHARD_GRAD_OP" || s == "ZERO2") return Strategy::SHARD_GRAD_OP;
  if (s == "HYBRID_SHARD") return Strategy::HYBRID_SHARD;
  if (s == "HYBRID_SHARD_ZERO2") return Strategy::HYBRID_SHARD_ZERO2;
  return Strategy::FULL_SHARD;
}

TrainingSpec parse_training(JsonReader r, int world) {
  TrainingSpec t;
  t.micro_batch = r.positive_integer_or("micro_batch", 1);
  t.seq_len = r.positive_integer_or("seq_len", 2048);
  if (t.seq_len > (1 << 24)) r.fail("seq_len", "expected at most 16M tokens per sequence");
  if (t.micro_batch > (1 << 20)) r.fail("micro_batch", "expected at most 2^20 sequences");
  // More micro-steps than this is no training run, and the planner writes every micro-step's ops.
  constexpr std::int64_t kMaxGradAccum = 100000;
  std::optional<std::int64_t> accum;
  if (r.has("grad_accum")) {
    accum = r.positive_integer("grad_accum");
    if (*accum > kMaxGradAccum)
      r.fail("grad_accum", "expected at most " + std::to_string(kMaxGradAccum) + " gradient accumulation steps, got " +
                               std::to_string(*accum));
  }
  const std::int64_t per_micro_step = checked_mul(t.micro_batch, world, "micro_batch x ranks");
  if (r.has("global_batch")) {
    t.global_batch = r.positive_integer("global_batch");
    t.global_batch_stated = true;
    if (t.global_batch % per_micro_step != 0)
      r.fail("global_batch", "global batch " + std::to_string(t.global_batch) +
                                 " is not a multiple of micro_batch x data-parallel ranks = " +
                                 std::to_string(t.micro_batch) + " x " + std::to_string(world) + " = " +
                                 std::to_string(per_micro_step));
    t.grad_accum = t.global_batch / per_micro_step;
    if (accum && *accum != t.grad_accum)
      r.fail("grad_accum", "grad_accum " + std::to_string(*accum) + " contradicts global_batch / (micro_batch x ranks) = " +
                               std::to_string(t.grad_accum));
  } else {
    t.grad_accum = accum.value_or(1);
    t.global_batch = checked_mul(t.grad_accum, per_micro_step, "grad_accum x micro_batch x ranks");
  }
  if (t.grad_accum > kMaxGradAccum)
    r.fail("global_batch", "expected at most " + std::to_string(kMaxGradAccum) +
                               " gradient accumulation steps: global_batch / (micro_batch x ranks) = " +
                               std::to_string(t.global_batch) + " / " + std::to_string(per_micro_step) + " = " +
                               std::to_string(t.grad_accum));
  t.param_dtype = dtype_field(r, "param_dtype", models::DType::bf16);
  // FSDP computes in its param_dtype (MixedPrecision): all of the model, attention, norms and the
  // loss included, which PyTorch has no fp8 kernels for (no fp8 addmm, no fp8 SDPA). fp8 training
  // is float8 linears over 16-bit parameters (the session-30 audit: param_dtype fp8 was planned
  // 34% faster than torchao's recipe, silently).
  if (t.param_dtype == models::DType::fp8)
    r.fail("param_dtype",
           "expected fp32, bf16 or fp16: FSDP computes the whole model in its param_dtype, and PyTorch has no fp8 "
           "attention, norms or loss; for float8 training (torchao's convert_to_float8_training) set "
           "training.matmul_dtype fp8, and fsdp.all_gather_dtype fp8 to gather the float8 linears' weights in fp8");
  t.reduce_dtype = dtype_field(r, "reduce_dtype", models::DType::fp32);
  t.master_dtype = dtype_field(r, "master_dtype", models::DType::fp32);
  std::string opt = r.choice_or("optimizer", {"adamw", "adam", "sgd_momentum", "none"}, "adamw");
  t.optimizer = opt == "adamw" ? Optimizer::adamw
              : opt == "adam" ? Optimizer::adam
              : opt == "sgd_momentum" ? Optimizer::sgd_momentum
                                      : Optimizer::none;
  t.optimizer_kernel = r.choice_or("optimizer_kernel", {"foreach", "fused"}, "foreach") == "fused" ? OptimizerKernel::fused
                                                                                                : OptimizerKernel::foreach;
  if (r.has("host_threads_per_rank")) t.host_threads_per_rank = r.int_in("host_threads_per_rank", 0, 4096);
  else r.ignore("host_threads_per_rank");
  if (r.has("torch_compile"))
    t.execution = r.boolean_or("torch_compile", false) ? TrainingSpec::Execution::compiled : TrainingSpec::Execution::eager;
  else
    r.ignore("torch_compile");
  if (r.has("loss")) t.loss = *models::parse_loss_kind(r.choice("loss", models::loss_kind_names()));
  else r.ignore("loss");
  t.attention = r.choice_or("attention", kAttentionKernelNames, "auto");
  if (r.has("liger")) t.liger = r.boolean_or("liger", false);
  else r.ignore("liger");
  // "param_dtype" (the word docs/schema.md gives for the default) or the param_dtype's own name.
  if (r.string_or("matmul_dtype") == std::optional<std::string>("param_dtype")) t.matmul_dtype = t.param_dtype;
  else t.matmul_dtype = dtype_field(r, "matmul_dtype", t.param_dtype);
  if (t.matmul_dtype != t.param_dtype && t.matmul_dtype != models::DType::fp8 && !t.autocast())
    r.fail("matmul_dtype", fp8_or_param_dtype(t.param_dtype) + ", or bf16 or fp16 with param_dtype fp32 (autocast); got " +
                               models::dtype_name(t.matmul_dtype));
  t.moe_imbalance = r.number_or("moe_imbalance", 1.0);
  if (!(t.moe_imbalance >= 1 && t.moe_imbalance <= 1e6))
    r.fail("moe_imbalance", "expected the busiest expert's tokens over the mean expert's: a number >= 1, got " +
                                describe_json(r.raw("moe_imbalance")));
  std::string master = r.choice_or("master_weights", {"sharded_param", "optimizer_state"}, "sharded_param");
  t.master_weights = master == "sharded_param" ? MasterWeights::sharded_param : MasterWeights::optimizer_state;
  if (r.has("activation_checkpointing")) {
    const nlohmann::json& ac = r.raw("activation_checkpointing");
    if (ac.is_number_integer()) {
      t.checkpoint_every = r.int_in("activation_checkpointing", 1, 1000000);
      t.checkpointing = t.checkpoint_every == 1 ? Checkpointing::full : Checkpointing::every_k;
    } else {
      const std::string mode = ac.is_string() ? ac.get<std::string>() : "";
      if (mode != "none" && mode != "full" && mode != "selective")
        r.fail("activation_checkpointing", "expected \"none\", \"full\", \"selective\" or a positive integer k "
                                           "(checkpoint every k-th block); got " + describe_json(ac));
      t.checkpointing = mode == "full" ? Checkpointing::full
                      : mode == "selective" ? Checkpointing::selective
                                            : Checkpointing::none;
    }
  }
  r.finish();
  return t;
}

// [FSDP1 at one rank] FullyShardedDataParallel sets every sharding strategy to NO_SHARD when its
// process group has one rank (torch/distributed/fsdp/_init_utils.py, _init_core_state: "FSDP is
// switching to use `NO_SHARD` instead of ... since the world size is 1"). On a world of one rank
// that is all: the run is NO_SHARD, planned as such (no all-gathers, no reduce-scatters). A
// hybrid strategy whose shard group is one rank in a larger world is clamped the same way, but
// NO_SHARD then reduces the gradients over that one-rank group, so the replicas never
// synchronize (pytorch/pytorch#154888, acknowledged as a bug): refused rather than planned as the
// all-reduce the user meant. DeepSpeed's layout (master_weights optimizer_state) and FSDP2 have
// no such clamp.
void clamp_fsdp1_at_one_rank(Scenario& s, const std::string& file) {
  FsdpSpec& f = s.fsdp;
  const bool clamps = f.version == 1 && s.training.master_weights == MasterWeights::sharded_param &&
                      f.shard_group_size == 1 && f.strategy != Strategy::NO_SHARD && f.strategy != Strategy::ZERO1;
  if (!clamps) return;
  if (s.cluster.world_size() > 1)
    throw InputError(file, "fsdp.shard_group_size",
                     "FSDP1 turns " + strategy_name(f.strategy) + " with a shard group of one rank into NO_SHARD over "
                     "that one-rank group, so the gradients are never all-reduced across the " +
                     std::to_string(s.cluster.world_size()) + " replicas (PyTorch's _init_core_state; "
                     "pytorch/pytorch#154888): expected a shard group of 2 or more ranks, fsdp.strategy NO_SHARD (an "
                     "all-reduce over every rank) or fsdp.version 2");
  f.requested_strategy = f.strategy;
  f.strategy = Strategy::NO_SHARD;
  f.reshard_after_forward = 0;
}

}  // namespace

std::string expert_parallel_error(const FsdpSpec& f, int gpus_per_node) {
  const int ep = f.expert_parallel;
  if (ep > 1 && (f.version != 2 || !(f.strategy == Strategy::FULL_SHARD || f.strategy == Strategy::SHARD_GRAD_OP ||
                                     f.strategy == Strategy::HYBRID_SHARD)))
    return "expert parallelism is planned as torchtitan runs it: FSDP2 (version 2) with FULL_SHARD, SHARD_GRAD_OP or "
           "HYBRID_SHARD";
  if (ep > 1 && gpus_per_node % ep != 0 && ep % gpus_per_node != 0)
    return "expected a divisor or a multiple of gpus_per_node (" + std::to_string(gpus_per_node) +
           "): an EP group of consecutive ranks spans whole nodes or stays in one, got " + std::to_string(ep);
  if (ep > 1 && f.reshard_after_forward != 0 && f.reshard_after_forward != f.shard_group_size)
    return "with reshard_after_forward=" + std::to_string(f.reshard_after_forward) +
           " (a smaller reshard group) is not modelled; use true or false";
  if (f.shard_group_size % ep != 0)
    return "expected a divisor of the shard group size (" + std::to_string(f.shard_group_size) +
           "): an EP group is ranks of one shard group, got " + std::to_string(ep);
  return "";
}

namespace {

FsdpSpec parse_fsdp(JsonReader r, int world, int gpus_per_node) {
  FsdpSpec f;
  const std::int64_t version = r.integer_or("version", 2);
  if (version != 1 && version != 2) r.fail("version", "expected 1 (FullyShardedDataParallel) or 2 (fully_shard)");
  f.version = static_cast<int>(version);
  f.strategy = parse_strategy(r);
  const bool hybrid = is_hybrid(f.strategy);
  if (r.has("shard_group_size")) {
    f.shard_group_size = r.int_in("shard_group_size", 1, kMaxWorld);
    if (!hybrid && f.shard_group_size != world)
      r.fail("shard_group_size", "only hybrid strategies (HYBRID_SHARD, HYBRID_SHARD_ZERO2) take a shard group "
                                 "smaller than the world (" + std::to_string(world) + ")");
  } else {
    f.shard_group_size = hybrid ? std::min(gpus_per_node, world) : world;
  }
  if (f.shard_group_size > world || world % f.shard_group_size != 0)
    r.fail("shard_group_size", "a shard group of " + std::to_string(f.shard_group_size) +
                                   " ranks does not divide the world of " + std::to_string(world) + " ranks");
  if (!shard_group_spreads_evenly(f.shard_group_size, world, gpus_per_node))
    r.fail("shard_group_size", "a shard group of " + std::to_string(f.shard_group_size) + " ranks straddles nodes of " +
                                   std::to_string(gpus_per_node) + " GPUs unevenly; expected a divisor of " +
                                   std::to_string(gpus_per_node) + " (within a node) or a multiple of it that divides the world of " +
                                   std::to_string(world) + " ranks");
  if (r.has("wrap")) {
    const std::string path = r.path_of("wrap");
    const nlohmann::json wrap = wrap_object(r.raw("wrap"), r.file(), path);
    f.wrap = parse_wrap(JsonReader(wrap, r.file(), path));
  } else {
    r.ignore("wrap");
  }

  const bool keeps_params = f.strategy == Strategy::SHARD_GRAD_OP || f.strategy == Strategy::HYBRID_SHARD_ZERO2;
  const bool params_sharded = f.strategy != Strategy::NO_SHARD && f.strategy != Strategy::ZERO1;
  f.reshard_after_forward = (params_sharded && !keeps_params) ? f.shard_group_size : 0;
  if (r.has("reshard_after_forward")) {
    const nlohmann::json& v = r.raw("reshard_after_forward");
    int value = 0;
    if (v.is_boolean()) {
      value = v.get<bool>() ? f.shard_group_size : 0;
    } else if (v.is_number_integer()) {
      const std::int64_t k = r.integer("reshard_after_forward");
      if (f.version != 2) r.fail("reshard_after_forward", "an integer reshard size is FSDP2 only (fsdp.version 2)");
      if (k < 1 || k > f.shard_group_size || f.shard_group_size % k != 0)
        r.fail("reshard_after_forward", "expected true, false, or an integer that divides the shard group size " +
                                            std::to_string(f.shard_group_size) + "; got " + describe_json(v));
      value = k == 1 ? 0 : static_cast<int>(k);
    } else {
      r.fail("reshard_after_forward", "expected true, false or an integer, got " + describe_json(v));
    }
    if (params_sharded && keeps_params && value != 0)
      r.fail("reshard_after_forward", strategy_name(f.strategy) + " keeps parameters unsharded after forward; "
                                      "use FULL_SHARD or HYBRID_SHARD to reshard");
    // FULL_SHARD with reshard_after_forward=false is FSDP2's way to write ZeRO-2: allowed.
    if (params_sharded) f.reshard_after_forward = value;
  }
  f.forward_prefetch = r.boolean_or("forward_prefetch", false);
  if (r.has("backward_prefetch")) {
    const nlohmann::json& v = r.raw("backward_prefetch");
    if (v.is_boolean()) {
      f.backward_prefetch = v.get<bool>() ? BackwardPrefetch::pre : BackwardPrefetch::none;
    } else {
      std::string p = r.choice("backward_prefetch", {"BACKWARD_PRE", "BACKWARD_POST", "NONE", "none"});
      f.backward_prefetch = p == "BACKWARD_PRE" ? BackwardPrefetch::pre
                          : p == "BACKWARD_POST" ? BackwardPrefetch::post
                                                 : BackwardPrefetch::none;
    }
  }
  f.limit_all_gathers = r.boolean_or("limit_all_gathers", true);
  f.prefetch_depth = r.int_in_or("prefetch_depth", 1, kMaxPrefetchDepth, 1);
  // FSDP1 has no prefetch lists: its limit_all_gathers hard-codes at most two all-gathers in
  // flight (torch/distributed/fsdp/_limiter_utils.py: _FreeEventQueue.__init__ sets
  // _max_num_inflight_all_gathers = 2, "empirically chosen", not an argument), and its
  // forward_prefetch / backward_prefetch reach one handle.
  if (f.prefetch_depth != 1 && f.version != 2)
    r.fail("prefetch_depth", "is FSDP2's explicit prefetch (set_modules_to_forward_prefetch / "
                             "set_modules_to_backward_prefetch); FSDP1 (version 1) prefetches one unit and "
                             "limit_all_gathers caps it at two in flight: use version 2 or drop prefetch_depth");
  f.cpu_offload = r.boolean_or("cpu_offload", false);
  // FSDP's CPUOffload is planned for the sharded strategies: the offloaded state is the rank's
  // shard, copied in and out with the all-gathers and reduce-scatters. Replicated parameters
  // (NO_SHARD) would be copied to the GPU whole for every forward and backward, which the plan
  // does not route (it held a 1/world slice on the host and none on the GPU); ZeRO-1 offloads
  // through DeepSpeed's offload_optimizer.
  if (f.cpu_offload && f.strategy == Strategy::NO_SHARD)
    r.fail("cpu_offload", "is planned for the sharded strategies (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD); NO_SHARD's "
                          "CPU offload (the whole model copied to the GPU in every forward and backward) is not modelled");
  if (f.cpu_offload && f.strategy == Strategy::ZERO1)
    r.fail("cpu_offload", "is FSDP's offload; ZeRO-1 offloads its optimizer through DeepSpeed's offload_optimizer");
  auto offload_device = [&](const char* key) {
    const std::string d = r.choice_or(key, {"none", "cpu", "nvme"}, "none");
    return d == "cpu" ? FsdpSpec::OffloadDevice::cpu : d == "nvme" ? FsdpSpec::OffloadDevice::nvme
                                                                   : FsdpSpec::OffloadDevice::none;
  };
  f.offload_optimizer = offload_device("offload_optimizer");
  f.offload_param = offload_device("offload_param");
  f.offload_pin_memory = r.boolean_or("offload_pin_memory", true);
  if (f.cpu_offload && (f.offload_optimizer != FsdpSpec::OffloadDevice::none ||
                        f.offload_param != FsdpSpec::OffloadDevice::none))
    r.fail("cpu_offload", "is FSDP's offload; offload_optimizer / offload_param are DeepSpeed's: choose one");
  if (f.offload_optimizer != FsdpSpec::OffloadDevice::none && !params_sharded && !keeps_params)
    r.fail("offload_optimizer", "is modelled for ZeRO-2 (SHARD_GRAD_OP) and ZeRO-3 (FULL_SHARD, HYBRID_SHARD), not " +
                                    strategy_name(f.strategy));
  if (f.offload_param != FsdpSpec::OffloadDevice::none && !params_sharded)
    r.fail("offload_param", "DeepSpeed offloads parameters only under ZeRO-3 (FULL_SHARD or HYBRID_SHARD), not " +
                                strategy_name(f.strategy));
  if (f.offload_param != FsdpSpec::OffloadDevice::none && (keeps_params || f.reshard_after_forward == 0))
    r.fail("offload_param", "needs the parameters resharded after forward (ZeRO-3)");
  // [Gradient sync by strategy] Replicated gradients (NO_SHARD, ZeRO-1) are reduced once per
  // step unless stated otherwise: DDP's accumulation idiom is no_sync() on all but the last
  // micro-step (torch/nn/parallel/distributed.py), and DeepSpeed ZeRO-1 reduces at the
  // accumulation boundary only (stage_1_and_2.py, is_gradient_accumulation_boundary). A stated
  // every_micro_step is DDP without no_sync: an all-reduce in every micro-step.
  const bool replicated_grads = f.strategy == Strategy::NO_SHARD || f.strategy == Strategy::ZERO1;
  const std::string sync = r.choice_or("grad_sync", {"every_micro_step", "last_micro_step"},
                                       replicated_grads ? "last_micro_step" : "every_micro_step");
  f.sync_grads_every_micro_step = sync == "every_micro_step";
  if (f.strategy == Strategy::ZERO1 && f.sync_grads_every_micro_step)
    r.fail("grad_sync", "ZeRO-1 reduces the gradients once per step, at the accumulation boundary (DeepSpeed "
                        "stage_1_and_2.py): every_micro_step does not apply; leave grad_sync out");
  if (r.has("all_gather_dtype")) {
    // Checked against training.matmul_dtype and fsdp.version by check_float8 below.
    const std::string dtype = r.string("all_gather_dtype");
    if (dtype == "fp8") f.float8_all_gather = true;
    else if (dtype != "param_dtype" && !models::parse_dtype(dtype))
      r.fail("all_gather_dtype", "expected \"param_dtype\", the param_dtype's name or fp8; got \"" + dtype + "\"");
    else if (dtype != "param_dtype") f.all_gather_dtype_named = *models::parse_dtype(dtype);
  } else {
    r.ignore("all_gather_dtype");
  }
  // Whether the degree divides the model's experts is checked by the planner, which has the model.
  f.expert_parallel = r.int_in_or("expert_parallel", 1, kMaxWorld, 1);
  if (std::string why = expert_parallel_error(f, gpus_per_node); !why.empty()) r.fail("expert_parallel", why);
  r.finish();
  return f;
}

// Float8 training needs fp8 tensor cores (the GPU catalog lists an fp8 peak: Hopper, Ada,
// Blackwell, CDNA3; not Ampere or Volta), and the float8 all-gather needs float8 linears and
// FSDP2 (torchao's WeightWithDynamicFloat8CastTensor hooks fully_shard's pre/post all-gather).
void check_float8(const Scenario& s) {
  if (s.training.float8_linears() && !s.cluster.gpu.peak_flops.count("fp8"))
    throw InputError(s.file, "training.matmul_dtype",
                     "fp8 needs a GPU with fp8 tensor cores; " + s.cluster.gpu.name + " (" + s.cluster.gpu.arch +
                         ") has none (its cluster.gpu catalog entry lists no fp8 peak_tflops)");
  if (s.fsdp.float8_all_gather && !s.training.float8_linears())
    throw InputError(s.file, "fsdp.all_gather_dtype",
                     "fp8 all-gathers the weights of float8 linears: it needs training.matmul_dtype fp8 (with a "
                     "16-bit param_dtype)");
  // Any other all-gather dtype is the param_dtype (MixedPrecision casts to it before gathering):
  // a dtype named here that is not it would be silently ignored.
  if (s.fsdp.all_gather_dtype_named && *s.fsdp.all_gather_dtype_named != s.training.param_dtype)
    throw InputError(s.file, "fsdp.all_gather_dtype",
                     fp8_or_param_dtype(s.training.param_dtype) + "; got " +
                         models::dtype_name(*s.fsdp.all_gather_dtype_named) +
                         ": parameters are all-gathered in training.param_dtype");
  if (s.fsdp.float8_all_gather && s.fsdp.version != 2)
    throw InputError(s.file, "fsdp.all_gather_dtype",
                     "fp8 all-gather is FSDP2's (torchao enable_fsdp_float8_all_gather hooks fully_shard): it needs "
                     "fsdp.version 2");
}

// [Autocast over fp32 parameters] is planned for FSDP's sharded strategies (planner/plan.cpp says
// how long each copy lives under FSDP1 and FSDP2). DDP's replicated parameters (NO_SHARD, ZERO1)
// and DeepSpeed's are not planned. Op-level SAC decides per op what to save, which the saved
// copies would need to follow: not planned either.
void check_autocast(const Scenario& s) {
  if (!s.training.autocast()) return;
  const std::string mode = "autocast over fp32 parameters (training.param_dtype fp32 with matmul_dtype " +
                           models::dtype_name(s.training.matmul_dtype) + ")";
  auto refuse = [&](const std::string& why) { throw InputError(s.file, "training.matmul_dtype", mode + " " + why); };
  if (s.deepspeed.stated) refuse("is planned for FSDP, not DeepSpeed ZeRO (the deepspeed object)");
  if (s.fsdp.strategy == Strategy::NO_SHARD || s.fsdp.strategy == Strategy::ZERO1)
    refuse("is planned for FSDP's sharded strategies, not " + strategy_name(s.fsdp.strategy) +
           " (planned as replicated parameters, whose copies are not)");
  if (s.training.checkpointing == Checkpointing::selective)
    refuse("is not planned with op-level selective checkpointing (training.activation_checkpointing)");
}

// `init`: "meta" | "cpu" | "cuda", or {"device": ..., "sync_module_states": bool}.
InitSpec parse_init(JsonReader& r) {
  InitSpec init;
  if (!r.has("init")) {
    r.ignore("init");
    return init;
  }
  init.stated = true;
  auto device_of = [](const std::string& d) {
    return d == "cpu" ? InitSpec::Device::cpu : d == "cuda" ? InitSpec::Device::cuda : InitSpec::Device::meta;
  };
  if (r.raw("init").is_string()) {
    init.device = device_of(r.choice("init", {"meta", "cpu", "cuda"}));
    return init;
  }
  JsonReader i = r.object("init");
  init.device = device_of(i.choice_or("device", {"meta", "cpu", "cuda"}, "meta"));
  init.sync_module_states = i.boolean_or("sync_module_states", false);
  i.finish();
  return init;
}

int stage_of(const Scenario& s);

// `checkpoint`: {"state_dict": "full" | "sharded", "rank0_only", "offload_to_cpu", "optimizer"}.
CheckpointSpec parse_checkpoint(JsonReader& r, const Scenario& s) {
  CheckpointSpec c;
  if (!r.has("checkpoint")) {
    r.ignore("checkpoint");
    return c;
  }
  JsonReader k = r.object("checkpoint");
  c.enabled = true;
  c.kind = k.choice_or("state_dict", {"full", "sharded"}, "sharded") == "full" ? CheckpointSpec::Kind::full
                                                                               : CheckpointSpec::Kind::sharded;
  c.rank0_only = k.boolean_or("rank0_only", true);
  c.offload_to_cpu = k.boolean_or("offload_to_cpu", true);
  c.optimizer = k.boolean_or("optimizer", true);
  if (c.kind == CheckpointSpec::Kind::sharded) {
    if (k.has("rank0_only")) k.fail("rank0_only", "applies to a full state dict (state_dict \"full\")");
    if (k.has("offload_to_cpu")) k.fail("offload_to_cpu", "applies to a full state dict (state_dict \"full\")");
  } else if (stage_of(s) > 0) {
    // DeepSpeed's save_checkpoint writes each rank's partitions (engine.py _save_zero_checkpoint);
    // it has no full optimizer state dict, and its consolidated 16-bit save (save_16bit_model with
    // stage3_gather_16bit_weights_on_model_save) is another mechanism, not modelled.
    k.fail("state_dict", "\"full\" is FSDP's FULL_STATE_DICT; DeepSpeed's save_checkpoint writes each rank's ZeRO "
                         "partitions (\"sharded\"), and its consolidated 16-bit save (save_16bit_model) is not modelled");
  } else if (s.fsdp.version == 2 && k.has("rank0_only") && !c.rank0_only) {
    // FSDP2's full state dict (torch/distributed/checkpoint/state_dict.py, StateDictOptions) has
    // no rank0_only: with cpu_offload it is kept on rank 0 (_maybe_full_or_cpu_state_dict:
    // ranks_only=(0,)), without on every rank's GPU.
    k.fail("rank0_only", "is FSDP1's FullStateDictConfig option; FSDP2's get_state_dict keeps a full state dict on rank 0 "
                         "when it offloads to the CPU (StateDictOptions(cpu_offload=True)) and on every rank's GPU when "
                         "it does not (offload_to_cpu false)");
  }
  k.finish();
  return c;
}

// ---- buffer sizes: `deepspeed` and `ddp` (planner/scenario.h DeepSpeedSpec, DdpSpec) ------------

// The ZeRO stage a DeepSpeed scenario runs: its layout (master_weights optimizer_state) under
// ZERO1 (1), SHARD_GRAD_OP (2) or FULL_SHARD (3); 0 for anything else (FSDP, DDP, hybrids).
int stage_of(const Scenario& s) {
  if (s.training.master_weights != MasterWeights::optimizer_state) return 0;
  switch (s.fsdp.strategy) {
    case Strategy::ZERO1: return 1;
    case Strategy::SHARD_GRAD_OP: return 2;
    case Strategy::FULL_SHARD: return 3;
    default: return 0;
  }
}

// Element counts up to 2^50: past any model, and bytes x 16 stay far inside int64.
constexpr std::int64_t kMaxBufferElements = std::int64_t{1} << 50;

std::int64_t buffer_elements(JsonReader& r, const char* key, std::int64_t fallback, std::int64_t lo) {
  if (!r.has(key)) {
    r.ignore(key);
    return fallback;
  }
  const std::int64_t v = r.integer(key);
  if (v < lo || v > kMaxBufferElements)
    r.fail(key, std::string("expected a whole number of elements in [") + std::to_string(lo) + ", 2^50], got " +
                    std::to_string(v));
  return v;
}

DeepSpeedSpec parse_deepspeed(JsonReader& r, const Scenario& s) {
  DeepSpeedSpec d;
  if (!r.has("deepspeed")) {
    r.ignore("deepspeed");
    return d;
  }
  JsonReader z = r.object("deepspeed");
  const int stage = stage_of(s);
  if (stage == 0)
    r.fail("deepspeed", "is DeepSpeed ZeRO's configuration: it needs training.master_weights \"optimizer_state\" (DeepSpeed's "
               "layout) and fsdp.strategy ZERO1, SHARD_GRAD_OP (ZeRO-2) or FULL_SHARD (ZeRO-3); this scenario is " +
               strategy_name(s.fsdp.strategy) +
               (s.training.master_weights == MasterWeights::optimizer_state ? "" : " with FSDP's layout"));
  if (stage >= 2 && (s.fsdp.offload_optimizer != FsdpSpec::OffloadDevice::none || s.fsdp.cpu_offload))
    r.fail("deepspeed", "ZeRO-" + std::to_string(stage) + "'s buckets are not modelled with offload_optimizer or "
                        "fsdp.cpu_offload yet (DeepSpeed "
                        "then copies each bucket's reduced partition into the host's fp32 gradients, which the bucket "
                        "plan does not route); leave the object out: the reduction is then planned per unit");
  if (stage == 3 && (s.fsdp.offload_param != FsdpSpec::OffloadDevice::none || s.fsdp.cpu_offload))
    r.fail("deepspeed", "ZeRO-3's fetch limits are not modelled with offload_param or fsdp.cpu_offload yet (each fetch "
                        "would first copy the partition from the host); leave the object out: ZeRO-3 is then planned "
                        "as FSDP2");
  if (stage >= 2 && !s.fsdp.sync_grads_every_micro_step)
    r.fail("deepspeed", "DeepSpeed ZeRO-" + std::to_string(stage) + " reduces its buckets in every micro-step: "
                        "fsdp.grad_sync last_micro_step does not apply");
  // ZeRO-3 with the object is planned by DeepSpeed's own fetch and release rules (plan_zero3.cpp),
  // which have no counterpart to FSDP's resharding, float8 all-gather or expert parallelism.
  if (stage == 3 && (s.fsdp.expert_parallel > 1 || s.fsdp.float8_all_gather))
    r.fail("deepspeed", "ZeRO-3's buffers are not modelled with fsdp.expert_parallel or fsdp.all_gather_dtype fp8; "
                        "leave the object out");
  // With the object ZeRO-3's gathers follow DeepSpeed's coordinator, not FSDP's resharding and
  // prefetch: FSDP's gathering fields would be read and ignored, so only their defaults pass.
  if (stage == 3 && (s.fsdp.reshard_after_forward != s.fsdp.shard_group_size || s.fsdp.forward_prefetch ||
                     s.fsdp.backward_prefetch != BackwardPrefetch::pre || s.fsdp.prefetch_depth != 1))
    r.fail("deepspeed", "under ZeRO-3 the object plans DeepSpeed's own gathering (stage3_prefetch_bucket_size, "
                        "stage3_max_live_parameters, stage3_max_reuse_distance): leave fsdp.reshard_after_forward, "
                        "forward_prefetch, backward_prefetch and prefetch_depth at their defaults");
  d.stated = true;
  if (stage == 3) {
    // ZeRO-3's knobs (stage3.py, DeepSpeedZeroOptimizer_Stage3; partitioned_param_coordinator.py).
    // 0 is meaningful for each: no prefetch, no live parameter beyond the running module's, release
    // every parameter after its use, no persistent parameter.
    d.stage3_prefetch_bucket_size = buffer_elements(z, "stage3_prefetch_bucket_size", d.stage3_prefetch_bucket_size, 0);
    d.stage3_max_live_parameters = buffer_elements(z, "stage3_max_live_parameters", d.stage3_max_live_parameters, 0);
    d.stage3_max_reuse_distance = buffer_elements(z, "stage3_max_reuse_distance", d.stage3_max_reuse_distance, 0);
    d.stage3_param_persistence_threshold =
        buffer_elements(z, "stage3_param_persistence_threshold", d.stage3_param_persistence_threshold, 0);
    // 0 is DeepSpeed's too (ge=0): every parameter closes its own sub-group.
    d.sub_group_size = buffer_elements(z, "sub_group_size", d.sub_group_size, 0);
  } else {
    // ZeRO-3's fields are DeepSpeed no-ops under stages 1 and 2: refused, so a sweep over them cannot
    // rank identical plans.
    for (const char* k : {"stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                          "stage3_param_persistence_threshold"})
      if (z.has(k)) z.fail(k, "is ZeRO-3's (stage3.py); this scenario is ZeRO-" + std::to_string(stage));
    if (z.has("sub_group_size"))
      z.fail("sub_group_size", "is ZeRO-3's optimizer sub-group (stage3.py _create_fp16_sub_groups; engine.py gives it "
                               "to the stage-3 optimizer only): ZeRO-" + std::to_string(stage) +
                                   " steps its partition whole, so it would change nothing; leave it out");
  }
  d.reduce_bucket_size = buffer_elements(z, "reduce_bucket_size", d.reduce_bucket_size, 1);
  if (z.has("allgather_bucket_size"))
    z.fail("allgather_bucket_size", stage == 3 ? std::string("is ZeRO-1/2's (stage_1_and_2.py); ZeRO-3 gathers by "
                                                             "stage3_prefetch_bucket_size")
                                               : std::string("has no effect with PyTorch's all_gather_into_tensor (torch "
                                                             ">= 1.13): DeepSpeed then gathers each parameter group in "
                                                             "one call and ignores it (deepspeed/runtime/utils.py, "
                                                             "all_gather_dp_groups); leave it out"));
  d.overlap_comm = z.boolean_or("overlap_comm", stage == 3);
  d.contiguous_gradients = z.boolean_or("contiguous_gradients", true);
  z.finish();
  return d;
}

DdpSpec parse_ddp(JsonReader& r, const Scenario& s) {
  DdpSpec d;
  if (!r.has("ddp")) {
    r.ignore("ddp");
    return d;
  }
  JsonReader o = r.object("ddp");
  if (s.fsdp.strategy != Strategy::NO_SHARD)
    r.fail("ddp", "is DistributedDataParallel's configuration: it needs fsdp.strategy NO_SHARD; this scenario is " +
                   strategy_name(s.fsdp.strategy));
  d.stated = true;
  d.bucket_cap_mb = o.positive_number_or("bucket_cap_mb", d.bucket_cap_mb);
  // A cap past 2^40 MiB is past any model and would overflow the bytes.
  if (d.bucket_cap_mb > 1099511627776.0) o.fail("bucket_cap_mb", "expected at most 2^40 MiB");
  if (d.bucket_cap_bytes() < 1) o.fail("bucket_cap_mb", "expected at least one byte (1/1048576 MiB)");
  d.gradient_as_bucket_view = o.boolean_or("gradient_as_bucket_view", false);
  o.finish();
  return d;
}

std::map<std::string, std::string> parse_sources(JsonReader& r) {
  std::map<std::string, std::string> out;
  if (!r.has("sources")) {
    r.ignore("sources");
    return out;
  }
  JsonReader s = r.object("sources");
  for (const auto& [key, value] : r.raw("sources").items()) out[key] = s.string(key);
  return out;
}

}  // namespace

bool replaces_reference(const std::string& assignment) {
  for (const char* key : {"model=", "cluster=", "calibration="})
    if (assignment.rfind(key, 0) == 0) return true;
  return false;
}

AttentionImport attention_import_for(const std::string& training_attention) {
  if (training_attention == "eager") return AttentionImport::eager;
  if (training_attention == "auto") return AttentionImport::as_configured;
  return AttentionImport::fused;  // a kernel's name (an unknown one is refused by the cost model)
}

ModelImport model_import_for(const TrainingSpec& training) {
  return {attention_import_for(training.attention), training.liger};
}

Reference load_reference(const nlohmann::json& value, const std::string& scenario_file,
                         const std::string& key, const ModelImport& import) {
  if (value.is_object()) return {value, scenario_file};
  if (!value.is_string())
    throw InputError(scenario_file, key, "expected a file path or an inline object, got " + describe_json(value));
  std::string text = value.get<std::string>();
  const bool hf = key == "model" && text.rfind("hf:", 0) == 0;
  const std::string wanted = hf ? text.substr(3) : text;
  std::string path = resolve_path(wanted, directory_of(scenario_file));
  std::error_code ec;
  // A model's folder, as from_pretrained takes it: its config.json.
  if (hf && fs::is_directory(path, ec)) {
    path = (fs::path(path) / "config.json").string();
    if (!fs::is_regular_file(path, ec))
      throw InputError(scenario_file, key, "no config.json in the folder \"" + wanted + "\" (hf: takes a config file or "
                                           "the folder that holds its config.json)");
  }
  std::string hint;
  if (!fs::is_regular_file(path, ec) && !hf)
    if (const std::optional<std::string> entry = catalog_reference(key, wanted, &hint)) path = resolve_path(*entry, "");
  if (!fs::is_regular_file(path, ec))
    throw InputError(scenario_file, key, "no file \"" + wanted + "\" (looked beside the scenario, in the current "
                                         "directory and under " + catalog_root() + ")" + hint);
  if (hf) {
    const nlohmann::json config = load_json_file(path);
    models::HfImportOptions options = models::import_options_of(config, path);  // the catalog entry's
    if (import.attention != AttentionImport::as_configured) options.flash_attention = import.attention == AttentionImport::fused;
    if (import.liger) options.liger = *import.liger;
    return {models::import_hf_config(config, path, options), path, true};
  }
  return {load_json_file(path), path};
}


void apply_model_override(nlohmann::json& model, const std::string& assignment, const std::string& file,
                          const std::string& path_prefix) {
  const std::string path = assignment.substr(0, assignment.find('='));
  if ((path == "arch" || path.rfind("arch.", 0) == 0) && path != "arch.max_seq_len")
    throw InputError(file, join_json_path(path_prefix, path),
                     "describes the model's module tree (root) and changes nothing by itself: to plan another "
                     "shape, give a Hugging Face config.json with it (model=hf:config.json, or fsdpsim import-hf); "
                     "only arch.max_seq_len, the context sequences are checked against, can be set");
  apply_override(model, assignment, file, path_prefix);
}

void apply_override(nlohmann::json& document, const std::string& assignment, const std::string& file,
                    const std::string& path_prefix) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(file, path_prefix, "override \"" + assignment + "\" must look like key.path=value");
  std::string path = assignment.substr(0, eq);
  nlohmann::json value = parse_json_or_word(assignment.substr(eq + 1), file, join_json_path(path_prefix, path));
  nlohmann::json* node = &document;
  std::string walked = path_prefix;
  std::size_t pos = 0;
  while (true) {
    std::size_t dot = path.find('.', pos);
    std::string key = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (key.empty()) throw InputError(file, join_json_path(path_prefix, path), "override path has an empty component");
    walked = join_json_path(walked, key);
    if (!node->is_object()) throw InputError(file, walked, "cannot set a field inside a non-object value");
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    nlohmann::json& child = (*node)[key];
    if (child.is_null()) child = nlohmann::json::object();
    node = &child;
    pos = dot + 1;
  }
}

GpuSpec parse_gpu(const nlohmann::json& json, const std::string& name, const std::string& file,
                  const std::string& path) {
  JsonReader r(json, file, path);
  GpuSpec g;
  g.name = r.string_or("name", name);
  g.arch = r.choice("arch", {"ampere", "ada", "hopper", "blackwell", "cdna3"});
  g.memory_bytes = r.positive_number("memory_mib") * 1024.0 * 1024.0;
  // 1e300 MiB was accepted as a GPU of 1e306 bytes (the session-38 input audit).
  if (g.memory_bytes > kPebibyteBytes) r.fail("memory_mib", "expected at most 2^30 MiB (a pebibyte)");
  const std::int64_t sms = r.integer("sm_count");
  if (sms < 1 || sms > 100000) r.fail("sm_count", "expected the number of streaming multiprocessors (1..100000), got " + std::to_string(sms));
  g.sm_count = static_cast<int>(sms);
  JsonReader peak = r.object("peak_tflops");
  for (const auto& [dtype, value] : r.raw("peak_tflops").items()) {
    if (!models::parse_dtype(dtype)) peak.fail(dtype, "expected a dtype key (bf16, fp16, fp32, fp8)");
    g.peak_flops[models::dtype_name(*models::parse_dtype(dtype))] = peak.positive_number(dtype) * 1e12;
  }
  if (!g.peak_flops.count("bf16")) r.fail("peak_tflops", "needs at least a bf16 entry");
  // The GEMM model times tiles per SM (planner/gemm_model.h); an SM of more than 100 dense bf16
  // TFLOP/s (B200: 15.2; MI300X: 4.3 per CU) is a unit or SM-count mistake, which the model met as
  // a GEMM whose fixed costs exceed its time, an error naming no file (the session-38 input audit).
  const double per_sm_tflops = g.peak_flops.at("bf16") / 1e12 / g.sm_count;
  if (per_sm_tflops > 100)
    peak.fail("bf16", "expected at most 100 dense bf16 TFLOP/s per SM (with sm_count " + std::to_string(g.sm_count) +
                          "): check the units and the SM count");
  g.hbm_bandwidth_bytes_per_second = r.positive_number("hbm_bandwidth_tbps") * 1e12;
  r.positive_number_or("power_limit_watts", 1);  // documentation only, but a real figure
  if (r.has("nvlink")) {
    JsonReader n = r.object("nvlink");
    g.nvlink_generation = n.choice_or("generation", {"", "ampere", "hopper", "blackwell"}, "");
    g.nvlink_links = n.int_in_or("links", 0, 1000, 0);
    g.nvlink_bandwidth_gbps = n.number_or("bandwidth_gbps", 0);
    if (g.nvlink_links < 0 || g.nvlink_bandwidth_gbps < 0) n.fail("bandwidth_gbps", "expected non-negative figures");
    g.nvls = n.boolean_or("nvls", false);
    n.finish();
  }
  if (r.has("xgmi")) {
    JsonReader x = r.object("xgmi");
    const std::int64_t links = x.integer("links");
    if (links < 1 || links > 64) x.fail("links", "expected the xGMI links per GPU (1..64), got " + std::to_string(links));
    g.xgmi_links = static_cast<int>(links);
    g.xgmi_bandwidth_gbps = x.positive_number("bandwidth_gbps");
    x.finish();
    if (g.nvlink_links > 0 || g.nvlink_bandwidth_gbps > 0)
      r.fail("xgmi", "a GPU has NVLink or xGMI links, not both");
  }
  g.sources = parse_sources(r);
  r.finish();
  return g;
}

const nlohmann::json& cached_catalog_file(const std::string& relative, std::string& file) {
  static std::mutex mutex;
  static std::map<std::string, nlohmann::json> cache;  // by path: FSDPSIM_ROOT may change
  file = (fs::path(catalog_root()) / relative).string();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, load_json_file(file)).first;
  return it->second;
}

const nlohmann::json& gpu_catalog(std::string& file) {
  return cached_catalog_file("scenarios/hardware/gpus.json", file);
}

GpuSpec find_gpu(const std::string& name) {
  std::string file;
  const nlohmann::json& catalog = gpu_catalog(file);
  if (!catalog.contains(name)) {
    std::string known;
    for (const auto& [key, value] : catalog.items())
      if (key.rfind("_", 0) != 0) known += (known.empty() ? "" : ", ") + key;
    throw InputError(file, name, "no GPU of that name in the catalog; known: " + known);
  }
  return parse_gpu(catalog[name], name, file, name);
}

namespace {

// An xGMI node is a full mesh: every GPU has one link to each peer, so a node holds at most
// links + 1 GPUs, and the GPU must have xGMI links at all.
void check_xgmi_mesh(JsonReader& r, const ClusterSpec& c) {
  const std::string where = r.has("kind") ? "kind" : "gpu";
  if (c.gpu.xgmi_links <= 0)
    r.fail(where, "an xGMI node needs a GPU with xGMI links (gpu.xgmi.links), and " + c.gpu.name + " has none");
  if (c.gpus_per_node > c.gpu.xgmi_links + 1)
    r.fail(where, "an xGMI mesh of " + std::to_string(c.gpus_per_node) + " GPUs needs " +
                      std::to_string(c.gpus_per_node - 1) + " links per GPU, but " + c.gpu.name + " has " +
                      std::to_string(c.gpu.xgmi_links));
}

}  // namespace

ClusterSpec parse_cluster(const nlohmann::json& json, const std::string& file, const std::string& path) {
  JsonReader r(json, file, path);
  ClusterSpec c;
  c.name = r.string_or("name", "cluster");
  const nlohmann::json& gpu = r.raw("gpu");
  if (gpu.is_string()) {
    try {
      c.gpu = find_gpu(gpu.get<std::string>());
    } catch (const InputError& e) {
      r.fail("gpu", std::string(e.what()));
    }
  } else {
    c.gpu = parse_gpu(gpu, "custom", file, r.path_of("gpu"));
  }
  c.nodes = r.int_in_or("nodes", 1, kMaxWorld, 1);
  c.gpus_per_node = r.int_in_or("gpus_per_node", 1, kMaxGpusPerNode, 8);
  const std::int64_t gpus = checked_mul(c.nodes, c.gpus_per_node, "nodes x gpus_per_node");
  if (gpus > kMaxWorld)
    r.fail("nodes", "expected at most 2^20 GPUs in all, got nodes x gpus_per_node = " + std::to_string(c.nodes) +
                        " x " + std::to_string(c.gpus_per_node) + " = " + std::to_string(gpus));
  if (r.has("intra_node")) {
    JsonReader n = r.object("intra_node");
    const std::string kind =
        n.choice_or("kind", {"nvswitch", "pcie", "xgmi"}, c.gpu.xgmi_links > 0 ? "xgmi" : "nvswitch");
    c.intra_kind = kind == "pcie" ? IntraNodeKind::pcie : kind == "xgmi" ? IntraNodeKind::xgmi : IntraNodeKind::nvswitch;
    c.intra_bandwidth_gbps = n.positive_number("bandwidth_gbps");
    if (c.intra_kind == IntraNodeKind::xgmi) check_xgmi_mesh(n, c);
    if (c.intra_kind == IntraNodeKind::nvswitch && c.gpu.xgmi_links > 0)
      n.fail("kind", "the GPU's peers are reached over xGMI links, not an NVSwitch: expected \"xgmi\" (or \"pcie\")");
    // A GPU without NVLink (L40S, A10G, the PCIe parts without a bridge) has no NVSwitch port.
    if (c.intra_kind == IntraNodeKind::nvswitch && c.gpu.nvlink_links == 0 && c.gpu.nvlink_bandwidth_gbps == 0)
      n.fail("kind", "the GPU (" + c.gpu.name + ") lists no NVLink, so no NVSwitch port: expected \"pcie\"");
    // [PCIe across sockets] GPUs on PCIe under two CPU sockets reach each other over the CPUs'
    // link for half of the node: its bandwidth as NCCL rates it (src/graph/topo.h: SRP_QPI_BW 22
    // GB/s Sapphire Rapids, ERP_QPI_BW 40 Emerald Rapids, AMD_BW 16).
    c.sockets = n.int_in_or("sockets", 1, 8, 1);
    if (n.has("cpu_link_gbps")) c.cpu_link_gbps = n.positive_number("cpu_link_gbps");
    else n.ignore("cpu_link_gbps");
    if (c.sockets > 1 && c.intra_kind != IntraNodeKind::pcie)
      n.fail("sockets", "applies to GPUs on PCIe (kind \"pcie\"): NVLink and xGMI reach every peer without the CPUs");
    if (c.sockets > 1 && c.cpu_link_gbps <= 0)
      n.fail("cpu_link_gbps", "is required with sockets > 1: the CPUs' link as NCCL rates it (topo.h: 22 GB/s Sapphire "
                              "Rapids, 40 Emerald Rapids, 16 AMD)");
    if (c.sockets > 1 && c.gpus_per_node % c.sockets != 0)
      n.fail("sockets", "expected a count that divides gpus_per_node (" + std::to_string(c.gpus_per_node) + ")");
    if (c.cpu_link_gbps > 0 && c.sockets == 1) n.fail("cpu_link_gbps", "applies with sockets > 1");
    n.finish();
  } else if (c.gpu.xgmi_links > 0) {
    c.intra_kind = IntraNodeKind::xgmi;
    c.intra_bandwidth_gbps = c.gpu.xgmi_bandwidth_gbps;
    check_xgmi_mesh(r, c);
  } else {
    c.intra_bandwidth_gbps = c.gpu.nvlink_bandwidth_gbps;
  }
  if (r.has("inter_node")) {
    JsonReader n = r.object("inter_node");
    c.nic_bandwidth_gbps = n.positive_number("nic_gbps");
    c.nics_per_node = n.int_in_or("nics_per_node", 1, kMaxGpusPerNode, c.gpus_per_node);
    c.inter_latency_seconds = n.number_or("latency_us", 5) * 1e-6;
    if (c.inter_latency_seconds < 0) n.fail("latency_us", "expected a non-negative latency");
    c.inter_topology = n.choice_or("topology", {"rail_optimized", "fat_tree"}, "rail_optimized") == "fat_tree"
                           ? InterNodeTopology::fat_tree
                           : InterNodeTopology::rail_optimized;
    c.oversubscription = n.number_or("oversubscription", 1);
    if (c.oversubscription < 1) n.fail("oversubscription", "expected 1 (non-blocking) or more");
    n.finish();
  } else if (c.nodes > 1) {
    r.fail("inter_node", "a cluster of more than one node needs inter_node links: state them in the cluster file, or "
                         "on the command line (--set cluster.inter_node.nic_gbps=N: GB/s per NIC, one direction; 400 "
                         "Gb/s = 50, 100 GbE = 12.5; and cluster.inter_node.nics_per_node=M)");
  }
  c.host_memory_bytes = r.number_or("host_memory_gb", 0) * 1e9;
  if (c.host_memory_bytes < 0) r.fail("host_memory_gb", "expected a non-negative size in GB");
  if (r.has("storage")) {
    JsonReader st = r.object("storage");
    c.storage_write_gbps = st.positive_number("write_gbps");
    st.finish();
  } else {
    r.ignore("storage");
  }
  if (r.has("nvme")) {
    JsonReader nv = r.object("nvme");
    c.nvme_read_gbps = nv.positive_number("read_gbps");
    c.nvme_write_gbps = nv.positive_number("write_gbps");
    nv.finish();
  } else {
    r.ignore("nvme");
  }
  if (c.intra_bandwidth_gbps <= 0 && c.gpus_per_node > 1)
    r.fail("intra_node", "GPUs in a node need a link: give intra_node.bandwidth_gbps");
  c.sources = parse_sources(r);
  r.finish();
  return c;
}

namespace {

// training.attention and training.liger as the scenario will have them once its overrides are
// applied (they come after the references are loaded): what an hf: model must be imported for.
// A value of the wrong type is left to the training section's reader, which names it.
ModelImport model_import_of(const nlohmann::json& json, const std::vector<std::string>& overrides) {
  std::string attention = "auto";
  std::optional<bool> liger;
  if (const auto t = json.find("training"); t != json.end() && t->is_object()) {
    if (const auto a = t->find("attention"); a != t->end() && a->is_string()) attention = a->get<std::string>();
    if (const auto l = t->find("liger"); l != t->end() && l->is_boolean()) liger = l->get<bool>();
  }
  constexpr std::string_view kAttention = "training.attention=", kLiger = "training.liger=";
  for (const std::string& o : overrides) {
    if (o.rfind(kLiger, 0) == 0) {
      const std::string value = o.substr(kLiger.size());
      if (value == "true" || value == "false") liger = value == "true";
    }
    if (o.rfind(kAttention, 0) != 0) continue;
    attention = o.substr(kAttention.size());
    if (attention.size() >= 2 && attention.front() == '"' && attention.back() == '"')
      attention = attention.substr(1, attention.size() - 2);
  }
  return {attention_import_for(attention), liger};
}

}  // namespace

Scenario parse_scenario(const nlohmann::json& json_in, const std::string& file,
                        const std::vector<std::string>& overrides, ScenarioDocuments* documents) {
  nlohmann::json json = json_in;
  if (!json.is_object()) throw InputError(file, "", "expected a scenario JSON object");
  // Overrides that replace a whole reference (--set model=models/gpt2.json) come first, then
  // the references are loaded, so that the other overrides can reach inside them.
  for (const std::string& o : overrides)
    if (replaces_reference(o)) apply_override(json, o, file);
  if (!json.contains("model")) throw InputError(file, "model", "is required: a catalog path, an inline object or hf:config.json");
  if (!json.contains("cluster")) throw InputError(file, "cluster", "is required: a catalog path or an inline object");
  Reference model_ref = load_reference(json["model"], file, "model", model_import_of(json, overrides));
  Reference cluster_ref = load_reference(json["cluster"], file, "cluster");
  nlohmann::json calibration;
  std::string calibration_file;
  if (json.contains("calibration") && !json["calibration"].is_null()) {
    Reference ref = load_reference(json["calibration"], file, "calibration");
    calibration = ref.json;
    calibration_file = ref.file;
  }
  // [Overrides in errors] An override into a referenced document is applied there, so an error
  // in it names that document's file and the path inside it. The error also names the overrides
  // that went into the document ("(with --set cluster.nodes=0)"), and an override that cannot be
  // applied names itself ("(in --set ...)"): the value came from the command line, not the file.
  std::string cluster_overrides, model_overrides;
  for (const std::string& o : overrides) {
    auto starts = [&](const char* prefix) { return o.rfind(prefix, 0) == 0; };
    if (replaces_reference(o)) continue;
    try {
      if (starts("cluster.")) {
        apply_override(cluster_ref.json, o.substr(8), cluster_ref.file, cluster_ref.file == file ? "cluster" : "");
        cluster_overrides += (cluster_overrides.empty() ? "" : " ") + std::string("--set ") + o;
      } else if (starts("model.")) {
        apply_model_override(model_ref.json, o.substr(6), model_ref.file, model_ref.file == file ? "model" : "");
        model_overrides += (model_overrides.empty() ? "" : " ") + std::string("--set ") + o;
      } else if (starts("calibration.")) {
        // Into the scenario's calibration (a file's or inline), or a new one over the GPU's defaults.
        if (calibration.is_null()) calibration = nlohmann::json::object();
        apply_override(calibration, o.substr(12), calibration_file.empty() ? file : calibration_file,
                       calibration_file.empty() || calibration_file == file ? "calibration" : "");
      } else {
        apply_override(json, o, file);
      }
    } catch (const InputError& e) {
      throw InputError::with_note(e, " (in --set " + o + ")");
    }
  }
  auto noted = [](const std::string& applied) { return applied.empty() ? "" : " (with " + applied + ")"; };

  JsonReader r(json, file);
  Scenario s;
  s.file = file;
  s.name = r.string_or("name", fs::path(file).stem().string());
  r.ignore("model");
  r.ignore("cluster");
  r.ignore("calibration");
  r.ignore("description");
  try {
    s.model = models::parse_model(model_ref.json, model_ref.file);
  } catch (const InputError& e) {
    if (model_overrides.empty()) throw;
    throw InputError::with_note(e, noted(model_overrides));
  }
  try {
    s.cluster = parse_cluster(cluster_ref.json, cluster_ref.file, cluster_ref.file == file ? "cluster" : "");
  } catch (const InputError& e) {
    if (cluster_overrides.empty()) throw;
    throw InputError::with_note(e, noted(cluster_overrides));
  }
  const int world = s.cluster.world_size();
  nlohmann::json empty = nlohmann::json::object();
  s.training = parse_training(r.has("training") ? r.object("training") : JsonReader(empty, file, "training"), world);
  s.fsdp = parse_fsdp(r.has("fsdp") ? r.object("fsdp") : JsonReader(empty, file, "fsdp"), world,
                      s.cluster.gpus_per_node);
  clamp_fsdp1_at_one_rank(s, file);
  s.calibration = calibration;
  s.calibration_file = calibration_file;
  if (r.has("published")) {
    s.published = r.raw("published");
    if (!s.published.is_object()) r.fail("published", "expected an object of published figures");
  } else {
    r.ignore("published");
  }
  if (r.has("simulation")) s.simulation = r.raw("simulation");
  else r.ignore("simulation");
  const bool deepspeed_offload = s.fsdp.offload_optimizer != FsdpSpec::OffloadDevice::none ||
                                 s.fsdp.offload_param != FsdpSpec::OffloadDevice::none;
  if (deepspeed_offload && s.training.master_weights != MasterWeights::optimizer_state)
    throw InputError(file, s.fsdp.offload_optimizer != FsdpSpec::OffloadDevice::none ? "fsdp.offload_optimizer"
                                                                                    : "fsdp.offload_param",
                     "is DeepSpeed's offload, for its layout: set training.master_weights to \"optimizer_state\" "
                     "(FSDP's offload is fsdp.cpu_offload)");
  if (s.fsdp.cpu_offload && s.training.master_weights == MasterWeights::optimizer_state)
    throw InputError(file, "fsdp.cpu_offload",
                     "is FSDP's offload; DeepSpeed's layout (training.master_weights \"optimizer_state\") offloads "
                     "through fsdp.offload_optimizer (ZeRO-Offload) and fsdp.offload_param (ZeRO-Infinity)");
  // FSDP2 has no backward_prefetch: FSDPState._pre_backward prefetches the next group by default
  // whenever set_modules_to_backward_prefetch gave it no list, an empty list included
  // (default_prefetch = len(_states_to_backward_prefetch) == 0, torch/distributed/fsdp/
  // _fully_shard/_fsdp_state.py): NONE describes a run fully_shard cannot make (the session-37
  // FSDP2 audit; it was planned without the prefetch, 3% slower). BACKWARD_POST is FSDP1's.
  if (s.fsdp.version == 2 && s.training.master_weights != MasterWeights::optimizer_state &&
      s.fsdp.backward_prefetch == BackwardPrefetch::none)
    throw InputError(file, "fsdp.backward_prefetch",
                     "NONE is FSDP1's (version 1): FSDP2's fully_shard always prefetches the next unit in backward "
                     "(an empty set_modules_to_backward_prefetch list still does); use BACKWARD_PRE, or version 1");
  // [torchtitan's wrap] (planner/units.h) is fully_shard's: a unit of its own kept unsharded after
  // forward has no FSDP1 or DeepSpeed counterpart.
  if (s.fsdp.wrap.policy == WrapPolicy::torchtitan &&
      (s.fsdp.version != 2 || s.training.master_weights == MasterWeights::optimizer_state))
    throw InputError(file, "fsdp.wrap.policy",
                     "\"torchtitan\" is torchtitan's FSDP2 layout (fully_shard on the embeddings, each block and the "
                     "output layer, which stays unsharded after forward): it needs fsdp.version 2 and FSDP's layout");
  // FSDP1's CPUOffload accumulates only under no_sync(): FullyShardedDataParallel's docstring
  // (torch/distributed/fsdp/fully_sharded_data_parallel.py), "FSDP does not support gradient
  // accumulation outside no_sync() when using CPU offloading. Trying to do so yields incorrect
  // results since FSDP will use the newly-reduced gradient instead of accumulating with any
  // existing gradient" (the session-35 offload audit found it planned silently).
  if (s.fsdp.version == 1 && s.fsdp.cpu_offload && s.training.grad_accum > 1 && s.fsdp.sync_grads_every_micro_step)
    throw InputError(file, "fsdp.grad_sync",
                     "FSDP1 with cpu_offload accumulates gradients only under no_sync(): with grad_sync "
                     "every_micro_step (FSDP's default) over " + std::to_string(s.training.grad_accum) +
                         " micro-steps it would keep the last micro-step's gradient instead of the sum (PyTorch's "
                         "FullyShardedDataParallel docstring); set fsdp.grad_sync to \"last_micro_step\"");
  if (s.fsdp.offload_param != FsdpSpec::OffloadDevice::none && s.fsdp.offload_optimizer == FsdpSpec::OffloadDevice::none)
    throw InputError(file, "fsdp.offload_param",
                     "DeepSpeed's parameter offload needs offload_optimizer too (\"cpu\" or \"nvme\"): the "
                     "updated partitions are written on the host");
  s.init = parse_init(r);
  // sync_module_states is FSDP1's constructor argument (rank 0 builds the model, the others on
  // meta, then it is broadcast): FSDP2's fully_shard and DeepSpeed have none, so it would only
  // lower the planned host memory (8x on 8-GPU nodes) for a run that cannot ask for it.
  if (s.init.sync_module_states && (s.fsdp.version != 1 || s.training.master_weights == MasterWeights::optimizer_state))
    throw InputError(file, "init.sync_module_states",
                     "is FSDP1's argument (FullyShardedDataParallel(sync_module_states=True)); FSDP2's fully_shard and "
                     "DeepSpeed have none: init \"meta\" builds no whole model on the host");
  // FSDP2 with expert parallelism built on the CPU: distribute_tensor places each rank's experts on
  // the GPU whole before fully_shard shards them, which the init figures do not hold; torchtitan
  // builds on meta.
  if (s.init.device == InitSpec::Device::cpu && s.fsdp.version == 2 && s.fsdp.expert_parallel > 1)
    throw InputError(file, "init", "\"cpu\" with fsdp.expert_parallel is not modelled (each rank's experts reach the GPU "
                                   "whole before fully_shard); use \"meta\", as torchtitan does");
  s.checkpoint = parse_checkpoint(r, s);
  if (r.has("allocator")) {
    JsonReader a = r.object("allocator");
    s.allocator = parse_allocator_settings(a);
  } else {
    r.ignore("allocator");
  }
  s.deepspeed = parse_deepspeed(r, s);
  s.ddp = parse_ddp(r, s);
  if (r.has("nccl")) {
    JsonReader n = r.object("nccl");
    s.nccl = parse_nccl_buffer_settings(n);
  } else {
    r.ignore("nccl");
  }
  r.finish();
  check_float8(s);
  check_autocast(s);
  if (documents) {
    documents->document = std::move(json);
    documents->model = std::move(model_ref);
    documents->cluster = std::move(cluster_ref);
    documents->calibration = std::move(calibration);
    documents->calibration_file = std::move(calibration_file);
  }
  return s;
}

int deepspeed_zero_stage(const Scenario& s) { return stage_of(s); }

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_scenario(load_json_file(path), path, overrides);
}

}  // namespace fsdpsim::planner
