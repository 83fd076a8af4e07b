// [Autocast over fp32 parameters] (planner/scenario.h TrainingSpec::autocast, planner/plan.cpp):
// FSDP1 with training.param_dtype fp32 and matmul_dtype bf16, as Lightning's FSDPStrategy runs
// "bf16-mixed" (MixedPrecision(param_dtype=float32, reduce_dtype=bfloat16) under torch.autocast),
// and FSDP2's cached copies under checkpointing.
// Every figure is worked out by hand for Llama-3.1-8B (models/llama3.1-8b.json: h 4096, q/o
// 4096x4096, k/v 1024x4096, gate/up 14336x4096, down 4096x14336, vocab 128256) on a DGX H100.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "input_error_of.h"
#include "planner/cost_model.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

using fsdpsim::testing::input_error_of;

// FSDP1 FULL_SHARD on 8 H100s, micro-batch 1 x 4096 tokens; `autocast`: fp32 parameters under
// bf16 autocast, else bf16 parameters (FSDP's MixedPrecision), bf16 reductions either way.
nlohmann::json llama8b(bool autocast, const std::string& checkpointing = "none", int fsdp_version = 1) {
  nlohmann::json j = {{"model", "models/llama3.1-8b.json"},
                      {"cluster", "scenarios/clusters/dgx-h100.json"},
                      {"training",
                       {{"micro_batch", 1},
                        {"seq_len", 4096},
                        {"global_batch", 8},
                        {"param_dtype", autocast ? "fp32" : "bf16"},
                        {"reduce_dtype", "bf16"},
                        {"activation_checkpointing", checkpointing}}},
                      {"fsdp", {{"version", fsdp_version}}}};
  if (autocast) j["training"]["matmul_dtype"] = "bf16";
  return j;
}

int op_index(const Schedule& s, const std::string& name) {
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].name == name) return static_cast<int>(i);
  ADD_FAILURE() << "no op " << name;
  return 0;
}

const KernelSet& set_of(const Schedule& s, const std::string& op) {
  return s.kernel_sets.at(s.ops.at(op_index(s, op)).kernel_set);
}

double sum(const std::vector<double>& v) {
  double total = 0;
  for (double x : v) total += x;
  return total;
}

// The allocation labelled `label` (the first micro-step's) and the ops that make and free it.
struct Lifetime {
  std::int64_t bytes = -1;
  std::string made_by, freed_by;
};
Lifetime lifetime_of(const Schedule& s, const std::string& label) {
  Lifetime l;
  int id = -1;
  for (const Allocation& a : s.allocations)
    if (a.label == label) {
      id = a.id;
      l.bytes = a.bytes;
      break;
    }
  if (id < 0) return l;
  for (const Op& op : s.ops) {
    if (l.made_by.empty() && std::count(op.allocs.begin(), op.allocs.end(), id)) l.made_by = op.name;
    if (l.freed_by.empty() && std::count(op.frees.begin(), op.frees.end(), id)) l.freed_by = op.name;
  }
  return l;
}

// A block's seven linear weights: q, o 4096x4096; k, v 1024x4096; gate, up, down 14336x4096:
// 2 x 16,777,216 + 2 x 4,194,304 + 3 x 58,720,256 = 218,103,808 elements; the largest 58,720,256.
constexpr double kBlockWeights = 218103808, kLargestWeight = 58720256;

