// fsdpsim estimate against measurements on real GPUs (issue 20; tests/data/hardware/README.md).
//
// HardwareData.*: every CSV in tests/data/hardware/ (what tools/hardware/run_all.sh measured on a
// GPU and a session committed). Peak allocated must be within 2% and peak reserved within 5% of
// PyTorch's figures for every measured case; each case's predicted and measured figures are
// printed. Until a GPU run is committed there is no CSV, and the tests say so (GTEST_SKIP): nothing
// is measured in CI.
//
// HardwareChecker.*: the checker itself, on hand-made fixtures (tests/hardware/fixtures/, not
// measurements: their provenance says so), so that it is tested before any real data exists.
#include <gtest/gtest.h>

#include <iostream>

#include "hardware_check.h"

namespace fsdpsim::testing::hardware {
namespace {

const std::string kData = std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/hardware";
const std::string kFixtures = std::string(FSDPSIM_SOURCE_ROOT) + "/tests/hardware/fixtures";

const MemoryResult& find(const std::vector<MemoryResult>& results, const std::string& id) {
  for (const MemoryResult& r : results)
    if (r.case_id == id) return r;
  throw std::runtime_error("no row " + id);
}

// The fixture's tiny model (fixtures/tiny-model.json): two blocks, each one 64 x 64 fp32 weight,
// 256 B of saved activations and 8 B of input per token (16-bit figures, doubled at fp32), on one
// GPU under NO_SHARD with AdamW, micro-batch 1 x 128 tokens (docs/memory-model.md):
//   persistent, per block: weight 16,384 + replicated gradient 16,384 + AdamW's two states
//     32,768 = 65,536; two blocks                                                       131,072
//   input token ids: 8 B x 128                                                             1,024
//   saved activations: 256 B x 2 (fp32) x 128 = 65,536 per block, both alive at the
//     first backward op                                                                  131,072
//   the backward's temporary, the gradient of the block's input: 8 B x 2 x 128             2,048
//   PyTorch's two cuBLAS workspaces (forward and backward threads), 32 MiB each on the
//     H100 (CublasHandlePool.cpp)                                                     67,108,864
//   peak allocated, at "bwd blocks.1":                                                67,374,080
// Every other allocation is at most 1 MiB, all on the compute stream, and the most alive at once
// is far below 2 MiB: PyTorch's small pool holds them in one 2 MiB segment; each workspace is a
// large-pool segment of its own (32 MiB, a multiple of 2 MiB): peak reserved = 2,097,152 +
// 67,108,864 = 69,206,016.
constexpr double kHandAllocated = 131072 + 1024 + 131072 + 2048 + 2.0 * 32 * 1024 * 1024;
constexpr double kHandReserved = 2097152 + 2.0 * 32 * 1024 * 1024;

TEST(HardwareChecker, HandWorkedRowPassesAndRowsOutsideTheBoundsFail) {
  const CsvTable t = read_csv(kFixtures + "/memory_fixture.csv");
  ASSERT_EQ(csv_kind(t), CsvKind::memory);
  const std::vector<MemoryResult> results = check_memory_csv(t);
  std::cout << memory_table(results);

  // The hand-worked figures are fsdpsim's own prediction: error 0, passes.
  const MemoryResult& exact = find(results, "fixture-hand-worked");
  ASSERT_TRUE(exact.checked) << exact.problem;
  EXPECT_EQ(exact.predicted_allocated, kHandAllocated);
  EXPECT_EQ(exact.predicted_reserved, kHandReserved);
  EXPECT_EQ(exact.measured_allocated, kHandAllocated);
  EXPECT_TRUE(exact.passed());

  // Measured 69,393,000 B: the prediction is 2.91% low, outside the 2% bound.
  const MemoryResult& alloc = find(results, "fixture-allocated-3pct-off");
  ASSERT_TRUE(alloc.checked) << alloc.problem;
  EXPECT_NEAR(alloc.allocated_error, (kHandAllocated - 69393000) / 69393000, 1e-12);
  EXPECT_FALSE(alloc.allocated_ok);
  EXPECT_TRUE(alloc.reserved_ok);
  EXPECT_FALSE(alloc.passed());

  // Reserved measured 2,223,981 B: 5.70% above the prediction, outside the 5% bound.
  const MemoryResult& resv = find(results, "fixture-reserved-6pct-off");
  ASSERT_TRUE(resv.checked) << resv.problem;
  EXPECT_TRUE(resv.allocated_ok);
  EXPECT_FALSE(resv.reserved_ok);
  EXPECT_FALSE(resv.passed());

  // 1.77% and 4.76% off: inside both bounds.
  const MemoryResult& near = find(results, "fixture-within-bounds");
  EXPECT_TRUE(near.passed()) << memory_table({near});

  // A case that failed on the GPU is reported with its error, not held to the bounds.
  const MemoryResult& failed = find(results, "fixture-case-that-failed");
  EXPECT_FALSE(failed.checked);
  EXPECT_NE(failed.problem.find("OutOfMemoryError"), std::string::npos);

  // The printed table names the failures.
  const std::string table = memory_table(results);
  EXPECT_NE(table.find("fixture-allocated-3pct-off"), std::string::npos);
  EXPECT_NE(table.find("FAIL (allocated)"), std::string::npos);
  EXPECT_NE(table.find("FAIL (reserved)"), std::string::npos);
}

TEST(HardwareChecker, ACaseThatBeganWithEarlierCasesMemoryIsNotHeld) {
  CsvTable t = read_csv(kFixtures + "/memory_fixture.csv");
  t.rows.resize(1);
  t.rows[0]["process_baseline_allocated_bytes"] = "67108864";
  t.rows[0]["case_baseline_allocated_bytes"] = "67108864";
  EXPECT_TRUE(check_memory_csv(t)[0].excluded.empty());
  t.rows[0]["case_baseline_allocated_bytes"] = "67109376";  // 512 bytes left by an earlier case
  const MemoryResult r = check_memory_csv(t)[0];
  EXPECT_FALSE(r.checked);
  EXPECT_NE(r.excluded.find("512 bytes of earlier cases"), std::string::npos) << r.excluded;
  EXPECT_EQ(judge(r, {}), "");
  EXPECT_NE(memory_table({r}).find("excluded: not a measurement of this case alone"), std::string::npos);
}

TEST(HardwareChecker, KnownDeviationsHoldTheirErrorsAndMustStayOpen) {
  const std::vector<MemoryResult> results = check_memory_csv(read_csv(kFixtures + "/memory_fixture.csv"));
  const MemoryResult& exact = find(results, "fixture-hand-worked");
  const MemoryResult& alloc = find(results, "fixture-allocated-3pct-off");
  const std::string file = "memory_fixture.csv|";
  // Unlisted: a row within the bounds passes, one outside fails.
  EXPECT_EQ(judge(exact, {}), "");
  EXPECT_NE(judge(alloc, {}).find("not in known_deviations.json"), std::string::npos);
  // Listed with its own error: held. Listed with a smaller one (0.6 points better than it is): worse.
  KnownDeviations known{{file + alloc.case_id, {alloc.allocated_error, alloc.reserved_error, "fixture"}}};
  EXPECT_EQ(judge(alloc, known), "");
  const double better = alloc.allocated_error > 0 ? alloc.allocated_error - 0.006 : alloc.allocated_error + 0.006;
  known[file + alloc.case_id].allocated_error = better;
  EXPECT_NE(judge(alloc, known).find("worse than its known deviation"), std::string::npos);
  // Listed while within the bounds: stale.
  known[file + exact.case_id] = {0.1, 0.1, "fixture"};
  EXPECT_NE(judge(exact, known).find("remove it"), std::string::npos);
}

TEST(HardwareChecker, ACsvWithoutProvenanceIsRefused) {
  const CsvTable t = read_csv(kFixtures + "/no_provenance.csv");
  try {
    csv_kind(t);
    FAIL() << "a CSV without driver and torch columns was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no provenance column \"driver\""), std::string::npos) << e.what();
  }
}

