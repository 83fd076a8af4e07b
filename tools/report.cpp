#include "tools/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "planner/device_memory.h"
#include "sim/simgrid_platform.h"
#include "sim/timing_report.h"
#include "sim/unit_report.h"
#include "tools/format.h"
#include "tools/report_job.h"

namespace fsdpsim::tools {

using planner::MemCategory;

namespace {

std::string wrap_text(const planner::WrapSpec& w) {
  switch (w.policy) {
    case planner::WrapPolicy::block: return "per block";
    case planner::WrapPolicy::every_k_blocks: return "every " + std::to_string(w.every) + " blocks";
    case planner::WrapPolicy::size: return "size >= " + std::to_string(w.min_num_params) + " params";
    case planner::WrapPolicy::modules: return std::to_string(w.modules.size()) + " listed modules";
    case planner::WrapPolicy::root: return "root only";
    case planner::WrapPolicy::torchtitan: return "torchtitan's (per block, the embeddings apart, the output layer kept unsharded)";
  }
  return "";
}

std::string checkpointing_text(const planner::TrainingSpec& t) {
  switch (t.checkpointing) {
    case planner::Checkpointing::none: return "none";
    case planner::Checkpointing::full: return "full";
    case planner::Checkpointing::every_k: return "every " + std::to_string(t.checkpoint_every) + " blocks";
    case planner::Checkpointing::selective: return "selective (op-level SAC)";
  }
  return "";
}

std::string phase_of(const planner::Op& op) { return planner::to_string(op.phase); }

// The device overhead's parts (planner/device_memory.h) for --json.
nlohmann::json device_overhead_json(const planner::DeviceOverhead& o) {
  nlohmann::json parts = nlohmann::json::array();
  for (const planner::DeviceOverheadPart& p : o.parts)
    parts.push_back({{"name", p.name}, {"bytes", p.bytes}, {"detail", p.detail}});
  return {{"measured", o.measured}, {"total_bytes", o.total_bytes}, {"parts", parts}, {"not_counted", o.not_counted}};
}

}  // namespace

std::string scenario_summary(const planner::Scenario& sc, const planner::Plan& plan) {
  const auto& t = sc.training;
  const auto& f = sc.fsdp;
  std::ostringstream out;
  out << sc.model->name << " (" << std::fixed;
  out.precision(2);
  out << sc.model->parameter_count() / 1e9 << "B params) on " << sc.world_size() << " x " << sc.cluster.gpu.name << " ("
      << sc.cluster.nodes << " node" << (sc.cluster.nodes > 1 ? "s" : "") << " x " << sc.cluster.gpus_per_node << ")\n";
  // DeepSpeed's layout (training.master_weights optimizer_state) runs ZeRO, not FSDP: named as such,
  // without FSDP's reshard_after_forward (ZeRO-3 always releases after use).
  if (const int stage = planner::deepspeed_zero_stage(sc); stage > 0)
    out << "DeepSpeed ZeRO-" << stage << ", partition group " << f.shard_group_size << ", units "
        << wrap_text(f.wrap) << " (" << planner::units_with_parameters(plan.units) << " units)" << "\n";
  else
    out << "FSDP" << f.version << " " << planner::strategy_name(f.strategy) << ", shard group " << f.shard_group_size
        << ", wrap " << wrap_text(f.wrap) << " (" << planner::units_with_parameters(plan.units) << " units)"
        << ", reshard_after_forward " << (f.reshard_after_forward == 0 ? "false" : f.reshard_after_forward == f.shard_group_size ? "true" : std::to_string(f.reshard_after_forward))
        << (f.cpu_offload ? ", CPU offload" : "") << "\n";
  out << "micro-batch " << t.micro_batch << " x seq " << t.seq_len << ", grad accum " << t.grad_accum << ", global batch "
      << t.global_batch << "; " << models::dtype_name(t.param_dtype) << " params"
      << (t.autocast() ? " (" + models::dtype_name(t.matmul_dtype) + " autocast)" : std::string()) << " / "
      << models::dtype_name(t.reduce_dtype)
      << " reduce / " << models::dtype_name(t.master_dtype) << " master; activation checkpointing " << checkpointing_text(t)
      << "\n";
  return out.str();
}

namespace {

// [Spine not priced] `estimate` prices the NICs and the links inside a node, not a fabric's
// spine. A ring sends one node's traffic out of a leaf, so an oversubscribed spine slows it only
// where a leaf holds fewer nodes than the oversubscription; all-to-alls across leaves load it
// whatever the leaf. Said where the job crosses leaves of an oversubscribed fabric (the
// session-34 audit: a 4:1 tree read the same as a non-blocking one, without a word).
std::string spine_warning(const planner::Scenario& sc, const planner::Schedule& schedule) {
  const planner::ClusterSpec& c = sc.cluster;
  if (!(c.oversubscription > 1) || c.nodes <= 1) return "";
  int leaf = sim::default_nodes_per_leaf(c);
  if (sc.simulation.is_object() && sc.simulation.contains("fabric") && sc.simulation["fabric"].is_object() &&
      sc.simulation["fabric"].contains("nodes_per_leaf") && sc.simulation["fabric"]["nodes_per_leaf"].is_number_integer())
    leaf = std::max(1, sc.simulation["fabric"]["nodes_per_leaf"].get<int>());
  if (c.nodes <= leaf) return "";
  const bool all_to_all = std::any_of(schedule.ops.begin(), schedule.ops.end(), [&](const planner::Op& op) {
    return op.kind == planner::OpKind::all_to_all && op.group >= 0 && schedule.groups[op.group].nodes > 1;
  });
  const bool rings_slowed = leaf < c.oversubscription;
  if (!rings_slowed && !all_to_all) return "";
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%g:1", c.oversubscription);
  return std::string("the fabric's spine (") + ratio + " oversubscribed, " + std::to_string(leaf) +
         (leaf == 1 ? " node" : " nodes") + " a leaf) is not priced here: " +
         (rings_slowed ? "with fewer nodes a leaf than the oversubscription, the rings across leaves are slower"
                       : "the all-to-alls across leaves load it") +
         " than this step says; `fsdpsim simulate` builds the fabric and prices it";
}

// [CPU lead] (docs/memory-model.md) DeepSpeed ZeRO-3 frees each gathered parameter with
// recordStream on the compute stream, and nothing makes its CPU wait for that compute (its
// throttle waits on the all-gather stream), so the reserved-memory replay keeps those blocks
// pending as if the CPU ran a whole pass ahead of the GPU. Said where that pool is a tenth of the
// GPU or more (the session-35 audit: Llama-3.1-8B on 8 H100s read 78 GiB reserved, "near
// capacity", for 32 GiB allocated).
std::string cpu_lead_warning(const sim::Estimate& e, const planner::Scenario& sc) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (!sc.deepspeed.stated || planner::deepspeed_zero_stage(sc) != 3) return "";
  const double pending = static_cast<double>(
      e.memory.reserved_by_stream_at_end[static_cast<int>(planner::Stream::all_gather)]);
  if (pending < 0.1 * e.gpu_memory_bytes) return "";
  char line[512];
  std::snprintf(line, sizeof line,
                "DeepSpeed ZeRO-3 frees each gathered parameter with recordStream on the compute stream and never makes "
                "the CPU wait for that compute, so the reserved-memory model keeps them pending (%.1f GiB of the "
                "all-gather stream's pool at the step's end): the reserved peak (%.1f GiB) assumes the CPU runs a whole "
                "pass ahead of the GPU and is an upper bound; the allocated peak (%.1f GiB) is not",
                pending / kGiB, static_cast<double>(e.memory.peak_reserved_bytes) / kGiB,
                static_cast<double>(e.memory.peak_allocated_bytes) / kGiB);
  return line;
}

}  // namespace

