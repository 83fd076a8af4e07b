// The verbs of the fsdpsim command line. Each registers its options on the CLI11 app
// and runs when chosen; errors on bad input surface as fsdpsim::InputError and are
// printed by main() as one `error:` line.
#pragma once

#include <CLI/CLI.hpp>

namespace fsdpsim::tools {

void add_estimate_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_catalog_commands(CLI::App& app);  // models, clusters
void add_collectives_command(CLI::App& app);

}  // namespace fsdpsim::tools
