// Float8 training (planner/float8.h): which GEMMs run in fp8, the scaling kernels' bytes, the
// fp8 GEMM's price against bf16 and the float8 all-gather's bytes, each worked out by hand for
// Llama-3.1-8B (models/llama3.1-8b.json: h 4096, q/o 4096x4096, k/v 1024x4096, gate/up
// 14336x4096, down 4096x14336, vocab 128256) on a DGX H100 (scenarios/clusters/dgx-h100.json);
// and the measured GEMM table of a calibration (planner/cost_model.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/float8.h"
#include "planner/gemm_model.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

nlohmann::json llama8b_json(const std::string& matmul_dtype, const std::string& all_gather_dtype,
                            const std::string& cluster = "scenarios/clusters/dgx-h100.json") {
  nlohmann::json j = {{"model", "models/llama3.1-8b.json"},
                      {"cluster", cluster},
                      {"training", {{"micro_batch", 1}, {"seq_len", 4096}, {"global_batch", 8}}}};
  if (!matmul_dtype.empty()) j["training"]["matmul_dtype"] = matmul_dtype;
  if (!all_gather_dtype.empty()) j["fsdp"]["all_gather_dtype"] = all_gather_dtype;
  return j;
}

const Op& op_named(const Schedule& s, const std::string& name) {
  for (const Op& op : s.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + name);
}

const KernelSet& set_of(const Schedule& s, const std::string& op) { return s.kernel_sets.at(op_named(s, op).kernel_set); }

double sum(const std::vector<double>& v) {
  double total = 0;
  for (double x : v) total += x;
  return total;
}

// The block's seven linears by (in, out): sum of in = 6 x 4096 + 14336 = 38912; sum of out =
// 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096 = 43008; sum of in x out = 218,103,808.
constexpr double kSumIn = 38912, kSumOut = 43008, kWeights = 218103808;

TEST(Float8, BlockGemmsRunInFp8AndTheOutputLayerStaysBf16) {
  const Plan p = plan_step(parse_scenario(llama8b_json("fp8", ""), "test.json"));
  const Schedule& s = p.schedule;
  for (const char* op : {"fwd model.layers.3", "bwd model.layers.3"})
    for (const GemmShape& g : set_of(s, op).gemms) EXPECT_TRUE(g.fp8) << op << " " << g.m << "x" << g.n << "x" << g.k;
  // torchtitan's filter_fqns ["output"]: the logits projection is never converted.
  for (const char* op : {"fwd lm_head", "bwd lm_head"}) {
    const KernelSet& k = set_of(s, op);
    ASSERT_FALSE(k.gemms.empty()) << op;
    for (const GemmShape& g : k.gemms) EXPECT_FALSE(g.fp8) << op;
    EXPECT_TRUE(k.cast_kernel_bytes.empty()) << op;
  }
  // Attention is not a linear: its FLOPs and call are the same as in bf16.
  const Plan bf16 = plan_step(parse_scenario(llama8b_json("", ""), "test.json"));
  EXPECT_DOUBLE_EQ(set_of(s, "fwd model.layers.3").flops(), set_of(bf16.schedule, "fwd model.layers.3").flops());
  EXPECT_TRUE(set_of(s, "fwd model.layers.3").has_attention);
  for (const GemmShape& g : set_of(bf16.schedule, "fwd model.layers.3").gemms) EXPECT_FALSE(g.fp8);
}

