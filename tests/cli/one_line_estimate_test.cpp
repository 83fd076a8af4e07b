// `fsdpsim estimate --model NAME --gpus 64xH100` (issue 18): the one-line form resolves names
// from the catalogs into the same scenario a file would give, and an unknown name is an error
// that lists the close ones. `fsdpsim models` and `fsdpsim clusters` list the catalogs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "models/json_input.h"

namespace fsdpsim::testing {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

nlohmann::json run_json(const std::string& args) {
  const CommandResult r = run_cli(args + " --json");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// The shipped scenario (scenarios/llama3.1-8b-8xh100.json) written as a one-liner: its training
// fields as options, everything else the schema's defaults (FSDP2 FULL_SHARD per block,
// reshard_after_forward true, BACKWARD_PRE, bf16/fp32/fp32, AdamW). Same memory, same time.
TEST(OneLineEstimate, EqualsTheScenarioFileItStandsFor) {
  const nlohmann::json file = run_json("estimate --scenario " + kRoot + "/scenarios/llama3.1-8b-8xh100.json");
  const nlohmann::json line = run_json(
      "estimate --model llama3.1-8b --gpus 8xH100 --seq-len 8192 --micro-batch 2 --global-batch 16 --checkpointing full");
  ASSERT_TRUE(line.contains("memory"));
  EXPECT_EQ(line["memory"]["peak_allocated_bytes"], file["memory"]["peak_allocated_bytes"]);
  EXPECT_EQ(line["memory"]["peak_reserved_bytes"], file["memory"]["peak_reserved_bytes"]);
  EXPECT_EQ(line["time"]["step_seconds"], file["time"]["step_seconds"]);
  EXPECT_EQ(line["scenario"], "(command line)");
}

// `simulate` and `schedule` take the one-line form too (session 31; they required --scenario):
// the same scenario, so the same SimGrid step and the same schedule but for its name.
TEST(OneLineEstimate, SimulateAndScheduleTakeItToo) {
  const std::string line = "--model llama3.1-8b --gpus 8xH100 --seq-len 8192 --micro-batch 2 --global-batch 16 --checkpointing full";
  const std::string file = "--scenario " + kRoot + "/scenarios/llama3.1-8b-8xh100.json";
  const nlohmann::json by_line = run_json("simulate " + line);
  const nlohmann::json by_file = run_json("simulate " + file);
  ASSERT_TRUE(by_line.contains("simgrid"));
  for (const char* key : {"step_seconds", "ranks", "collectives", "flows", "links", "platform"})
    EXPECT_EQ(by_line["simgrid"][key], by_file["simgrid"][key]) << key;  // all but the run's own clock
  EXPECT_EQ(by_line["time"]["step_seconds"], by_file["time"]["step_seconds"]);
  const CommandResult a = run_cli("schedule " + line);
  const CommandResult b = run_cli("schedule " + file);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  nlohmann::json sa = nlohmann::json::parse(a.out), sb = nlohmann::json::parse(b.out);
  EXPECT_EQ(sa["name"], "llama3.1-8b on 8 x dgx-h100");
  sa.erase("name");
  sb.erase("name");
  EXPECT_EQ(sa, sb);
  // Neither form: an error naming what to give, exit 2.
  const CommandResult none = run_cli("simulate");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--model NAME --gpus 64xH100"), std::string::npos) << none.err;
}

// Which GPU to book: a cluster axis of catalog names (as --cluster reads them) at the one-line
// form's GPU count. Each point is that many GPUs of the named node, as `--gpus 16xH200` gives
// (the points were planned on the cluster file's one node before: [Replaced references keep
// the base's overrides], planner/sweep_space.cpp), and is judged by its own GPU's memory.
TEST(OneLineEstimate, AClusterAxisComparesGpusAtTheSameCount) {
  const std::string line = "--model llama3.1-8b --gpus 16xH100 --seq-len 8192 --checkpointing full";
  const nlohmann::json swept = run_json("sweep " + line + " --axis cluster=dgx-h100,dgx-h200 --threads 1");
  ASSERT_TRUE(swept.contains("points"));
  ASSERT_EQ(swept["points"].size(), 2u);
  const char* kinds[] = {"16xH100", "16xH200"};
  for (std::size_t i = 0; i < 2; ++i) {
    const nlohmann::json alone = run_json("estimate --model llama3.1-8b --gpus " + std::string(kinds[i]) +
                                          " --seq-len 8192 --checkpointing full");
    const nlohmann::json& point = swept["points"][i];
    EXPECT_EQ(point["memory"]["peak_reserved_bytes"], alone["memory"]["peak_reserved_bytes"]) << kinds[i];
    EXPECT_EQ(point["memory"]["gpu_memory_bytes"], alone["memory"]["gpu_memory_bytes"]) << kinds[i];
    EXPECT_EQ(point["throughput"]["tokens_per_second_per_gpu"], alone["throughput"]["tokens_per_second_per_gpu"])
        << kinds[i];
  }
  EXPECT_NE(swept["points"][0]["memory"]["gpu_memory_bytes"], swept["points"][1]["memory"]["gpu_memory_bytes"]);
  const CommandResult text = run_cli("sweep " + line + " --axis cluster=dgx-h100,dgx-h200 --threads 1");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("<= the point's GPU memory (the base's 79.65 GiB)"), std::string::npos) << text.out;
  // A cluster of other GPUs per node would keep the form's 8 nodes and not make 64 GPUs
  // (kempner-h200-2nodes has 4 a node: 2 x 4 = 8 of the 16 asked): `estimate` asks for the nodes, and such a sweep point is
  // skipped saying so, unless it states them.
  const CommandResult fewer = run_cli("estimate " + line + " --set cluster=kempner-h200-2nodes");
  EXPECT_EQ(fewer.exit_code, 2);
  EXPECT_NE(fewer.err.find("16 GPUs asked, but the cluster has 4 GPUs per node, so the form's 2 nodes make 8: "
                           "give --set cluster.nodes=4"),
            std::string::npos)
      << fewer.err;
  EXPECT_EQ(run_json("estimate " + line + " --set cluster=kempner-h200-2nodes --set cluster.nodes=4")["world_size"], 16);
  const CommandResult odd = run_cli("sweep " + line + " --axis cluster=dgx-h100,kempner-h200-2nodes --threads 1 --json");
  ASSERT_EQ(odd.exit_code, 0) << odd.err;
  const nlohmann::json odd_json = nlohmann::json::parse(odd.out);
  ASSERT_EQ(odd_json["points"].size(), 2u);
  EXPECT_EQ(odd_json["points"][1]["status"], "skipped");
  EXPECT_NE(odd_json["points"][1]["reason"].get<std::string>().find("the base's 2 nodes make 8 GPUs, not its 16"),
            std::string::npos)
      << odd_json["points"][1];
  // `--set cluster=NAME` reads a catalog name too, and a name that is neither says what is close.
  const CommandResult typo = run_cli("estimate " + line + " --set cluster=dgx-h20");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("close: dgx-h200"), std::string::npos) << typo.err;
}

