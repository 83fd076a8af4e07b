// What the libFuzzer harnesses (tests/fuzz/) found in the readers, each kept as a regression
// test: the input that found it, and the InputError it must give now.
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "models/model.h"
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

// fuzz_model, 497,797 executions in: a catalog model with "num_layers": 6.06e98 converted the
// double to int64 before checking its range, undefined behaviour that UBSan stopped on
// (models/json_input.cpp, JsonReader::integer; the range check now comes first, from the
// input-validation part of the issue). Without UBSan the old code happened to refuse it too:
// the sanitizer build (docs/reliability.md) is what runs this test against the conversion.
TEST(FuzzFindings, AnIntegerFieldFarPastInt64IsRefusedNotConverted) {
  nlohmann::json model = load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/models/gpt2.json");
  model["arch"]["num_layers"] = 6.06666666e98;
  try {
    models::parse_model(model, "fuzz-model.json");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "fuzz-model.json");
    EXPECT_EQ(e.json_path(), "arch.num_layers");
  }
}

}  // namespace
}  // namespace fsdpsim::planner
