// Throughput figures that must stay physical (found by the robustness audit of 2026-12-06):
// MFU and HFU divide by the peak of the dtype the matmuls run in, so an fp8 step's stay under 1;
// `simulate --json` carries that peak from its SimGrid child; the compute stream's slowdown
// beside NCCL is never negative.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

// scenarios/hardware/gpus.json, H100-SXM-80GB: dense bf16 989.4 and fp8 1978.9 TFLOP/s (NVIDIA
// H100 datasheet, as the catalog cites).
constexpr double kH100Bf16 = 989.4e12, kH100Fp8 = 1978.9e12;

TEST(ThroughputFigures, MfuDividesByThePeakOfTheMatmulDtype) {
  const std::string s = "estimate --scenario " + quick_start_scenario();
  const nlohmann::json bf16 = run_cli_json(s);
  EXPECT_DOUBLE_EQ(bf16["throughput"]["peak_flops"].get<double>(), kH100Bf16);
  // The audit's case: Llama-2-70B in fp8 on 32 H200s read MFU 1.01 and HFU 1.35 against the bf16 peak.
  const nlohmann::json fp8 = run_cli_json(
      "estimate --scenario " + quick_start_scenario() +
      " --set training.matmul_dtype=fp8 --set fsdp.all_gather_dtype=fp8 --set model=models/llama2-70b.json --set training.seq_len=4096 "
      "--set training.micro_batch=4 --set training.global_batch=128 --set cluster.nodes=4 --set cluster.gpu=H200-SXM-141GB");
  EXPECT_DOUBLE_EQ(fp8["throughput"]["peak_flops"].get<double>(), kH100Fp8);  // the H200's fp8 peak is the H100's
  EXPECT_LE(fp8["throughput"]["mfu"].get<double>(), 1.0);
  EXPECT_LE(fp8["throughput"]["hfu"].get<double>(), 1.0);
  // Float8 linears on bf16 parameters (torchao's recipe) count as fp8 matmuls too.
  const nlohmann::json linears = run_cli_json(s + " --set training.matmul_dtype=fp8");
  EXPECT_DOUBLE_EQ(linears["throughput"]["peak_flops"].get<double>(), kH100Fp8);
  // The MFU is the model FLOPs over the step at that peak, as the bf16 one is.
  for (const nlohmann::json* j : {&bf16, &linears}) {
    const auto& t = (*j)["throughput"];
    EXPECT_NEAR(t["mfu"].get<double>(),
                t["model_flops_per_step"].get<double>() /
                    ((*j)["time"]["step_seconds"].get<double>() * t["peak_flops"].get<double>()),
                1e-12);
  }
}

// A model none of whose matmuls torchao converts (GPT-2's Conv1D layers are not nn.Linear) runs
// every GEMM in 16-bit under matmul_dtype fp8: the same step, the bf16 peak, and a warning that
// nothing converted (the session-35 fp8 audit: GPT-2 XL's MFU read 12.0% against 23.9%, divided by
// the fp8 peak, silently). fp8 without torch.compile is said to run torchao's scaling unfused.
TEST(ThroughputFigures, Fp8WithNothingConvertedKeepsTheBf16PeakAndSaysSo) {
  const std::string s = "estimate --scenario " + quick_start_scenario() + " --set model=models/gpt2-xl.json";
  const nlohmann::json bf16 = run_cli_json(s);
  const nlohmann::json fp8 = run_cli_json(s + " --set training.matmul_dtype=fp8");
  EXPECT_EQ(fp8["time"]["step_seconds"], bf16["time"]["step_seconds"]);
  EXPECT_DOUBLE_EQ(fp8["throughput"]["peak_flops"].get<double>(), kH100Bf16);
  EXPECT_DOUBLE_EQ(fp8["throughput"]["mfu"].get<double>(), bf16["throughput"]["mfu"].get<double>());
  auto said = [](const nlohmann::json& j, const std::string& words) {
    for (const nlohmann::json& w : j["warnings"])
      if (w.get<std::string>().find(words) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(said(fp8, "no linear of gpt2-xl converts")) << fp8["warnings"].dump();
  EXPECT_FALSE(said(bf16, "no linear of"));
  const std::string llama = "estimate --scenario " + quick_start_scenario() + " --set training.matmul_dtype=fp8";
  EXPECT_TRUE(said(run_cli_json(llama + " --set training.torch_compile=false"), "without torch.compile"));
  EXPECT_FALSE(said(run_cli_json(llama + " --set training.torch_compile=true"), "without torch.compile"));
  EXPECT_FALSE(said(run_cli_json(llama), "no linear of"));
}

TEST(ThroughputFigures, SimulateCarriesThePeakFromItsChild) {
  const nlohmann::json j = run_cli_json("simulate --scenario " + quick_start_scenario() + " --max-time 20");
  EXPECT_DOUBLE_EQ(j["throughput"]["peak_flops"].get<double>(), kH100Bf16);
  EXPECT_DOUBLE_EQ(j["analytic"]["throughput"]["peak_flops"].get<double>(), kH100Bf16);
}

TEST(ThroughputFigures, InterferenceIsNeverNegative) {
  // Both read -1e-14 and -2.6e-16 s before: the rounding of the ops' absolute times.
  const nlohmann::json mixtral =
      run_cli_json("estimate --scenario " + std::string(FSDPSIM_SOURCE_ROOT) +
                   "/scenarios/mixtral-8x7b-64xh100-fsdp2.json --set fsdp.wrap=root");
  EXPECT_GE(mixtral["time"]["interference_seconds"].get<double>(), 0.0);
  const nlohmann::json one_gpu = run_cli_json("estimate --model llama3.1-8b --gpus 1xH100");
  EXPECT_GE(one_gpu["time"]["interference_seconds"].get<double>(), 0.0);
}

}  // namespace
}  // namespace fsdpsim::testing
