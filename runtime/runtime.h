// The micro-runtime: plays a Schedule on hardware and measures it.
//
// One worker per rank issues the rank's ops in the schedule's CPU issue order: it blocks on
// the op's `cpu_waits`, makes the op's allocations, hands the op to its stream (which waits
// for the op's `deps`, then does the work), and releases the op's frees, exactly where the
// planner put them. Streams run their ops in order. Every op's start and end, and every
// rank's allocated and reserved memory are recorded.
//
// Backends:
//   host  threads as ranks and streams; collectives move and reduce real bytes through
//         shared memory (bounded by `byte_scale` / `max_buffer_bytes`); compute waits for
//         the op's modeled duration; a tracking allocator with the caching allocator's
//         policy keeps the books at full planned sizes. Runs anywhere; CI tests it.
//   cuda  CUDA streams and events, NCCL collectives on device buffers of the planned
//         sizes, cuBLAS GEMMs for FLOPs, device copies for memory-bound ops, a caching
//         allocator on real cudaMalloc'd segments (runtime/cuda/). One process drives all
//         GPUs of one node; --virtual-world plays rank 0 of a larger world on one GPU.
//
// Faults end the run with a RuntimeError naming the op and the rank (a hung collective or
// wait times out, an NCCL/CUDA error, out of memory, a data check failing); a schedule the
// runtime cannot play (malformed, cyclic, an event waited on before it is recorded) is an
// InputError naming the op. Nothing hangs: every wait has a timeout.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/op_costs.h"
#include "planner/schedule.h"

namespace fsdpsim::runtime {

// ---- errors ------------------------------------------------------------------------------

enum class FaultKind { timeout, out_of_memory, nccl, cuda, data, mismatch, device, internal };
std::string to_string(FaultKind k);

// A fault while playing a schedule. what() reads "rank R, op N \"name\": ..." when the op
// and rank are known; `rank`/`op` are -1 otherwise.
class RuntimeError : public std::runtime_error {
 public:
  RuntimeError(FaultKind kind, int rank, int op, const std::string& message);
  FaultKind kind() const { return kind_; }
  int rank() const { return rank_; }
  int op() const { return op_; }