std::vector<std::string> estimate_warnings(const sim::Estimate& e, const planner::Scenario& sc) {
  std::vector<std::string> warnings = planner::tied_weight_warnings(e.plan.units);
  // What the model leaves out is in none of the figures (its parameters, memory and compute).
  for (const std::string& left_out : sc.model->not_modelled)
    warnings.push_back("the model " + sc.model->name + " leaves out " + left_out +
                       "; its parameters, memory and compute are in none of these figures");
  if (sc.fsdp.requested_strategy)
    warnings.push_back("FSDP1 runs NO_SHARD on a world of one rank, whatever the strategy (PyTorch's "
                       "_init_core_state switches " + planner::strategy_name(*sc.fsdp.requested_strategy) +
                       " to NO_SHARD): planned as NO_SHARD");
  if (std::string padding = planner::padding_warning(e.plan.units, e.plan.shards, sc.fsdp.shard_group_size,
                                                      sc.fsdp.expert_parallel, planner::shard_rule_of(sc));
      !padding.empty())
    warnings.push_back(std::move(padding));
  if (std::string context = planner::context_length_warning(sc); !context.empty())
    warnings.push_back(std::move(context));
  if (std::string nvme = planner::nvme_untimed_warning(e.cluster, e.plan.schedule); !nvme.empty())
    warnings.push_back(std::move(nvme));
  if (std::string nic = planner::shared_nic_warning(e.cluster, e.plan.schedule); !nic.empty())
    warnings.push_back(std::move(nic));
  if (std::string spine = spine_warning(sc, e.plan.schedule); !spine.empty()) warnings.push_back(std::move(spine));
  if (std::string near = planner::near_capacity_warning(e.gpu_memory_bytes, e.device_peak_bytes(),
                                                        static_cast<double>(e.memory.peak_reserved_bytes),
                                                        e.memory.allocator_retries);
      !near.empty())
    warnings.push_back(std::move(near));
  if (std::string lead = cpu_lead_warning(e, sc); !lead.empty()) warnings.push_back(std::move(lead));
  if (sc.training.float8_linears()) {
    if (e.mfu_peak_dtype != "fp8")  // the cost model found no linear to convert (CostModel, mfu_peak_dtype_of)
      warnings.push_back("training.matmul_dtype fp8: no linear of " + sc.model->name +
                         " converts (torchao converts nn.Linear layers whose dimensions are multiples of 16, the "
                         "output layer excepted): every GEMM runs in 16-bit, and MFU divides by the bf16 peak");
    else if (sc.training.execution == planner::TrainingSpec::Execution::eager)
      warnings.push_back("training.matmul_dtype fp8 without torch.compile: torchao's scaling kernels (amax, scale, "
                         "cast) then run unfused, several times the bytes priced here (torch.compile's fused "
                         "kernels, as torchao's roofline counts them; torchao asks for torch.compile \"for "
                         "competitive performance\"); measured eager float8 ran slower than bf16 (pytorch/ao#685, "
                         "pytorch/torchtitan#778): the fp8 gain here is an upper bound");
  }
  if (const auto kernel = planner::parse_attention_kernel(e.attention_kernel)) {
    if (std::string a = planner::borrowed_attention_warning(e.cluster, *kernel, e.plan.schedule); !a.empty())
      warnings.push_back(std::move(a));
    // (gpt-oss: not transformers' sdpa either, below.)
    if (std::string w = planner::sliding_window_kernel_warning(*kernel, e.plan.schedule);
        !w.empty() && sc.model->arch.family != "gpt_oss")
      warnings.push_back(std::move(w));
    // gpt-oss's sinks join each row's softmax; flash_attn_func and SDPA take no such input
    // (transformers marks gpt-oss _supports_sdpa = False and runs it eagerly; torchtitan uses
    // FlexAttention, rescaling by the sinks through the log-sum-exp).
    if (sc.model->arch.family == "gpt_oss" && *kernel != planner::AttentionKernel::eager)
      warnings.push_back("gpt-oss's attention sinks are priced as " + e.attention_kernel +
                         " without them, but FlashAttention-2 and SDPA take none: transformers runs gpt-oss with eager "
                         "attention (give the model as hf:<config.json> with training.attention eager), torchtitan "
                         "with FlexAttention");
  }
  return warnings;
}

