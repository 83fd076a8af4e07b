// Wrap-policy rules PyTorch enforces that the units must follow: containers are never wrapped by
// the size policy, and a tied weight stays in one unit (with a warning naming it, and the unit
// count reported without the units it leaves empty).
#include <gtest/gtest.h>

#include "models/model.h"
#include "planner/units.h"

namespace fsdpsim::planner {
namespace {

nlohmann::json linear(const std::string& name, std::vector<std::int64_t> shape, const std::string& tied_to = "") {
  nlohmann::json p = {{"name", "weight"}, {"shape", shape}};
  if (!tied_to.empty()) p["tied_to"] = tied_to;
  return {{"name", name}, {"type", "Linear"}, {"params", {p}}, {"costs", {{"forward_flops", {{"b*s", 1.0}}}}}};
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

}  // namespace
}  // namespace fsdpsim::planner
