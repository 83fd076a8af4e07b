#!/usr/bin/env bash
# Every hardware measurement fsdpsim needs from one GPU, in one command (issue 20), within about
# nine minutes of one H100 or H200:
#
#   bash tools/hardware/run_all.sh [OUTDIR]        # OUTDIR defaults to $OUT (the device tool's)
#
# Before the device call, on the development machine: tools/hardware/prebuild.sh (builds the cuda
# fsdpsim binaries into .hw/, which the call carries: carry [".hw"]). Without .hw/ this script
# tries to build fsdpsim here (CMake, Ninja, -j16) and, where the dependencies are missing, goes on
# with the PyTorch measurements alone.
#
# Steps (each bounded by a timeout, all under one deadline, so that whatever finished is written
# even if a later step hangs; a failing step is logged and the next one runs). They run in the order
# 1, 2, 3, 5, 6, 7, 4: the memory step is the longest and stops cleanly at the deadline, so it
# takes whatever time the short steps leave (the steps before it keep at least 250 s for it):
#   1. provenance: GPU, driver, CUDA, torch, transformers, the binaries' build;
#   2. the cuda backend's own tests: test_runtime --gtest_filter='CudaBackend.*' (what
#      `ctest -R CudaBackend` runs; ctest itself needs the build folder, which is not carried);
#   3. fsdpsim verify --backend cuda --virtual-world N for Llama-3.1-8B and Llama-3.2-1B, N = 8 and
#      64 (the full models fit one rank's memory: 52 and 39 GiB reserved for 8B at N = 8 and 64,
#      32 and 30 GiB for 1B), JSON into verify.json, a trace of the first;
#   4. PyTorch FSDP1/FSDP2 memory ground truth (tools/hardware/fsdp_memory.py) -> memory.csv and a
#      memory snapshot;
#   5. fsdpsim calibrate --backend cuda on one GPU (world 1: GEMMs of the 8B scenario's step,
#      the square grid, copies, launch; one GPU has no collective or interference to measure);
#   6. single-block forward/backward timings (tools/hardware/block_timing.py) -> blocks.csv;
#   7. kernel timings: 30 s of sustained 8192^3 GEMMs with nvidia-smi's clock and power samples
#      (does minutes of load lower the clock?), SDPA attention backends, eager attention's chain,
#      memory-bound ops, GEMMs beside a kernel that holds SMs as NCCL's do
#      (tools/hardware/kernel_timing.py) -> kernels.csv.
#
# Output (at most 8 files, each under 16 MiB, flat: what the device tool returns): run_all.log,
# verify.json, verify_trace.json.gz, memory.csv, memory_snapshot.pickle.gz, calibration.json,
# blocks.csv, kernels.csv. tests/data/hardware/README.md says where each goes in the repository.
set -u
outdir=${1:-${OUT:-}}
if [ -z "$outdir" ]; then
  echo "usage: tools/hardware/run_all.sh OUTDIR (or set OUT)" >&2
  exit 2
fi
mkdir -p "$outdir" || exit 2
outdir=$(cd "$outdir" && pwd)
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
start=$(date +%s)
# The device tool allows 600 s a command; 530 leaves time to write and return the files.
deadline=$((start + ${FSDPSIM_HW_BUDGET_SECONDS:-530}))
# FSDPSIM_HW_QUICK=1: a first look of about three minutes, before the full run spends the device
# time: one case of each step that has never run (verify of the 1B model at N = 8 for one step,
# two PyTorch memory cases, FSDP2 and FSDP1, one block timing, calibrate cut short), so that a
# script broken by the machine's library versions is found and mended between two calls. What it
# measures is kept like any other run's.
quick=${FSDPSIM_HW_QUICK:-0}
work=$(mktemp -d)
exec > >(tee -a "$outdir/run_all.log") 2>&1

export PYTHONUNBUFFERED=1
export FSDPSIM_ROOT=$root
export FSDPSIM_HW_COMMAND="${FSDPSIM_HW_MEMORY_ARGS:+FSDPSIM_HW_MEMORY_ARGS=\"$FSDPSIM_HW_MEMORY_ARGS\" }bash tools/hardware/run_all.sh${1:+ $1} (device tool run, timeout_s 600, carry .hw)"
export FSDPSIM_COMMIT=$(cat .hw/commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)

