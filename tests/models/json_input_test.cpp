// The one JSON reader (models/json_input.h) and the checked arithmetic every size product
// and sum goes through (models/checked_arithmetic.h): what they refuse, and that the refusal
// names the file, the JSON path and what was expected (issue 16).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "models/checked_arithmetic.h"
#include "models/json_input.h"

namespace fsdpsim {
namespace {

// The InputError `parse` throws; fails the test when it throws nothing.
template <typename F>
InputError error_of(F parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("", "", "");
}

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Issue 16 item 2: a million nested arrays (or 100k objects) under a comment key overflowed the
// stack when the parsed value was copied. The reader refuses past kMaxJsonDepth, before
// building anything, naming where.
TEST(JsonReader, NestingDeeperThanTheLimitIsRefusedWithItsPath) {
  EXPECT_NO_THROW(parse_json_text(nested_arrays(kMaxJsonDepth), "f.json"));
  const InputError e = error_of([] { parse_json_text(nested_arrays(kMaxJsonDepth + 1), "f.json"); });
  EXPECT_EQ(e.file(), "f.json");
  EXPECT_NE(std::string(e.what()).find("expected at most 256 levels"), std::string::npos) << e.what();

  // The issue's own shapes, a million arrays and 100k objects under a comment key: refused
  // quickly, the path starting where the nesting starts.
  const std::string arrays = "{\"_c\": " + nested_arrays(1000000) + "}";
  const InputError a = error_of([&] { parse_json_text(arrays, "f.json"); });
  EXPECT_EQ(a.json_path().rfind("_c[0][0]", 0), 0u) << a.json_path();
  std::string objects = "{\"_c\": ";
  for (int i = 0; i < 100000; ++i) objects += "{\"a\": ";
  objects += "1" + std::string(100000, '}') + "}";
  const InputError o = error_of([&] { parse_json_text(objects, "f.json"); });
  EXPECT_EQ(o.json_path().rfind("_c.a.a.a", 0), 0u) << o.json_path();
  EXPECT_LT(o.json_path().size(), 120u) << "a path 256 levels deep is abbreviated";
}

// Issue 16 item 9: a key twice in one object was accepted, the last silently winning.
// The reader builds the value in its checking pass (one pass, session 29): what it builds is
// nlohmann's own parse of the same text, for every JSON file the project ships (scenarios,
// models, catalogs, test data) and for texts made to reach each kind of value: nested arrays
// of objects, unsigned integers past 2^63, floats, escapes, comments, empty containers.
TEST(JsonReader, TheValueBuiltIsNlohmannsParse) {
  const std::vector<std::string> texts = {
      "0", "-7", "18446744073709551615", "1.5e-300", "\"s\"", "null", "true", "[]", "{}",
      R"({"a": [], "b": {}, "c": [[], [{}], [{"x": [1, 2.5, "y", null, false]}]]})",
      R"([{"k": "\u00e9\n\"q\""}, [[[1]]], {"n": {"m": {"o": -0.0}}}])",
      "// a comment\n{\"a\": 1, /* another */ \"b\": [2, 3]}",
      R"({"z": 1, "a": 2, "m": [3, {"b": 4, "a": 5}]})"};
  int files = 0;
  for (const char* dir : {"scenarios", "models", "tests/data"})
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(FSDPSIM_SOURCE_ROOT) + "/" + dir)) {
      if (entry.path().extension() != ".json") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      nlohmann::json expected;
      try {
        expected = nlohmann::json::parse(text.str(), nullptr, true, true);
      } catch (const nlohmann::json::exception&) {
        continue;  // a file made malformed on purpose (the fuzzers' seeds, bad-input cases)
      }
      try {
        EXPECT_EQ(parse_json_text(text.str(), entry.path().string()), expected) << entry.path();
        ++files;
      } catch (const InputError&) {
        // refused by the reader's own checks (a duplicate key, too deep): other tests' cases
      }
    }
  EXPECT_GT(files, 150);  // 155 files on 2026-12-06
  for (const std::string& text : texts)
    EXPECT_EQ(parse_json_text(text, "t.json"), nlohmann::json::parse(text, nullptr, true, true)) << text;
  // An override's value, which is JSON unless it is a word.
  EXPECT_EQ(parse_json_or_word(R"({"policy": "every_k_blocks", "every": 2})", "s.json", "fsdp.wrap"),
            nlohmann::json::parse(R"({"policy": "every_k_blocks", "every": 2})"));
}

