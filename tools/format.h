// Small helpers for readable console output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/bytes_text.h"  // gib: "12.34 GiB", and the other byte formats

namespace fsdpsim::tools {

std::string seconds_text(double seconds);  // "1.234 s", "12.3 ms", "45.6 us"
std::string percent(double fraction);      // "12.3%"

// A plain-text table: columns padded to their widest cell; numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fsdpsim::tools
