// training.loss: the output layer's costs recomputed for the scenario's loss kernel
// (planner/plan.cpp resolve_loss), against hand arithmetic; training.attention's validation.
#include <gtest/gtest.h>

#include <algorithm>

#include <stdexcept>
#include <string>

#include "models/json_input.h"
#include "models/transformer_costs.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

constexpr std::int64_t kHidden = 4096, kVocab = 128256;  // Llama-3.1-8B's output layer

// A model that is Llama-3.1-8B's output layer alone (weight [128256, 4096], untied), with the
// costs the importer writes for it (fp32-upcast loss), on one GPU.
nlohmann::json output_layer_scenario(int micro_batch, int seq_len) {
  nlohmann::json lm_head = {{"name", "lm_head"}, {"type", "Linear"},
                            {"params", {{{"name", "weight"}, {"shape", {kVocab, kHidden}}}}},
                            {"costs", models::costs_to_json(models::lm_head_costs(kHidden, kVocab), "")}};
  nlohmann::json model = {{"name", "llama3.1-8b-output-layer"},
                          {"root", {{"name", ""}, {"type", "LlamaForCausalLM"}, {"children", {lm_head}}}}};
  return {{"model", model},
          {"cluster", testing::cluster(1, 1)},
          {"training", {{"micro_batch", micro_batch}, {"seq_len", seq_len}, {"optimizer", "none"},
                        {"param_dtype", "bf16"}, {"master_dtype", "fp32"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}, {"wrap", {{"policy", "root"}}}}}};
}

struct Planned {
  Plan plan;
  MemoryReport memory;
  const Op& op(const std::string& name) const {
    for (const Op& o : plan.schedule.ops)
      if (o.name == name) return o;
    throw std::logic_error("no op " + name);
  }
};

Planned planned(const nlohmann::json& j, const std::vector<std::string>& overrides = {}) {
  Planned p{plan_step(parse_scenario(j, "test.json", overrides)), {}};
  p.memory = replay_memory(p.plan.schedule);
  return p;
}