// --gpus N is a count: a --set of the GPUs per node alone keeps it (N / K nodes), as the form sizes
// nodes from the file's GPUs per node. It planned N / 8 nodes of K GPUs (16 for K = 2: session
// 33's audit). Stated nodes win; a K that does not divide N is an error naming both.
TEST(OneLineEstimate, GpusPerNodeSetAloneKeepsTheGpuCount) {
  for (int k : {1, 2, 16}) {
    const nlohmann::json e =
        run_json("estimate --model llama3.1-8b --cluster dgx-h100 --gpus 64 --set cluster.gpus_per_node=" + std::to_string(k));
    EXPECT_EQ(e["world_size"], 64) << k;
  }
  EXPECT_EQ(run_json("estimate --model llama3.1-8b --gpus 64xH100 --set cluster.gpus_per_node=4 --set cluster.nodes=2")["world_size"], 8);
  const CommandResult odd = run_cli("estimate --model llama3.1-8b --cluster dgx-h100 --gpus 64 --set cluster.gpus_per_node=3");
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_NE(odd.err.find("64 GPUs do not fill whole nodes of 3"), std::string::npos) << odd.err;
}

// `sweep` takes the one-line form too (session 32; it required --scenario or a sweep file's):
// the same points as the scenario file it stands for, a "run:" line that gives the recommended
// point again, the sweep file's "set" between the form's shape and the command line's options,
// and shards that merge into the one-process report.
TEST(OneLineEstimate, SweepTakesItToo) {
  const std::string line = "--model llama3.1-8b --gpus 8xH100 --seq-len 8192 --micro-batch 2 --global-batch 16 --checkpointing full";
  const std::string file = "--scenario " + kRoot + "/scenarios/llama3.1-8b-8xh100.json";
  const std::string axes = " --axis training.micro_batch=1,2 --axis fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP --threads 1";
  const nlohmann::json by_line = run_json("sweep " + line + axes);
  const nlohmann::json by_file = run_json("sweep " + file + axes);
  ASSERT_TRUE(by_line.contains("points"));
  ASSERT_EQ(by_line["points"].size(), 4u);
  EXPECT_EQ(by_line["points"], by_file["points"]);
  EXPECT_EQ(by_line["scenario"], "(command line)");

  // The recommendation's "run:" line, run, is the recommended point.
  const CommandResult text = run_cli("sweep " + line + axes);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const std::size_t at = text.out.find("  run: fsdpsim estimate --model llama3.1-8b --gpus 8xH100 ");
  ASSERT_NE(at, std::string::npos) << text.out;
  const std::size_t from = text.out.find("estimate", at);
  const std::string run = text.out.substr(from, text.out.find('\n', at) - from);
  EXPECT_EQ(run.find("cluster.nodes"), std::string::npos) << run;  // --gpus stands for the shape
  const nlohmann::json rerun = run_json(run);
  const std::size_t recommended = by_line["recommendation"]["point"].get<std::size_t>();
  ASSERT_LT(recommended, by_line["points"].size());
  const nlohmann::json& point = by_line["points"][recommended];
  EXPECT_EQ(rerun["throughput"]["tokens_per_second_per_gpu"], point["throughput"]["tokens_per_second_per_gpu"]);
  EXPECT_EQ(rerun["memory"]["peak_reserved_bytes"], point["memory"]["peak_reserved_bytes"]);

  // With a sweep file: its "set" (cluster.nodes=8, global batch 256) comes after the one-line
  // form's shape (one node) and before the command line's options. The sweep file on the
  // one-liner of its own scenario gives its own points.
  const std::string sweep = " --sweep " + kRoot + "/scenarios/sweeps/llama3.1-8b-64xh100.json --threads 2";
  const nlohmann::json file_scenario = run_json("sweep" + sweep);
  const nlohmann::json line_scenario =
      run_json("sweep --model llama3.1-8b --gpus 8xH100 --seq-len 8192 --micro-batch 2 --checkpointing full" + sweep);
  ASSERT_TRUE(file_scenario.contains("points"));
  EXPECT_EQ(line_scenario["points"], file_scenario["points"]);
  // A shorthand on the command line wins over the sweep file's "set": a global batch of 64.
  const nlohmann::json smaller = run_json("sweep --model llama3.1-8b --gpus 8xH100 --global-batch 64" + sweep);
  ASSERT_TRUE(smaller.contains("base_overrides"));
  EXPECT_EQ(smaller["base_overrides"].back(), "training.global_batch=64");

  // Shards of a one-line sweep merge into the one-process report, byte for byte.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fsdpsim_one_line_sweep_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 2; ++i) {
    const CommandResult shard = run_cli("sweep " + line + axes + " --shard " + std::to_string(i) + "/2 > " +
                                        (dir / ("s" + std::to_string(i))).string());
    ASSERT_EQ(shard.exit_code, 0) << shard.err;
  }
  const CommandResult merged = run_cli("sweep " + line + axes + " --json --merge " + (dir / "s0").string() + " " +
                                       (dir / "s1").string());
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(nlohmann::json::parse(merged.out)["points"], by_line["points"]);
  std::filesystem::remove_all(dir);

  // A sweep judged with headroom says so on its run: line, so that the estimate judges the same fit.
  const CommandResult roomy = run_cli("sweep " + line + axes + " --headroom-gib 8");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  const std::size_t at_roomy = roomy.out.find("  run: fsdpsim estimate ");
  ASSERT_NE(at_roomy, std::string::npos) << roomy.out;
  const std::string roomy_run = roomy.out.substr(at_roomy, roomy.out.find('\n', at_roomy) - at_roomy);
  EXPECT_NE(roomy_run.find(" --headroom-gib 8"), std::string::npos) << roomy_run;
  const std::size_t from_roomy = roomy_run.find("estimate");
  const nlohmann::json roomy_estimate = run_json(roomy_run.substr(from_roomy));
  EXPECT_EQ(roomy_estimate["memory"]["headroom_bytes"].get<double>(), 8.0 * 1024 * 1024 * 1024);
  EXPECT_TRUE(roomy_estimate["memory"]["fits"].get<bool>());

  // Neither a scenario nor a sweep file: an error naming both forms, exit 2.
  const CommandResult none = run_cli("sweep --axis training.micro_batch=1,2");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--model NAME --gpus 64xH100"), std::string::npos) << none.err;
}

