// Holds `fsdpsim estimate` to measurements taken on real GPUs (tests/data/hardware/README.md).
//
// A memory CSV (tools/hardware/fsdp_memory.py writes them) has one row per measured case: the
// PyTorch peak allocated and reserved bytes of one training step, and the fsdpsim scenario and
// --set overrides that describe exactly that case. The checker runs `fsdpsim estimate --json` for
// each row whose status is "ok" and compares memory.peak_allocated_bytes (within 2%) and
// memory.peak_reserved_bytes (within 5%) with the measured figures. A block-timing CSV
// (tools/hardware/block_timing.py) is compared with the cost model's duration of the same block's
// forward and backward ops, and only reported: the issue sets no bound on it.
//
// The checker runs the real binary the way a user does, so a row that fsdpsim refuses (an override
// it no longer accepts) fails rather than being skipped.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cli/cli_helpers.h"
#include "models/csv_text.h"

namespace fsdpsim::testing::hardware {

constexpr double kAllocatedTolerance = 0.02;  // |predicted - measured| / measured
constexpr double kReservedTolerance = 0.05;

// Every CSV carries these (tools/hardware/hwcommon.py PROVENANCE_COLUMNS).
inline const std::vector<std::string>& provenance_columns() {
  static const std::vector<std::string> columns = {"gpu_name", "gpu_memory_bytes", "driver", "cuda", "torch",
                                                   "transformers", "python", "date_utc", "host_command",
                                                   "fsdpsim_commit"};
  return columns;
}
// Of those, what a measured ("ok") row must fill in: without them the figure cannot be traced.
inline const std::vector<std::string>& provenance_required() {
  static const std::vector<std::string> columns = {"gpu_name", "driver", "cuda", "torch", "date_utc", "host_command"};
  return columns;
}

inline const std::vector<std::string>& memory_columns() {
  static const std::vector<std::string> columns = {"case_id", "status", "fsdpsim_scenario", "fsdpsim_overrides",
                                                   "peak_allocated_bytes", "peak_reserved_bytes"};
  return columns;
}
inline const std::vector<std::string>& block_columns() {
  static const std::vector<std::string> columns = {
      "case_id", "status", "fsdpsim_scenario", "fsdpsim_overrides", "fsdpsim_forward_op", "fsdpsim_backward_op",
      "forward_median_seconds", "backward_median_seconds"};
  return columns;
}

struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<int> lines;  // the file line of each row, for messages
  bool has(const std::string& column) const {
    return std::find(header.begin(), header.end(), column) != header.end();
  }
};

// Reads a CSV with a header line; a row with another number of fields is an error naming the file
// and line. (One record per line: the writers put no line breaks inside fields.)
inline CsvTable read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  CsvTable t;
  t.path = path;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line == "\r") continue;
    std::vector<std::string> fields = split_csv_line(line);
    if (t.header.empty()) {
      t.header = fields;
      continue;
    }
    if (fields.size() != t.header.size())
      throw std::runtime_error(path + ":" + std::to_string(number) + ": " + std::to_string(fields.size()) +
                               " fields where the header has " + std::to_string(t.header.size()));
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < fields.size(); ++i) row[t.header[i]] = fields[i];
    t.rows.push_back(std::move(row));
    t.lines.push_back(number);
  }
  if (t.header.empty()) throw std::runtime_error(path + ": empty (no header line)");
  return t;
}

enum class CsvKind { memory, blocks };

// Which measurements a CSV holds, from its header; a CSV of neither kind, or one without the
// provenance columns, is an error (tests/data/hardware/README.md).
inline CsvKind csv_kind(const CsvTable& t) {
  for (const std::string& c : provenance_columns())
    if (!t.has(c)) throw std::runtime_error(t.path + ": no provenance column \"" + c + "\" (tests/data/hardware/README.md)");
  auto has_all = [&](const std::vector<std::string>& cols) {
    return std::all_of(cols.begin(), cols.end(), [&](const std::string& c) { return t.has(c); });
  };
  if (has_all(memory_columns())) return CsvKind::memory;
  if (has_all(block_columns())) return CsvKind::blocks;
  throw std::runtime_error(t.path + ": neither a memory CSV (columns peak_allocated_bytes, peak_reserved_bytes, ...) "
                           "nor a block-timing CSV (forward_median_seconds, ...): tests/data/hardware/README.md");
}

// A measured row must say where it was measured; returns what is missing ("" when nothing).
inline std::string missing_provenance(const std::map<std::string, std::string>& row) {
  std::string missing;
  for (const std::string& c : provenance_required())
    if (row.at(c).empty()) missing += (missing.empty() ? "" : ", ") + c;
  return missing;
}