// A key holding a control character is printed escaped: a NUL had cut the message short at it
// ("error: f.json: " and nothing more; the session-38 input audit). Newlines stay as they are.
TEST(InputError, ControlCharactersArePrintedEscaped) {
  const InputError e("f.json", std::string("a\0b\x01", 4), "unknown field");
  EXPECT_EQ(std::string(e.what()), "f.json: a\\u0000b\\u0001: unknown field");
  EXPECT_EQ(std::string(InputError("f.json", "x", "first\nsecond").what()), "f.json: x: first\nsecond");
}

TEST(JsonReader, DuplicateKeysAreRefusedWhereTheyAre) {
  const InputError e = error_of([] {
    parse_json_text(R"({"training": {"seq_len": 8192, "micro_batch": 2, "seq_len": 4096}})", "s.json");
  });
  EXPECT_EQ(e.json_path(), "training.seq_len");
  EXPECT_NE(std::string(e.what()).find("duplicate key"), std::string::npos) << e.what();
  // In an array element too; and the same key in sibling objects is no duplicate.
  EXPECT_EQ(error_of([] { parse_json_text(R"({"ops": [{"id": 0}, {"id": 1, "id": 1}]})", "s.json"); }).json_path(),
            "ops[1].id");
  EXPECT_NO_THROW(parse_json_text(R"({"a": {"x": 1}, "b": {"x": 1}})", "s.json"));
}

