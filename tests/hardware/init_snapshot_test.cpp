// [Job prelude] against PyTorch: the segments FSDP1's init left in the caching allocator, as
// the H200 memory snapshot of 2026-11-28 recorded them (measured; tests/data/hardware/
// memory_snapshot-h200-2026-11-28-llama3.1-8b-8layers-fsdp1-ac_full-reshard_true-n64.pickle.gz,
// its trace's segment_alloc events before the first forward's first all-gather (events 0-445):
// every size below is a cudaMalloc PyTorch 2.11 made there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

// The snapshot's case (tools/hardware/fsdp_memory.py --dry-run prints the same overrides).
Plan snapshot_case_plan() {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  const Scenario sc = load_scenario(
      root + "/tests/data/hardware/inputs/base-scenario.json",
      {"model=hf:" + root + "/tests/data/hardware/inputs/llama3.1-8b-8layers.json", "cluster.nodes=8",
       "cluster.gpus_per_node=8", "training.micro_batch=1", "training.seq_len=4096", "training.global_batch=64",
       "training.param_dtype=bf16", "training.reduce_dtype=fp32", "training.master_dtype=fp32",
       "training.optimizer=adamw", "training.activation_checkpointing=full", "fsdp.version=1",
       "fsdp.strategy=FULL_SHARD", "fsdp.wrap.policy=block", "init=meta"});
  return plan_step(sc);
}

TEST(InitSnapshot, Fsdp1InitLeavesTheSegmentsPyTorchMade) {
  const Plan plan = snapshot_case_plan();
  const std::vector<std::int64_t> modelled = prelude_segments(plan.schedule);
  // Measured: the norms' small-pool segment; eight 14 MiB shards; k, v; q, o; gate, up, down;
  // a block's flat copy; the embedding and the output layer; the root's flat copy. The lazy
  // init (events 365-445) made none: its buffers fit the cached blocks.
  const std::vector<std::int64_t> measured = {
      2097152,    14680064,   14680064,   14680064,   14680064,   14680064,   14680064,
      14680064,   14680064,   16777216,   16777216,   67108864,   67108864,   234881024,
      234881024,  234881024,  874512384,  2101346304, 2101346304, 4204789760};
  EXPECT_EQ(modelled, measured);
}

// The same snapshot at its end (after the measured step), its segments summed by the stream that
// made them (the snapshot's `segments`, each with its `stream`): FSDP1's side streams hold what
// [FSDP1 streams] (planner/plan_fsdp1.cpp) puts there, to the byte; the compute stream, which
// holds the init segments and the activations, within 1%.
TEST(InitSnapshot, Fsdp1StepSegmentsSitInTheStreamsPyTorchUses) {
  const MemoryReport m = replay_memory(snapshot_case_plan().schedule);
  auto at = [&](Stream s) { return m.reserved_by_stream_at_end[static_cast<std::size_t>(s)]; };
  EXPECT_EQ(at(Stream::copy), 33554432);            // pre-unshard: the root's low-precision shard
  EXPECT_EQ(at(Stream::all_gather), 5960105984);    // unshard: 2 x 2,103 + 4 x 438 MB
  EXPECT_EQ(at(Stream::reduce_scatter), 5196742656);  // post-backward: 4,205 + 874 + 8 x 14.7 MB
  EXPECT_NEAR(static_cast<double>(at(Stream::compute)), 10343153664.0, 0.01 * 10343153664.0);
}

}  // namespace
}  // namespace fsdpsim::planner