std::string estimate_text(const sim::Estimate& e, const planner::Scenario& sc, double headroom_bytes) {
  std::ostringstream out;
  out << scenario_summary(sc, e.plan) << "\n";
  const auto& m = e.memory;
  const auto& ops = e.plan.schedule.ops;
  out << "Memory per GPU (rank 0)\n";
  std::string where = m.peak_op < 0 ? "before the step" : "at op " + std::to_string(m.peak_op) + " \"" + ops[m.peak_op].name + "\" (" + phase_of(ops[m.peak_op]) + ", micro-step " + std::to_string(ops[m.peak_op].micro_step) + ")";
  Table t({"", "size", "note"});
  t.add({"peak allocated", gib(static_cast<double>(m.peak_allocated_bytes)), where});
  // model_state_bytes is the model state's own highest point in the step, which need not be at the
  // allocation peak (gradients are freed before activations peak again): said so in the note.
  t.add({"peak model state", gib(static_cast<double>(m.model_state_bytes)),
         m.peak_host_bytes > 0 ? "on the GPU, at its highest; the host holds " + gib(static_cast<double>(m.peak_host_bytes)) + " per rank"
                               : "params, grads and optimizer state at their highest (the breakdown below is at the allocation peak)"});
  t.add({"peak reserved (est.)", gib(static_cast<double>(m.peak_reserved_bytes)), "caching-allocator model"});
  // Where the segments sit when the step ends, by the stream pool that made them (only when more
  // than one stream holds some: a block cached by one stream cannot serve another's requests).
  int pools = 0;
  for (std::int64_t b : m.reserved_by_stream_at_end) pools += b > 0;
  if (pools > 1)
    for (int st = 0; st < planner::kStreamCount; ++st)
      if (const std::int64_t b = m.reserved_by_stream_at_end[static_cast<std::size_t>(st)]; b > 0)
        t.add({"  " + planner::to_string(static_cast<planner::Stream>(st)) + " stream's pool", gib(static_cast<double>(b)),
               "segments held at the step's end"});
  t.add({"device overhead", gib(e.device_overhead_bytes),
         e.overhead.measured ? "measured (calibration)" : "outside the replay: the parts below"});
  if (!e.overhead.measured)
    for (const planner::DeviceOverheadPart& p : e.overhead.parts) t.add({"  " + p.name, gib(p.bytes), p.detail});
  t.add({"GPU memory", gib(e.gpu_memory_bytes), sc.cluster.gpu.name});
  out << t.str();
  for (const std::string& n : e.overhead.not_counted) out << "not counted in the device overhead: " << n << "\n";
  // Spare and excess after the headroom, as the job line, the sweep and --json's overage_bytes
  // count them (the session-36 audit found the step line counting before it).
  const double margin = e.gpu_memory_bytes - e.device_peak_bytes() - headroom_bytes;
  const std::string headroom = headroom_bytes > 0 ? ", with the " + gib(headroom_bytes) + " GPU headroom asked" : "";
  if (margin >= 0) out << "step fits" << headroom << ": " << gib_or_mib(margin) << " to spare\n";
  else out << "WARNING: the step does not fit" << headroom << ": the peak exceeds GPU memory by " << gib(-margin) << "\n";
  out << job_memory_text(e, sc, headroom_bytes);

  const auto& tm = e.timing;
  out << "\nStep time (analytic engine, calibration: " << e.calibration.name << ")\n";
  Table time({"", "value", "note"});
  time.add({"step", seconds_text(tm.step_seconds), std::to_string(e.plan.schedule.micro_steps) + " micro-step(s)"});
  time.add({"compute", seconds_text(tm.compute_seconds),
            "compute stream busy, incl. " + seconds_text(tm.interference_seconds) + " slowdown beside NCCL (" +
                percent(e.costs.compute_slowdown_under_comm) + " slower while a collective runs)"});
  time.add({"exposed communication", seconds_text(tm.exposed_comm_seconds), "of " + seconds_text(tm.comm_seconds) +
                                                                              " communication in all (collectives and host-device copies)"});
  time.add({"optimizer", seconds_text(tm.optimizer_seconds), ""});
  time.add({"other exposed", seconds_text(tm.exposed_other_seconds), "CPU-bound gaps, exposed on-device copies on side streams and NVMe swaps"});
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", tm.tokens_per_second_per_gpu);
  time.add({"tokens/s per GPU", buf, ""});
  time.add({"MFU", percent(tm.mfu), "6N + attention FLOPs (causal: half the square) / dense " + e.mfu_peak_dtype + " peak"});
  // What bounds the step: the critical path's parts (README; the JSON's time.critical_path).
  const sim::CriticalPathSummary& path = tm.critical_path_summary;
  auto share = [&](double x) { return tm.step_seconds > 0 ? percent(x / tm.step_seconds) : std::string("-"); };
  time.add({"critical path", share(path.compute_seconds) + " compute",
            share(path.communication_seconds) + " communication, " + share(path.other_gpu_seconds) + " other GPU work, " +
                share(path.cpu_issue_seconds) + " CPU issue, " + share(path.host_seconds) + " host"});
  out << time.str();
  // The one constant fitted to end-to-end runs (docs/accuracy.md): say so where the time is read.
  std::snprintf(buf, sizeof buf, "%.2f", e.calibration.memory_bound_efficiency);
  out << "compute: GEMMs by shape, attention by kernel (" << e.attention_kernel
      << "), memory-bound kernels at memory_bound_efficiency " << buf
      << " of HBM bandwidth, the one constant fitted to published runs (all GPUs; docs/accuracy.md)\n";
  if (sc.model->liger)
    out << "blocks: Liger-Kernel's RMSNorm, rotary and gated activation (training.liger; docs/memory-model.md)\n";
  if (!e.calibration.gemm_table.empty())
    out << "GEMMs: " << e.gemm_shapes_from_table << " of " << e.gemm_shapes
        << " distinct shapes from the calibration's measured gemm_table, the rest from the shape model\n";

  out << "\nTimeline (allocated, rank 0)\n";
  Table tl({"phase", "highest", "at op"});
  struct Phase { std::string name; std::int64_t bytes = -1; int op = -1; };
  std::vector<Phase> phases = {{"start of step (persistent state)"}, {"forward"}, {"backward"}, {"optimizer step"}};
  phases[0].bytes = m.allocated_at_start;
  for (const auto& op : ops) {
    const int p = 1 + static_cast<int>(op.phase);
    if (m.allocated_at_op[op.id] > phases[p].bytes) phases[p] = {phases[p].name, m.allocated_at_op[op.id], op.id};
  }
  for (const Phase& p : phases)
    if (p.bytes >= 0) tl.add({p.name, gib(static_cast<double>(p.bytes)), p.op < 0 ? "" : ops[p.op].name});
  out << tl.str();

  out << "\nBreakdown at the peak\n";
  Table b({"category", "size", "share"});
  for (int c = 0; c < planner::kMemCategoryCount; ++c) {
    const double bytes = static_cast<double>(m.breakdown_at_peak[c]);
    if (bytes <= 0) continue;
    b.add({planner::to_string(static_cast<MemCategory>(c)), gib(bytes), percent(bytes / static_cast<double>(m.peak_allocated_bytes))});
  }
  out << b.str();
  return out.str();
}

