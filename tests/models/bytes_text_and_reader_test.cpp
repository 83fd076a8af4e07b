// The shared byte formatters (models/bytes_text.h) and JsonReader's range-checked optional
// numbers: every expected string below is worked out by hand from the format's definition.
#include <gtest/gtest.h>

#include <cmath>

#include "models/bytes_text.h"
#include "models/json_input.h"

namespace fsdpsim {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

TEST(BytesText, GibIsAlwaysGibWithTwoDecimals) {
  EXPECT_EQ(gib(0), "0.00 GiB");
  EXPECT_EQ(gib(1.5 * kGiB), "1.50 GiB");
  EXPECT_EQ(gib(256 * kMiB), "0.25 GiB");
  EXPECT_EQ(gib(-2 * kGiB), "-2.00 GiB");  // a negative margin, as `estimate` prints an overage
  // Llama-3.1-8B's planned peak on 8 H100 (the `run` table): 45413464064 B / 2^30 = 42.294... GiB.
  EXPECT_EQ(gib_and_bytes(45413464064), "42.29 GiB (45413464064 B)");
}

TEST(BytesText, GibOrMibPicksTheLargestUnitReached) {
  EXPECT_EQ(gib_or_mib(512), "512 B");
  EXPECT_EQ(gib_or_mib(kMiB - 1), "1048575 B");
  EXPECT_EQ(gib_or_mib(kMiB), "1.00 MiB");
  EXPECT_EQ(gib_or_mib(256 * kMiB), "256.00 MiB");
  EXPECT_EQ(gib_or_mib(1023.999 * kMiB), "1024.00 MiB");  // below 1 GiB: still MiB
  EXPECT_EQ(gib_or_mib(2.5 * kGiB), "2.50 GiB");
}

TEST(BytesText, BytesTextIsWholeWhenExactElseThreeDigits) {
  EXPECT_EQ(bytes_text(0), "0 B");
  EXPECT_EQ(bytes_text(1000), "1000 B");
  EXPECT_EQ(bytes_text(1024), "1 KiB");
  EXPECT_EQ(bytes_text(1536), "1.5 KiB");
  EXPECT_EQ(bytes_text(256 * kMiB), "256 MiB");
  EXPECT_EQ(bytes_text(3.3e6), "3.15 MiB");  // 3.3e6 / 2^20 = 3.147...
  EXPECT_EQ(bytes_text(7e12), "6.37 TiB");   // 7e12 / 2^40 = 6.366...
}

TEST(JsonReaderNumbers, OptionalNumbersAreRangeCheckedOnlyWhenPresent) {
  const nlohmann::json j = {{"zero", 0}, {"half", 0.5}, {"negative", -1}, {"null", nullptr}};
  JsonReader r(j, "f.json", "calibration");
  EXPECT_EQ(r.nonnegative_number_or("zero", 7), 0);
  EXPECT_EQ(r.positive_number_or("half", 7), 0.5);
  EXPECT_EQ(r.nonnegative_number_or("absent", 7), 7);
  EXPECT_EQ(r.positive_number_or("null", 7), 7);
  try {
    r.nonnegative_number_or("negative", 7);
    FAIL() << "a negative number was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "f.json: calibration.negative: expected a non-negative number, got -1");
  }
  JsonReader zero(j, "f.json");
  try {
    zero.positive_number_or("zero", 7);
    FAIL() << "zero was accepted as positive";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "f.json: zero: expected a positive number, got 0");
  }
  // Every key a getter asked for counts as read, present or not.
  r.ignore("negative");
  EXPECT_NO_THROW(r.finish());
}

}  // namespace
}  // namespace fsdpsim
