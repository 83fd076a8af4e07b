#include "sim/simgrid_options.h"

#include <filesystem>

#include "models/json_input.h"
#include "planner/scenario.h"

namespace fsdpsim::sim {

namespace fs = std::filesystem;

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
