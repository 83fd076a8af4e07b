// Reading the project's CSV data files (tests/data/): one line into its fields, and the message
// sizes nccl-tests and the published-collectives table write. Shared by the `collectives`
// command (sim/collectives_table.cpp) and the tests that check the cost model against the
// same rows, so both read a row the same way.
#pragma once

#include <string>
#include <vector>

namespace fsdpsim {

// The fields of one CSV line (RFC 4180: a quoted field may hold commas and "" for a quote; a
// trailing \r is dropped).
std::vector<std::string> split_csv_line(const std::string& line);

// "32KiB", "256MiB", "16GiB", "up to 16GB" (nccl-tests -e 16384M = 16 GiB) and "large (>256M)"
// (a maintainer's peak figure, taken at 16 GiB like the other peak rows) in bytes; a bare
// number is bytes; 0 when no number can be read.
double message_size_bytes(const std::string& text);

}  // namespace fsdpsim