// `run`, `verify` and `calibrate` take the one-line form too (session 32): the host backend plays
// the planned step (its peak allocated is the plan's, to the byte, as `estimate` gives it); a bare
// schedule's --cluster takes a catalog name as well as a file; a schedule with scenario options
// is refused.
// The one-line form states no global batch: `estimate --micro-batch m` runs one micro-step of m
// x the GPUs. A micro-batch axis of its sweep does the same for each value (the base's
// accumulation kept), so every point is evaluated and each equals its `estimate`. Before, the
// axis kept the base's derived global batch (8 sequences at micro-batch 1 on 8 GPUs) and skipped
// micro-batch 2 and 4 ("not a multiple of micro_batch x data-parallel ranks"). With
// --global-batch stated, it is kept and accumulation follows.
TEST(OneLineEstimate, AMicroBatchAxisFollowsTheFormsBatchLikeEstimate) {
  const std::string line = "--model llama3.2-1b --gpus 8xH100 --seq-len 2048";
  const nlohmann::json r = run_json("sweep " + line + " --axis training.micro_batch=1,2,4 --threads 1");
  ASSERT_EQ(r["points"].size(), 3u);
  for (const auto& p : r["points"]) {
    ASSERT_EQ(p["status"], "ok") << p.dump();
    const std::string mb = p["values"]["training.micro_batch"];
    const nlohmann::json alone = run_json("estimate " + line + " --micro-batch " + mb);
    EXPECT_EQ(alone["throughput"]["tokens_per_second_per_gpu"], p["throughput"]["tokens_per_second_per_gpu"]) << mb;
    EXPECT_EQ(alone["memory"]["peak_reserved_bytes"], p["memory"]["peak_reserved_bytes"]) << mb;
    // Sequences a step trains: step x tokens/s/GPU x 8 GPUs / 2,048 tokens.
    const double sequences = p["time"]["step_seconds"].get<double>() *
                             p["throughput"]["tokens_per_second_per_gpu"].get<double>() * 8 / 2048;
    EXPECT_NEAR(sequences, 8 * std::stoi(mb), 1e-6) << mb;
  }
  const nlohmann::json stated = run_json("sweep " + line + " --global-batch 32 --axis training.micro_batch=1,2,4 --threads 1");
  ASSERT_EQ(stated["points"].size(), 3u);
  for (const auto& p : stated["points"]) {
    ASSERT_EQ(p["status"], "ok") << p.dump();
    const std::string mb = p["values"]["training.micro_batch"];
    const nlohmann::json alone = run_json("estimate " + line + " --global-batch 32 --micro-batch " + mb);
    EXPECT_EQ(alone["throughput"]["tokens_per_second_per_gpu"], p["throughput"]["tokens_per_second_per_gpu"]) << mb;
    const double sequences = p["time"]["step_seconds"].get<double>() *
                             p["throughput"]["tokens_per_second_per_gpu"].get<double>() * 8 / 2048;
    EXPECT_NEAR(sequences, 32, 1e-6) << mb;
  }
}

