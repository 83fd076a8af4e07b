#!/usr/bin/env bash
# Mutation check: do the tests notice when a core formula changes?
#
# Each mutant in tools/mutants.txt is one small, meaningful change to a formula of the model
# (a padding rule, a buffer size, a bus factor, a default, an accuracy bound...). For each one
# the script applies it to the source, rebuilds incrementally (ninja; ccache makes the revert's
# rebuild a cache hit), runs the tests, and restores the file byte for byte. A mutant is
# "killed" when at least one test fails, "survived" when every test still passes: then no test
# pins that formula, and one should be written (docs/testing.md).
#
# A mutant whose original snippet is not found exactly once in its file is STALE (the code
# moved): it is reported, not run, and the script exits non-zero, so that the list is
# retargeted rather than silently shrinking.
#
#   tools/mutation_check.sh                 every mutant, the whole test suite for each
#   tools/mutation_check.sh --list          the mutants and whether each applies (no build)
#   tools/mutation_check.sh --only REGEX    the mutants whose id matches REGEX (grep -E)
#   tools/mutation_check.sh --focused       run each mutant's own `tests:` subset, not the suite
#   tools/mutation_check.sh --markdown      print the final table as Markdown (docs/testing.md)
#   options: --build-dir DIR (build), --jobs N (2), --timeout S per test (120), --no-baseline,
#            --mutants FILE (tools/mutants.txt)
#
# Exit status: 0 every mutant killed; 1 a mutant survived; 2 a mutant is stale or does not
# build, or the unmutated suite fails (then nothing is run).
#
# The source tree is restored after each mutant and on exit, Ctrl-C or kill (trap); the build
# directory is brought back to the restored sources at the end.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

mutants_file=tools/mutants.txt
build_dir=build
jobs=2
timeout_s=120
only=""
list_only=0
focused=0
markdown=0
baseline=1

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --list) list_only=1 ;;
    --only) only="${2:?--only needs a regular expression}"; shift ;;
    --focused) focused=1 ;;
    --markdown) markdown=1 ;;
    --build-dir) build_dir="${2:?}"; shift ;;
    --jobs) jobs="${2:?}"; shift ;;
    --timeout) timeout_s="${2:?}"; shift ;;
    --no-baseline) baseline=0 ;;
    --mutants) mutants_file="${2:?}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "mutation_check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done

[ -f "$mutants_file" ] || { echo "mutation_check: no mutant list $mutants_file" >&2; exit 2; }

# ---- the mutant list ----------------------------------------------------------------------
# Records:  [id]  then  file: / what: / find: / replace: / tests:  lines; `find+:` and
# `replace+:` continue the snippet on a new line (a newline, then the text as written). The
# text after "key: " is taken verbatim (indentation included). Lines starting with # are comments.
ids=() files=() whats=() finds=() replaces=() tests=()
parse_error() { echo "mutation_check: $mutants_file:$1: $2" >&2; exit 2; }
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  case "$line" in
    '#'*|'') continue ;;
    '['*']')
      ids+=("${line:1:${#line}-2}"); files+=(""); whats+=(""); finds+=(""); replaces+=(""); tests+=("")
      continue ;;
  esac
  [ ${#ids[@]} -gt 0 ] || parse_error $lineno "a field before the first [id]"
  i=$((${#ids[@]} - 1))
  key="${line%%:*}"
  value="${line#*:}"
  value="${value# }"
  case "$key" in
    file) files[i]="$value" ;;
    what) whats[i]="$value" ;;
    tests) tests[i]="$value" ;;
    find) finds[i]="$value" ;;
    find+) finds[i]+=$'\n'"$value" ;;
    replace) replaces[i]="$value" ;;
    replace+) replaces[i]+=$'\n'"$value" ;;
    *) parse_error $lineno "unknown field '$key' (file, what, find, find+, replace, replace+, tests)" ;;
  esac
done < "$mutants_file"

