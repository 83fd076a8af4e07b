#!/usr/bin/env python3
"""Real PyTorch FSDP memory on one GPU, playing rank 0 of a world of N: the ground truth that
`fsdpsim estimate` is held to (tests/hardware/, tests/data/hardware/README.md).

    python3 tools/hardware/fsdp_memory.py --out DIR [--time-budget S]      # on a GPU (run_all.sh)
    python3 tools/hardware/fsdp_memory.py --dry-run [--fsdpsim build/tools/fsdpsim --check K]

Writes DIR/memory.csv (one row per case, flushed as each case ends) and DIR/memory_snapshot.pickle.gz
(torch.cuda.memory._snapshot() of the first case's measured step; --snapshot-case ID names other
cases, --snapshot-from init starts the history before the model is built). --dry-run prints the cases and
the fsdpsim command of each without importing torch; with --fsdpsim it also runs `estimate --json`
for the first K cases, to show fsdpsim accepts every override.

Every choice, and why (fsdpsim must model exactly what is measured):

- World of N on one GPU: the "fake" process group (torch.testing._internal.distributed.fake_pg:
  FakeStore, dist.init_process_group("fake", rank=0, world_size=N)). Collectives are no-ops, but
  FSDP allocates every buffer it would for a real world of N (shards, all-gather outputs,
  reduce-scatter inputs and outputs), so rank 0's memory is real; torchtitan's fake-backend dry
  run rests on the same fact. N = 8, 64, 512; fsdpsim's cluster is N/8 nodes of 8 GPUs
  (FULL_SHARD over the whole world, like the fake group; memory does not depend on the nodes).
- Models: real Hugging Face classes (AutoModelForCausalLM.from_config) built from the configs
  fsdpsim imports (`hf:`): models/hf/llama3.2-1b.json (16 layers, tied embeddings) and
  tests/data/hardware/inputs/llama3.1-8b-8layers.json (Llama-3.1-8B's shapes, 8 of its 32 layers, so
  a case runs in seconds). The CSV row names the very file fsdpsim reads.
- Precision: the model is built in fp32 (master weights = the sharded parameters, fsdpsim
  master_dtype fp32); FSDP mixed precision param_dtype bf16, reduce_dtype fp32 (FSDP2
  MixedPrecisionPolicy, FSDP1 MixedPrecision, buffers left alone).
- Autocast cases (FSDP2 and FSDP1, N = 8, `-autocast` in the id): fp32 parameters gathered, the
  forward and the loss under torch.autocast("cuda", dtype=torch.bfloat16), backward outside it.
  FSDP1 as Lightning's FSDPStrategy "bf16-mixed" (lightning/fabric/plugins/precision/fsdp.py:
  MixedPrecision(param_dtype=float32, reduce_dtype=bfloat16, buffer_dtype=bfloat16)); FSDP2 with
  MixedPrecisionPolicy(param_dtype=None, reduce_dtype=bfloat16). fsdpsim training.param_dtype
  fp32, matmul_dtype bf16, reduce_dtype bf16 (docs/cost-model.md section 10: fp32 gathers, each
  Linear's bf16 weight copy saved for backward, and under FSDP2 with checkpointing autocast's
  cache holding every copy until the forward ends: the claim these cases test).
- Construction: on the meta device, then sharded, then materialised on the GPU (fsdpsim `init:
  meta`): FSDP2 fully_shard then model.to_empty(cuda), as torchtitan does; FSDP1 with a
  param_init_fn that materialises each module's own tensors on the GPU and keeps tied weights
  tied (to_empty would untie Llama-3.2's embedding and output layer and FSDP1 would then hold the
  vocabulary matrix twice), remembering only the tied ones (since 2026-11-27's runs, which held
  every parameter until FSDP() returned: their FSDP1 reserved figures include that). Parameters are then drawn from N(0, 0.02) on the local shards and the
  rotary buffers recomputed: values do not change memory, but garbage could make NaNs.
- Wrapping: every decoder layer its own unit, the rest (embedding, final norm, output layer) the
  root (fsdpsim fsdp.wrap.policy block). FSDP1: ModuleWrapPolicy({decoder layer class}),
  use_orig_params=False (fsdpsim does not model use_orig_params' alignment padding),
  limit_all_gathers=True, backward_prefetch=BACKWARD_PRE, forward_prefetch=False,
  sync_module_states=False: FSDP1's defaults. reshard_after_forward=false is FSDP1's
  SHARD_GRAD_OP (fsdpsim fsdp.strategy SHARD_GRAD_OP) and FSDP2's fully_shard(...,
  reshard_after_forward=False) under FULL_SHARD.
- Activation checkpointing "full": torch's non-reentrant checkpoint_wrapper around every decoder
  layer (FSDP2: applied before fully_shard, as torchtitan; FSDP1: apply_activation_checkpointing
  after wrapping, as the FSDP tutorial). fsdpsim training.activation_checkpointing full.
- Attention: SDPA (attn_implementation="sdpa") restricted to the flash kernel
  (sdpa_kernel(FLASH_ATTENTION); PyTorch's flash kernel is FlashAttention-2): fsdpsim
  training.attention flash2. No attention mask is passed, so Hugging Face calls SDPA with
  is_causal and enable_gqa (no repeat_kv copies). If the flash kernel refuses, the case reruns
  with SDPA's own choice and says training.attention=auto.
- Loss: labels = input_ids, so the model computes Hugging Face's ForCausalLMLoss (logits.float()
  then cross-entropy): fsdpsim training.loss fp32_upcast. Only `.loss` is kept from the output
  (holding the output object would keep the bf16 logits alive into backward, which a training
  loop that uses only the loss does not). use_cache=False (a DynamicCache would keep every
  layer's keys and values alive, defeating checkpointing). Eager (no torch.compile):
  fsdpsim training.torch_compile false.
- Batch: micro_batch 1, seq_len 4096, one micro-step per step (global_batch = N); the token ids
  are made inside the measured step (fsdpsim allocates the input batch in the step).
- Optimizer: torch.optim.AdamW(foreach=True) (fsdpsim adamw: two fp32 states per element and one
  foreach intermediate list the size of the shard), zero_grad(set_to_none=True) after the step.
- Steps: step 1 makes the optimizer state (AdamW creates it lazily in its first step); step 2 is
  the measured step, the steady state fsdpsim plans (optimizer state alive from the start,
  gradients freed by zero_grad): the peak-memory counters are reset before its forward, its
  backward and its optimizer step (torch.cuda.reset_peak_memory_stats), and read after each
  (torch.cuda.synchronize first): peak_* = the largest of the three. Reserved memory is taken as
  PyTorch leaves it after step 1 (what nvidia-smi shows in training). Step 3 runs after
  torch.cuda.empty_cache() (fresh_cache_*: the caching allocator starting from only the live
  tensors' segments, closer to a replay that starts from an empty cache).
- Raw figures: memory_allocated counts everything in PyTorch's allocator, cuBLAS workspaces
  included (made once per thread and stream by the warm-up at start and kept by PyTorch); their
  size is process_baseline_allocated_bytes. No subtraction is made here: the CSV says what
  PyTorch reports, the hardware CTest compares that with fsdpsim.
- PYTORCH_CUDA_ALLOC_CONF is unset before torch is imported (fsdpsim's allocator defaults); its
  earlier value, if any, is printed.
- A process per FSDP1 case, and one per world size for the FSDP2 cases (the default; the first
  GPU run, 2026-11-27, had all cases in one process and saw FSDP1 leave memory behind from case
  to case); --one-process runs them all in this process. Between cases in a process: del,
  gc.collect(), torch.cuda.empty_cache(), reset_peak_memory_stats(); case_baseline_allocated_bytes
  shows whether anything leaked from earlier cases (the hardware CTest excludes such a row). The
  process group is re-made when N changes.
- A time budget (--time-budget) stops before a case that would not finish in time; the cases are
  ordered so that a cut keeps the most informative (N = 8 first, FSDP2 before FSDP1, reshard
  before keep). A case that fails (out of memory, an API change) is a row with status error and
  the exception; the others still run.
"""

