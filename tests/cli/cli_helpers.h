// Runs the fsdpsim binary the way a user does and captures what it prints.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fsdpsim::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The binary under test: the one built beside the tests, or $FSDPSIM_TEST_CLI (to run the
// tests against another build, e.g. the binary from before a fix, to see them fail).
inline std::string cli_binary() {
  const char* other = std::getenv("FSDPSIM_TEST_CLI");
  return other && *other ? other : FSDPSIM_CLI;
}

// Runs a shell command line, capturing its stdout, stderr and exit status.
inline CommandResult run_command(const std::string& command_line) {
  const std::string err_file = std::filesystem::temp_directory_path() / ("fsdpsim_cli_err_" + std::to_string(::getpid()));
  const std::string command = command_line + " 2>" + err_file;
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_file);
  return r;
}

inline CommandResult run_cli(const std::string& args) { return run_command(cli_binary() + " " + args); }

// Runs a command with --json, expects it to succeed (a test failure naming the command and its
// stderr otherwise) and returns what it printed, parsed ({} when it failed).
inline nlohmann::json run_cli_json(const std::string& args) {
  const CommandResult r = run_cli(args + " --json");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// The README quick start's scenario.
inline std::string quick_start_scenario() { return std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json"; }

// Writes `text` to a fresh file under the temp directory and returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("fsdpsim_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace fsdpsim::testing
