// `fsdpsim run`: execute a schedule with the micro-runtime (backend host or cuda) and report
// what was measured: step time, peak allocated and reserved memory per rank, a trace.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "models/json_input.h"
#include "planner/memory.h"
#include "runtime/launch.h"
#include "runtime/runtime.h"
#include "tools/commands.h"
#include "tools/format.h"
#include "tools/runtime_options.h"

namespace fsdpsim::tools {

namespace {

void print_run(const PlayableStep& step, const runtime::RunResult& r) {
  const planner::Schedule& s = step.schedule;
  const planner::MemoryReport predicted = planner::replay_memory(s, step.capacity_bytes);
  std::cout << "run: " << (s.name.empty() ? std::string("schedule") : s.name) << ", " << s.ops.size()
            << " ops, world of " << s.world_size << "\n";
  std::cout << "backend: " << r.backend << " (" << r.device << ")\n";
  char scale[64];
  std::snprintf(scale, sizeof scale, " modeled (wall time / %g)", r.time_scale);
  std::cout << "step time: " << seconds_text(r.step_seconds()) << (r.time_scale != 1 ? scale : "")
            << ", slowest rank, mean of " << (r.ranks.empty() ? 0 : r.ranks[0].step_seconds.size())
            << " measured step(s)\n";
  // Host memory (offloaded state) only where the plan or the run holds some.
  const bool host = predicted.peak_host_bytes > 0 || r.peak_host_bytes() > 0;
  std::vector<std::string> header = {"rank", "step", "peak allocated", "at op", "peak reserved",
                                     "device in use (peak)"};
  if (host) header.insert(header.end(), {"host pinned", "host pageable", "host (peak)"});
  Table t(header);
  for (const runtime::RankResult& rank : r.ranks) {
    double step_seconds = 0;
    for (double x : rank.step_seconds) step_seconds += x / static_cast<double>(rank.step_seconds.size());
    std::vector<std::string> row = {
        std::to_string(rank.rank), seconds_text(step_seconds), gib(static_cast<double>(rank.peak_allocated_bytes)),
        rank.peak_op >= 0 ? std::to_string(rank.peak_op) + " " + s.ops[rank.peak_op].name : std::string("-"),
        gib(static_cast<double>(rank.peak_reserved_bytes)),
        rank.device_used_peak_bytes >= 0 ? gib(static_cast<double>(rank.device_used_peak_bytes)) : std::string("-")};
    if (host)
      row.insert(row.end(), {gib(static_cast<double>(rank.peak_host_pinned_bytes)),
                             gib(static_cast<double>(rank.peak_host_pageable_bytes)),
                             gib(static_cast<double>(rank.peak_host_bytes))});
    t.add(std::move(row));
  }
  std::cout << t.str();
  std::cout << "planned (replay): peak allocated " << gib_and_bytes(predicted.peak_allocated_bytes) << ", peak reserved "
            << gib_and_bytes(predicted.peak_reserved_bytes) << ", within " << capacity_text(step) << "\n";
  if (host)
    std::cout << "planned host memory (replay): pinned " << gib_and_bytes(predicted.peak_host_pinned_bytes)
              << ", pageable " << gib_and_bytes(predicted.peak_host_pageable_bytes) << ", both at their highest "
              << gib_and_bytes(predicted.peak_host_bytes) << "\n";
  if (r.backend == "host" && !r.ranks.empty())
    std::cout << "collectives checked: " << r.ranks[0].collectives_checked << " per rank\n";
  for (const std::string& n : r.notes) std::cout << "note: " << n << "\n";
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RuntimeCommandOptions>();
  CLI::App* cmd =
      app.add_subcommand("run", "Execute a schedule with the micro-runtime (host threads or CUDA+NCCL) and measure it");
  add_runtime_options(cmd, *o);
  cmd->callback([o] {
    run_under_launcher(o->launcher, [&](const runtime::Launch& launch) {
      PlayableStep loaded = load_playable_step(*o);
      runtime::RunOptions run = run_options(*o, loaded, launch);
      run.costs = std::move(loaded.costs);
      runtime::RunResult result = runtime::run_schedule(loaded.schedule, run);
      if (!result.reports()) return;
      if (!o->trace.empty()) write_trace(o->trace, loaded.schedule, result);
      if (o->json) {
        std::cout << runtime::run_result_json(loaded.schedule, result).dump(2) << "\n";
      } else {
        print_run(loaded, result);
        if (!o->trace.empty()) std::cout << "trace: " << o->trace << "\n";
      }
    });
  });
}

}  // namespace fsdpsim::tools
