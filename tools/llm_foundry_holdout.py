#!/usr/bin/env python3
"""MosaicML llm-foundry's published MPT training benchmarks as a held-out judge of fsdpsim.

llm-foundry's scripts/train/benchmarking/README.md publishes measured throughput of MPT models
(125M-70B) trained with Composer's FSDP1 on 8-512 A100 40/80 GB and H100 80 GB GPUs, at sequence
lengths 512-65,536, with and without activation checkpointing: the kind of wide set of public
runs issue 13 judged the model on. None of these rows was used to build or fit anything in
fsdpsim: `validate` only reports them (docs/accuracy.md, "llm-foundry held out").

Three steps:
  --from-readme README.md   parse the README's tables into the CSV (tests/data/validation/
                            llm_foundry_runs.csv), keeping each row's table and line
  --scenarios DIR           write one scenario per CSV row into DIR (and the MPT configs they
                            import into DIR/configs), for `fsdpsim validate DIR/*.json`
  --report DIR              judge fsdpsim (--fsdpsim, default build/tools/fsdpsim) on the scenarios
                            in DIR: mean |error|, bias and rows within 15% in all and by GPU,
                            sequence, GPU count and checkpointing; and per GPU, for the rows of
                            sequence 4,096 or less, the least-squares line of the throughput error
                            on the step's communication over its compute (estimate --json's
                            time.comm_seconds / time.compute_seconds): the figures docs/accuracy.md
                            quotes ("GEMMs beside NCCL on Hopper")

What each scenario states, and why (the benchmark's own scripts at llm-foundry b2a43a1,
scripts/train/benchmarking/{sweep.sh,submit_benchmarks.py} and scripts/train/yamls/pretrain/
mpt-*.yaml):
- the model: MPT with the yaml's d_model, n_heads, n_layers, expansion ratio 4, vocab 50368,
  max_seq_len = the run's sequence (learned position embeddings, no ALiBi, biases on, low
  precision LayerNorm); the README's NumParams column equals this model's count for every row
  (checked when the scenarios are written);
- attention: llm-foundry's Triton flash attention (`attn_impl: triton`, the submit script's
  default, which sweep.sh does not change): llmfoundry/models/layers/flash_attn_triton.py, a copy
  of the flash-attention repository's 2022 Triton kernel (flash_attn_triton.py@eff9fe6, built
  with triton-pre-mlir) -> training.attention "flash1_triton";
- FSDP1 as Composer configures it: block wrap (MPTBlock), limit_all_gathers true, Composer's
  default backward prefetch BACKWARD_POST, no forward prefetch, the row's sharding strategy;
  activation checkpointing of whole blocks when the row says True;
- the loss: llm-foundry's default `loss_fn: fused_crossentropy`, flash-attn's CrossEntropyLoss on
  the 16-bit logits (llmfoundry/models/mpt/modeling_mpt.py) -> training.loss "fused" (fsdpsim's
  fused kind writes the logits' gradient in place; flash-attn's default inplace_backward=False
  allocates it: one 16-bit logits tensor more at the loss's backward than the plan holds);
- mixed precision: bf16 parameters gathered and computed in, fp32 master weights and AdamW state
  (decoupled_adamw). Composer's MP modes as the runs' Composer ran them (composer
  trainer/mosaic_fsdp_utils.py get_mixed_precision): PURE reduces gradients in bf16; DEFAULT has
  gathered bf16 parameters since Composer 0.14 (aaa8dcc, March 2023; before it DEFAULT gathered
  fp32 parameters under autocast) and reduces them in fp32 since 0.16.4 (d745fcb, "patch default",
  2023-10-11; reduce_dtype None, i.e. bf16, before it). The large-scale H100 table (llm-foundry
  5e85bd6, January 2024) ran llm-foundry main, which required Composer >= 0.17.2: its DEFAULT rows
  reduce in fp32. The October 2023 tables (b2a43a1) ran llm-foundry v0.3.0 (Composer >= 0.16.3,
  < 0.17, resolved when each run installed it, in the weeks 0.16.4 was released): which of the two
  their DEFAULT rows ran is not known; they are planned with bf16 reductions, and docs/accuracy.md
  gives the figures with fp32 ones too;
- the FP8 table (Transformer Engine) is left out: fsdpsim's float8 is torchao's.
"""
import argparse
import csv
import glob
import json
import math
import os
import re
import subprocess
import sys