TEST(HardwareChecker, AMeasuredRowWithEmptyProvenanceFails) {
  CsvTable t = read_csv(kFixtures + "/memory_fixture.csv");
  t.rows.resize(1);
  t.rows[0]["torch"] = "";
  const std::vector<MemoryResult> results = check_memory_csv(t);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].passed());
  EXPECT_NE(results[0].problem.find("without provenance (torch)"), std::string::npos) << results[0].problem;
}

TEST(HardwareChecker, ARowFsdpsimRefusesFailsNamingTheOverride) {
  CsvTable t = read_csv(kFixtures + "/memory_fixture.csv");
  t.rows.resize(1);
  t.rows[0]["fsdpsim_overrides"] += ";training.no_such_field=1";
  const std::vector<MemoryResult> results = check_memory_csv(t);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].passed());
  EXPECT_NE(results[0].problem.find("no_such_field"), std::string::npos) << results[0].problem;
}

// The block checker reads the cost model's duration of the row's two ops from the estimate's
// trace; together they are the block unit's compute time in `estimate --json` (one GPU, no
// checkpointing: the unit runs its forward and its backward once).
TEST(HardwareChecker, BlockPredictionIsTheUnitsForwardAndBackward) {
  const CsvTable t = read_csv(kFixtures + "/blocks_fixture.csv");
  ASSERT_EQ(csv_kind(t), CsvKind::blocks);
  const std::vector<BlockResult> results = check_block_csv(t);
  std::cout << block_table(results);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].checked) << results[0].problem;
  EXPECT_GT(results[0].predicted_forward, 0);
  EXPECT_GT(results[0].predicted_backward, results[0].predicted_forward);
  const CommandResult c = run_estimate(t.rows[0], "--json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  double unit_seconds = -1;
  const nlohmann::json estimate = nlohmann::json::parse(c.out);
  for (const nlohmann::json& u : estimate.at("units"))
    if (u.at("name").get<std::string>() == "blocks.0") unit_seconds = u.at("compute_seconds").get<double>();
  EXPECT_NEAR(results[0].predicted_forward + results[0].predicted_backward, unit_seconds, 1e-9 * unit_seconds);
}

