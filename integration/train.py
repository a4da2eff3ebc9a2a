"""Training loop: a GPT under DDP, FSDP2 or a pipeline (GPipe / 1F1B) over the replay group.

:func:`run_training` starts ``world_size`` processes itself (spawn, a fresh FileStore per run, a
deadline so that nothing hangs); :func:`train_worker` is the per-rank body and also runs under
torchrun (``env://``). The recipe follows GPT-2: AdamW (decay on matrices only), global gradient
norm clipping, linear warm-up then cosine decay. Models: :data:`MODEL_PRESETS` (``char-gpt``,
0.82 M parameters; ``gpt2-small``, 12 layers x 12 heads x 768, context 1024, byte vocabulary).
``device`` ``cuda`` puts the model, data and stages on the rank's GPU (NCCL inner group for CUDA
tensors; control flags stay on CPU/gloo); ``precision`` ``bf16`` is autocast, ``fp16`` autocast
with a ``GradScaler`` (DDP and FSDP).

Measurement traffic (evaluation, replica comparison, gathering metrics) uses the plain default
gloo group and is never corrupted; only the model's own traffic crosses the replay group.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from integration.replay import LinkFailure, Metrics, ReplayConfig
from integration.sources import ber_meaning, resolved_kind

__all__ = ["TrainConfig", "run_training", "run_many", "train_worker", "TrainingTimeout", "flat_params",
           "MODEL_PRESETS", "PARALLEL", "PRECISIONS", "resolve_device", "build_config"]

PARALLEL = ("ddp", "pp", "fsdp")
SCHEDULES = ("gpipe", "1f1b")
PRECISIONS = ("fp32", "bf16", "fp16")
TOKENIZERS = ("char", "byte")
# model presets: architecture and tokenizer (no download: the corpus is local, byte vocab is 256)
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "char-gpt": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, tokenizer="char"),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, tokenizer="byte"),
}


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without a GPU is an error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch sees no GPU (use --device cpu or auto)")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return device


class TrainingTimeout(RuntimeError):
    """The worker processes did not finish before the deadline (they were terminated)."""


@dataclass(frozen=True)
class TrainConfig:
    """One training run.

    ``batch_size`` is the global number of sequences per step: DDP gives each rank
    ``batch_size // world_size``; the pipeline feeds the whole batch as ``microbatches``
    microbatches. ``wrapper=False`` runs the same loop over a plain gloo group (the baseline).
    """

    parallel: str = "ddp"
    world_size: int = 2
    steps: int = 200
    seed: int = 1
    corpus: str = "kjv"
    batch_size: int = 12
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    microbatches: int = 4
    schedule: str = "gpipe"
    eval_interval: int = 50
    eval_iters: int = 8
    wrapper: bool = True
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    threads: int = 1
    comm_timeout_s: float = 120.0
    dump_logs: bool = False
    model: str = "char-gpt"
    tokenizer: str = "char"
    device: str = "cpu"
    precision: str = "fp32"

    def __post_init__(self) -> None:
        def positive(name: str, integer: bool = True) -> None:
            v = getattr(self, name)
            ok = (isinstance(v, int) and not isinstance(v, bool) and v >= 1) if integer else \
                (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)
            if not ok:
                raise ValueError(f"TrainConfig.{name} must be a {'positive integer' if integer else 'finite number > 0'}, "
                                 f"got {v!r}")

        for name in ("world_size", "steps", "batch_size", "block_size", "n_layer", "n_head", "n_embd", "microbatches",
                     "eval_interval", "eval_iters", "threads"):
            positive(name)
        for name in ("lr", "comm_timeout_s", "grad_clip"):
            positive(name, integer=False)
        if not (math.isfinite(self.min_lr) and 0 <= self.min_lr <= self.lr):
            raise ValueError(f"TrainConfig.min_lr must be in [0, lr], got {self.min_lr!r}")
        if self.warmup < 0:
            raise ValueError(f"TrainConfig.warmup must be >= 0, got {self.warmup!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"TrainConfig.n_head ({self.n_head}) must divide n_embd ({self.n_embd})")
        if self.model not in MODEL_PRESETS:
            raise ValueError(f"TrainConfig.model must be one of {tuple(MODEL_PRESETS)}, got {self.model!r}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"TrainConfig.tokenizer must be one of {TOKENIZERS}, got {self.tokenizer!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"TrainConfig.device must be cpu or cuda (resolve 'auto' first), got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"TrainConfig.precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.precision != "fp32" and self.parallel == "pp":
            raise ValueError("TrainConfig.precision bf16/fp16 is supported for ddp and fsdp, not pp")
        if self.parallel not in PARALLEL:
            raise ValueError(f"TrainConfig.parallel must be one of {PARALLEL}, got {self.parallel!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.world_size < 1 or (self.parallel == "pp" and self.world_size < 2):
            raise ValueError(f"TrainConfig.world_size {self.world_size} too small for {self.parallel}")
        if self.steps < 1:
            raise ValueError(f"TrainConfig.steps must be >= 1, got {self.steps}")
        if self.parallel in ("ddp", "fsdp") and self.batch_size % self.world_size:
            raise ValueError(f"TrainConfig.batch_size {self.batch_size} must be a multiple of world_size")
        if self.parallel == "pp" and self.batch_size % self.microbatches:
            raise ValueError(f"TrainConfig.batch_size {self.batch_size} must be a multiple of microbatches")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        d = dict(d)
        d["replay"] = ReplayConfig.from_dict(d.get("replay", {}))
        return cls(**d)

    @classmethod
    def preset(cls, model: str = "char-gpt", **overrides: Any) -> "TrainConfig":
        """A configuration of the model preset ``model`` (:data:`MODEL_PRESETS`) with ``overrides``."""
        if model not in MODEL_PRESETS:
            raise ValueError(f"unknown model preset {model!r} (choose from {', '.join(MODEL_PRESETS)})")
        kw = dict(MODEL_PRESETS[model])
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(model=model, **kw)


def build_config(*, parallel: str = "ddp", ber: float = 0.0, guard: str = "none", steps: int = 200, seed: int = 1,
                 model: str = "char-gpt", n_layer: int | None = None, n_head: int | None = None,
                 n_embd: int | None = None, block_size: int | None = None, code: str = "kp4", fec: str = "ieee",
                 rate: str = "400G", source: str = "generator", trace: str | None = None,
                 classes: tuple[str, ...] | None = None, mode: str = "endpoint", wrapper: bool = True,
                 **train_kw: Any) -> TrainConfig:
    """A :class:`TrainConfig` from flat options (what ``phy802 train`` / ``experiment`` take).

    Architecture fields left ``None`` come from the preset ``model``. BER 0 is the error-free run
    whatever the source (a trace is not replayed). ``classes=None``: the default traffic classes,
    plus ``params`` for FSDP (its parameter all-gathers are half of its traffic).
    """
    from integration.replay import DEFAULT_CLASSES
    from integration.sources import SourceConfig
    from protocol.modes import get_mode

    try:
        get_mode(fec)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"fec: {exc}") from None
    kind, tr = (source, trace) if ber > 0 else ("independent", None)
    src = SourceConfig(ber=ber, seed=seed, fec=fec, rate=rate, kind=kind, trace=tr, code=code)
    if classes is None:
        classes = DEFAULT_CLASSES + (("params",) if parallel == "fsdp" else ())
    replay = ReplayConfig(source=src, mode=mode, classes=tuple(classes), guard=guard)
    lr = train_kw.get("lr", 1e-3)
    train_kw.setdefault("min_lr", lr / 10 if isinstance(lr, (int, float)) and lr > 0 else lr)
    return TrainConfig.preset(model, n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                              parallel=parallel, steps=steps, seed=seed, replay=replay, wrapper=wrapper, **train_kw)


def _seed_int(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0] >> 1)


def flat_params(module: torch.nn.Module) -> torch.Tensor:
    """All parameters of ``module`` as one float64 vector (in ``named_parameters`` order)."""
    return torch.cat([p.detach().reshape(-1).double() for p in module.parameters()])


def _lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))) * (cfg.lr - cfg.min_lr)


def _optimizer(cfg: TrainConfig, params: list[torch.nn.Parameter]) -> torch.optim.AdamW:
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=False)


@torch.no_grad()
def _val_loss(cfg: TrainConfig, gpt, corpus, dev: torch.device | None = None) -> float:
    gen = torch.Generator().manual_seed(_seed_int(cfg.seed, 99))
    losses = []
    gpt.eval()
    dev = next(gpt.parameters()).device if dev is None else dev
    for _ in range(cfg.eval_iters):
        x, y = corpus.batch("val", cfg.batch_size, cfg.block_size, gen)
        x, y = x.to(next(gpt.parameters()).device), y.to(next(gpt.parameters()).device)
        logits = gpt(x).float()
        losses.append(float(F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))))
    gpt.train()
    return float(np.mean(losses))


def _all_finite(g: torch.Tensor) -> bool:
    lo, hi = torch.aminmax(g.detach())  # one pass; an Inf shows at an end, a NaN propagates
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


def _clip_global(params: list[torch.nn.Parameter], max_norm: float, group, across: bool) -> tuple[float, bool]:
    """GPT-2 global norm clipping as ``torch.nn.utils.clip_grad_norm_`` computes it (fp32 norms).

    With ``across`` the squared norm is summed over pipeline stages. An Inf norm (an fp32
    overflow, e.g. one gradient flipped to 1e38) gives a zero coefficient, so the step's update
    is zeroed, as in torch; a NaN norm makes the gradients NaN. Returns ``(norm, grads_finite)``.
    """
    grads = [p.grad for p in params if p.grad is not None]
    norms = [torch.linalg.vector_norm(g.detach()) for g in grads]
    total = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros(())
    if across:
        sq = total.reshape(1).pow(2)
        dist.all_reduce(sq, group=group)  # a one-element float: control traffic, never corrupted
        total = sq.sqrt()[0]
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coef)
    norm = float(total)
    # only a tensor whose own norm is not finite can hold an Inf/NaN element
    finite = math.isfinite(norm) or all(math.isfinite(float(n)) or _all_finite(g) for n, g in zip(norms, grads))
    return norm, finite


def train_worker(rank: int, cfg: TrainConfig, init_method: str, out_dir: str) -> None:
    """Body of one rank. Rank 0 writes ``result.json`` (and ``params.pt``) into ``out_dir``."""
    try:
        _train_worker(rank, cfg, init_method, out_dir)
    except BaseException:
        with open(os.path.join(out_dir, f"error_rank{rank}.txt"), "w", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
        raise


def _injected(metrics: Metrics) -> tuple[float, float]:
    """``(sum perturbation_sq, sum signal_sq)`` over all classes of one rank's counters so far."""
    return (float(sum(metrics.perturbation_sq.values())), float(sum(metrics.signal_sq.values())))