import argparse
import gc
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwcommon as hw  # noqa: E402

MODELS = [
    # (name, HF config fsdpsim reads with hf:, decoder layers in it)
    ("llama3.2-1b", "models/hf/llama3.2-1b.json", 16),
    ("llama3.1-8b-8layers", "tests/data/hardware/inputs/llama3.1-8b-8layers.json", 8),
]
WORLDS = [8, 64, 512]
MICRO_BATCH = 1
SEQ_LEN = 4096
# (fsdp version, activation checkpointing, reshard_after_forward), most informative first.
VARIANTS = [
    (2, "none", True), (2, "full", True), (1, "none", True), (1, "full", True),
    (2, "none", False), (2, "full", False), (1, "none", False), (1, "full", False),
]

COLUMNS = [
    "case_id", "status", "error",
    "framework", "model", "hf_config", "num_layers", "world_size", "micro_batch", "seq_len",
    "activation_checkpointing", "reshard_after_forward", "param_dtype", "reduce_dtype", "master_dtype",
    "optimizer", "loss", "attention",
    "fsdpsim_scenario", "fsdpsim_overrides",
    "peak_allocated_bytes", "peak_reserved_bytes",
    "forward_peak_allocated_bytes", "forward_peak_reserved_bytes",
    "backward_peak_allocated_bytes", "backward_peak_reserved_bytes",
    "optimizer_peak_allocated_bytes", "optimizer_peak_reserved_bytes",
    "step_start_allocated_bytes", "step_start_reserved_bytes",
    "step1_peak_allocated_bytes", "step1_peak_reserved_bytes",
    "fresh_cache_peak_allocated_bytes", "fresh_cache_peak_reserved_bytes",
    "case_baseline_allocated_bytes", "process_baseline_allocated_bytes",
    "device_used_bytes", "alloc_retries", "seconds",
] + hw.PROVENANCE_COLUMNS


