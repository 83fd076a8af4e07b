// `estimate --by-unit` (sim/unit_report.h): each unit's figures by hand for a Llama-3.1-8B block,
// and the rows (with the outside row) adding up to the step's own totals, for several strategies.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/scenario.h"
#include "sim/estimate.h"
#include "sim/unit_report.h"

namespace fsdpsim::sim {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";

// The shipped scenario: Llama-3.1-8B, FSDP2 FULL_SHARD per block over 8 GPUs, bf16 params, fp32
// master and reduce, AdamW, full activation checkpointing, micro-batch 2 x 8192 tokens, one
// micro-step (global batch 16 = 2 x 8).
TEST(UnitReport, ALlamaBlockByHand) {
  const Estimate e = estimate_step(planner::load_scenario(kScenario));
  const UnitReport r = unit_report(e);
  ASSERT_EQ(r.units.size(), 33u);  // the root (embeddings, final norm, lm_head) and 32 blocks
  const UnitRow* block = nullptr;
  for (const UnitRow& u : r.units)
    if (u.name == "model.layers.5") block = &u;
  ASSERT_NE(block, nullptr);
  // A block: q and o 4096 x 4096, k and v 1024 x 4096 (8 KV heads of 128), gate/up/down
  // 14336 x 4096, two RMSNorm weights of 4096 (Llama-3.1-8B's config.json).
  const std::int64_t params = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 3 * 14336LL * 4096 + 2 * 4096;
  EXPECT_EQ(params, 218112000);
  EXPECT_EQ(block->parameters, params);
  // Every dim 0 divides by 8, so FSDP2's per-parameter padding adds nothing: an eighth each.
  const std::int64_t shard = params / 8;
  EXPECT_EQ(block->sharded_param_bytes, shard * 4);           // fp32 master = the sharded parameter
  EXPECT_EQ(block->optimizer_state_bytes, shard * 2 * 4);     // AdamW exp_avg and exp_avg_sq, fp32
  EXPECT_EQ(block->replicated_grad_bytes, 0);
  EXPECT_EQ(block->unsharded_param_bytes, params * 2);        // gathered in bf16
  EXPECT_EQ(block->grad_bytes, shard * 4);                    // the sharded fp32 gradient
  // Full checkpointing saves the block's input only: micro-batch x seq x hidden in bf16.
  EXPECT_EQ(block->saved_activation_bytes, 2LL * 8192 * 4096 * 2);
  // Gathered in forward and again in backward (reshard_after_forward), reduced once in fp32.
  EXPECT_EQ(block->all_gathers, 2);
  EXPECT_DOUBLE_EQ(block->all_gather_bytes, 2.0 * params * 2);
  EXPECT_EQ(block->reduce_scatters, 1);
  EXPECT_DOUBLE_EQ(block->reduce_scatter_bytes, 1.0 * params * 4);
  EXPECT_EQ(block->all_reduces, 0);
  EXPECT_GT(block->compute_seconds, 0);
  EXPECT_GT(block->comm_seconds, 0);
}

double sum_of(const UnitReport& r, double UnitRow::*field) {
  double total = r.outside.*field;
  for (const UnitRow& u : r.units) total += u.*field;
  return total;
}
std::int64_t sum_of(const UnitReport& r, std::int64_t UnitRow::*field) {
  std::int64_t total = r.outside.*field;
  for (const UnitRow& u : r.units) total += u.*field;
  return total;
}

// The rows add up to the totals the step reports by other routes: the model's parameter count,
// the memory held at the start of the step (the replay's), the timing's compute,
// communication and exposed-communication seconds.
TEST(UnitReport, RowsAddUpToTheStepsTotals) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"fsdp.strategy=SHARD_GRAD_OP", "fsdp.reshard_after_forward=null"},
      {"fsdp.strategy=NO_SHARD", "fsdp.reshard_after_forward=null"},
      {"fsdp.strategy=ZERO1", "fsdp.reshard_after_forward=null"},
      {"fsdp.strategy=HYBRID_SHARD", "fsdp.reshard_after_forward=null", "cluster.nodes=2", "training.global_batch=32"},
      {"fsdp.version=1", "training.activation_checkpointing=none", "training.micro_batch=1"},
      {"fsdp.cpu_offload=true"},
      {"training.global_batch=64"},  // 4 micro-steps
  };
  for (const auto& sets : cases) {
    std::string label;
    for (const std::string& s : sets) label += s + " ";
    SCOPED_TRACE(label);
    const Estimate e = estimate_step(planner::load_scenario(kScenario, sets));
    const UnitReport r = unit_report(e);
    EXPECT_EQ(sum_of(r, &UnitRow::parameters), planner::load_scenario(kScenario, sets).model->parameter_count());
    // The GPU's persistent state at the start of the step, allocation by allocation in the
    // replay; besides the units' state, only PyTorch's two cuBLAS workspaces (32 MiB each on the
    // scenario's H100s), which no unit owns. What fsdp.cpu_offload keeps on the host is in no
    // row (the session-36 audit found it shown as the GPU's "MiB per rank").
    const std::int64_t cublas_workspaces = 2LL * 32 * 1024 * 1024;
    EXPECT_EQ(sum_of(r, &UnitRow::sharded_param_bytes) + sum_of(r, &UnitRow::optimizer_state_bytes) +
                  sum_of(r, &UnitRow::replicated_grad_bytes) + cublas_workspaces,
              e.memory.allocated_at_start);
    if (e.memory.allocated_at_start_host > 0) {
      EXPECT_EQ(e.memory.allocated_at_start, cublas_workspaces);
    }
    const double tol = 1e-9 * e.timing.step_seconds;
    EXPECT_NEAR(sum_of(r, &UnitRow::compute_seconds), e.timing.compute_seconds, tol);
    EXPECT_NEAR(sum_of(r, &UnitRow::comm_seconds), e.timing.comm_seconds, tol);
    EXPECT_NEAR(sum_of(r, &UnitRow::exposed_comm_seconds), e.timing.exposed_comm_seconds, tol);
  }
}

