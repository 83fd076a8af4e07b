// DESIGN.md's layout rules that the compiler does not enforce, checked by tools/check_layout.sh:
// dependencies point one way between the library folders, and a folder's internal/ headers
// are private to it, and the executors never see a scenario. The script is tested both ways: the repository passes, and a small tree
// that breaks each rule once is refused with one line per violation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_helpers.h"

namespace fs = std::filesystem;
using fsdpsim::testing::run_command;

namespace {

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST(Layout, TheRepositoryKeepsItsFoldersApart) {
  const auto r = run_command("tools/check_layout.sh");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("internal headers stay in their folders"), std::string::npos) << r.out;
}

TEST(Layout, EachBrokenRuleIsNamedWithItsFileAndLine) {
  const fs::path tree = fs::temp_directory_path() / ("fsdpsim_layout_" + std::to_string(::getpid()));
  fs::remove_all(tree);
  write_file(tree / "planner/internal/secret.h", "#pragma once\n");
  write_file(tree / "planner/plan.h", "#pragma once\n#include \"planner/internal/secret.h\"\n");
  write_file(tree / "planner/plan.cpp", "#include \"planner/internal/secret.h\"\n");     // allowed
  write_file(tree / "tests/planner/plan_test.cpp", "#include \"planner/internal/secret.h\"\n");  // allowed
  write_file(tree / "sim/engine.cpp", "#include <vector>\n#include \"planner/internal/secret.h\"\n");
  write_file(tree / "models/model.cpp", "\n\n#include \"planner/plan.h\"\n");
  write_file(tree / "runtime/run.cpp", "#include \"sim/engine.h\"\n");
  write_file(tree / "sim/analytic.cpp", "#include \"planner/scenario.h\"\n");

  const auto r = run_command("tools/check_layout.sh --root " + tree.string());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("planner/plan.h:2: the public header planner/plan.h includes the private planner/internal/secret.h"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sim/engine.cpp:2: includes planner/internal/secret.h, which is private to planner/"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("models/model.cpp:3: models/ includes planner/plan.h"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("runtime/run.cpp:1: runtime/ includes sim/engine.h"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sim/analytic.cpp:1: an executor includes planner/scenario.h"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("planner/plan.cpp"), std::string::npos) << "a folder may include its own internals\n" << r.out;
  EXPECT_EQ(r.out.find("tests/planner"), std::string::npos) << "a folder's tests may include its internals\n" << r.out;
  EXPECT_NE(r.err.find("5 violation(s)"), std::string::npos) << r.err;
  fs::remove_all(tree);
}