README_SOURCE = ("github.com/mosaicml/llm-foundry/blob/495218376830947dce625efabc4d86be7c47cc45/"
                 "scripts/train/benchmarking/README.md")
# The MPT shapes of scripts/train/yamls/pretrain/mpt-<size>.yaml (llm-foundry b2a43a1).
SHAPES = {"125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
          "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
          "70b": (8192, 64, 80)}
VOCAB = 50368
GPUS = {"h100_80gb": ("H100-SXM-80GB", "scenarios/clusters/dgx-h100.json"),
        "a100_80gb": ("A100-SXM-80GB", "scenarios/clusters/dgx-a100.json"),
        "a100_40gb": ("A100-SXM-40GB", "scenarios/clusters/dgx-a100.json")}
COLUMNS = ["row", "table", "readme_line", "model", "seq_len", "gpus", "gpu", "mfu_pct", "hfu_pct", "micro_batch",
           "grad_accum", "global_batch", "tokens_per_second", "tokens_per_second_per_gpu", "precision",
           "mp_mode", "sharding", "activation_checkpointing", "activation_cpu_offload", "num_params"]


# A scenario's validation row_id: the CSV's row plus this, apart from scenarios/published's ids.
ROW_OFFSET = 9000


def parse_readme(path):
    rows, table = [], None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.startswith("## "):
                table = line[3:].strip()
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 20 or not re.fullmatch(r"\d+[mb]", cells[0]):
                continue
            (model, seq, gpus, gpu, mfu, hfu, _tflop, micro, accum, global_batch, _sps, tps, tps_gpu, _gbt,
             precision, mp, sharding, ac, offload, params) = cells
            rows.append({"row": len(rows) + 1, "table": table, "readme_line": number, "model": model,
                         "seq_len": int(seq), "gpus": int(gpus), "gpu": gpu, "mfu_pct": float(mfu),
                         "hfu_pct": float(hfu), "micro_batch": int(micro), "grad_accum": int(accum),
                         "global_batch": int(global_batch), "tokens_per_second": int(tps),
                         "tokens_per_second_per_gpu": int(tps_gpu), "precision": precision, "mp_mode": mp,
                         "sharding": sharding, "activation_checkpointing": ac == "True",
                         "activation_cpu_offload": offload == "True", "num_params": int(params)})
    return rows


def mpt_params(model, seq):
    """MPT's parameter count: blocks (attention 4d^2 + 4d biases, FFN 8d^2 + 5d biases, two
    LayerNorms with bias), tied embedding, learned positions, the final LayerNorm."""
    d, _, layers = SHAPES[model]
    block = 12 * d * d + 9 * d + 4 * d
    return layers * block + VOCAB * d + seq * d + 2 * d


def mpt_config(model, seq):
    d, heads, layers = SHAPES[model]
    return {"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": d, "n_heads": heads,
            "n_layers": layers, "expansion_ratio": 4, "max_seq_len": seq, "vocab_size": VOCAB,
            "learned_pos_emb": True, "no_bias": False, "norm_type": "low_precision_layernorm",
            "tie_word_embeddings": True,
            "attn_config": {"alibi": False, "attn_impl": "triton", "attn_type": "multihead_attention"}}


LARGE_SCALE_TABLE = "H100 80GB BF16 (Large Scale, >= 128 GPUs)"  # added by llm-foundry 5e85bd6 (2024-01-06)


def reduce_dtype(row):
    """The gradient reduction dtype of the row's Composer MP mode (the docstring says why)."""
    return "fp32" if row["mp_mode"] == "DEFAULT" and row["table"] == LARGE_SCALE_TABLE else "bf16"