def _train_worker(rank: int, cfg: TrainConfig, init_method: str, out_dir: str) -> None:
    from contextlib import nullcontext

    from torch.nn.parallel import DistributedDataParallel as DDP

    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig, split_stages
    from integration.process_group import register

    torch.set_num_threads(cfg.threads)
    world = cfg.world_size
    timeout = timedelta(seconds=cfg.comm_timeout_s)
    if cfg.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank)) % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    # the default group carries measurement traffic (CPU tensors, gloo), never corrupted
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world, timeout=timeout)
    try:
        if cfg.wrapper:
            register(cfg.replay)
            group = dist.new_group(backend="phy802", timeout=timeout)
        else:
            group = dist.new_group(backend="nccl" if dev.type == "cuda" else "gloo", timeout=timeout)
        paused = group.paused if cfg.wrapper else nullcontext
        corpus = CharCorpus.load(cfg.corpus, cfg.tokenizer)
        gcfg = GPTConfig(corpus.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd)
        torch.manual_seed(_seed_int(cfg.seed, 1))  # same initial weights on every rank
        gpt = GPT(gcfg)
        guard = cfg.replay.guard if cfg.wrapper else "none"
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
        scaler = torch.amp.GradScaler(dev.type) if cfg.precision == "fp16" else None

        def autocast():
            return torch.autocast(dev.type, dtype=amp_dtype) if amp_dtype is not None else nullcontext()

        eval_gpt = None
        if cfg.parallel == "ddp":
            gpt.to(dev)
            model = DDP(gpt, process_group=group, device_ids=[dev.index] if dev.type == "cuda" else None)
            params = list(model.parameters())
            gen = torch.Generator().manual_seed(_seed_int(cfg.seed, 2, rank))
            per_rank = cfg.batch_size // world
        elif cfg.parallel == "fsdp":
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import fully_shard

            gpt.to(dev)
            mesh = DeviceMesh.from_group(group, device_type=dev.type)
            for blk in gpt.h:
                fully_shard(blk, mesh=mesh)
            fully_shard(gpt, mesh=mesh)
            model = gpt
            params = list(gpt.parameters())
            gen = torch.Generator().manual_seed(_seed_int(cfg.seed, 2, rank))
            per_rank = cfg.batch_size // world
            if rank == 0:
                torch.manual_seed(_seed_int(cfg.seed, 1))
                eval_gpt = GPT(gcfg)  # an unsharded copy for evaluation, loaded at each measurement
        else:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

            gpt.to(dev)  # the whole model on the device: rank 0 evaluates it after gathering the stages
            stage_mod = split_stages(gpt, world)[rank]
            stage = PipelineStage(stage_mod, rank, world, dev, group=group)

            def loss_fn(logits, target):
                return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))

            sched_cls = ScheduleGPipe if cfg.schedule == "gpipe" else Schedule1F1B
            schedule = sched_cls(stage, n_microbatches=cfg.microbatches, loss_fn=loss_fn)
            params = list(stage_mod.parameters())
            gen = torch.Generator().manual_seed(_seed_int(cfg.seed, 2))  # same batch on every stage
        opt = _optimizer(cfg, params)

        train_loss: list[float] = []
        evals: list[tuple[int, float]] = []
        divergence: list[tuple[int, float]] = []
        grad_norms: list[float] = []
        noise_steps: list[float] = []
        skipped, nonfinite_steps, overflow_steps, first_nonfinite = 0, 0, 0, None
        step_times: list[float] = []
        frames_steps: list[list[int]] = []  # per step: this rank's frames lost, resent (issue 23)

        last_full: list[torch.Tensor] = [torch.zeros(0)]

        def full_params_cpu() -> torch.Tensor:
            if cfg.parallel == "fsdp":
                with paused():  # measurement: gathered through the group, never corrupted
                    full = [p.full_tensor().detach() for p in gpt.parameters()]
                if eval_gpt is not None:
                    with torch.no_grad():
                        for q, f in zip(eval_gpt.parameters(), full):
                            q.copy_(f.cpu())
                return torch.cat([f.reshape(-1).double().cpu() for f in full])
            return flat_params(gpt).cpu()

        def measure(step: int) -> None:
            # rank 0 evaluates the full model: its DDP replica, the gathered FSDP shards, or all
            # pipeline stages gathered over the clean default group
            if cfg.parallel == "pp":
                owners = _param_owners(gpt, world)
                for p, owner in zip(gpt.parameters(), owners):
                    tmp = p.data.cpu()
                    dist.broadcast(tmp, src=owner)
                    p.data.copy_(tmp)
            mine = last_full[0] = full_params_cpu()
            if cfg.parallel == "ddp" and world > 1:
                allw = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(allw, mine)
                ref = allw[0]
                div = max(float((w - ref).norm()) for w in allw) / max(float(ref.norm()), 1e-30)
                divergence.append((step, div))
            if rank == 0:
                evals.append((step, _val_loss(cfg, eval_gpt if eval_gpt is not None else gpt, corpus, dev)))

        for step in range(cfg.steps):
            if step % cfg.eval_interval == 0:
                measure(step)
            inj0 = _injected(group.metrics) if cfg.wrapper else (0.0, 0.0)
            if cfg.wrapper:
                group.commlog.mark_step(step)  # comm log step boundary (integration/commlog.py)
            t0 = time.perf_counter()
            for pg in opt.param_groups:
                pg["lr"] = _lr_at(cfg, step)
            opt.zero_grad(set_to_none=True)
            if cfg.parallel in ("ddp", "fsdp"):
                x, y = corpus.batch("train", per_rank, cfg.block_size, gen)
                x, y = x.to(dev), y.to(dev)
                with autocast():
                    logits = model(x)
                    loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
                (scaler.scale(loss) if scaler is not None else loss).backward()
                local_loss = float(loss.detach())
            else:
                x, y = corpus.batch("train", cfg.batch_size, cfg.block_size, gen)
                x, y = x.to(dev), y.to(dev)
                if rank == 0:
                    schedule.step(x)
                    local_loss = float("nan")
                elif rank == world - 1:
                    losses: list[torch.Tensor] = []
                    schedule.step(target=y, losses=losses)
                    local_loss = float(torch.stack([l.detach() for l in losses]).mean())
                else:
                    schedule.step()
                    local_loss = float("nan")
            if scaler is not None:
                scaler.unscale_(opt)
            if cfg.parallel == "fsdp":
                norm, grads_finite = _clip_dtensor(params, cfg.grad_clip)
            else:
                norm, grads_finite = _clip_global(params, cfg.grad_clip, group, across=cfg.parallel == "pp")
            # 2: a gradient element is Inf/NaN; 1: the fp32 norm overflowed (update zeroed); agreed by all ranks
            flag = torch.tensor([0 if math.isfinite(norm) else (1 if grads_finite else 2)], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)  # int on CPU: control, never corrupted
            if flag.item() == 2:
                nonfinite_steps += 1
                first_nonfinite = step if first_nonfinite is None else first_nonfinite
            elif flag.item() == 1:
                overflow_steps += 1
            if flag.item() and guard == "skip_nonfinite_step":
                skipped += 1
                opt.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.update()  # lowers the scale if unscale_ found an Inf
            elif scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            step_times.append(time.perf_counter() - t0)
            grad_norms.append(norm)
            if cfg.wrapper:
                inj1 = _injected(group.metrics)
                dp, ds = inj1[0] - inj0[0], inj1[1] - inj0[1]
                noise_steps.append(math.sqrt(dp / ds) if ds > 0 and math.isfinite(dp) else
                                   (math.inf if not math.isfinite(dp) else 0.0))
                frames_steps.append([group.metrics.total("frames_lost"), group.metrics.total("frames_resent")])
            # the training loss as rank 0 reports it (PP: the last stage's, over the clean group)
            lt = torch.tensor([local_loss], dtype=torch.float64)
            if cfg.parallel == "pp":
                dist.broadcast(lt, src=world - 1)
            train_loss.append(float(lt))
        measure(cfg.steps)

        parts: list[Any] = [None] * world
        mine = {"metrics": group.metrics.to_dict() if cfg.wrapper else {}, "frames_steps": frames_steps,
                "flips": len(group.log) if cfg.wrapper else 0,
                "log_dropped": group.log.dropped if cfg.wrapper else 0,
                "comm": {"records": group.commlog.records(), "step_s": step_times} if cfg.wrapper else {}}
        dist.all_gather_object(parts, mine)
        if cfg.wrapper and cfg.dump_logs:
            with open(os.path.join(out_dir, f"log_rank{rank}.json"), "w", encoding="utf-8") as fh:
                json.dump({"records": group.log.records(), "messages": group.log.messages}, fh)
        if rank == 0 and cfg.wrapper and os.environ.get("PHY802_COMMLOG"):  # phy802 train --comm-log
            from integration.commlog import save_gathered

            save_gathered(os.environ["PHY802_COMMLOG"], [p["comm"] for p in parts], parallel=cfg.parallel,
                          params=sum(p.numel() for p in gpt.parameters()), microbatches=cfg.microbatches,
                          schedule=cfg.schedule, tokens_per_step=cfg.batch_size * cfg.block_size)
        if rank == 0:
            final = last_full[0]
            torch.save(final, os.path.join(out_dir, "params.pt"))
            nonf_loss = [i for i, l in enumerate(train_loss) if not math.isfinite(l)]
            merged = Metrics.merge([p["metrics"] for p in parts])
            finite_noise = [v for v in noise_steps if math.isfinite(v)]
            result = {
                "config": cfg.to_dict(),
                "train_loss": train_loss,
                "evals": evals,
                "final_val_loss": evals[-1][1],
                "divergence": divergence,
                "final_divergence": divergence[-1][1] if divergence else 0.0,
                "grad_norms": grad_norms,
                "skipped_steps": skipped,
                "nonfinite_steps": nonfinite_steps,
                "overflow_steps": overflow_steps,
                "first_nonfinite_step": first_nonfinite,
                "nonfinite_loss_steps": len(nonf_loss),
                "first_nonfinite_loss_step": nonf_loss[0] if nonf_loss else None,
                "step_time_ms": 1e3 * float(np.median(step_times[min(5, len(step_times) - 1):])),
                "metrics": merged,
                # what the link injected: ||delivered - clean|| / ||clean|| of the received float
                # payload (after the guard), over the whole run (all ranks) and per step (rank 0)
                "injected_noise": Metrics.injected_noise(merged) if cfg.wrapper else 0.0,
                "injected_noise_steps": noise_steps,
                "injected_noise_step_median": float(np.median(finite_noise)) if finite_noise else
                (math.inf if noise_steps else 0.0),
                "flips_logged": int(sum(p["flips"] for p in parts)),
                "log_dropped": int(sum(p["log_dropped"] for p in parts)),
                "param_norm": float(final.norm()),
                "source_kind": resolved_kind(cfg.replay.source) if cfg.wrapper else "none",
                **_frame_counts(merged, parts, cfg),
            }
            tmp = os.path.join(out_dir, ".result.json.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(result, fh, allow_nan=True)
            os.replace(tmp, os.path.join(out_dir, "result.json"))
        dist.barrier()
    except Exception as exc:  # issue 23: undeliverable data fails the run, on every rank at the same op
        grp = locals().get("group")  # (DDP re-raises a failed future as RuntimeError: ask the group)
        failure = getattr(grp, "failed", None) if cfg.wrapper else None
        if not isinstance(failure, LinkFailure):
            raise
        _write_failed_run(rank, world, cfg, out_dir, failure, grp, locals())
    finally:
        dist.destroy_process_group()


def _frame_counts(merged: dict, parts: list, cfg: TrainConfig, failure: LinkFailure | None = None,
                  failed_step: int | None = None) -> dict[str, Any]:
    """Frames lost / resent and failed ops of the run (all ranks) and per step, and which BER (issue 23)."""
    per_step: list[list[int]] = []
    for p in parts:
        prev = [0, 0]
        for i, (lost, resent) in enumerate(p.get("frames_steps", [])):
            if i == len(per_step):
                per_step.append([0, 0])
            per_step[i][0] += lost - prev[0]
            per_step[i][1] += resent - prev[1]
            prev = [lost, resent]
    kind = resolved_kind(cfg.replay.source) if cfg.wrapper else "none"
    return {"frames_lost": int(sum(merged.get("frames_lost", {}).values())),
            "frames_resent": int(sum(merged.get("frames_resent", {}).values())),
            "op_failures": int(sum(merged.get("op_failures", {}).values())),
            "frames_steps": per_step, "failed": failure is not None, "failed_step": failed_step,
            "failure": str(failure) if failure is not None else None,
            "ber_is": ber_meaning(kind) if kind != "none" else "none"}


def _write_failed_run(rank: int, world: int, cfg: TrainConfig, out_dir: str, exc: LinkFailure, group,
                      scope: dict[str, Any]) -> None:
    """A run stopped by a :class:`LinkFailure`: gather the counters over the clean default group and
    write ``result.json`` (``failed``, ``failed_step``, ``final_val_loss`` NaN: the job did not finish)."""
    step = scope.get("step")
    mine = {"metrics": group.metrics.to_dict(), "frames_steps": scope.get("frames_steps", []),
            "flips": len(group.log), "log_dropped": group.log.dropped}
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, mine)
    if rank == 0:
        merged = Metrics.merge([p["metrics"] for p in parts])
        evals = list(scope.get("evals") or [])
        train_loss = list(scope.get("train_loss") or [])
        result = {
            "config": cfg.to_dict(), "train_loss": train_loss, "evals": evals + [(step or 0, math.nan)],
            "final_val_loss": math.nan, "divergence": [], "final_divergence": math.nan,
            "grad_norms": list(scope.get("grad_norms") or []), "skipped_steps": scope.get("skipped", 0),
            "nonfinite_steps": scope.get("nonfinite_steps", 0), "overflow_steps": scope.get("overflow_steps", 0),
            "first_nonfinite_step": scope.get("first_nonfinite"), "nonfinite_loss_steps": 0,
            "first_nonfinite_loss_step": step,
            "step_time_ms": 1e3 * float(np.median(scope["step_times"])) if scope.get("step_times") else math.nan,
            "metrics": merged, "injected_noise": Metrics.injected_noise(merged), "injected_noise_steps": [],
            "injected_noise_step_median": math.nan, "flips_logged": int(sum(p["flips"] for p in parts)),
            "log_dropped": int(sum(p["log_dropped"] for p in parts)), "param_norm": math.nan,
            "source_kind": resolved_kind(cfg.replay.source),
            **_frame_counts(merged, parts, cfg, exc, step),
        }
        last = (scope.get("last_full") or [torch.zeros(0)])[0]
        if last.numel() == 0 and "gpt" in scope:  # failed before the first measurement
            try:
                last = flat_params(scope["gpt"]).cpu()
            except Exception:  # noqa: BLE001 - sharded (FSDP) parameters: nothing to compare
                pass
        torch.save(last, os.path.join(out_dir, "params.pt"))  # the parameters at the last measurement
        tmp = os.path.join(out_dir, ".result.json.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(result, fh, allow_nan=True)
        os.replace(tmp, os.path.join(out_dir, "result.json"))
    dist.barrier()


def _clip_dtensor(params: list[torch.nn.Parameter], max_norm: float) -> tuple[float, bool]:
    """Global-norm clipping of FSDP2 (DTensor) gradients, as ``clip_grad_norm_`` does (fp32 norm)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    norm = float(total)
    finite = math.isfinite(norm) or all(_all_finite(g.to_local() if hasattr(g, "to_local") else g) for g in grads)
    return norm, finite


def _param_owners(gpt, world: int) -> list[int]:
    from integration.model import split_stages

    owner: dict[int, int] = {}
    for s, mod in enumerate(split_stages(gpt, world)):
        for p in mod.parameters():
            owner[id(p)] = s
    return [owner[id(p)] for p in gpt.parameters()]


def _many_worker(rank: int, cfgs: list[TrainConfig], stores: list[str], dirs: list[str]) -> None:
    for cfg, store, d in zip(cfgs, stores, dirs):
        train_worker(rank, cfg, f"file://{store}", d)


def run_many(cfgs: list[TrainConfig], *, timeout_s: float = 900.0, out_dir: str | None = None,
             on_done: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Run several configurations (same ``world_size``) one after the other in one set of processes.

    Each run gets its own FileStore, process groups and output folder ``<out_dir>/run<i>``
    (``result.json``, ``params.pt``). The processes are terminated and :class:`TrainingTimeout`
    raised if they do not all finish within ``timeout_s``. The FileStores' temporary folder is
    removed on every exit path; with ``out_dir=None`` the results live in a new temporary folder
    ``phy802-train-*`` that the caller owns.
    ``on_done(i)``, if given, is called in this process once run ``i``'s ``result.json`` has appeared
    (polled each second; progress display).
    """
    import torch.multiprocessing as mp

    if not cfgs:
        return []
    world = cfgs[0].world_size
    if any(c.world_size != world for c in cfgs):
        raise ValueError("run_many: all configurations must have the same world_size")
    root = tempfile.mkdtemp(prefix="phy802-train-") if out_dir is None else out_dir
    dirs = [os.path.join(root, f"run{i}") for i in range(len(cfgs))]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        for stale in ("result.json", "params.pt"):
            if os.path.exists(os.path.join(d, stale)):
                os.unlink(os.path.join(d, stale))
    store_dir = tempfile.mkdtemp(prefix="phy802-store-")
    stores = [os.path.join(store_dir, f"store{i}") for i in range(len(cfgs))]
    env_prev = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(cfgs[0].threads)
    ctx = None
    try:
        ctx = mp.start_processes(_many_worker, args=(cfgs, stores, dirs), nprocs=world, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout_s
        reported: set[int] = set()

        def poll() -> None:
            for i, d in enumerate(dirs):
                if on_done is not None and i not in reported and os.path.exists(os.path.join(d, "result.json")):
                    reported.add(i)
                    on_done(i)

        try:
            while not ctx.join(timeout=1.0):
                poll()
                if time.monotonic() > deadline:
                    raise TrainingTimeout(f"training did not finish within {timeout_s:.0f} s "
                                          f"(world {world}, {len(cfgs)} run(s)); processes terminated")
        except mp.ProcessRaisedException as exc:
            first = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            raise RuntimeError(f"a training process failed: {first[-1] if first else exc}") from None
        except mp.ProcessExitedException as exc:
            raise RuntimeError(f"a training process died: {exc}") from None
        poll()
        results = []
        for d in dirs:
            with open(os.path.join(d, "result.json"), encoding="utf-8") as fh:
                r = json.load(fh)
            r["out_dir"] = d
            results.append(r)
        return results
    finally:
        if ctx is not None:  # every exit path: no process outlives the call
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
        if env_prev is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_prev
        shutil.rmtree(store_dir, ignore_errors=True)


def run_training(cfg: TrainConfig, *, timeout_s: float = 900.0, out_dir: str | None = None) -> dict[str, Any]:
    """Run ``cfg`` in ``world_size`` spawned processes and return rank 0's result dict.

    A fresh FileStore per run (no ports); the processes are terminated and
    :class:`TrainingTimeout` raised if they do not finish within ``timeout_s``. The final
    parameters (float64, rank 0's replica or all stages) are in ``<out_dir>/params.pt``
    (``out_dir=None``: a new temporary folder ``phy802-train-*`` that the caller owns).
    """
    work = tempfile.mkdtemp(prefix="phy802-train-") if out_dir is None else out_dir
    os.makedirs(work, exist_ok=True)
    tmp_root = tempfile.mkdtemp(prefix="phy802-run-")
    try:
        res = run_many([cfg], timeout_s=timeout_s, out_dir=tmp_root)[0]
        for name in os.listdir(res["out_dir"]):  # result.json, params.pt, log_rank*.json
            os.replace(os.path.join(res["out_dir"], name), os.path.join(work, name))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    res["out_dir"] = work
    return res