TEST(Float8, ScalingKernelBytesOfABlockByHand) {
  const double T = 4096;  // tokens: micro_batch 1 x seq 4096
  // bf16 all-gather: forward per linear = input (amax 2 T in, cast 2 T in + 2 x T in) and weight
  // (amax 2 in out, cast 2 in out + in out) = 6 T in + 5 in out, in 6 kernels.
  const Plan p = plan_step(parse_scenario(llama8b_json("fp8", ""), "test.json"));
  const KernelSet& fwd = set_of(p.schedule, "fwd model.layers.3");
  EXPECT_EQ(fwd.cast_kernel_bytes.size(), 7u * 6u);
  EXPECT_DOUBLE_EQ(sum(fwd.cast_kernel_bytes), 6 * T * kSumIn + 5 * kWeights);  // 2,046,820,352
  // Backward per linear = output gradient (amax 2 T out, cast 2 T out + 2 x T out) and the
  // weight's second cast (2 in out + in out) = 6 T out + 3 in out, in 4 kernels.
  const KernelSet& bwd = set_of(p.schedule, "bwd model.layers.3");
  EXPECT_EQ(bwd.cast_kernel_bytes.size(), 7u * 4u);
  EXPECT_DOUBLE_EQ(sum(bwd.cast_kernel_bytes), 6 * T * kSumOut + 3 * kWeights);  // 1,711,276,032
  // fp8 all-gather: the weights arrive in fp8, so only the activations' kernels remain.
  const Plan g = plan_step(parse_scenario(llama8b_json("fp8", "fp8"), "test.json"));
  EXPECT_EQ(set_of(g.schedule, "fwd model.layers.3").cast_kernel_bytes.size(), 7u * 3u);
  EXPECT_DOUBLE_EQ(sum(set_of(g.schedule, "fwd model.layers.3").cast_kernel_bytes), 6 * T * kSumIn);
  EXPECT_DOUBLE_EQ(sum(set_of(g.schedule, "bwd model.layers.3").cast_kernel_bytes), 6 * T * kSumOut);
}

// The gate projection's forward GEMM, (m, n, k) = (8192, 14336, 4096), on the H100 (132 SMs,
// bf16 989.4 / fp8 1978.9 TFLOP/s dense, ceiling 0.807 for both), worked through the GEMM model
// (docs/cost-model.md section 7) by hand:
//   normalising GEMM 8192^3: 256x128 tiles -> 2048 CTAs, 16 waves; 128x128 -> 4096 CTAs, 32 waves:
//     equal, 16 x 256 x 128 = 524,288 tile-elements per k-element of each CTA's loop.
//   gate: 128x128 tiles -> 64 x 112 = 7168 CTAs, ceil(7168/132) = 55 waves (256x128: 3584 CTAs,
//     28 waves of twice the tile: 56 > 55), 901,120 tile-elements; split-K is off (CTAs > SMs).
//   a CTA takes its k loop plus its ramp, 1 us per 128x128 tile in any dtype (2 us per 256x128);
//     k-blocks of 64 (bf16) and 128 (fp8) divide both k exactly.
//   8192^3 takes t_8192 = 2 x 8192^3 / (peak x 0.807) = floor (4.8 us) + ramps (16 x 2 us or
//     32 x 1 us = 32 us) + k loops; the gate takes floor + 55 x 1 us + its k loops, at the same
//     time per tile-element per k-element:
//   time = floor + 55 us + (t_8192 - floor - 32 us) x (901,120 x 4096) / (524,288 x 8192).
TEST(Float8, GateGemmOnH100Fp8AgainstBf16ByHand) {
  const CostModel cost(parse_scenario(llama8b_json("fp8", ""), "test.json"));
  const GemmShape bf16{8192, 14336, 4096, false}, fp8{8192, 14336, 4096, true};
  auto by_hand = [](double peak) {
    const double t8192 = 2 * std::pow(8192.0, 3) / (peak * 0.807);
    return 4.8e-6 + 55e-6 + (t8192 - 4.8e-6 - 32e-6) * (901120.0 * 4096) / (524288.0 * 8192);
  };
  const double bf16_seconds = by_hand(989.4e12), fp8_seconds = by_hand(1978.9e12);
  EXPECT_NEAR(cost.gemm_seconds(bf16), bf16_seconds, 1e-9 * bf16_seconds);  // 1.2117 ms
  EXPECT_NEAR(cost.gemm_seconds(fp8), fp8_seconds, 1e-9 * fp8_seconds);     // 0.6199 ms
  // 0.512: a little over half, from the ramps and the floor, which fp8 does not shorten.
  EXPECT_NEAR(cost.gemm_seconds(fp8) / cost.gemm_seconds(bf16), fp8_seconds / bf16_seconds, 1e-9);
  EXPECT_GT(fp8_seconds / bf16_seconds, 0.5);
  EXPECT_LT(fp8_seconds / bf16_seconds, 0.52);
}

