#include "models/csv_text.h"

#include <cctype>

namespace fsdpsim {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  fields.push_back(field);
  return fields;
}

double message_size_bytes(const std::string& text) {
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (text.find("large") != std::string::npos) return 16 * kGiB;
  std::size_t i = 0;
  while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t j = i;
  while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) ++j;
  if (i == j) return 0;
  const double value = std::stod(text.substr(i, j - i));
  const std::string unit = text.substr(j);
  if (unit.rfind("KiB", 0) == 0) return value * kKiB;
  if (unit.rfind("MiB", 0) == 0) return value * kMiB;
  if (unit.rfind("GiB", 0) == 0 || unit.rfind("GB", 0) == 0) return value * kGiB;
  return value;
}

}  // namespace fsdpsim
