// `sweep --shard i/N` and `sweep --merge FILES` (docs/sweep.md, "Distributed sweeps"): the
// shards of the shipped 8B sweep, run as separate processes and merged, give one process's CSV
// byte for byte and its JSON byte for byte but for the fields that time the run itself
// (wall_seconds, and threads: the shards' together); a missing, doubled, unfinished or foreign
// shard is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;
const std::string kSweep = "sweep --sweep " + kRoot + "/scenarios/sweeps/llama3.1-8b-64xh100.json";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The JSON report without its lines that time the run.
std::string without_timing(const std::string& json) {
  std::istringstream in(json);
  std::string line, out;
  while (std::getline(in, line))
    if (line.find("\"wall_seconds\"") == std::string::npos && line.find("\"threads\"") == std::string::npos)
      out += line + "\n";
  return out;
}

std::string run_shard(int i, int n) {
  const CommandResult r = run_cli(kSweep + " --threads 1 --shard " + std::to_string(i) + "/" + std::to_string(n));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return write_temp("shard" + std::to_string(i) + "of" + std::to_string(n), r.out);
}

TEST(SweepShards, MergedShardsEqualOneProcessByteForByte) {
  const std::string one_csv = write_temp("one.csv", "");
  const CommandResult one = run_cli(kSweep + " --threads 2 --json --csv " + one_csv);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::string a = run_shard(0, 3), b = run_shard(1, 3), c = run_shard(2, 3);
  const std::string merged_csv = write_temp("merged.csv", "");
  // Any order of the files.
  const CommandResult merged = run_cli(kSweep + " --json --csv " + merged_csv + " --merge " + c + " " + a + " " + b);
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(read_file(one_csv), read_file(merged_csv));
  EXPECT_GT(read_file(one_csv).size(), 10000u);
  EXPECT_EQ(without_timing(one.out), without_timing(merged.out));
  EXPECT_NE(merged.out.find("\"threads\": 3"), std::string::npos);  // the three shards' one thread each
  // The text report too, but for its line of counts and timing.
  const CommandResult one_text = run_cli(kSweep + " --threads 2");
  const CommandResult merged_text = run_cli(kSweep + " --merge " + a + " " + b + " " + c);
  ASSERT_EQ(merged_text.exit_code, 0) << merged_text.err;
  auto drop_timing_line = [](const std::string& text) {
    const std::size_t at = text.find("\nevaluated ");
    const std::size_t end = text.find('\n', at + 1);
    return text.substr(0, at) + text.substr(end);
  };
  EXPECT_EQ(drop_timing_line(one_text.out), drop_timing_line(merged_text.out));
}

TEST(SweepShards, MissingDoubledUnfinishedOrForeignShardsAreRefused) {
  const std::string a = run_shard(0, 2), b = run_shard(1, 2);
  const CommandResult missing = run_cli(kSweep + " --merge " + a);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("shard 1/2 is missing"), std::string::npos) << missing.err;

  const CommandResult doubled = run_cli(kSweep + " --merge " + a + " " + a);
  EXPECT_NE(doubled.exit_code, 0);
  EXPECT_NE(doubled.err.find("given twice"), std::string::npos) << doubled.err;

  // A shard cut short (a job killed mid-way): no trailer, points missing.
  std::string text = read_file(b);
  const std::string cut = write_temp("cut", text.substr(0, text.rfind('\n', text.size() / 2) + 1));
  const CommandResult unfinished = run_cli(kSweep + " --merge " + a + " " + cut);
  EXPECT_NE(unfinished.exit_code, 0);
  EXPECT_NE(unfinished.err.find("did not finish"), std::string::npos) << unfinished.err;
  EXPECT_NE(unfinished.err.find(cut), std::string::npos) << "names the file: " << unfinished.err;

  // Shards of another sweep (one more --set): refused, not mixed in.
  const CommandResult other = run_cli(kSweep + " --set training.seq_len=4096 --merge " + a + " " + b);
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("a shard of another sweep"), std::string::npos) << other.err;

  // A scenario file edited between two shards' runs (a job array while someone changes the
  // file): the same path, --set and axes, other contents. Refused (the session-30 audit found
  // such shards merged into a recommendation no sweep gives).
  nlohmann::json scenario =
      nlohmann::json::parse(read_file(kRoot + "/scenarios/llama3.1-8b-8xh100.json"), nullptr, true, true);
  scenario["model"] = kRoot + "/models/llama3.1-8b.json";
  scenario["cluster"] = kRoot + "/scenarios/clusters/dgx-h100.json";
  const std::string edited = write_temp("edited_scenario.json", scenario.dump());
  const std::string small = "sweep --scenario " + edited + " --set training.global_batch=null --axis training.micro_batch=1,2";
  auto shard_of = [&](int i) {
    const CommandResult r = run_cli(small + " --threads 1 --shard " + std::to_string(i) + "/2");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return write_temp("edited_shard_" + std::to_string(i), r.out);
  };
  const std::string first = shard_of(0);
  scenario["training"]["seq_len"] = 1024;
  write_temp("edited_scenario.json", scenario.dump());
  const std::string second = shard_of(1);
  const CommandResult edited_merge = run_cli(small + " --merge " + first + " " + second);
  EXPECT_EQ(edited_merge.exit_code, 2) << edited_merge.err;
  EXPECT_NE(edited_merge.err.find("a shard of another sweep"), std::string::npos) << edited_merge.err;

  // A record damaged in a way no point can be (a negative byte count, nan): refused, naming the
  // file, not merged into the report.
  for (const char* damage : {"-5", "nan", "inf"}) {
    std::string damaged = read_file(b);
    std::size_t at = damaged.find("\np ");
    while (at != std::string::npos && damaged.compare(damaged.find(' ', damaged.find(' ', at + 3) + 1) - 3, 3, " ok") != 0)
      at = damaged.find("\np ", at + 1);
    ASSERT_NE(at, std::string::npos) << "no evaluated point in the shard";
    // "p INDEX ok PEAK_ALLOCATED RESERVED STATE OVERHEAD GPU_MEMORY DEVICE_PEAK STEP ...": -5 goes
    // into the peak (an integer), nan and inf into the step (a double, as %a writes it).
    std::size_t field = at + 1;
    for (int k = 0; k < (damage[0] == '-' ? 3 : 9); ++k) field = damaged.find(' ', field) + 1;
    damaged.replace(field, damaged.find(' ', field) - field, damage);
    const std::string file = write_temp(std::string("damaged_") + (damage[0] == '-' ? "neg" : damage), damaged);
    const CommandResult r = run_cli(kSweep + " --merge " + a + " " + file);
    EXPECT_EQ(r.exit_code, 2) << damage << ": " << r.err;
    EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("a figure that no point has"), std::string::npos) << r.err;
  }

  const CommandResult bad = run_cli(kSweep + " --shard 2/2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("expected i/N"), std::string::npos) << bad.err;
  const CommandResult csv = run_cli(kSweep + " --shard 0/2 --csv x.csv");
  EXPECT_NE(csv.exit_code, 0);
  EXPECT_NE(csv.err.find("--shard"), std::string::npos) << csv.err;
}