nlohmann::json estimate_json(const sim::Estimate& e, const planner::Scenario& sc, double headroom_bytes) {
  const auto& m = e.memory;
  nlohmann::json j;
  j["scenario"] = sc.file;
  j["model"] = {{"name", sc.model->name}, {"parameters", sc.model->parameter_count()}};
  j["world_size"] = sc.world_size();
  j["unit_count"] = planner::units_with_parameters(e.plan.units);
  j["warnings"] = estimate_warnings(e, sc);
  j["units"] = sim::unit_report_json(sim::unit_report(e));  // per unit (sim/unit_report.h)
  nlohmann::json breakdown = nlohmann::json::object();
  for (int c = 0; c < planner::kMemCategoryCount; ++c)
    breakdown[planner::to_string(static_cast<MemCategory>(c))] = m.breakdown_at_peak[c];
  nlohmann::json peak_op = nullptr;
  if (m.peak_op >= 0) {
    const auto& op = e.plan.schedule.ops[m.peak_op];
    peak_op = {{"id", op.id}, {"name", op.name}, {"kind", planner::to_string(op.kind)}, {"micro_step", op.micro_step}};
  }
  nlohmann::json reserved_by_stream = nlohmann::json::object();
  for (int st = 0; st < planner::kStreamCount; ++st)
    if (m.reserved_by_stream_at_end[static_cast<std::size_t>(st)] > 0)
      reserved_by_stream[planner::to_string(static_cast<planner::Stream>(st))] = m.reserved_by_stream_at_end[static_cast<std::size_t>(st)];
  j.update(sim::timing_json(e.timing));
  // [GEMMs beside NCCL] what the engine slowed compute by while a collective ran (the GEMMs' and
  // the other kernels' slowdowns weighed by the GEMMs' share of the module compute).
  j["time"]["compute_slowdown_under_comm"] = e.costs.compute_slowdown_under_comm;
  j["calibration"] = e.calibration.name;
  j["attention_kernel"] = e.attention_kernel;
  j["liger"] = sc.model->liger;  // the blocks costed as Liger-Kernel's (training.liger)
  j["gemm_shapes"] = {{"distinct", e.gemm_shapes}, {"from_table", e.gemm_shapes_from_table}};
  j["memory"] = {{"peak_allocated_bytes", m.peak_allocated_bytes},
                 {"peak_reserved_bytes", m.peak_reserved_bytes},
                 {"reserved_by_stream_at_end", reserved_by_stream},
                 {"breakdown_at_peak", breakdown},
                 {"model_state_bytes", m.model_state_bytes},
                 {"peak_op", peak_op},
                 {"device_overhead_bytes", e.device_overhead_bytes},
                 {"device_overhead", device_overhead_json(e.overhead)},
                 {"gpu_memory_bytes", e.gpu_memory_bytes},
                 {"headroom_bytes", headroom_bytes},
                 {"fits", e.device_peak_bytes() + headroom_bytes <= e.gpu_memory_bytes},
                 {"overage_bytes", std::max(0.0, e.device_peak_bytes() + headroom_bytes - e.gpu_memory_bytes)},
                 {"allocator_retries", m.allocator_retries},
                 {"allocated_at_start_bytes", m.allocated_at_start},
                 {"timeline_allocated_bytes", m.allocated_at_op}};
  j["job"] = job_memory_json(e, sc, headroom_bytes);
  return j;
}