// Each linear's weight is cast at every use: forward reads it in fp32 and writes bf16 (6 bytes
// an element), backward casts its bf16 gradient to fp32 (the same 6), one kernel each. The
// GEMMs are the bf16 plan's, none fp8.
TEST(Autocast, EachLinearWeightIsCastInForwardAndItsGradientInBackward) {
  const Plan a = plan_step(parse_scenario(llama8b(true), "test.json"));
  const Plan b = plan_step(parse_scenario(llama8b(false), "test.json"));
  for (const char* op : {"fwd model.layers.3", "bwd model.layers.3"}) {
    const KernelSet& k = set_of(a.schedule, op);
    EXPECT_EQ(k.cast_kernel_bytes.size(), 7u) << op;
    EXPECT_DOUBLE_EQ(sum(k.cast_kernel_bytes), 6 * kBlockWeights) << op;  // 1,308,622,848
    const KernelSet& pure = set_of(b.schedule, op);
    EXPECT_TRUE(pure.cast_kernel_bytes.empty()) << op;
    ASSERT_EQ(k.gemms.size(), pure.gemms.size()) << op;
    for (std::size_t i = 0; i < k.gemms.size(); ++i) {
      EXPECT_EQ(k.gemms[i].m, pure.gemms[i].m);
      EXPECT_EQ(k.gemms[i].n, pure.gemms[i].n);
      EXPECT_EQ(k.gemms[i].k, pure.gemms[i].k);
      EXPECT_FALSE(k.gemms[i].fp8);
    }
  }
  // The output layer's projection casts its 128256 x 4096 weight too.
  EXPECT_DOUBLE_EQ(sum(set_of(a.schedule, "fwd lm_head").cast_kernel_bytes), 6.0 * 128256 * 4096);
}

// The GEMMs run at the bf16 peak (not fp32's): a block's forward under autocast takes exactly
// the bf16 plan's time plus its seven casts, each its bytes at the streaming bandwidth (all
// far above the kernel floor: the smallest, k_proj's, is 25 MB).
TEST(Autocast, ABlockTakesTheBf16TimePlusItsWeightCasts) {
  const Scenario sa = parse_scenario(llama8b(true), "test.json"), sb = parse_scenario(llama8b(false), "test.json");
  const CostModel ca(sa), cb(sb);
  EXPECT_DOUBLE_EQ(ca.peak_flops(), cb.peak_flops());
  EXPECT_DOUBLE_EQ(ca.peak_flops(), 989.4e12);  // the catalog's H100 SXM dense bf16
  const Plan a = plan_step(sa), b = plan_step(sb);
  const double stream = ca.cluster().gpu.hbm_bandwidth_bytes_per_second * ca.calibration().hbm_efficiency;
  for (const char* name : {"fwd model.layers.3", "bwd model.layers.3"}) {
    const Op& oa = a.schedule.ops[op_index(a.schedule, name)];
    const Op& ob = b.schedule.ops[op_index(b.schedule, name)];
    EXPECT_DOUBLE_EQ(oa.hbm_bytes, ob.hbm_bytes) << name;  // bf16 activations either way
    const double casts = 6 * kBlockWeights / stream;
    EXPECT_NEAR(ca.duration_seconds(oa, a.schedule) - cb.duration_seconds(ob, b.schedule), casts, 1e-9 * casts) << name;
  }
}

// FSDP1 gathers the fp32 flat parameter (no low-precision copy): 4 bytes an element, twice the
// bf16 plan's. The block's flat parameter is its 218,103,808 weights and two 4096-element norms,
// 218,112,000 elements, a multiple of the 8 ranks.
TEST(Autocast, FsdpGathersTheFp32Parameters) {
  const Plan a = plan_step(parse_scenario(llama8b(true), "test.json"));
  const Plan b = plan_step(parse_scenario(llama8b(false), "test.json"));
  const std::string gather = "all-gather model.layers.3";
  EXPECT_DOUBLE_EQ(a.schedule.ops[op_index(a.schedule, gather)].comm_bytes, 4.0 * 218112000);
  EXPECT_DOUBLE_EQ(b.schedule.ops[op_index(b.schedule, gather)].comm_bytes, 2.0 * 218112000);
}