class Case:
    def __init__(self, model, hf_config, layers, version, ac, reshard, world, attention="flash2", seq_len=SEQ_LEN,
                 autocast=False):
        self.model, self.hf_config, self.layers = model, hf_config, layers
        self.version, self.ac, self.reshard, self.world = version, ac, reshard, world
        self.micro_batch, self.seq_len, self.attention = MICRO_BATCH, seq_len, attention
        # autocast: fp32 parameters under bf16 autocast (Lightning's "bf16-mixed"); else FSDP's
        # bf16 mixed precision. The dtypes each means, as fsdpsim states them.
        self.autocast = autocast
        self.param_dtype, self.reduce_dtype = ("fp32", "bf16") if autocast else ("bf16", "fp32")
        self.id = "%s-fsdp%d-ac_%s-reshard_%s-n%d" % (model, version, ac, "true" if reshard else "false", world)
        if attention != "flash2" or seq_len != SEQ_LEN:
            self.id += "-%s-s%d" % (attention, seq_len)
        if autocast:
            self.id += "-autocast"

    def strategy(self):
        # FSDP1 expresses "keep the parameters after forward" as a sharding strategy.
        if self.version == 1:
            return "FULL_SHARD" if self.reshard else "SHARD_GRAD_OP"
        return "FULL_SHARD"

    def overrides(self, cluster_file, attention="flash2"):
        """The fsdpsim --set list that describes exactly this case (module docstring)."""
        o = ["model=hf:" + self.hf_config, "cluster=" + cluster_file]
        o += hw.world_overrides(self.world)
        o += [
            "training.micro_batch=%d" % self.micro_batch,
            "training.seq_len=%d" % self.seq_len,
            "training.global_batch=%d" % (self.micro_batch * self.world),
            "training.param_dtype=%s" % self.param_dtype, "training.reduce_dtype=%s" % self.reduce_dtype,
            "training.master_dtype=fp32",
            "training.optimizer=adamw",
            "training.activation_checkpointing=%s" % self.ac,
            "training.loss=fp32_upcast",
            "training.attention=%s" % attention,
            "training.torch_compile=false",
            "fsdp.version=%d" % self.version,
            "fsdp.strategy=%s" % self.strategy(),
            "fsdp.reshard_after_forward=%s" % ("true" if self.reshard else "false"),
            "fsdp.wrap.policy=block",
            "fsdp.forward_prefetch=false",
            "fsdp.backward_prefetch=BACKWARD_PRE",
            "fsdp.cpu_offload=false",
            "init=meta",
        ]
        if self.version == 1:
            o.append("fsdp.limit_all_gathers=true")
        if self.autocast:
            o.append("training.matmul_dtype=bf16")
        return o


# Eager attention (Hugging Face's eager_attention_forward: the scores materialised, softmax in
# fp32), the case fsdpsim once under-counted threefold: FSDP2, no checkpointing, N = 8, seq 2048
# (the 1B model's 16 layers of saved scores would not fit at 4096 without checkpointing).
EAGER_SEQ_LEN = 2048


def all_cases():
    cases = []
    for world in WORLDS:
        for version, ac, reshard in VARIANTS:
            for name, cfg, layers in MODELS:
                cases.append(Case(name, cfg, layers, version, ac, reshard, world))
        if world == 8:  # after N = 8's cases, before the larger worlds (a time budget cuts from the end)
            for name, cfg, layers in MODELS:
                cases.append(Case(name, cfg, layers, 2, "none", True, 8, attention="eager", seq_len=EAGER_SEQ_LEN))
            for version in (2, 1):
                for name, cfg, layers in MODELS:
                    for ac in ("none", "full"):
                        cases.append(Case(name, cfg, layers, version, ac, True, 8, autocast=True))
    return cases


def describe(case, cluster_file, attention=None):
    attention = attention or case.attention
    return {
        "case_id": case.id,
        "framework": "fsdp%d" % case.version,
        "model": case.model,
        "hf_config": case.hf_config,
        "num_layers": case.layers,
        "world_size": case.world,
        "micro_batch": case.micro_batch,
        "seq_len": case.seq_len,
        "activation_checkpointing": case.ac,
        "reshard_after_forward": "true" if case.reshard else "false",
        "param_dtype": case.param_dtype,
        "reduce_dtype": case.reduce_dtype,
        "master_dtype": "fp32",
        "optimizer": "adamw",
        "loss": "fp32_upcast",
        "attention": attention,
        "fsdpsim_scenario": hw.BASE_SCENARIO,
        "fsdpsim_overrides": ";".join(case.overrides(cluster_file, attention)),
    }


