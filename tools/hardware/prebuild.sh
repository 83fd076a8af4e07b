#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), the fsdpsim binaries that tools/hardware/run_all.sh runs
# on a lent GPU machine, and puts them in .hw/ at the repository root:
#
#   tools/hardware/prebuild.sh            # then the device call: command "bash tools/hardware/run_all.sh",
#                                         # carry [".hw"] (docs/accuracy.md, "Hardware")
#
# Why here and not there: the GPU machine has no network and none of fsdpsim's build
# dependencies (SimGrid, Boost, nlohmann/json, CLI11, GoogleTest: Debian packages, tools/setup.sh),
# and its device time is counted (15 minutes, machine start included). This machine has the CUDA
# toolkit and NCCL, so the cuda backend compiles here (CI builds it the same way). Both machines are
# x86-64. What the binaries need there:
#   - glibc and libstdc++: the binaries need glibc 2.34 and GLIBCXX 3.4.30 (GCC 12's libstdc++)
#     or newer, which Ubuntu 22.04 and 24.04 both have (the GPU image's Python 3.12.3 is Ubuntu
#     24.04's). Linking libstdc++ statically was tried and is worse: its std::random_device then
#     needs glibc 2.36 (arc4random), which Ubuntu 22.04 lacks;
#   - libcudart.so.13: copied into .hw/lib (0.7 MB) as a fallback behind the machine's own;
#   - libjemalloc.so.2 (the fsdpsim binary's malloc, CMakeLists.txt): copied into .hw/lib (0.8 MB;
#     glibc 2.34): the GPU image has no jemalloc of its own;
#   - libnccl.so.2 and (opened at the first GEMM) libcublas.so.13: the machine's own, from PyTorch's
#     nvidia-* wheels or /usr/local/cuda (too large to carry: 208 MiB for NCCL alone); run_all.sh
#     finds them;
#   - MPI: not built in (-DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON): one process plays rank 0 there, and
#     the GPU image's MPI is not the one this machine would link.
# The tests' binary (test_runtime) carries the source path it was built from; run_all.sh links that
# path to the tree on the GPU machine when it does not exist there.
#
# Environment: FSDPSIM_HW_BUILD (build folder, default build-hw), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${FSDPSIM_HW_BUILD:-build-hw}
jobs=${JOBS:-2}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
  -DCMAKE_EXE_LINKER_FLAGS= | tee "$build.configure.log"
if ! grep -q "building the cuda runtime backend" "$build.configure.log"; then
  echo "error: CMake did not find the CUDA toolkit and NCCL here, so the cuda backend would not be built;" \
       "run this on a machine that has them (CI's image, this project's development machines)" >&2
  exit 1
fi
rm -f "$build.configure.log"
cmake --build "$build" -j "$jobs" --target fsdpsim test_runtime

rm -rf .hw
mkdir -p .hw/bin .hw/lib
cp "$build/tools/fsdpsim" "$build/tests/test_runtime" .hw/bin/
strip .hw/bin/fsdpsim .hw/bin/test_runtime
cudart=$(sed -n 's/^CUDA_cudart_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
cp -L "$(dirname "$cudart")"/libcudart.so.13 .hw/lib/
jemalloc=$(ldd "$build/tools/fsdpsim" | awk '/libjemalloc/ {print $3}')
[ -n "$jemalloc" ] && cp -L "$jemalloc" .hw/lib/
nccl_header=$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")/nccl.h
{
  echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted_changes=$(git status --porcelain 2>/dev/null | grep -vc '^??' || true)"
  echo "built_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "source_root=$root"
  echo "build_host=$(uname -srm); $(ldd --version | head -1)"
  echo "compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:\(FILEPATH\|STRING\)=//p' "$build/CMakeCache.txt") $(c++ -dumpfullversion 2>/dev/null || true)"
  nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:FILEPATH=//p' "$build/CMakeCache.txt")
  echo "cuda_toolkit=$("${nvcc:-nvcc}" --version 2>/dev/null | tail -1)"
  echo "nccl_header=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$nccl_header" 2>/dev/null)"
  echo "needs=$(objdump -T .hw/bin/fsdpsim .hw/bin/test_runtime 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)" \
       "$(objdump -T .hw/bin/fsdpsim .hw/bin/test_runtime 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
} > .hw/provenance.txt
git rev-parse HEAD > .hw/commit 2>/dev/null || echo unknown > .hw/commit

# .hw/ must not be committed, and the device call carries it (carry [".hw"]): ignore it in this
# clone only, where git looks for excludes (shared by every worktree of the clone).
exclude=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [ -n "$exclude" ] && ! grep -qx '/.hw/' "$exclude" 2>/dev/null; then
  mkdir -p "$(dirname "$exclude")"
  echo '/.hw/' >> "$exclude"
fi
cat .hw/provenance.txt
du -sh .hw
echo "ready: the device call is command 'bash tools/hardware/run_all.sh', carry [\".hw\"], timeout_s 600"