def scenario(row, root):
    gpu, cluster_file = GPUS[row["gpu"]]
    with open(os.path.join(root, cluster_file)) as f:
        cluster = json.load(f)
    cluster["gpu"] = gpu
    cluster["nodes"] = max(1, row["gpus"] // cluster["gpus_per_node"])
    name = f"llm-foundry {row['model']} s{row['seq_len']} {row['gpus']}x{row['gpu']}"
    return {
        "name": name,
        "description": (f"MosaicML llm-foundry MPT benchmark, table '{row['table']}', README line "
                        f"{row['readme_line']}: MPT-{row['model']} at seq {row['seq_len']} on {row['gpus']} "
                        f"{row['gpu']}, Composer FSDP1 {row['sharding']}, activation checkpointing "
                        f"{row['activation_checkpointing']}, precision {row['precision']} (MP {row['mp_mode']}). "
                        "Held out: judged, never fitted (tools/llm_foundry_holdout.py says what is assumed)."),
        "model": f"hf:configs/mpt-{row['model']}-s{row['seq_len']}.json",
        "cluster": cluster,
        "training": {"global_batch": row["global_batch"], "micro_batch": row["micro_batch"],
                     "seq_len": row["seq_len"], "param_dtype": "bf16", "reduce_dtype": reduce_dtype(row),
                     "master_dtype": "fp32", "optimizer": "adamw", "optimizer_kernel": "foreach",
                     "activation_checkpointing": "full" if row["activation_checkpointing"] else "none",
                     "torch_compile": False, "attention": "flash1_triton", "loss": "fused"},
        "fsdp": {"version": 1, "strategy": row["sharding"], "wrap": {"policy": "block"},
                 "forward_prefetch": False, "backward_prefetch": "BACKWARD_POST", "limit_all_gathers": True,
                 "cpu_offload": False},
        "published": {"source": f"MosaicML llm-foundry MPT training benchmarks; {README_SOURCE}",
                      "row_id": ROW_OFFSET + row["row"], "tokens_per_second_per_gpu": row["tokens_per_second_per_gpu"],
                      "mfu": row["mfu_pct"] / 100, "holdout": True, "trust": "high",
                      "notes": f"llm-foundry table '{row['table']}', README line {row['readme_line']}"},
    }


def write_scenarios(csv_path, out, root):
    os.makedirs(os.path.join(out, "configs"), exist_ok=True)
    written = skipped = 0
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            for k in ("seq_len", "gpus", "micro_batch", "grad_accum", "global_batch", "tokens_per_second_per_gpu",
                      "num_params", "readme_line", "row"):
                row[k] = int(row[k])
            row["mfu_pct"] = float(row["mfu_pct"])
            row["activation_checkpointing"] = row["activation_checkpointing"] == "True"
            if row["precision"] == "amp_fp8":
                skipped += 1
                continue
            if mpt_params(row["model"], row["seq_len"]) != row["num_params"]:
                sys.exit(f"row {row['row']}: MPT-{row['model']} at seq {row['seq_len']} has "
                         f"{mpt_params(row['model'], row['seq_len'])} parameters, the README says {row['num_params']}")
            config = os.path.join(out, "configs", f"mpt-{row['model']}-s{row['seq_len']}.json")
            with open(config, "w") as f_cfg:
                json.dump(mpt_config(row["model"], row["seq_len"]), f_cfg, indent=1)
            path = os.path.join(out, f"f{row['row']:03d}-mpt-{row['model']}-s{row['seq_len']}-{row['gpus']}x{row['gpu']}.json")
            with open(path, "w") as f_sc:
                json.dump(scenario(row, root), f_sc, indent=1)
            written += 1
    print(f"{written} scenarios written to {out}; {skipped} FP8 rows left out")


def least_squares(xs, ys):
    """(intercept, slope, correlation) of the least-squares line of ys on xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    slope = sxy / sxx
    return my - slope * mx, slope, sxy / math.sqrt(sxx * syy)


def self_test():
    """least_squares on points worked by hand (no fsdpsim): run by the llm-foundry CTest."""
    a, b, r = least_squares([0, 1, 2], [1, 3, 5])  # y = 1 + 2x exactly
    assert abs(a - 1) < 1e-12 and abs(b - 2) < 1e-12 and abs(r - 1) < 1e-12, (a, b, r)
    # (0,0), (1,2), (2,1): mean (1, 1); sxy = 1, sxx = 2, syy = 2: slope 0.5, intercept 0.5, r 0.5
    a, b, r = least_squares([0, 1, 2], [0, 2, 1])
    assert abs(a - 0.5) < 1e-12 and abs(b - 0.5) < 1e-12 and abs(r - 0.5) < 1e-12, (a, b, r)
    print("llm_foundry_holdout.py self-test: ok")


def report(directory, fsdpsim, csv_path):
    """Prints how fsdpsim's predictions of the scenarios in `directory` compare with the runs."""
    runs = {int(r["row"]): r for r in csv.DictReader(open(csv_path))}
    files = sorted(glob.glob(os.path.join(directory, "f*.json")))
    validated = json.loads(subprocess.run([fsdpsim, "validate", *files, "--json"], check=True,
                                          capture_output=True, text=True).stdout)
    rows = []
    for v in validated["rows"]:
        e = v["metrics"]["tokens_per_second_per_gpu"]["signed_error"]
        t = json.loads(subprocess.run([fsdpsim, "estimate", "--scenario", v["file"], "--json"], check=True,
                                      capture_output=True, text=True).stdout)["time"]
        rows.append((e, runs[v["row_id"] - ROW_OFFSET], t["comm_seconds"] / t["compute_seconds"]))

    def summary(errors):
        return "%3d rows  mean |error| %5.1f%%  bias %+6.1f%%  within 15%% %3d" % (
            len(errors), 100 * sum(map(abs, errors)) / len(errors), 100 * sum(errors) / len(errors),
            sum(abs(x) <= 0.15 for x in errors))

    print("all     ", summary([e for e, _, _ in rows]))
    for key in ("gpu", "seq_len", "gpus", "activation_checkpointing"):
        print("by", key)
        values = sorted({r[key] for _, r, _ in rows}, key=lambda x: (len(x), x))
        for value in values:
            print("  %-12s %s" % (value, summary([e for e, r, _ in rows if r[key] == value])))
    # Long sequences, where attention is most of the step: with full checkpointing the forward
    # runs twice, so a forward priced apart from its backward shows here (docs/accuracy.md,
    # "Checkpointing at long sequences").
    print("by activation_checkpointing, rows of sequence >= 16,384")
    for value in ("True", "False"):
        errors = [e for e, r, _ in rows if r["activation_checkpointing"] == value and int(r["seq_len"]) >= 16384]
        if errors:
            print("  %-12s %s" % (value, summary(errors)))
    print("error on comm/compute, rows of sequence <= 4,096 (least squares)")
    for gpu in sorted({r["gpu"] for _, r, _ in rows}):
        pts = [(x, e) for e, r, x in rows if r["gpu"] == gpu and int(r["seq_len"]) <= 4096]
        a, b, corr = least_squares([x for x, _ in pts], [e for _, e in pts])
        print("  %-12s %3d rows  intercept %+.3f  slope %.3f  correlation %.2f" % (gpu, len(pts), a, b, corr))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--from-readme", help="llm-foundry's scripts/train/benchmarking/README.md")
    p.add_argument("--csv", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "validation",
                                                 "llm_foundry_runs.csv"))
    p.add_argument("--scenarios", help="directory to write the scenarios into")
    p.add_argument("--report", help="directory of scenarios (--scenarios) to judge fsdpsim on")
    p.add_argument("--fsdpsim", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "fsdpsim"))
    p.add_argument("--self-test", action="store_true", help="check the report's least squares (no fsdpsim)")
    a = p.parse_args()
    if a.self_test:
        self_test()
        return
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    if a.from_readme:
        rows = parse_readme(a.from_readme)
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
        print(f"{len(rows)} rows written to {a.csv}")
    if a.scenarios:
        write_scenarios(a.csv, a.scenarios, root)
    if a.report:
        report(a.report, a.fsdpsim, a.csv)


if __name__ == "__main__":
    main()
