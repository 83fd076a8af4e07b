// [Autocast over fp32 parameters] end to end (docs/cost-model.md section 10): against FSDP's bf16
// mixed precision on the same run, autocast over fp32 parameters adds work (fp32 gathers, a cast
// per Linear weight per pass) and memory (fp32 unsharded parameters, the saved bf16 weight
// copies), and changes nothing that would lower either; the GEMMs run at the same bf16 peak. A
// relation that holds for every model, checked here on a dense, a GPT-2-style and an MoE model
// with and without checkpointing (the session-26 audit ran it on all 35 catalog models x 3
// strategies x 3 checkpointing x offload x accumulation, under FSDP1 and FSDP2: 2,520 pairs,
// none broke it).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

TEST(AutocastCli, AddsWorkAndMemoryOverBf16MixedPrecision) {
  for (const char* model : {"models/llama3.1-8b.json", "models/gpt2-xl.json", "models/mixtral-8x7b.json"}) {
    for (const char* ac : {"none", "full"}) {
      SCOPED_TRACE(std::string(model) + " checkpointing " + ac);
      const std::string base = "estimate --json --scenario " + quick_start_scenario() + " --set model=" + model +
                               " --set training.micro_batch=1 --set training.seq_len=2048 --set fsdp.version=1" +
                               " --set training.reduce_dtype=bf16 --set training.activation_checkpointing=" + ac;
      const nlohmann::json bf16 = run_cli_json(base + " --set training.param_dtype=bf16");
      const nlohmann::json autocast =
          run_cli_json(base + " --set training.param_dtype=fp32 --set training.matmul_dtype=bf16");
      EXPECT_GT(autocast["time"]["step_seconds"].get<double>(), bf16["time"]["step_seconds"].get<double>());
      EXPECT_GT(autocast["memory"]["peak_allocated_bytes"].get<double>(), bf16["memory"]["peak_allocated_bytes"].get<double>());
      EXPECT_EQ(autocast["throughput"]["peak_flops"], bf16["throughput"]["peak_flops"]);
      EXPECT_GT(autocast["throughput"]["mfu"].get<double>(), 0);
      EXPECT_LT(autocast["throughput"]["mfu"].get<double>(), bf16["throughput"]["mfu"].get<double>());
    }
  }
}

}  // namespace
}  // namespace fsdpsim::testing