# ---- dry run (no torch) ------------------------------------------------------------------------

def dry_run(args):
    cases = select(all_cases(), args)
    cluster = hw.cluster_file_for(args.gpu_name)
    print("# %d cases (cluster %s); fsdpsim scenario %s with the overrides below" % (len(cases), cluster, hw.BASE_SCENARIO))
    for c in cases:
        print(c.id)
        print("   " + hw.estimate_command(c.overrides(cluster, c.attention), args.fsdpsim or "fsdpsim", "--json"))
    if not args.fsdpsim:
        return 0
    failures = 0
    import json
    for c in cases[: args.check]:
        cmd = hw.estimate_argv(args.fsdpsim, hw.BASE_SCENARIO, c.overrides(cluster, c.attention), "--json")
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=hw.REPO)
        if r.returncode != 0:
            failures += 1
            print("REFUSED %s: %s" % (c.id, r.stderr.strip()))
            continue
        m = json.loads(r.stdout)["memory"]
        print("accepted %-48s predicted peak allocated %14d B, reserved %14d B" %
              (c.id, m["peak_allocated_bytes"], m["peak_reserved_bytes"]))
    return 1 if failures else 0


def select(cases, args):
    if getattr(args, "case_ids", None):
        wanted = args.case_ids.split(",")
        cases = [c for c in cases if c.id in wanted]
    if args.only:
        cases = [c for c in cases if any(s in c.id for s in args.only)]
    if args.max_cases:
        cases = cases[: args.max_cases]
    return cases


# ---- measurement (torch) -----------------------------------------------------------------------

class Torch:
    """The imports a measurement needs, made once."""

    def __init__(self):
        import torch
        import torch.distributed as dist
        import transformers
        self.torch, self.dist, self.transformers = torch, dist, transformers
        from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend
        self.FakeStore = FakeStore
        from torch.distributed.device_mesh import init_device_mesh
        self.init_device_mesh = init_device_mesh
        try:
            from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
        except ImportError:  # before 2.6
            from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy
        self.fully_shard, self.MixedPrecisionPolicy = fully_shard, MixedPrecisionPolicy
        from torch.distributed.fsdp import (FullyShardedDataParallel, MixedPrecision, ShardingStrategy,
                                            BackwardPrefetch)
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        self.FSDP, self.MixedPrecision = FullyShardedDataParallel, MixedPrecision
        self.ShardingStrategy, self.BackwardPrefetch, self.ModuleWrapPolicy = ShardingStrategy, BackwardPrefetch, ModuleWrapPolicy
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            checkpoint_wrapper, CheckpointImpl, apply_activation_checkpointing)
        self.checkpoint_wrapper, self.CheckpointImpl = checkpoint_wrapper, CheckpointImpl
        self.apply_activation_checkpointing = apply_activation_checkpointing
        from torch.nn.attention import sdpa_kernel, SDPBackend
        self.sdpa_kernel, self.SDPBackend = sdpa_kernel, SDPBackend
        self.world = None
        self.mesh = None

    def ensure_world(self, world):
        if self.world == world:
            return
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
        self.dist.init_process_group("fake", store=self.FakeStore(), rank=0, world_size=world)
        self.mesh = self.init_device_mesh("cuda", (world,))
        self.world = world


def make_config(T, hf_dict):
    """AutoConfig from the catalog's config dict, use_cache off; the dtype keys dropped (the model
    is built in fp32 and cast by FSDP). transformers 5 renamed rope_scaling/rope_theta into
    rope_parameters: tried as given first, then converted."""
    d = dict(hf_dict)
    model_type = d.pop("model_type")
    for k in ("torch_dtype", "dtype"):
        d.pop(k, None)
    d["use_cache"] = False
    try:
        return T.transformers.AutoConfig.for_model(model_type, **d)
    except Exception:
        if "rope_scaling" not in d:
            raise
        d2 = dict(d)
        rope = dict(d2.pop("rope_scaling") or {})
        rope.setdefault("rope_theta", d2.pop("rope_theta", 10000.0))
        d2["rope_parameters"] = rope
        return T.transformers.AutoConfig.for_model(model_type, **d2)