TEST(OneLineEstimate, RunVerifyAndCalibrateTakeItToo) {
  const std::string line = "--model gpt2 --gpus 2xH100";
  const nlohmann::json planned = run_json("estimate " + line);
  const nlohmann::json ran = run_json("run " + line + " --time-scale 0.001");
  ASSERT_TRUE(ran.contains("memory")) << ran.dump();
  EXPECT_EQ(ran["memory"]["peak_allocated_bytes"], planned["memory"]["peak_allocated_bytes"]);
  const CommandResult verified = run_cli("verify " + line + " --time-scale 0.001");
  EXPECT_EQ(verified.exit_code, 0) << verified.err;

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fsdpsim_one_line_run_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string schedule = (dir / "gpt2.json").string();
  ASSERT_EQ(run_cli("schedule " + line + " -o " + schedule).exit_code, 0);
  // A schedule file takes no scenario options (nor --cluster: VerifyCommand.ScheduleFilesArePlayedWithGivenDurationsOnly).
  for (const std::string& bad : std::vector<std::string>{" --model gpt2", " --seq-len 512", " --scenario " + schedule}) {
    const CommandResult r = run_cli("run --schedule " + schedule + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
  }

  const std::string calibration = (dir / "calibration.json").string();
  // Sizes with units, as `collectives -b/-e` takes them: 4K .. 1M is 4,096 .. 1,048,576 bytes,
  // nine sizes doubling.
  const CommandResult calibrated = run_cli("calibrate " + line + " --backend host --reps 1 --min-bytes 4K --max-bytes 1M -o " +
                                           calibration);
  EXPECT_EQ(calibrated.exit_code, 0) << calibrated.err;
  const nlohmann::json fit = nlohmann::json::parse(std::ifstream(calibration))["fit"];
  ASSERT_TRUE(fit.contains("collectives")) << fit.dump();
  for (const auto& c : fit["collectives"]) {
    ASSERT_FALSE(c["segments"].empty()) << c.dump();
    EXPECT_EQ(c["segments"].front()["min_bytes"].get<double>(), 4096.0) << c.dump();
    EXPECT_EQ(c["segments"].back()["max_bytes"].get<double>(), 1048576.0) << c.dump();
  }
  EXPECT_EQ(run_cli("calibrate " + line + " --backend host -o " + calibration + " --max-bytes 1X").exit_code, 2);
  const CommandResult with_it = run_cli("estimate " + line + " --set calibration=" + calibration);
  EXPECT_EQ(with_it.exit_code, 0) << with_it.err;
  std::filesystem::remove_all(dir);
}

// 64xH100 is 8 DGX H100 nodes: the same as --cluster dgx-h100 --gpus 64 and as the scenario
// file with cluster.nodes=8. Names are matched ignoring case, '-', '.' and a "owner/" prefix.
TEST(OneLineEstimate, GpuKindsAndClusterNamesResolveToTheSameCluster) {
  const nlohmann::json by_kind = run_json("estimate --model meta-llama/Llama-3.1-70B --gpus 64xH100");
  const nlohmann::json by_cluster = run_json("estimate --model llama3.1-70b --cluster dgx-h100 --gpus 64");
  const nlohmann::json by_node_kind = run_json("estimate --model llama3.1-70b --gpus 64xDGX-H100");
  const nlohmann::json by_file = run_json("estimate --scenario " + kRoot +
                                          "/scenarios/llama3.1-8b-8xh100.json --set model=models/llama3.1-70b.json "
                                          "--set cluster.nodes=8 --set training.global_batch=null --set training.micro_batch=1 "
                                          "--set training.seq_len=2048 --set training.activation_checkpointing=none");
  ASSERT_TRUE(by_kind.contains("world_size"));
  EXPECT_EQ(by_kind["world_size"], 64);
  EXPECT_EQ(by_kind["model"]["name"], "llama3.1-70b");
  for (const nlohmann::json* other : {&by_cluster, &by_node_kind, &by_file}) {
    EXPECT_EQ((*other)["world_size"], 64);
    EXPECT_EQ((*other)["memory"]["peak_reserved_bytes"], by_kind["memory"]["peak_reserved_bytes"]);
    EXPECT_EQ((*other)["time"]["step_seconds"], by_kind["time"]["step_seconds"]);
  }
  // Fewer GPUs than a node holds: one node of that many.
  EXPECT_EQ(run_json("estimate --model gpt2 --gpus 4xA100")["world_size"], 4);
  // A GPU of the catalog by the one name it starts: MI300X is MI300X-192GB, in mi300x-8gpu.
  const nlohmann::json mi300x = run_json("estimate --model gpt2 --gpus 8xMI300X");
  EXPECT_EQ(mi300x["memory"]["gpu_memory_bytes"].get<double>(), 192.0 * 1024 * 1024 * 1024);
}

TEST(OneLineEstimate, HuggingFaceConfigsWork) {
  const nlohmann::json hf = run_json("estimate --model hf:" + kRoot + "/models/hf/llama3.1-8b.json --gpus 8xH100");
  const nlohmann::json catalog = run_json("estimate --model llama3.1-8b --gpus 8xH100");
  EXPECT_EQ(hf["model"]["parameters"], catalog["model"]["parameters"]);
}

// A model's folder stands for its config.json, as from_pretrained takes it; what the import
// leaves out (Gemma-3's vision tower) is said beside the estimate and the import, not only in the
// model's "source" (the session-35 audit: gemma-3-12b's 0.42B of SigLIP went unmentioned).
TEST(OneLineEstimate, AModelFolderIsItsConfigAndWhatTheImportLeavesOutIsSaid) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fsdpsim-hf-folder" / "gemma-3-27b-it";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kRoot + "/models/hf/gemma3-27b.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const nlohmann::json by_folder = run_json("estimate --model hf:" + dir.string() + " --gpus 8xH100");
  const nlohmann::json by_file = run_json("estimate --model hf:" + kRoot + "/models/hf/gemma3-27b.json --gpus 8xH100");
  EXPECT_EQ(by_folder["model"]["parameters"], by_file["model"]["parameters"]);
  EXPECT_EQ(by_folder["time"]["step_seconds"], by_file["time"]["step_seconds"]);
  bool said = false;
  for (const nlohmann::json& w : by_folder["warnings"])
    said = said || w.get<std::string>().find("leaves out the vision tower (SigLIP)") != std::string::npos;
  EXPECT_TRUE(said) << by_folder["warnings"].dump();
  // A model without anything left out has no such warning.
  for (const nlohmann::json& w : run_json("estimate --model llama3.1-8b --gpus 8xH100")["warnings"])
    EXPECT_EQ(w.get<std::string>().find("leaves out"), std::string::npos) << w;
  const CommandResult imported = run_cli("import-hf " + dir.string());
  EXPECT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.err.find("imported gemma-3-27b-it:"), std::string::npos) << imported.err;
  EXPECT_NE(imported.err.find("not modelled: the vision tower (SigLIP)"), std::string::npos) << imported.err;
  // A folder without a config.json says what it looked for.
  std::filesystem::remove(dir / "config.json");
  const CommandResult empty = run_cli("estimate --model hf:" + dir.string() + " --gpus 8xH100");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("no config.json in the folder"), std::string::npos) << empty.err;
  std::filesystem::remove_all(dir.parent_path());
}