// The header the PyTorch scripts write holds every column the checker needs (the two sides are
// in different languages; this keeps them in step). Needs python3, which CI has; skipped without.
TEST(HardwareChecker, TheScriptsWriteTheColumnsTheCheckerReads) {
  if (run_command("python3 --version").exit_code != 0) GTEST_SKIP() << "no python3";
  for (const auto& [script, kind] : {std::pair<std::string, CsvKind>{"fsdp_memory.py", CsvKind::memory},
                                     {"block_timing.py", CsvKind::blocks}}) {
    const CommandResult c =
        run_command("python3 " + std::string(FSDPSIM_SOURCE_ROOT) + "/tools/hardware/" + script + " --columns");
    ASSERT_EQ(c.exit_code, 0) << script << ": " << c.err;
    const std::string header = c.out.substr(0, c.out.find('\n'));
    const std::string file = write_temp(script + std::string(".csv"), header + "\n");
    EXPECT_EQ(csv_kind(read_csv(file)), kind) << script;
  }
}

// kernel_timing.py's sustained-GEMM rows aggregate nvidia-smi's samples per window (median clock and
// power, largest limit and temperature, the clock-event reasons OR-ed): its self-test checks that
// on hand-made samples, since no GPU runs here.
TEST(HardwareChecker, TheSustainedGemmRowsAggregateTheirSamples) {
  if (run_command("python3 --version").exit_code != 0) GTEST_SKIP() << "no python3";
  const CommandResult c =
      run_command("python3 " + std::string(FSDPSIM_SOURCE_ROOT) + "/tools/hardware/kernel_timing.py --self-test");
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("self-test: ok"), std::string::npos) << c.out;
}

// Every case the memory script would measure is a scenario fsdpsim accepts (the dry run runs
// `estimate --json` on each): a schema change that breaks the recipe shows here, before a GPU
// session spends its minutes on it.
TEST(HardwareChecker, EveryPlannedCaseIsAScenarioFsdpsimAccepts) {
  if (run_command("python3 --version").exit_code != 0) GTEST_SKIP() << "no python3";
  const std::string tools = std::string(FSDPSIM_SOURCE_ROOT) + "/tools/hardware/";
  for (const char* cmd : {"fsdp_memory.py --dry-run --check 1000", "block_timing.py --dry-run"}) {
    const CommandResult c = run_command("python3 " + tools + cmd + " --fsdpsim " + cli_binary());
    EXPECT_EQ(c.exit_code, 0) << cmd << "\n" << c.out << c.err;
    EXPECT_EQ(c.out.find("REFUSED"), std::string::npos) << c.out;
  }
}

std::vector<std::string> data_csvs() { return csv_files(kData); }

TEST(HardwareData, PeakMemoryWithinBoundsOfEveryMeasuredCase) {
  std::vector<MemoryResult> all;
  for (const std::string& file : data_csvs()) {
    const CsvTable t = read_csv(file);
    if (csv_kind(t) != CsvKind::memory) continue;
    for (MemoryResult& r : check_memory_csv(t)) all.push_back(std::move(r));
  }
  if (all.empty())
    GTEST_SKIP() << "no hardware data recorded yet: tests/data/hardware/ has no memory CSV (no GPU has run "
                    "tools/hardware/run_all.sh; docs/accuracy.md, \"Hardware\", gives the command)";
  std::cout << "peak memory, fsdpsim estimate against PyTorch (bounds: allocated 2%, reserved 5%)\n" << memory_table(all);
  const KnownDeviations known = read_known_deviations(kData + "/known_deviations.json");
  int measured = 0, within = 0;
  for (const MemoryResult& r : all) {
    if (r.status != "ok" || !r.excluded.empty()) continue;  // reported above; not a measurement of the case
    ++measured;
    within += r.passed();
    const std::string verdict = judge(r, known);
    EXPECT_TRUE(verdict.empty()) << r.where << " " << r.case_id << ": " << verdict;
  }
  std::cout << within << " of " << measured << " measured cases within both bounds; the others are "
            << "tests/data/hardware/known_deviations.json's open problems\n";
  EXPECT_GT(measured, 0) << "every row of the memory CSVs is a failed, skipped or excluded case";
}