inline double parse_number(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v))
    throw std::runtime_error(what + ": expected a number, got \"" + text + "\"");
  return v;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::vector<std::string> split_overrides(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';'))
    if (!item.empty()) out.push_back(item);
  return out;
}

// `estimate --scenario S --set ...` for a row, run from the source root (paths in the rows are
// relative to it), with `extra` appended.
inline CommandResult run_estimate(const std::map<std::string, std::string>& row, const std::string& extra) {
  std::string args = "estimate --scenario " + shell_quote(row.at("fsdpsim_scenario"));
  for (const std::string& o : split_overrides(row.at("fsdpsim_overrides"))) args += " --set " + shell_quote(o);
  return run_command("cd " + shell_quote(FSDPSIM_SOURCE_ROOT) + " && " + cli_binary() + " " + args + " " + extra);
}

inline double relative_error(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / measured : (predicted == 0 ? 0 : INFINITY);
}

struct MemoryResult {
  std::string where;  // file:line
  std::string case_id, status;
  double measured_allocated = 0, measured_reserved = 0;
  double predicted_allocated = 0, predicted_reserved = 0;
  double allocated_error = 0, reserved_error = 0;
  bool checked = false;  // an "ok" row that fsdpsim estimated
  bool allocated_ok = false, reserved_ok = false;
  std::string problem;  // why the row fails (or, for rows not checked, what they say)
  // Why a measured row is not a measurement of its case alone (reported, not held): memory of
  // earlier cases was still allocated when it began.
  std::string excluded;
  bool passed() const { return checked && allocated_ok && reserved_ok && problem.empty(); }
};

// A case measured in a process that earlier cases had left memory in (the first GPU run put every
// case in one process, and FSDP1 left memory behind): its figures include theirs. Clean rows have
// case_baseline_allocated_bytes equal to process_baseline_allocated_bytes (the cuBLAS workspaces
// of the warm-up); returns why a row is not clean, "" when it is (or does not say).
inline std::string leftover_memory(const std::map<std::string, std::string>& row, const std::string& where) {
  const auto case_base = row.find("case_baseline_allocated_bytes");
  const auto process_base = row.find("process_baseline_allocated_bytes");
  if (case_base == row.end() || process_base == row.end() || case_base->second.empty() || process_base->second.empty())
    return "";
  const double left = parse_number(case_base->second, where + " case_baseline_allocated_bytes") -
                      parse_number(process_base->second, where + " process_baseline_allocated_bytes");
  if (left <= 0) return "";
  return "not a measurement of this case alone: " + std::to_string(static_cast<long long>(left)) +
         " bytes of earlier cases were still allocated when it began (case_baseline_allocated_bytes)";
}

// The loop both checkers share. A row that is not a measurement (the case failed on the GPU, or
// the time ran out: status other than "ok") is reported, not held; a measured row must carry its
// provenance; whatever `measure(i, row, result)` throws becomes the row's problem.
template <class Result, class Measure>
std::vector<Result> check_rows(const CsvTable& t, Measure measure) {
  std::vector<Result> results;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    Result r;
    r.where = t.path + ":" + std::to_string(t.lines[i]);
    r.case_id = row.at("case_id");
    r.status = row.at("status");
    if (r.status != "ok") {
      r.problem = row.count("error") ? row.at("error") : "";
      results.push_back(r);
      continue;
    }
    try {
      if (const std::string m = missing_provenance(row); !m.empty())
        throw std::runtime_error("a measured row without provenance (" + m + ")");
      measure(i, row, r);
    } catch (const std::exception& e) {
      r.problem = e.what();
    }
    results.push_back(r);
  }
  return results;
}

inline std::vector<MemoryResult> check_memory_csv(const CsvTable& t) {
  return check_rows<MemoryResult>(t, [](std::size_t, const std::map<std::string, std::string>& row, MemoryResult& r) {
    r.measured_allocated = parse_number(row.at("peak_allocated_bytes"), r.where + " peak_allocated_bytes");
    r.measured_reserved = parse_number(row.at("peak_reserved_bytes"), r.where + " peak_reserved_bytes");
    r.excluded = leftover_memory(row, r.where);
    if (!r.excluded.empty()) return;
    const CommandResult c = run_estimate(row, "--json");
    if (c.exit_code != 0) throw std::runtime_error("fsdpsim estimate refused the row: " + c.err);
    const nlohmann::json memory = nlohmann::json::parse(c.out).at("memory");
    r.predicted_allocated = memory.at("peak_allocated_bytes").get<double>();
    r.predicted_reserved = memory.at("peak_reserved_bytes").get<double>();
    r.allocated_error = relative_error(r.predicted_allocated, r.measured_allocated);
    r.reserved_error = relative_error(r.predicted_reserved, r.measured_reserved);
    r.checked = true;
    r.allocated_ok = std::abs(r.allocated_error) <= kAllocatedTolerance;
    r.reserved_ok = std::abs(r.reserved_error) <= kReservedTolerance;
  });
}

