// libFuzzer harness: the scenario reader (`--scenario FILE` of estimate, simulate, sweep,
// schedule, run): the file, its model, cluster and calibration references, validation.
#include "fuzz_input.h"
#include "planner/scenario.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fsdpsim::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdpsim;
  if (!fuzz::stays_in_catalog(data, size)) return -1;
  const std::string path = fuzz::write_input(data, size, "scenario.json");
  return fuzz::run_reader("the scenario reader", [&] {
    const planner::Scenario s = planner::load_scenario(path);
    // What every verb reads next: the world, the replicas, the model's size and work.
    (void)s.world_size();
    (void)s.replicas();
    (void)s.model->parameter_count();
    (void)s.model->forward_flops(static_cast<double>(s.training.micro_batch), static_cast<double>(s.training.seq_len));
  });
}