std::string training_run_text(const sim::TrainingRun& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "\nTraining run (--train-tokens)\n%.4g tokens: %.0f optimizer steps of %.0f tokens (global batch x "
                "sequence), %.1f days (%.1f hours) at %s a step, %.0f GPU-hours on %d GPUs\n"
                "optimizer steps only: checkpoint saves, evaluation, data loading stalls and restarts are not counted\n",
                r.tokens, r.steps, r.tokens_per_step, r.seconds / 86400.0, r.seconds / 3600.0,
                seconds_text(r.step_seconds).c_str(), r.gpu_hours, r.gpus);
  std::string out = line;
  if (r.usd_per_gpu_hour > 0) {
    std::snprintf(line, sizeof line, "cost: $%.0f at $%.2f a GPU-hour ($%.3g per million tokens)\n", r.usd,
                  r.usd_per_gpu_hour, r.usd / r.tokens * 1e6);
    out += line;
  }
  return out;
}

nlohmann::json training_run_json(const sim::TrainingRun& r) {
  nlohmann::json j = {{"tokens", r.tokens},   {"tokens_per_step", r.tokens_per_step}, {"steps", r.steps},
                      {"step_seconds", r.step_seconds}, {"seconds", r.seconds}, {"gpus", r.gpus}, {"gpu_hours", r.gpu_hours}};
  if (r.usd_per_gpu_hour > 0) {
    j["usd_per_gpu_hour"] = r.usd_per_gpu_hour;
    j["usd"] = r.usd;
  }
  return j;
}

