// libFuzzer harness: the model reader (a scenario's "model": "models/x.json", the catalog's
// format): module tree, parameters, costs and their polynomials.
#include "fuzz_input.h"
#include "models/model.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fsdpsim::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdpsim;
  if (!fuzz::stays_in_catalog(data, size)) return -1;
  const std::string path = fuzz::write_input(data, size, "model.json");
  return fuzz::run_reader("the model reader", [&] {
    const models::Model m = models::load_model_file(path);
    // What the planner reads first: sizes and work at a small and a long sequence.
    (void)m.parameter_count();
    (void)m.forward_flops(1, 128);
    (void)m.forward_flops(8, 131072);
  });
}
