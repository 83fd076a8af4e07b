// The resource guard: `simulate` and `sweep` estimate their memory and time before they start
// and refuse to start past a budget, saying how to go further, rather than run out of memory
// (killed by signal 9, std::bad_alloc) or run for hours without a word
// (docs/reliability.md, "Resource guard").
#pragma once

#include <string>

namespace fsdpsim::sim {

// The machine's memory for the default budget: the lower of MemTotal (/proc/meminfo; else
// sysconf's physical pages x page size) and the cgroup's memory.max. `source` says which.
double machine_memory_bytes(std::string* source = nullptr);

// MemTotal of a /proc/meminfo text, in bytes (0 when absent).
double meminfo_total_bytes(const std::string& meminfo);

struct ResourceBudget {
  double memory_bytes = 0;  // <= 0: no limit
  double seconds = 0;       // <= 0: no limit
  std::string memory_source;  // where memory_bytes comes from, for messages
};

// The share of the machine's memory a run may take when --max-memory is not given: half, so
// the estimate may be off by 2x before the machine runs out.
constexpr double kDefaultMemoryShare = 0.5;
// The time a run may take when --max-time is not given: an hour.
constexpr double kDefaultSeconds = 3600;

// The budget from the command line's --max-memory (GiB; <0: not given) and --max-time
// (seconds; <0: not given; 0: no limit).
ResourceBudget budget_from_options(double max_memory_gib, double max_seconds);

struct ResourceEstimate {
  double memory_bytes = 0;
  double seconds = 0;
  std::string memory_basis;  // what the memory figure is made of
  std::string time_basis;
};

// "" when the estimate fits the budget; otherwise what is over: "about 74.5 GiB of memory
// (SimGrid's route table ...), over --max-memory 11.7 GiB (half of ...)".
std::string over_budget(const ResourceEstimate& estimate, const ResourceBudget& budget);

std::string bytes_text(double bytes);      // "512 MiB", "74.5 GiB"
std::string duration_text(double seconds);  // "40 s", "12 min", "3.4 h"

}  // namespace fsdpsim::sim