std::string deadline_search_text(const sim::DeadlineSearch& s, const planner::Scenario& sc) {
  std::ostringstream out;
  char head[256];
  std::snprintf(head, sizeof head, "\nFewest nodes that train %.4g tokens within %.4g days (%d GPUs a node, micro-batch %lld kept; ",
                s.tokens, s.deadline_seconds / 86400.0, sc.cluster.gpus_per_node,
                static_cast<long long>(sc.training.micro_batch));
  out << head;
  if (s.batch_stated)
    out << "the stated global batch of " << sc.training.global_batch
        << " sequences kept, gradient accumulation follows the nodes";
  else
    out << "grad accum " << sc.training.grad_accum
        << " kept, the global batch follows the GPUs: state training.global_batch to keep it";
  if (s.headroom_bytes > 0) out << "; fits: device peak + " << gib(s.headroom_bytes) << " headroom <= GPU memory";
  out << "; doubling, then bisection)\n";
  const bool priced = !s.tried.empty() && s.tried.front().run.usd_per_gpu_hour > 0;
  std::vector<std::string> columns{"nodes", "GPUs", "global batch", "grad accum", "device peak", "fits", "step", "days",
                                   "GPU-hours"};
  if (priced) columns.push_back("cost");
  columns.push_back("tried");
  Table t(columns);
  char cell[64];
  for (const sim::DeadlineSearch::Trial& trial : s.tried) {
    std::vector<std::string> row{std::to_string(trial.nodes), std::to_string(trial.gpus),
                                 std::to_string(trial.global_batch), std::to_string(trial.grad_accum),
                                 gib(trial.device_peak_bytes), trial.fits ? "yes" : "no",
                                 seconds_text(trial.run.step_seconds)};
    std::snprintf(cell, sizeof cell, "%.1f", trial.run.seconds / 86400.0);
    row.push_back(cell);
    std::snprintf(cell, sizeof cell, "%.0f", trial.run.gpu_hours);
    row.push_back(cell);
    if (priced) {
      std::snprintf(cell, sizeof cell, "$%.0f", trial.run.usd);
      row.push_back(cell);
    }
    row.push_back("#" + std::to_string(trial.order + 1));
    t.add(row);
  }
  out << t.str();
  char line[512];
  if (const sim::DeadlineSearch::Trial* a = s.answer()) {
    std::snprintf(line, sizeof line, "fewest nodes: %lld (%d GPUs): %.1f days, %.0f GPU-hours", static_cast<long long>(a->nodes),
                  a->gpus, a->run.seconds / 86400.0, a->run.gpu_hours);
    out << line;
    if (priced) {
      std::snprintf(line, sizeof line, ", $%.0f", a->run.usd);
      out << line;
    }
    out << "\n";
  } else {
    if (s.stopped.empty())
      std::snprintf(line, sizeof line, "no node count up to %lld trains it within %.4g days (%s)",
                    static_cast<long long>(s.max_nodes), s.deadline_seconds / 86400.0, s.max_nodes_reason.c_str());
    else
      std::snprintf(line, sizeof line, "no node count tried trains it within %.4g days: %s",
                    s.deadline_seconds / 86400.0, s.stopped.c_str());
    out << line;
    if (const sim::DeadlineSearch::Trial* f = s.fastest()) {
      std::snprintf(line, sizeof line, "; the shortest run tried: %lld node%s, %.1f days",
                    static_cast<long long>(f->nodes), f->nodes == 1 ? "" : "s", f->run.seconds / 86400.0);
      out << line;
    } else {
      out << "; no node count tried fits in GPU memory";
    }
    out << "\n";
  }
  out << "optimizer steps only: checkpoint saves, evaluation, data loading stalls and restarts are not counted; the "
         "search assumes more nodes never make the run longer (each point tried is listed)\n";
  return out.str();
}

