#include "models/bytes_text.h"

#include <cmath>
#include <cstdio>

namespace fsdpsim {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  return buf;
}

std::string gib_and_bytes(std::int64_t bytes) {
  return gib(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " B)";
}

std::string gib_or_mib(double bytes) {
  char buf[64];
  if (bytes >= kGiB)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  else if (bytes >= kMiB)
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / kMiB);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, bytes == std::floor(bytes) ? "%.0f %s" : "%.3g %s", bytes, units[unit]);
  return buf;
}

}  // namespace fsdpsim