def build_meta_model(T, case):
    torch = T.torch
    config = make_config(T, hw.load_hf_config_dict(case.hf_config))
    if getattr(config, "num_hidden_layers", None) != case.layers:
        raise RuntimeError("%s: num_hidden_layers %r, expected %d" % (case.hf_config, config.num_hidden_layers, case.layers))
    implementation = "eager" if case.attention == "eager" else "sdpa"
    with torch.device("meta"):
        try:
            model = T.transformers.AutoModelForCausalLM.from_config(config, attn_implementation=implementation)
        except TypeError:
            config._attn_implementation = implementation
            model = T.transformers.AutoModelForCausalLM.from_config(config)
    model = model.float()  # fp32 master weights whatever dtype the library defaulted to
    model.train()
    return model, config


def decoder_layers(model):
    layers = model.model.layers
    if len(layers) == 0:
        raise RuntimeError("the model has no decoder layers")
    return layers


def fix_rotary(T, model, config):
    """Recompute the rotary buffers (to_empty left them uninitialised) from a fresh module on the GPU."""
    torch = T.torch
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding"):
            try:
                fresh = type(m)(config=config, device=torch.device("cuda"))
            except TypeError:
                fresh = type(m)(config, device=torch.device("cuda"))
            for name, buf in fresh.named_buffers(recurse=False):
                getattr(m, name).copy_(buf)


def init_params(T, model):
    torch = T.torch
    with torch.no_grad():
        for p in model.parameters():
            t = p.to_local() if hasattr(p, "to_local") else p
            t.normal_(0.0, 0.02)


def wrap_fsdp2(T, case, model):
    torch = T.torch
    mp = (T.MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.bfloat16) if case.autocast
          else T.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    layers = decoder_layers(model)
    for i in range(len(layers)):
        layer = layers[i]
        if case.ac == "full":
            layer = T.checkpoint_wrapper(layer, checkpoint_impl=T.CheckpointImpl.NO_REENTRANT)
            layers[i] = layer
        T.fully_shard(layer, mesh=T.mesh, mp_policy=mp, reshard_after_forward=case.reshard)
    T.fully_shard(model, mesh=T.mesh, mp_policy=mp, reshard_after_forward=case.reshard)
    model.to_empty(device=torch.device("cuda"))
    return model


def wrap_fsdp1(T, case, model):
    torch = T.torch
    import functools
    cuda = torch.device("cuda", torch.cuda.current_device())
    # Tied weights (Llama-3.2's embedding and output layer: one parameter under two names) must
    # stay one tensor, so only they are remembered across modules: id(meta parameter) -> (that
    # parameter, its GPU parameter); the meta parameter is kept alive so that its id cannot be
    # reused. Every other parameter is referenced by its module alone, so FSDP frees it once it has
    # flattened it into its unit's flat parameter, as with a param_init_fn that calls
    # module.to_empty(recurse=False). The first GPU run (2026-11-27) remembered every parameter
    # until FSDP() returned: the whole unsharded model in fp32 stayed alive through FSDP1's init,
    # and the caching allocator kept its segments, so FSDP1's reserved memory measured the script
    # (docs/accuracy.md, "Why reserved is off").
    counts = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        counts[id(p)] = counts.get(id(p), 0) + 1
    tied = {i for i, n in counts.items() if n > 1}
    made = {}

    def materialise(module):
        for name, p in list(module._parameters.items()):
            if p is None or not p.is_meta:
                continue
            gpu = made[id(p)][1] if id(p) in made else torch.nn.Parameter(
                torch.empty_like(p, device=cuda), requires_grad=p.requires_grad)
            if id(p) in tied:
                made[id(p)] = (p, gpu)
            module._parameters[name] = gpu
        for name, b in list(module._buffers.items()):
            if b is not None and b.is_meta:
                module._buffers[name] = torch.empty_like(b, device=cuda)

    layer_cls = type(decoder_layers(model)[0])
    model = T.FSDP(
        model,
        auto_wrap_policy=T.ModuleWrapPolicy({layer_cls}),
        mixed_precision=(T.MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.bfloat16,
                                          buffer_dtype=torch.bfloat16) if case.autocast
                         else T.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)),
        sharding_strategy=T.ShardingStrategy.FULL_SHARD if case.reshard else T.ShardingStrategy.SHARD_GRAD_OP,
        backward_prefetch=T.BackwardPrefetch.BACKWARD_PRE,
        forward_prefetch=False,
        limit_all_gathers=True,
        use_orig_params=False,
        sync_module_states=False,
        device_id=cuda,
        param_init_fn=materialise,
    )
    # FSDP has flattened the materialised parameters into its flat parameters: drop the tied
    # ones' references too, or they stay alive (the first GPU run, 2026-11-27, held every
    # parameter this way and measured 4.94 GB more at the 1B model's step start).
    made.clear()
    if case.ac == "full":
        T.apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=functools.partial(T.checkpoint_wrapper, checkpoint_impl=T.CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, layer_cls))
    return model


