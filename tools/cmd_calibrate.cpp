// `fsdpsim calibrate`: micro-benchmarks on this machine through the runtime's backends, fits,
// and a calibration JSON that estimate / simulate / sweep read (a scenario's "calibration").
#include <cmath>
#include <cstdio>
#include <iostream>

#include "calibrate/calibrate.h"
#include "models/json_input.h"
#include "planner/scenario.h"
#include "runtime/launch.h"
#include "sim/scenario_loader.h"
#include "tools/commands.h"
#include "tools/option_checks.h"
#include "tools/runtime_options.h"
#include "tools/output_file.h"
#include "tools/scenario_input.h"

namespace fsdpsim::tools {

namespace {

struct CalibrateCommandOptions {
  ScenarioInputOptions input;  // --scenario FILE or --model NAME --gpus 64xH100, and --set
  std::string output;
  std::string launcher = "auto";
  bool json = false, quiet = false, every_row = false;
  calibrate::Options bench;
};

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void run_calibrate(const CalibrateCommandOptions& o, const runtime::Launch& launch);

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Micro-benchmarks (GEMM, copies, collectives, launch, interference) -> calibration JSON");
  // The scenario gives the GPU, the model's layer shapes and the process groups measured.
  add_scenario_input_options(cmd, o->input);
  cmd->add_option("-o,--output", o->output, "Calibration JSON to write")->required();
  cmd->add_option("--backend", o->bench.backend, "host (CPU threads, shared memory) or cuda (GPUs, NCCL)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--reps", o->bench.repetitions, "Timed repetitions per benchmark (medians over these)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup", o->bench.warmup, "Untimed repetitions first")->check(CLI::Range(0, 1000000))->capture_default_str();
  // Byte sizes up to 2^50 (1 PiB): far past any buffer, and the size loop stays finite.
  constexpr double kMaxBenchBytes = 1125899906842624.0;
  cmd->add_option("--min-bytes", o->bench.min_bytes, "Smallest collective buffer (bytes, or with a unit: 1K, 256M, 4G, 1GiB: binary)")
      ->transform(CLI::AsSizeValue(false))
      ->check(finite_number())
      ->check(CLI::Range(4.0, kMaxBenchBytes))
      ->capture_default_str();
  cmd->add_option("--max-bytes", o->bench.max_bytes, "Largest collective buffer (bytes, or with a unit: 1K, 256M, 4G, 1GiB: binary)")
      ->transform(CLI::AsSizeValue(false))
      ->check(finite_number())
      ->check(CLI::Range(4.0, kMaxBenchBytes))
      ->capture_default_str();
  // One validator with one wording: CLI11's Range printed [1 - 1024] in --help and 1.000001 in its
  // error (the session-38 input audit).
  cmd->add_option("--size-step", o->bench.size_step, "Factor between collective sizes, above 1 and at most 1024")
      ->check(number_within(1, true, 1024, "a factor above 1 and at most 1024", "FACTOR in (1, 1024]"))
      ->capture_default_str();
  cmd->add_option("--host-max-bytes", o->bench.host_max_bytes,
                  "host: cap on collective sizes (keeps CI quick; said in the output; 0: none; 16M works too)")
      ->transform(CLI::AsSizeValue(false))
      ->check(finite_number())
      ->check(CLI::Range(0.0, kMaxBenchBytes))
      ->capture_default_str();
  cmd->add_option("--host-max-ranks", o->bench.host_max_ranks, "host: skip spans with more ranks (threads)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--host-max-gemm-flops", o->bench.host_max_gemm_flops,
                  "host: scale the model's GEMM shapes down to at most this many FLOPs")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--host-max-copy-bytes", o->bench.host_max_copy_bytes, "host: largest memcpy (64M works too)")
      ->transform(CLI::AsSizeValue(false))
      ->check(finite_number())
      ->check(CLI::Range(1.0, kMaxBenchBytes))
      ->capture_default_str();
  cmd->add_option("--timeout", o->bench.timeout_seconds, "Seconds any one wait inside the runtime may last")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--device", o->bench.first_device, "cuda: rank r runs on device N + r")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
  cmd->add_option("--launcher", o->launcher,
                  "auto, single (this process plays every rank) or mpi (under mpirun/srun, one process per rank of "
                  "the scenario's world: spans across nodes are measured)")
      ->check(CLI::IsMember({"auto", "single", "mpi"}))
      ->capture_default_str();
  cmd->add_flag("--every-row", o->every_row, "Print the error of every measurement, not only the summary");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines on stderr");
  cmd->add_flag("--json", o->json, "Print one JSON summary object on stdout");
  // Under mpirun/srun process 0 alone fits, writes and prints (run_under_launcher).
  cmd->callback([o] { run_under_launcher(o->launcher, [&](const runtime::Launch& launch) { run_calibrate(*o, launch); }); });
}

namespace {

// What --json prints: where the calibration went, what was fitted and how well.
nlohmann::json summary_json(const std::string& output, const calibrate::Measurements& m,
                            const calibrate::FitResult& f, const nlohmann::json& calibration) {
  nlohmann::json s;
  s["output"] = output;
  s["backend"] = m.backend;
  s["device"] = m.device;
  s["gpu"] = m.gpu;
  nlohmann::json fields = nlohmann::json::object();
  for (const std::string& field : f.fitted_fields)
    if (field != "nccl") fields[field] = calibration[field];
  s["fitted"] = fields;
  s["goodness"] = calibration["fit"]["goodness"];
  s["collectives"] = calibration["fit"]["collectives"];
  s["notes"] = f.notes;
  return s;
}

void print_summary(const std::string& output, const calibrate::Measurements& m, const calibrate::FitResult& f,
                   const nlohmann::json& calibration, bool every_row) {
  std::cout << "calibration of " << m.gpu << " on " << m.device << " (backend " << m.backend << ")\n\n";
  for (const std::string& field : f.fitted_fields)
    if (field != "nccl") std::cout << "  " << field << " = " << number_text(calibration[field].get<double>()) << "\n";
  for (const calibrate::CollectiveFit& cf : f.collectives) {
    std::cout << "  " << planner::collective_name(cf.kind) << " " << cf.span.ranks << " ranks / " << cf.span.nodes
              << (cf.span.nodes == 1 ? " node" : " nodes") << ":";
    for (const calibrate::LineFit& l : cf.fit.segments)
      std::cout << "  [alpha " << number_text(l.alpha_seconds * 1e6) << " us, busbw "
                << number_text(l.bandwidth_bytes_per_second() / 1e9) << " GB/s]";
    for (double x : cf.fit.crossovers_x)
      std::cout << "  crossover at " << number_text(x / planner::bus_factor(cf.kind, cf.span.ranks)) << " B";
    std::cout << "\n";
  }
  std::cout << "\n" << calibrate::fit_table(f, every_row);
  if (!f.notes.empty()) {
    std::cout << "\nnotes:\n";
    for (const std::string& n : f.notes) std::cout << "  - " << n << "\n";
  }
  std::cout << "\nwrote " << output << " (use it with --set calibration=" << output << ")\n";
}

void write_calibration(const std::string& output, const nlohmann::json& calibration) {
  write_output_file(output, calibration.dump(2) + "\n", "the calibration file");
}

void run_calibrate(const CalibrateCommandOptions& o, const runtime::Launch& launch) {
  const planner::Scenario scenario = *parse_scenario_input(resolve_scenario_input(o.input)).scenario;
  calibrate::Options bench = o.bench;
  bench.launcher = launch.launcher;
  bench.processes = launch.processes;
  bench.process_rank = launch.process_rank;
  const bool root = launch.process_rank == 0;
  if (!o.quiet && root)
    bench.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << std::endl; };
  // Check the output can be written before spending minutes measuring.
  if (root) check_writable(o.output, "the calibration file");
  const calibrate::Measurements m = calibrate::measure(scenario, bench);
  if (!m.reports) return;  // a rank other than the one that reports
  const calibrate::FitResult f = calibrate::fit(scenario, m);
  const nlohmann::json calibration = calibrate::calibration_json(f, m);
  write_calibration(o.output, calibration);
  // What was written must load the way a scenario loads it.
  planner::read_calibration(calibration, o.output, planner::default_calibration(scenario.cluster));
  if (o.json) std::cout << summary_json(o.output, m, f, calibration).dump(2) << "\n";
  else print_summary(o.output, m, f, calibration, o.every_row);
}

}  // namespace

}  // namespace fsdpsim::tools
