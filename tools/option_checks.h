// Checks on command-line numbers, beside CLI11's own CLI::Range, which integer options use
// for their range ("--threads: Value 0 not in range 1 to 256"). Floating-point options take
// these instead: a range compares, and every comparison with NaN is false, so "nan" passed
// CLI11's range checks, and "inf" passed the one-sided ones (`run --time-scale inf` reported
// 0.0 us per step); CLI11 2.1's PositiveNumber and NonNegativeNumber also print
// DBL_MAX in full in their message. The errors read "--time-scale: expected a positive
// finite number, got inf" (CLI11 prefixes the option).
#pragma once

#include <cmath>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/scenario.h"

namespace fsdpsim::tools {

// A finite number: refuses nan, inf and -inf.
inline CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "expected a number, got " + text;
        if (!std::isfinite(value)) return "expected a finite number, got " + text;
        return {};
      },
      "FINITE");
}

// A finite number > 0.
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || !(value > 0))
          return "expected a positive finite number, got " + text;
        return {};
      },
      "POSITIVE");
}

// A finite number >= 0.
inline CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || !(value >= 0))
          return "expected a non-negative finite number, got " + text;
        return {};
      },
      "NONNEGATIVE");
}

// A finite number in [low, high], or (low, high] when `low_open`: "expected " + `expected` + ",
// got TEXT" otherwise; `name` is what --help prints after the type.
inline CLI::Validator number_within(double low, bool low_open, double high, const std::string& expected,
                                    const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) ||
            !(low_open ? value > low : value >= low) || value > high)
          return "expected " + expected + ", got " + text;
        return {};
      },
      name);
}

// Memory to keep free, in GiB: at most a pebibyte (planner::kMaxHeadroomGiB), beyond any GPU; 1e308
// GiB passed the finite check above and overflowed to infinity once turned into bytes (the
// session-38 input audit: "inf GiB" to spare, JSON nulls).
inline CLI::Validator headroom_gib() {
  return number_within(0, false, planner::kMaxHeadroomGiB, "a number of GiB from 0 to 1048576 (a pebibyte)", "GIB");
}

// A fraction in [0, 1): a tolerance relative to the best (1 would accept everything).
inline CLI::Validator fraction_below_one() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !(value >= 0 && value < 1))
          return "expected a fraction in [0, 1), got " + text;
        return {};
      },
      "[0, 1)");
}

}  // namespace fsdpsim::tools
