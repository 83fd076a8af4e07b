// The trace (Chrome / Perfetto JSON) and the SVG of a timed step: structure, units and
// consistency with the timing they draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "planner/scenario.h"
#include "sim/estimate.h"
#include "sim/svg.h"
#include "sim/timing_report.h"
#include "sim/trace.h"

namespace fsdpsim::sim {
namespace {

const Estimate& llama8b() {
  static const Estimate e = estimate_step(
      planner::load_scenario(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json"));
  return e;
}

TEST(ChromeTrace, ThreadsOpsCountersAndMicroseconds) {
  const Estimate& e = llama8b();
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace(e).dump());  // survives a round trip
  ASSERT_TRUE(trace.contains("traceEvents"));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  std::set<std::string> threads;
  std::set<int> op_ids;
  int counters = 0, instants = 0;
  double last_end_us = 0;
  for (const auto& ev : trace["traceEvents"]) {
    const std::string ph = ev["ph"];
    EXPECT_EQ(ev["pid"], 1);
    if (ph == "M" && ev["name"] == "thread_name") threads.insert(ev["args"]["name"].get<std::string>());
    if (ph == "M" && ev["name"] == "process_name") {
      EXPECT_NE(ev["args"]["name"].get<std::string>().find("rank class 0 (8 ranks)"), std::string::npos);
    }
    if (ph == "C") {
      ++counters;
      EXPECT_TRUE(ev["args"].is_object());
    }
    if (ph == "i") ++instants;
    if (ph == "X" && ev["cat"] != "cpu_issue") {
      const int id = ev["args"]["op"];
      op_ids.insert(id);
      const OpTiming& ot = e.timing.ops[id];
      EXPECT_DOUBLE_EQ(ev["ts"].get<double>(), ot.start * 1e6);
      EXPECT_DOUBLE_EQ(ev["dur"].get<double>(), (ot.end - ot.start) * 1e6);
      EXPECT_EQ(ev["name"], e.plan.schedule.ops[id].name);
      last_end_us = std::max(last_end_us, ev["ts"].get<double>() + ev["dur"].get<double>());
    }
  }
  EXPECT_TRUE(threads.count("CPU issue thread"));
  for (const char* s : {"stream compute", "stream all_gather", "stream reduce_scatter"}) EXPECT_TRUE(threads.count(s)) << s;
  EXPECT_EQ(op_ids.size(), e.plan.schedule.ops.size());
  EXPECT_NEAR(last_end_us, e.timing.step_seconds * 1e6, 1e-3);
  EXPECT_GT(counters, 10);
  EXPECT_EQ(instants, 1);
  // A block's forward carries its cost inputs.
  for (const auto& ev : trace["traceEvents"])
    if (ev["ph"] == "X" && ev["name"] == "fwd model.layers.0") {
      EXPECT_GT(ev["args"]["flops"].get<double>(), 1e12);
      EXPECT_EQ(ev["args"]["module"], "model.layers.0");
      EXPECT_EQ(ev["args"]["phase"], "forward");
    }
  // The peak instant carries the replay's peak.
  for (const auto& ev : trace["traceEvents"])
    if (ev["ph"] == "i") {
      EXPECT_EQ(ev["args"]["allocated_bytes"].get<std::int64_t>(), e.memory.peak_allocated_bytes);
    }
}

TEST(TimelineSvg, AxesLegendPeakAndOneBarPerOp) {
  const Estimate& e = llama8b();
  const std::string svg = timeline_svg(e);
  ASSERT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  for (const char* s : {"time (s)", "allocated (GiB)", "memory category", "op kind", "all-gather", "reduce-scatter",
                        "optimizer_state", "usable GPU memory", "CPU issue"})
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  // The peak label shows the replay's peak in GiB.
  char peak[64];
  std::snprintf(peak, sizeof peak, "peak %.2f GiB", static_cast<double>(e.memory.peak_allocated_bytes) / (1 << 30));
  EXPECT_NE(svg.find(peak), std::string::npos) << peak;
  // One bar (with a tooltip) per op on the streams, plus one per op with an issue cost.
  std::size_t bars = 0;
  for (std::size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1))
    if (svg.compare(svg.find('>', p) + 1, 7, "<title>") == 0) ++bars;
  std::size_t expected = 0;
  for (const OpTiming& ot : e.timing.ops) expected += 1 + (ot.issue_seconds > 0 ? 1 : 0);
  EXPECT_EQ(bars, expected);
  // Names are escaped.
  EXPECT_EQ(svg.find("<title>fwd <"), std::string::npos);
}

// Well-formed XML whatever the rows and op kinds: every '<' opens a tag, every '&' an entity.
// The CPU-offload and expert-parallel plans draw the "host <-> device" copy row, whose legend
// went out unescaped before session 30 (xmllint: "StartTag: invalid element name").
void expect_well_formed(const std::string& svg, const std::string& what) {
  for (std::size_t p = svg.find('<'); p != std::string::npos; p = svg.find('<', p + 1)) {
    const char next = p + 1 < svg.size() ? svg[p + 1] : '\0';
    EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(next)) || next == '/' || next == '?' || next == '!')
        << what << ": a bare '<' at " << p << ": " << svg.substr(p > 40 ? p - 40 : 0, 80);
  }
  for (std::size_t p = svg.find('&'); p != std::string::npos; p = svg.find('&', p + 1)) {
    bool entity = false;
    for (const char* e : {"&lt;", "&gt;", "&amp;", "&quot;", "&apos;"}) entity = entity || svg.compare(p, std::strlen(e), e) == 0;
    EXPECT_TRUE(entity) << what << ": a bare '&' at " << p;
  }
}