class Peaks:
    """Reset the peak counters, run a phase, read them (after a synchronize)."""

    def __init__(self, torch):
        self.torch = torch

    def reset(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.reset_peak_memory_stats()

    def read(self):
        self.torch.cuda.synchronize()
        return self.torch.cuda.max_memory_allocated(), self.torch.cuda.max_memory_reserved()


def train_step(T, case, model, opt, vocab, force_flash, peaks=None):
    """One step; with `peaks`, the peak of each phase {forward, backward, optimizer}."""
    torch = T.torch
    ctx = T.sdpa_kernel([T.SDPBackend.FLASH_ATTENTION]) if force_flash else _null()
    out = {}
    with ctx:
        if peaks:
            peaks.reset()
            out["start"] = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        ids = torch.randint(0, vocab, (case.micro_batch, case.seq_len), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16) if case.autocast else _null():
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss  # only the loss is kept
        if peaks:
            out["forward"] = peaks.read()
            peaks.reset()
        loss.backward()
        if peaks:
            out["backward"] = peaks.read()
            peaks.reset()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss, ids
        if peaks:
            out["optimizer"] = peaks.read()
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def clean(torch):
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def save_snapshot(torch, snapshot, path):
    """Pickled and gzipped; frames trimmed when it would pass 15 MiB (the device returns files of at
    most 16 MiB)."""
    import gzip
    import pickle
    data = gzip.compress(pickle.dumps(snapshot), compresslevel=6)
    if len(data) > 15 * 2**20:
        for trace in snapshot.get("device_traces", []):
            for e in trace:
                e["frames"] = e.get("frames", [])[:2]
        for seg in snapshot.get("segments", []):
            for b in seg.get("blocks", []):
                b["frames"] = b.get("frames", [])[:2]
        data = gzip.compress(pickle.dumps(snapshot), compresslevel=9)
    if len(data) > 15 * 2**20:
        hw.log("memory snapshot still %d bytes after trimming: not written" % len(data))
        return
    with open(path, "wb") as f:
        f.write(data)
    hw.log("wrote %s (%d bytes)" % (path, len(data)))


def run_case(T, case, prov, process_baseline, force_flash, snapshot_path, snapshot_from_init=False):
    torch = T.torch
    cluster = hw.cluster_file_for(prov["gpu_name"])
    row = describe(case, cluster, case.attention if (force_flash or case.attention == "eager") else "auto")
    row.update(prov)
    row["process_baseline_allocated_bytes"] = process_baseline
    t0 = time.time()
    T.ensure_world(case.world)
    clean(torch)
    row["case_baseline_allocated_bytes"] = torch.cuda.memory_allocated()
    model = opt = None
    recording = False
    try:
        if snapshot_path and snapshot_from_init:
            # --snapshot-from init: the history of building and sharding the model and of step 1
            # too (what the cache holds when step 2 begins).
            recording = _start_history(torch)
        model, config = build_meta_model(T, case)
        vocab = config.vocab_size
        model = wrap_fsdp2(T, case, model) if case.version == 2 else wrap_fsdp1(T, case, model)
        init_params(T, model)
        fix_rotary(T, model, config)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
        peaks = Peaks(torch)
        # Step 1: makes the optimizer state.
        peaks.reset()
        train_step(T, case, model, opt, vocab, force_flash)
        row["step1_peak_allocated_bytes"], row["step1_peak_reserved_bytes"] = peaks.read()
        # Step 2: measured (the steady state).
        if snapshot_path and not recording:
            recording = _start_history(torch)
        p = train_step(T, case, model, opt, vocab, force_flash, peaks)
        if recording:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            recording = False
            save_snapshot(torch, snap, snapshot_path)
        free, total = torch.cuda.mem_get_info()
        row["device_used_bytes"] = total - free
        row["step_start_allocated_bytes"], row["step_start_reserved_bytes"] = p["start"]
        for phase in ("forward", "backward", "optimizer"):
            row[phase + "_peak_allocated_bytes"], row[phase + "_peak_reserved_bytes"] = p[phase]
        row["peak_allocated_bytes"] = max(p[ph][0] for ph in ("forward", "backward", "optimizer"))
        row["peak_reserved_bytes"] = max(p[ph][1] for ph in ("forward", "backward", "optimizer"))
        # Step 3: from an emptied cache.
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        p3 = train_step(T, case, model, opt, vocab, force_flash, peaks)
        row["fresh_cache_peak_allocated_bytes"] = max(p3[ph][0] for ph in ("forward", "backward", "optimizer"))
        row["fresh_cache_peak_reserved_bytes"] = max(p3[ph][1] for ph in ("forward", "backward", "optimizer"))
        row["alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", "")
        row["status"] = "ok"
    finally:
        if recording:
            torch.cuda.memory._record_memory_history(enabled=None)
        del opt, model
        clean(torch)
    row["seconds"] = "%.2f" % (time.time() - t0)
    return row


def snapshot_file(args, case, first_done):
    """Where this case's memory snapshot goes, or None: the --snapshot-case cases' own files, else the
    first case's memory_snapshot.pickle.gz."""
    if args.no_snapshot:
        return None
    if args.snapshot_case:
        return os.path.join(args.out, "memory_snapshot-%s.pickle.gz" % case.id) if case.id in args.snapshot_case else None
    return None if first_done else os.path.join(args.out, "memory_snapshot.pickle.gz")


def _start_history(torch):
    """Record the allocator's history (Python stacks only: C++ symbolisation would take longer than
    the step). False when it cannot start: the snapshot is a bonus, not a reason to lose the case."""
    try:
        try:
            torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=200000)
        except TypeError:  # an older signature
            torch.cuda.memory._record_memory_history(max_entries=200000)
        return True
    except Exception as e:  # noqa: BLE001
        hw.log("memory history not recorded: %s" % e)
        return False


