// The mpi launcher on the host backend: `mpirun -np 4 fsdpsim run --launcher mpi` starts one
// process per rank, each plays its own rank with collectives over MPI communicators (one per
// process-group instance) on real data, and rank 0 gathers and reports. Built and registered
// only where MPI was found at configure time (FSDPSIM_WITH_MPI).
#if FSDPSIM_WITH_MPI

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "planner/memory.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"

namespace fsdpsim::runtime {
namespace {

struct Launched {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

// A faulty or stalled run must end by itself (its own --timeout of 2-10 s, the diagnosis and
// MPI_Abort), not be killed by `timeout 60`. The bound is generous on purpose: on a loaded 2-core
// CI machine four processes' launch and start-up alone have taken over 15 s, and a bound that
// close to the work measures the machine, not the code. Anything under the 60 s kill tells an
// ended run from a hang.
constexpr double kEndsWithinSeconds = 45.0;

// Open MPI in a container as root: allow root, more processes than cores, no ssh for a local
// launch, no cross-memory-attach (ptrace is often not allowed). `timeout` turns a hang into a
// failure rather than a stuck test.
// `program` is what every process runs (the CLI and its arguments, or a shell command).
Launched mpirun_program(int processes, const std::string& program) {
  const std::string err_file = ::testing::TempDir() + "fsdpsim_mpi_err_" + std::to_string(::getpid());
  const std::string command =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
      "OMPI_MCA_plm_rsh_agent= OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 60 " +
      std::string(FSDPSIM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(processes) + " " +
      program + " 2>" + err_file;
  Launched r;
  const auto begin = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_file);
  return r;
}

// The CLI under test: the build's, or $FSDPSIM_TEST_CLI (e.g. the binary before a fix).
std::string cli() {
  const char* other = std::getenv("FSDPSIM_TEST_CLI");
  return other && *other ? other : FSDPSIM_CLI;
}

Launched mpirun(int processes, const std::string& args) { return mpirun_program(processes, cli() + " " + args); }

std::string write_scenario(const nlohmann::json& scenario, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << scenario.dump(1);
  return path;
}

// Lines that begin with "error:" (Open MPI adds its own banner, which does not).
int error_lines(const std::string& err) {
  int count = 0;
  std::size_t at = 0;
  while ((at = err.find("error:", at)) != std::string::npos) {
    if (at == 0 || err[at - 1] == '\n') ++count;
    at += 6;
  }
  return count;
}

int first_op(const planner::Schedule& s, planner::OpKind kind) {
  for (const auto& op : s.ops)
    if (op.kind == kind) return op.id;
  return -1;
}

struct Case {
  std::string name;
  nlohmann::json scenario;
};
// gtest prints the parameter in test listings (and CTest names): the case name, not raw bytes.
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class HostOverMpi : public ::testing::TestWithParam<Case> {};

// Four processes, one rank each: the gathered result has every rank, each rank's peak
// allocated / reserved and per-op allocated bytes equal the planner's replay to the byte, and
// every collective's output was checked (sum, concatenation) on every rank.
TEST_P(HostOverMpi, GatheredPeakEqualsReplayOnEveryRankAndDataChecksPass) {
  const nlohmann::json& scenario = GetParam().scenario;
  const planner::Schedule s = testing::plan(scenario);
  ASSERT_EQ(s.world_size, 4);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  int collectives = 0;
  for (const auto& op : s.ops) collectives += planner::is_collective(op.kind) && op.comm_bytes > 0;
  ASSERT_GT(collectives, 0);

  const std::string path = write_scenario(scenario, "mpi_" + GetParam().name + ".json");
  const std::string trace = ::testing::TempDir() + "mpi_" + GetParam().name + ".trace.json";
  std::filesystem::remove(trace);
  const Launched r = mpirun(4, "run --backend host --launcher mpi --scenario " + path +
                                   " --time-scale 0.001 --max-buffer-bytes 65536 --timeout 10 --json --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(error_lines(r.err), 0) << r.err;
  EXPECT_LT(r.seconds, kEndsWithinSeconds);
  // One JSON object: rank 0 reports, the other processes print nothing.
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j["launcher"], "mpi");
  EXPECT_EQ(j["processes"], 4);
  EXPECT_EQ(j["ranks_played"], 4);
  EXPECT_NE(j["device"].get<std::string>().find("4 processes"), std::string::npos) << j["device"];
  EXPECT_EQ(j["memory"]["peak_allocated_bytes"], predicted.peak_allocated_bytes);
  EXPECT_EQ(j["memory"]["peak_reserved_bytes"], predicted.peak_reserved_bytes);
  ASSERT_EQ(j["ranks"].size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const nlohmann::json& m = j["ranks"][rank];
    EXPECT_EQ(m["rank"], rank);
    EXPECT_EQ(m["allocated_at_start_bytes"], predicted.allocated_at_start);
    EXPECT_EQ(m["peak_allocated_bytes"], predicted.peak_allocated_bytes);
    EXPECT_EQ(m["peak_op"], predicted.peak_op);
    EXPECT_EQ(m["peak_reserved_bytes"], predicted.peak_reserved_bytes);
    EXPECT_EQ(m["collectives_checked"], collectives * testing::steps_played_by_default(s));
    ASSERT_EQ(m["step_seconds"].size(), 1u);
    EXPECT_GT(m["step_seconds"][0].get<double>(), 0);
  }
  // The trace rank 0 wrote has every rank's ops (a process per rank) from the gathered timings.
  nlohmann::json t;
  ASSERT_NO_THROW(t = nlohmann::json::parse(std::ifstream(trace))) << trace;
  std::vector<int> ops_per_rank(4, 0);
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") {
      const int pid = e["pid"].get<int>();
      ASSERT_TRUE(pid >= 0 && pid < 4) << e;
      ++ops_per_rank[pid];
    }
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(ops_per_rank[rank], static_cast<int>(s.ops.size())) << rank;
  // Rank 0's op timings came through the gather whole: every op ran, in a non-empty interval.
  ASSERT_EQ(j["ops"].size(), s.ops.size());
  for (const auto& op : j["ops"]) {
    EXPECT_GE(op["start_seconds"].get<double>(), 0) << op;
    EXPECT_GE(op["end_seconds"].get<double>(), op["start_seconds"].get<double>()) << op;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, HostOverMpi,
    ::testing::Values(
        // shard groups of 2 and replicate groups of 2 (stride 2): two communicators per process
        Case{"hybrid_2x2", testing::scenario(2, 2, {{"version", 2}, {"strategy", "HYBRID_SHARD"}})},
        // FSDP1 flat parameters padded to the world, forward prefetch: one group of 4
        Case{"fsdp1_full_shard_padded",
             testing::scenario(1, 4, {{"version", 1}, {"strategy", "FULL_SHARD"}, {"forward_prefetch", true}}, {}, 3,
                               {250, 333})}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A rank whose CPU never issues a collective: the other processes time out, the diagnosis
// (which asks rank 2's process how far it got) names rank 2 and the op, rank 0 prints it once
// and every process ends, within the timeout plus the launch, not a hang.
TEST(HostOverMpiFaults, ARankThatNeverJoinsEndsEveryProcessNamingOpAndRank) {
  const nlohmann::json scenario = testing::scenario(1, 4, {{"version", 2}});
  const planner::Schedule s = testing::plan(scenario);
  const int all_gather = first_op(s, planner::OpKind::all_gather);
  ASSERT_GE(all_gather, 0);
  const std::string path = write_scenario(scenario, "mpi_stall.json");
  const Launched r = mpirun(4, "run --backend host --launcher mpi --scenario " + path +
                                   " --time-scale 0.001 --timeout 2 --test-stall-rank 2 --test-stall-op " +
                                   std::to_string(all_gather));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "the run hung until `timeout` killed it";
  EXPECT_LT(r.seconds, kEndsWithinSeconds);
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("timeout: rank 2 never joined op " + std::to_string(all_gather) + " \"" +
                       s.ops[all_gather].name + "\""),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");  // no report from any process
}

// A rank that stalls after the step's last collective: the others finish the step and wait
// at the next step's barrier (an MPI_Ibarrier); the diagnosis asks every process which step it
// is in and names the rank that never started it.
TEST(HostOverMpiFaults, ARankThatNeverStartsTheNextStepIsNamedAtTheBarrier) {
  const nlohmann::json scenario = testing::scenario(1, 4, {{"version", 2}});
  const planner::Schedule s = testing::plan(scenario);
  const planner::Op& last = s.ops.back();
  ASSERT_FALSE(planner::is_collective(last.kind)) << last.name;
  const std::string path = write_scenario(scenario, "mpi_barrier.json");
  const Launched r = mpirun(4, "run --backend host --launcher mpi --scenario " + path +
                                   " --time-scale 0.001 --timeout 2 --steps 2 --test-stall-rank 3 --test-stall-op " +
                                   std::to_string(last.id));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, kEndsWithinSeconds);
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("timeout: rank 3 never started step 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 3 last issued op " + std::to_string(last.id - 1)), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

// A collective whose output is wrong on one rank: that process's data check fails, rank 0
// prints the check's message once and every process ends.
TEST(HostOverMpiFaults, ACorruptedCollectiveOutputEndsEveryProcessNamingOpAndRank) {
  const nlohmann::json scenario = testing::scenario(2, 2, {{"version", 2}, {"strategy", "HYBRID_SHARD"}});
  const planner::Schedule s = testing::plan(scenario);
  const int reduce_scatter = first_op(s, planner::OpKind::reduce_scatter);
  ASSERT_GE(reduce_scatter, 0);
  const std::string path = write_scenario(scenario, "mpi_corrupt.json");
  const Launched r = mpirun(4, "run --backend host --launcher mpi --scenario " + path +
                                   " --time-scale 0.001 --timeout 10 --test-corrupt-rank 3 --test-corrupt-op " +
                                   std::to_string(reduce_scatter));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, kEndsWithinSeconds);
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("data check failed: rank 3, op " + std::to_string(reduce_scatter) + " \"" +
                       s.ops[reduce_scatter].name + "\""),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

// `verify` under mpi: the prediction is made in every process, the measurement gathered, and
// rank 0 alone prints the table; peak memory agrees with the replay exactly.
TEST(HostOverMpi, VerifyReportsOnceWithTheGatheredMeasurement) {
  const nlohmann::json scenario = testing::scenario(2, 2, {{"version", 2}, {"strategy", "HYBRID_SHARD"}});
  const planner::Schedule s = testing::plan(scenario);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  const std::string path = write_scenario(scenario, "mpi_verify.json");
  const Launched r =
      mpirun(4, "verify --backend host --launcher mpi --scenario " + path + " --time-scale 0.001 --timeout 10 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_NE(j.dump().find("4 processes"), std::string::npos) << j.dump(1);
  EXPECT_EQ(j["memory"]["peak_allocated"]["measured"], predicted.peak_allocated_bytes) << j["memory"];
  EXPECT_EQ(j["memory"]["peak_allocated"]["predicted"], predicted.peak_allocated_bytes) << j["memory"];
}

// Issue 16 item 11: ranks whose schedules disagree on a collective's size moved equal buffers
// under the default --max-buffer-bytes (1 MiB), so the mismatch went unseen and the run
// exited 0. The members compare the planned bytes too. Rank 3 reads a schedule whose largest
// all-gather (a block's, 2 MiB) plans half the bytes (both sizes at or above the cap).
TEST(HostOverMpiFaults, RanksThatDisagreeOnACollectiveSizeAreCaughtUnderTheBufferCap) {
  const nlohmann::json scenario = testing::scenario(1, 4, {{"version", 2}}, {}, 2, {1024, 1024});
  const planner::Schedule s = testing::plan(scenario);
  int all_gather = -1;
  for (const planner::Op& op : s.ops)
    if (op.kind == planner::OpKind::all_gather && (all_gather < 0 || op.comm_bytes > s.ops[all_gather].comm_bytes))
      all_gather = op.id;
  ASSERT_GE(all_gather, 0);
  const double planned = s.ops[all_gather].comm_bytes;
  ASSERT_GE(planned / 2, RunOptions{}.max_buffer_bytes) << "both sizes must be above the default cap";
  nlohmann::json schedule = planner::schedule_to_json(s);
  const std::string base = ::testing::TempDir() + "mpi_disagree_";
  for (int rank = 0; rank < 4; ++rank) {
    if (rank == 3) schedule["ops"][all_gather]["comm_bytes"] = planned / 2;
    std::ofstream(base + std::to_string(rank) + ".json") << schedule.dump();
  }
  std::ofstream(base + "durations.json") << nlohmann::json(std::vector<double>(s.ops.size(), 0.0)).dump();
  const Launched r = mpirun_program(
      4, "sh -c '" + cli() + " run --backend host --launcher mpi --time-scale 0.001 --timeout 10 --durations " + base +
             "durations.json --schedule " + base + "$OMPI_COMM_WORLD_RANK.json'");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_LT(r.seconds, kEndsWithinSeconds);
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("collective mismatch"), std::string::npos) << r.err;
  char half[32];
  std::snprintf(half, sizeof half, "%.0f bytes planned", planned / 2);
  EXPECT_NE(r.err.find(half), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

// Three processes for a world of four: refused before anything runs, once.
TEST(HostOverMpiFaults, AWorldThatIsNotTheMpiWorldIsRefusedOnce) {
  const std::string path =
      write_scenario(testing::scenario(1, 4, {{"version", 2}}), "mpi_world.json");
  const Launched r = mpirun(3, "run --backend host --launcher mpi --scenario " + path + " --timeout 5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("the schedule's world has 4 ranks but MPI started 3 processes"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

// `mpirun -np 2 fsdpsim sweep`: each process evaluates its shard of the points (index % 2),
// process 0 gathers and merges them and alone reports: the CSV equals one process's byte for
// byte, the JSON too but for wall_seconds (threads: the processes' together, 2 x 1 = one
// process's 2).
TEST(SweepOverMpi, TwoProcessesReportOnceWhatOneProcessReports) {
  const std::string sweep = std::string("sweep --sweep ") + FSDPSIM_SOURCE_ROOT + "/scenarios/sweeps/llama3.1-8b-64xh100.json";
  const std::string one_csv = ::testing::TempDir() + "sweep_one.csv", mpi_csv = ::testing::TempDir() + "sweep_mpi.csv";
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  auto without_wall = [](const std::string& json) {
    std::string out;
    std::size_t at = 0;
    while (at < json.size()) {
      const std::size_t end = std::min(json.find('\n', at), json.size());
      const std::string line = json.substr(at, end - at);
      if (line.find("\"wall_seconds\"") == std::string::npos) out += line + "\n";
      at = end + 1;
    }
    return out;
  };
  const Launched one = mpirun_program(1, cli() + " " + sweep + " --threads 2 --json --csv " + one_csv);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Launched two = mpirun(2, sweep + " --threads 1 --json --csv " + mpi_csv);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_GT(read(one_csv).size(), 10000u);
  EXPECT_EQ(read(one_csv), read(mpi_csv));
  EXPECT_EQ(without_wall(one.out), without_wall(two.out));  // one report, from process 0 alone
}

// A sweep the resource guard refuses under mpirun: refused once, by process 0, and every process
// ends (a process refused while another sweeps would leave that one waiting in the gather).
TEST(SweepOverMpi, ARefusedSweepIsRefusedOnceAndEndsEveryProcess) {
  const Launched r = mpirun(2, std::string("sweep --sweep ") + FSDPSIM_SOURCE_ROOT +
                                   "/scenarios/sweeps/llama3.1-8b-64xh100.json --threads 1 --max-time 0.000001");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("not swept"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace fsdpsim::runtime

#endif  // FSDPSIM_WITH_MPI