// Llama-3.1-8B's output layer, b = 2, s = 8192: 16,384 tokens; N = 128,256 x 4,096 =
// 525,336,576 weights; h = 4,096, V = 128,256. One GPU (an H100), FSDP2, the root the only unit,
// no optimizer. Both runs peak at the output layer's backward op, holding:
//   always: the fp32 sharded parameter 4N + its bf16 unsharded copy 2N = 3,152,019,456 (the
//     all-gather output is freed at the root's post-forward, FSDP2); the token ids: 8 x 16,384 =
//     131,072; PyTorch's two cuBLAS workspaces 2 x 32 MiB = 67,108,864;
//   fp32_upcast: saved 2h + 4V = 521,216 and log_softmax backward's 8V = 1,026,048 per token:
//     16,384 x 1,547,264 = 25,350,373,376. The bf16 weight gradient (2N) comes later, at the
//     projection's backward, when only the 16-bit logits' gradient and the input gradient (2V +
//     2h per token) are left ([Gradients after the loss] in planner/plan.cpp): with the saved
//     tensors still counted, 2N + 16,384 x (521,216 + 264,704) = 13,927,186,432 is less.
//     Peak 28,569,632,768 (26.61 GiB).
//   fused: the gradient 2N beside the projection backward's input gradient 2h, with the saved
//     2h + 2V + 4 (the logits and flash-attn's fp32 log-sum-exp) = 264,708: 16,384 x 272,900 =
//     4,471,193,600 + 2N; peak 8,741,126,144 (8.14 GiB).
// A 16 GiB cap (17,179,869,184 bytes) lies between: the fused loss fits, the fp32 one does not.
TEST(LossKind, FusedLossFitsWhereTheFp32UpcastDoesNotByHand) {
  const double N = 525'336'576.0, tokens = 16'384.0, h = 4096.0, V = 128'256.0;
  const double held = 6 * N + 8 * tokens + static_cast<double>(testing::kCublasWorkspacesHopper);
  const double fp32_peak = held + std::max(tokens * ((2 * h + 4 * V) + 8 * V), 2 * N + tokens * ((2 * h + 4 * V) + 2 * V + 2 * h));
  const double fused_peak = held + 2 * N + tokens * ((2 * h + 2 * V + 4) + 2 * h);
  EXPECT_EQ(fp32_peak, 28'569'632'768.0);
  EXPECT_EQ(fused_peak, 8'741'126'144.0);

  const nlohmann::json j = output_layer_scenario(2, 8192);
  Planned fp32 = planned(j), fused = planned(j, {"training.loss=fused"});
  // The model file's kind, stated: the same plan.
  Planned stated = planned(j, {"training.loss=fp32_upcast"});
  EXPECT_EQ(static_cast<double>(fp32.memory.peak_allocated_bytes), fp32_peak);
  EXPECT_EQ(static_cast<double>(fused.memory.peak_allocated_bytes), fused_peak);
  EXPECT_EQ(stated.memory.peak_allocated_bytes, fp32.memory.peak_allocated_bytes);
  // The fp32 peak is the loss's own backward (the first max term), before the weight gradient
  // exists; the fused one is the projection's backward, beside the gradient.
  EXPECT_EQ(fp32.plan.schedule.ops[fp32.memory.peak_op].name, "bwd lm_head (loss)");
  EXPECT_EQ(fused.plan.schedule.ops[fused.memory.peak_op].name, "bwd lm_head");
  const double cap = 16.0 * 1024 * 1024 * 1024;
  EXPECT_GT(fp32.memory.peak_allocated_bytes, cap);  // does not fit
  EXPECT_LT(fused.memory.peak_allocated_bytes, cap);  // fits
  // Same FLOPs; the fused kernels move the logits once in forward (2V per token) and twice in
  // backward (read them, write their gradient in place).
  EXPECT_EQ(fused.op("fwd lm_head").flops, fp32.op("fwd lm_head").flops);
  EXPECT_EQ(fused.op("bwd lm_head").flops, fp32.op("bwd lm_head").flops);
  EXPECT_EQ(fused.op("fwd lm_head").hbm_bytes, tokens * 2 * V);
  // The backward's memory-bound bytes are the loss's op; the projection's op runs GEMMs only.
  EXPECT_EQ(fused.op("bwd lm_head (loss)").hbm_bytes, tokens * 4 * V);
  EXPECT_EQ(fused.op("bwd lm_head").hbm_bytes, 0);
  EXPECT_EQ(fused.op("bwd lm_head (loss)").flops, 0);
  EXPECT_EQ(fp32.op("fwd lm_head").hbm_bytes, tokens * 14 * V);  // cast 2V + 4V, log_softmax 4V + 4V
}

// Liger's fused linear cross-entropy at b = 2, s = 4096 (BT = 8,192 tokens): inc_factor =
// ceil(128,256 / 4,096) = 32, chunk = next_power_of_2(8,192 / 32) = 256 tokens, 32 chunks.
// Forward runs the logits GEMM and both gradient GEMMs: 3 x 2hV = 3,152,019,456 FLOPs per
// token; backward none. Its forward's largest moment (coefficient-wise, the ledger's rule):
// grad_weight 2Vh + the chunk's 16-bit weight gradient 2Vh + its fp32 copy 4Vh = 8Vh =
// 4,202,692,608, plus per token: fp32 loss 4 + mask 1 + the chunk's logits 2V/32 = 8,016 +
// the chunk's input-gradient temporary 2h/32 = 256: 8,277 x 8,192 = 67,805,184. Total
// 4,270,497,792. The peak is that forward op, which also holds the all-gather output (2N):
// 4N + 2N + 2N + ids 65,536 + saved grad_input 2h x 8,192 = 67,108,864 + 4,270,497,792
// = 8,540,364,800, and the two cuBLAS workspaces (2 x 32 MiB): 8,607,473,664.
TEST(LossKind, ChunkedLossRunsItsGradientsInForwardByHand) {
  const double N = 525'336'576.0, tokens = 8192.0, h = 4096.0, V = 128'256.0;
  Planned chunked = planned(output_layer_scenario(2, 4096), {"training.loss=chunked"});
  EXPECT_EQ(chunked.op("fwd lm_head").flops, tokens * 6 * h * V);
  EXPECT_EQ(chunked.op("bwd lm_head").flops, 0.0);
  EXPECT_EQ(chunked.op("bwd lm_head").hbm_bytes, 0.0);
  // Memory-bound forward: per token grad_input zeroed and its slices copied (3 x 2h), the CE
  // kernel's 3 passes over the chunk's logits (3 x 2V); grad_weight zeroed (2Vh) and per
  // chunk .float() (6Vh) and the accumulation (8Vh): 2Vh + 32 x 14Vh = 450Vh.
  EXPECT_EQ(chunked.op("fwd lm_head").hbm_bytes, tokens * (6 * h + 6 * V) + 450 * V * h);
  EXPECT_EQ(chunked.plan.schedule.ops[chunked.memory.peak_op].name, "fwd lm_head");
  EXPECT_EQ(static_cast<double>(chunked.memory.peak_allocated_bytes),
            8 * N + 8 * tokens + 2 * h * tokens + 8 * V * h + 8277 * tokens + static_cast<double>(testing::kCublasWorkspacesHopper));
  EXPECT_EQ(chunked.memory.peak_allocated_bytes, 8'607'473'664);
}

// torchtune's chunked-output cross-entropy (training.loss chunked_output; docs/memory-model.md,
// "The loss") on the same output layer, b = 2, s = 8192 (16,384 tokens), by hand: saved 2h + 2V +
// 4 = 264,708 per token. The loss's backward op holds one chunk's gradient beside them, 2V/8 =
// 32,064: held 6N + ids + workspaces = 3,219,259,392 + 16,384 x 296,772 = 8,081,571,840. The
// projection's backward holds the weight gradient 2N and the input gradient's chunks and their
// concatenation 4h = 16,384: 3,219,259,392 + 1,050,673,152 + 16,384 x 281,092 = 8,875,343,872,
// the peak (8.27 GiB, against fp32_upcast's 26.61 and the bf16 loss's saved 2V and 4V gradient).
// torchtune's blog run that ran (session 39's third judge) was predicted not to fit with bf16.
TEST(LossKind, TorchtuneChunkedOutputLossByHand) {
  const double tokens = 16'384.0, V = 128'256.0;
  Planned chunked = planned(output_layer_scenario(2, 8192), {"training.loss=chunked_output"});
  EXPECT_EQ(chunked.memory.peak_allocated_bytes, 8'875'343'872);
  EXPECT_EQ(chunked.plan.schedule.ops[chunked.memory.peak_op].name, "bwd lm_head");
  Planned bf16 = planned(output_layer_scenario(2, 8192), {"training.loss=bf16"});
  EXPECT_GT(bf16.memory.peak_allocated_bytes, chunked.memory.peak_allocated_bytes + 3 * tokens * V);
  // Two reads of the logits in forward; one read and one write in backward (the loss's op).
  EXPECT_EQ(chunked.op("fwd lm_head").hbm_bytes, tokens * 4 * V);
  EXPECT_EQ(chunked.op("bwd lm_head (loss)").hbm_bytes, tokens * 4 * V);
  EXPECT_EQ(chunked.op("bwd lm_head").flops, bf16.op("bwd lm_head").flops);
  // Stated eager (torchtune's compile: False): the chunks' fp32 log-probabilities are saved (2h +
  // 4V = 521,216 a token) and the loss's forward holds every chunk's 16-bit logits and one chunk's
  // fp32 copy beside them (320,640). In forward the all-gather output (2N) is alive too, freed at
  // the root's post-forward: 8N + ids + workspaces = 4,269,932,544 + 16,384 x 841,856 =
  // 18,062,901,248, the peak, against the compiled kind's 8.27 GiB.
  Planned eager = planned(output_layer_scenario(2, 8192), {"training.loss=chunked_output", "training.torch_compile=false"});
  EXPECT_EQ(eager.memory.peak_allocated_bytes, 18'062'901'248);
  EXPECT_EQ(eager.plan.schedule.ops[eager.memory.peak_op].name, "fwd lm_head");
}

// Cut Cross-Entropy: forward 2hV + 2h per token (the log-sum-exp GEMM and the targets' dot
// products), backward 3 x 2hV (the logits recomputed, then both gradient GEMMs).
TEST(LossKind, CutLossRecomputesTheLogitsInBackwardByHand) {
  const double tokens = 16'384.0, h = 4096.0, V = 128'256.0;
  Planned cut = planned(output_layer_scenario(2, 8192), {"training.loss=cut"});
  EXPECT_EQ(cut.op("fwd lm_head").flops, tokens * (2 * h * V + 2 * h));
  EXPECT_EQ(cut.op("bwd lm_head").flops, tokens * 6 * h * V);
  EXPECT_EQ(cut.op("fwd lm_head").hbm_bytes, 0.0);
  EXPECT_EQ(cut.op("bwd lm_head").hbm_bytes, tokens * 2 * h + 2 * V * h);  // de and dc zeroed
}

template <typename F>
void expect_input_error(F f, const std::string& path, const std::string& words) {
  try {
    f();
    FAIL() << "expected an InputError at " << path;
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
  }
}

TEST(LossKind, BadInputNamesTrainingLoss) {
  const nlohmann::json j = output_layer_scenario(1, 128);
  expect_input_error([&] { parse_scenario(j, "test.json", {"training.loss=fp16_fused"}); }, "training.loss",
                     "fp32_upcast, bf16, fused, chunked, cut");
  expect_input_error([&] { parse_scenario(j, "test.json", {"training.loss=3"}); }, "training.loss", "string");
  // A model whose output layer does not record its loss head: a stated kind cannot be priced.
  nlohmann::json bare = {{"model", testing::block_model(2, {64, 32}, 100)},
                         {"cluster", testing::cluster(1, 1)},
                         {"training", {{"loss", "fused"}}}};
  const Scenario s = parse_scenario(bare, "test.json");
  expect_input_error([&] { plan_step(s); }, "training.loss", "loss head");
  bare["training"].erase("loss");
  EXPECT_NO_THROW(plan_step(parse_scenario(bare, "test.json")));
}

// Gemma-2's soft-capped logits: the capping is modelled in Hugging Face's loss paths
// (fp32_upcast, bf16), not inside a fused kernel's; a fused kind is refused by name, not priced
// as if the logits were uncapped.
TEST(LossKind, SoftCappedLogitsRefuseTheFusedKinds) {
  nlohmann::json j = output_layer_scenario(1, 128);
  j["model"]["root"]["children"][0]["costs"] =
      models::costs_to_json(models::lm_head_costs(kHidden, kVocab, models::LossKind::fp32_upcast, 0, true), "");
  for (const char* kind : {"fused", "chunked", "cut"}) {
    const Scenario s = parse_scenario(j, "test.json", {std::string("training.loss=") + kind});
    expect_input_error([&] { plan_step(s); }, "training.loss", "soft-capped");
  }
  // bf16 is modelled: the capped logits' three ops and tanh's saved output (2V per token) stay.
  const Planned bf16 = planned(j, {"training.loss=bf16"});
  EXPECT_DOUBLE_EQ(bf16.op("fwd lm_head").hbm_bytes, 128.0 * (2 * 2 * kVocab + 12 * kVocab));
}

TEST(AttentionKernel, ParsedAndValidatedByName) {
  const nlohmann::json j = output_layer_scenario(1, 128);
  EXPECT_EQ(parse_scenario(j, "test.json").training.attention, "auto");
  for (const char* name : {"auto", "flash2", "flash3", "cudnn", "mem_efficient", "triton"})
    EXPECT_EQ(parse_scenario(j, "test.json", {std::string("training.attention=") + name}).training.attention, name);
  expect_input_error([&] { parse_scenario(j, "test.json", {"training.attention=flash4"}); }, "training.attention",
                     "flash2");
}

// "eager" only for a model whose attention costs save the score matrices (a b*s^2 term):
// gpt2 imported with --eager-attention (colossalai-gpt2-xl) yes, llama3.1-8b (flash) no.
TEST(AttentionKernel, EagerNeedsAModelCostedForEagerAttention) {
  auto scenario = [](const std::string& model) {
    return nlohmann::json{{"model", model},
                          {"cluster", testing::cluster(1, 8)},
                          {"training", {{"micro_batch", 1}, {"seq_len", 1024}, {"attention", "eager"}}}};
  };
  EXPECT_NO_THROW(plan_step(parse_scenario(scenario("models/colossalai-gpt2-xl.json"), "test.json")));
  const Scenario flash = parse_scenario(scenario("models/llama3.1-8b.json"), "test.json");
  expect_input_error([&] { plan_step(flash); }, "training.attention", "--eager-attention");
}

}  // namespace
}  // namespace fsdpsim::planner
