// libFuzzer harness: the sweep-file reader (`fsdpsim sweep --sweep FILE`): the file, its base
// scenario (a reference or inline), the axes expanded against it, and the first and last
// points instantiated as the sweep would (without timing them).
#include "fuzz_input.h"
#include "planner/sweep_space.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fsdpsim::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdpsim;
  if (!fuzz::stays_in_catalog(data, size)) return -1;
  const std::string path = fuzz::write_input(data, size, "sweep.json");
  return fuzz::run_reader("the sweep-file reader", [&] {
    const planner::SweepFile f = planner::load_sweep_file(path);
    if (f.scenario.empty() && f.scenario_inline.is_null()) return;  // the CLI then wants --scenario
    const auto base = f.scenario_inline.is_null()
                          ? planner::ScenarioTemplate::load(f.scenario, f.overrides)
                          : planner::ScenarioTemplate::from_json(f.scenario_inline, path, f.overrides);
    const planner::SweepSpace space = planner::make_space(f.axes, base->context());
    const std::size_t n = space.size();
    if (n == 0) return;
    for (std::size_t i : {std::size_t{0}, n - 1}) {
      const std::vector<int> choice = space.choice(i);
      (void)space.label(choice);
      try {
        (void)base->instantiate(space.overrides(choice));
      } catch (const InputError&) {
        // An invalid combination: the sweep skips the point.
      }
    }
  });
}
