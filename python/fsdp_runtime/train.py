"""The TorchTitan-style training entry point in Python: fsdp-train's job with the model in PyTorch.

    python3 -m fsdp_runtime.train --config configs/debug_model.toml [--training.steps 20 ...]
    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 -m fsdp_runtime.train --config ...
    fsdp-run --no-store --nproc 2 -- /usr/bin/python3 -m fsdp_runtime.train --config ...
    mpirun -np 2 /usr/bin/python3 -m fsdp_runtime.train --config ...

What it shares with fsdp-train (through fsdp_runtime._C, not rewritten): the command line and TOML
reader (every key, default, override and error), the data (tokenizer, data set, the DataLoader's
(seed, step, micro-step, row) windows: rank r reads the same rows as fsdp-train's rank r), the LR
schedule, the metrics line and per-step file, and the safetensors format. The model is the PyTorch
Llama of fsdp_runtime.models.llama (TorchTitan's module tree and names), fully_shard'ed per block then
at the root over backend "fsdp", stepped by torch.optim.AdamW / SGD, clipped by clip_grad_norm_.

Keys it cannot honour are refused naming the key (exit status 2), never ignored: see _refuse().
activation_checkpoint (none, selective with an integer or "op", full) is applied per block as fsdp-train
applies it (spec::block_ac), with torch.utils.checkpoint (non-reentrant) around the block; on torch 1.13
a "selective op" block recomputes its whole forward (models/llama.py: set_activation_checkpointing).
Checkpoints: checkpoint.initial_load_path may name a .safetensors file (weights only, as fsdp-train);
saves (every checkpoint.interval steps and the last) are the weights as step-<N>/model.safetensors.
"""
import datetime
import math
import os
import sys
import time
import tomllib

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import _C, set_cpu_threads, use_best_blas_core
from .fully_shard import MixedPrecisionPolicy, clip_grad_norm_, fully_shard
from .sharded_state import (clear_overlap, full_state_dict, load_full_state_dict, memory, overlap, overlap_seconds,
                            reset_memory_peaks)
from .models.llama import Llama, LlamaArgs, RopeScaling
from .safetensors import load_file, save_file

_DTYPES = {"float32": None, "bfloat16": torch.bfloat16}
# optimizer.name as the configuration spells it (spec::Optimizer's names) -> torch's optimizer over the parameters.
_OPTIMIZERS = {
    "SGD": lambda params, o: torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"],
                                             weight_decay=o["weight_decay"]),
    "AdamW": lambda params, o: torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                                                 weight_decay=o["weight_decay"]),
}