def warm_up(torch):
    """cuBLAS handles and workspaces for this thread and for autograd's device thread (which runs
    backward), made before any case so that every case sees the same baseline."""
    try:
        a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        (a @ a).float().sum().backward()
        del a
    except Exception as e:  # noqa: BLE001 (the cases still run; their baselines show the difference)
        hw.log("warm-up failed: %s: %s" % (type(e).__name__, e))
    clean(torch)
    return torch.cuda.memory_allocated()


def measure(args):
    previous = os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if previous is not None:
        hw.log("PYTORCH_CUDA_ALLOC_CONF was %r: unset (fsdpsim's allocator defaults)" % previous)
    t_start = time.time()
    T = Torch()
    torch = T.torch
    if not torch.cuda.is_available():
        hw.log("error: no CUDA device visible to torch")
        return 2
    prov = hw.provenance(torch)
    hw.log("fsdp_memory: %s, torch %s, CUDA %s, transformers %s, driver %s" %
           (prov["gpu_name"], prov["torch"], prov["cuda"], prov["transformers"], prov["driver"]))
    os.makedirs(args.out, exist_ok=True)
    writer = hw.CsvWriter(args.csv or os.path.join(args.out, "memory.csv"), COLUMNS)
    process_baseline = warm_up(torch)
    cases = select(all_cases(), args)
    longest = 0.0
    snapshot_done = args.no_snapshot
    for i, case in enumerate(cases):
        elapsed = time.time() - t_start
        if args.time_budget and elapsed + 1.5 * max(longest, 5.0) > args.time_budget:
            hw.log("time budget (%g s) reached after %.0f s: %d cases not run" % (args.time_budget, elapsed, len(cases) - i))
            for rest in cases[i:]:
                row = describe(rest, hw.cluster_file_for(prov["gpu_name"]))
                row.update(prov)
                row["status"] = "skipped"
                row["error"] = "time budget reached before this case"
                writer.write(row)
            break
        t0 = time.time()
        snapshot_path = snapshot_file(args, case, snapshot_done)
        row = None
        for force_flash in (True, False):
            try:
                row = run_case(T, case, prov, process_baseline, force_flash, snapshot_path,
                               args.snapshot_from == "init")
                snapshot_done = snapshot_done or snapshot_path is not None
                break
            except Exception as e:  # noqa: BLE001 (every failure is recorded, the next case runs)
                text = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                refused = force_flash and "No available kernel" in str(e)
                if refused:
                    hw.log("%s: the flash kernel refused (%s); again with SDPA's own choice" % (case.id, text))
                else:
                    traceback.print_exc(file=sys.stderr)
                    row = describe(case, hw.cluster_file_for(prov["gpu_name"]), case.attention if force_flash else "auto")
                    row.update(prov)
                    row["status"] = "error"
                    row["error"] = text[:300]
            # Outside the handler: the exception's frames (holding the model) are gone by now.
            clean(torch)
            if row is not None:
                break
        writer.write(row)
        longest = max(longest, time.time() - t0)
        hw.log("%-50s %-6s peak allocated %s, reserved %s (%.1f s)%s" % (
            case.id, row["status"], row.get("peak_allocated_bytes", "-"), row.get("peak_reserved_bytes", "-"),
            time.time() - t0, (" " + row["error"]) if row.get("error") else ""))
    writer.close()
    if T.dist.is_initialized():
        T.dist.destroy_process_group()
    return 0