// Issue 16 item 12: 1e400 gave nlohmann's raw "[json.exception.out_of_range.406]".
TEST(JsonReader, NumbersPastADoubleAreRefusedWithTheirPath) {
  const InputError e = error_of([] { parse_json_text(R"({"training": {"seq_len": 1e400}})", "s.json"); });
  EXPECT_EQ(e.file(), "s.json");
  EXPECT_EQ(e.json_path(), "training.seq_len");
  EXPECT_NE(std::string(e.what()).find("range of a double"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
}

TEST(JsonReader, SyntaxErrorsKeepLineAndColumn) {
  const InputError e = error_of([] { parse_json_text("{\n  \"a\": 1,\n  \"b\": }", "s.json"); });
  EXPECT_NE(std::string(e.what()).find("malformed JSON at line 3"), std::string::npos) << e.what();
}

// An override's value: JSON when it is JSON, a bare word otherwise; JSON that the reader
// refuses stays refused (it is not a word).
TEST(JsonReader, OverrideValuesAreJsonOrABareWord) {
  EXPECT_EQ(parse_json_or_word("FULL_SHARD", "s.json", "fsdp.strategy"), "FULL_SHARD");
  EXPECT_EQ(parse_json_or_word("12abc", "s.json", "training.seq_len"), "12abc");
  EXPECT_EQ(parse_json_or_word("4096", "s.json", "training.seq_len"), 4096);
  EXPECT_EQ(error_of([] { parse_json_or_word("1e400", "s.json", "training.seq_len"); }).json_path(), "training.seq_len");
  EXPECT_EQ(error_of([] { parse_json_or_word(R"({"x": 1, "x": 2})", "s.json", "fsdp.wrap"); }).json_path(),
            "fsdp.wrap.x");
  EXPECT_THROW(parse_json_or_word(nested_arrays(100000), "s.json", "x"), InputError);
}

// Issue 16 item 12: 2^64 - 1 was reported as "got -1" (nlohmann keeps it unsigned; a signed
// read wrapped it).
TEST(JsonReader, IntegersPast2To63AreRefusedAsWritten) {
  const nlohmann::json j = parse_json_text(R"({"n": 18446744073709551615, "m": 9223372036854775808})", "f.json");
  JsonReader r(j, "f.json");
  const InputError e = error_of([&] { r.positive_integer("n"); });
  EXPECT_NE(std::string(e.what()).find("got 18446744073709551615"), std::string::npos) << e.what();
  EXPECT_THROW(r.integer("m"), InputError);
}

// Issue 16 item 1: nodes = 2^62 was narrowed to an int (0) and divided by. Counts kept in ints
// are read with their range.
TEST(JsonReader, IntegersKeptInIntsAreReadWithTheirRange) {
  const nlohmann::json j = {{"nodes", std::int64_t{1} << 62}, {"ranks", 8}, {"links", -1}};
  JsonReader r(j, "c.json");
  EXPECT_EQ(r.int_in("ranks", 1, 1 << 20), 8);
  const InputError e = error_of([&] { r.int_in("nodes", 1, 1 << 20); });
  EXPECT_EQ(e.json_path(), "nodes");
  EXPECT_NE(std::string(e.what()).find("expected a positive integer (at most 1048576), got 4611686018427387904"),
            std::string::npos)
      << e.what();
  EXPECT_NE(std::string(error_of([&] { r.int_in("links", 0, 64); }).what()).find("expected a non-negative integer (at most 64), got -1"),
            std::string::npos);
  EXPECT_NE(std::string(error_of([&] { r.int_in("ranks", 16, 64); }).what()).find("expected an integer from 16 to 64, got 8"),
            std::string::npos);
  EXPECT_EQ(r.int_in_or("absent", 0, 64, 7), 7);
}

// An option's error names the option alone, never "<input>:" (issue 16 item 13).
TEST(InputErrorText, OptionErrorsNameTheOption) {
  EXPECT_EQ(std::string(InputError::option("--headroom-gib", "expected a finite number").what()),
            "--headroom-gib: expected a finite number");
  EXPECT_EQ(std::string(InputError("", "--axis training.seq_len[1]", "x").what()), "--axis training.seq_len[1]: x");
}

TEST(CheckedArithmetic, ProductsAndSumsThatWouldWrapThrowNamingWhat) {
  EXPECT_EQ(checked_mul(std::int64_t{1} << 31, std::int64_t{1} << 31, "x"), std::int64_t{1} << 62);
  try {
    checked_mul(std::int64_t{4611686018427387904}, 8, "nodes x gpus_per_node");
    FAIL();
  } catch (const ArithmeticOverflow& e) {
    EXPECT_EQ(std::string(e.what()), "nodes x gpus_per_node overflows 64-bit integers (4611686018427387904 x 8)");
  }
  // Two allocations of 2^62 bytes: their sum is 2^63, one past int64.
  EXPECT_THROW(checked_add(std::int64_t{1} << 62, std::int64_t{1} << 62, "bytes"), ArithmeticOverflow);
  EXPECT_THROW(checked_sub(INT64_MIN, 1, "bytes"), ArithmeticOverflow);
  EXPECT_EQ(checked_round_up(513, 512, "x"), 1024);
  // 2^63 - 1 rounded up to 512 bytes does not fit.
  EXPECT_THROW(checked_round_up(INT64_MAX, 512, "an allocation"), ArithmeticOverflow);
}

TEST(CheckedArithmetic, DoublesBecomeSizesOnlyWhenTheyFit) {
  EXPECT_EQ(checked_to_int64(1e18, "bytes"), 1000000000000000000);
  EXPECT_THROW(checked_to_int64(9.3e18, "bytes"), ArithmeticOverflow);
  EXPECT_THROW(checked_to_int64(std::numeric_limits<double>::infinity(), "bytes"), ArithmeticOverflow);
  EXPECT_THROW(checked_to_int64(std::nan(""), "bytes"), ArithmeticOverflow);
}

}  // namespace
}  // namespace fsdpsim