// A small GEMM is launch- and ramp-bound: fp8 buys little (torchao's docs: "LHS < 0 for small
// shapes"); the model must not halve it.
TEST(Float8, SmallGemmsGainLittle) {
  const CostModel cost(parse_scenario(llama8b_json("fp8", ""), "test.json"));
  const double ratio = cost.gemm_seconds({256, 256, 256, true}) / cost.gemm_seconds({256, 256, 256, false});
  EXPECT_GT(ratio, 0.9);
}

// FSDP2 pads each parameter's dim 0 to a multiple of the 8 ranks: every Llama-8B block tensor
// (4096, 1024, 14336 rows; the two 4096-element norm weights) divides, so a block gathers
// 218,103,808 linear-weight elements and 8192 norm elements: bf16 2 x 218,112,000 bytes;
// with the float8 all-gather 218,103,808 x 1 + 8192 x 2 = 218,120,192 bytes.
TEST(Float8, FloatEightAllGatherHalvesTheBlocksLinearWeightBytes) {
  const Plan bf16 = plan_step(parse_scenario(llama8b_json("fp8", ""), "test.json"));
  const Plan fp8 = plan_step(parse_scenario(llama8b_json("fp8", "fp8"), "test.json"));
  const std::string unit = "model.layers.3";
  EXPECT_DOUBLE_EQ(op_named(bf16.schedule, "all-gather " + unit).comm_bytes, 2.0 * 218112000);
  EXPECT_DOUBLE_EQ(op_named(fp8.schedule, "all-gather " + unit).comm_bytes, 218120192.0);
  // The gathered buffers shrink with it: the all-gather output and the unsharded parameters.
  auto allocation = [](const Schedule& s, const std::string& label) -> std::int64_t {
    for (const Allocation& a : s.allocations)
      if (a.label == label) return a.bytes;
    return -1;
  };
  EXPECT_EQ(allocation(fp8.schedule, "all-gather output of " + unit), 218120192);
  EXPECT_EQ(allocation(fp8.schedule, "unsharded params of " + unit), 218120192);
  // The root unit (embedding, final norm, the output layer) keeps its bf16 bytes.
  for (const Op& op : bf16.schedule.ops) {
    if (op.kind == OpKind::all_gather && op.name.find("layers") == std::string::npos) {
      EXPECT_DOUBLE_EQ(op_named(fp8.schedule, op.name).comm_bytes, op.comm_bytes) << op.name;
    }
  }
}

