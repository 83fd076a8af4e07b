// `fsdpsim run`: execute a schedule with the micro-runtime (backend host or cuda) and report
// what was measured: step time, peak allocated and reserved memory per rank, a trace.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "models/json_input.h"
#include "planner/memory.h"
#include "runtime/launch.h"
#include "runtime/runtime.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

struct RunCommandOptions {
  std::string schedule, scenario, durations, trace;
  std::vector<std::string> overrides;
  bool json = false, no_check_data = false;
  runtime::RunOptions run;
  std::string launcher = "auto";
  CLI::Option* device = nullptr;
};

// Registers the options `run` and `verify` share.
void add_runtime_options(CLI::App* cmd, RunCommandOptions& o) {
  cmd->add_option("--schedule", o.schedule, "Schedule JSON file (what `fsdpsim schedule` writes)");
  cmd->add_option("-s,--scenario", o.scenario, "Scenario JSON file: plan it, then run the schedule");
  cmd->add_option("--set", o.overrides, "Override a scenario field: a.b.c=value (repeatable)");
  cmd->add_option("--backend", o.run.backend, "host (threads, shared memory) or cuda (GPUs, NCCL)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  cmd->add_option(
      "--virtual-world", o.run.virtual_world,
      "Play rank 0 of a world of N (the schedule's world size) on one device; collectives become local copies");
  cmd->add_option(
      "--durations", o.durations,
      "JSON file: modeled seconds per op (an array, or {\"durations_seconds\": [...]}); default: nominal rates");
  cmd->add_option("--time-scale", o.run.time_scale, "host: wall seconds per modeled second (0.01 plays 100x faster)")
      ->capture_default_str();
  cmd->add_option("--byte-scale", o.run.byte_scale, "host: real bytes a collective moves per planned byte")
      ->capture_default_str();
  cmd->add_option("--max-buffer-bytes", o.run.max_buffer_bytes,
                  "host: cap on real bytes per collective buffer (0: none)")
      ->capture_default_str();
  cmd->add_flag("--no-check-data", o.no_check_data, "host: do not check collective outputs");
  cmd->add_option("--memory-capacity", o.run.capacity_bytes, "host: reserved bytes a rank may hold (0: unbounded)");
  cmd->add_option("--timeout", o.run.timeout_seconds, "Seconds any one wait may last before the run is aborted")
      ->capture_default_str();
  cmd->add_option("--warmup", o.run.warmup_steps, "Steps played before measuring (default: 0 on host, 1 on cuda)");
  cmd->add_option("--steps", o.run.steps, "Measured steps")->capture_default_str();
  cmd->add_option("--launcher", o.launcher,
                  "single (this process plays every rank), mpi (one process per rank under mpirun/srun; rank 0 "
                  "reports), or auto (mpi when mpirun/srun started several processes)")
      ->check(CLI::IsMember({"auto", "single", "mpi"}))
      ->capture_default_str();
  o.device = cmd->add_option("--device", o.run.first_device,
                             "cuda: rank r runs on device N + r (mpi launcher: this process runs on device N; "
                             "default: its local rank on the node)")
                 ->capture_default_str();
  cmd->add_option("--gemm-dim", o.run.gemm_dim, "cuda: compute as bf16 GEMMs of this size cubed")
      ->capture_default_str();
  cmd->add_option("--trace", o.trace, "Write a Chrome trace (chrome://tracing, Perfetto) of the measured steps");
  cmd->add_flag("--json", o.json, "Print one JSON object for tools");
  // Fault injection for the tests (tests/runtime/mpi_test.cpp); not shown in --help.
  cmd->add_option("--test-stall-rank", o.run.hooks.stall_rank)->group("");
  cmd->add_option("--test-stall-op", o.run.hooks.stall_op)->group("");
  cmd->add_option("--test-corrupt-rank", o.run.hooks.corrupt_rank)->group("");
  cmd->add_option("--test-corrupt-op", o.run.hooks.corrupt_op)->group("");
}

