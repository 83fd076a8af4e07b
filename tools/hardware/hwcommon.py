"""Shared by the hardware scripts (tools/hardware/*.py): provenance columns, CSV writing, and the
fsdpsim scenario each measured case maps to.

Nothing here imports torch: `--dry-run` of every script must run on a machine without it (the
development machines have no PyTorch and no package index), so torch is imported only inside the
functions that measure.
"""

import csv
import datetime
import os
import shlex
import subprocess
import sys

# The repository root (this file is tools/hardware/hwcommon.py).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every CSV under tests/data/hardware/ carries these columns (tests/data/hardware/README.md), so a
# row says on what and by what it was measured. The hardware CTest refuses a CSV without them.
PROVENANCE_COLUMNS = [
    "gpu_name",
    "gpu_memory_bytes",
    "driver",
    "cuda",
    "torch",
    "transformers",
    "python",
    "date_utc",
    "host_command",
    "fsdpsim_commit",
]

# The base scenario of every row; the rows' overrides state everything else.
BASE_SCENARIO = "tests/data/hardware/inputs/base-scenario.json"


def host_command():
    """The command that produced the rows: run_all.sh exports FSDPSIM_HW_COMMAND (the device
    call's command line); run by hand, this script's own argv."""
    return os.environ.get("FSDPSIM_HW_COMMAND") or " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)


