#!/usr/bin/env bash
# One-off helper kept for merging branches made before the internal/ split (issue 14):
# rewrites includes of headers that moved to <folder>/internal/.
set -euo pipefail
cd "$(dirname "$0")/.."
for h in planner/plan_policy planner/plan_layout planner/schedule_graph sim/simgrid_flows runtime/executor runtime/allocator runtime/host_comm; do
  d=${h%%/*}; n=${h#*/}
  grep -rl "\"$h.h\"" --include=*.cpp --include=*.h --include=*.cu models planner sim runtime calibrate tools tests 2>/dev/null |
    xargs -r sed -i "s#\"$h.h\"#\"$d/internal/$n.h\"#g" || true
done