TEST(Float8, InputErrorsNameThePath) {
  auto error_path = [](const nlohmann::json& j) -> std::string {
    try {
      parse_scenario(j, "test.json");
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  // Ampere has no fp8 tensor cores.
  const std::string a100 = error_path(llama8b_json("fp8", "", "scenarios/clusters/dgx-a100.json"));
  EXPECT_NE(a100.find("training.matmul_dtype"), std::string::npos) << a100;
  EXPECT_NE(a100.find("A100"), std::string::npos) << a100;
  // fp8 all-gather without float8 linears, or under FSDP1.
  EXPECT_NE(error_path(llama8b_json("", "fp8")).find("fsdp.all_gather_dtype"), std::string::npos);
  nlohmann::json fsdp1 = llama8b_json("fp8", "fp8");
  fsdp1["fsdp"]["version"] = 1;
  EXPECT_NE(error_path(fsdp1).find("fsdp.all_gather_dtype"), std::string::npos);
  EXPECT_NE(error_path(llama8b_json("fp16", "")).find("training.matmul_dtype"), std::string::npos);
  // Parameters are all-gathered in param_dtype (bf16 here): naming another dtype is refused
  // rather than ignored.
  const std::string fp32_gather = error_path(llama8b_json("", "fp32"));
  EXPECT_NE(fp32_gather.find("fsdp.all_gather_dtype"), std::string::npos) << fp32_gather;
  EXPECT_NE(fp32_gather.find("got fp32"), std::string::npos) << fp32_gather;
  EXPECT_NE(error_path(llama8b_json("", "int8")).find("fsdp.all_gather_dtype"), std::string::npos);
}

// docs/schema.md names the defaults "param_dtype": that word, and the param_dtype's own name,
// plan exactly what leaving the fields out plans.
TEST(Float8, TheWordParamDtypeIsTheDefault) {
  const Plan unstated = plan_step(parse_scenario(llama8b_json("", ""), "test.json"));
  for (const auto& [matmul, gather] : std::vector<std::pair<std::string, std::string>>{
           {"param_dtype", "param_dtype"}, {"bf16", "bf16"}, {"param_dtype", "bf16"}}) {
    const Plan p = plan_step(parse_scenario(llama8b_json(matmul, gather), "test.json"));
    ASSERT_EQ(p.schedule.ops.size(), unstated.schedule.ops.size()) << matmul << " " << gather;
    for (std::size_t i = 0; i < p.schedule.ops.size(); ++i) {
      EXPECT_DOUBLE_EQ(p.schedule.ops[i].flops, unstated.schedule.ops[i].flops) << matmul << " " << gather;
      EXPECT_DOUBLE_EQ(p.schedule.ops[i].comm_bytes, unstated.schedule.ops[i].comm_bytes) << matmul << " " << gather;
    }
    for (const GemmShape& g : set_of(p.schedule, "fwd model.layers.3").gemms) EXPECT_FALSE(g.fp8);
  }
}

TEST(Float8, ScalingKernelsCostTheirBytesOrTheLaunchFloor) {
  const CostModel cost(parse_scenario(llama8b_json("fp8", ""), "test.json"));
  KernelSet k;
  k.cast_kernel_bytes = {0, 3.35e9};  // a second-stage reduction and a 3.35 GB cast
  // 2 us floor (torchao roofline_utils KERNEL_LAUNCH_OVERHEAD_SEC) + 3.35 GB at 3.35 TB/s x 0.896.
  EXPECT_NEAR(cost.cast_kernels_seconds(k), 2e-6 + 1e-3 / 0.896, 1e-12);
}

// A linear whose weight dims are not multiples of 16 stays 16-bit (torchtitan's module_filter_fn).
TEST(Float8, DimsNotMultiplesOfSixteenStayBf16) {
  EXPECT_TRUE(float8_eligible_dims(4096, 1024));
  EXPECT_FALSE(float8_eligible_dims(4096, 1000));
  EXPECT_FALSE(float8_eligible_dims(4100, 4096));
}

// ---- published fp8 GEMM throughput (tests/data/kernels/gemm_fp8_published.csv) ----

struct Fp8Row {
  std::string gpu, role;
  GemmShape shape;
  double fp8_flops_per_second = 0, bf16_flops_per_second = 0;
};

std::vector<Fp8Row> fp8_rows() {
  std::ifstream in(std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/kernels/gemm_fp8_published.csv");
  EXPECT_TRUE(in);
  std::vector<Fp8Row> rows;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {
      EXPECT_EQ(line, "gpu,m,n,k,flops_per_second,bf16_flops_per_second,role,locator");
      header = false;
      continue;
    }
    std::stringstream f(line);
    std::string gpu, m, n, k, fp8, bf16, role;
    std::getline(f, gpu, ',');
    std::getline(f, m, ',');
    std::getline(f, n, ',');
    std::getline(f, k, ',');
    std::getline(f, fp8, ',');
    std::getline(f, bf16, ',');
    std::getline(f, role, ',');
    rows.push_back({gpu, role, {std::stod(m), std::stod(n), std::stod(k), true}, std::stod(fp8), std::stod(bf16)});
  }
  return rows;
}

// XLA's sm_90 fp8 rows cannot be fp8 tensor-core work as counted: the largest exceeds the
// H100's dense fp8 peak, which is why they are marked unusable and nothing is checked on them.
TEST(Float8Published, H100RowsExceedTheDenseFp8PeakAndAreNotUsed) {
  double h100_max = 0;
  int h100 = 0, b200 = 0;
  for (const Fp8Row& r : fp8_rows()) {
    if (r.gpu == "H100-SXM-80GB") {
      EXPECT_EQ(r.role, "unusable");
      h100_max = std::max(h100_max, r.fp8_flops_per_second);
      ++h100;
    } else {
      EXPECT_EQ(r.role, "held_out");
      EXPECT_LT(r.fp8_flops_per_second, 4500e12);  // B200 dense fp8 peak (gpus.json)
      ++b200;
    }
  }
  EXPECT_EQ(h100, 125);
  EXPECT_EQ(b200, 125);
  EXPECT_GT(h100_max, find_gpu("H100-SXM-80GB").peak_flops.at("fp8"));
}

// B200, held out (nothing was fitted to fp8 data; the fp8 ceiling is the bf16 one, 0.716): the
// fp8 GEMM model against XLA's fp8 rows, and the fp8/bf16 speedup it predicts against the
// measured one for the same shapes. GEMMs of 20 us or more (launch-bound rows say little).
TEST(Float8Published, B200Fp8RowsHeldOut) {
  nlohmann::json j = llama8b_json("fp8", "", "scenarios/clusters/dgx-b200.json");
  const CostModel cost(parse_scenario(j, "test.json"));
  std::vector<double> errors, speedup_errors;
  for (const Fp8Row& r : fp8_rows()) {
    if (r.gpu != "B200-SXM-180GB" || r.shape.flops() / r.fp8_flops_per_second < 20e-6) continue;
    const double fp8_seconds = cost.gemm_seconds(r.shape);
    GemmShape bf16 = r.shape;
    bf16.fp8 = false;
    const double predicted = r.shape.flops() / fp8_seconds;
    errors.push_back(predicted / r.fp8_flops_per_second - 1);
    const double measured_speedup = r.fp8_flops_per_second / r.bf16_flops_per_second;
    speedup_errors.push_back((cost.gemm_seconds(bf16) / fp8_seconds) / measured_speedup - 1);
    std::cout << r.shape.m << "x" << r.shape.n << "x" << r.shape.k << ": fp8 predicted " << predicted / 1e12
              << " measured " << r.fp8_flops_per_second / 1e12 << " TFLOP/s; speedup predicted "
              << cost.gemm_seconds(bf16) / fp8_seconds << " measured " << measured_speedup << "\n";
  }
  auto median_abs = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::cout << errors.size() << " B200 fp8 rows >= 20 us: median |error| " << median_abs(errors)
            << ", speedup median |error| " << median_abs(speedup_errors) << "\n";
  // fp8 runs XLA's largest shapes (m, n, k <= 4096) in 5-28 us: only four rows take 20 us.
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_LE(median_abs(errors), 0.15);
  EXPECT_LE(median_abs(speedup_errors), 0.15);
}

// ---- the measured GEMM table ----

TEST(GemmTable, ACalibrationsMeasuredRowsPriceTheGemmsNearThem) {
  nlohmann::json j = llama8b_json("", "");
  // Hand-written: the block's k projection forward at 50 us, and a bf16 row for fp8 GEMMs to ignore.
  j["calibration"] = {{"gemm_table",
                       {{{"m", 4096}, {"n", 1024}, {"k", 4096}, {"dtype", "bf16"}, {"seconds", 50e-6}},
                        {{"m", 4096}, {"n", 4096}, {"k", 4096}, {"dtype", "fp8"}, {"seconds", 1e-3}}}}};
  const CostModel cost(parse_scenario(j, "test.json"));
  const GemmShape k_proj{4096, 1024, 4096, false};
  EXPECT_TRUE(cost.gemm_from_table(k_proj));
  EXPECT_DOUBLE_EQ(cost.gemm_seconds(k_proj), 50e-6);
  // Twice the rows: inside the factor-2 reach, the measured throughput carried over.
  EXPECT_DOUBLE_EQ(cost.gemm_seconds({8192, 1024, 4096, false}), 100e-6);
  // The gate projection (n 14336, 14x the row's n) is out of reach: the shape model prices it.
  const GemmShape gate{4096, 14336, 4096, false};
  EXPECT_FALSE(cost.gemm_from_table(gate));
  EXPECT_DOUBLE_EQ(cost.gemm_seconds(gate), estimate_gemm(gate, cost.gemm_device()).seconds);
  // The fp8 row prices fp8 GEMMs only.
  EXPECT_FALSE(cost.gemm_from_table({4096, 4096, 4096, false}));
  EXPECT_TRUE(cost.gemm_from_table({4096, 4096, 4096, true}));
}

TEST(GemmTable, BadRowsAreInputErrorsNamingThePath) {
  nlohmann::json j = llama8b_json("", "");
  j["calibration"] = {{"gemm_table", {{{"m", 4096}, {"n", 1024}, {"k", 4096}, {"seconds", -1}}}}};
  try {
    const CostModel cost(parse_scenario(j, "test.json"));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("calibration.gemm_table[0].seconds"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpsim::planner
