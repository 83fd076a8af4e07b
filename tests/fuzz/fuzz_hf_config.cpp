// libFuzzer harness: the Hugging Face config.json importer (`"model": "hf:config.json"`,
// `fsdpsim import-hf`): model_type dispatch, architecture fields, the generated costs, and the
// model reader on the result; and count_hf_parameters, the model-card count (MoE families: its own
// code).
#include "fuzz_input.h"
#include "models/hf_import.h"
#include "models/json_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fsdpsim::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fsdpsim;
  if (!fuzz::stays_in_catalog(data, size)) return -1;
  const std::string path = fuzz::write_input(data, size, "config.json");
  // The import options from the input's length, so both kinds of attention and loss are reached.
  models::HfImportOptions options;
  options.flash_attention = size % 2 == 0;
  options.fp32_loss = size % 4 < 2;
  // The model-card count, apart: for the MoE families it is its own code (count_moe), which reads
  // the sizes without building the model (its products wrapped before they were checked).
  fuzz::run_reader("the HF parameter count", [&] { (void)models::count_hf_parameters(load_json_file(path), path); });
  return fuzz::run_reader("the HF config importer", [&] {
    const models::Model m = models::load_hf_config(path, options);
    (void)m.parameter_count();
    (void)m.forward_flops(1, 128);
  });
}