// Without checkpointing each GEMM saves its bf16 weight copy for backward: 2 bytes per weight
// element, made by the block's forward and freed by its backward.
TEST(Autocast, WeightCopiesAreSavedFromForwardToBackward) {
  const Plan a = plan_step(parse_scenario(llama8b(true), "test.json"));
  const Lifetime l = lifetime_of(a.schedule, "autocast weight copies of model.layers.3");
  EXPECT_EQ(l.bytes, static_cast<std::int64_t>(2 * kBlockWeights));  // 436,207,616
  EXPECT_EQ(l.made_by, "fwd model.layers.3");
  EXPECT_EQ(l.freed_by, "bwd model.layers.3");
  // The bf16 plan has none.
  const Plan b = plan_step(parse_scenario(llama8b(false), "test.json"));
  EXPECT_EQ(lifetime_of(b.schedule, "autocast weight copies of model.layers.3").bytes, -1);
}

// Full checkpointing: the forward runs under no_grad, so each copy dies after its GEMM (the
// largest, gate's or up's 58,720,256 x 2 bytes, for a moment), and the recompute makes them all
// again until the block's backward. The block's saved input is the fp32 residual stream:
// 4 bytes x 4096 tokens x 4096 = 67,108,864, twice the bf16 plan's.
TEST(Autocast, UnderFullCheckpointingTheRecomputeMakesTheCopiesAndTheInputIsFp32) {
  const Plan a = plan_step(parse_scenario(llama8b(true, "full"), "test.json"));
  const Lifetime moment = lifetime_of(a.schedule, "autocast weight copy in model.layers.3");
  EXPECT_EQ(moment.bytes, static_cast<std::int64_t>(2 * kLargestWeight));
  EXPECT_EQ(moment.made_by, "fwd model.layers.3");
  EXPECT_EQ(moment.freed_by, "fwd model.layers.3");
  const Lifetime saved = lifetime_of(a.schedule, "autocast weight copies of model.layers.3");
  EXPECT_EQ(saved.bytes, static_cast<std::int64_t>(2 * kBlockWeights));
  EXPECT_EQ(saved.made_by, "recompute model.layers.3");
  EXPECT_EQ(saved.freed_by, "bwd model.layers.3");
  EXPECT_EQ(lifetime_of(a.schedule, "checkpointed input of model.layers.3").bytes, 4LL * 4096 * 4096);
  const Plan b = plan_step(parse_scenario(llama8b(false, "full"), "test.json"));
  EXPECT_EQ(lifetime_of(b.schedule, "checkpointed input of model.layers.3").bytes, 2LL * 4096 * 4096);
  // The recompute casts again.
  EXPECT_DOUBLE_EQ(sum(set_of(a.schedule, "recompute model.layers.3").cast_kernel_bytes), 6 * kBlockWeights);
}

// FSDP2's gathered parameters are leaf nn.Parameters, so autocast caches their casts until its
// region ends: under full checkpointing each block's copies (2 x 218,103,808 bytes) live from
// its forward to the end of the forward, then the recompute makes them again until the block's
// backward. Without checkpointing the copies are saved for backward, as under FSDP1.
TEST(Autocast, Fsdp2CachesTheCopiesUntilTheForwardEnds) {
  const Plan a = plan_step(parse_scenario(llama8b(true, "full", 2), "test.json"));
  const Lifetime cached = lifetime_of(a.schedule, "autocast cache: weight copies of model.layers.3");
  EXPECT_EQ(cached.bytes, static_cast<std::int64_t>(2 * kBlockWeights));
  EXPECT_EQ(cached.made_by, "fwd model.layers.3");
  const int freed = op_index(a.schedule, cached.freed_by);
  // Freed by the forward's last op, the output layer's (an op's frees come after its
  // allocations: the copies are there through it), before backward.
  EXPECT_EQ(cached.freed_by, "fwd lm_head");
  EXPECT_LT(freed, op_index(a.schedule, "bwd lm_head (loss)"));
  EXPECT_EQ(lifetime_of(a.schedule, "autocast weight copy in model.layers.3").bytes, -1);  // FSDP1's
  const Lifetime saved = lifetime_of(a.schedule, "autocast weight copies of model.layers.3");
  EXPECT_EQ(saved.made_by, "recompute model.layers.3");
  EXPECT_EQ(saved.freed_by, "bwd model.layers.3");
  // So the forward's high-water mark holds every block's copies: 32 x 436,207,616 bytes more
  // than FSDP1's one-at-a-time copy, less the largest one FSDP1 holds at a time.
  const Plan f1 = plan_step(parse_scenario(llama8b(true, "full", 1), "test.json"));
  auto forward_peak = [](const Plan& p) {
    const MemoryReport m = replay_memory(p.schedule);
    std::int64_t peak = 0;
    for (std::size_t i = 0; i < p.schedule.ops.size(); ++i)
      if (p.schedule.ops[i].phase == Phase::forward && p.schedule.ops[i].micro_step == 0)
        peak = std::max(peak, m.allocated_at_op[i]);
    return peak;
  };
  EXPECT_GE(forward_peak(a) - forward_peak(f1), 31 * static_cast<std::int64_t>(2 * kBlockWeights));
  // Without checkpointing: saved for backward, the same lifetimes as FSDP1's.
  const Plan none = plan_step(parse_scenario(llama8b(true, "none", 2), "test.json"));
  const Lifetime plain = lifetime_of(none.schedule, "autocast weight copies of model.layers.3");
  EXPECT_EQ(plain.made_by, "fwd model.layers.3");
  EXPECT_EQ(plain.freed_by, "bwd model.layers.3");
  EXPECT_EQ(lifetime_of(none.schedule, "autocast cache: weight copies of model.layers.3").bytes, -1);
}

