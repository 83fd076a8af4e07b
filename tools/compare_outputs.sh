#!/usr/bin/env bash
# Checks that a refactoring changed no output: runs two fsdpsim binaries over the same cases
# and compares what they print byte for byte. The cases: every scenario under scenarios/ and
# scenarios/published/, plus --set variations covering every strategy (FULL_SHARD,
# SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, ZERO1), fsdp.version 1 and 2,
# DeepSpeed's master_weights, CPU offload, activation checkpointing, prefetch, the rate
# limiter, reshard_after_forward, gradient accumulation and grad_sync, dtypes, wrap policies.
# Each case's `schedule` and `estimate --json` (stdout, stderr and exit status), `simulate
# --json` of the unmodified scenarios, every sweep under scenarios/sweeps/ and a few wrap
# searches; the fields that time the run itself (wall_seconds, the SimGrid engine's
# cpu_seconds and events_per_second, ...) are removed from sweep and simulate output.
#   tools/compare_outputs.sh BASE_FSDPSIM NEW_FSDPSIM [WORK_DIR]
# With FSDPSIM_BASE_ROOT=DIR (the base commit's checkout), the base binary runs there, on its
# own catalog and model files: for a change that also changes those files (a field added).
# e.g. build the base commit into /tmp/base (git worktree + cmake), then
#   tools/compare_outputs.sh /tmp/base/build/tools/fsdpsim build/tools/fsdpsim
# Both binaries read this checkout's catalog (FSDPSIM_ROOT). Exit status 0 when identical,
# 1 with the differing files listed otherwise. About two minutes per binary on two cores.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
base_bin=$(realpath "$1")
new_bin=$(realpath "$2")
work=${3:-$(mktemp -d)}
cd "$root"
export FSDPSIM_ROOT=$root

