// Identities every catalog model must satisfy, whatever its architecture (dense, GQA, sliding
// window, MLA, MoE, tied embeddings, learned positions): checked over the whole catalog so that a
// model file or a planner change that breaks one for a single architecture fails here. Found by
// auditing the catalog's estimates (session 21): HFU passed MFU with no recompute on every model,
// by up to 1.36x, because attention ops counted the whole causal square.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/catalog.h"
#include "planner/scenario.h"
#include "sim/estimate.h"

namespace fsdpsim::sim {
namespace {

Estimate estimate_catalog_model(const std::string& model, const std::vector<std::string>& sets) {
  planner::QuickScenario q;
  q.model = model;
  q.gpus = "8xH100";
  q.sets = sets;
  const planner::QuickScenarioDocument d = planner::quick_scenario(q);
  return estimate_step(planner::parse_scenario(d.document, planner::kCommandLineFile, d.overrides));
}

// One micro-batch of 2,048 tokens on 8 H100s, each catalog model:
// - no recompute: a fused attention kernel executes the half of the causal square that MFU's
//   model FLOPs count (a sliding window's band in both), so the executed FLOPs equal the model
//   FLOPs exactly; a model costed for eager attention multiplies the whole square: more;
// - full checkpointing recomputes the blocks' forward, at most the whole forward (a third of
//   the executed FLOPs without recompute: forward and a backward of twice its FLOPs), and leaves
//   the model FLOPs as they were;
// - MFU <= HFU < 1.
TEST(CatalogInvariants, ExecutedFlopsFollowTheConvention) {
  int models = 0;
  for (const planner::ModelEntry& m : planner::model_catalog()) {
    ASSERT_TRUE(m.error.empty()) << m.name << ": " << m.error;
    SCOPED_TRACE(m.name);
    const std::vector<std::string> base = {"training.micro_batch=1", "training.seq_len=2048", "training.global_batch=8"};
    std::vector<std::string> none = base, full = base;
    none.push_back("training.activation_checkpointing=none");
    full.push_back("training.activation_checkpointing=full");
    const Estimate e = estimate_catalog_model(m.name, none);
    const StepTiming& t = e.timing;
    ASSERT_GT(t.model_flops, 0);
    if (e.attention_kernel == "eager") {
      EXPECT_GT(t.hardware_flops, t.model_flops * (1 + 1e-6));
    } else {
      EXPECT_NEAR(t.hardware_flops / t.model_flops, 1.0, 1e-9) << e.attention_kernel;
    }
    EXPECT_LE(t.mfu, t.hfu * (1 + 1e-12));
    EXPECT_LT(t.hfu, 1.0);
    const Estimate c = estimate_catalog_model(m.name, full);
    EXPECT_NEAR(c.timing.model_flops, t.model_flops, 1e-9 * t.model_flops);
    EXPECT_GT(c.timing.hardware_flops, t.hardware_flops * (1 + 1e-6));
    EXPECT_LE(c.timing.hardware_flops - t.hardware_flops, t.hardware_flops / 3 * (1 + 1e-9));
    ++models;
  }
  EXPECT_GE(models, 30);  // the catalog (models/*.json), 35 models when this was written
}

}  // namespace
}  // namespace fsdpsim::sim