nlohmann::json deadline_search_json(const sim::DeadlineSearch& s) {
  nlohmann::json tried = nlohmann::json::array();
  for (const sim::DeadlineSearch::Trial& trial : s.tried) {
    nlohmann::json t = {{"nodes", trial.nodes},
                        {"gpus", trial.gpus},
                        {"global_batch", trial.global_batch},
                        {"grad_accum", trial.grad_accum},
                        {"device_peak_bytes", trial.device_peak_bytes},
                        {"gpu_memory_bytes", trial.gpu_memory_bytes},
                        {"fits", trial.fits},
                        {"meets", trial.meets},
                        {"training_run", training_run_json(trial.run)},
                        {"order", trial.order}};
    tried.push_back(t);
  }
  nlohmann::json j = {{"tokens", s.tokens},
                      {"deadline_seconds", s.deadline_seconds},
                      {"headroom_bytes", s.headroom_bytes},
                      {"global_batch_kept", s.batch_stated},
                      {"max_nodes", s.max_nodes},
                      {"max_nodes_reason", s.max_nodes_reason},
                      {"stopped", s.stopped},
                      {"fewest_nodes", s.fewest_nodes},
                      {"tried", tried}};
  return j;
}

namespace {

// The trials of a largest-that-fits search as a table, with what the search found.
std::string fit_search_text(const sim::FitSearch& s, const std::string& title, const std::string& column,
                            const std::string& found) {
  std::ostringstream out;
  out << title;
  if (s.headroom_bytes > 0) out << "; fits: device peak + " << gib(s.headroom_bytes) << " headroom <= GPU memory";
  out << ")\n";
  Table t({column, "device peak", "spare", "fits", "tried"});
  for (const auto& trial : s.tried)
    t.add({std::to_string(trial.value), gib(trial.device_peak_bytes), gib(s.gpu_memory_bytes - trial.device_peak_bytes),
           trial.fits ? (trial.near_capacity ? "near capacity" : "yes") : "no", "#" + std::to_string(trial.order + 1)});
  out << t.str() << found;
  return out.str();
}

bool largest_is_near_capacity(const sim::FitSearch& s) {
  for (const auto& trial : s.tried)
    if (trial.value == s.largest_fitting) return trial.near_capacity;
  return false;
}

nlohmann::json fit_search_json(const sim::FitSearch& s, const std::string& value_key) {
  nlohmann::json tried = nlohmann::json::array();
  for (const auto& trial : s.tried)
    tried.push_back({{value_key, trial.value}, {"device_peak_bytes", trial.device_peak_bytes},
                     {"fits", trial.fits}, {"near_capacity", trial.near_capacity}, {"order", trial.order}});
  return {{"largest_fitting_" + value_key, s.largest_fitting}, {"gpu_memory_bytes", s.gpu_memory_bytes},
          {"headroom_bytes", s.headroom_bytes}, {"capped", s.capped}, {"tried", tried}};
}

}  // namespace