# ---- one process per group of cases -----------------------------------------------------------
#
# The first GPU run (2026-11-27, all cases in one process) saw FSDP1 leave memory behind from case
# to case (the allocated bytes before a case grew from 0.07 to 9.3 GB over the run), so every
# later case's figures included earlier cases' tensors. Now each FSDP1 case runs in a process of
# its own, and the FSDP2 cases of one world and attention share one (FSDP2 freed everything there:
# the baseline did not move across them). Each row still records case_baseline_allocated_bytes,
# so a leak would show; the hardware CTest refuses a row whose baseline is not the process's.

def groups_of(cases):
    groups, fsdp2 = [], {}
    for c in cases:
        if c.version != 2:
            groups.append([c])
            continue
        key = (c.world, c.attention, c.seq_len)
        if key not in fsdp2:
            fsdp2[key] = []
            groups.append(fsdp2[key])
        fsdp2[key].append(c)
    return groups


def measure_isolated(args):
    import csv
    import tempfile
    t_start = time.time()
    cases = select(all_cases(), args)
    os.makedirs(args.out, exist_ok=True)
    merged = hw.CsvWriter(os.path.join(args.out, "memory.csv"), COLUMNS)
    scratch = tempfile.mkdtemp()
    snapshot_path = os.path.join(args.out, "memory_snapshot.pickle.gz")
    longest = 0.0
    for gi, group in enumerate(groups_of(cases)):
        left = args.time_budget - (time.time() - t_start) if args.time_budget else None
        if left is not None and left < 1.2 * max(longest, 12.0):
            hw.log("time budget (%g s) reached: %s not run" % (args.time_budget, ", ".join(c.id for c in group)))
            for c in group:
                row = describe(c, hw.cluster_file_for(""))
                row.update(hw.provenance())
                row["status"], row["error"] = "skipped", "time budget reached before this case"
                merged.write(row)
            continue
        child_csv = os.path.join(scratch, "group%d.csv" % gi)
        cmd = [sys.executable, os.path.abspath(__file__), "--one-process", "--out", args.out, "--csv", child_csv,
               "--case-ids", ",".join(c.id for c in group)]
        if args.no_snapshot or (not args.snapshot_case and os.path.exists(snapshot_path)):
            cmd.append("--no-snapshot")
        for c in args.snapshot_case or []:
            cmd += ["--snapshot-case", c]
        cmd += ["--snapshot-from", args.snapshot_from]
        t0 = time.time()
        try:
            ended = "exit %d" % subprocess.run(cmd, timeout=left).returncode
        except subprocess.TimeoutExpired:
            ended = "killed at the time budget"
        longest = max(longest, time.time() - t0)
        done = set()
        if os.path.exists(child_csv):
            with open(child_csv, newline="") as f:
                for row in csv.DictReader(f):
                    done.add(row["case_id"])
                    merged.write(row)
        for c in group:
            if c.id not in done:
                row = describe(c, hw.cluster_file_for(""))
                row.update(hw.provenance())
                row["status"], row["error"] = "error", "the case's process ended (%s) before writing it" % ended
                merged.write(row)
    merged.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="output folder (default $OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print the cases and their fsdpsim commands; no torch")
    ap.add_argument("--fsdpsim", help="with --dry-run: an fsdpsim binary to run estimate --json with")
    ap.add_argument("--check", type=int, default=4, help="with --fsdpsim: how many cases to estimate (default 4)")
    ap.add_argument("--gpu-name", default="NVIDIA H100 80GB HBM3", help="with --dry-run: the GPU assumed")
    ap.add_argument("--only", action="append", help="run only cases whose id contains this (repeatable)")
    ap.add_argument("--max-cases", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds; stop before a case that would not fit")
    ap.add_argument("--columns", action="store_true", help="print the header of memory.csv and exit (no torch)")
    ap.add_argument("--one-process", action="store_true",
                    help="run every selected case in this process (default: a process per group of cases)")
    ap.add_argument("--case-ids", help="comma-separated case ids to run (what the parent gives each process)")
    ap.add_argument("--csv", help="with --one-process: the CSV to write (default OUT/memory.csv)")
    ap.add_argument("--no-snapshot", action="store_true", help="record no memory snapshot")
    ap.add_argument("--snapshot-case", action="append",
                    help="record a memory snapshot of this case (repeatable), written to "
                         "memory_snapshot-<case id>.pickle.gz; default: the first case's, memory_snapshot.pickle.gz")
    ap.add_argument("--snapshot-from", choices=["step2", "init"], default="step2",
                    help="where the snapshot's history starts: the measured step (default) or before the model is "
                         "built (its init and step 1 too; a longer history, trimmed to fit 15 MiB)")
    args = ap.parse_args()
    if args.columns:
        print(",".join(COLUMNS))
        return 0
    if args.dry_run:
        return dry_run(args)
    if args.one_process:
        return measure(args)
    return measure_isolated(args)


if __name__ == "__main__":
    sys.exit(main())