// Rows outside the bounds that the model does not explain yet, each with the errors it had when it
// was listed and why (tests/data/hardware/known_deviations.json). A listed row is held to its
// listed errors (plus half a percentage point: a regression fails); a listed row that is back
// within the bounds fails too, so that the list holds only open problems.
struct KnownDeviation {
  double allocated_error = 0, reserved_error = 0;
  std::string why;
};
using KnownDeviations = std::map<std::string, KnownDeviation>;  // key: "<csv file name>|<case_id>"
constexpr double kDeviationSlack = 0.005;

inline std::string deviation_key(const std::string& where, const std::string& case_id) {
  const std::string file = where.substr(0, where.rfind(':'));  // "path/to/file.csv:LINE"
  return std::filesystem::path(file).filename().string() + "|" + case_id;
}

inline KnownDeviations read_known_deviations(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  const nlohmann::json j = nlohmann::json::parse(in);
  KnownDeviations out;
  for (const nlohmann::json& d : j.at("rows")) {
    KnownDeviation k{d.at("allocated_error").get<double>(), d.at("reserved_error").get<double>(),
                     d.at("why").get<std::string>()};
    if (k.why.empty()) throw std::runtime_error(path + ": a deviation without its \"why\"");
    out[deviation_key(d.at("file").get<std::string>(), d.at("case_id").get<std::string>())] = k;
  }
  return out;
}

// "" when the row is acceptable: within the bounds and not listed, or listed and no worse than
// listed; else what is wrong. Rows that are not measurements of their case are not judged.
inline std::string judge(const MemoryResult& r, const KnownDeviations& known) {
  if (r.status != "ok" || !r.excluded.empty()) return "";
  if (!r.checked) return r.problem;
  const auto it = known.find(deviation_key(r.where, r.case_id));
  if (r.passed())
    return it == known.end() ? "" : "within the bounds now: remove it from known_deviations.json";
  const std::string errors = "allocated " + std::to_string(100 * r.allocated_error) + "%, reserved " +
                             std::to_string(100 * r.reserved_error) + "%";
  if (it == known.end()) return "outside the bounds (" + errors + ") and not in known_deviations.json";
  const KnownDeviation& k = it->second;
  const bool allocated_held =
      std::abs(r.allocated_error) <= std::max(kAllocatedTolerance, std::abs(k.allocated_error) + kDeviationSlack);
  const bool reserved_held =
      std::abs(r.reserved_error) <= std::max(kReservedTolerance, std::abs(k.reserved_error) + kDeviationSlack);
  if (allocated_held && reserved_held) return "";
  return "worse than its known deviation (" + errors + "; listed allocated " + std::to_string(100 * k.allocated_error) +
         "%, reserved " + std::to_string(100 * k.reserved_error) + "%)";
}

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Predicted against measured, one line per row, for the test log (and docs/accuracy.md).
inline std::string memory_table(const std::vector<MemoryResult>& results) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%-52s %14s %14s %8s  %14s %14s %8s  %s\n", "case", "alloc meas", "alloc pred",
                "error", "resv meas", "resv pred", "error", "verdict");
  o << line;
  for (const MemoryResult& r : results) {
    if (!r.excluded.empty()) {
      o << r.case_id << "  excluded: " << r.excluded << "\n";
      continue;
    }
    if (!r.checked) {
      o << r.case_id << "  " << (r.status == "ok" ? "FAILED: " : r.status + ": ") << r.problem << "\n";
      continue;
    }
    std::snprintf(line, sizeof line, "%-52s %14.0f %14.0f %+7.2f%%  %14.0f %14.0f %+7.2f%%  %s\n", r.case_id.c_str(),
                  r.measured_allocated, r.predicted_allocated, 100 * r.allocated_error, r.measured_reserved,
                  r.predicted_reserved, 100 * r.reserved_error,
                  r.passed() ? "ok"
                  : !r.allocated_ok && !r.reserved_ok ? "FAIL (allocated, reserved)"
                  : !r.allocated_ok                   ? "FAIL (allocated)"
                                                      : "FAIL (reserved)");
    o << line;
  }
  return o.str();
}