TEST(UnitReport, TextMergesEqualBlocksAndJsonHasEveryUnit) {
  const Estimate e = estimate_step(planner::load_scenario(kScenario));
  const UnitReport r = unit_report(e);
  const std::string text = unit_report_text(r);
  EXPECT_NE(text.find("model.layers.0 .. model.layers.31 (x32)"), std::string::npos) << text;
  EXPECT_NE(text.find("(outside units)"), std::string::npos);
  const nlohmann::json j = unit_report_json(r);
  ASSERT_EQ(j.size(), r.units.size() + 1);
  EXPECT_EQ(j[5]["name"], r.units[5].name);
  EXPECT_EQ(j.back()["unit"], -1);
  // Every field of every row is the row's own (the JSON is built field by field).
  for (std::size_t k = 0; k <= r.units.size(); ++k) {
    const UnitRow& u = k < r.units.size() ? r.units[k] : r.outside;
    const nlohmann::json& row = j[k];
    EXPECT_EQ(row.size(), 16u);
    EXPECT_EQ(row["unit"], u.unit);
    EXPECT_EQ(row["name"], u.name);
    EXPECT_EQ(row["parent"], u.parent);
    EXPECT_EQ(row["parameters"], u.parameters);
    EXPECT_EQ(row["sharded_param_bytes"], u.sharded_param_bytes);
    EXPECT_EQ(row["optimizer_state_bytes"], u.optimizer_state_bytes);
    EXPECT_EQ(row["replicated_grad_bytes"], u.replicated_grad_bytes);
    EXPECT_EQ(row["unsharded_param_bytes"], u.unsharded_param_bytes);
    EXPECT_EQ(row["grad_bytes"], u.grad_bytes);
    EXPECT_EQ(row["saved_activation_bytes"], u.saved_activation_bytes);
    EXPECT_EQ(row["all_gather"]["count"], u.all_gathers);
    EXPECT_EQ(row["all_gather"]["bytes"], u.all_gather_bytes);
    EXPECT_EQ(row["reduce_scatter"]["count"], u.reduce_scatters);
    EXPECT_EQ(row["reduce_scatter"]["bytes"], u.reduce_scatter_bytes);
    EXPECT_EQ(row["all_reduce"]["count"], u.all_reduces);
    EXPECT_EQ(row["all_reduce"]["bytes"], u.all_reduce_bytes);
    EXPECT_EQ(row["compute_seconds"], u.compute_seconds);
    EXPECT_EQ(row["comm_seconds"], u.comm_seconds);
    EXPECT_EQ(row["exposed_comm_seconds"], u.exposed_comm_seconds);
  }
  // The 8B step on one node hides some of a block's communication, not all of it, so the two
  // communication fields differ somewhere.
  bool exposed_differs = false;
  for (const UnitRow& u : r.units) exposed_differs |= u.exposed_comm_seconds != u.comm_seconds;
  EXPECT_TRUE(exposed_differs);
}

}  // namespace
}  // namespace fsdpsim::sim
