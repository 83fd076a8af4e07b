#!/usr/bin/env bash
# Builds and runs the libFuzzer harnesses of fsdpsim's input readers (tests/fuzz/), each from a
# seed corpus of the shipped files. docs/reliability.md gives the figures of the last long run.
#
#   tools/fuzz.sh                          60 s per harness (what CI runs), all five
#   tools/fuzz.sh --seconds 3600           a long run: an hour per harness
#   tools/fuzz.sh --runs 1000000 schedule  one harness, a million executions
#
# Options: --seconds N | --runs N (per harness), --build DIR (default build-fuzz), --fsdpsim
# PATH (the release binary that writes the schedule seeds; default build/tools/fsdpsim, built
# when missing), --no-build. Harnesses: scenario model hf_config sweep_file schedule.
# Needs clang with libFuzzer (Debian: clang, libclang-rt-dev). Exits 1 when a harness finds a
# crash (the input is kept in DIR/fuzz/artifacts/<harness>/), 0 otherwise; without clang it
# says so and exits 0 unless --require-clang is given.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=60 runs="" build=build-fuzz fsdpsim=build/tools/fsdpsim do_build=1 require_clang=0
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --fsdpsim) fsdpsim=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --require-clang) require_clang=1; shift ;;
    scenario|model|hf_config|sweep_file|schedule) harnesses+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#harnesses[@]} -eq 0 ] && harnesses=(scenario model hf_config sweep_file schedule)

clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clangxx" ]; then
  echo "fuzz.sh: clang++ not found: the fuzz harnesses are not built (apt-get install clang)" >&2
  exit $((require_clang ? 1 : 0))
fi
# clang without its libFuzzer runtime (Debian: libclang-rt-<version>-dev) cannot link a harness.
probe=$(mktemp -d)
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! "$clangxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  rm -rf "$probe"
  echo "fuzz.sh: $clangxx cannot link a libFuzzer harness (apt-get install libclang-rt-dev)" >&2
  exit $((require_clang ? 1 : 0))
fi
rm -rf "$probe"

if [ "$do_build" = 1 ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$clangxx" -DFSDPSIM_FUZZ=ON \
    ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
  cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target fuzzers
fi

# ---- seed corpora: the shipped files ------------------------------------------------------
# Absolute paths: a harness works in its own directory (tests/fuzz/fuzz_input.h).
build=$(cd "$build" && pwd)
work="$build/fuzz"
seeds="$work/seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{scenario,model,hf_config,sweep_file,schedule}
cp scenarios/*.json scenarios/published/*.json tests/fuzz/seeds/tiny-scenario.json "$seeds/scenario/"
cp models/*.json "$seeds/model/"
cp models/hf/*.json "$seeds/hf_config/"
# The harness keeps references inside the catalog (tests/fuzz/fuzz_input.h): a sweep file's
# "../x.json" becomes the catalog path it names.
for f in scenarios/sweeps/*.json; do
  sed 's|"\.\./\([^"]*\)"|"scenarios/\1"|g' "$f" >"$seeds/sweep_file/$(basename "$f")"
done
if [ ! -x "$fsdpsim" ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target fsdpsim
fi
tiny=tests/fuzz/seeds/tiny-scenario.json
i=0
for variant in "" "--set fsdp.version=1" "--set fsdp.strategy=HYBRID_SHARD --set fsdp.shard_group_size=2" \
               "--set fsdp.strategy=SHARD_GRAD_OP --set training.activation_checkpointing=none" \
               "--set fsdp.cpu_offload=true"; do
  # shellcheck disable=SC2086
  "$fsdpsim" schedule --scenario "$tiny" --set cluster.gpus_per_node=4 $variant -o "$seeds/schedule/tiny-$i.json" 2>/dev/null
  i=$((i + 1))
done

# ---- runs ---------------------------------------------------------------------------------
status=0
summary=()
for h in "${harnesses[@]}"; do
  corpus="$work/corpus/$h" artifacts="$work/artifacts/$h"
  mkdir -p "$corpus" "$artifacts"
  limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  log="$work/$h.log"
  echo "fuzz.sh: $h: $([ -n "$runs" ] && echo "$runs runs" || echo "$seconds s") (log $log)" >&2
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: 2 GiB is a run out of memory.
  # -reload: pick up inputs another job added; -dict: JSON tokens and the readers' keys.
  set +e
  "$build/tests/fuzz/fuzz_$h" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$root/tests/fuzz/fsdpsim.dict" -artifact_prefix="$artifacts/" "$corpus" "$seeds/$h" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ $rc -ne 0 ]; then
    status=1
    summary+=("$h: FAILED (exit $rc) after ${execs:-?} executions; inputs in $artifacts")
    grep -m 5 -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" >&2 || true
  else
    summary+=("$h: ${execs:-?} executions, no crash")
  fi
done
printf 'fuzz.sh: %s\n' "${summary[@]}"
exit $status
