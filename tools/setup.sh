#!/usr/bin/env bash
# Sets up a fresh Debian machine for fsdpsim, builds it, and runs `fsdpsim estimate` on a
# shipped scenario. Safe to run again: it installs only what is missing.
#   tools/setup.sh            set up, build (build/), run the example
#   tools/setup.sh --no-run   set up and build only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

packages=(cmake ninja-build g++ pkg-config libsimgrid-dev nlohmann-json3-dev libboost-graph-dev
          libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libopenmpi-dev openmpi-bin
          libjemalloc-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The CUDA toolkit and NCCL are optional: the cuda runtime backend is built when found.
cuda_args=()
for d in /usr/local/cuda /usr/local/cuda-*; do
  if [ -x "$d/bin/nvcc" ]; then cuda_args=(-DCUDAToolkit_ROOT="$d"); export PATH="$d/bin:$PATH"; break; fi
done

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
cmake --build build -j "$jobs"

if [ "${1:-}" != "--no-run" ]; then
  echo
  echo "\$ build/tools/fsdpsim estimate --scenario scenarios/llama3.1-8b-8xh100.json"
  build/tools/fsdpsim estimate --scenario scenarios/llama3.1-8b-8xh100.json
fi