TEST(OneLineEstimate, UnknownNamesListTheCloseOnes) {
  CommandResult r = run_cli("estimate --model llama-70b --gpus 64xH100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model: no model \"llama-70b\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama3.1-70b"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama2-70b"), std::string::npos) << r.err;

  r = run_cli("estimate --model gpt2 --gpus 8xH10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gpus: no GPU or cluster \"H10\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dgx-h100"), std::string::npos) << r.err;

  r = run_cli("estimate --model gpt2 --cluster dgx-h10 --gpus 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cluster: no cluster \"dgx-h10\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dgx-h100"), std::string::npos) << r.err;

  r = run_cli("estimate --model gpt2 --gpus 60xH100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("60 GPUs do not fill whole nodes of 8"), std::string::npos) << r.err;

  r = run_cli("estimate --model gpt2 --gpus 8xH100 --scenario " + kRoot + "/scenarios/llama3.1-8b-8xh100.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;

  r = run_cli("estimate --model gpt2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gpus"), std::string::npos) << r.err;

  // A bad strategy is the loader's error, naming the field.
  r = run_cli("estimate --model gpt2 --gpus 8xH100 --strategy FULLSHARD");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fsdp.strategy"), std::string::npos) << r.err;
}

// The catalogs as listed are the files: each model's parameter count is the one estimate
// reports for it, each cluster's shape is its file's.
TEST(Catalogs, ModelsAndClustersListTheShippedFiles) {
  const nlohmann::json models = run_json("models");
  ASSERT_TRUE(models.contains("models"));
  bool found = false;
  for (const auto& m : models["models"]) {
    EXPECT_FALSE(m.contains("error")) << m.dump();
    if (m["name"] == "gpt2") {
      found = true;
      EXPECT_EQ(m["parameters"], run_json("estimate --model gpt2 --gpus 8xH100")["model"]["parameters"]);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GE(models["models"].size(), 20u);

  const nlohmann::json clusters = run_json("clusters");
  ASSERT_TRUE(clusters.contains("clusters"));
  int checked = 0;
  for (const auto& c : clusters["clusters"]) {
    EXPECT_FALSE(c.contains("error")) << c.dump();
    const nlohmann::json file = load_json_file(kRoot + "/" + c["file"].get<std::string>());
    EXPECT_EQ(c["gpus_per_node"], file.value("gpus_per_node", 8)) << c["name"];
    EXPECT_EQ(c["nodes"], file.value("nodes", 1)) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 20);
  const CommandResult text = run_cli("clusters");
  EXPECT_NE(text.out.find("dgx-h100"), std::string::npos);
}

}  // namespace
}  // namespace fsdpsim::testing
