// fsdpsim: plan, time and verify FSDP / ZeRO training steps.
#include <iostream>

#include <CLI/CLI.hpp>

#include "models/json_input.h"
#include "tools/commands.h"

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
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fsdpsim::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
