// Wrap-policy rules PyTorch enforces that the units must follow: containers are never wrapped by
// the size policy, and a tied weight stays in one unit (with a warning naming it, and the unit
// count reported without the units it leaves empty).
#include <gtest/gtest.h>

#include "models/model.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/units.h"

namespace fsdpsim::planner {
namespace {

// A costed module of `type` with one weight of `shape` (tied to `tied_to` when given).
nlohmann::json costed(const std::string& name, const std::string& type, std::vector<std::int64_t> shape,
                      const std::string& tied_to = "") {
  nlohmann::json p = {{"name", "weight"}, {"shape", shape}};
  if (!tied_to.empty()) p["tied_to"] = tied_to;
  return {{"name", name}, {"type", type}, {"params", {p}}, {"costs", {{"forward_flops", {{"b*s", 1.0}}}}}};
}

nlohmann::json linear(const std::string& name, std::vector<std::int64_t> shape, const std::string& tied_to = "") {
  return costed(name, "Linear", shape, tied_to);
}

// embed [100, 10], then a ModuleList "blocks" of 4 x [10, 100], then lm_head [100, 10] (tied to
// embed's weight when `tied`).
models::Model small_model(bool tied) {
  nlohmann::json blocks = {{"name", "blocks"}, {"type", "ModuleList"}, {"children", nlohmann::json::array()}};
  for (int i = 0; i < 4; ++i) blocks["children"].push_back(linear(std::to_string(i), {10, 100}));
  nlohmann::json root = {{"name", ""},
                         {"type", "Model"},
                         {"children", {linear("embed", {100, 10}), blocks,
                                       linear("lm_head", {100, 10}, tied ? "embed.weight" : "")}}};
  return models::parse_model({{"name", "small"}, {"root", root}}, "small.json");
}

// size_based_auto_wrap_policy(min_num_params=3000): no block (1,000) reaches it; the ModuleList
// (4,000) would, but EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict} keeps it unwrapped,
// so its parameters go to the root: one unit. Before the rule, "blocks" was a second unit.
TEST(SizeWrapPolicy, NeverWrapsAModuleList) {
  WrapSpec wrap;
  wrap.policy = WrapPolicy::size;
  wrap.min_num_params = 3000;
  const models::Model m = small_model(false);
  const std::vector<Unit> units = build_units(m, wrap, "test.json");
  ASSERT_EQ(units.size(), 1u);
  EXPECT_TRUE(units[0].is_root);
  EXPECT_EQ(units[0].numel(), 1000 + 4 * 1000 + 1000);
  // A threshold the blocks reach wraps each block, still not the list.
  wrap.min_num_params = 1000;
  const std::vector<Unit> per_block = build_units(m, wrap, "test.json");
  for (const Unit& u : per_block) EXPECT_NE(u.name, "blocks");
  EXPECT_EQ(per_block.size(), 1u + 4 + 2);  // root, 4 blocks, embed, lm_head
}

// Wrapping embed and lm_head apart while their weights are tied: the weight goes to the root
// (their common enclosing unit), both units are left without parameters, a warning names the
// weight, and the count of units that hold parameters is the real one: the root and 4 blocks.
TEST(TiedWeights, WrapRequestThatCannotBeHonouredWarns) {
  WrapSpec wrap;
  wrap.policy = WrapPolicy::modules;
  wrap.modules = {{"embed"}, {"blocks.0"}, {"blocks.1"}, {"blocks.2"}, {"blocks.3"}, {"lm_head"}};
  const models::Model model = small_model(true);  // the units point into it: it must outlive them
  const std::vector<Unit> units = build_units(model, wrap, "test.json");
  EXPECT_EQ(units.size(), 7u);
  EXPECT_EQ(units_with_parameters(units), 5);
  const std::vector<std::string> warnings = tied_weight_warnings(units);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("\"embed.weight\""), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("\"root\""), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("without parameters"), std::string::npos) << warnings[0];
  // Untied, every request is honoured: no warning, every unit holds parameters.
  const models::Model untied_model = small_model(false);
  const std::vector<Unit> untied = build_units(untied_model, wrap, "test.json");
  EXPECT_TRUE(tied_weight_warnings(untied).empty());
  EXPECT_EQ(units_with_parameters(untied), 6);  // the root holds nothing of its own: not counted
}


// [torchtitan's wrap] torchtitan's apply_fsdp (torchtitan/distributed/fsdp.py@b5bcd76): the token
// embeddings alone, each block, and [norm, lm_head] kept unsharded after forward; the root holds
// the rest. Laid out as torchtitan's models are (norm beside lm_head): root (nothing), embed, 4
// blocks, [norm, lm_head]. Laid out as Hugging Face's (norm under model., lm_head at the root):
// model.norm is not lm_head's sibling and stays in the root. Tied (lm_head's weight is embed's):
// the weight goes to the root, which is never resharded either (torchtitan wraps the three
// together, kept unsharded).
models::Model titan_model(bool hf_layout, bool tied) {
  nlohmann::json layers = {{"name", "layers"}, {"type", "ModuleList"}, {"children", nlohmann::json::array()}};
  for (int i = 0; i < 4; ++i) layers["children"].push_back(costed(std::to_string(i), "Block", {10, 100}));
  const std::string embed_name = hf_layout ? "model.embed" : "embed";
  const nlohmann::json embed = costed("embed", "Embedding", {100, 10});
  const nlohmann::json norm = costed("norm", "RMSNorm", {10});
  const nlohmann::json lm_head = costed("lm_head", "Linear", {100, 10}, tied ? embed_name + ".weight" : "");
  nlohmann::json root = {{"name", ""}, {"type", "Model"}};
  if (hf_layout)
    root["children"] = {{{"name", "model"}, {"type", "Inner"}, {"children", {embed, layers, norm}}}, lm_head};
  else
    root["children"] = {embed, layers, norm, lm_head};
  return models::parse_model({{"name", "titan"}, {"root", root}}, "titan.json");
}

std::vector<std::string> unit_modules(const Unit& u) {
  std::vector<std::string> names;
  for (const models::Module* m : u.modules) names.push_back(m->full_name);
  return names;
}

TEST(TorchtitanWrap, EmbeddingsApartAndTheOutputLayerKeptUnsharded) {
  WrapSpec wrap;
  wrap.policy = WrapPolicy::torchtitan;
  const models::Model titan = titan_model(false, false);
  const std::vector<Unit> units = build_units(titan, wrap, "test.json");
  ASSERT_EQ(units.size(), 7u);  // root, embed, 4 blocks, [norm, lm_head]
  EXPECT_TRUE(units[0].params.empty());
  EXPECT_EQ(unit_modules(units[1]), std::vector<std::string>{"embed"});
  EXPECT_EQ(unit_modules(units[6]), (std::vector<std::string>{"norm", "lm_head"}));
  for (const Unit& u : units) EXPECT_EQ(u.kept_unsharded_after_forward, u.index == 6) << u.name;

  const models::Model hf = titan_model(true, false);
  const std::vector<Unit> hf_units = build_units(hf, wrap, "test.json");
  ASSERT_EQ(hf_units.size(), 7u);
  ASSERT_EQ(hf_units[0].params.size(), 1u);
  EXPECT_EQ(hf_units[0].params[0]->full_name, "model.norm.weight");
  EXPECT_EQ(unit_modules(hf_units[1]), std::vector<std::string>{"model.embed"});
  EXPECT_EQ(unit_modules(hf_units[6]), std::vector<std::string>{"lm_head"});
  EXPECT_TRUE(hf_units[6].kept_unsharded_after_forward);

  const models::Model tied = titan_model(false, true);
  const std::vector<Unit> tied_units = build_units(tied, wrap, "test.json");
  ASSERT_EQ(tied_units.size(), 7u);
  ASSERT_EQ(tied_units[0].params.size(), 1u);
  EXPECT_EQ(tied_units[0].params[0]->full_name, "embed.weight");
  EXPECT_TRUE(tied_units[1].params.empty());
  EXPECT_EQ(tied_units[6].params.size(), 1u);  // the norm
}

// Under torchtitan's wrap at expert parallel 1, Mixtral-8x7B's 8 routed experts over 64 ranks are
// cut on dim 1 (torchtitan's shard_placement_fn, kRowShardsExpertsOnDim1): per layer gate_up
// [8, 28672, 4096] keeps 8 x 448 rows (14,680,064 elements) instead of one padded expert
// (117,440,512), down [8, 4096, 14336] 8 x 64 rows (7,340,032) instead of 58,720,256: rank 0
// holds 154,140,672 fewer elements a layer, 4,932,501,504 over 32 layers; nothing else differs
// (every other dim 0 divides by 64).
TEST(TorchtitanWrap, MixtralsFewExpertsAreCutOnDimOne) {
  auto held = [](const std::string& wrap) {
    const nlohmann::json j = {{"model", "models/mixtral-8x7b.json"},
                              {"cluster", "scenarios/clusters/dgx-h100.json"},
                              {"training", {{"micro_batch", 1}, {"seq_len", 4096}, {"global_batch", 64}}},
                              {"fsdp", {{"version", 2}, {"wrap", wrap}}}};
    const Plan p = plan_step(parse_scenario(j, "test.json", {"cluster.nodes=8"}));
    std::int64_t n = 0;
    for (const UnitShard& s : p.shards) n += s.local_numel;
    return n;
  };
  EXPECT_EQ(held("block") - held("torchtitan"), 32LL * 154140672);
}

// A module with parameters between two runs of blocks is neither end: it stays in the root.
TEST(TorchtitanWrap, AModuleBetweenBlocksStaysInTheRoot) {
  auto run = [&](const std::string& name, int first) {
    nlohmann::json list = {{"name", name}, {"type", "ModuleList"}, {"children", nlohmann::json::array()}};
    for (int i = first; i < first + 2; ++i) list["children"].push_back(costed(std::to_string(i), "Block", {10, 100}));
    return list;
  };
  const nlohmann::json root = {{"name", ""}, {"type", "Model"},
                               {"children", {costed("embed", "Embedding", {100, 10}), run("a", 0), costed("mid", "Projection", {10, 10}),
                                             run("b", 2), costed("norm", "RMSNorm", {10}), costed("lm_head", "Linear", {100, 10})}}};
  const models::Model m = models::parse_model({{"name", "mid"}, {"root", root}}, "mid.json");
  WrapSpec wrap;
  wrap.policy = WrapPolicy::torchtitan;
  const std::vector<Unit> units = build_units(m, wrap, "test.json");
  ASSERT_EQ(units.size(), 7u);
  ASSERT_EQ(units[0].params.size(), 1u);
  EXPECT_EQ(units[0].params[0]->full_name, "mid.weight");
  EXPECT_EQ(unit_modules(units.back()), (std::vector<std::string>{"norm", "lm_head"}));
}

// Llama-3.1-8B on 8 H100s (the quick start): the embedding's unsharded copy, 128,256 x 4,096
// bf16 = 1,050,673,152 B, is no longer held from forward to backward, and the last block's
// all-gather output (218,112,000 parameters x 2 B = 436,224,000 B, no padding over 8 ranks) is
// made after the loss's backward ([Loss outside the model]), so the peak (the loss's backward) is
// their sum lower: 41.63 -> 40.24 GiB, the session-37 FSDP2 audit's hand figure. The output layer
// is gathered once a step, not again in backward: 68 all-gathers (root, embeddings, 32 blocks and
// lm_head forward; 32 blocks and the embeddings backward) against the block policy's 65 (33 + 32).
TEST(TorchtitanWrap, Llama8bHoldsNoEmbeddingCopyAndGathersTheOutputLayerOnce) {
  auto plan = [](const std::string& wrap) {
    const nlohmann::json j = {{"model", "models/llama3.1-8b.json"},
                              {"cluster", "scenarios/clusters/dgx-h100.json"},
                              {"training", {{"micro_batch", 2}, {"seq_len", 8192}, {"global_batch", 16}}},
                              {"fsdp", {{"version", 2}, {"wrap", wrap}}}};
    const Scenario s = parse_scenario(j, "test.json");
    const Plan p = plan_step(s);
    return std::make_pair(p, replay_memory(p.schedule));
  };
  auto all_gathers = [](const Schedule& s, const std::string& of) {
    int n = 0;
    for (const Op& op : s.ops) n += op.kind == OpKind::all_gather && (of.empty() || op.name == "all-gather " + of);
    return n;
  };
  const auto [block, block_memory] = plan("block");
  const auto [titan, titan_memory] = plan("torchtitan");
  EXPECT_EQ(block_memory.peak_allocated_bytes - titan_memory.peak_allocated_bytes, 128256LL * 4096 * 2 + 218112000LL * 2);
  EXPECT_EQ(block.schedule.ops.at(block_memory.peak_op).name, "bwd lm_head (loss)");
  EXPECT_EQ(titan.schedule.ops.at(titan_memory.peak_op).name, "bwd lm_head (loss)");
  EXPECT_EQ(all_gathers(block.schedule, ""), 65);
  EXPECT_EQ(all_gathers(titan.schedule, ""), 68);
  EXPECT_EQ(all_gathers(titan.schedule, "lm_head"), 1);
  EXPECT_EQ(all_gathers(titan.schedule, "model.embed_tokens"), 2);
}

}  // namespace
}  // namespace fsdpsim::planner
