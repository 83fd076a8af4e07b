// Faults end the run with a message naming the op and the rank, never a hang: a schedule
// that is malformed or cyclic is refused, a rank that never joins a collective makes the
// others time out, memory that runs out names the allocation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "models/json_input.h"
#include "planner/memory.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"

namespace fsdpsim::runtime {
namespace {

// A hand-written two-stream schedule: op 0 on compute, op 1 an all-gather.
nlohmann::json tiny_schedule() {
  return {{"format", "fsdpsim-schedule"},
          {"version", 1},
          {"name", "tiny"},
          {"world_size", 2},
          {"groups", {{{"name", "shard"}, {"ranks", 2}, {"nodes", 1}}}},
          {"allocations", {{{"id", 0}, {"bytes", 4096}, {"category", "all_gather_buffer"}, {"stream", "all_gather"}}}},
          {"ops",
           {{{"id", 0}, {"kind", "compute_fwd"}, {"stream", "compute"}, {"name", "fwd block"}, {"flops", 1e9}},
            {{"id", 1},
             {"kind", "all_gather"},
             {"stream", "all_gather"},
             {"name", "all-gather block"},
             {"comm_bytes", 4096},
             {"group", 0},
             {"allocs", {0}},
             {"frees", {0}}}}}};
}

std::string write_temp(const nlohmann::json& j, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << j.dump(1);
  return path;
}

TEST(Faults, TinyScheduleRuns) {
  const planner::Schedule s = load_schedule(write_temp(tiny_schedule(), "tiny.json"));
  RunOptions o = testing::fast_host(s);
  const RunResult r = run_schedule(s, o);
  EXPECT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].peak_allocated_bytes, 4096);
}

TEST(Faults, ACyclicScheduleIsRefusedNamingTheOps) {
  nlohmann::json j = tiny_schedule();
  j["ops"][0]["deps"] = {1};
  j["ops"][1]["deps"] = {0};
  const std::string path = write_temp(j, "cyclic.json");
  try {
    load_schedule(path);
    FAIL() << "a cyclic schedule was accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cycle"), std::string::npos) << m;
    EXPECT_NE(m.find("fwd block"), std::string::npos) << m;
    EXPECT_NE(m.find("all-gather block"), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
  }
  // Built in memory (not read from JSON), the executor refuses it too, before any thread starts.
  planner::Schedule s = load_schedule(write_temp(tiny_schedule(), "tiny2.json"));
  s.ops[0].deps = {1};
  s.ops[1].deps = {0};
  try {
    run_schedule(s, testing::fast_host(s));
    FAIL() << "run_schedule played a cyclic schedule";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cycle"), std::string::npos) << m;
    EXPECT_NE(m.find("fwd block"), std::string::npos) << m;
  }
}

TEST(Faults, WaitingOnAnOpIssuedLaterIsRefused) {
  nlohmann::json j = tiny_schedule();
  j["ops"][0]["deps"] = {1};  // acyclic, but op 0's stream would wait on an event not yet recorded
  try {
    load_schedule(write_temp(j, "forward.json"));
    FAIL() << "a dep on a later op was accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ops[0].deps"), std::string::npos) << m;
    EXPECT_NE(m.find("fwd block"), std::string::npos) << m;
    EXPECT_NE(m.find("all-gather block"), std::string::npos) << m;
  }
}

TEST(Faults, MalformedSchedulesAreRefused) {
  nlohmann::json no_group = tiny_schedule();
  no_group["ops"][1].erase("group");
  EXPECT_THROW(load_schedule(write_temp(no_group, "nogroup.json")), InputError);
  nlohmann::json bad_group = tiny_schedule();
  bad_group["groups"][0]["ranks"] = 3;  // does not tile a world of 2
  EXPECT_THROW(load_schedule(write_temp(bad_group, "badgroup.json")), InputError);
  // More nodes than ranks to spread over them: an error naming no file until session 38.
  nlohmann::json spread = tiny_schedule();
  spread["groups"][0]["nodes"] = 5;
  try {
    load_schedule(write_temp(spread, "spread.json"));
    ADD_FAILURE() << "a group of 2 ranks over 5 nodes was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), "groups[0].nodes") << e.what();
  }
  nlohmann::json double_free = tiny_schedule();
  double_free["ops"][0]["frees"] = {0};  // freed before it is made
  EXPECT_THROW(load_schedule(write_temp(double_free, "free.json")), InputError);
  EXPECT_THROW(load_schedule(::testing::TempDir() + "does-not-exist.json"), InputError);
  const planner::Schedule s = load_schedule(write_temp(tiny_schedule(), "tiny3.json"));
  EXPECT_THROW(load_durations(write_temp(nlohmann::json::array({1.0}), "short.json"), s), InputError);
  EXPECT_EQ(load_durations(write_temp({{"durations_seconds", {0.5, 0.25}}}, "d.json"), s),
            (std::vector<double>{0.5, 0.25}));
}