cases=()
for f in scenarios/*.json scenarios/published/*.json; do cases+=("$f|"); done
# Bases: FSDP2 Llama-3.1-8B on 2 nodes (so HSDP has replicas), FSDP1 Llama-2-7B HSDP (IBM),
# DeepSpeed ZeRO-3-style GPT-2 XL (fp16, eager attention).
L8=scenarios/llama3.1-8b-8xh100.json
L8N2="cluster.nodes=2 training.global_batch=32"
I7=scenarios/published/r268-ibm-blog-llama2-7b-128xa100-hsdp-no-ac-mb2.json
G=scenarios/published/r295-colossalai-deepspeed-zero3-gpt2-xl-4xa100-40gb.json
for v in 1 2; do
  for s in FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2 ZERO1; do
    # The strategy's own reshard_after_forward (the base files say true); the IBM file's
    # shard group of 8 only for the hybrid strategies.
    raf=true
    case $s in SHARD_GRAD_OP | HYBRID_SHARD_ZERO2) raf=false ;; esac
    sg=128
    case $s in HYBRID_SHARD | HYBRID_SHARD_ZERO2) sg=8 ;; esac
    st="fsdp.version=$v fsdp.strategy=$s fsdp.reshard_after_forward=$raf"
    for m in sharded_param optimizer_state; do
      cases+=("$L8|$L8N2 $st training.master_weights=$m")
      cases+=("$G|$st training.master_weights=$m")
    done
    cases+=("$I7|$st fsdp.shard_group_size=$sg")
    cases+=("$L8|$L8N2 $st fsdp.cpu_offload=true")
    cases+=("$L8|$L8N2 $st training.global_batch=64")  # 2 micro-steps
    cases+=("$L8|$L8N2 $st training.global_batch=96 fsdp.grad_sync=last_micro_step")
    cases+=("$L8|$L8N2 $st training.global_batch=96 fsdp.grad_sync=last_micro_step training.reduce_dtype=bf16")
  done
  for ac in none full selective 2 3; do
    cases+=("$L8|$L8N2 fsdp.version=$v training.activation_checkpointing=$ac")
    cases+=("$G|fsdp.version=$v training.activation_checkpointing=$ac")
  done
  for bp in BACKWARD_PRE BACKWARD_POST NONE; do
    for fp in false true; do
      cases+=("$L8|$L8N2 fsdp.version=$v fsdp.backward_prefetch=$bp fsdp.forward_prefetch=$fp")
      cases+=("$I7|fsdp.version=$v fsdp.backward_prefetch=$bp fsdp.forward_prefetch=$fp fsdp.limit_all_gathers=false")
      cases+=("$I7|fsdp.version=$v fsdp.backward_prefetch=$bp fsdp.forward_prefetch=$fp training.global_batch=512")
    done
  done
  for w in '{"policy":"every_k_blocks","every":2}' '{"policy":"root"}' '{"policy":"size","min_num_params":500000000}' \
           '{"policy":"modules","modules":[["model.layers.0","model.layers.1"],"model.layers.5"]}' torchtitan; do
    cases+=("$L8|$L8N2 fsdp.version=$v fsdp.wrap=$w")
  done
  cases+=("$L8|$L8N2 fsdp.version=$v fsdp.reshard_after_forward=false")
  cases+=("$L8|$L8N2 fsdp.version=$v training.param_dtype=fp32 training.reduce_dtype=fp32")
  cases+=("$L8|$L8N2 fsdp.version=$v training.param_dtype=bf16 training.reduce_dtype=bf16 training.master_dtype=bf16")
  cases+=("$L8|$L8N2 fsdp.version=$v training.optimizer=none")
  cases+=("$L8|$L8N2 fsdp.version=$v training.optimizer=sgd_momentum fsdp.limit_all_gathers=false")
  cases+=("$G|fsdp.version=$v training.loss=chunked")
  cases+=("$G|fsdp.version=$v fsdp.cpu_offload=true training.global_batch=320")
done
# FSDP2's integer reshard_after_forward.
cases+=("$L8|$L8N2 fsdp.version=2 fsdp.reshard_after_forward=4")
cases+=("$L8|$L8N2 fsdp.version=2 fsdp.reshard_after_forward=2 fsdp.cpu_offload=true fsdp.limit_all_gathers=false")
cases+=("$L8|$L8N2 fsdp.version=2 fsdp.strategy=HYBRID_SHARD fsdp.shard_group_size=4 fsdp.reshard_after_forward=2")

wrap_cases=("$I7|" "$I7|fsdp.backward_prefetch=BACKWARD_POST" "$I7|fsdp.backward_prefetch=NONE" "$I7|fsdp.version=2"
            "$I7|fsdp.version=2 fsdp.forward_prefetch=true"
            "$I7|fsdp.reshard_after_forward=false" "$L8|fsdp.reshard_after_forward=4" "$G|")

# Removes the fields that measure the run itself (they differ from run to run).
strip_clock='import json, sys
d = json.load(sys.stdin)
for k in ("wall_seconds", "refine_seconds"): d.pop(k, None)
for k in ("dp", "simgrid"):
    if isinstance(d.get(k), dict):
        for f in ("seconds", "build_seconds", "wall_seconds", "cpu_seconds", "events_per_second"): d[k].pop(f, None)
json.dump(d, sys.stdout, indent=1, sort_keys=True)'

# dump BINARY DIR: every case's outputs into DIR.
dump() {
  local bin=$1 out=$2 i=0 c f sets s args id
  mkdir -p "$out"
  for c in "${cases[@]}"; do
    f=${c%%|*}
    sets=${c#*|}
    args=()
    for s in $sets; do args+=(--set "$s"); done
    id=$(printf "%03d" $i)
    echo "$f $sets" > "$out/$id.case"
    "$bin" schedule --scenario "$f" "${args[@]}" > "$out/$id.schedule.json" 2> "$out/$id.schedule.err"
    echo "rc=$?" >> "$out/$id.schedule.err"
    "$bin" estimate --scenario "$f" "${args[@]}" --json > "$out/$id.estimate.json" 2> "$out/$id.estimate.err"
    echo "rc=$?" >> "$out/$id.estimate.err"
    if [ -z "$sets" ]; then
      "$bin" simulate --scenario "$f" --json 2> "$out/$id.simulate.err" | python3 -c "$strip_clock" > "$out/$id.simulate.json"
    fi
    i=$((i + 1))
  done
  for sw in scenarios/sweeps/*.json; do
    id=sweep-$(basename "$sw" .json)
    "$bin" sweep --sweep "$sw" --json --threads 2 2> "$out/$id.err" | python3 -c "$strip_clock" > "$out/$id.json"
  done
  i=0
  for c in "${wrap_cases[@]}"; do
    f=${c%%|*}
    sets=${c#*|}
    args=()
    for s in $sets; do args+=(--set "$s"); done
    echo "$f $sets" > "$out/wrap-$i.case"
    "$bin" sweep --scenario "$f" "${args[@]}" --wrap-search --json --threads 2 --wrap-local-search 50 \
      2> "$out/wrap-$i.err" | python3 -c "$strip_clock" > "$out/wrap-$i.json"
    i=$((i + 1))
  done
}

rm -rf "$work/base" "$work/new"
base_root=${FSDPSIM_BASE_ROOT:-$root}
(cd "$base_root" && export FSDPSIM_ROOT=$base_root && dump "$base_bin" "$work/base")
dump "$new_bin" "$work/new"
files=$(find "$work/base" -type f | wc -l)
if diff -rq "$work/base" "$work/new"; then
  echo "identical: ${#cases[@]} cases, $files files (in $work)"
else
  echo "DIFFERENT (outputs in $work/base and $work/new)"
  exit 1
fi
