// What the libFuzzer harnesses (tests/fuzz/) found in the readers, each kept as a regression
// test: the input that found it, and the InputError it must give now.
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

// A reference whose name is longer than the system allows (ENAMETOOLONG) was a bare
// std::filesystem_error ("File name too long"), not an error naming the scenario's field.
TEST(FuzzFindings, AReferenceNameTooLongForTheSystemIsNoFile) {
  const nlohmann::json j = {{"model", std::string(5000, 'm') + ".json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"global_batch", 8}, {"micro_batch", 1}, {"seq_len", 128}}}};
  try {
    parse_scenario(j, "fuzz.json");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "fuzz.json");
    EXPECT_EQ(e.json_path(), "model");
    EXPECT_NE(std::string(e.what()).find("no file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolve_path(std::string(5000, 'x'), "scenarios"), std::string(5000, 'x'));
}

}  // namespace
}  // namespace fsdpsim::planner