 private:
  FaultKind kind_;
  int rank_;
  int op_;
};

// ---- options -------------------------------------------------------------------------------

struct RunOptions {
  std::string backend = "host";  // "host" or "cuda"
  // How the ranks are spread over processes (runtime/launch.h): "single" (this process plays
  // every rank), "mpi" (one process per rank, started by mpirun or srun: this process plays
  // its MPI world rank; the results are gathered on rank 0), or "auto" (mpi when the
  // environment says mpirun/srun started several processes, else single). Under mpi a run is
  // collective: every process makes the same sequence of run_schedule calls, one at a time
  // (runs from two threads of one process at once are not supported).
  std::string launcher = "single";
  // 0: play every rank of the schedule's world. N > 0: play rank 0 of a world of N (N must be
  // the schedule's world size) on one device; each collective becomes a local copy of the
  // bytes the rank would send and receive.
  int virtual_world = 0;
  // The ops' costs (the executor contract, planner/op_costs.h): the host backend waits
  // costs.duration_seconds for compute and pads collectives to it; the cuda backend uses them
  // only for host-stream ops (a CPU optimizer step). Required: the runtime has no rates of its own.
  planner::OpCosts costs;
  double time_scale = 1.0;  // host: wall seconds per modeled second (0.01 plays 100x faster)
  // host: real bytes a collective moves = planned bytes x byte_scale, at most
  // max_buffer_bytes per buffer (0: no cap). Memory accounting stays at planned sizes.
  double byte_scale = 1.0;
  std::int64_t max_buffer_bytes = 1 << 20;
  bool check_data = true;       // host: check every collective's output (sum / concatenation)
  double timeout_seconds = 60;  // any single wait (collective, event, CPU wait) longer than this fails
  int warmup_steps = -1;        // steps played before measuring; -1: 1 on cuda, on host 1 when the schedule makes state at its first step, else 0
  int steps = 1;                // measured steps
  double capacity_bytes = 0;    // host: reserved memory a rank may hold (0: unbounded)
  // cuda
  int first_device = 0;                      // rank r runs on device first_device + r
  int mpi_device = -1;                       // mpi launcher: this process's device (-1: its local rank on the node)
  int gemm_dim = 4096;                       // compute as GEMMs of gemm_dim^3 (bf16, fp32 accumulate)
  std::int64_t copy_chunk_bytes = 64 << 20;  // memory-bound work as copies of this size
  // For tests of the fault paths.
  struct TestHooks {
    int stall_rank = -1, stall_op = -1;      // this rank's CPU stops before issuing this op
    int corrupt_rank = -1, corrupt_op = -1;  // host: flip one output value of this collective
  } hooks;
};

// ---- results --------------------------------------------------------------------------------

struct OpTiming {
  double start_seconds = -1;  // when the op began on its stream (its deps met), from the step start
  double end_seconds = -1;
};

struct MemorySample {
  double time_seconds = 0;  // CPU issue time of `op`, from the step start
  int op = -1;
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
};

struct RankResult {
  int rank = 0;
  std::vector<std::vector<OpTiming>> steps;   // per measured step, per op
  std::vector<double> step_seconds;           // per measured step: step start to last op end
  std::int64_t allocated_at_start_bytes = 0;  // persistent state
  std::int64_t peak_allocated_bytes = 0;      // over the measured steps
  int peak_op = -1;                           // op whose allocations reached the peak (-1: before the step)
  std::int64_t peak_reserved_bytes = 0;       // over the whole run
  std::int64_t allocator_retries = 0;         // times cached segments were released to fit
  // Host memory (the schedule's pinned_host / pageable_host allocations), counted as the
  // executor makes and frees them: the highest of each over the measured steps, and of the sum.
  std::int64_t peak_host_pinned_bytes = 0;
  std::int64_t peak_host_pageable_bytes = 0;
  std::int64_t peak_host_bytes = 0;
  std::vector<std::int64_t> allocated_at_op;  // last measured step: allocated right after each op's allocations
  std::vector<MemorySample> memory;           // last measured step
  // cuda: device memory in use (cudaMemGetInfo, the whole process on this GPU) before the
  // first step and at its highest; runtime scratch (GEMM operands, copy buffers, unbound
  // collective buffers) that PyTorch would not hold. -1 where not measured.
  std::int64_t device_used_before_bytes = -1;
  std::int64_t device_used_peak_bytes = -1;
  std::int64_t scratch_bytes = 0;
  std::int64_t collectives_checked = 0;  // host: collective outputs checked against the expected data
};

struct RunResult {
  std::string backend;
  std::string device;  // what ran it, in words
  int world_size = 1;
  bool virtual_world = false;
  double time_scale = 1;          // times below are modeled seconds (wall seconds / time_scale)
  std::vector<RankResult> ranks;  // the ranks played
  std::vector<std::string> notes;
  // The launch: "single", or "mpi" with this process's rank among `processes`. Under mpi the
  // ranks' results are gathered on process 0, whose RunResult holds every rank; the other
  // processes' hold their own rank only and do not report (reports() is false).
  std::string launcher = "single";
  int process_rank = 0;
  int processes = 1;
  bool reports() const { return process_rank == 0; }
  double step_seconds() const;                // slowest rank, mean over measured steps
  std::int64_t peak_allocated_bytes() const;  // highest rank
  std::int64_t peak_reserved_bytes() const;
  std::int64_t peak_host_pinned_bytes() const;
  std::int64_t peak_host_pageable_bytes() const;
  std::int64_t peak_host_bytes() const;
};

// ---- entry points ----------------------------------------------------------------------------

// Plays the schedule. Throws InputError for a schedule it cannot play, RuntimeError for a
// fault while playing (the first one; the run is aborted and every thread joined).
RunResult run_schedule(const planner::Schedule& schedule, const RunOptions& options);

// Checks beyond planner::validate_schedule that a schedule is playable: every dep issued
// before the op that waits on it (a CUDA event cannot be waited on before it is recorded),
// process groups that tile the world. Throws InputError naming the op.
void check_playable(const planner::Schedule& schedule, const std::string& file);

// Reads a schedule file (planner::schedule_from_json) and checks it is playable.
planner::Schedule load_schedule(const std::string& path);

// Per-op modeled durations read from a JSON file: an array of seconds, or an object with
// "durations_seconds" (that array). Its length must be the schedule's op count.
std::vector<double> load_durations(const std::string& path, const planner::Schedule& schedule);

// ---- collectives: who takes part and what moves ------------------------------------------

// The instances of a process group, each its ranks in order (planner::group_members: the
// layout the planner wrote in the schedule).
std::vector<std::vector<int>> group_instances(const planner::Schedule& schedule, int group);

// Per process group of the schedule: whether any collective uses it (backends build
// communicators only for those).
std::vector<bool> groups_with_collectives(const planner::Schedule& schedule);

struct CollectiveBytes {
  int ranks = 1;             // group size
  double send_bytes = 0;     // this rank's input buffer
  double recv_bytes = 0;     // this rank's output buffer
  double traffic_bytes = 0;  // what a ring moves in and out of one rank: (k-1)/k x size (x2 for all-reduce)
};
// comm_bytes is the buffer as NCCL counts it: the gathered output of an all-gather, the
// input of a reduce-scatter, the buffer of an all-reduce.
CollectiveBytes collective_bytes(const planner::Schedule& schedule, const planner::Op& op);

// The planned allocation a collective works in, where there is one: the all-gather output
// (all-gather runs in place), the reduce-scatter input (output in place unless the op
// makes its own output allocation), the all-reduce buffer. Chosen among allocations live
// when the op is issued, of the op's unit, at least `comm_bytes` large, the most recent
// first. -1 where none fits (the cuda backend then uses a scratch buffer).
struct CollectiveBinding {
  int main_alloc = -1;
  int output_alloc = -1;  // reduce-scatter or all-to-all output made by the op itself
};
std::vector<CollectiveBinding> bind_collective_buffers(const planner::Schedule& schedule);

// The cuBLAS workspaces of the schedule ([cuBLAS workspaces], planner/plan_context.cpp): PyTorch
// gives each thread that runs GEMMs its own cuBLAS handle and workspace, allocated through the
// caching allocator: the main thread's (forward) and autograd's backward thread's. The planner
// allocates them in that order as MemCategory::workspace; -1 where the schedule has none (a
// hand-written one), and a schedule with one workspace uses it for both threads.
struct CublasWorkspaces {
  int main_thread = -1;
  int backward_thread = -1;
};
CublasWorkspaces cublas_workspaces(const planner::Schedule& schedule);
// The workspace an op's GEMMs run in: backward and recompute ops run on autograd's thread, the
// rest on the main thread.
int cublas_workspace_of(const CublasWorkspaces& workspaces, const planner::Op& op);

// ---- output -------------------------------------------------------------------------------------

// Chrome trace-event JSON (chrome://tracing, Perfetto) in the simulator's layout
// (sim/trace.h) so the two overlay: a process per rank (pid = rank), tid 0 the CPU issue
// thread (and host-stream ops), tid 1 + planner::Stream a stream ("stream compute", ...),
// an "X" event per op (name = op name, cat = op kind, ts/dur in microseconds from the step
// start, args as the simulator's), counters "memory allocated (bytes)" and "memory
// reserved (bytes)" at each op's issue, an instant at the peak. Measured steps follow
// each other.
nlohmann::json trace_json(const planner::Schedule& schedule, const RunResult& result);

// The run as one JSON object (`fsdpsim run --json`).
nlohmann::json run_result_json(const planner::Schedule& schedule, const RunResult& result);

// One rank's measurements, whole (what an mpi launch sends to rank 0), and back.
nlohmann::json rank_result_to_json(const RankResult& rank);
RankResult rank_result_from_json(const nlohmann::json& j);

}  // namespace fsdpsim::runtime