std::string micro_batch_search_text(const sim::FitSearch& s, const planner::Scenario& sc) {
  std::string found;
  if (s.largest_fitting == 0) found = "not even micro-batch 1 fits in " + gib(s.gpu_memory_bytes - s.headroom_bytes) + "\n";
  else
    found = "largest micro-batch that fits: " + std::to_string(s.largest_fitting) +
            (!s.capped                  ? ""
             : s.global_batch_kept > 0 ? " (each rank's whole share of the global batch)"
                                       : " (the largest searched)") +
            (largest_is_near_capacity(s) ? ", near capacity: within the reserved model's tolerance, a real run may not fit" : "") +
            "\n";
  const std::string kept = s.global_batch_kept > 0
                               ? "global batch " + std::to_string(s.global_batch_kept) +
                                     " kept: the micro-batches that divide it over the ranks, grad accum following"
                               : "grad accum " + std::to_string(sc.training.grad_accum) + " kept";
  return fit_search_text(s, "Largest micro-batch that fits (" + kept + "; doubling, then bisection", "micro-batch", found);
}

nlohmann::json micro_batch_search_json(const sim::FitSearch& s) {
  nlohmann::json j = fit_search_json(s, "micro_batch");
  j["global_batch_kept"] = s.global_batch_kept > 0 ? nlohmann::json(s.global_batch_kept) : nlohmann::json(nullptr);
  return j;
}

std::string seq_len_search_text(const sim::FitSearch& s, const planner::Scenario& sc) {
  std::string found;
  if (s.largest_fitting == 0)
    found = "not even " + std::to_string(sim::kSeqLenSearchStep) + " tokens fit in " +
            gib(s.gpu_memory_bytes - s.headroom_bytes) + "\n";
  else
    found = "longest sequence that fits: " + std::to_string(s.largest_fitting) + " tokens" +
            (s.capped ? " (" + s.cap + ")" : "") + "\n";
  return fit_search_text(s,
                         "Longest sequence that fits (multiples of " + std::to_string(sim::kSeqLenSearchStep) +
                             " tokens; micro-batch " + std::to_string(sc.training.micro_batch) + ", grad accum " +
                             std::to_string(sc.training.grad_accum) + " kept; doubling, then bisection",
                         "tokens", found);
}

nlohmann::json seq_len_search_json(const sim::FitSearch& s) {
  nlohmann::json j = fit_search_json(s, "seq_len");
  if (s.capped) j["cap"] = s.cap;
  return j;
}

}  // namespace fsdpsim::tools