std::vector<BlockResult> measured_blocks() {
  std::vector<BlockResult> all;
  for (const std::string& file : data_csvs()) {
    const CsvTable t = read_csv(file);
    if (csv_kind(t) != CsvKind::blocks) continue;
    for (BlockResult& r : check_block_csv(t)) all.push_back(std::move(r));
  }
  return all;
}

const BlockResult& find_block(const std::vector<BlockResult>& results, const std::string& id) {
  for (const BlockResult& r : results)
    if (r.case_id == id && r.checked) return r;
  throw std::runtime_error("no measured block " + id);
}

// Every measured block, forward and backward, within 20% of the cost model's time for the block
// timed alone: the GPU runs its kernels after waiting for its issue lead ([Kernel pipelining],
// planner/cost_model.h). Before the eager issue costs were measured (5 us a kernel, assumed),
// the small blocks at 1,024 tokens were 37-68% short: their time is the CPU's. Before the
// lead, with the block priced as the slower of the CPU's issue and the GPU's work, the two H200
// blocks at the crossover (8B at 1,024 tokens, 1B at 4,096) were 22.5% and 21.4% short: the
// CPU issues a Llama block's MLP GEMMs, most of its GPU work, last.
TEST(HardwareData, BlockTimesAgainstTheCostModel) {
  const std::vector<BlockResult> all = measured_blocks();
  if (all.empty())
    GTEST_SKIP() << "no hardware data recorded yet: tests/data/hardware/ has no block-timing CSV";
  std::cout << "one transformer block, forward and backward: measured median against the cost model (ms; pred = "
               "the GPU after its issue lead; bound 20%)\n"
            << block_table(all);
  for (const BlockResult& r : all) {
    if (r.status != "ok") continue;
    ASSERT_TRUE(r.checked) << r.where << " " << r.case_id << ": " << r.problem;
    EXPECT_LT(std::abs(relative_error(r.elapsed_forward(), r.measured_forward)), 0.20)
        << r.where << " " << r.case_id << " forward";
    EXPECT_LT(std::abs(relative_error(r.elapsed_backward(), r.measured_backward)), 0.20)
        << r.where << " " << r.case_id << " backward";
  }
}

// The eager issue costs (scenarios/hardware/calibration.json) are their measurement: the rows
// their sources name are bound by the CPU, so the kernels fsdpsim counts, times the shipped cost
// per kernel, give back the measured time. Forward: Llama-3.2-1B at 1,024 tokens (1.480 ms);
// backward: the mean over Llama-3.2-1B and Llama-3.1-8B at 1,024 tokens (2.167 and 2.105 ms).
TEST(HardwareData, EagerIssueCostsAreTheirMeasurement) {
  const std::vector<BlockResult> all = measured_blocks();
  if (all.empty()) GTEST_SKIP() << "no block-timing CSV in tests/data/hardware/";
  const BlockResult& small = find_block(all, "llama3.2-1b-block-s1024");
  const BlockResult& large = find_block(all, "llama3.1-8b-block-s1024");
  EXPECT_NEAR(small.issue_forward / small.measured_forward, 1.0, 0.01);
  EXPECT_NEAR((small.issue_backward / small.measured_backward + large.issue_backward / large.measured_backward) / 2,
              1.0, 0.01);
  // Both are CPU-bound in the model too: the issue is over twice the 1B block's GPU time.
  EXPECT_GT(small.issue_forward, 2 * small.predicted_forward);
  EXPECT_GT(small.issue_backward, 2 * small.predicted_backward);
}

// Every CSV there is one of the two kinds, with its provenance columns.
TEST(HardwareData, EveryCsvIsReadable) {
  const std::vector<std::string> files = data_csvs();
  if (files.empty()) GTEST_SKIP() << "no hardware data recorded yet: tests/data/hardware/ has no CSV";
  for (const std::string& file : files) EXPECT_NO_THROW(csv_kind(read_csv(file))) << file;
}

}  // namespace
}  // namespace fsdpsim::testing::hardware