def _launcher_env():
    """RANK / WORLD_SIZE / LOCAL_* from torchrun or fsdp-run as they are; under mpirun from
    OMPI_COMM_WORLD_*, with (on one host, no MASTER_*) a FileStore named after the MPI job.
    Returns torch's init_method (None: env://)."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" not in os.environ:
        return None
    for ours, mpi in (("RANK", "RANK"), ("WORLD_SIZE", "SIZE"), ("LOCAL_RANK", "LOCAL_RANK"),
                      ("LOCAL_WORLD_SIZE", "LOCAL_SIZE")):
        os.environ[ours] = os.environ[f"OMPI_COMM_WORLD_{mpi}"]
    if "MASTER_ADDR" in os.environ:
        return None
    if os.environ["WORLD_SIZE"] != os.environ["LOCAL_WORLD_SIZE"]:
        sys.exit("fsdp_runtime.train: under mpirun across hosts, set MASTER_ADDR and MASTER_PORT (-x) for the store")
    job = os.environ.get("OMPI_MCA_ess_base_jobid") or os.environ.get("PMIX_NAMESPACE", "job")
    return "file://" + os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fsdp-torch-store-{job}".replace("/", "_"))


def _refuse(c):
    """Keys whose value this front end cannot honour: (key, why) for each given a value other than the default."""
    t, p, ck, m = c["training"], c["parallelism"], c["checkpoint"], c["metrics"]
    bad = []
    if c["model"]["name"] != "llama3":
        bad.append(("model.name", f"'{c['model']['name']}': only llama3 has a PyTorch model here"))
    for key in ("param_comm_dtype", "grad_comm_dtype"):
        if t[key] != "default":
            bad.append((f"training.{key}", f"'{t[key]}': MXFP8 communication is fsdp-train's only"))
    if t["mixed_precision_param"] not in _DTYPES:
        bad.append(("training.mixed_precision_param", f"'{t['mixed_precision_param']}'"))
    if p["expert_parallel_degree"] != 1:
        bad.append(("parallelism.expert_parallel_degree", "expert parallelism is fsdp-train's only"))
    if p["plan_file"]:
        bad.append(("parallelism.plan_file", "plans are checked by fsdp-train only"))
    if m["trace_file"]:
        bad.append(("metrics.trace_file", "tracing is fsdp-train's only"))
    if ck["enable"]:
        path = ck["initial_load_path"]
        if path and not path.endswith(".safetensors"):
            bad.append(("checkpoint.initial_load_path", f"'{path}': only a .safetensors file (weights) loads here"))
        for key, default in (("initial_load_in_hf", False), ("load_step", -1), ("last_save_in_hf", False),
                             ("export_dtype", "float32"), ("initial_load_model_only", True)):
            if ck[key] != default:
                bad.append((f"checkpoint.{key}", f"{ck[key]!r}: saves and loads here are float32 weights only"))
    return bad


def _model_args(cfg, c):
    dims, mc = cfg.model(), c["model"]
    if dims["num_experts"]:
        raise _C.ConfigError(f"model.flavor = '{mc['flavor']}': mixture-of-experts models are fsdp-train's only")
    scaling = None
    if mc["rope_scaling"]:
        scaling = RopeScaling(mc["rope_scaling_factor"], mc["rope_low_freq_factor"], mc["rope_high_freq_factor"],
                              float(mc["rope_original_max_position_embeddings"]))
    return LlamaArgs(dim=dims["dim"], n_layers=dims["n_layers"], n_heads=dims["n_heads"], n_kv_heads=dims["n_kv_heads"],
                     hidden=dims["hidden"], vocab=dims["vocab"], seq_len=c["training"]["seq_len"],
                     norm_eps=mc["norm_eps"], rope_theta=mc["rope_theta"], rope_scaling=scaling,
                     init_scheme=mc["init_scheme"])


def _reshard(value):
    # "default": every unit but the root (fully_shard's root keeps its parameters whatever the value).
    return {"default": True, "always": True, "never": False}.get(value, value)


@torch.no_grad()
def init_like_fsdp_train(model, seed, scheme):
    """fsdp-train's initial weights (model/init.h: each value a function of seed, parameter name and element
    index, drawn in C++), so one TOML gives both front ends the same weights and the same loss curve."""
    for name, p in model.named_parameters():
        _C.init_parameter(p.detach().numpy(), name, seed, scheme)


def build_model(cfg, c, mesh):
    """The Llama of the configuration, initialised from training.seed, fully_shard'ed per block then root."""
    model = Llama(_model_args(cfg, c))
    init_like_fsdp_train(model, c["training"]["seed"], c["model"]["init_scheme"])
    # activation_checkpoint per block as fsdp-train's blocks (spec::block_ac), by torch.utils.checkpoint
    model.set_activation_checkpointing([cfg.block_ac(i) for i in range(model.args.n_layers)])
    t, p = c["training"], c["parallelism"]
    mp = MixedPrecisionPolicy(param_dtype=_DTYPES[t["mixed_precision_param"]],
                              reduce_dtype=_DTYPES.get(t["mixed_precision_reduce"], torch.float32) or torch.float32)
    reshard = _reshard(p["fsdp_reshard_after_forward"])
    for block in model.layers:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp, prefetch=p["prefetch"])
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp, prefetch=p["prefetch"])
    return model


def make_optimizer(model, c):
    return _OPTIMIZERS[c["optimizer"]["name"]](model.parameters(), c["optimizer"])


def _tokens(data, b, t):
    return torch.frombuffer(bytearray(data), dtype=torch.int32).view(b, t).long()


def train_step(model, opt, loader, cfg, c, step):
    """One optimizer step over gradient_accumulation_steps micro-batches: (global mean loss, grad norm, lr)."""
    accum = c["training"]["gradient_accumulation_steps"]
    local = torch.zeros(1, dtype=torch.float64)
    for micro in range(accum):
        s, mu, b, t, inputs, targets = loader.next()
        assert (s, mu) == (step, micro), (s, mu, step, micro)
        model.set_requires_gradient_sync(micro == accum - 1)  # reduce-scatter once, after the last micro-batch
        logits = model(_tokens(inputs, b, t))
        # Over float32 logits, as TorchTitan and fsdp-train: bf16 logits would quantise the loss itself.
        loss = F.cross_entropy(logits.reshape(b * t, -1).float(), _tokens(targets, b, t).reshape(-1)) / accum
        loss.backward()
        local += loss.detach().double()
    dist.all_reduce(local, op=dist.ReduceOp.AVG)  # every data-parallel rank's rows weigh the same
    max_norm = c["training"]["max_norm"]
    norm = clip_grad_norm_(model, max_norm if max_norm > 0 else float("inf"))
    lr = cfg.lr(step)
    for group in opt.param_groups:
        group["lr"] = lr
    finite = math.isfinite(local.item()) and math.isfinite(norm.item())
    if finite:
        opt.step()
    opt.zero_grad(set_to_none=True)
    return local.item(), norm.item(), lr, not finite


def save_weights(model, cfg, c, step, rank):
    state = full_state_dict(model, rank0_only=True)  # collective
    if rank == 0:
        path = os.path.join(cfg.resolve_path(c["checkpoint"]["folder"]), f"step-{step}", "model.safetensors")
        save_file(state, path, {"step": str(step), "front_end": "fsdp_runtime.train"})