say() { echo "[run_all +$(($(date +%s) - start))s] $*"; }
remaining() { echo $((deadline - $(date +%s))); }
# cap WANT KEEP: WANT seconds, or fewer so that KEEP seconds stay for the steps after this one.
cap() {
  local c=$(( $(remaining) - ${2:-0} ))
  [ "$c" -gt "$1" ] && c=$1
  echo "$c"
}
# step NAME SECONDS COMMAND...: runs COMMAND under a timeout, logs its exit status; skipped when
# fewer than 10 seconds are left for it.
step() {
  local name=$1 limit=$2
  shift 2
  if [ "$limit" -lt 10 ]; then
    say "SKIP $name: no time left under the deadline"
    return 99
  fi
  say "BEGIN $name (at most ${limit}s): $*"
  local t0=$(date +%s)
  timeout -k 10 "$limit" "$@"
  local rc=$?
  say "END $name: exit $rc after $(($(date +%s) - t0))s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
  return $rc
}

# ---- 1. provenance ----------------------------------------------------------------------------
say "provenance"
date -u +%Y-%m-%dT%H:%M:%SZ
uname -a
nvidia-smi || true
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || true
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
command -v nvcc >/dev/null && nvcc --version | tail -2
python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "transformers", transformers.__version__)' || true
ldd --version | head -1
nproc
echo "PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-<unset>}"
echo "carried build (.hw/provenance.txt):"
cat .hw/provenance.txt 2>/dev/null || echo "  none: no .hw/ (tools/hardware/prebuild.sh was not run before the call)"

case "$gpu_name" in
  *H200*) cluster=scenarios/clusters/dgx-h200.json ;;
  *) cluster=scenarios/clusters/dgx-h100.json ;;
esac
say "GPU '$gpu_name': fsdpsim cluster $cluster"

# ---- the fsdpsim binary ------------------------------------------------------------------------
# NCCL, cuBLAS and the CUDA runtime from this machine (PyTorch's nvidia-* wheels, the toolkit),
# the carried libcudart last.
libdirs=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    for d in sorted(glob.glob(os.path.join(sp, "nvidia", "**", "lib"), recursive=True)):
        if any(glob.glob(os.path.join(d, n)) for n in ("libnccl.so*", "libcublas.so*", "libcudart.so*")):
            dirs.append(d)
print(":".join(dict.fromkeys(dirs)))
EOF
)
hwld="${libdirs:+$libdirs:}/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib:$root/.hw/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "library path for fsdpsim: $hwld"

# The test binary carries the source path it was built from (FSDPSIM_SOURCE_ROOT): make that path
# lead here when it does not exist on this machine.
built_root=$(sed -n 's/^source_root=//p' .hw/provenance.txt 2>/dev/null)
if [ -n "$built_root" ] && [ "$built_root" != "$root" ] && [ ! -e "$built_root" ]; then
  mkdir -p "$(dirname "$built_root")" && ln -s "$root" "$built_root" && say "linked $built_root -> $root"
fi

fsdpsim_bin=""
tests_bin=""
if [ -x .hw/bin/fsdpsim ]; then
  if LD_LIBRARY_PATH=$hwld .hw/bin/fsdpsim models --json > /dev/null; then
    fsdpsim_bin=$root/.hw/bin/fsdpsim
    tests_bin=$root/.hw/bin/test_runtime
  else
    say "the carried .hw/bin/fsdpsim does not start here:"
    LD_LIBRARY_PATH=$hwld ldd .hw/bin/fsdpsim | grep -i "not found"
  fi
fi
if [ -z "$fsdpsim_bin" ]; then
  # Building here: only the two targets the steps need.
  if step "configure" "$(cap 60 300)" cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release &&
     step "build" "$(cap 240 300)" cmake --build build-gpu -j 16 --target fsdpsim test_runtime; then
    fsdpsim_bin=$root/build-gpu/tools/fsdpsim
    tests_bin=$root/build-gpu/tests/test_runtime
  else
    say "no fsdpsim binary: the cuda backend steps are skipped, the PyTorch ones still run"
  fi
