#include "sim/simgrid_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "models/json_input.h"
#include "planner/scenario.h"

namespace fsdpsim::sim {

namespace fs = std::filesystem;

namespace {

// The attributes of one start tag (`<link id="a" bandwidth="1GBps"/>`), single or double quoted.
std::map<std::string, std::string> tag_attributes(const std::string& tag) {
  std::map<std::string, std::string> attributes;
  std::size_t i = 0;
  while (i < tag.size()) {
    const std::size_t eq = tag.find('=', i);
    if (eq == std::string::npos) break;
    std::size_t name_end = eq;
    while (name_end > i && std::isspace(static_cast<unsigned char>(tag[name_end - 1]))) --name_end;
    std::size_t name_begin = name_end;
    while (name_begin > i && !std::isspace(static_cast<unsigned char>(tag[name_begin - 1]))) --name_begin;
    std::size_t q = eq + 1;
    while (q < tag.size() && std::isspace(static_cast<unsigned char>(tag[q]))) ++q;
    if (q >= tag.size() || (tag[q] != '"' && tag[q] != '\'')) break;
    const std::size_t close = tag.find(tag[q], q + 1);
    if (close == std::string::npos) break;
    attributes[tag.substr(name_begin, name_end - name_begin)] = tag.substr(q + 1, close - q - 1);
    i = close + 1;
  }
  return attributes;
}

// SimGrid's quantities are a number and a unit ("25GBps", "1Gf", "5us"); the unit does not change
// the sign. NaN when no number starts the value.
double leading_number(const std::string& value) {
  const char* begin = value.c_str();
  char* end = nullptr;
  const double x = std::strtod(begin, &end);
  return end == begin ? std::nan("") : x;
}

}  // namespace

void check_platform_file(const std::string& path) {
  if (fs::is_directory(path)) throw InputError(path, "", "is a directory: expected a SimGrid platform XML file");
  if (!fs::is_regular_file(path)) throw InputError(path, "", "is not a regular file: expected a SimGrid platform XML file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the SimGrid platform file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string xml = buffer.str();
  // Which attributes hold what, per element (SimGrid's simgrid.dtd: <cluster> says bw and lat).
  const std::map<std::string, std::vector<std::pair<std::string, bool>>> checked = {
      {"host", {{"speed", true}}},
      {"link", {{"bandwidth", true}, {"latency", false}}},
      {"cluster", {{"speed", true}, {"bw", true}, {"lat", false}, {"bb_bw", true}, {"bb_lat", false}}}};
  std::map<std::string, std::map<std::string, int>> ids;  // element -> id -> line first declared
  std::size_t pos = 0;
  while ((pos = xml.find('<', pos)) != std::string::npos) {
    if (xml.compare(pos, 4, "<!--") == 0) {  // a comment may hold anything
      const std::size_t end = xml.find("-->", pos + 4);
      if (end == std::string::npos) break;
      pos = end + 3;
      continue;
    }
    std::size_t name_end = pos + 1;
    while (name_end < xml.size() && !std::isspace(static_cast<unsigned char>(xml[name_end])) && xml[name_end] != '>' &&
           xml[name_end] != '/')
      ++name_end;
    const std::string element = xml.substr(pos + 1, name_end - pos - 1);
    const std::size_t close = xml.find('>', name_end);
    if (close == std::string::npos) break;
    auto what = checked.find(element);
    if (what != checked.end()) {
      const int line = 1 + static_cast<int>(std::count(xml.begin(), xml.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
      const std::map<std::string, std::string> a = tag_attributes(xml.substr(name_end, close - name_end));
      const std::string id = a.count("id") ? a.at("id") : "";
      const std::string where = "line " + std::to_string(line) + ": <" + element + " id=\"" + id + "\">";
      if (!id.empty()) {
        auto [it, fresh] = ids[element].emplace(id, line);
        if (!fresh)
          throw InputError(path, where, "declared again (first at line " + std::to_string(it->second) +
                                            "): expected each " + element + " id once");
      }
      for (const auto& [attribute, positive] : what->second) {
        auto value = a.find(attribute);
        if (value == a.end()) continue;
        // A host's speed may list its power states ("1Gf,0.5Gf").
        std::stringstream parts(value->second);
        for (std::string part; std::getline(parts, part, ',');) {
          const double x = leading_number(part);
          if (!std::isfinite(x) || (positive ? !(x > 0) : !(x >= 0)))
            throw InputError(path, where + " " + attribute,
                             std::string("expected a ") + (positive ? "positive" : "non-negative") +
                                 " finite number with its unit, got \"" + value->second + "\"");
        }
      }
    }
    pos = close + 1;
  }
}

const char* to_string(FlowMode m) {
  switch (m) {
    case FlowMode::automatic: return "auto";
    case FlowMode::aggregated: return "aggregated";
    case FlowMode::per_step: return "per_step";
  }
  return "?";
}

const char* to_string(Symmetry s) {
  switch (s) {
    case Symmetry::automatic: return "auto";
    case Symmetry::off: return "off";
  }
  return "?";
}

const char* to_string(Placement p) {
  switch (p) {
    case Placement::packed: return "packed";
    case Placement::spread: return "spread";
  }
  return "?";
}

namespace {

double fraction_field(JsonReader& r, const std::string& key) {
  const double v = r.number(key);
  if (!(v > 0 && v <= 1)) r.fail(key, "expected a fraction of the nominal figure in (0, 1], got " + describe_json(r.raw(key)));
  return v;
}

double optional_positive(JsonReader& r, const std::string& key) {
  if (!r.has(key)) {
    r.ignore(key);
    return 0;
  }
  const double v = r.number(key);
  if (!(v > 0)) r.fail(key, "expected a positive number, got " + describe_json(r.raw(key)));
  return v;
}

}  // namespace

SimgridOptions parse_simgrid_options(const nlohmann::json& simulation, const std::string& file,
                                     const std::string& path) {
  SimgridOptions o;
  o.file = file;
  if (simulation.is_null()) return o;
  JsonReader r(simulation, file, path);
  const std::string mode = r.choice_or("flow_mode", {"auto", "aggregated", "per_step"}, "auto");
  o.flow_mode = mode == "aggregated" ? FlowMode::aggregated : mode == "per_step" ? FlowMode::per_step : FlowMode::automatic;
  o.symmetry = r.choice_or("symmetry", {"auto", "off"}, "auto") == "off" ? Symmetry::off : Symmetry::automatic;
  if (r.has("per_step_max_ranks")) o.per_step_max_ranks = r.int_in("per_step_max_ranks", 1, 1 << 20);
  else r.ignore("per_step_max_ranks");
  if (r.has("stragglers")) {
    const nlohmann::json& list = r.array("stragglers");
    for (std::size_t i = 0; i < list.size(); ++i) {
      JsonReader s(list[i], file, join_json_path(r.path_of("stragglers"), i));
      Straggler st;
      const std::int64_t rank = s.integer("rank");
      if (rank < 0 || rank > (1 << 24)) s.fail("rank", "expected a rank >= 0, got " + std::to_string(rank));
      st.rank = static_cast<int>(rank);
      // One entry a rank: of two, one would silently win (the reader refuses duplicate keys for
      // the same reason).
      for (const Straggler& earlier : o.stragglers)
        if (earlier.rank == st.rank) s.fail("rank", "rank " + std::to_string(rank) + " is already a straggler; give each rank once");
      st.compute_speed = fraction_field(s, "compute_speed");
      s.finish();
      o.stragglers.push_back(st);
    }
  } else {
    r.ignore("stragglers");
  }
  if (r.has("slow_links")) {
    const nlohmann::json& list = r.array("slow_links");
    for (std::size_t i = 0; i < list.size(); ++i) {
      JsonReader s(list[i], file, join_json_path(r.path_of("slow_links"), i));
      SlowLink sl;
      sl.link = s.string("link");
      if (sl.link.empty()) s.fail("link", "expected a link name or a glob such as \"node1.nic0.*\"");
      sl.bandwidth_factor = fraction_field(s, "bandwidth_factor");
      s.finish();
      o.slow_links.push_back(sl);
    }
  } else {
    r.ignore("slow_links");
  }
  if (r.has("fabric")) {
    JsonReader f = r.object("fabric");
    if (f.has("nodes_per_leaf")) {
      const std::int64_t k = f.positive_integer("nodes_per_leaf");
      if (k > (1 << 20)) f.fail("nodes_per_leaf", "expected at most 2^20 nodes per leaf");
      o.fabric.nodes_per_leaf = static_cast<int>(k);
    } else {
      f.ignore("nodes_per_leaf");
    }
    o.fabric.placement = f.choice_or("placement", {"packed", "spread"}, "packed") == "spread" ? Placement::spread
                                                                                           : Placement::packed;
    o.fabric.host_bridge_gbps = optional_positive(f, "host_bridge_gbps");
    o.fabric.gpu_pcie_gbps = optional_positive(f, "gpu_pcie_gbps");
    f.finish();
  } else {
    r.ignore("fabric");
  }
  if (r.has("platform_xml")) {
    const std::string xml = r.string("platform_xml");
    std::string resolved = planner::resolve_path(xml, fs::path(file).parent_path().string());
    if (!fs::is_regular_file(resolved)) r.fail("platform_xml", "no SimGrid platform file \"" + xml + "\"");
    check_platform_file(resolved);
    o.platform_xml = resolved;
  } else {
    r.ignore("platform_xml");
  }
  if (r.has("report_rank")) {
    const std::int64_t rank = r.integer("report_rank");
    if (rank < 0) r.fail("report_rank", "expected a rank >= 0");
    o.report_rank = static_cast<int>(rank);
  } else {
    r.ignore("report_rank");
  }
  r.finish();
  return o;
}

}  // namespace fsdpsim::sim
