#include "sim/resource_guard.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace fsdpsim::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string read_file(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// cgroup v2's memory.max of this process's group ("max" or absent: no limit).
double cgroup_limit_bytes() {
  const std::string text = read_file("/sys/fs/cgroup/memory.max");
  if (text.empty() || text.rfind("max", 0) == 0) return 0;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

double meminfo_total_bytes(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string key, unit;
  double value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") return value * (unit.find("kB") != std::string::npos ? 1024.0 : 1.0);
  }
  return 0;
}

double machine_memory_bytes(std::string* source) {
  double bytes = meminfo_total_bytes(read_file("/proc/meminfo"));
  std::string from = "MemTotal in /proc/meminfo";
  if (bytes <= 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    bytes = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
    from = "sysconf's physical pages";
  }
  const double cgroup = cgroup_limit_bytes();
  if (cgroup > 0 && (bytes <= 0 || cgroup < bytes)) {
    bytes = cgroup;
    from = "the cgroup's memory.max";
  }
  if (source) *source = from;
  return bytes;
}

ResourceBudget budget_from_options(double max_memory_gib, double max_seconds) {
  ResourceBudget b;
  if (max_memory_gib >= 0) {
    b.memory_bytes = max_memory_gib * kGiB;
    b.memory_source = "--max-memory " + bytes_text(b.memory_bytes);
  } else {
    std::string source;
    const double machine = machine_memory_bytes(&source);
    b.memory_bytes = kDefaultMemoryShare * machine;
    b.memory_source = "the default budget of " + bytes_text(b.memory_bytes) + ", half of this machine's " +
                      bytes_text(machine) + " (" + source + "; --max-memory sets another)";
  }
  b.seconds = max_seconds >= 0 ? max_seconds : kDefaultSeconds;
  return b;
}

std::string over_budget(const ResourceEstimate& e, const ResourceBudget& b) {
  std::string out;
  if (b.memory_bytes > 0 && e.memory_bytes > b.memory_bytes)
    out = "about " + bytes_text(e.memory_bytes) + " of memory (" + e.memory_basis + "), over " + b.memory_source;
  if (b.seconds > 0 && e.seconds > b.seconds) {
    if (!out.empty()) out += "; and ";
    out += "about " + duration_text(e.seconds) + " (" + e.time_basis + "), over --max-time " + duration_text(b.seconds);
  }
  return out;
}

std::string bytes_text(double bytes) {
  char buf[64];
  if (bytes >= kGiB) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / kGiB);
  else std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string duration_text(double seconds) {
  char buf[64];
  // Under 10 s with three significant digits: a --max-time of 1e-300 read "0 s" against "about 0 s"
  // (the session-38 input audit).
  if (seconds < 10) std::snprintf(buf, sizeof buf, "%.3g s", seconds);
  else if (seconds < 120) std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  else if (seconds < 7200) std::snprintf(buf, sizeof buf, "%.0f min", seconds / 60);
  else std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  return buf;
}

}  // namespace fsdpsim::sim
