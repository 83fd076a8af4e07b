// models/csv_text.h: the CSV fields and message sizes of the data files, by hand.
#include <gtest/gtest.h>

#include "models/csv_text.h"

namespace fsdpsim {
namespace {

TEST(CsvText, QuotedFieldsKeepTheirCommasAndDoubledQuotes) {
  const std::vector<std::string> f = split_csv_line("66,\"NVLS disabled, ring\",\"a \"\"peak\"\" row\",,480\r");
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0], "66");
  EXPECT_EQ(f[1], "NVLS disabled, ring");
  EXPECT_EQ(f[2], "a \"peak\" row");
  EXPECT_EQ(f[3], "");
  EXPECT_EQ(f[4], "480");  // the \r of a CRLF file is dropped
}

TEST(CsvText, MessageSizesInBinaryUnits) {
  EXPECT_EQ(message_size_bytes("32KiB"), 32.0 * 1024);
  EXPECT_EQ(message_size_bytes("256MiB"), 256.0 * 1024 * 1024);
  EXPECT_EQ(message_size_bytes("16GiB"), 16.0 * 1024 * 1024 * 1024);
  // nccl-tests' -e 16384M is 16 GiB, which the sources write as "up to 16GB".
  EXPECT_EQ(message_size_bytes("up to 16GB"), 16.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(message_size_bytes("large (>256M)"), 16.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(message_size_bytes("4096"), 4096.0);
  EXPECT_EQ(message_size_bytes("n/a"), 0.0);
}

}  // namespace
}  // namespace fsdpsim