int first_op(const planner::Schedule& s, planner::OpKind kind) {
  for (const auto& op : s.ops)
    if (op.kind == kind) return op.id;
  return -1;
}

TEST(Faults, ARankThatNeverJoinsMakesTheOthersTimeOutNamingOpAndRank) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 4, {{"version", 2}}));
  const int all_gather = first_op(s, planner::OpKind::all_gather);
  RunOptions o = testing::fast_host(s);
  o.timeout_seconds = 0.3;
  o.hooks.stall_rank = 2;
  o.hooks.stall_op = all_gather;
  const auto begin = std::chrono::steady_clock::now();
  try {
    run_schedule(s, o);
    FAIL() << "the run finished although rank 2 never joined";
  } catch (const RuntimeError& e) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_LT(seconds, 3.0);
    EXPECT_EQ(e.kind(), FaultKind::timeout);
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.op(), all_gather);
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2 never joined"), std::string::npos) << m;
    EXPECT_NE(m.find("op " + std::to_string(all_gather) + " \"" + s.ops[all_gather].name + "\""), std::string::npos)
        << m;
  }
}

TEST(Faults, ARankStuckBeforeComputeIsBlamedAtTheNextCollective) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 4, {{"version", 2}}));
  const int forward = first_op(s, planner::OpKind::compute_fwd);
  RunOptions o = testing::fast_host(s);
  o.timeout_seconds = 0.3;
  o.hooks.stall_rank = 1;
  o.hooks.stall_op = forward;
  try {
    run_schedule(s, o);
    FAIL() << "the run finished although rank 1 stalled";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.kind(), FaultKind::timeout);
    EXPECT_EQ(e.rank(), 1);
    ASSERT_GE(e.op(), 0);
    EXPECT_TRUE(planner::is_collective(s.ops[e.op()].kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 never joined"), std::string::npos) << e.what();
  }
}

TEST(Faults, ARankThatNeverStartsTheNextStepIsNamedAtTheStepBarrier) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 4, {{"version", 2}}));
  const planner::Op& last = s.ops.back();  // the optimizer: after the step's last collective
  ASSERT_FALSE(planner::is_collective(last.kind)) << last.name;
  RunOptions o = testing::fast_host(s);
  o.steps = 2;
  o.timeout_seconds = 0.3;
  o.hooks.stall_rank = 1;
  o.hooks.stall_op = last.id;
  try {
    run_schedule(s, o);
    FAIL() << "the run finished although rank 1 stalled";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.kind(), FaultKind::timeout);
    EXPECT_EQ(e.rank(), 1) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1 never started step 1"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 last issued op " + std::to_string(last.id - 1)), std::string::npos) << m;
  }
}

TEST(Faults, OutOfMemoryNamesTheOpTheRankAndTheAllocation) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  const planner::MemoryReport m = planner::replay_memory(s);
  RunOptions o = testing::fast_host(s);
  o.capacity_bytes = static_cast<double>(m.peak_reserved_bytes) * 0.6;
  try {
    run_schedule(s, o);
    FAIL() << "the run fit in " << o.capacity_bytes << " bytes";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.kind(), FaultKind::out_of_memory);
    const std::string text = e.what();
    EXPECT_NE(text.find("out of memory: rank " + std::to_string(e.rank())), std::string::npos) << text;
    if (e.op() >= 0) {
      EXPECT_NE(text.find(s.ops[e.op()].name), std::string::npos) << text;
    }
    EXPECT_NE(text.find("allocation "), std::string::npos) << text;
  }
  o.capacity_bytes = static_cast<double>(m.peak_reserved_bytes);  // exactly enough
  EXPECT_NO_THROW(run_schedule(s, o));
}

TEST(Faults, UnknownBackendAndBadOptionsAreRefused) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  RunOptions o = testing::fast_host(s);
  o.backend = "tpu";
  EXPECT_THROW(run_schedule(s, o), InputError);  // an option error: the CLI exits 2
  o = testing::fast_host(s);
  o.costs.duration_seconds.pop_back();
  EXPECT_THROW(run_schedule(s, o), std::invalid_argument);
  o = testing::fast_host(s);
  o.time_scale = 0;
  EXPECT_THROW(run_schedule(s, o), std::invalid_argument);
}

}  // namespace
}  // namespace fsdpsim::runtime