fi
fsd=(env "LD_LIBRARY_PATH=$hwld" "$fsdpsim_bin")
if [ -n "$fsdpsim_bin" ]; then
  env "LD_LIBRARY_PATH=$hwld" ldd "$fsdpsim_bin" | grep -E "nccl|cudart|not found"
fi

# ---- 2. the cuda backend's tests ---------------------------------------------------------------
if [ -n "$tests_bin" ] && [ "$quick" != 1 ]; then
  step "CudaBackend tests" "$(cap 90 420)" env "LD_LIBRARY_PATH=$hwld" "$tests_bin" --gtest_filter='CudaBackend.*' --gtest_color=no
fi

# ---- 3. verify --backend cuda --virtual-world N ------------------------------------------------
# verify.json is rewritten after each run, so that a later timeout loses nothing already measured.
merge_verify() {
  python3 - "$work" "$outdir/verify.json" <<'EOF'
import glob, json, os, sys
work, out = sys.argv[1], sys.argv[2]
runs = []
for meta in sorted(glob.glob(os.path.join(work, "verify-*.meta.json"))):
    base = meta[: -len(".meta.json")]
    run = json.load(open(meta))
    try:
        run["result"] = json.load(open(base + ".out"))
    except (OSError, ValueError):
        run["result"] = None
        run["unparsed_stdout"] = open(base + ".out", errors="replace").read()[-4000:] if os.path.exists(base + ".out") else ""
    run["stderr_tail"] = open(base + ".err", errors="replace").read()[-4000:] if os.path.exists(base + ".err") else ""
    runs.append(run)
json.dump({"runs": runs}, open(out, "w"), indent=1)
EOF
}
verify_case() {  # verify_case INDEX NAME SECONDS ARGS...: fsdpsim verify --backend cuda --json ARGS
  local n=$1 name=$2 limit=$3
  shift 3
  if [ "$limit" -lt 10 ]; then
    say "SKIP verify $name: no time left under the deadline"
    return 99
  fi
  local base="$work/verify-$n-$name" t0=$(date +%s)
  say "BEGIN verify $name (at most ${limit}s): fsdpsim verify --backend cuda --json $*"
  timeout -k 10 "$limit" "${fsd[@]}" verify --backend cuda --json "$@" > "$base.out" 2> "$base.err"
  local rc=$?
  cat "$base.err"
  say "END verify $name: exit $rc after $(($(date +%s) - t0))s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
  python3 - "$base.meta.json" "$name" "$rc" "$(($(date +%s) - t0))" "fsdpsim verify --backend cuda --json $*" <<'EOF'
import json, sys
json.dump({"case": sys.argv[2], "exit_code": int(sys.argv[3]), "seconds": int(sys.argv[4]), "command": sys.argv[5]},
          open(sys.argv[1], "w"))
EOF
  merge_verify
  return $rc
}
s8b=scenarios/llama3.1-8b-8xh100.json
if [ "$quick" = 1 ]; then
  [ -n "$fsdpsim_bin" ] && verify_case 1 llama3.2-1b-n8-quick "$(cap 45 100)" --scenario "$s8b" --set "cluster=$cluster" \
    --set model=models/llama3.2-1b.json --virtual-world 8 --steps 1
  step "PyTorch FSDP memory (quick)" "$(cap 60 50)" python3 tools/hardware/fsdp_memory.py --out "$outdir" --time-budget 45 \
    --only llama3.2-1b-fsdp2-ac_none-reshard_true-n8 --only llama3.2-1b-fsdp1-ac_full-reshard_true-n8
  step "block timing (quick)" "$(cap 30 25)" python3 tools/hardware/block_timing.py --out "$outdir" --time-budget 20 \
    --only llama3.2-1b-block-s4096
  [ -n "$fsdpsim_bin" ] && step "calibrate (quick)" "$(cap 40 0)" "${fsd[@]}" calibrate --backend cuda \
    --scenario "$s8b" --set "cluster=$cluster" --set cluster.gpus_per_node=1 \
    --set training.global_batch=2 -o "$outdir/calibration.json"
  [ -s "$outdir/calibration.json" ] || rm -f "$outdir/calibration.json"
  say "quick run done"
  ls -l "$outdir"
  rm -rf "$work"
  exit 0