// Shard files go through the one JSON reader (models/json_input.h), as every input file does:
// a header nested past 256 levels, a key given twice and a malformed trailer are refused naming
// the file, the JSON path and the line (before: nlohmann::json::parse read them unchecked, the
// last of two keys winning and a deep header recursing once per level); a record's integer past
// 64 bits is refused, not clamped.
TEST(SweepShards, DeepDuplicateOrMalformedShardFilesAreRefusedNamingFileAndPath) {
  const std::string whole = read_file(run_shard(0, 1));
  const std::size_t header_end = whole.find('\n');
  ASSERT_NE(header_end, std::string::npos);
  const std::string header = whole.substr(0, header_end), body = whole.substr(header_end);
  ASSERT_EQ(header.substr(0, 1), "{") << header;
  std::size_t lines = 0;
  for (char c : whole) lines += c == '\n';
  ASSERT_GT(lines, 3u);

  // 300 nested arrays under a key of the header.
  const std::string deep_file =
      write_temp("deep-shard", "{\"pad\": " + std::string(300, '[') + std::string(300, ']') + ", " + header.substr(1) + body);
  const CommandResult deep = run_cli(kSweep + " --merge " + deep_file);
  EXPECT_EQ(deep.exit_code, 2) << deep.err;
  EXPECT_EQ(deep.err.rfind("error: " + deep_file + ": pad[0][0]", 0), 0u) << deep.err;
  EXPECT_NE(deep.err.find("expected at most 256 levels of nested objects and arrays"), std::string::npos) << deep.err;
  EXPECT_NE(deep.err.find("(line 1, the shard's header)"), std::string::npos) << deep.err;

  // The sweep's fingerprint twice: the last used to win silently.
  const std::string duplicate_file =
      write_temp("duplicate-shard", header.substr(0, header.size() - 1) + ", \"sweep\": \"0000000000000000\"}" + body);
  const CommandResult duplicate = run_cli(kSweep + " --merge " + duplicate_file);
  EXPECT_EQ(duplicate.exit_code, 2) << duplicate.err;
  EXPECT_EQ(duplicate.err.rfind("error: " + duplicate_file + ": sweep: duplicate key", 0), 0u) << duplicate.err;

  // The trailer (the last line) cut inside its object.
  const std::size_t trailer_at = whole.rfind('\n', whole.size() - 2) + 1;
  const std::string malformed_file =
      write_temp("malformed-shard", whole.substr(0, trailer_at) + "{\"end\": true, \"threads\": 1,\n");
  const CommandResult malformed = run_cli(kSweep + " --merge " + malformed_file);
  EXPECT_EQ(malformed.exit_code, 2) << malformed.err;
  EXPECT_EQ(malformed.err.rfind("error: " + malformed_file + ": malformed JSON at line " + std::to_string(lines), 0), 0u)
      << malformed.err;
  EXPECT_NE(malformed.err.find("the shard's trailer"), std::string::npos) << malformed.err;

  // A trailer whose field has the wrong type: named at its path (before: nlohmann's type_error).
  const std::string typed_file =
      write_temp("typed-shard", whole.substr(0, trailer_at) + "{\"end\": true, \"threads\": \"two\"}\n");
  const CommandResult typed = run_cli(kSweep + " --merge " + typed_file);
  EXPECT_EQ(typed.exit_code, 2) << typed.err;
  EXPECT_EQ(typed.err.rfind("error: " + typed_file + ": threads: ", 0), 0u) << typed.err;

  // A point's peak bytes past 2^63 - 1: strtoll clamped it to 2^63 - 1 silently.
  const std::size_t ok = whole.find(" ok ");
  ASSERT_NE(ok, std::string::npos) << "an evaluated point in the shard";
  const std::size_t peak_at = ok + 4, peak_end = whole.find(' ', peak_at);
  const std::string huge_file =
      write_temp("huge-shard", whole.substr(0, peak_at) + "99999999999999999999" + whole.substr(peak_end));
  const CommandResult huge = run_cli(kSweep + " --merge " + huge_file);
  EXPECT_EQ(huge.exit_code, 2) << huge.err;
  EXPECT_EQ(huge.err.rfind("error: " + huge_file + ": an integer past 64 bits \"99999999999999999999\"", 0), 0u)
      << huge.err;
}

}  // namespace
}  // namespace fsdpsim::testing
