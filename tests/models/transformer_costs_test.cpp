// Cost formulas: Korthikanti et al.'s activation formula reproduced exactly, its
// generalizations (SwiGLU, GQA, parallel residual, flash attention) checked against
// hand-computed numbers, and FLOPs against the PaLM convention.
#include <gtest/gtest.h>

#include "models/hf_import.h"
#include "models/json_input.h"
#include "models/transformer_costs.h"
#include "test_paths.h"

namespace fsdpsim::models {
namespace {

using testing_paths::hf_config_path;

const ModuleCosts& costs_of(const Model& m, const std::string& module) {
  const Module* mod = m.find_module(module);
  EXPECT_NE(mod, nullptr) << module;
  EXPECT_TRUE(mod && mod->costs) << module;
  return *mod->costs;
}

Model load(const std::string& name, bool flash_attention) {
  HfImportOptions options;
  options.flash_attention = flash_attention;
  return load_hf_config(hf_config_path(name), options);
}

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// section 4.1, eq. 1: activations per layer = s*b*h*(34 + 5*a*s/h) bytes, for a GPT layer
// with 16-bit activations, a 4h MLP, multi-head attention and dropout, no parallelism.
// GPT-2 small has exactly that layer: h = 768, a = 12, dropout 0.1 everywhere.
TEST(Korthikanti, Gpt2BlockWithoutFlashAttentionMatchesEquation1) {
  Model gpt2 = load("gpt2", /*flash_attention=*/false);
  const ModuleCosts& block = costs_of(gpt2, "transformer.h.0");
  // b = 2, s = 1024: s*b*h = 1,572,864; 5*a*s/h = 5*12*1024/768 = 80;
  // 1,572,864 * (34 + 80) = 179,306,496 bytes.
  EXPECT_EQ(block.saved_activation_bytes.at(2, 1024), 179'306'496.0);
  // b = 1, s = 512: s*b*h = 393,216; 5*12*512/768 = 40; 393,216 * 74 = 29,097,984.
  EXPECT_EQ(block.saved_activation_bytes.at(1, 512), 29'097'984.0);
  // And as a formula, for a few more shapes.
  const double h = 768, a = 12;
  for (double b : {1.0, 3.0, 8.0})
    for (double s : {128.0, 1000.0, 2048.0})
      EXPECT_EQ(block.saved_activation_bytes.at(b, s), s * b * h * (34 + 5 * a * s / h)) << b << " " << s;
}

TEST(Korthikanti, FlashAttentionRemovesTheQuadraticTerm) {
  Model gpt2 = load("gpt2", /*flash_attention=*/true);
  const ModuleCosts& block = costs_of(gpt2, "transformer.h.5");
  // 34*s*b*h: 1,572,864 * 34 = 53,477,376.
  EXPECT_EQ(block.saved_activation_bytes.at(2, 1024), 53'477'376.0);
  for (const Polynomial::Term& t : block.saved_activation_bytes.terms) EXPECT_LT(t.s_pow, 2);
}

// Llama: no dropout, SwiGLU (8f: gate out, SiLU out, up out, product), RMSNorm.
// Per token: 8h (norm inputs and outputs) + 4q (q, attention output) + 4kv (k, v) + 8f.
TEST(SavedActivations, LlamaGeneralization) {
  // Llama-2-7B (MHA): 8*4096 + 4*4096 + 4*4096 + 8*11008 = 153,600 bytes = 37.5*h per token.
  Model llama2 = load("llama2-7b", true);
  EXPECT_EQ(costs_of(llama2, "model.layers.0").saved_activation_bytes.at(1, 4096), 4096.0 * 153'600);
  // Llama-3.1-8B (GQA, kv = 1024): 32,768 + 16,384 + 4,096 + 114,688 = 167,936 per token.
  Model llama3 = load("llama3.1-8b", true);
  EXPECT_EQ(costs_of(llama3, "model.layers.7").saved_activation_bytes.at(2, 8192), 2.0 * 8192 * 167'936);
  // Eager attention: k and v repeated to 32 heads (4q instead of 4kv: 180,224 per token)
  // plus the softmax output 2*a*s per token (no attention dropout).
  Model eager = load("llama3.1-8b", false);
  EXPECT_EQ(costs_of(eager, "model.layers.7").saved_activation_bytes.at(2, 8192),
            2.0 * 8192 * (180'224 + 2 * 32 * 8192.0));
}

TEST(SavedActivations, ParallelResidualSavesTheBlockInputOnce) {
  // Pythia-1.4B: both norms read x (2h once) + two norm outputs 4h + q,k,v 6h + attention
  // output 2h + GELU 4f = 30h = 61,440 bytes per token (no dropout in the config).
  Model pythia = load("pythia-1.4b", true);
  EXPECT_EQ(costs_of(pythia, "gpt_neox.layers.0").saved_activation_bytes.at(1, 2048), 2048.0 * 61'440);
  // MPT-7B (sequential, GELU 4h, no dropout): 32h = 131,072 per token.
  Model mpt = load("mpt-7b", true);
  EXPECT_EQ(costs_of(mpt, "transformer.blocks.0").saved_activation_bytes.at(1, 2048), 2048.0 * 131'072);
}

TEST(SavedActivations, EmbeddingHeadAndLoss) {
  Model m = load("llama3.1-8b", true);
  // The head keeps its input (2h) and the loss its fp32 log-probabilities (4V).
  EXPECT_EQ(costs_of(m, "lm_head").saved_activation_bytes.at(1, 1), 2.0 * 4096 + 4.0 * 128256);
  EXPECT_EQ(costs_of(m, "model.norm").saved_activation_bytes.at(1, 1), 2.0 * 4096);
  EXPECT_EQ(costs_of(m, "model.embed_tokens").saved_activation_bytes.at(1, 1), 8.0);  // int64 ids
  // GPT-2: ids, position ids (once per sequence) and the embedding dropout mask (h bytes).
  Model gpt2 = load("gpt2", true);
  EXPECT_EQ(costs_of(gpt2, "transformer.wte").saved_activation_bytes.at(2, 1024), 2 * 1024 * (8.0 + 768) + 8 * 1024);
}

TEST(ForwardFlops, PalmConvention) {
  Model m = load("llama3.1-8b", true);
  const ModuleCosts& block = costs_of(m, "model.layers.0");
  // Block matmul weights: 218,112,000 - 8,192 (norms) = 218,103,808; attention 4*q = 16,384.
  EXPECT_EQ(block.forward_flops.at(1, 1), 2.0 * 218'103'808 + 16'384);
  EXPECT_EQ(block.attention_flops.at(3, 100), 4.0 * 4096 * 3 * 100 * 100);
  EXPECT_EQ(costs_of(m, "lm_head").forward_flops.at(2, 10), 2.0 * 4096 * 128256 * 2 * 10);
  // Whole model at b = 1, s = 8192: 2*(32*218,103,808 + 525,336,576)*s + 32*16,384*s^2.
  const double s = 8192;
  EXPECT_EQ(m.forward_flops(1, s), 2.0 * 7'504'658'432 * s + 524'288.0 * s * s);
  EXPECT_EQ(m.attention_flops(1, s), 524'288.0 * s * s);
}

TEST(ForwardHbmBytes, LedgerTotals) {
  // Llama block: norms 4h, adds 6h, rotary 2(q+kv), SiLU*up 3f elements, 2 bytes each:
  // 2*(10*4096 + 2*4096 + 2*1024 + 3*14336) = 188,416 bytes per token; nothing s^2 with flash.
  Model m = load("llama3.1-8b", true);
  EXPECT_EQ(costs_of(m, "model.layers.0").forward_hbm_bytes.at(1, 1000), 1000 * 188'416.0);
  // GPT-2 eager: 46h per token (norms 8h, adds 12h, GELU 16h, two dropouts 5h each) and
  // 9a per token per position (fused softmax 4a, attention dropout 5a).
  Model gpt2 = load("gpt2", false);
  EXPECT_EQ(costs_of(gpt2, "transformer.h.0").forward_hbm_bytes.at(1, 1000),
            1000 * 46.0 * 768 + 1000.0 * 1000 * 9 * 12);
}

TEST(InputBytes, BlockInputIsTwoBytesPerHiddenElement) {
  Model m = load("qwen2-7b", true);
  EXPECT_EQ(costs_of(m, "model.layers.3").input_bytes.at(4, 512), 2.0 * 3584 * 4 * 512);
}

TEST(Ledgers, ListTheTensorsTheySum) {
  DecoderBlockShape gpt;
  gpt.hidden_size = 1024;
  gpt.num_heads = gpt.num_kv_heads = 16;
  gpt.head_dim = 64;
  gpt.ffn_hidden_size = 4096;
  gpt.attention_dropout = gpt.residual_dropout = true;
  double per_token = 0, per_position = 0;
  for (const CostItem& item : saved_tensors(gpt, false)) {
    per_token += item.bytes_per_token;
    per_position += item.bytes_per_token_per_position;
    EXPECT_FALSE(item.what.empty());
  }
  EXPECT_EQ(per_token, 34.0 * 1024);
  EXPECT_EQ(per_position, 5.0 * 16);
  EXPECT_EQ(gpt.matmul_weights(), 12LL * 1024 * 1024);
}

TEST(PolynomialJson, IntegralCoefficientsAreIntegers) {
  Polynomial p;
  p.terms = {{3, 1, 1}, {2, 1, 1}, {0.5, 1, 2}, {0, 0, 0}};
  nlohmann::json j = polynomial_to_json(p);
  EXPECT_EQ(j.size(), 2u);
  EXPECT_TRUE(j["b*s"].is_number_integer());
  EXPECT_EQ(j["b*s"], 5);
  EXPECT_EQ(j["b*s^2"], 0.5);
}

}  // namespace
}  // namespace fsdpsim::models
