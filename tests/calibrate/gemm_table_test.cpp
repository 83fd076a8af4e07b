// calibrate's GEMM table: the shapes the cuda backend sweeps (the step's own GEMMs) and the
// gemm_table it writes, read back by the cost model. Tested on the CPU with hand-written
// timings (no GPU here); the cuda timing itself is runtime/cuda/gemm_timing.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "calibrate/calibrate.h"
#include "planner/cost_model.h"
#include "planner/scenario.h"

namespace fsdpsim::calibrate {
namespace {

planner::Scenario llama8b_seq8192() {
  const nlohmann::json j = {{"model", "models/llama3.1-8b.json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"micro_batch", 1}, {"seq_len", 8192}, {"global_batch", 8}}}};
  return planner::parse_scenario(j, "test.json");
}

bool has(const std::vector<planner::GemmShape>& shapes, double m, double n, double k) {
  return std::any_of(shapes.begin(), shapes.end(),
                     [&](const planner::GemmShape& g) { return g.m == m && g.n == n && g.k == k; });
}

// Llama-3.1-8B at T = 8192 tokens, by hand: forward (T, out, in) of q/o (4096,4096), k/v
// (1024,4096), gate/up (14336,4096), down (4096,14336): 4 shapes; input gradients (T, in, out):
// (T,4096,4096), (T,4096,1024), (T,4096,14336), (T,14336,4096), of which only (T,4096,1024) is
// new; weight gradients (out, in, T): 4 more; the output layer (T,128256,4096),
// (T,4096,128256), (128256,4096,T): 3. Twelve in all.
TEST(CalibrateGemmTable, SweepsTheStepsDistinctGemms) {
  const std::vector<planner::GemmShape> shapes = step_gemm_shapes(llama8b_seq8192());
  EXPECT_EQ(shapes.size(), 12u);
  EXPECT_TRUE(has(shapes, 8192, 14336, 4096));   // gate forward
  EXPECT_TRUE(has(shapes, 8192, 4096, 1024));    // k projection's input gradient
  EXPECT_TRUE(has(shapes, 14336, 4096, 8192));   // gate weight gradient
  EXPECT_TRUE(has(shapes, 128256, 4096, 8192));  // output layer weight gradient
}

TEST(CalibrateGemmTable, TheWrittenTableIsReadBackAndPricesItsShapes) {
  Measurements m;
  GemmMeasurement g;
  g.shape = GemmShape{8192, 14336, 4096, "step"};
  g.dtype = "bf16";
  g.time = stats_of({1.5e-3, 1.4e-3, 1.6e-3});
  g.peak_flops = 989.4e12;
  m.step_gemms.push_back(g);
  const nlohmann::json table = gemm_table_json(m);
  ASSERT_EQ(table.size(), 1u);
  EXPECT_DOUBLE_EQ(table[0]["seconds"].get<double>(), 1.5e-3);  // the median
  planner::Scenario s = llama8b_seq8192();
  s.calibration = {{"gemm_table", table}};
  const planner::CostModel cost(s);
  const planner::GemmShape gate{8192, 14336, 4096, false};
  EXPECT_TRUE(cost.gemm_from_table(gate));
  EXPECT_DOUBLE_EQ(cost.gemm_seconds(gate), 1.5e-3);
  EXPECT_FALSE(cost.gemm_from_table({8192, 4096, 1024, false}));  // k's input gradient: n 3.5x, k 4x away
}

}  // namespace
}  // namespace fsdpsim::calibrate
