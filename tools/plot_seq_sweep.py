#!/usr/bin/env python3
"""MFU against sequence length for a ~1B and an 8B model on H100 and A100 (docs/accuracy.md,
"Sequence length"). Runs `fsdpsim estimate` per point and writes a dependency-free SVG.

  python3 tools/plot_seq_sweep.py [build/tools/fsdpsim] > docs/figures/mfu-vs-seq.svg
"""
import json
import math
import subprocess
import sys

FSDPSIM = sys.argv[1] if len(sys.argv) > 1 else "build/tools/fsdpsim"
SEQS = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
SERIES = [("models/pythia-1.4b.json", "Pythia-1.4B"), ("models/llama3.1-8b.json", "Llama-3.1-8B")]
CLUSTERS = [("scenarios/clusters/dgx-h100.json", "8xH100"), ("scenarios/clusters/dgx-a100.json", "8xA100")]
COLORS = {"Pythia-1.4B 8xH100": "#1f77b4", "Pythia-1.4B 8xA100": "#aec7e8",
          "Llama-3.1-8B 8xH100": "#d62728", "Llama-3.1-8B 8xA100": "#ff9896"}


def mfu(model, cluster, seq):
    cmd = [FSDPSIM, "estimate", "--scenario", "scenarios/llama3.1-8b-8xh100.json", "--set", "model=" + model,
           "--set", "cluster=" + cluster, "--set", "training.seq_len=%d" % seq, "--set", "training.micro_batch=1",
           "--set", "training.global_batch=8", "--set", "training.loss=fused",
           "--set", "training.activation_checkpointing=full", "--json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return out["throughput"]["mfu"]


def main():
    lines = {}
    for model, label in SERIES:
        for cluster, gpus in CLUSTERS:
            lines[label + " " + gpus] = [(s, mfu(model, cluster, s)) for s in SEQS]
    w, h, left, bottom, top, right = 640, 400, 60, 50, 30, 190
    x = lambda s: left + (math.log2(s) - 10) / 6 * (w - left - right)
    y = lambda m: h - bottom - m / 0.6 * (h - bottom - top)
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">MFU vs sequence length (fsdpsim estimate; FSDP2, full AC, fused loss, micro-batch 1)</text>' % left]
    for m in [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]:
        svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, w - right, y(m), y(m)))
        svg.append('<text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>' % (left - 5, y(m) + 4, 100 * m))
    for s in SEQS:
        svg.append('<text x="%.1f" y="%d" text-anchor="middle">%dk</text>' % (x(s), h - bottom + 16, s // 1024))
    svg.append('<text x="%d" y="%d" text-anchor="middle">sequence length (tokens)</text>' % ((left + w - right) // 2, h - 12))
    for i, (name, pts) in enumerate(lines.items()):
        path = " ".join("%.1f,%.1f" % (x(s), y(m)) for s, m in pts)
        svg.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (COLORS[name], path))
        for s, m in pts:
            svg.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (x(s), y(m), COLORS[name]))
        svg.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (w - right + 10, w - right + 30, top + 20 + 18 * i, top + 20 + 18 * i, COLORS[name]))
        svg.append('<text x="%d" y="%d">%s</text>' % (w - right + 35, top + 24 + 18 * i, name))
    svg.append("</svg>")
    print("\n".join(svg))
    print(json.dumps({k: [[s, round(m, 4)] for s, m in v] for k, v in lines.items()}), file=sys.stderr)


if __name__ == "__main__":
    main()
