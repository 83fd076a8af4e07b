#include "models/checked_arithmetic.h"

#include <cmath>
#include <cstdio>

namespace fsdpsim {

namespace detail {
void throw_overflow(const char* what, const std::string& a, const char* op, const std::string& b) {
  throw ArithmeticOverflow(std::string(what) + " overflows 64-bit integers (" + a + op + b + ")");
}
}  // namespace detail

std::int64_t checked_to_int64(double value, const char* what) {
  // 2^63 is exactly representable; every double below it converts without overflow.
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (std::isfinite(value) && value < kTwoTo63 && value >= -kTwoTo63) return static_cast<std::int64_t>(value);
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  throw ArithmeticOverflow(std::string(what) + " is " + text + ", not a 64-bit integer size");
}

}  // namespace fsdpsim