fi
if [ -n "$fsdpsim_bin" ]; then
  verify_case 1 llama3.1-8b-n8 "$(cap 90 400)" --scenario "$s8b" --set "cluster=$cluster" \
    --virtual-world 8 --steps 2 --trace "$work/verify_trace.json"
  [ -s "$work/verify_trace.json" ] && gzip -c "$work/verify_trace.json" > "$outdir/verify_trace.json.gz"
  verify_case 2 llama3.2-1b-n8 "$(cap 60 360)" --scenario "$s8b" --set "cluster=$cluster" \
    --set model=models/llama3.2-1b.json --virtual-world 8 --steps 2
fi

# ---- 3 (continued). the N = 64 verifies (the memory step is last: below) --------------------------------------------------------
if [ -n "$fsdpsim_bin" ]; then
  verify_case 3 llama3.1-8b-n64 "$(cap 60 300)" --scenario "$s8b" --set "cluster=$cluster" \
    --set cluster.nodes=8 --set training.global_batch=128 --virtual-world 64 --steps 2
  verify_case 4 llama3.2-1b-n64 "$(cap 45 290)" --scenario "$s8b" --set "cluster=$cluster" \
    --set model=models/llama3.2-1b.json --set cluster.nodes=8 --set training.global_batch=128 --virtual-world 64 --steps 2
fi

# ---- 5. calibrate on one GPU -------------------------------------------------------------------
# World 1 (cluster.gpus_per_node 1, global batch 2 = the scenario's micro-batch): one process cannot
# put two ranks on one GPU, so the scenario's 8-rank collectives (and the interference benchmark
# beside them) would fail; the GEMMs, copies and launch overhead are what one GPU can measure.
if [ -n "$fsdpsim_bin" ]; then
  step "calibrate" "$(cap 100 280)" "${fsd[@]}" calibrate --backend cuda \
    --scenario "$s8b" --set "cluster=$cluster" --set cluster.gpus_per_node=1 \
    --set training.global_batch=2 -o "$outdir/calibration.json"
  # calibrate makes the file before measuring (to fail early if it cannot be written): a failed
  # run leaves it empty, which is no calibration.
  [ -s "$outdir/calibration.json" ] || rm -f "$outdir/calibration.json"
fi

# ---- 6. single-block timings -------------------------------------------------------------------
limit=$(cap 75 270)
step "block timing" "$limit" python3 tools/hardware/block_timing.py --out "$outdir" --time-budget $((limit - 15))

# ---- 7. kernel timings (issue 13's kernel-level data) -------------------------------------------
limit=$(cap 120 250)
step "kernel timing" "$limit" python3 tools/hardware/kernel_timing.py --out "$outdir" --time-budget $((limit - 15)) \
  --sustained-seconds 30

# ---- 4. PyTorch memory ground truth, last -------------------------------------------------------
# Last because it is the longest (a process per FSDP1 case, about 13 s each) and stops cleanly at
# its time budget, writing the cases it did not reach as skipped rows: the steps above take about
# 90 s together and would otherwise be cut by a budget the memory cases overran.
# FSDPSIM_HW_MEMORY_ARGS: fsdp_memory.py's selection and snapshot options for this call (default:
# every case), e.g. "--only fsdp1 --snapshot-case ID --snapshot-from init".
limit=$(cap 600 5)
# shellcheck disable=SC2086  # the options are words on purpose
step "PyTorch FSDP memory" "$limit" python3 tools/hardware/fsdp_memory.py --out "$outdir" --time-budget $((limit - 15)) \
  ${FSDPSIM_HW_MEMORY_ARGS:-}

# ---- what comes back ---------------------------------------------------------------------------
for f in "$outdir"/*; do
  size=$(stat -c %s "$f")
  if [ "$size" -gt $((16 * 1024 * 1024 - 4096)) ]; then
    say "$(basename "$f") is $size bytes, over the device tool's 16 MiB: removed"
    rm -f "$f"
  fi
done
say "done; $(ls "$outdir" | wc -l) files in $outdir:"
ls -l "$outdir"
rm -rf "$work"
exit 0