TEST(TimelineSvg, EveryTextIsEscaped) {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  for (const auto& [file, overrides] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"/scenarios/llama3.1-8b-8xh100.json", {}},
           {"/scenarios/llama3.1-8b-8xh100.json", {"fsdp.cpu_offload=true"}},
           {"/scenarios/deepseek-v2-lite-8xh100-fsdp2-ep8.json", {}}}) {
    const std::string svg = timeline_svg(estimate_step(planner::load_scenario(root + file, overrides)));
    expect_well_formed(svg, file);
    if (!overrides.empty()) {
      EXPECT_NE(svg.find("host &lt;-&gt; device"), std::string::npos) << file;
    }
  }
}

// The memory panel is on the Gantt chart's clock (GPU time): the peak is drawn while its op runs
// on its stream (at CPU issue time, before issue 18, it sat at 0.10 s, before the op's 0.53 s
// start), and the last forward op's memory ends where the forward ends on the compute row.
TEST(TimelineSvg, MemoryAndStreamsShareTheGpuClock) {
  const Estimate& e = llama8b();
  const std::string svg = timeline_svg(e);
  const OpTiming& peak = e.timing.ops[e.memory.peak_op];
  const std::size_t at = svg.find(" GiB at ");
  ASSERT_NE(at, std::string::npos);
  const double ms = std::stod(svg.substr(at + 8));
  ASSERT_NE(svg.find(" ms (", at), std::string::npos);
  EXPECT_GE(ms * 1e-3, peak.start - 1e-6);
  EXPECT_LE(ms * 1e-3, peak.end + 1e-6);
  EXPECT_GT(peak.start, peak.issue_start + 0.1);  // the two clocks are far apart here: the test can tell them apart
}

TEST(TimingReport, JsonCarriesTheStableKeysAndTextTheBreakdown) {
  const Estimate& e = llama8b();
  const nlohmann::json j = timing_json(e.timing);
  // docs: DESIGN.md "Stable interface": time.* and throughput.* of `estimate --json`.
  EXPECT_DOUBLE_EQ(j["time"]["step_seconds"].get<double>(), e.timing.step_seconds);
  EXPECT_DOUBLE_EQ(j["time"]["compute_seconds"].get<double>(), e.timing.compute_seconds);
  EXPECT_DOUBLE_EQ(j["time"]["exposed_comm_seconds"].get<double>(), e.timing.exposed_comm_seconds);
  EXPECT_DOUBLE_EQ(j["time"]["optimizer_seconds"].get<double>(), e.timing.optimizer_seconds);
  EXPECT_DOUBLE_EQ(j["throughput"]["tokens_per_second_per_gpu"].get<double>(), e.timing.tokens_per_second_per_gpu);
  EXPECT_DOUBLE_EQ(j["throughput"]["mfu"].get<double>(), e.timing.mfu);
  EXPECT_DOUBLE_EQ(j["throughput"]["peak_flops"].get<double>(), 989.4e12);
  const std::string text = timing_text(e);
  for (const char* s : {"step", "exposed communication", "optimizer", "MFU", "Critical path"})
    EXPECT_NE(text.find(s), std::string::npos) << s;
  // One table row per op, plus the header.
  const std::string table = op_timing_table(e);
  EXPECT_EQ(static_cast<std::size_t>(std::count(table.begin(), table.end(), '\n')), e.plan.schedule.ops.size() + 1);
}

}  // namespace
}  // namespace fsdpsim::sim
