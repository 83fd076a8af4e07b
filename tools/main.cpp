// fsdpsim: plan, time and verify FSDP / ZeRO training steps.
#include <iostream>

#include <CLI/CLI.hpp>

#include "models/json_input.h"
#include "tools/commands.h"

#if defined(FSDPSIM_WITH_JEMALLOC)
// jemalloc reads its options from this symbol before main (then from MALLOC_CONF, which still
// overrides them). Transparent huge pages for its arenas: a planning command touches a few MB of
// fresh heap, and this VM's first-touch faults of 4 KiB pages were a quarter of a Llama-3.1-405B
// `estimate` (1,571 faults and 39.6 ms of CPU against 603 and 28.5 ms, docs/benchmarks.md,
// "Session 22"). Where THP is off (`never`) the kernel ignores the advice. The SimGrid engine
// turns huge pages off for its simulation (sim/simgrid_engine.cpp, without_huge_pages): its
// thousands of actor stacks would each take a 2 MiB page.
extern "C" {
const char* malloc_conf = "thp:always,metadata_thp:always";
}
#endif

int main(int argc, char** argv) {
  CLI::App app{"fsdpsim: memory and step-time planner for PyTorch FSDP and DeepSpeed ZeRO training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fsdpsim 0.1.0");
  // Option errors read like input errors: "error: --threads: Value 0 not in range [1 - 256]".
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "error: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  });
  fsdpsim::tools::add_estimate_command(app);
  fsdpsim::tools::add_schedule_command(app);
  fsdpsim::tools::add_import_command(app);
  fsdpsim::tools::add_simulate_command(app);
  fsdpsim::tools::add_sweep_command(app);
  fsdpsim::tools::add_run_command(app);
  fsdpsim::tools::add_verify_command(app);
  fsdpsim::tools::add_validate_command(app);
  fsdpsim::tools::add_calibrate_command(app);
  fsdpsim::tools::add_catalog_commands(app);
  fsdpsim::tools::add_collectives_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own exit status (validate --check: 1 when a bound is not met)
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every bad option or value is bad input, exit 2 as a bad file
    // is (CLI11's own codes were 105 for a value out of range, 106 for a missing option...).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const fsdpsim::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
