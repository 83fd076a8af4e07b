#!/usr/bin/env python3
"""Forward and backward time of one transformer block on one GPU, against fsdpsim's cost model.

    python3 tools/hardware/block_timing.py --out DIR [--time-budget S]     # on a GPU (run_all.sh)
    python3 tools/hardware/block_timing.py --dry-run [--fsdpsim build/tools/fsdpsim]

Writes DIR/blocks.csv, one row per (model, seq_len). --dry-run prints the cases and the fsdpsim
command of each without importing torch; with --fsdpsim it runs them and prints fsdpsim's
predicted forward and backward seconds of the same block.

Choices, and why:
- The block is layer 0 of the real Hugging Face class (AutoModelForCausalLM.from_config on the
  meta device with num_hidden_layers 1, only the decoder layer and the rotary embedding made on
  the GPU), with the shapes of models/hf/llama3.2-1b.json (hidden 2048), llama3.1-8b.json (4096)
  and llama3.1-70b.json (8192): the configs fsdpsim imports.
- bf16 weights and activations (what FSDP's param_dtype bf16 computes in), micro_batch 1,
  seq_len 1024 / 4096 / 8192; SDPA restricted to the flash kernel (FlashAttention-2; fsdpsim
  training.attention flash2), causal, no mask, GQA in the kernel; eager (fsdpsim
  training.torch_compile false).
- Forward: layer(x, position_embeddings=(cos, sin)); backward: out.backward(dy) with x requiring
  grad (the input gradient is computed, as inside a model), parameter gradients set to None
  before each repetition (FSDP makes them anew each step).
- Timing: CUDA events around the forward and the backward on the current stream, 3 warm-up
  repetitions, then --reps (default 10); median, min and max. Events time the GPU stream, so
  launch gaps (the CPU-bound regime of small blocks) are included, as in a real step.
- fsdpsim's prediction of the same block: `estimate --trace` on the full model with one GPU
  (cluster.gpus_per_node 1, no collectives), the `nominal_us` of its ops "fwd model.layers.0" and
  "bwd model.layers.0" (the cost model's duration of the op, before any interference). The row
  carries the overrides; tests/hardware/ prints predicted against measured.
"""

import argparse
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwcommon as hw  # noqa: E402

MODELS = [
    ("llama3.2-1b", "models/hf/llama3.2-1b.json"),
    ("llama3.1-8b", "models/hf/llama3.1-8b.json"),
    ("llama3.1-70b", "models/hf/llama3.1-70b.json"),
]
SEQ_LENS = [1024, 4096, 8192]
MICRO_BATCH = 1
FORWARD_OP = "fwd model.layers.0"
BACKWARD_OP = "bwd model.layers.0"

COLUMNS = [
    "case_id", "status", "error",
    "model", "hf_config", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads",
    "micro_batch", "seq_len", "dtype", "attention", "warmup", "reps",
    "forward_median_seconds", "forward_min_seconds", "forward_max_seconds",
    "backward_median_seconds", "backward_min_seconds", "backward_max_seconds",
    "fsdpsim_scenario", "fsdpsim_overrides", "fsdpsim_forward_op", "fsdpsim_backward_op",
] + hw.PROVENANCE_COLUMNS


class Case:
    def __init__(self, model, hf_config, seq_len):
        self.model, self.hf_config, self.seq_len = model, hf_config, seq_len
        self.micro_batch = MICRO_BATCH
        self.id = "%s-block-s%d" % (model, seq_len)

    def overrides(self, cluster_file, attention="flash2"):
        return [
            "model=hf:" + self.hf_config, "cluster=" + cluster_file,
            "cluster.nodes=1", "cluster.gpus_per_node=1",
            "training.micro_batch=%d" % self.micro_batch, "training.seq_len=%d" % self.seq_len,
            "training.global_batch=%d" % self.micro_batch,
            "training.param_dtype=bf16", "training.activation_checkpointing=none",
            "training.attention=%s" % attention, "training.torch_compile=false", "training.loss=fp32_upcast",
        ]


def all_cases():
    return [Case(m, cfg, s) for s in SEQ_LENS for m, cfg in MODELS]


def describe(case, cluster_file, attention="flash2"):
    cfg = hw.load_hf_config_dict(case.hf_config)
    return {
        "case_id": case.id, "model": case.model, "hf_config": case.hf_config,
        "hidden_size": cfg.get("hidden_size"), "intermediate_size": cfg.get("intermediate_size"),
        "num_heads": cfg.get("num_attention_heads"), "num_kv_heads": cfg.get("num_key_value_heads"),
        "micro_batch": case.micro_batch, "seq_len": case.seq_len, "dtype": "bf16", "attention": attention,
        "fsdpsim_scenario": hw.BASE_SCENARIO, "fsdpsim_overrides": ";".join(case.overrides(cluster_file, attention)),
        "fsdpsim_forward_op": FORWARD_OP, "fsdpsim_backward_op": BACKWARD_OP,
    }


def predicted_seconds(fsdpsim, case, cluster):
    """fsdpsim's time of the block's forward and backward ops run alone (seconds): hw.block_seconds."""
    found = hw.block_seconds(fsdpsim, hw.BASE_SCENARIO, case.overrides(cluster), (FORWARD_OP, BACKWARD_OP))
    return found.get(FORWARD_OP), found.get(BACKWARD_OP)