void write_trace(const std::string& path, const planner::Schedule& s, const runtime::RunResult& r) {
  std::ofstream out(path);
  if (!out) throw InputError(path, "", "cannot write the file");
  out << runtime::trace_json(s, r).dump() << "\n";
}

std::string bytes_text(std::int64_t bytes) {
  return gib(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " B)";
}

void print_run(const planner::Schedule& s, const runtime::RunResult& r) {
  const planner::MemoryReport predicted = planner::replay_memory(s);
  std::cout << "run: " << (s.name.empty() ? std::string("schedule") : s.name) << ", " << s.ops.size()
            << " ops, world of " << s.world_size << "\n";
  std::cout << "backend: " << r.backend << " (" << r.device << ")\n";
  char scale[64];
  std::snprintf(scale, sizeof scale, " modeled (wall time / %g)", r.time_scale);
  std::cout << "step time: " << seconds_text(r.step_seconds()) << (r.time_scale != 1 ? scale : "")
            << ", slowest rank, mean of " << (r.ranks.empty() ? 0 : r.ranks[0].step_seconds.size())
            << " measured step(s)\n";
  Table t({"rank", "step", "peak allocated", "at op", "peak reserved", "device in use (peak)"});
  for (const runtime::RankResult& rank : r.ranks) {
    double step = 0;
    for (double x : rank.step_seconds) step += x / static_cast<double>(rank.step_seconds.size());
    t.add(
        {std::to_string(rank.rank), seconds_text(step), gib(static_cast<double>(rank.peak_allocated_bytes)),
         rank.peak_op >= 0 ? std::to_string(rank.peak_op) + " " + s.ops[rank.peak_op].name : std::string("-"),
         gib(static_cast<double>(rank.peak_reserved_bytes)),
         rank.device_used_peak_bytes >= 0 ? gib(static_cast<double>(rank.device_used_peak_bytes)) : std::string("-")});
  }
  std::cout << t.str();
  std::cout << "planned (replay): peak allocated " << bytes_text(predicted.peak_allocated_bytes) << ", peak reserved "
            << bytes_text(predicted.peak_reserved_bytes) << "\n";
  if (r.backend == "host" && !r.ranks.empty())
    std::cout << "collectives checked: " << r.ranks[0].collectives_checked << " per rank\n";
  for (const std::string& n : r.notes) std::cout << "note: " << n << "\n";
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunCommandOptions>();
  CLI::App* cmd =
      app.add_subcommand("run", "Execute a schedule with the micro-runtime (host threads or CUDA+NCCL) and measure it");
  add_runtime_options(cmd, *o);
  cmd->callback([o] {
    // Under mpirun/srun every process runs this: process 0 alone reports, and an error ends
    // every process with one message (runtime/launch.h).
    const runtime::Launch launch = runtime::resolve_launch(o->launcher);
    try {
      runtime::LoadedSchedule loaded = runtime::load_schedule_or_scenario(o->schedule, o->scenario, o->overrides);
      runtime::RunOptions run = o->run;
      run.launcher = launch.launcher;
      if (o->device->count() > 0) run.mpi_device = run.first_device;
      run.check_data = !o->no_check_data;
      if (!o->durations.empty()) run.durations_seconds = runtime::load_durations(o->durations, loaded.schedule);
      runtime::RunResult result = runtime::run_schedule(loaded.schedule, run);
      if (!result.reports()) return;
      if (!o->trace.empty()) write_trace(o->trace, loaded.schedule, result);
      if (o->json) {
        std::cout << runtime::run_result_json(loaded.schedule, result).dump(2) << "\n";
      } else {
        print_run(loaded.schedule, result);
        if (!o->trace.empty()) std::cout << "trace: " << o->trace << "\n";
      }
    } catch (const InputError& e) {
      if (launch.mpi()) runtime::end_all_processes(e.what(), 2);
      throw;
    } catch (const std::exception& e) {
      if (launch.mpi()) runtime::end_all_processes(e.what(), 1);
      throw;
    }
  });
}

}  // namespace fsdpsim::tools