def fsdpsim_commit():
    """The commit the scripts came from: run_all.sh exports FSDPSIM_COMMIT (tools/hardware/prebuild.sh
    wrote it beside the binaries, since the device copy of the tree may have no .git); else git."""
    if os.environ.get("FSDPSIM_COMMIT"):
        return os.environ["FSDPSIM_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def nvidia_driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def provenance(torch_module=None):
    """The provenance columns. With torch given, the GPU's name and memory and torch's CUDA."""
    p = {c: "" for c in PROVENANCE_COLUMNS}
    p["driver"] = nvidia_driver()
    p["python"] = sys.version.split()[0]
    p["date_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    p["host_command"] = host_command()
    p["fsdpsim_commit"] = fsdpsim_commit()
    try:
        import transformers  # noqa: F401  (only its version)
        p["transformers"] = transformers.__version__
    except ImportError:
        p["transformers"] = "not installed"
    if torch_module is not None:
        p["torch"] = torch_module.__version__
        p["cuda"] = str(torch_module.version.cuda)
        if torch_module.cuda.is_available():
            props = torch_module.cuda.get_device_properties(0)
            p["gpu_name"] = props.name
            p["gpu_memory_bytes"] = str(props.total_memory)
    return p


def cluster_file_for(gpu_name):
    """The fsdpsim cluster whose GPU is the one measured. Memory predictions do not depend on it
    (only whether the step fits does); step-time predictions do."""
    name = (gpu_name or "").upper()
    if "H200" in name:
        return "scenarios/clusters/dgx-h200.json"
    return "scenarios/clusters/dgx-h100.json"


def world_overrides(world):
    """A world of N ranks as fsdpsim's cluster: 8 GPUs per node as in a DGX, N/8 nodes (N < 8: one
    node of N). FULL_SHARD shards over the whole world either way, as the fake process group does."""
    if world >= 8:
        if world % 8:
            raise ValueError("world %d: expected a multiple of 8 (nodes of 8 GPUs)" % world)
        return ["cluster.nodes=%d" % (world // 8), "cluster.gpus_per_node=8"]
    return ["cluster.nodes=1", "cluster.gpus_per_node=%d" % world]


class CsvWriter:
    """Writes rows as they are measured (flushed each time): a run cut short by the device's time
    limit still leaves every finished row on disk."""

    def __init__(self, path, columns):
        self.columns = columns
        self.file = open(path, "w", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=columns, extrasaction="raise", lineterminator="\n")
        self.writer.writeheader()
        self.file.flush()

    def write(self, row):
        full = {c: "" for c in self.columns}
        full.update({k: ("" if v is None else v) for k, v in row.items()})
        self.writer.writerow(full)
        self.file.flush()

    def close(self):
        self.file.close()


def load_hf_config_dict(path):
    """A Hugging Face config.json of models/hf (repo-relative), keys starting with '_' (the
    catalog's comments, which fsdpsim's importer also skips) removed."""
    import json
    with open(os.path.join(REPO, path)) as f:
        d = json.load(f)
    return {k: v for k, v in d.items() if not k.startswith("_")}


def estimate_command(overrides, fsdpsim="build/tools/fsdpsim", extra=""):
    """The fsdpsim command line that predicts a row (what the hardware CTest runs)."""
    sets = " ".join("--set " + shlex.quote(o) for o in overrides)
    return "%s estimate --scenario %s %s%s" % (fsdpsim, BASE_SCENARIO, sets, (" " + extra) if extra else "")


def rel(path):
    """A path relative to the repository root, as the docs and tables name files."""
    return os.path.relpath(os.path.abspath(path), REPO)


def binary_provenance(exe):
    """Where an fsdpsim binary came from: its file time, and the commit tools/hardware/prebuild.sh
    wrote beside it (.hw/provenance.txt) when there is one."""
    t = os.path.getmtime(exe)
    text = "built %s" % datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    prov = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(exe))), "provenance.txt")
    if os.path.exists(prov):
        kv = {}
        with open(prov) as f:
            for line in f:
                if "=" in line:
                    k, v = line.strip().split("=", 1)
                    kv[k] = v
        if "commit" in kv:
            text += ", from commit %s, uncommitted_changes=%s (%s)" % (
                kv["commit"][:7], kv.get("uncommitted_changes", "?"), rel(prov))
    return text


def estimate_argv(fsdpsim, scenario, overrides, *extra):
    """`fsdpsim estimate --scenario S --set o1 ... EXTRA` as an argv, run from REPO (the rows'
    paths are relative to it)."""
    cmd = [os.path.abspath(fsdpsim) if os.sep in fsdpsim else fsdpsim, "estimate", "--scenario", scenario]
    for o in overrides:
        if o.strip():
            cmd += ["--set", o.strip()]
    return cmd + list(extra)


def block_seconds(fsdpsim, scenario, overrides, op_names):
    """fsdpsim's time of a block's forward and backward ops (`op_names`: the forward's name, the
    backward's) timed as block_timing.py times them, from `estimate --trace`: each op's GPU duration
    (nominal_us, before interference), its CPU issue (the issue thread's event of the same op) and
    the part of it the GPU waits for (that event's lead_us: [Kernel pipelining] in
    planner/cost_model.h). The forward starts on an idle GPU: lead + duration. The backward is timed
    from the forward's end on the GPU, and its issue began when the forward's ended, so the GPU waits
    for what is left of its lead. {name: seconds}; a name not found is absent. The C++ twin is
    tests/hardware/hardware_check.h's BlockResult::elapsed_forward/backward."""
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.json")
        r = subprocess.run(estimate_argv(fsdpsim, scenario, overrides, "--trace", trace),
                           capture_output=True, text=True, cwd=REPO)
        if r.returncode != 0:
            raise RuntimeError("fsdpsim estimate exited %d: %s" % (r.returncode, r.stderr.strip()))
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    gpu, op_of = {}, {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") in op_names and e["name"] not in gpu:
            gpu[e["name"]] = e["args"]["nominal_us"] * 1e-6
            op_of[e["args"]["op"]] = e["name"]
    issue, lead = {}, {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_issue" and e["args"].get("op") in op_of:
            issue[op_of[e["args"]["op"]]] = e["dur"] * 1e-6
            lead[op_of[e["args"]["op"]]] = e["args"].get("lead_us", 0.0) * 1e-6
    forward, backward = op_names
    out = {}
    if forward in gpu:
        out[forward] = lead.get(forward, 0.0) + gpu[forward]
    if backward in gpu:
        left = issue.get(forward, 0.0) + lead.get(backward, 0.0) - out.get(forward, 0.0)
        out[backward] = gpu[backward] + max(0.0, left)
    return out


def log(*args):
    print(*args, file=sys.stderr, flush=True)