struct BlockResult {
  std::string where, case_id, status, problem;
  double measured_forward = 0, measured_backward = 0;
  double predicted_forward = 0, predicted_backward = 0;  // GPU time
  double issue_forward = 0, issue_backward = 0;          // the CPU issuing the op's kernels
  double lead_forward = 0, lead_backward = 0;            // the part of the issue the GPU waits for
  bool checked = false;
  // The block timed as block_timing.py times it ([Kernel pipelining], planner/cost_model.h).
  // Forward: from an idle GPU, the CPU starts issuing at once: the GPU waits for its issue
  // lead, then runs the block's kernels back to back.
  double elapsed_forward() const { return lead_forward + predicted_forward; }
  // Backward: timed from the forward's end on the GPU (lead_forward + predicted_forward after
  // the forward's issue began); the CPU began issuing the backward when it had issued the
  // forward (issue_forward), so the GPU waits for what is left of the backward's lead.
  double elapsed_backward() const {
    return predicted_backward + std::max(0.0, issue_forward + lead_backward - lead_forward - predicted_forward);
  }
};

// The cost model's duration (the trace's nominal_us, before interference) of the row's forward
// and backward ops and the CPU's issue of each (the issue thread's event of the same op id),
// from `estimate --trace`.
inline std::vector<BlockResult> check_block_csv(const CsvTable& t) {
  return check_rows<BlockResult>(t, [](std::size_t i, const std::map<std::string, std::string>& row, BlockResult& r) {
    r.measured_forward = parse_number(row.at("forward_median_seconds"), r.where + " forward_median_seconds");
    r.measured_backward = parse_number(row.at("backward_median_seconds"), r.where + " backward_median_seconds");
    const std::string trace = write_temp("block_trace_" + std::to_string(i) + ".json", "");
    const CommandResult c = run_estimate(row, "--trace " + shell_quote(trace));
    if (c.exit_code != 0) throw std::runtime_error("fsdpsim estimate refused the row: " + c.err);
    std::ifstream in(trace);
    const nlohmann::json events = nlohmann::json::parse(in).at("traceEvents");
    bool fwd = false, bwd = false;
    long fwd_op = -1, bwd_op = -1;
    for (const nlohmann::json& e : events) {
      if (e.value("ph", "") != "X") continue;
      const std::string name = e.value("name", "");
      if (name == row.at("fsdpsim_forward_op") && !fwd) {
        r.predicted_forward = e.at("args").at("nominal_us").get<double>() * 1e-6;
        fwd_op = e.at("args").at("op").get<long>();
        fwd = true;
      } else if (name == row.at("fsdpsim_backward_op") && !bwd) {
        r.predicted_backward = e.at("args").at("nominal_us").get<double>() * 1e-6;
        bwd_op = e.at("args").at("op").get<long>();
        bwd = true;
      }
    }
    if (!fwd || !bwd)
      throw std::runtime_error("the estimate's trace has no op \"" +
                               (fwd ? row.at("fsdpsim_backward_op") : row.at("fsdpsim_forward_op")) + "\"");
    // An op with no issue cost has no issue event.
    for (const nlohmann::json& e : events) {
      if (e.value("ph", "") != "X" || e.value("cat", "") != "cpu_issue") continue;
      const long op = e.at("args").at("op").get<long>();
      const double issue = e.at("dur").get<double>() * 1e-6, lead = e.at("args").at("lead_us").get<double>() * 1e-6;
      if (op == fwd_op) {
        r.issue_forward = issue;
        r.lead_forward = lead;
      }
      if (op == bwd_op) {
        r.issue_backward = issue;
        r.lead_backward = lead;
      }
    }
    r.checked = true;
  });
}

inline std::string block_table(const std::vector<BlockResult>& results) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line, "%-26s %9s %9s %9s %9s %7s  %9s %9s %9s %9s %7s\n", "block (ms)", "fwd meas",
                "fwd GPU", "fwd CPU", "fwd pred", "error", "bwd meas", "bwd GPU", "bwd CPU", "bwd pred", "error");
  o << line;
  for (const BlockResult& r : results) {
    if (!r.checked) {
      o << r.case_id << "  " << (r.status == "ok" ? "FAILED: " : r.status + ": ") << r.problem << "\n";
      continue;
    }
    std::snprintf(line, sizeof line, "%-26s %9.3f %9.3f %9.3f %9.3f %+6.1f%%  %9.3f %9.3f %9.3f %9.3f %+6.1f%%\n",
                  r.case_id.c_str(), 1e3 * r.measured_forward, 1e3 * r.predicted_forward, 1e3 * r.issue_forward,
                  1e3 * r.elapsed_forward(), 100 * relative_error(r.elapsed_forward(), r.measured_forward),
                  1e3 * r.measured_backward, 1e3 * r.predicted_backward, 1e3 * r.issue_backward,
                  1e3 * r.elapsed_backward(), 100 * relative_error(r.elapsed_backward(), r.measured_backward));
    o << line;
  }
  return o.str();
}

// The CSVs of a folder (not its subfolders), sorted.
inline std::vector<std::string> csv_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".csv") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace fsdpsim::testing::hardware