for i in "${!ids[@]}"; do
  [ -n "${files[i]}" ] && [ -n "${finds[i]}" ] && [ -n "${whats[i]}" ] ||
    { echo "mutation_check: mutant [${ids[i]}] needs file, what and find" >&2; exit 2; }
  [ "${finds[i]}" != "${replaces[i]}" ] || { echo "mutation_check: mutant [${ids[i]}] changes nothing" >&2; exit 2; }
done

# How many times the snippet occurs in the file (non-overlapping, exact bytes).
occurrences() {  # file find
  FIND="$2" perl -0777 -ne '$n = () = /\Q$ENV{FIND}\E/g; print $n' "$1"
}
# Replaces the one occurrence in place.
apply_mutant() {  # file find replace
  FIND="$2" REPLACE="$3" perl -0777 -i -pe 's/\Q$ENV{FIND}\E/$ENV{REPLACE}/' "$1"
}

selected=()
for i in "${!ids[@]}"; do
  if [ -z "$only" ] || printf '%s\n' "${ids[i]}" | grep -Eq -- "$only"; then selected+=("$i"); fi
done
[ ${#selected[@]} -gt 0 ] || { echo "mutation_check: no mutant id matches '$only'" >&2; exit 2; }

# Whether each selected mutant still applies.
status=()
stale=0
for i in "${selected[@]}"; do
  if [ ! -f "${files[i]}" ]; then
    status[i]="STALE (no file ${files[i]})"; stale=$((stale + 1))
  else
    n=$(occurrences "${files[i]}" "${finds[i]}")
    if [ "$n" = 1 ]; then status[i]="ok"; else status[i]="STALE (found $n times)"; stale=$((stale + 1)); fi
  fi
done

if [ $list_only = 1 ]; then
  printf '%-34s %-34s %-22s %s\n' "mutant" "file" "status" "what it changes"
  for i in "${selected[@]}"; do
    printf '%-34s %-34s %-22s %s\n' "${ids[i]}" "${files[i]}" "${status[i]}" "${whats[i]}"
  done
  echo "${#selected[@]} mutants, $stale stale"
  [ $stale = 0 ] || exit 2
  exit 0
fi

# ---- running ------------------------------------------------------------------------------
[ -f "$build_dir/build.ninja" ] || [ -f "$build_dir/Makefile" ] ||
  { echo "mutation_check: $build_dir is not a configured build directory (cmake -S . -B $build_dir -G Ninja)" >&2; exit 2; }
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$root")}"

work=$(mktemp -d "${TMPDIR:-/tmp}/mutation_check.XXXXXX")
mutated_file=""
restore() {
  if [ -n "$mutated_file" ]; then
    cp "$work/original" "$mutated_file"
    mutated_file=""
  fi
}
on_exit() {
  local rc=$?
  restore
  rm -rf "$work"
  exit $rc
}
trap on_exit EXIT
trap 'echo; echo "mutation_check: interrupted; the source is restored" >&2; exit 130' INT TERM

build() { cmake --build "$build_dir" -j "$jobs" > "$work/build.log" 2>&1; }
# Runs ctest (all tests, or those matching $1); the failed test names go to $work/failed.
run_tests() {
  local args=(--test-dir "$build_dir" -j "$jobs" --timeout "$timeout_s")
  [ -n "${1:-}" ] && args+=(-R "$1")
  ctest "${args[@]}" > "$work/ctest.log" 2>&1
  local rc=$?
  sed -n '/The following tests FAILED:/,$p' "$work/ctest.log" |
    sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (\(.*\))$/\1 (\2)/p' > "$work/failed"
  if [ $rc != 0 ] && [ ! -s "$work/failed" ]; then echo "ctest exited $rc" > "$work/failed"; fi
  return $rc
}

started=$(date +%s)
if [ $baseline = 1 ]; then
  echo "baseline: building and running the unmutated suite ..."
  build || { echo "mutation_check: the unmutated tree does not build:" >&2; tail -20 "$work/build.log" >&2; exit 2; }
  if ! run_tests ""; then
    echo "mutation_check: the unmutated suite fails; fix it first:" >&2
    cat "$work/failed" >&2
    exit 2
  fi
  echo "baseline: $(grep -Eo '[0-9]+ tests failed out of [0-9]+|100% tests passed, 0 tests failed out of [0-9]+' "$work/ctest.log") in $(( $(date +%s) - started )) s"
fi

results=() killers=() seconds=()
killed=0 survived=0 broken=0
for i in "${selected[@]}"; do
  if [ "${status[i]}" != ok ]; then
    results[i]="${status[i]}"; killers[i]=""; seconds[i]=0
    continue
  fi
  t0=$(date +%s)
  file="${files[i]}"
  cp "$file" "$work/original"
  mutated_file="$file"
  apply_mutant "$file" "${finds[i]}" "${replaces[i]}"
  printf '%-34s ' "${ids[i]}"
  if ! build; then
    results[i]="BUILD FAILED"; killers[i]="$(grep -m1 -E 'error' "$work/build.log" | cut -c1-100)"
    broken=$((broken + 1))
  else
    regex="" retry=""
    [ $focused = 1 ] && regex="${tests[i]}"
    killed_now=1
    run_tests "$regex" && killed_now=0
    if [ $killed_now = 1 ] && ! grep -qv '(Timeout)$' "$work/failed"; then
      # Killed by time-outs alone: a loaded machine can stall a test with no help from the mutant.
      # The kill stands only if the same tests time out (or fail) again.
      retry="^($(sed 's/ (Timeout)$//; s/[][().*+?^$|\\{}]/\\&/g' "$work/failed" | paste -sd '|'))\$"
      run_tests "$retry" || killed_now=2
      grep -q 'tests failed out of [1-9]' "$work/ctest.log" ||
        { echo "mutation_check: the re-run of the timed-out tests matched none ($retry)" >&2; exit 2; }
      [ $killed_now = 2 ] || killed_now=0
    fi
    if [ $killed_now = 0 ]; then
      results[i]="SURVIVED"; killers[i]="no test failed"
      [ -n "${retry:-}" ] && killers[i]="a test timed out once, then passed: not a kill"
      survived=$((survived + 1))
    else
      results[i]="killed"
      n=$(wc -l < "$work/failed")
      killers[i]="$n: $(head -3 "$work/failed" | sed 's/ (Failed)$//; s/<[^>]*>//g; s/  *# GetParam() = .*\( (Timeout)\)$/\1/; s/  *# GetParam() = .*$//' | paste -sd ',' | sed 's/,/, /g')"
      [ "$n" -gt 3 ] && killers[i]+=", ..."
      killed=$((killed + 1))
    fi
  fi
  restore
  seconds[i]=$(( $(date +%s) - t0 ))
  echo "${results[i]} (${seconds[i]} s)"
done

# Bring the build back to the restored sources (ccache hits).
build || echo "mutation_check: warning: the final rebuild of the restored tree failed ($build_dir)" >&2

total=$(( $(date +%s) - started ))
ran=$((killed + survived))
rate="n/a"
[ $ran -gt 0 ] && rate=$(awk -v s=$survived -v n=$ran 'BEGIN { printf "%.1f%%", 100 * s / n }')
echo
if [ $markdown = 1 ]; then
  echo "| mutant | file | what it changes | result | failing tests (count: first three) |"
  echo "|---|---|---|---|---|"
  for i in "${selected[@]}"; do
    echo "| \`${ids[i]}\` | \`${files[i]}\` | ${whats[i]//|/\\|} | ${results[i]} | ${killers[i]//|/\\|} |"
  done
else
  printf '%-34s %-28s %-14s %s\n' "mutant" "file" "result" "failing tests (count: first three)"
  for i in "${selected[@]}"; do
    printf '%-34s %-28s %-14s %s\n' "${ids[i]}" "${files[i]}" "${results[i]}" "${killers[i]}"
  done
fi
echo
echo "mutants: ${#selected[@]}; killed $killed, survived $survived, stale $stale, not building $broken;" \
     "survival rate $rate; $total s in all ($( [ $focused = 1 ] && echo "focused subsets" || echo "whole suite per mutant"), -j $jobs)"
[ $stale = 0 ] && [ $broken = 0 ] || exit 2
[ $survived = 0 ] || exit 1
exit 0
