// Cost formulas: Korthikanti et al.'s activation formula reproduced exactly, its
// generalizations (SwiGLU, GQA, parallel residual, flash attention) checked against
// hand-computed numbers, and FLOPs against the PaLM convention.
#include <gtest/gtest.h>
#include <utility>

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

// Llama-3.1-8B's decoder block as the importer describes it (h 4096, 32 query and 8 kv heads of
// 128, SwiGLU 14336, rotary; the defaults for the rest: pre-norm Python RMSNorms, no dropout).
DecoderBlockShape llama31_8b_block() {
  DecoderBlockShape b;
  b.hidden_size = 4096;
  b.num_heads = 32;
  b.num_kv_heads = 8;
  b.head_dim = 128;
  b.ffn_hidden_size = 14336;
  b.gated_mlp = b.rotary = true;
  return b;
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

// Llama: no dropout, SwiGLU (8f: gate out, SiLU out, up out, product), Hugging Face's Python
// RMSNorm, which keeps its fp32 input copy (4h), its fp32 rsqrt (4), its 16-bit cast (2h) and not
// its 16-bit input; its output (2h) is the next projections' input ([Python RMSNorm]).
// Per token: 2 x (8h + 4) (two norms) + 4q (q, attention output) + 4kv (k, v) + 8f.
TEST(SavedActivations, LlamaGeneralization) {
  // Llama-2-7B (MHA): 16*4096 + 8 + 4*4096 + 4*4096 + 8*11008 = 186,376 bytes per token.
  Model llama2 = load("llama2-7b", true);
  EXPECT_EQ(costs_of(llama2, "model.layers.0").saved_activation_bytes.at(1, 4096), 4096.0 * 186'376);
  // Llama-3.1-8B (GQA, kv = 1024): 65,544 + 16,384 + 4,096 + 114,688 = 200,712 per token.
  Model llama3 = load("llama3.1-8b", true);
  EXPECT_EQ(costs_of(llama3, "model.layers.7").saved_activation_bytes.at(2, 8192), 2.0 * 8192 * 200'712);
  // Eager attention: k and v repeated to 32 heads (4q instead of 4kv: 213,000 per token)
  // plus, per token per key, Llama's fp32 softmax: its fp32 output 4a (softmax's backward
  // input) and the 16-bit copy AV reads 2a (modeling_llama.py eager_attention_forward:
  // softmax(attn_weights, dtype=torch.float32).to(query.dtype)), no attention dropout.
  Model eager = load("llama3.1-8b", false);
  EXPECT_EQ(costs_of(eager, "model.layers.7").saved_activation_bytes.at(2, 8192),
            2.0 * 8192 * (213'000 + (4 + 2) * 32 * 8192.0));
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
  // The final norm, a Python RMSNorm: fp32 input copy 4h, rsqrt 4, 16-bit cast 2h.
  EXPECT_EQ(costs_of(m, "model.norm").saved_activation_bytes.at(1, 1), 6.0 * 4096 + 4);
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
  // 19a per token per position, kernel by kernel (modeling_gpt2.py eager_attention_forward):
  // the scale (read, write: 4a), the mask add (read the scores and the mask, write: 6a), the
  // 16-bit softmax (4a), attention dropout (read, write, mask: 5a).
  Model gpt2 = load("gpt2", false);
  EXPECT_EQ(costs_of(gpt2, "transformer.h.0").forward_hbm_bytes.at(1, 1000),
            1000 * 46.0 * 768 + 1000.0 * 1000 * 19 * 12);
  // Llama's shared eager path (no dropout): repeat_kv copies k and v to 32 heads (read 1024,
  // write 4096, 2 bytes, each: 2 x 2 x 5120 per token), and per token per position: scale 4a,
  // mask add 6a, softmax to fp32 (read 2, write 4: 6a), the cast back to 16 bits (read 4,
  // write 2: 6a) = 22a.
  Model eager_llama = load("llama3.1-8b", false);
  EXPECT_EQ(costs_of(eager_llama, "model.layers.0").forward_hbm_bytes.at(1, 1000),
            1000 * (188'416.0 + 2 * 2 * 5120) + 1000.0 * 1000 * 22 * 32);
}

// [Kernel launch order], read off each family's forward in huggingface/transformers:
// LlamaDecoderLayer: input_layernorm (m); q, k, v projections (g g g); apply_rotary_pos_emb (m);
// SDPA (a); o_proj (g); residual add (m); post_attention_layernorm (m); gate, up (g g);
// act_fn(gate) * up (m); down (g); residual add (m).
// GPT2Block: ln_1 (m); c_attn, one fused qkv (g); SDPA (a); c_proj (g); resid_dropout, add, ln_2
// (m m m); c_fc (g); gelu (m); c_proj (g); dropout, add (m m).
// Eager Llama: repeat_kv's copy and the score chain (scale, mask, fp32 softmax, the cast) run
// after rotary, before attention's matmuls.
// A MoE block's routed kernels are not placed: no order.
TEST(LaunchOrder, EachFamilysForwardInOrder) {
  EXPECT_EQ(costs_of(load("llama3.1-8b", true), "model.layers.0").launch_order, "mgggmagmmggmgm");
  EXPECT_EQ(costs_of(load("gpt2", true), "transformer.h.0").launch_order, "mgagmmmgmgmm");
  EXPECT_EQ(costs_of(load("llama3.1-8b", false), "model.layers.0").launch_order, "mgggmmmmmmagmmggmgm");
  EXPECT_EQ(block_launch_order(llama31_8b_block(), true), "mgggmagmmggmgm");
  EXPECT_EQ(costs_of(load("mixtral-8x7b", true), "model.layers.0").launch_order, "");
}

// The b*s^2 coefficient: bytes per token per key, what eager attention's score chain adds.
double per_token_per_key(const Polynomial& p) {
  double c = 0;
  for (const Polynomial::Term& t : p.terms)
    if (t.b_pow == 1 && t.s_pow == 2) c += t.coeff;
  return c;
}

// Each family's eager_attention_forward, kernel by kernel on the score matrix (read in
// huggingface/transformers; docs/model-schema.md, "Eager attention, op by op"), per token per
// key with a heads (16-bit scores 2a, fp32 4a; no attention dropout in these configs):
//   saved:   the softmax's output (2a in 16 bits, else 4a) and, where it ran in fp32, the
//            16-bit copy AV reads (2a);
//   forward: the largest moment: an out-of-place op's input and output (2 x 2a), or
//            .float()'s 16-bit input and fp32 output (6a);
//   backward: the cast's backward (2a + 4a), the fp32 softmax's backward (4a + 4a), or a
//            16-bit gradient and the one the next op writes (4a);
//   HBM:     every kernel's reads and writes.
TEST(EagerScoreChain, EachFamilyAsTransformersRunsIt) {
  struct Family {
    const char* config;
    const char* block;
    double saved, forward, backward, forward_hbm, backward_hbm;
  };
  const Family families[] = {
      // MPT-7B (a = 32, ALiBi): * softmax_scale, + position_bias, masked_fill with the bool
      // mask, softmax(scores.float()).to(dtype). Saved 4a + 2a = 192; forward .float() 2a + 4a
      // = 192; backward the fp32 softmax's 4a + 4a = 256. HBM forward: scale 4a, ALiBi add 4a,
      // masked_fill 5a (the bool mask read), .float() 6a, fp32 softmax 8a, cast 6a = 33a =
      // 1,056; backward: the cast's 6a, the fp32 softmax's (two fp32 in, fp32 out) 12a,
      // .float()'s 6a, masked_fill's 5a, the scale's 4a (the add passes it on) = 33a = 1,056.
      {"mpt-7b", "transformer.blocks.0", 192, 192, 256, 1056, 1056},
      // Falcon-7B (a = 71): attention_scores /= sqrt(d) in place (no new tensor, but a new
      // gradient in backward), + attention_mask, softmax in 16 bits. Saved 2a = 142; forward the
      // scores and the masked scores 4a = 284; backward 4a = 284. HBM forward 4a + 6a + 4a =
      // 14a = 994; backward the softmax's 6a and the division's 4a = 10a = 710.
      {"falcon-7b", "transformer.h.0", 142, 284, 284, 994, 710},
      // gpt-oss-20b (a = 64): * scaling, + mask, cat with the sinks, minus the row maximum,
      // softmax in 16 bits. Saved 2a = 128; forward 4a = 256; backward 4a = 256 (max's backward
      // writes a new gradient). HBM forward 4a + 6a + 4a (cat) + 2a (max) + 4a (subtract) + 4a
      // = 24a = 1,536; backward the softmax's 6a, max's 2a, the scale's 4a = 12a = 768.
      {"gpt-oss-20b", "model.layers.0", 128, 256, 256, 1536, 768},
      // Llama-3.1-8B (a = 32), the shared path: saved 4a + 2a = 192 (3x what a 16-bit softmax
      // would save); forward 4a = 128; backward the cast's 2a + 4a = 192. HBM forward scale 4a,
      // mask add 6a, softmax to fp32 6a, cast 6a = 22a = 704; backward the cast's 6a, the
      // softmax's (fp32 gradient and output in, 16-bit out) 10a, the scale's 4a = 20a = 640.
      {"llama3.1-8b", "model.layers.0", 192, 128, 192, 704, 640},
  };
  for (const Family& f : families) {
    SCOPED_TRACE(f.config);
    const Model model = load(f.config, false);
    const ModuleCosts& c = costs_of(model, f.block);
    EXPECT_EQ(per_token_per_key(c.saved_activation_bytes), f.saved);
    EXPECT_EQ(per_token_per_key(c.forward_transient_bytes), f.forward);
    EXPECT_EQ(per_token_per_key(c.backward_transient_bytes), f.backward);
    EXPECT_EQ(per_token_per_key(c.forward_hbm_bytes), f.forward_hbm);
    ASSERT_TRUE(c.backward_hbm_bytes.has_value());
    EXPECT_EQ(per_token_per_key(*c.backward_hbm_bytes), f.backward_hbm);
  }
}

// The eager factor a block's per-token traffic takes without torch.compile, op by op
// (calibration.json's derivation of eager_memory_bound_factor, per block):
// Llama-3.1-8B with SDPA: fused 188,416 bytes per token (ForwardHbmBytes.LedgerTotals) plus
//   two Python RMSNorms (36 - 4) x 2 x 4096 = 262,144, rotary (20 - 4) x (4096 + 1024) = 81,920,
//   SwiGLU as silu then the product (10 - 6) x 14,336 = 57,344, repeat_kv's copies of k and v
//   2 x 2 x 5120 = 20,480, the attention output's transpose(1, 2).contiguous() 4 x 4096 = 16,384:
//   626,688 / 188,416.
// GPT-2 small eager: fused 46h, plus gelu_new's eight kernels (36 - 4) x 4h = 128h, the
//   output's layout copy 4h and torch.matmul's copies of q, k and v 12h (LayerNorm is one
//   native kernel): 190h / 46h.
TEST(EagerScoreChain, EagerFactorCountsEachFamilysKernels) {
  const Model llama = load("llama3.1-8b", true);
  EXPECT_DOUBLE_EQ(*costs_of(llama, "model.layers.0").eager_hbm_factor, 626'688.0 / 188'416.0);
  const Model gpt2 = load("gpt2", false);
  EXPECT_DOUBLE_EQ(*costs_of(gpt2, "transformer.h.0").eager_hbm_factor, 190.0 / 46.0);
}

// The backward moments of Llama's shared path one by one (a = 32 heads, bytes per token per
// key): AV's backward writes the 16-bit gradient of the probabilities (2a = 64); the cast's
// backward copies it to fp32 beside it (2a + 4a = 192); softmax's backward reads the fp32
// gradient and writes the scores' 16-bit one (4a + 2a = 192); the scale's backward writes a
// new gradient beside it (2a + 2a = 128); the mask add passes it on (no moment).
TEST(EagerScoreChain, BackwardMomentsOneByOne) {
  const DecoderBlockShape llama = llama31_8b_block();
  const TransientLedger ledger = block_transients(llama, /*flash_attention=*/false);
  std::vector<std::pair<std::string, double>> per_key;
  for (const TransientMoment& m : ledger.backward) {
    double bytes = 0;
    for (const CostItem& t : m.tensors) bytes += t.bytes_per_token_per_position;
    if (bytes > 0) per_key.emplace_back(m.when, bytes);
  }
  const std::vector<std::pair<std::string, double>> expected = {
      {"AV backward (bmm)", 64},
      {"cast backward: the probabilities' gradient to fp32", 192},
      {"softmax backward", 192},
      {"scale (attn_weights * scaling) backward", 128},
      {"QK^T backward (bmm)", 64}};
  EXPECT_EQ(per_key, expected);
}

TEST(EagerScoreChain, FalconAlibiIsRefusedWithEagerAttention) {
  // Falcon's ALiBi path upcasts the scores to fp32 before the bias: not listed, so refused.
  nlohmann::json falcon = load_json_file(hf_config_path("falcon-7b"));
  falcon["alibi"] = true;
  HfImportOptions eager;
  eager.flash_attention = false;
  try {
    import_hf_config(falcon, "falcon.json", eager);
    FAIL() << "an eager Falcon with ALiBi was imported";
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), "alibi");
    EXPECT_NE(std::string(e.what()).find("eager attention"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(import_hf_config(falcon, "falcon.json", HfImportOptions{}));
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
  gpt.eager.softmax = DecoderBlockShape::EagerSoftmax::activation_dtype;
  gpt.eager_elementwise.python_rms_norm = false;  // GPT's LayerNorm: one kernel, saves its input
  auto sums = [](const std::vector<CostItem>& items) {
    double per_token = 0, per_position = 0;
    for (const CostItem& item : items) {
      per_token += item.bytes_per_token;
      per_position += item.bytes_per_token_per_position;
      EXPECT_FALSE(item.what.empty());
    }
    return std::make_pair(per_token, per_position);
  };
  // Korthikanti's 34h + 5as/h: a 16-bit softmax output 2, the dropout mask 1, its output 2.
  EXPECT_EQ(sums(saved_tensors(gpt, false)), std::make_pair(34.0 * 1024, 5.0 * 16));
  // Softmax upcast to fp32 (Llama's shared path): its fp32 output 4, the mask 1, dropout's
  // output 2; the cast's 16-bit copy is dropout's input only, not saved.
  gpt.eager.softmax = DecoderBlockShape::EagerSoftmax::fp32_output;
  EXPECT_EQ(sums(saved_tensors(gpt, false)), std::make_pair(34.0 * 1024, 7.0 * 16));
  EXPECT_EQ(gpt.matmul_weights(), 12LL * 1024 * 1024);
}

// Op-level selective activation checkpointing (torchtitan, selective_ac_option = "op"):
// outputs of aten.mm #1, #3, #5, #7 and of the SDPA op are kept, the block input is held by
// the checkpoint, everything else is recomputed. Llama-3.1-8B, by hand (h = q = 4096,
// kv = 8*128 = 1024, f = 14336), per token:
//   mm order: q_proj #1 (saved), k_proj #2, v_proj #3 (saved), o_proj #4, gate #5 (saved),
//   up #6, down #7 (saved).
//   kept: x 2*4096 = 8,192; q 2*4096 = 8,192; v 2*1024 = 2,048; SDPA out 2*4096 = 8,192;
//         gate 2*14,336 = 28,672; down 2*4096 = 8,192; sum 63,488 bytes (vs 167,936 without
//         checkpointing and 8,192 with full checkpointing).
//   recomputed: k 4096*1024 = 4,194,304; o 4096*4096 = 16,777,216; up 4096*14336 =
//         58,720,256 multiply-adds; 2 FLOPs each: 159,383,552 FLOPs (36.5% of the block's
//         436,207,616 matmul FLOPs; the attention is kept).
TEST(SelectiveOpCheckpointing, Llama31_8bByHand) {
  Model m = load("llama3.1-8b", true);
  const ModuleCosts& block = costs_of(m, "model.layers.0");
  EXPECT_EQ(block.sac_saved_activation_bytes.at(1, 1), 63'488.0);
  EXPECT_EQ(block.sac_saved_activation_bytes.at(2, 8192), 2.0 * 8192 * 63'488);
  EXPECT_EQ(block.sac_recompute_flops.at(1, 1), 159'383'552.0);
  EXPECT_EQ(block.sac_recompute_flops.at(2, 8192), 2.0 * 8192 * 159'383'552);
  for (const Polynomial::Term& t : block.sac_saved_activation_bytes.terms) EXPECT_LT(t.s_pow, 2);
  // Only the blocks carry SAC costs: torchtitan wraps nothing else.
  EXPECT_TRUE(costs_of(m, "lm_head").sac_saved_activation_bytes.empty());
  EXPECT_TRUE(costs_of(m, "model.embed_tokens").sac_recompute_flops.empty());

  // The ledger lists what it sums, in forward order.
  const DecoderBlockShape shape = llama31_8b_block();
  const std::vector<CostItem> kept = sac_saved_tensors(shape, true);
  ASSERT_EQ(kept.size(), 6u);
  const double expected[] = {8192, 8192, 2048, 8192, 28672, 8192};
  for (std::size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i].bytes_per_token, expected[i]) << kept[i].what;
  EXPECT_NE(kept[1].what.find("q projection"), std::string::npos);
  EXPECT_NE(kept[3].what.find("SDPA"), std::string::npos);
  const std::vector<FlopItem> redone = sac_recomputed_matmuls(shape, true);
  ASSERT_EQ(redone.size(), 3u);
  EXPECT_EQ(redone[0].flops_per_token, 2.0 * 4096 * 1024);   // k
  EXPECT_EQ(redone[1].flops_per_token, 2.0 * 4096 * 4096);   // o
  EXPECT_EQ(redone[2].flops_per_token, 2.0 * 4096 * 14336);  // up
}

TEST(SelectiveOpCheckpointing, EagerAttentionIsRecomputed) {
  // Eager attention (bmm, softmax) is not in the save list: no SDPA output kept, QK^T and AV
  // recomputed, and no s^2 term survives to backward.
  Model m = load("llama3.1-8b", false);
  const ModuleCosts& block = costs_of(m, "model.layers.0");
  EXPECT_EQ(block.sac_saved_activation_bytes.at(1, 1), 63'488.0 - 8'192);
  EXPECT_EQ(block.sac_recompute_flops.at(1, 1000), 1000 * 159'383'552.0 + 1000.0 * 1000 * 4 * 4096);
}

TEST(SelectiveOpCheckpointing, BiasesAndFusedProjectionsChangeTheCount) {
  // GPT-2 small: every projection is biased (Conv1D = torch.addmm), so no aten.mm is saved:
  // kept x 2h + SDPA output 2h = 3,072 bytes per token; all four projections recomputed (the
  // last one too, since the residual dropout after it saves a mask):
  // 2*(768*2304 + 768*768 + 768*3072 + 3072*768) = 14,155,776 FLOPs per token.
  Model gpt2 = load("gpt2", true);
  EXPECT_EQ(costs_of(gpt2, "transformer.h.0").sac_saved_activation_bytes.at(1, 1), 3'072.0);
  EXPECT_EQ(costs_of(gpt2, "transformer.h.0").sac_recompute_flops.at(1, 1), 14'155'776.0);
  // MPT-7B (no biases, fused Wqkv): mm #1 Wqkv (3h) and #3 up_proj (4h) kept, #2 out_proj
  // recomputed, #4 down_proj is last and not needed in backward (no dropout):
  // kept 2h + 6h + 2h (SDPA) + 8h = 18h = 73,728; recomputed 2*h*h = 33,554,432.
  Model mpt = load("mpt-7b", true);
  EXPECT_EQ(costs_of(mpt, "transformer.blocks.0").sac_saved_activation_bytes.at(1, 1), 73'728.0);
  EXPECT_EQ(costs_of(mpt, "transformer.blocks.0").sac_recompute_flops.at(1, 1), 33'554'432.0);
  // Qwen2-7B: q/k/v biased (addmm), o_proj is mm #1 (kept), gate #2, up #3 (kept), down #4:
  // kept 2*3584*3 + 2*18944 = 59,392; recomputed 2*(3584*3584 + 2*3584*512 + 3584*18944).
  Model qwen = load("qwen2-7b", true);
  EXPECT_EQ(costs_of(qwen, "model.layers.0").sac_saved_activation_bytes.at(1, 1), 59'392.0);
  EXPECT_EQ(costs_of(qwen, "model.layers.0").sac_recompute_flops.at(1, 1), 168'820'736.0);
}

// Transient memory, by hand, for Llama-3.1-8B (h = 4096, heads 32 x 128, kv = 8 x 128 = 1024,
// f = 14336, V = 128256) at b = 2, s = 8192: b*s = 16,384 tokens. Bytes per token first.
//
// Output layer + loss (HF ForCausalLMLoss / torchtitan: logits.float(), then cross_entropy):
//   forward, at logits.float() and at log_softmax: bf16 logits 2V + fp32 logits 4V = 6V
//     = 769,536 (the log-probabilities, 4V, are saved, not transient);
//   backward: nll_loss backward writes the log-probabilities' gradient (fp32, 4V); log_softmax
//     backward writes the logits' fp32 gradient (4V) while that is held: 8V = 1,026,048; then
//     the cast to bf16 (4V + 2V = 6V) and the projection's backward (2V + its input gradient
//     2h = 264,704) are smaller. 8V is the peak; the input gradient is included at its moment.
TEST(TransientMemory, Llama31_8bOutputLayerAndLossByHand) {
  Model m = load("llama3.1-8b", true);
  const ModuleCosts& head = costs_of(m, "lm_head");
  const double tokens = 2.0 * 8192;
  EXPECT_EQ(head.forward_transient_bytes.at(1, 1), 769'536.0);
  EXPECT_EQ(head.forward_transient_bytes.at(2, 8192), 12'608'077'824.0);  // 11.74 GiB
  EXPECT_EQ(head.forward_transient_bytes.at(2, 8192), tokens * (2 + 4) * 128256);
  EXPECT_EQ(head.backward_transient_bytes.at(1, 1), 1'026'048.0);
  EXPECT_EQ(head.backward_transient_bytes.at(2, 8192), 16'810'770'432.0);  // 15.66 GiB
  const TransientLedger ledger = lm_head_transients(4096, 128256);
  ASSERT_EQ(ledger.backward.size(), 4u);
  EXPECT_EQ(largest_moment(ledger.backward, 2, 8192), 1u);  // log_softmax backward
  EXPECT_NE(ledger.backward[1].when.find("log_softmax backward"), std::string::npos);
  EXPECT_EQ(moment_bytes(ledger.backward[2]).at(1, 1), 6.0 * 128256);               // cast to bf16
  EXPECT_EQ(moment_bytes(ledger.backward[3]).at(1, 1), 2.0 * 128256 + 2.0 * 4096);  // + input gradient
}

// The same output layer with the loss on the 16-bit logits (no upcast; KempnerForge's
// F.cross_entropy(logits.view(-1, V), ...)), per token, V = 128,256, h = 4,096:
//   saved: the projection's input 2h + the 16-bit log-probabilities 2V = 264,704;
//   forward: the 16-bit logits (2V = 256,512) beside the saved log-probabilities;
//   backward: nll_loss's gradient 2V, then log_softmax's backward holds it and writes the
//   logits' gradient: 4V = 513,024 (the peak); then the projection's: 2V + 2h = 264,704.
// For b = 4, s = 4096 (KempnerForge 13B's micro-batch): 16,384 tokens x 4V = 8.41e9 bytes.
// torchtitan's op-level SAC on a Llama-3.1-8B block saves the 7th aten.mm, the down
// projection's output (2h = 8,192 bytes per token), which only the residual add reads: no
// backward node needs it. Compiled blocks drop it; GPT-2's projections are aten.addmm (none
// saved), so nothing is unread there.
TEST(SelectiveOpCheckpointing, UnreadSavedOutputByHand) {
  Model m = load("llama3.1-8b", true);
  EXPECT_EQ(costs_of(m, "model.layers.0").sac_unread_bytes.at(1, 1), 8192.0);
  EXPECT_EQ(costs_of(m, "model.layers.0").sac_unread_bytes.at(2, 8192), 8192.0 * 2 * 8192);
  Model g = load("gpt2", false);
  EXPECT_TRUE(costs_of(g, "transformer.h.0").sac_unread_bytes.empty());
}

TEST(TransientMemory, SixteenBitLossByHand) {
  const ModuleCosts head = lm_head_costs(4096, 128256, LossKind::bf16);
  EXPECT_EQ(head.saved_activation_bytes.at(1, 1), 2.0 * 4096 + 2.0 * 128256);
  EXPECT_EQ(head.forward_transient_bytes.at(1, 1), 2.0 * 128256);
  EXPECT_EQ(head.backward_transient_bytes.at(1, 1), 4.0 * 128256);
  EXPECT_EQ(head.backward_transient_bytes.at(4, 4096), 16384.0 * 4 * 128256);
  // The fp32 loss of the same layer: saved 2h + 4V, forward 6V, backward 8V.
  const ModuleCosts fp32 = lm_head_costs(4096, 128256);
  EXPECT_EQ(fp32.saved_activation_bytes.at(1, 1), 2.0 * 4096 + 4.0 * 128256);
  EXPECT_EQ(fp32.forward_transient_bytes.at(1, 1), 6.0 * 128256);
  EXPECT_EQ(fp32.backward_transient_bytes.at(1, 1), 8.0 * 128256);
  const TransientLedger ledger = lm_head_transients(4096, 128256, LossKind::bf16);
  ASSERT_EQ(ledger.backward.size(), 3u);
  EXPECT_EQ(largest_moment(ledger.backward, 4, 4096), 1u);  // log_softmax backward
  // The largest single transient tensor: the fp32 logits (or their gradient), 4V; 16-bit: 2V.
  EXPECT_EQ(fp32.transient_tensor_bytes.at(1, 1), 4.0 * 128256);
  EXPECT_EQ(head.transient_tensor_bytes.at(1, 1), 2.0 * 128256);
  // The importer writes it when asked.
  HfImportOptions options;
  options.fp32_loss = false;
  Model m = load_hf_config(hf_config_path("kempnerforge-7b"), options);
  EXPECT_EQ(costs_of(m, "lm_head").backward_transient_bytes.at(1, 1), 4.0 * 128256);
}

// One Llama-3.1-8B decoder block, flash attention (SDPA flash / FlashAttention-2), per token:
//   forward: everything the block computes is saved except q and k before rotary
//     (2*4096 + 2*1024 = 10,240, alive until both are rotated), the o_proj output (8,192) and,
//     at the end, the down_proj output with the block output: 2h + 2h = 16,384. Peak 16,384.
//   backward: the residual stream's gradient G (2h = 8,192) is alive throughout (the output's,
//     summed in place into the input's). The MLP's product backward holds d(SiLU*up) and
//     writes d(SiLU out) and d(up) at once: G + 3 x 2f = 8,192 + 86,016 = 94,208, the peak.
//     Then up_proj's backward: G + d(silu) + d(up) + d(norm out) = 73,728; SiLU's: G +
//     d(silu) + d(gate) + d(norm out) = 73,728; gate_proj's: 53,248. Flash attention backward:
//     G 8,192 + dO 8,192 + dq 8,192 + dk 2,048 + dv 2,048 + dk, dv per query head (GQA)
//     2 x 8,192 + fp32 dq accumulator 4*32*128 = 16,384 + fp32 softmax_d 4*32 = 128: 61,568.
TEST(TransientMemory, Llama31_8bDecoderBlockByHand) {
  Model m = load("llama3.1-8b", true);
  const ModuleCosts& block = costs_of(m, "model.layers.0");
  EXPECT_EQ(block.forward_transient_bytes.at(1, 1), 16'384.0);
  EXPECT_EQ(block.forward_transient_bytes.at(2, 8192), 268'435'456.0);  // 256 MiB
  EXPECT_EQ(block.backward_transient_bytes.at(1, 1), 94'208.0);
  EXPECT_EQ(block.backward_transient_bytes.at(2, 8192), 1'543'503'872.0);  // 1.44 GiB
  EXPECT_EQ(block.backward_transient_bytes.at(2, 8192), 2.0 * 8192 * (2 * 4096 + 3 * 2 * 14336));

  const DecoderBlockShape shape = llama31_8b_block();
  const TransientLedger ledger = block_transients(shape, true);
  const TransientMoment& peak = ledger.backward[largest_moment(ledger.backward, 2, 8192)];
  EXPECT_NE(peak.when.find("MulBackward0"), std::string::npos) << peak.when;
  ASSERT_EQ(peak.tensors.size(), 4u);  // G, d(SiLU*up), d(SiLU out), d(up)
  bool found_flash = false;
  for (const TransientMoment& moment : ledger.backward) {
    // The stream gradient (the block's input gradient at the end) is in every moment.
    EXPECT_GE(moment_bytes(moment).at(1, 1), 8'192.0) << moment.when;
    if (moment.when.find("flash attention backward") == std::string::npos) continue;
    found_flash = true;
    EXPECT_EQ(moment_bytes(moment).at(1, 1), 61'568.0);
  }
  EXPECT_TRUE(found_flash);
  EXPECT_EQ(moment_bytes(ledger.forward.front()).at(1, 1), 10'240.0);  // q, k before rotary
}

// DeepSeek-V2-Lite's dense layer (MLA: 16 heads, q/k 192 = 128 + 64 rope, v 128, kv_lora_rank
// 512, no q_lora_rank; h 2048, f 10944), bytes per token by hand. Forward: transformers' locals
// keep q_proj's output 2*16*192 = 6,144, the rotated q rope 2*16*64 = 2,048 and k rope 2*64 =
// 128 until the attention returns, with o_proj's output 4,096: 12,416. Backward: flash
// attention's moment is G 4,096 + dO 2*16*128 = 4,096 + dq, dk 6,144 each + dv 4,096 + the fp32
// dq accumulator 4*16*192 = 12,288 + softmax_d 4*16 = 64: 36,928; kv_b_proj's split backward
// G + dq + dk + dv + dq rope 2,048 + dk rope 128 + d(kv_b output) 2*16*256 = 8,192: 30,848. The
// block's peak stays the SwiGLU product's: G + 3 x 2 x 10944 = 69,760.
TEST(TransientMemory, DeepSeekMlaBlockByHand) {
  DecoderBlockShape shape;
  shape.hidden_size = 2048;
  shape.num_heads = shape.num_kv_heads = 16;
  shape.head_dim = 192;
  shape.ffn_hidden_size = 10944;
  shape.gated_mlp = shape.rotary = true;
  shape.mla.kv_lora_rank = 512;
  shape.mla.rope_head_dim = 64;
  shape.mla.v_head_dim = 128;
  const TransientLedger ledger = block_transients(shape, true);
  EXPECT_EQ(peak_transient_bytes(ledger.forward).at(1, 1), 12'416.0);
  EXPECT_EQ(peak_transient_bytes(ledger.backward).at(1, 1), 69'760.0);
  int checked = 0;
  for (const TransientMoment& moment : ledger.backward) {
    if (moment.when.find("flash attention backward") != std::string::npos) {
      EXPECT_EQ(moment_bytes(moment).at(1, 1), 36'928.0);
      ++checked;
    }
    if (moment.when.find("split backward of kv_b_proj") != std::string::npos) {
      EXPECT_EQ(moment_bytes(moment).at(1, 1), 30'848.0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
}

TEST(TransientMemory, EmbeddingAndFinalNorm) {
  Model m = load("llama3.1-8b", true);
  // Embedding: forward, its output 2h; backward, the incoming gradient 2h + fp32 partial sums
  // 4h (one row per token) + six int64 index arrays 48 = 24,624 per token.
  EXPECT_EQ(costs_of(m, "model.embed_tokens").forward_transient_bytes.at(1, 1), 8'192.0);
  EXPECT_EQ(costs_of(m, "model.embed_tokens").backward_transient_bytes.at(1, 1), 24'624.0);
  // Final norm: forward, its output 2h; backward, the output's and the input's gradients 4h.
  EXPECT_EQ(costs_of(m, "model.norm").forward_transient_bytes.at(1, 1), 8'192.0);
  EXPECT_EQ(costs_of(m, "model.norm").backward_transient_bytes.at(1, 1), 16'384.0);
  // GPT-2 (h = 768): position rows and dropout. Forward at the dropout: token rows, their sum
  // with the position rows and the dropout output (6h per token) + the position rows (2h per
  // position). Backward: token embedding 2h + 4h + 48 per token; position embedding the same
  // per position (its gradient summed over the batch, partial sums, index arrays).
  Model gpt2 = load("gpt2", true);
  const ModuleCosts& wte = costs_of(gpt2, "transformer.wte");
  EXPECT_EQ(wte.forward_transient_bytes.at(2, 1024), 2 * 1024 * 6.0 * 768 + 1024 * 2.0 * 768);
  EXPECT_EQ(wte.backward_transient_bytes.at(2, 1024), 2 * 1024 * (6.0 * 768 + 48) + 1024 * (6.0 * 768 + 48));
}

TEST(TransientMemory, OtherBlockShapes) {
  // GPT-2 small (flash; dropout 0.1; GELU): forward 4h (a dropout's input and output);
  // backward peak at GELU's backward: G 2h + d(fc2 input) 2f + d(fc1 output) 2f = 18h.
  Model gpt2 = load("gpt2", true);
  EXPECT_EQ(costs_of(gpt2, "transformer.h.0").forward_transient_bytes.at(1, 1), 4.0 * 768);
  EXPECT_EQ(costs_of(gpt2, "transformer.h.0").backward_transient_bytes.at(1, 1), 18.0 * 768);
  // Pythia-1.4B (parallel residual): forward ends with mlp + attention + x: the MLP output,
  // the attention output, their sum and the block output alive at once, 8h = 16,384.
  // Backward: GELU's, 2h + 4f = 4,096 + 32,768 = 36,864.
  Model pythia = load("pythia-1.4b", true);
  EXPECT_EQ(costs_of(pythia, "gpt_neox.layers.0").forward_transient_bytes.at(1, 1), 16'384.0);
  EXPECT_EQ(costs_of(pythia, "gpt_neox.layers.0").backward_transient_bytes.at(1, 1), 36'864.0);
  // Eager attention (GPT-2 small, softmax in 16 bits): in forward the QK^T output and its
  // scaled copy coexist (attn_weights / torch.full(...) is out of place), then the scaled
  // scores and the masked ones: 2 x 2a per token per position; in backward d(probabilities)
  // and d(scores) coexist (4a); per token the MLP still dominates (18h). The two maxima are
  // different moments: the polynomial bounds both.
  Model eager = load("gpt2", false);
  const ModuleCosts& block = costs_of(eager, "transformer.h.0");
  EXPECT_EQ(block.forward_transient_bytes.at(1, 1000), 1000 * 4.0 * 768 + 1000.0 * 1000 * 4 * 12);
  EXPECT_EQ(block.backward_transient_bytes.at(1, 1000), 1000 * 18.0 * 768 + 1000.0 * 1000 * 4 * 12);
}

TEST(TransientMemory, PeakBoundsEveryMomentAndCoversTheInputGradient) {
  for (const char* name : {"llama3.1-8b", "gpt2", "pythia-1.4b", "mpt-7b", "qwen2-7b"}) {
    for (bool flash : {true, false}) {
      SCOPED_TRACE(std::string(name) + (flash ? " flash" : " eager"));
      Model m = load(name, flash);
      for_each_module(m.root, [&](const Module& mod) {
        if (!mod.costs) return;
        for (double b : {1.0, 4.0})
          for (double s : {128.0, 4096.0}) {
            // backward_transient_bytes replaces the planner's input-gradient temporary.
            EXPECT_GE(mod.costs->backward_transient_bytes.at(b, s), mod.costs->input_bytes.at(b, s)) << mod.full_name;
            EXPECT_GT(mod.costs->forward_transient_bytes.at(b, s), 0) << mod.full_name;
          }
      });
    }
  }
  // The coefficient-wise maximum bounds every moment (and equals one with flash attention).
  DecoderBlockShape gpt;
  gpt.hidden_size = 1024;
  gpt.num_heads = gpt.num_kv_heads = 16;
  gpt.head_dim = 64;
  gpt.ffn_hidden_size = 4096;
  gpt.attention_dropout = gpt.residual_dropout = gpt.fused_qkv = true;
  for (bool flash : {true, false}) {
    const TransientLedger ledger = block_transients(gpt, flash);
    for (const auto* phase : {&ledger.forward, &ledger.backward}) {
      const Polynomial peak = peak_transient_bytes(*phase);
      for (double s : {64.0, 1024.0, 8192.0}) {
        for (const TransientMoment& moment : *phase) EXPECT_LE(moment_bytes(moment).at(2, s), peak.at(2, s)) << moment.when;
        if (flash) {
          EXPECT_EQ(moment_bytes((*phase)[largest_moment(*phase, 2, s)]).at(2, s), peak.at(2, s));
        }
      }
    }
  }
}


// ---- issue 15: the new block shapes, by hand (flash attention, bytes per token) ----------------

TEST(NewFamilies, GemmaSandwichNormsSaveTheBranchOutputs) {
  // Gemma-2-9B: h 3584, q 4096, kv 2048, f 14336. Four Python RMSNorms, each keeping its fp32
  // input copy 4h, its rsqrt 4 and its 16-bit cast 2h (not its input: [Python RMSNorm]), their
  // inputs x, o_proj's output, x + attn and down_proj's output: 4 x (6h + 4) = 86,032; the two
  // pre-norms' outputs (the projections' inputs) 4h = 14,336; q, attention output 2 x 2q =
  // 16,384; k, v 2 x 2kv = 8,192; GeGLU 8f = 114,688. Total 239,632.
  Model m = load("gemma2-9b", true);
  const ModuleCosts& block = costs_of(m, "model.layers.0");
  EXPECT_EQ(block.saved_activation_bytes.at(1, 1), 239'632.0);
  // Memory-bound: four norms 4 x 4h, rotary 4(q + kv), two adds 2 x 6h, GeGLU 6f:
  // 57,344 + 24,576 + 43,008 + 86,016 = 210,944.
  EXPECT_EQ(block.forward_hbm_bytes.at(1, 1), 210'944.0);
  // The embedding is scaled: gather 8 + 4h, then the multiply 4h; forward transient: gathered and scaled rows 4h.
  EXPECT_EQ(costs_of(m, "model.embed_tokens").forward_hbm_bytes.at(1, 1), 8.0 + 8 * 3584);
  EXPECT_EQ(costs_of(m, "model.embed_tokens").forward_transient_bytes.at(1, 1), 4.0 * 3584);
  // Soft-capped logits (V 256000): three more ops reading and writing 2V each (12V) and tanh's
  // saved output (2V); the peaks stay the fp32 loss's (6V forward, 8V backward).
  const ModuleCosts& head = costs_of(m, "lm_head");
  const double V = 256000;
  EXPECT_EQ(head.forward_hbm_bytes.at(1, 1), 14 * V + 12 * V);
  EXPECT_EQ(head.saved_activation_bytes.at(1, 1), 2 * 3584 + 4 * V + 2 * V);
  EXPECT_EQ(head.forward_transient_bytes.at(1, 1), 6 * V);
  EXPECT_EQ(head.backward_transient_bytes.at(1, 1), 8 * V);
  // With the 16-bit loss the capping's forward moment (the logits and their quotient, 4V) is the peak.
  EXPECT_EQ(lm_head_costs(3584, 256000, LossKind::bf16, 0, true).forward_transient_bytes.at(1, 1), 4 * V);
  EXPECT_THROW(lm_head_costs(3584, 256000, LossKind::fused, 0, true), std::invalid_argument);
}

TEST(NewFamilies, QkNormsSaveTheProjectionOutputs) {
  // Qwen3-0.6B: h 1024, q 2048 (16 heads), kv 1024 (8 heads), f 3072, tied. Every norm a Python
  // RMSNorm ([Python RMSNorm]: fp32 input copy 4w, rsqrt 4 per row, 16-bit cast 2w). The two
  // block norms 2 x (6h + 4) and their outputs 2 x 2h = 16,392; the q and k norms, per head:
  // 6q + 4 x 16 + 6kv + 4 x 8 = 18,528; q, k, v, attention output 2q + 2kv + 2kv + 2q = 12,288;
  // SwiGLU 8f = 24,576.
  Model m = load("qwen3-0.6b", true);
  EXPECT_EQ(costs_of(m, "model.layers.0").saved_activation_bytes.at(1, 1), 16'392.0 + 18'528 + 12'288 + 24'576);
  // OLMo-2-7B (post-norm, MHA h = q = kv = 4096 in 32 heads, f 11008): the post-attention and
  // post-feedforward norms 2 x (6h + 4), x and x + attn (the projections' inputs) 4h, the q/k
  // norms 12h + 2 x 4 x 32, q k v out 8h, 8f.
  Model olmo = load("olmo2-7b", true);
  EXPECT_EQ(costs_of(olmo, "model.layers.0").saved_activation_bytes.at(1, 1),
            36.0 * 4096 + 8 + 256 + 8 * 11008);
}

TEST(NewFamilies, FalconAndPhi3ByHand) {
  // Falcon-7B (one norm, parallel, MQA: kv = 64, f = 4h): x 2h, norm output 2h, q 2h, k 128,
  // v 128, attention output 2h, fc1 and GELU outputs 2 x 8h = 24h + 256 = 109,312.
  Model falcon = load("falcon-7b", true);
  const ModuleCosts& block = costs_of(falcon, "transformer.h.0");
  EXPECT_EQ(block.saved_activation_bytes.at(1, 1), 24.0 * 4544 + 256);
  // Forward ends with the attention output held, the MLP output (the attention added in place)
  // and the block output: 6h (GPT-NeoX's out-of-place sum is 8h).
  EXPECT_EQ(block.forward_transient_bytes.at(1, 1), 6.0 * 4544);
  // Backward peak at GELU's: G 2h + d(fc2 input) 2f + d(fc1 output) 2f = 18h.
  EXPECT_EQ(block.backward_transient_bytes.at(1, 1), 18.0 * 4544);
  // Phi-3.5-mini (h 3072, f 8192): the fused gate_up's chunk backward concatenates the halves'
  // gradients while both are alive: G 2h + d(up) 2f + d(gate) 2f + d(gate_up) 4f = 71,680
  // (the product's backward, 2h + 6f = 55,296, is no longer the peak).
  Model phi = load("phi3.5-mini", true);
  EXPECT_EQ(costs_of(phi, "model.layers.0").backward_transient_bytes.at(1, 1), 2.0 * 3072 + 8 * 8192);
  // op-level SAC: qkv (mm 1) and gate_up (mm 3) are kept, o_proj (mm 2) recomputed, down_proj
  // (mm 4, the last) neither: x 2h + qkv 6h + SDPA output 2h + gate_up 4f.
  EXPECT_EQ(costs_of(phi, "model.layers.0").sac_saved_activation_bytes.at(1, 1), 10.0 * 3072 + 4 * 8192);
}

TEST(NewFamilies, SlidingWindowKeepsItsBandOfPairs) {
  AttentionSpec causal{16, 8, 256, true, 0};
  EXPECT_DOUBLE_EQ(attention_pair_fraction(causal, 8192), 0.5);
  AttentionSpec window = causal;
  window.window = 4096;
  // 4096 keys per query past the first 4096: (4096 x 8192 - 4096^2 / 2) / 8192^2 = 0.375.
  EXPECT_DOUBLE_EQ(attention_pair_fraction(window, 8192), 0.375);
  EXPECT_DOUBLE_EQ(attention_window_share(window, 8192), 0.75);
  EXPECT_DOUBLE_EQ(attention_window_share(window, 4096), 1.0);  // the window covers the sequence
  // A long sequence: about 2w/s of the causal work.
  EXPECT_NEAR(attention_window_share(window, 1 << 20), 2.0 * 4096 / (1 << 20), 1e-4);
}

// docs/model-schema.md, "Sliding-window attention": the window changes the attention FLOPs
// (applied by the planner), never the activation bytes. Flash attention saves nothing
// quadratic, window or not; eager attention materializes the whole s x s score matrix in
// transformers and masks it, so its s^2 terms are the full attention's.
TEST(NewFamilies, SlidingWindowLeavesTheActivationBytesWhole) {
  // Mistral-7B: every layer a window of 4096; h 4096, 32 heads (q 4096), 8 kv heads (kv 1024),
  // f 14336 (Llama-3.1-8B's block). Flash attention, per token:
  //   saved: the two Python RMSNorms' fp32 input copies, rsqrts, casts and outputs 2 x (8h + 4)
  //     65,544 + q and the attention output 4q 16,384 + k and v 4kv 4,096 + SwiGLU 8f 114,688
  //     = 200,712;
  //   forward transient: the MLP output with the block output, 4h = 16,384;
  //   backward transient: G 2h + the SwiGLU product's three gradients 6f = 94,208.
  Model mistral = load("mistral-7b", true);
  const ModuleCosts& windowed = costs_of(mistral, "model.layers.0");
  ASSERT_TRUE(windowed.attention.has_value());
  EXPECT_EQ(windowed.attention->window, 4096);
  for (double s : {1024.0, 4096.0, 32768.0}) {  // below, at and far above the window
    EXPECT_EQ(windowed.saved_activation_bytes.at(2, s), 2 * s * 200'712) << s;
    EXPECT_EQ(windowed.forward_transient_bytes.at(2, s), 2 * s * 16'384) << s;
    EXPECT_EQ(windowed.backward_transient_bytes.at(2, s), 2 * s * 94'208) << s;
  }
  // The same config without the window: the same bytes.
  nlohmann::json full_config = load_json_file(hf_config_path("mistral-7b"));
  full_config.erase("sliding_window");
  const Model full = parse_model(import_hf_config(full_config, "mistral-7b-full.json"), "mistral-7b-full.json");
  const ModuleCosts& whole = costs_of(full, "model.layers.0");
  EXPECT_EQ(whole.attention->window, 0);
  for (double s : {1024.0, 32768.0}) {
    EXPECT_EQ(whole.saved_activation_bytes.at(2, s), windowed.saved_activation_bytes.at(2, s)) << s;
    EXPECT_EQ(whole.forward_transient_bytes.at(2, s), windowed.forward_transient_bytes.at(2, s)) << s;
    EXPECT_EQ(whole.backward_transient_bytes.at(2, s), windowed.backward_transient_bytes.at(2, s)) << s;
  }
  // Eager attention at s = 8192, twice the window: k and v repeated to 32 heads (4q instead of
  // 4kv: 213,000 per token) and, over every key (8192, not the window's 4096), Mistral's fp32
  // softmax (Llama's shared eager path): the fp32 output 4a and the 16-bit copy AV reads 2a,
  // 6a = 192 bytes per token per key. Forward, two 16-bit score tensors at once (QK^T's output
  // and its scaled copy, then the scaled and the masked ones): 2 x 2a = 128 per key. Backward,
  // the cast's backward: the 16-bit gradient of the probabilities (2a) beside its fp32 copy
  // (4a), 192 per key, on top of the per-token peak 94,208 (the polynomial is the
  // coefficient-wise maximum of the moments).
  Model eager = load("mistral-7b", false);
  const ModuleCosts& eager_block = costs_of(eager, "model.layers.0");
  const double s = 8192;
  EXPECT_EQ(eager_block.saved_activation_bytes.at(1, s), s * (213'000 + 192 * s));
  EXPECT_EQ(eager_block.forward_transient_bytes.at(1, s), s * (16'384 + 128 * s));
  EXPECT_EQ(eager_block.backward_transient_bytes.at(1, s), s * (94'208 + 192 * s));
  // Gemma-2-9B alternates a 4096 window (even layers) with full attention (odd layers): the two
  // variants' bytes are equal (saved 239,632 per token: NewFamilies.GemmaSandwichNormsSaveTheBranchOutputs).
  Model gemma = load("gemma2-9b", true);
  const ModuleCosts& sliding = costs_of(gemma, "model.layers.0");
  const ModuleCosts& global = costs_of(gemma, "model.layers.1");
  EXPECT_EQ(sliding.attention->window, 4096);
  EXPECT_EQ(global.attention->window, 0);
  for (double seq : {2048.0, 8192.0}) {
    EXPECT_EQ(sliding.saved_activation_bytes.at(1, seq), seq * 239'632) << seq;
    EXPECT_EQ(global.saved_activation_bytes.at(1, seq), seq * 239'632) << seq;
    EXPECT_EQ(sliding.forward_transient_bytes.at(1, seq), global.forward_transient_bytes.at(1, seq)) << seq;
    EXPECT_EQ(sliding.backward_transient_bytes.at(1, seq), global.backward_transient_bytes.at(1, seq)) << seq;
  }
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

// Each loss kind's ledger for Llama-3.1-8B's output layer (h = 4,096, V = 128,256), per token
// unless stated; the tensors are the ones read in the implementations named in
// models/transformer_costs.cpp.
// fused (flash-attn's CrossEntropyLoss, inplace_backward=True): saved 2h (the projection's
//   input) + 2V (the logits) + 4 (fp32 log-sum-exp) = 264,708; forward: fp32 losses and
//   z-losses per row, 8; backward: the gradient goes over the saved logits, so only the
//   projection's input gradient 2h = 8,192 is new.
TEST(LossKinds, FusedLossByHand) {
  const ModuleCosts c = lm_head_costs(4096, 128256, LossKind::fused);
  EXPECT_EQ(c.saved_activation_bytes.at(1, 1), 264'708.0);
  EXPECT_EQ(c.forward_transient_bytes.at(1, 1), 8.0);
  EXPECT_EQ(c.backward_transient_bytes.at(1, 1), 8'192.0);
  EXPECT_EQ(c.forward_hbm_bytes.at(1, 1), 256'512.0);  // one read of the logits
  EXPECT_FALSE(c.backward_flops.has_value());          // the default 2 x forward
  EXPECT_EQ(c.forward_flops.at(1, 1), 2.0 * 4096 * 128256);
  ASSERT_TRUE(c.loss.has_value());
  EXPECT_EQ(c.loss->kind, LossKind::fused);
  EXPECT_EQ(c.loss->vocab_size, 128256);
  EXPECT_EQ(c.loss->hidden_size, 4096);
}

// torchtune's chunked-output loss, Llama-3.1-8B's head (h 4096, V 128,256), per token: saved 2h +
// 2V + 4 = 264,708; nothing beside them in forward; in backward one chunk's gradient 2V/8 =
// 32,064, then (after the weight gradient) the input gradient's chunks and their concatenation 4h.
TEST(LossKinds, ChunkedOutputLossByHand) {
  const ModuleCosts c = lm_head_costs(4096, 128256, LossKind::chunked_output);
  EXPECT_EQ(c.saved_activation_bytes.at(1, 1), 264'708.0);
  EXPECT_EQ(c.forward_transient_bytes.at(1, 1), 0.0);
  EXPECT_EQ(c.backward_transient_bytes.at(1, 1), 32'064.0);
  EXPECT_EQ(c.backward_transient_after_grads_bytes.at(1, 1), 16'384.0);
  EXPECT_EQ(c.forward_hbm_bytes.at(1, 1), 4.0 * 128256);
  EXPECT_EQ(parse_loss_kind("chunked_output"), LossKind::chunked_output);
  // Eager (training.torch_compile false): each chunk saves its fp32 log-probabilities, 2h + 4V =
  // 521,216; forward holds every chunk's 16-bit logits 2V and one chunk's fp32 copy 4V/8: 320,640;
  // backward the first chunk's two fp32 gradients 2 x 4V/8 = 128,256, then 4h.
  const ModuleCosts eager = lm_head_costs(4096, 128256, LossKind::chunked_output, 0, false, /*compiled_loss=*/false);
  EXPECT_EQ(eager.saved_activation_bytes.at(1, 1), 521'216.0);
  EXPECT_EQ(eager.forward_transient_bytes.at(1, 1), 320'640.0);
  EXPECT_EQ(eager.backward_transient_bytes.at(1, 1), 128'256.0);
  EXPECT_EQ(eager.backward_transient_after_grads_bytes.at(1, 1), 16'384.0);
}

// chunked (Liger's fused linear cross-entropy) at BT = 8,192 tokens: 32 chunks of 256 tokens;
// at BT = 100: inc_factor 32, cdiv(100, 32) = 4 -> 4 tokens; at BT = 5 with V <= H (inc 1):
// next_power_of_2(5) = 8, capped at the 5 tokens there are.
TEST(LossKinds, LigerChunkSizeByHand) {
  EXPECT_EQ(liger_chunk_tokens(8192, 4096, 128256), 256.0);
  EXPECT_EQ(liger_chunk_tokens(100, 4096, 128256), 4.0);
  EXPECT_EQ(liger_chunk_tokens(5, 4096, 1000), 5.0);
  // GPT-2: V = 50,257, h = 768: inc_factor = ceil(65.44) = 66; BT = 8,192: cdiv = 125 -> 128.
  EXPECT_EQ(liger_chunk_tokens(8192, 768, 50257), 128.0);
}

// chunked at BT = 8,192 (b = 2, s = 4,096): forward moments
//   zeroing: grad_weight 2Vh = 1,050,673,152 fixed; loss 4 + mask 1 per token;
//   chunk logits: + 2V x 256/8,192 = 8,016 per token;
//   grad_input slice: + 2h x 256/8,192 = 256 per token;
//   grad_weight +=: 2Vh + 2Vh (mm) + 4Vh (.float()) = 4,202,692,608 fixed, 8,021 per token.
// The largest is the last: 4,202,692,608 + 8,021 x 8,192 = 4,268,400,640; the coefficient-wise
// bound (the ledger's rule) adds the slice's 256 per token: 4,270,497,792. Backward: nothing.
TEST(LossKinds, ChunkedLossByHand) {
  const ModuleCosts c = lm_head_costs(4096, 128256, LossKind::chunked, 8192);
  const TransientLedger ledger = lm_head_transients(4096, 128256, LossKind::chunked, 8192);
  ASSERT_EQ(ledger.forward.size(), 4u);
  EXPECT_EQ(largest_moment(ledger.forward, 2, 4096), 3u);
  EXPECT_EQ(moment_bytes(ledger.forward[3]).at(2, 4096), 4'268'400'640.0);
  EXPECT_EQ(c.forward_transient_bytes.at(2, 4096), 4'270'497'792.0);
  EXPECT_TRUE(c.backward_transient_bytes.empty());
  EXPECT_EQ(c.saved_activation_bytes.at(1, 1), 8'192.0);  // grad_input
  ASSERT_TRUE(c.backward_flops && c.forward_kernel_flops);
  EXPECT_TRUE(c.backward_flops->empty());
  EXPECT_EQ(c.forward_kernel_flops->at(1, 1), 6.0 * 4096 * 128256);
  // Needs the tokens.
  EXPECT_THROW(lm_head_costs(4096, 128256, LossKind::chunked), std::invalid_argument);
}

// cut (Apple's Cut Cross-Entropy): saved 2h + 4 per token (e and the fp32 log-sum-exp) + 4V
// fixed (the fp32 mean logit per vocabulary entry, filter_eps "auto") = 513,024; forward:
// the fp32 negative target logits, 4; backward: the int32 vocabulary order 4V fixed and de, 2h.
TEST(LossKinds, CutLossByHand) {
  const ModuleCosts c = lm_head_costs(4096, 128256, LossKind::cut);
  EXPECT_EQ(c.saved_activation_bytes.at(1, 1), 8'196.0 + 513'024.0);
  EXPECT_EQ(c.saved_activation_bytes.at(2, 1024), 2048.0 * 8'196 + 513'024);
  EXPECT_EQ(c.forward_transient_bytes.at(1, 1), 4.0);
  EXPECT_EQ(c.backward_transient_bytes.at(2, 1024), 2048.0 * 8'192 + 513'024);
  EXPECT_TRUE(c.forward_hbm_bytes.empty());
  EXPECT_EQ(c.backward_flops->at(1, 1), 6.0 * 4096 * 128256);
}

// The model JSON carries the loss head and the work overrides, and reads them back.
TEST(LossKinds, CostsRoundTripThroughTheModelJson) {
  const ModuleCosts c = lm_head_costs(4096, 128256, LossKind::chunked, 8192);
  const nlohmann::json j = costs_to_json(c, "");
  EXPECT_EQ(j["loss"], (nlohmann::json{{"vocab_size", 128256}, {"hidden_size", 4096}, {"kind", "chunked"}}));
  EXPECT_EQ(j["backward_flops"], nlohmann::json::object());
  nlohmann::json model = {{"name", "m"},
                          {"root", {{"type", "M"}, {"children", {{{"name", "lm_head"}, {"type", "Linear"},
                                                          {"params", {{{"name", "weight"}, {"shape", {128256, 4096}}}}},
                                                          {"costs", j}}}}}}};
  const Model m = parse_model(model, "m.json");
  const ModuleCosts& back = *m.find_module("lm_head")->costs;
  ASSERT_TRUE(back.loss && back.backward_flops && back.forward_kernel_flops && back.backward_hbm_bytes);
  EXPECT_EQ(back.loss->kind, LossKind::chunked);
  EXPECT_TRUE(back.backward_flops->empty());
  EXPECT_EQ(back.forward_transient_bytes.at(2, 4096), c.forward_transient_bytes.at(2, 4096));
  model["root"]["children"][0]["costs"]["loss"]["kind"] = "fp8";
  EXPECT_THROW(parse_model(model, "m.json"), InputError);
}


// [Liger block kernels] (models/transformer_costs.h), read in linkedin/Liger-Kernel@ead96b6:
// LigerRMSNormFunction saves (X, RSTD), an fp32 rstd per row beside the 16-bit input
// (src/liger_kernel/ops/rms_norm.py); LigerSiLUMulFunction saves its two inputs, recomputes
// SiLU in backward and writes the two gradients over them (ops/swiglu.py, swiglu_backward
// returns a and b); liger_rotary_pos_emb rotates q and k in place (ops/rope.py); the causal LM's
// forward becomes the fused linear cross-entropy (monkey_patch.py, apply_liger_kernel_to_llama's
// defaults). Bytes per token by hand.
Model load_liger(const std::string& name) {
  HfImportOptions options;
  options.liger = true;
  return load_hf_config(hf_config_path(name), options);
}

// Llama-3.1-8B (h 4096, q 4096, kv 1024, f 14336):
//   saved: each norm its input 2h + rstd 4 = 8,196 (twice: 16,392), the norm outputs 2 x 2h =
//   16,384, q, k, v 2 x (4096 + 1024 + 1024) = 12,288, the attention output 8,192, the gate
//   and up outputs and their product 3 x 2f = 86,016: 139,272. Eager: 200,712
//   (SavedActivations.LlamaGeneralization); the difference is each Python norm's fp32 copy and
//   16-bit cast less Liger's rstd (2 x (4h + 2h - 2h)) and SiLU's output (2f): 61,440.
//   backward: the SwiGLU moments shrink to G 2h + d(product) 2f = 36,864 (eager: the product's
//   MulBackward0, 2h + 3 x 2f = 94,208), so the peak is flash attention's, 61,568
//   (TransientMemory.Llama31_8bDecoderBlockByHand); rotary's backward holds G, dq, dk and dv:
//   20,480. forward: nothing beside rotary (eager: q and k before rotary, 10,240); the peak stays
//   the residual add's 2 x 2h = 16,384.
//   memory-bound bytes: Liger's kernels are the fused ones counted (188,416 per token); the
//   eager extras left are repeat_kv's copies 2 x 2 x 5120 and the attention output's transpose
//   copy 2 x 2 x 4096: (188,416 + 36,864) / 188,416 (eager: 626,688 / 188,416).
TEST(LigerKernels, Llama31_8bBlockByHand) {
  const Model m = load_liger("llama3.1-8b");
  EXPECT_TRUE(m.liger);
  const ModuleCosts& block = costs_of(m, "model.layers.3");
  EXPECT_EQ(block.saved_activation_bytes.at(1, 1), 139'272.0);
  EXPECT_EQ(block.saved_activation_bytes.at(2, 8192), 2.0 * 8192 * 139'272);
  EXPECT_EQ(costs_of(load("llama3.1-8b", true), "model.layers.3").saved_activation_bytes.at(1, 1) -
                block.saved_activation_bytes.at(1, 1),
            61'440.0);
  EXPECT_EQ(block.backward_transient_bytes.at(1, 1), 61'568.0);
  EXPECT_EQ(block.forward_transient_bytes.at(1, 1), 16'384.0);
  EXPECT_DOUBLE_EQ(*block.eager_hbm_factor, 225'280.0 / 188'416.0);
  EXPECT_EQ(block.forward_hbm_bytes.at(1, 1), 188'416.0);  // the fused kernels' bytes, unchanged
  // Eagerly its 6 listed kernels are 8 launches (Liger's 2 norms, rotary, SwiGLU, the 2 adds, and
  // repeat_kv's 2 copies): 8/6 per listed kernel, where Hugging Face's eager block takes the
  // calibration's 4.
  ASSERT_TRUE(block.eager_kernels_per_fused_kernel.has_value());
  EXPECT_DOUBLE_EQ(*block.eager_kernels_per_fused_kernel, 8.0 / 6.0);
  EXPECT_FALSE(costs_of(load("llama3.1-8b", true), "model.layers.3").eager_kernels_per_fused_kernel.has_value());

  DecoderBlockShape shape = llama31_8b_block();
  shape.liger = true;
  shape.eager_elementwise.python_rms_norm = false;
  const TransientLedger ledger = block_transients(shape, true);
  bool rotary = false, swiglu = false;
  for (const TransientMoment& moment : ledger.backward) {
    if (moment.when.find("rotary") != std::string::npos) {
      rotary = true;
      EXPECT_EQ(moment_bytes(moment).at(1, 1), 20'480.0) << moment.when;
    }
    if (moment.when.find("SiLU-and-multiply backward") != std::string::npos) {
      swiglu = true;
      EXPECT_EQ(moment_bytes(moment).at(1, 1), 36'864.0) << moment.when;
    }
  }
  EXPECT_TRUE(rotary && swiglu);
  EXPECT_EQ(moment_bytes(ledger.forward.front()).at(1, 1), 0.0) << ledger.forward.front().when;

  // The final norm saves its input alone (eager: its fp32 copy 4h + rsqrt 4 + cast 2h =
  // 24,580); the output layer's loss is the fused linear cross-entropy.
  EXPECT_EQ(costs_of(m, "model.norm").saved_activation_bytes.at(1, 1), 8'192.0);
  EXPECT_EQ(costs_of(load("llama3.1-8b", true), "model.norm").saved_activation_bytes.at(1, 1), 24'580.0);
  ASSERT_TRUE(costs_of(m, "lm_head").loss);
  EXPECT_EQ(costs_of(m, "lm_head").loss->kind, LossKind::chunked);
}

// Phi-3.5-mini (h 3072, MHA 32 x 96, f 8192): Liger's Phi-3 MLP chunks the fused gate_up output
// and ensure_contiguous (ops/utils.py) copies both halves; the copies are what SiLUMul saves.
//   saved: norms 2 x (2h + 4) = 12,296, their outputs 2 x 2h = 12,288, q, k, v 3 x 2h = 18,432,
//   the attention output 6,144, the gate and up copies and the product 3 x 2f = 49,152: 98,312
//   (eager: 139,272: the norms' 2 x (6h + 4) and gate_up 4f + SiLU's output 2f + product 2f).
//   forward peak: the gate_up output 4f = 32,768 alive while it is copied.
//   backward peak: gate_up's backward, G 2h + d(gate_up) 4f + its input gradient 2h = 45,056
//   (flash attention's: G + dO + dq + dk + dv 5 x 2h + fp32 dq accumulator 4 x 32 x 96 +
//   softmax_d 4 x 32 = 43,136; eager's peak 2h + 8f = 71,680, NewFamilies.FalconAndPhi3ByHand).
TEST(LigerKernels, Phi3FusedGateUpByHand) {
  const Model phi = load_liger("phi3.5-mini");
  const ModuleCosts& block = costs_of(phi, "model.layers.0");
  EXPECT_EQ(block.saved_activation_bytes.at(1, 1), 98'312.0);
  EXPECT_EQ(costs_of(load("phi3.5-mini", true), "model.layers.0").saved_activation_bytes.at(1, 1), 139'272.0);
  EXPECT_EQ(block.forward_transient_bytes.at(1, 1), 32'768.0);
  EXPECT_EQ(block.backward_transient_bytes.at(1, 1), 45'056.0);
}

// Families without a Liger patch, and the MoE ones whose experts' kernels are not modelled, are
// refused naming the config's model_type; a config's _import_options may ask for Liger.
TEST(LigerKernels, FamiliesLigerDoesNotPatchAreRefused) {
  HfImportOptions options;
  options.liger = true;
  for (const char* name : {"falcon-7b", "gpt2", "mixtral-8x7b"}) {
    try {
      load_hf_config(hf_config_path(name), options);
      ADD_FAILURE() << name << " was imported with Liger's kernels";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("model_type"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Liger"), std::string::npos) << e.what();
    }
  }
  // Gemma-2's soft-capped logits under Liger's fused linear cross-entropy: not modelled, and said
  // so naming the config's key (it was an internal error, exit 1, before the check).
  try {
    load_hf_config(hf_config_path("gemma2-9b"), options);
    ADD_FAILURE() << "gemma2 was imported with Liger's loss and soft-capped logits";
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), "final_logit_softcapping") << e.what();
  }
  nlohmann::json config = load_json_file(hf_config_path("llama3.2-1b"));
  config["_import_options"] = {{"liger", true}};
  EXPECT_TRUE(import_options_of(config, "c.json").liger);
  const nlohmann::json model = import_hf_config(config, "c.json", import_options_of(config, "c.json"));
  EXPECT_EQ(model["liger"], true);
  EXPECT_NE(model["source"].get<std::string>().find("liger=true"), std::string::npos);
  config["_import_options"] = {{"liger", "yes"}};
  EXPECT_THROW(import_options_of(config, "c.json"), InputError);
}

}  // namespace
}  // namespace fsdpsim::models