def main(argv=None):
    if argv is None:  # run as a program: give torch's OpenBLAS this CPU's kernels first (may restart)
        use_best_blas_core()
    argv = sys.argv[1:] if argv is None else argv
    init_method = _launcher_env()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg = _C.TrainConfig(argv, world_size)
        if cfg.help:
            print(_C.TrainConfig.usage())
            return 0
        c = tomllib.loads(cfg.to_toml())
        if cfg.print_config:
            print(f"# fsdp_runtime.train configuration, resolved for {world_size} rank(s)\n{cfg.to_toml()}")
            return 0
        bad = _refuse(c)
        if bad:
            raise _C.ConfigError("\n".join(f"{key}: {why}" for key, why in bad))
        args = _model_args(cfg, c)
        cfg.check_fits_machine_memory()
    except ValueError as e:  # _C.ConfigError
        print(f"fsdp_runtime.train: rank {rank}: configuration: {e}", file=sys.stderr)
        return 2
    if "OPENBLAS_NUM_THREADS" not in os.environ:  # fsdp-run sets it and OMP_NUM_THREADS
        # Each local rank its share of the cores, as fsdp-train; where only OMP_NUM_THREADS is set
        # (torchrun sets 1), torch's pool follows it and OpenBLAS's is brought to the same count.
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        share = max(1, (os.cpu_count() or 1) // local)
        set_cpu_threads(torch.get_num_threads() if "OMP_NUM_THREADS" in os.environ else share)

    timeout = datetime.timedelta(seconds=_C.timeout_sec())  # FSDP_TIMEOUT_SEC, common/knobs.h
    store = _C.RunStore.from_env(timeout)  # fsdp-run (without --no-store) or fsdp-store serves the rendezvous
    if store is not None:
        dist.init_process_group("fsdp", store=store, rank=rank, world_size=world_size, timeout=timeout)
    elif init_method is None and "MASTER_ADDR" not in os.environ and world_size == 1:  # no launcher: one rank
        dist.init_process_group("fsdp", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    else:
        dist.init_process_group("fsdp", init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
    try:
        return _run(cfg, c, args, rank)
    except (RuntimeError, ValueError) as e:
        sys.stdout.flush()
        print(f"fsdp_runtime.train: rank {rank}: {e}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _print(text):
    """The console text fsdp-train's logger hands back ("" when it has nothing to say)."""
    if text:
        print(text, end="", flush=True)


def _run(cfg, c, args, rank):
    replicate, shard = cfg.mesh()
    console = rank == 0 or c["metrics"]["save_for_all_ranks"]
    if rank == 0:
        line = cfg.no_effect_line()
        if line:
            print(f"fsdp_runtime.train: {line}")
        print(f"fsdp_runtime.train: {dist.get_world_size()} ranks (replicate {replicate} x shard {shard}) over "
              f"backend fsdp ({dist.group.WORLD.transport}), {torch.get_num_threads()} torch threads per rank",
              flush=True)
    model = build_model(cfg, c, (replicate, shard))
    ck = c["checkpoint"]
    if ck["enable"] and ck["initial_load_path"]:
        load_full_state_dict(model, load_file(ck["initial_load_path"]))
        if rank == 0:
            print(f"loaded the weights of {ck['initial_load_path']} (model only: step 0, fresh optimizer)", flush=True)
    opt = make_optimizer(model, c)
    loader = _C.DataLoader(cfg, rank)
    metrics = _C.MetricsLogger(cfg, rank, console)
    steps = c["training"]["steps"]
    tokens = c["training"]["local_batch_size"] * c["training"]["seq_len"] * c["training"]["gradient_accumulation_steps"]
    for step in range(1, steps + 1):
        if step == 2:  # leave the first (warm-up) step out of the overlap figure, as fsdp-train does
            clear_overlap(model)
        reset_memory_peaks(model)
        before = overlap_seconds(model)
        start = time.perf_counter()
        loss, norm, lr, skipped = train_step(model, opt, loader, cfg, c, step)
        seconds = time.perf_counter() - start
        flight, hidden = (now - then for now, then in zip(overlap_seconds(model), before))  # this step's
        if skipped and not c["training"]["skip_nonfinite_steps"]:
            raise RuntimeError(f"step {step}: loss {loss} / grad norm {norm} is not finite "
                               "(training.skip_nonfinite_steps = true skips such steps)")
        peak = sum(p for _, p in memory(model).values())
        _print(metrics.log(step, loss, norm, lr, tokens, seconds, peak, skipped,
                           hidden / flight if flight > 0 else math.nan))
        if ck["enable"] and (step % ck["interval"] == 0 or step == steps):
            save_weights(model, cfg, c, step, rank)
            metrics.event("checkpoint", step, f"step-{step}")
            _print(metrics.report())  # report.html beside metrics.jsonl (fsdp-train's page), kept current
    _print(metrics.summary())
    if rank == 0 and steps > 1:
        for kind, share in sorted(overlap(model).items()):
            print(f"overlap: {kind} {int(share * 100 + 0.5)}% hidden behind compute", flush=True)
    _print(metrics.report(last=True))  # "report: PATH", last as fsdp-train's
    return 0


if __name__ == "__main__":
    sys.exit(main())