def dry_run(args):
    cluster = hw.cluster_file_for(args.gpu_name)
    failures = 0
    for c in all_cases():
        print(c.id)
        print("   " + hw.estimate_command(c.overrides(cluster), args.fsdpsim or "fsdpsim", "--trace TRACE.json"))
        if args.fsdpsim:
            try:
                fwd, bwd = predicted_seconds(args.fsdpsim, c, cluster)
                print("   predicted: forward %.6f s, backward %.6f s" % (fwd, bwd))
            except Exception as e:  # noqa: BLE001
                failures += 1
                print("   REFUSED: %s" % e)
    return 1 if failures else 0


def stats(values):
    return statistics.median(values), min(values), max(values)


def time_block(torch, transformers, T_sdpa, case, warmup, reps):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fsdp_memory import make_config

    class _T:
        pass
    shim = _T()
    shim.transformers = transformers
    d = hw.load_hf_config_dict(case.hf_config)
    d["num_hidden_layers"] = 1
    config = make_config(shim, d)
    with torch.device("meta"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
        except TypeError:
            config._attn_implementation = "sdpa"
            model = transformers.AutoModelForCausalLM.from_config(config)
    layer = model.model.layers[0].to_empty(device="cuda").to(torch.bfloat16)
    rotary = model.model.rotary_emb
    try:
        fresh_rotary = type(rotary)(config=config, device=torch.device("cuda"))
    except TypeError:  # a positional signature
        fresh_rotary = type(rotary)(config, device=torch.device("cuda"))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.02)
    layer.train()
    del model
    h = config.hidden_size
    x = torch.randn(case.micro_batch, case.seq_len, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    position_ids = torch.arange(case.seq_len, device="cuda").unsqueeze(0).expand(case.micro_batch, -1)
    with torch.no_grad():
        cos, sin = fresh_rotary(x, position_ids)
    dy = torch.randn_like(x)
    fwd, bwd = [], []
    with T_sdpa[0]([T_sdpa[1].FLASH_ATTENTION]):
        for i in range(warmup + reps):
            layer.zero_grad(set_to_none=True)
            x.grad = None
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            out = layer(x, attention_mask=None, position_ids=position_ids, position_embeddings=(cos, sin))
            out = out[0] if isinstance(out, tuple) else out
            e1.record()
            out.backward(dy)
            e2.record()
            torch.cuda.synchronize()
            if i >= warmup:
                fwd.append(e0.elapsed_time(e1) * 1e-3)
                bwd.append(e1.elapsed_time(e2) * 1e-3)
            del out
    del layer, x, dy, cos, sin
    return fwd, bwd


def measure(args):
    t_start = time.time()
    import torch
    import transformers
    from torch.nn.attention import sdpa_kernel, SDPBackend
    if not torch.cuda.is_available():
        hw.log("error: no CUDA device visible to torch")
        return 2
    prov = hw.provenance(torch)
    cluster = hw.cluster_file_for(prov["gpu_name"])
    os.makedirs(args.out, exist_ok=True)
    writer = hw.CsvWriter(os.path.join(args.out, "blocks.csv"), COLUMNS)
    cases = [c for c in all_cases() if not args.only or any(s in c.id for s in args.only)]
    longest = 0.0
    for i, case in enumerate(cases):
        row = describe(case, cluster)
        row.update(prov)
        row["warmup"], row["reps"] = args.warmup, args.reps
        elapsed = time.time() - t_start
        if args.time_budget and elapsed + 1.5 * max(longest, 3.0) > args.time_budget:
            row["status"], row["error"] = "skipped", "time budget reached before this case"
            writer.write(row)
            continue
        t0 = time.time()
        try:
            fwd, bwd = time_block(torch, transformers, (sdpa_kernel, SDPBackend), case, args.warmup, args.reps)
            row["forward_median_seconds"], row["forward_min_seconds"], row["forward_max_seconds"] = stats(fwd)
            row["backward_median_seconds"], row["backward_min_seconds"], row["backward_max_seconds"] = stats(bwd)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            row["status"], row["error"] = "error", ("%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))[:300]
        torch.cuda.empty_cache()
        writer.write(row)
        longest = max(longest, time.time() - t0)
        hw.log("%-28s %-6s forward %s s, backward %s s (%.1f s)" % (
            case.id, row["status"], row.get("forward_median_seconds", "-"), row.get("backward_median_seconds", "-"),
            time.time() - t0))
    writer.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="output folder (default $OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print the cases and their fsdpsim commands; no torch")
    ap.add_argument("--fsdpsim", help="with --dry-run: an fsdpsim binary to predict the blocks with")
    ap.add_argument("--gpu-name", default="NVIDIA H100 80GB HBM3", help="with --dry-run: the GPU assumed")
    ap.add_argument("--only", action="append", help="time only the cases whose id contains this (repeatable)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds; cases that would not fit are skipped")
    ap.add_argument("--columns", action="store_true", help="print the header of blocks.csv and exit (no torch)")
    args = ap.parse_args()
    if args.columns:
        print(",".join(COLUMNS))
        return 0
    if args.dry_run:
        return dry_run(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
