#!/usr/bin/env bash
# Checks the two rules of DESIGN.md's layout that the compiler does not:
#
#  1. Dependencies point one way: models <- planner <- sim <- tools; runtime and calibrate
#     depend on planner (and models), never on sim. A library folder includes only the
#     folders below it.
#  2. A folder's public headers are its contract: the headers in <folder>/internal/ are
#     private to the folder. Only the folder's own sources and its own tests
#     (tests/<folder>/) may include them, and no public header of the folder may include one
#     (else its types would be part of the contract after all).
#  3. The executor contract (docs/architecture.md): an executor takes a Schedule and its
#     OpCosts, never a scenario, so the executors' files include neither planner/scenario.h
#     nor planner/plan.h.
#
#   tools/check_layout.sh              check the repository this script lives in
#   tools/check_layout.sh --root DIR   check another tree (the test uses a broken copy)
#
# Prints one line per violation (file:line: what is wrong) and exits 1 if there is any.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = "--root" ] && root=$(cd "$2" && pwd)
cd "$root"

# What each library folder may include besides itself (DESIGN.md, "Dependencies point one
# way"). tools/ and tests/ sit on top and may include any public header.
declare -A allowed=(
  [models]=""
  [planner]="models"
  [sim]="models planner"
  [runtime]="models planner"
  [calibrate]="models planner runtime"
)

violations=0
report() { echo "$1"; violations=$((violations + 1)); }

sources() { { find "$@" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' \) 2>/dev/null || true; } | sort; }

# Every project include of a file: "line<TAB>folder<TAB>path".
project_includes() {
  grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"(models|planner|sim|runtime|calibrate|tools)/' "$1" |
    sed -E 's/^([0-9]+):[^"]*"(([a-z]+)\/[^"]*)".*/\1\t\3\t\2/'
}

# Rule 1: the direction of dependencies between library folders.
for folder in "${!allowed[@]}"; do
  for file in $(sources "$folder"); do
    while IFS=$'\t' read -r line target path; do
      [ -z "$line" ] || [ "$target" = "$folder" ] && continue
      case " ${allowed[$folder]} " in
        *" $target "*) ;;
        *) report "$file:$line: $folder/ includes $path, but $folder may include only: ${allowed[$folder]:-(nothing outside itself)}" ;;
      esac
    done < <(project_includes "$file")
  done
done

# Rule 2: internal headers stay inside their folder (and its tests).
for file in $(sources models planner sim runtime calibrate tools tests); do
  owner=${file%%/*}
  [ "$owner" = tests ] && owner=$(echo "$file" | cut -d/ -f2)
  while IFS=$'\t' read -r line target path; do
    [ -z "$line" ] && continue
    case "$path" in
      "$target"/internal/*)
        if [ "$owner" != "$target" ]; then
          report "$file:$line: includes $path, which is private to $target/ (use its public headers)"
        elif [[ "$file" != tests/* && "$file" != */internal/* && "$file" == *.h ]]; then
          report "$file:$line: the public header $file includes the private $path (move it out of internal/ or stop exposing it)"
        fi
        ;;
    esac
  done < <(project_includes "$file")
done

# Rule 3: the executors see Schedule + OpCosts only.
executor_files=$(sources sim/analytic.h sim/analytic.cpp sim/simgrid_engine.h sim/simgrid_engine.cpp \
  sim/simgrid_flows.cpp sim/internal/simgrid_flows.h sim/simgrid_platform.h sim/simgrid_platform.cpp \
  sim/simgrid_options.h runtime)
for file in $executor_files; do
  while IFS=$'\t' read -r line target path; do
    case "$path" in
      planner/scenario.h | planner/plan.h)
        report "$file:$line: an executor includes $path; executors take (Schedule, OpCosts, their options) only" ;;
    esac
  done < <(project_includes "$file")
done

if [ "$violations" -gt 0 ]; then
  echo "check_layout: $violations violation(s) of DESIGN.md's layout rules" >&2
  exit 1
fi
echo "check_layout: dependencies point one way; internal headers stay in their folders"