// What autocast's copies would do elsewhere is not planned: refused, naming the key.
TEST(Autocast, WhereTheCopiesLiveDifferentlyItIsRefused) {
  auto refused = [](nlohmann::json j, const std::string& why) {
    const InputError e = input_error_of([&] { parse_scenario(j, "test.json"); });
    EXPECT_EQ(e.json_path(), "training.matmul_dtype") << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  };
  nlohmann::json ddp = llama8b(true);
  ddp["fsdp"]["strategy"] = "NO_SHARD";
  refused(ddp, "not NO_SHARD");
  nlohmann::json sac = llama8b(true, "selective");
  refused(sac, "selective");
  // "param_dtype" names the parameters' own dtype: over fp32 parameters, fp32 GEMMs, not autocast.
  nlohmann::json own = llama8b(true);
  own["training"]["matmul_dtype"] = "param_dtype";
  const Scenario fp32 = parse_scenario(own, "test.json");
  EXPECT_FALSE(fp32.training.autocast());
  EXPECT_EQ(fp32.training.compute_dtype(), models::DType::fp32);
  // A 16-bit matmul_dtype over 16-bit parameters other than their own is not autocast.
  nlohmann::json fp16 = llama8b(false);
  fp16["training"]["matmul_dtype"] = "fp16";
  refused(fp16, "with param_dtype fp32 (autocast)");
}

}  // namespace
}  // namespace fsdpsim::planner

namespace fsdpsim::planner {
namespace {

// A sweep shares one cost model among points whose overrides the cost model does not read
// (planner/cost_model.h): matmul_dtype sets the compute dtype under autocast, so it is read; so
// is any field an object override ("training") replaces.
TEST(Autocast, MatmulDtypeChangesTheCostModel) {
  EXPECT_TRUE(override_changes_cost_model("training.matmul_dtype=bf16"));
  EXPECT_TRUE(override_changes_cost_model("training.param_dtype=fp32"));
  EXPECT_TRUE(override_changes_cost_model("training={\"param_dtype\": \"fp32\"}"));
  EXPECT_TRUE(override_changes_cost_model("cluster.gpu=H100-SXM-80GB"));
  EXPECT_FALSE(override_changes_cost_model("training.micro_batch=2"));
  EXPECT_FALSE(override_changes_cost_model("training.matmul=2"));  // a prefix of a field is not it
  EXPECT_FALSE(override_changes_cost_model("fsdp.version=1"));
}

}  // namespace
}  // namespace fsdpsim::planner
