"""Training loop: a GPT under DDP, FSDP2 or a pipeline (GPipe / 1F1B) over the replay group.

:func:`run_training` starts ``world_size`` processes itself (spawn, a fresh FileStore per run, a
deadline so that nothing hangs); :func:`train_worker` is the per-rank body and also runs under
torchrun (``env://``). The recipe follows GPT-2: AdamW (decay on matrices only), global gradient
norm clipping, linear warm-up then cosine decay. Models: :data:`MODEL_PRESETS` (``char-gpt``,
0.82 M parameters, the quick default; ``gpt2-small``, GPT-2 small exactly: 12 layers x 12 heads x
768, context 1024, GPT-2's 50257-token vocabulary padded to 50304 as nanoGPT does, tied
embeddings: 124,475,904 parameters). Data: the built-in corpus, or ``data=DIR``, a token folder in
nanoGPT's layout (:class:`integration.data.TokenFiles`, memory-mapped).

Seeds: ``seed`` drives the initial weights and the data order; the link errors come from
``replay.source.seed`` (``--link-seed``), so the two variances can be told apart. The final
validation loss is measured on a fixed set (the first ``val_tokens`` tokens of the validation
split, the same for every run) on every DDP replica (``val_loss_replicas``).
``device`` ``cuda`` puts the model, data and stages on the rank's GPU (NCCL inner group for CUDA
tensors; control flags stay on CPU/gloo); ``precision`` ``bf16`` is autocast, ``fp16`` autocast
with a ``GradScaler`` (DDP and FSDP).

Measurement traffic (evaluation, replica comparison, gathering metrics) uses the plain default
gloo group and is never corrupted; only the model's own traffic crosses the replay group.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
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
from phy802.runtime.workers import JobFailed

__all__ = ["TrainConfig", "run_training", "run_many", "train_worker", "TrainingTimeout", "flat_params",
           "MODEL_PRESETS", "MODEL_HELP", "PARALLEL", "PRECISIONS", "VAL_TOKENS", "resolve_device", "build_config",
           "estimate", "load_data", "model_config", "param_count", "data_vocab", "failed_when", "REPLAY_VIA",
           "delivered_ber", "noise_bound", "adam_step_factor", "GRAD_CLASSES", "OPTIMIZERS", "CLIPS", "RECIPES", "RECIPE_HELP", "SGD_MOMENTUM",
           "check_backends", "with_recipe", "COMM_DTYPES", "ADAM_OPTIMIZERS"]

PARALLEL = ("ddp", "pp", "fsdp")
#: where the link errors enter: the phy802 ProcessGroup under the model (``group``), or torch's
#: supported seams beside a stock group (``hooks``: DDP's comm hook, FSDP2's custom all-gather /
#: reduce-scatter, a pipeline stage's received activations and gradients: ``integration.pp_hooks``)
REPLAY_VIA = ("group", "hooks")
SCHEDULES = ("gpipe", "1f1b")
PRECISIONS = ("fp32", "bf16", "fp16")
TOKENIZERS = ("char", "byte")
#: the optimizer: AdamW (GPT-2's; decay on matrices only), SGD with momentum :data:`SGD_MOMENTUM`, or
#: ``adamw-bounded``: AdamW whose second moment cannot overflow and whose per-element update is
#: clipped to ``update_bound`` learning rates (:class:`integration.optim.BoundedAdamW`)
OPTIMIZERS = ("adamw", "sgd", "adamw-bounded")
#: the optimizers that keep Adam's second moment (``exp_avg_sq``: frozen weights are counted) and
#: normalise each element's step by it (:func:`noise_bound` applies)
ADAM_OPTIMIZERS = ("adamw", "adamw-bounded")
#: the precision DDP's gradient buckets travel in over the link: ``fp32`` (the bucket as it is), ``bf16``
#: / ``fp16`` (cast before the all-reduce, as torch's ``bf16_compress_hook`` / ``fp16_compress_hook``:
#: :mod:`integration.ddp_hooks`); ``fp16`` comes with a ``GradScaler`` (as fp16 training uses it)
COMM_DTYPES = ("fp32", "bf16", "fp16")
SGD_MOMENTUM = 0.9
#: global gradient-norm clipping: ``global`` as torch's ``clip_grad_norm_`` (fp32 norms: one gradient
#: above ~1.8e19 overflows it to Inf and the step's update is zeroed), ``none`` (the norm is measured,
#: nothing clipped), ``wide`` (the same clipping with the norm summed in float64, which holds any
#: finite fp32 gradient: one flipped exponent no longer zeroes the step; ddp and pp)
CLIPS = ("global", "none", "wide")
#: training recipes: settings of the run's options. ``paper``: our reading -- inferred, not quoted --
#: of the study's conditions (payload BER, i.e. independent flips of the payload stream; no FEC
#: decode; no global clipping; AdamW). ``bounded``: the same conditions with our bounded AdamW
#: (``adamw-bounded``) in place of AdamW -- our choice, not the study's
RECIPES: dict[str, dict[str, str]] = {
    "default": {},
    "paper": {"source": "independent", "fec": "bypass", "clip": "none", "optimizer": "adamw"},
    "bounded": {"source": "independent", "fec": "bypass", "clip": "none", "optimizer": "adamw-bounded"},
}
RECIPE_HELP = {"default": "the options as given (GPT-2's recipe: AdamW, global-norm clipping at --grad-clip)",
               "paper": "our inference (not quoted) of the study's conditions: payload BER (--source independent), "
                        "--fec bypass, no global clipping (--clip none), AdamW",
               "bounded": "the paper recipe's conditions with --optimizer adamw-bounded (our choice, not the study's: "
                          "no frozen weights, each step at most --update-bound learning rates)"}


def with_recipe(cfg: "TrainConfig", name: str) -> "TrainConfig":
    """``cfg`` with the settings of recipe ``name`` (:data:`RECIPES`) and its name; ``default`` keeps
    ``cfg``'s options as they are. The link's source kind and FEC mode apply to runs with errors
    (a BER-0 run is error-free whatever its source)."""
    from dataclasses import replace

    if name not in RECIPES:
        raise ValueError(f"recipe must be one of {tuple(RECIPES)}, got {name!r}")
    sets = RECIPES[name]
    src = cfg.replay.source
    if "source" in sets or "fec" in sets:
        src = replace(src, kind=sets.get("source", src.kind), fec=sets.get("fec", src.fec),
                      trace=None if sets.get("source", src.kind) != "trace" else src.trace)
    return replace(cfg, recipe=name, clip=sets.get("clip", cfg.clip), optimizer=sets.get("optimizer", cfg.optimizer),
                   comm_dtype=sets.get("comm_dtype", cfg.comm_dtype), replay=replace(cfg.replay, source=src))
#: default size of the fixed validation set (tokens; rounded up to whole windows)
VAL_TOKENS = 100_000
# model presets: architecture, vocabulary and tokenizer of the built-in corpus (no download). gpt2-small
# without --data trains on the corpus's UTF-8 bytes (ids < 256) inside GPT-2's full vocabulary, so the
# model is GPT-2 small's size; BPE tokens come from a token folder (--data)
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "char-gpt": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, tokenizer="char"),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, tokenizer="byte", vocab_size=50257,
                       pad_vocab=64, tie_embeddings=True),
}
#: one line per preset, for help texts and docs (one truth)
MODEL_HELP = {
    "char-gpt": "4 layers x 4 heads x 128, block 64, character vocabulary (65), untied head: 0.82 M parameters",
    "gpt2-small": "GPT-2 small: 12 layers x 12 heads x 768, context 1024, vocabulary 50257 padded to 50304, "
                  "tied embeddings: 124.5 M parameters",
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


class TrainingTimeout(JobFailed):
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
    clip: str = "global"
    optimizer: str = "adamw"
    #: ``adamw-bounded``: the most one step moves an element, in learning rates (``--update-bound``)
    update_bound: float = 1.0
    #: the precision of DDP's gradient all-reduce over the link (:data:`COMM_DTYPES`; ``--comm-dtype``)
    comm_dtype: str = "fp32"
    #: the recipe that set the options (:data:`RECIPES`; a name, carried into every output)
    recipe: str = "default"
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
    data: str | None = None
    #: how ``data``'s ids are stored (:data:`integration.data.TOKEN_DTYPES`; auto: nanoGPT's uint16, checked)
    data_dtype: str = "auto"
    vocab_size: int | None = None
    pad_vocab: int = 1
    tie_embeddings: bool = False
    val_tokens: int = VAL_TOKENS
    replay_via: str = "group"
    #: a file for the communication log gathered from every rank (rank 0 writes it; ``phy802 train --comm-log``)
    comm_log: str | None = None
    #: plugins (``MODULE`` or ``MODULE:FUNCTION``) every rank loads before it makes its groups, registering
    #: the backends that ``replay.inner_backends`` names (:func:`integration.registration.load_backend_plugins`;
    #: ``phy802 train --backend-plugin``), e.g. a vendor backend or the test suite's NCCL stand-in
    backend_plugins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        plugins = self.backend_plugins
        if isinstance(plugins, str) or not all(isinstance(p, str) and p for p in plugins):
            raise ValueError(f"TrainConfig.backend_plugins must be a sequence of MODULE or MODULE:FUNCTION names, "
                             f"got {plugins!r}")
        object.__setattr__(self, "backend_plugins", tuple(plugins))  # a JSON list read back

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
        for name in ("lr", "comm_timeout_s"):
            positive(name, integer=False)
        if not (isinstance(self.grad_clip, (int, float)) and math.isfinite(self.grad_clip) and self.grad_clip >= 0):
            raise ValueError(f"TrainConfig.grad_clip must be a finite number >= 0 (0: no clipping), got {self.grad_clip!r}")
        for name, allowed in (("clip", CLIPS), ("optimizer", OPTIMIZERS), ("recipe", tuple(RECIPES)),
                              ("comm_dtype", COMM_DTYPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"TrainConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        positive("update_bound", integer=False)
        if self.comm_dtype != "fp32" and self.parallel != "ddp":
            raise ValueError(f"TrainConfig.comm_dtype {self.comm_dtype!r} (--comm-dtype) is built for ddp's gradient "
                             f"all-reduce (torch's compression hooks); {self.parallel} takes fp32")
        if self.clip == "wide" and self.parallel == "fsdp":
            raise ValueError("TrainConfig.clip 'wide' (--clip wide) is built for ddp and pp; fsdp clips with torch's "
                             "clip_grad_norm_ (use global or none)")
        for name in ("pad_vocab", "val_tokens"):
            positive(name)
        from integration.data import TOKEN_DTYPES

        if self.data_dtype != "auto" and self.data_dtype not in TOKEN_DTYPES:
            raise ValueError(f"TrainConfig.data_dtype must be auto or one of {tuple(TOKEN_DTYPES)}, got {self.data_dtype!r}")
        if self.vocab_size is not None and not (isinstance(self.vocab_size, int) and 1 <= self.vocab_size <= 1 << 16):
            raise ValueError(f"TrainConfig.vocab_size must be in [1, 65536] or None, got {self.vocab_size!r}")
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
        if self.precision == "fp16" and self.parallel == "pp":
            raise ValueError("TrainConfig.precision fp16 (GradScaler) is supported for ddp and fsdp; pp takes fp32 or bf16")
        if self.parallel not in PARALLEL:
            raise ValueError(f"TrainConfig.parallel must be one of {PARALLEL}, got {self.parallel!r}")
        if self.replay_via not in REPLAY_VIA:
            raise ValueError(f"TrainConfig.replay_via must be one of {REPLAY_VIA}, got {self.replay_via!r}")
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
        if self.parallel == "pp" and self.schedule == "1f1b" and self.microbatches < self.world_size:
            raise ValueError(f"TrainConfig.microbatches {self.microbatches}: 1F1B needs at least one microbatch per "
                             f"stage ({self.world_size})")
        if self.parallel == "pp" and self.world_size > self.n_layer:
            raise ValueError(f"TrainConfig.world_size {self.world_size}: a pipeline of {self.n_layer} blocks has at "
                             f"most {self.n_layer} stages")

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
                 rate: str = "400G", inner: str | None = None, source: str = "generator", trace: str | None = None,
                 classes: tuple[str, ...] | None = None, mode: str = "endpoint", wrapper: bool = True,
                 link_seed: int | None = None, inner_backends: dict[str, str] | None = None,
                 **train_kw: Any) -> TrainConfig:
    """A :class:`TrainConfig` from flat options (what ``phy802 train`` / ``experiment`` take).

    Architecture fields left ``None`` come from the preset ``model``. BER 0 is the error-free run
    whatever the source (a trace is not replayed). ``classes=None``: the default traffic classes,
    plus ``params`` for FSDP (its parameter all-gathers are half of its traffic). ``seed`` drives
    weights and data, ``link_seed`` (default: ``seed``) the link errors. ``inner_backends``: device
    types whose inner backend is not the default (``ReplayConfig.inner_backends``), e.g. ``{"cpu":
    "nccl_standin"}`` with the plugin that registers it in ``backend_plugins``.
    """
    from integration.replay import DEFAULT_CLASSES
    from integration.sources import SourceConfig
    from protocol.modes import get_mode

    try:
        get_mode(fec)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"fec: {exc}") from None
    kind, tr = (source, trace) if ber > 0 else ("independent", None)
    src = SourceConfig(ber=ber, seed=seed if link_seed is None else link_seed, fec=fec, rate=rate, kind=kind, trace=tr,
                       code=code, inner=inner)
    if classes is None:
        classes = DEFAULT_CLASSES + (("params",) if parallel == "fsdp" else ())
    replay = ReplayConfig(source=src, mode=mode, classes=tuple(classes), guard=guard)
    if inner_backends:
        from dataclasses import replace

        replay = replace(replay, inner_backends={**replay.inner_backends, **inner_backends})
    lr = train_kw.get("lr", 1e-3)
    train_kw.setdefault("min_lr", lr / 10 if isinstance(lr, (int, float)) and lr > 0 else lr)
    return TrainConfig.preset(model, n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                              parallel=parallel, steps=steps, seed=seed, replay=replay, wrapper=wrapper, **train_kw)


def data_vocab(cfg: TrainConfig) -> int:
    """The vocabulary the data's ids must lie below: ``vocab_size``, else GPT-2's for token folders
    (nanoGPT's ``prepare.py`` writes GPT-2 BPE ids), else the built-in corpus's (65 chars / 256 bytes)."""
    from integration.model import GPT2_VOCAB

    if cfg.vocab_size is not None:
        return cfg.vocab_size
    if cfg.data is not None:
        return GPT2_VOCAB
    return 256 if cfg.tokenizer == "byte" else 0  # 0: the corpus's own (known once loaded)


def load_data(cfg: TrainConfig, check: bool = True):
    """The training data of ``cfg``: a :class:`~integration.data.TokenFiles` or a :class:`~integration.data.CharCorpus`."""
    from integration.data import CharCorpus, TokenFiles

    if cfg.data is not None:
        return TokenFiles(cfg.data, data_vocab(cfg), cfg.block_size, check=check, dtype=cfg.data_dtype)
    corpus = CharCorpus.load(cfg.corpus, cfg.tokenizer)
    if cfg.vocab_size is not None and corpus.vocab_size > cfg.vocab_size:
        raise ValueError(f"corpus {cfg.corpus!r} ({cfg.tokenizer}) has {corpus.vocab_size} symbols, more than "
                         f"vocab_size {cfg.vocab_size}")
    return corpus


def model_config(cfg: TrainConfig, data=None):
    """The :class:`~integration.model.GPTConfig` of ``cfg`` (vocabulary padded to ``pad_vocab``)."""
    from integration.model import GPTConfig, padded_vocab

    vocab = cfg.vocab_size if cfg.vocab_size is not None else (data.vocab_size if data is not None else data_vocab(cfg))
    if vocab < 1:
        vocab = load_data(cfg).vocab_size
    return GPTConfig(padded_vocab(vocab, cfg.pad_vocab), cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd,
                     cfg.tie_embeddings)


def param_count(cfg: TrainConfig, vocab: int | None = None) -> int:
    """Parameters of ``cfg``'s model (a tied matrix once), without building it."""
    from integration.model import padded_vocab

    v = padded_vocab(vocab if vocab is not None else (cfg.vocab_size or data_vocab(cfg) or 65), cfg.pad_vocab)
    d, L = cfg.n_embd, cfg.n_layer
    return v * d * (1 if cfg.tie_embeddings else 2) + cfg.block_size * d + L * (12 * d * d + 13 * d) + 2 * d


#: sustained training throughput assumed by :func:`estimate` (flop/s per busy CPU core; per GPU in bf16 / fp32),
#: from this project's measurements: the char model's 40 ms steps and gpt2-small's 66 s FSDP step on 2 cores
CPU_FLOPS_PER_CORE = 5e10
GPU_FLOPS = {"bf16": 2e14, "fp16": 2e14, "fp32": 5e13}


def estimate(cfg: TrainConfig, vocab: int | None = None, val_len: int | None = None) -> dict[str, float]:
    """Rough cost of ``cfg`` on this machine: ``seconds`` (training, evaluation, start-up) and
    ``memory_bytes`` (all ranks together, on one host), ``params``, ``flops``.

    Training flops per token are nanoGPT's ``6 N + 12 L T d``; evaluation a third of that. Memory
    per rank: the process (~0.45 GB), weights + gradients + AdamW state (16 B per trained
    parameter, plus DDP's 4 B bucket copy; the full model also on every PP/FSDP rank for
    evaluation), then the larger of a training step's activations (~17 fp32 values x d per token
    and layer) and logits (3 fp32 copies of ``tokens x vocab``), and the evaluation's forward
    pass over the fixed set; plus one read of the link's error source (:func:`source_read_bytes`:
    the live generator's grows with the line BER: 3.3 GB at 0.5). ``val_len``: tokens in the
    validation split, when known (the fixed set is at most that long).
    """
    import os as _os

    n = param_count(cfg, vocab)
    d, L, T = cfg.n_embd, cfg.n_layer, cfg.block_size
    from integration.model import padded_vocab

    V = padded_vocab(vocab if vocab is not None else (cfg.vocab_size or data_vocab(cfg) or 65), cfg.pad_vocab)
    per_tok = 6 * (n - T * d) + 12 * L * T * d
    train_flops = cfg.steps * cfg.batch_size * T * per_tok
    n_evals = cfg.steps // cfg.eval_interval + 2
    fixed = cfg.val_tokens if val_len is None else min(cfg.val_tokens, max(val_len - 1, T))
    eval_tok = n_evals * cfg.eval_iters * cfg.batch_size * T + max(fixed, T)
    eval_flops = eval_tok * per_tok / 3 * (cfg.world_size if cfg.parallel == "ddp" else 1)
    world = cfg.world_size
    if cfg.device == "cuda":
        import torch as _t

        rate = GPU_FLOPS[cfg.precision] * max(1, min(world, _t.cuda.device_count()))
    else:
        rate = CPU_FLOPS_PER_CORE * max(1, min(world * cfg.threads, _os.cpu_count() or 1))
    startup = 5.0 + 4.0 * world / max(1, min(world, _os.cpu_count() or 1))
    seconds = (train_flops + eval_flops) / rate + startup
    if cfg.parallel == "ddp":
        tok_rank, state = cfg.batch_size // world * T, 20 * n
    elif cfg.parallel == "fsdp":
        tok_rank, state = cfg.batch_size // world * T, 8 * n + 12 * n // world
    else:
        tok_rank, state = cfg.batch_size // cfg.microbatches * T * min(cfg.microbatches, world), 4 * n + 16 * n // world
    act = tok_rank * L * d * 17 * 4 / (world if cfg.parallel == "pp" else 1)
    logits = 3 * 4 * V * max(tok_rank if cfg.parallel != "pp" else cfg.batch_size // cfg.microbatches * T, T)
    # evaluation: one no-grad forward of up to _eval_rows windows of the fixed set; its peak is in a
    # block (residual, norm, fc and GELU outputs: 10 d fp32 per token, plus the allocator's slack:
    # 12 d, from char-gpt's 100,000-token forward, which peaked 0.62 GB above a 1-layer width-16
    # model's run: 12 d is 0.63 GB) or at the logits (3 V + 2 d); SDPA's CPU kernel keeps no T x T scores
    eval_rows = min(_eval_rows(T, V), -(-max(fixed, T) // T))
    evaluation = eval_rows * T * 4 * max(12 * d, 3 * V + 2 * d)
    per_rank = PROCESS_BYTES + state + max(act + logits, evaluation) + source_read_bytes(cfg)
    return {"seconds": seconds, "memory_bytes": per_rank * world, "memory_per_rank": per_rank, "params": n,
            "flops": train_flops + eval_flops}


#: one rank's process before its model and data: torch, numba, the protocol layer, gloo (measured:
#: a 1-layer, width-16 model on the stdlib corpus peaked at 0.38 GB per rank)
PROCESS_BYTES = 0.45e9
#: the live generator's (protocol.trace.LiveSource, 400G/200G) peak working memory in its first read
#: (2^22 line bits, the read-ahead's minimum; a first read of 2^10 bits peaks as high, later reads at
#: about a tenth), measured as peak RSS above the process's at pre-FEC line BER 1e-2, 1e-1 and 0.5
#: (fec ieee, seed 1): 0.19, 1.05 and 3.30 GB, i.e. about 1.05 GB x (BER / 0.1)^0.72 (within 9% of
#: each; at 0.03, not a fit point, 0.41 GB measured against 0.44). At 1e-5: 64 MB.
#: tests/integration/test_it_train.py measures it again.
_GEN_READ_BYTES_AT_01 = 1.05e9
_GEN_READ_EXPONENT = 0.72


def source_read_bytes(cfg: TrainConfig) -> float:
    """Peak working memory of a link's error source (bytes): the live generator's first read at
    400G/200G grows with the line BER (:data:`_GEN_READ_BYTES_AT_01`); other sources hold their
    offsets, 8 B per error of a 2^22-bit read and the tail of the previous one."""
    src = cfg.replay.source
    if not cfg.wrapper or src.ber <= 0:
        return 0.0
    if src.kind == "generator" and str(src.rate).upper() in ("400G", "200G"):
        return max(6.4e7, _GEN_READ_BYTES_AT_01 * (src.ber / 0.1) ** _GEN_READ_EXPONENT)
    return 8.0 * src.ber * (1 << 22) * 2  # the offsets and the kept tail of the previous read


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


def _optimizer(cfg: TrainConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW, SGD with momentum or the bounded AdamW (``cfg.optimizer``), weight decay on matrices only."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=SGD_MOMENTUM, foreach=False)
    if cfg.optimizer == "adamw-bounded":
        from integration.optim import BoundedAdamW

        return BoundedAdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), update_bound=cfg.update_bound)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=False)


@torch.no_grad()
def _loss_sum(gpt, x: torch.Tensor, y: torch.Tensor, autocast, rows: int) -> tuple[float, int]:
    """Summed token cross-entropy of ``gpt`` on ``(x, y)`` (``rows`` sequences at a time) and the token count."""
    dev = next(gpt.parameters()).device
    tot, n = 0.0, 0
    gpt.eval()
    try:
        for i in range(0, len(x), rows):
            xb, yb = x[i:i + rows].to(dev), y[i:i + rows].to(dev)
            with autocast():
                logits = gpt(xb)
            tot += float(F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), yb.reshape(-1), reduction="sum"))
            n += yb.numel()
    finally:
        gpt.train()
    return tot, n


def _eval_rows(block: int, vocab: int) -> int:
    """Sequences per evaluation forward pass: logits of at most 2^26 elements (256 MB in fp32)."""
    return max(1, (1 << 26) // (block * vocab))


def _all_finite(g: torch.Tensor) -> bool:
    lo, hi = torch.aminmax(g.detach())  # one pass; an Inf shows at an end, a NaN propagates
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


def _clip_global(params: list[torch.nn.Parameter], max_norm: float, group, across: bool,
                 exclude: tuple = (), wide: bool = False) -> tuple[float, bool]:
    """GPT-2 global norm clipping as ``torch.nn.utils.clip_grad_norm_`` computes it (fp32 norms).

    With ``across`` the squared norm is summed over pipeline stages. An Inf norm (an fp32
    overflow, e.g. one gradient flipped to 1e38) gives a zero coefficient, so the step's update
    is zeroed, as in torch; a NaN norm makes the gradients NaN. Returns ``(norm, grads_finite)``.
    ``exclude``: parameters scaled but not counted in the norm (the last stage's copy of a tied
    matrix, counted once on the first stage). ``max_norm`` 0: the norm is measured, nothing clipped.
    ``wide``: the norms in float64 (:data:`CLIPS`), so only an Inf/NaN gradient makes the norm non-finite.
    """
    skip = {id(p) for p in exclude}
    grads = [p.grad for p in params if p.grad is not None]
    wd = torch.float64 if wide else None
    norms = [torch.linalg.vector_norm(p.grad.detach(), dtype=wd) for p in params
             if p.grad is not None and id(p) not in skip]
    total = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros(())
    if across:
        sq = total.reshape(1).pow(2)
        dist.all_reduce(sq, group=group)  # a one-element float: control traffic, never corrupted
        total = sq.sqrt()[0]
    if max_norm > 0:
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.detach().mul_(coef)
    norm = float(total)
    # only a tensor whose own norm is not finite can hold an Inf/NaN element
    finite = math.isfinite(norm) or all(_all_finite(g) for g in grads)
    return norm, finite


def _frozen_count(opt: torch.optim.Optimizer) -> int:
    """Elements of this rank's optimizer whose second moment (AdamW ``exp_avg_sq``) is Inf or NaN.

    A gradient element above ~1.8e19 (one flipped exponent bit) squares to Inf in fp32; AdamW's
    ``exp_avg_sq = beta2 * v + (1 - beta2) * g^2`` then stays Inf for good (``beta2 * inf = inf``)
    and the element's update ``m / (sqrt(v) + eps)`` is 0 (NaN if ``m`` is Inf too): the weight is
    frozen for the rest of the run, whatever clipping does later. One pass over the state per step,
    summed where the state lives and read once (one host sync per step on a GPU, not one per tensor).
    """
    counts = []
    for st in opt.state.values():
        v = st.get("exp_avg_sq")
        if v is None:
            continue
        v = v.to_local() if hasattr(v, "to_local") else v  # FSDP2: this rank's shard
        counts.append((~torch.isfinite(v)).sum())
    return int(torch.stack(counts).sum()) if counts else 0


def train_worker(rank: int, cfg: TrainConfig, init_method: str, out_dir: str) -> str | None:
    """Body of one rank. Rank 0 writes ``result.json`` (and ``params.pt``) into ``out_dir``.

    Returns ``None`` when the job finished, else why it failed (a :class:`LinkFailure`: the data
    could not be delivered; ``result.json`` then says ``failed``). Any other error is raised.
    """
    try:
        return _train_worker(rank, cfg, init_method, out_dir)
    except BaseException:
        with open(os.path.join(out_dir, f"error_rank{rank}.txt"), "w", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
        raise


def _injected(metrics: Metrics) -> tuple[float, float]:
    """``(sum perturbation_sq, sum signal_sq)`` over all classes of one rank's counters so far."""
    return (float(sum(metrics.perturbation_sq.values())), float(sum(metrics.signal_sq.values())))


@dataclass
class _RunRecord:
    """What one rank records as it trains (rank 0's goes into ``result.json``; a failed run's too)."""

    step: int | None = None  #: the step being run (None: still setting up)
    train_loss: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  #: rank 0's replica, on the curve batches
    evals_mean: list[tuple[int, float]] = field(default_factory=list)  #: mean over DDP replicas
    divergence: list[tuple[int, float]] = field(default_factory=list)  #: DDP replicas' relative distance
    tied_div: list[tuple[int, float]] = field(default_factory=list)  #: PP: first vs last stage's tied copy
    grad_norms: list[float] = field(default_factory=list)
    noise_steps: list[float] = field(default_factory=list)  #: injected noise per step (this rank)
    step_times: list[float] = field(default_factory=list)
    frames_steps: list[list[int]] = field(default_factory=list)  #: per step: this rank's frames lost, resent
    skipped: int = 0
    nonfinite_steps: int = 0
    overflow_steps: int = 0
    first_nonfinite: int | None = None
    #: optimizer-state elements (AdamW ``exp_avg_sq``) that are Inf/NaN after the step: a weight that
    #: never moves again (update m / (sqrt(inf) + eps) = 0, or NaN); per step where it changed
    frozen_steps: list[tuple[int, int]] = field(default_factory=list)
    final_eval: dict[str, Any] = field(default_factory=dict)  #: the fixed set: val_loss_replicas, val_tokens
    last_full: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  #: parameters at the final measurement


@dataclass
class _Parallel:
    """One rank's part of the model under its parallelism (built by :data:`_SETUP`: ``(cfg, gpt, gpt
    config, group, device, rank, hooks)``; ``hooks``: the phy802 group when it is reached through
    torch's seams beside the stock ``group`` (``replay_via="hooks"``), else ``None``)."""

    params: list  #: the parameters this rank's optimizer steps
    gen: torch.Generator  #: the data order (DDP/FSDP: per rank; PP: the same batch on every stage)
    per_rank: int  #: sequences per step on this rank
    model: torch.nn.Module | None = None  #: what a DDP/FSDP step calls
    eval_gpt: torch.nn.Module | None = None  #: FSDP: an unsharded copy, loaded at each measurement
    schedule: Any = None  #: PP: the pipeline schedule (GPipe / 1F1B)


def _setup_ddp(cfg: TrainConfig, gpt, gcfg, group, dev: torch.device, rank: int, hooks=None) -> _Parallel:
    from torch.nn.parallel import DistributedDataParallel as DDP

    gpt.to(dev)
    model = DDP(gpt, process_group=group, device_ids=[dev.index] if dev.type == "cuda" else None)
    if hooks is not None or (cfg.wrapper and cfg.comm_dtype != "fp32"):
        # the gradient all-reduces through the phy802 group (DDP's comm hook; --comm-dtype: in 16 bits)
        from integration.ddp_hooks import install_ddp_hook

        install_ddp_hook(model, hooks if hooks is not None else group, cfg.comm_dtype)
    elif cfg.comm_dtype != "fp32":  # the plain-backend baseline: torch's own compression hook
        from integration.ddp_hooks import torch_compress_hook

        model.register_comm_hook(group, torch_compress_hook(cfg.comm_dtype))
    return _Parallel(list(model.parameters()), torch.Generator().manual_seed(_seed_int(cfg.seed, 2, rank)),
                     cfg.batch_size // cfg.world_size, model=model)


def _setup_fsdp(cfg: TrainConfig, gpt, gcfg, group, dev: torch.device, rank: int, hooks=None) -> _Parallel:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    from integration.model import GPT

    gpt.to(dev)
    mesh = DeviceMesh.from_group(group, device_type=dev.type)
    for blk in gpt.h:
        fully_shard(blk, mesh=mesh)
    fully_shard(gpt, mesh=mesh)
    if hooks is not None:  # parameter all-gathers and gradient reduce-scatters through the phy802 group
        from integration.fsdp_hooks import install_fsdp_hooks

        install_fsdp_hooks(gpt, hooks)
    par = _Parallel(list(gpt.parameters()), torch.Generator().manual_seed(_seed_int(cfg.seed, 2, rank)),
                    cfg.batch_size // cfg.world_size, model=gpt)
    torch.manual_seed(_seed_int(cfg.seed, 1))
    par.eval_gpt = GPT(gcfg).to(dev)
    return par


def _setup_pp(cfg: TrainConfig, gpt, gcfg, group, dev: torch.device, rank: int, hooks=None) -> _Parallel:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from integration.model import split_stages

    world = cfg.world_size
    gpt.to(dev)  # the whole model on the device: rank 0 evaluates it after gathering the stages
    stage_mod = split_stages(gpt, world)[rank]
    if hooks is None:
        stage = PipelineStage(stage_mod, rank, world, dev, group=group)
    else:  # received activations and activation gradients replayed through the phy802 group
        from integration.pp_hooks import ReplayStage

        stage = ReplayStage(stage_mod, rank, world, dev, group=group, replay_group=hooks)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))

    sched_cls = ScheduleGPipe if cfg.schedule == "gpipe" else Schedule1F1B
    return _Parallel(list(stage_mod.parameters()), torch.Generator().manual_seed(_seed_int(cfg.seed, 2)),
                     cfg.batch_size, schedule=sched_cls(stage, n_microbatches=cfg.microbatches, loss_fn=loss_fn))


#: the set-up of each parallelism: ``(cfg, gpt, gpt config, group, device, rank, hooks) -> _Parallel``
_SETUP: dict[str, Callable[..., _Parallel]] = {"ddp": _setup_ddp, "fsdp": _setup_fsdp, "pp": _setup_pp}


def _forward_backward(cfg: TrainConfig, rank: int, par: _Parallel, corpus, dev: torch.device, autocast,
                      scaler) -> float:
    """One step's forward and backward pass on this rank; its training loss (PP: the last stage's
    mean over microbatches, NaN on the other stages)."""
    world = cfg.world_size
    x, y = corpus.batch("train", par.per_rank, cfg.block_size, par.gen)
    x, y = x.to(dev), y.to(dev)
    if cfg.parallel in ("ddp", "fsdp"):
        with autocast():
            logits = par.model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
        (scaler.scale(loss) if scaler is not None else loss).backward()
        return float(loss.detach())
    with autocast():  # bf16: stage forwards in bf16, so activations cross the links in bf16
        if rank == 0:
            par.schedule.step(x)
        elif rank == world - 1:
            losses: list[torch.Tensor] = []
            par.schedule.step(target=y, losses=losses)
            return float(torch.stack([l.detach().float() for l in losses]).mean())
        else:
            par.schedule.step()
    return float("nan")


class _Evaluator:
    """The measurements of a run, over the clean default group (never corrupted): the loss curve on
    fixed random validation batches, the final loss on the fixed set, DDP's replica divergence and
    PP's tied-copy distance. DDP: every rank evaluates its own replica; FSDP and PP: every rank
    holds the full model (gathered shards / all stages broadcast) and the fixed set is split
    between the ranks."""

    def __init__(self, cfg: TrainConfig, rank: int, gpt, eval_gpt, corpus, vocab: int, autocast, paused,
                 tied: bool) -> None:
        self.cfg, self.rank, self.world = cfg, rank, cfg.world_size
        self.gpt, self.eval_gpt, self.autocast, self.paused, self.tied = gpt, eval_gpt, autocast, paused, tied
        self.vx, self.vy = corpus.val_windows(cfg.val_tokens, cfg.block_size)  # the fixed validation set
        cgen = torch.Generator().manual_seed(_seed_int(cfg.seed, 99))
        curve = [corpus.batch("val", cfg.batch_size, cfg.block_size, cgen) for _ in range(cfg.eval_iters)]
        self.cx, self.cy = torch.cat([c[0] for c in curve]), torch.cat([c[1] for c in curve])
        self.rows = _eval_rows(cfg.block_size, vocab)

    def _load_full(self) -> None:
        """FSDP: gather the shards into the unsharded copy (one parameter at a time)."""
        if self.cfg.parallel == "fsdp":
            with self.paused(), torch.no_grad():  # measurement: gathered through the group, never corrupted
                for q, p in zip(self.eval_gpt.parameters(), self.gpt.parameters()):
                    q.copy_(p.full_tensor().detach())

    def _replica_divergence(self) -> float:
        """Max over ranks of ||w_rank - w_0|| / ||w_0||, one parameter at a time (no full copies)."""
        num = den = 0.0
        with torch.no_grad():
            for p in self.gpt.parameters():
                mine_p = p.detach().cpu()
                ref = mine_p.clone() if self.rank == 0 else torch.empty(p.shape, dtype=p.dtype)
                dist.broadcast(ref, src=0)
                num += float((mine_p.double() - ref.double()).pow(2).sum())
                den += float(ref.double().pow(2).sum())
        allv = [torch.zeros(1, dtype=torch.float64) for _ in range(self.world)]
        dist.all_gather(allv, torch.tensor([num], dtype=torch.float64))
        return math.sqrt(max(float(v) for v in allv)) / max(math.sqrt(den), 1e-30)

    def _gather_stages(self, rec: _RunRecord, step: int) -> None:
        """PP: every stage's parameters broadcast to every rank (and the tied copies compared)."""
        gpt, rank = self.gpt, self.rank
        if self.tied:
            first = gpt.wte.weight.data.cpu().clone() if rank == 0 else torch.empty(gpt.wte.weight.shape)
            dist.broadcast(first, src=0)
        for p, owner in zip(gpt.parameters(), _param_owners(gpt, self.world)):
            tmp = p.data.cpu()
            dist.broadcast(tmp, src=owner)
            p.data.copy_(tmp)
        if self.tied:  # the last stage's copy was broadcast (owner); how far the first stage's is
            last = gpt.wte.weight.data.cpu()
            rec.tied_div.append((step, float((first - last).norm()) / max(float(last.norm()), 1e-30)))

    def measure(self, rec: _RunRecord, step: int, final: bool = False) -> None:
        """Record the curve's point at ``step`` (and with ``final`` the fixed set's loss) in ``rec``."""
        cfg, rank, world, autocast, rows = self.cfg, self.rank, self.world, self.autocast, self.rows
        if cfg.parallel == "pp":
            self._gather_stages(rec, step)
        self._load_full()
        if cfg.parallel == "ddp" and world > 1:
            rec.divergence.append((step, self._replica_divergence()))
        em = self.eval_gpt if self.eval_gpt is not None else self.gpt
        if final and rank == 0:
            rec.last_full = flat_params(em).cpu()
        if cfg.parallel == "ddp":
            t, n = _loss_sum(em, self.cx, self.cy, autocast, rows)
            losses = torch.tensor([t / n], dtype=torch.float64)
            allv = [torch.empty_like(losses) for _ in range(world)]
            dist.all_gather(allv, losses)
            rec.evals.append((step, float(allv[0])))
            rec.evals_mean.append((step, float(np.mean([float(v) for v in allv]))))
        else:
            t, n = _loss_sum(em, self.cx, self.cy, autocast, rows) if rank == 0 else (0.0, 1)
            rec.evals.append((step, t / n))
            rec.evals_mean.append((step, t / n))
        if not final:
            return
        vx, vy = self.vx, self.vy
        if cfg.parallel == "ddp":
            t, n = _loss_sum(em, vx, vy, autocast, rows)
            v = torch.tensor([t / n], dtype=torch.float64)
            allv = [torch.empty_like(v) for _ in range(world)]
            dist.all_gather(allv, v)
            per = [float(a) for a in allv]
        else:
            t, n = _loss_sum(em, vx[rank::world], vy[rank::world], autocast, rows) \
                if len(vx[rank::world]) else (0.0, 0)
            tn = torch.tensor([t, float(n)], dtype=torch.float64)
            dist.all_reduce(tn)
            per = [float(tn[0] / tn[1])]
        rec.final_eval.update(val_loss_replicas=per, val_tokens=int(vy.numel()))


def _device_of(cfg: TrainConfig, rank: int) -> torch.device:
    """This rank's device: its local GPU (``LOCAL_RANK``, made current) or the CPU."""
    if cfg.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank)) % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _clip_and_step(cfg: TrainConfig, rec: _RunRecord, step: int, par, opt, scaler, group, guard: str, tied_w,
                   rank: int) -> float:
    """Clip (``cfg.clip``), agree across ranks whether the step's gradients were finite, count it, and
    step the optimizer (or skip the step: ``skip_nonfinite_step``); returns the gradient norm."""
    world = cfg.world_size
    if scaler is not None:
        scaler.unscale_(opt)
    max_norm = cfg.grad_clip if cfg.clip != "none" else 0.0
    if cfg.parallel == "fsdp":
        norm, grads_finite = _clip_dtensor(par.params, max_norm)
    else:
        norm, grads_finite = _clip_global(par.params, max_norm, group, across=cfg.parallel == "pp",
                                          exclude=(tied_w,) if tied_w is not None and rank == world - 1 else (),
                                          wide=cfg.clip == "wide")
    # 2: a gradient element is Inf/NaN; 1: the fp32 norm overflowed (update zeroed); agreed by all ranks
    flag = torch.tensor([0 if math.isfinite(norm) else (1 if grads_finite else 2)], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)  # int on CPU: control, never corrupted
    if flag.item() == 2:
        rec.nonfinite_steps += 1
        rec.first_nonfinite = step if rec.first_nonfinite is None else rec.first_nonfinite
    elif flag.item() == 1:
        rec.overflow_steps += 1
    if flag.item() and guard == "skip_nonfinite_step":
        rec.skipped += 1
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.update()  # lowers the scale if unscale_ found an Inf
    elif scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    return norm


def _account_step(rec: _RunRecord, group, inj0: tuple[float, float]) -> None:
    """The wrapper's per-step record: the ranks agree whether any lost a frame, the injected noise
    of the step, the frames lost and resent so far."""
    # on a stream-ordered inner (NCCL) an op's completion says nothing of the peers: the
    # ranks agree once a step whether any of them lost a frame (one store look-up)
    group.check_failures()
    inj1 = _injected(group.metrics)
    dp, ds = inj1[0] - inj0[0], inj1[1] - inj0[1]
    rec.noise_steps.append(math.sqrt(dp / ds) if ds > 0 and math.isfinite(dp) else
                           (math.inf if not math.isfinite(dp) else 0.0))
    rec.frames_steps.append([group.metrics.total("frames_lost"), group.metrics.total("frames_resent")])


def _gather_and_write(cfg: TrainConfig, rank: int, rec: _RunRecord, group, gpt, out_dir: str, n_params: int,
                      vocab_size: int, gcfg) -> None:
    """Gather every rank's counters on rank 0 (default group), write the flip logs and the comm log
    where asked, and rank 0's ``params.pt`` and result."""
    world = cfg.world_size
    parts: list[Any] = [None] * world
    mine = {"metrics": group.metrics.to_dict() if cfg.wrapper else {}, "frames_steps": rec.frames_steps,
            "frozen_steps": rec.frozen_steps,
            "flips": len(group.log) if cfg.wrapper else 0,
            "log_dropped": group.log.dropped if cfg.wrapper else 0,
            "grad_hits": group.log.elements_hit(GRAD_CLASSES) if cfg.wrapper else 0,
            "rss_mb": _peak_rss_mb(),
            "comm": {"records": group.commlog.records(), "step_s": rec.step_times} if cfg.wrapper else {}}
    dist.all_gather_object(parts, mine)
    if cfg.wrapper and cfg.dump_logs:
        with open(os.path.join(out_dir, f"log_rank{rank}.json"), "w", encoding="utf-8") as fh:
            json.dump({"records": group.log.records(), "messages": group.log.messages}, fh)
    if rank == 0 and cfg.wrapper and cfg.comm_log:  # phy802 train --comm-log
        from integration.commlog import save_gathered

        save_gathered(cfg.comm_log, [p["comm"] for p in parts], parallel=cfg.parallel,
                      params=sum(p.numel() for p in gpt.parameters()), microbatches=cfg.microbatches,
                      schedule=cfg.schedule, tokens_per_step=cfg.batch_size * cfg.block_size)
    if rank == 0:
        torch.save(rec.last_full, os.path.join(out_dir, "params.pt"))
        _write_result(out_dir, _result(cfg, rec, parts, n_params, vocab_size, gcfg))


def _train_worker(rank: int, cfg: TrainConfig, init_method: str, out_dir: str) -> str | None:
    from contextlib import nullcontext

    from integration.model import GPT
    from integration.process_group import register
    from integration.registration import load_backend_plugins

    load_backend_plugins(cfg.backend_plugins)  # before any group: the inner backends they register
    torch.set_num_threads(cfg.threads)
    world = cfg.world_size
    rec = _RunRecord()
    timeout = timedelta(seconds=cfg.comm_timeout_s)
    dev = _device_of(cfg, rank)
    # the default group carries measurement traffic (CPU tensors, gloo), never corrupted
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world, timeout=timeout)
    try:
        stock = "nccl" if dev.type == "cuda" else "gloo"
        if cfg.wrapper:
            register(cfg.replay)
            group = dist.new_group(backend="phy802", timeout=timeout)
        else:
            group = dist.new_group(backend=stock, timeout=timeout)
        hooks = cfg.wrapper and cfg.replay_via == "hooks"
        # hooks: the model runs on a stock group, and its gradient (FSDP: and parameter) collectives,
        # or its pipeline stage's received tensors, reach the phy802 group through torch's seams
        model_group = dist.new_group(backend=stock, timeout=timeout) if hooks else group
        paused = group.paused if cfg.wrapper else nullcontext
        corpus = load_data(cfg, check=False)  # checked once before the processes started (run_many, CLI)
        gcfg = model_config(cfg, corpus)
        torch.manual_seed(_seed_int(cfg.seed, 1))  # same initial weights on every rank
        gpt = GPT(gcfg)
        n_params = sum(p.numel() for p in gpt.parameters())
        guard = cfg.replay.guard if cfg.wrapper else "none"
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
        # fp16 compute or fp16 gradients on the link: torch's loss scaling (small gradients would flush to 0)
        scaler = torch.amp.GradScaler(dev.type) if "fp16" in (cfg.precision, cfg.comm_dtype) else None

        def autocast():
            return torch.autocast(dev.type, dtype=amp_dtype) if amp_dtype is not None else nullcontext()

        par = _SETUP[cfg.parallel](cfg, gpt, gcfg, model_group, dev, rank, group if hooks else None)
        # tied embeddings under PP: the first stage's wte and the last stage's head are copies of one
        # matrix; their gradients are summed between those two ranks each step (class tied_grads)
        tied = gcfg.tie_embeddings and cfg.parallel == "pp"
        tied_w = gpt.wte.weight if tied and rank in (0, world - 1) else None
        opt = _optimizer(cfg, par.params)
        evaluator = _Evaluator(cfg, rank, gpt, par.eval_gpt, corpus, gcfg.vocab_size, autocast, paused, tied)

        for step in range(cfg.steps):
            rec.step = step
            if step % cfg.eval_interval == 0:
                evaluator.measure(rec, step)
            inj0 = _injected(group.metrics) if cfg.wrapper else (0.0, 0.0)
            if cfg.wrapper:
                group.commlog.mark_step(step)  # comm log step boundary (integration/commlog.py)
            t0 = time.perf_counter()
            for pg in opt.param_groups:
                pg["lr"] = _lr_at(cfg, step)
            opt.zero_grad(set_to_none=True)
            local_loss = _forward_backward(cfg, rank, par, corpus, dev, autocast, scaler)
            if tied_w is not None:
                _sum_tied_grad(tied_w, world - 1 if rank == 0 else 0, group, cfg.wrapper)
            norm = _clip_and_step(cfg, rec, step, par, opt, scaler, group, guard, tied_w, rank)
            rec.step_times.append(time.perf_counter() - t0)
            rec.grad_norms.append(norm)
            frozen = _frozen_count(opt)
            if frozen != (rec.frozen_steps[-1][1] if rec.frozen_steps else 0):
                rec.frozen_steps.append((step, frozen))
            if cfg.wrapper:
                _account_step(rec, group, inj0)
            # the training loss as rank 0 reports it (PP: the last stage's, over the clean group)
            lt = torch.tensor([local_loss], dtype=torch.float64)
            if cfg.parallel == "pp":
                dist.broadcast(lt, src=world - 1)
            rec.train_loss.append(float(lt))
        evaluator.measure(rec, cfg.steps, final=True)

        _gather_and_write(cfg, rank, rec, group, gpt, out_dir, n_params, corpus.vocab_size, gcfg)
        dist.barrier()
    except Exception:  # undeliverable data fails the run, on every rank at the same op
        grp = locals().get("group")  # (DDP re-raises a failed future as RuntimeError: ask the group)
        failure = getattr(grp, "failed", None) if cfg.wrapper else None
        if not isinstance(failure, LinkFailure):
            raise
        # before the gather below blocks on the default group: a stage in error by its own lost
        # frames that waits on a send/recv with this one stops waiting (instead of the group timeout)
        grp.mark_stopped()
        _write_failed_run(rank, world, cfg, out_dir, failure, grp, rec, locals().get("gpt"))
        return str(failure)
    finally:
        dist.destroy_process_group()


def _result(cfg: TrainConfig, rec: _RunRecord, parts: list[dict], n_params: int, data_vocab_size: int,
            gcfg) -> dict[str, Any]:
    """Rank 0's ``result.json`` of a finished run: its record, and every rank's counters (``parts``)."""
    nonf_loss = [i for i, l in enumerate(rec.train_loss) if not math.isfinite(l)]
    merged = Metrics.merge([p["metrics"] for p in parts])
    finite_noise = [v for v in rec.noise_steps if math.isfinite(v)]
    per = rec.final_eval["val_loss_replicas"]
    return {
        "config": cfg.to_dict(),
        "n_params": n_params,
        "vocab": {"data": int(data_vocab_size), "model": int(gcfg.vocab_size), "tied": gcfg.tie_embeddings},
        "data": cfg.data if cfg.data is not None else f"{cfg.corpus} ({cfg.tokenizer})",
        "train_loss": rec.train_loss,
        "evals": rec.evals,
        "evals_replica_mean": rec.evals_mean,
        # the fixed validation set (first val_tokens tokens of the split), rank 0's replica
        "final_val_loss": per[0],
        "val_tokens": rec.final_eval["val_tokens"],
        "val_loss_replicas": per,
        "val_loss_replica_mean": float(np.mean(per)),
        "val_loss_replica_sd": float(np.std(per, ddof=1)) if len(per) > 1 else 0.0,
        "val_loss_replica_spread": float(np.max(per) - np.min(per)) if len(per) > 1 else 0.0,
        "tied_divergence": rec.tied_div[-1][1] if rec.tied_div else None,
        "peak_rss_mb": max(p["rss_mb"] for p in parts),
        "divergence": rec.divergence,
        "final_divergence": rec.divergence[-1][1] if rec.divergence else 0.0,
        "grad_norms": rec.grad_norms,
        "skipped_steps": rec.skipped,
        "nonfinite_steps": rec.nonfinite_steps,
        "overflow_steps": rec.overflow_steps,
        "first_nonfinite_step": rec.first_nonfinite,
        "nonfinite_loss_steps": len(nonf_loss),
        "first_nonfinite_loss_step": nonf_loss[0] if nonf_loss else None,
        "step_time_ms": 1e3 * float(np.median(rec.step_times[min(5, len(rec.step_times) - 1):])),
        "metrics": merged,
        # what the link injected: ||delivered - clean|| / ||clean|| of the received float
        # payload (after the guard), over the whole run (all ranks) and per step (rank 0)
        "injected_noise": Metrics.injected_noise(merged) if cfg.wrapper else 0.0,
        "injected_noise_steps": rec.noise_steps,
        "injected_noise_step_median": float(np.median(finite_noise)) if finite_noise else
        (math.inf if rec.noise_steps else 0.0),
        "flips_logged": int(sum(p["flips"] for p in parts)),
        "log_dropped": int(sum(p["log_dropped"] for p in parts)),
        "param_norm": float(rec.last_full.norm()),
        "source_kind": resolved_kind(cfg.replay.source) if cfg.wrapper else "none",
        **_frame_counts(merged, parts, cfg),
    }


def _write_result(out_dir: str, result: dict[str, Any]) -> None:
    """``result.json`` in ``out_dir``, written whole or not at all (a reader polls for it)."""
    tmp = os.path.join(out_dir, ".result.json.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, allow_nan=True)
    os.replace(tmp, os.path.join(out_dir, "result.json"))


def failed_when(step: int | None) -> str:
    """Where a failed run stopped, in words: ``at step N``, or during the set-up (``failed_step`` None:
    e.g. DDP's parameter broadcast at construction could not be delivered)."""
    return f"at step {step}" if step is not None else "during set-up, before step 0"


def _frame_counts(merged: dict, parts: list, cfg: TrainConfig, failure: LinkFailure | None = None,
                  failed_step: int | None = None) -> dict[str, Any]:
    """Frames lost / resent and failed ops of the run (all ranks) and per step, which BER it was given
    and which it delivered, and the weights its optimizer state froze."""
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
            "ber_is": ber_meaning(kind) if kind != "none" else "none",
            "ber_delivered": delivered_ber(cfg, merged), **_frozen(parts, cfg), **_grad_hits(merged, parts, cfg)}


def _frozen(parts: list, cfg: TrainConfig) -> dict[str, Any]:
    """Weights frozen by an Inf/NaN optimizer state (:func:`_frozen_count`): at the end of the run and
    the first step one froze. DDP: rank 0's replica (every replica holds the whole state; the
    per-replica counts are kept); FSDP and PP: the sum over the ranks' parts. SGD keeps no second
    moment: ``None`` (not measured; an Inf gradient there makes the weight Inf/NaN instead)."""
    if cfg.optimizer not in ADAM_OPTIMIZERS:
        return {"frozen_weights": None, "frozen_weights_replicas": [], "first_frozen_step": None}
    per = [p.get("frozen_steps", []) for p in parts]
    ends = [s[-1][1] if s else 0 for s in per]
    firsts = [s[0][0] for s in per if s]
    if cfg.parallel == "ddp":
        frozen, first = ends[0], (per[0][0][0] if per[0] else None)
    else:
        frozen, first = sum(ends), (min(firsts) if firsts else None)
    return {"frozen_weights": int(frozen), "frozen_weights_replicas": ends, "first_frozen_step": first}


#: the traffic classes that carry parameter gradients (DDP's all-reduce, FSDP's reduce-scatter, PP's
#: tied copy): a flip there lands on one element of one step's gradient, what :func:`noise_bound` counts
GRAD_CLASSES = ("gradients", "tied_grads")


def adam_step_factor(beta1: float, beta2: float) -> float:
    """The most one Adam(W) step can move an element, in learning rates, whatever its gradients:
    ``|m_hat / sqrt(v_hat)| <= (1 - beta1) / sqrt((1 - beta2) (1 - beta1^2 / beta2))`` (Cauchy-Schwarz
    on the two moving averages; bias correction and ``eps`` only lower it; needs ``beta1^2 < beta2``).
    GPT-2's betas (0.9, 0.95): 1.165."""
    return (1 - beta1) / math.sqrt((1 - beta2) * (1 - beta1 * beta1 / beta2))


def noise_bound(cfg: TrainConfig, elements_hit: int) -> float | None:
    """The study's bound on the weight noise link errors cause: ``lr x sqrt(elements_hit)``.

    The argument: AdamW normalises each element's update by its own second moment, so one step moves
    an element by at most :func:`adam_step_factor` x lr (1.165 lr at GPT-2's betas) however large a
    flipped gradient is; a hit element is displaced by about one learning rate, and hits of random
    sign add in quadrature. Assumptions (each one a way the measured distance can exceed it): a hit
    acts in its own step only (a spike's momentum keeps pushing the element for ~1/(1-beta1) steps,
    and its second moment holds the element's later updates back, Inf for good when the square
    overflowed: ``frozen_weights``); the hits are independent; training does not amplify the
    displacement afterwards (a trajectory that diverges from the error-free one is not bounded
    noise). ``lr`` is the schedule's peak (warm-up and cosine decay only lower it), the factor
    1.165 is left out, as the study states the bound. SGD's step is proportional to the gradient,
    so no such bound exists: ``None``."""
    if cfg.optimizer not in ADAM_OPTIMIZERS:
        return None
    return cfg.lr * math.sqrt(elements_hit)


def _grad_hits(merged: dict, parts: list, cfg: TrainConfig) -> dict[str, Any]:
    """Gradient elements hit by delivered flips over the run (all ranks) and :func:`noise_bound`.

    ``grad_hits_counted`` says what was counted: ``elements`` (distinct elements per received
    message, :meth:`integration.replay.InjectionLog.elements_hit`: several bits of one element in one
    message count once), or ``flips`` (the flips applied on :data:`GRAD_CLASSES`, an upper bound)
    when a rank's log overflowed its limit and the element count would miss some. Summed over the
    ranks: under DDP a flip that one replica alone received does not move rank 0's weights (the
    ones the experiment compares), so the bound is looser there, by up to sqrt(world size)."""
    if any(p.get("log_dropped", 0) for p in parts):
        inj = merged.get("errors_injected", {})
        hits, what = int(sum(inj.get(c, 0) for c in GRAD_CLASSES)), "flips"
    else:
        hits, what = int(sum(p["grad_hits"] for p in parts)), "elements"
    return {"grad_elements_hit": hits, "grad_hits_counted": what, "noise_bound": noise_bound(cfg, hits)}


def delivered_ber(cfg: TrainConfig, merged: dict) -> dict[str, Any]:
    """The payload BER the run delivered, measured: every flip that reached a received payload
    (``errors_injected`` + ``errors_unselected``, all ranks) over every payload bit received, next
    to the BER it was given (``given``, of kind ``ber_is``); ``why``: one line saying why a run at a
    non-zero BER delivered no flip (else ``None``)."""
    flips = int(sum(merged.get("errors_injected", {}).values()) + sum(merged.get("errors_unselected", {}).values()))
    bits = int(sum(merged.get("payload_bits", {}).values()))
    src = cfg.replay.source
    given = float(src.ber) if cfg.wrapper else 0.0
    why = _no_flip_why(cfg, merged) if flips == 0 and given > 0 else None
    return {"flips": flips, "payload_bits": bits, "value": flips / bits if bits else 0.0, "given": given,
            "ber_is": ber_meaning(src.kind) if given > 0 else "error-free", "why": why}


def _no_flip_why(cfg: TrainConfig, merged: dict) -> str:
    """Why a run at BER > 0 delivered no flip, in one line: its FEC mode corrected (or marked and
    resent) them -- with the closed-form expected count of uncorrectable codewords for independent
    bit errors (a model value, :func:`phy802.theory.rs_codeword_error_ratio`) -- or so few bits
    crossed the links that none was expected (``BER x bits`` against ``P(0) = e^-mean``)."""
    from protocol.modes import get_mode

    src = cfg.replay.source
    mode = get_mode(src.fec)
    line = int(sum(merged.get("line_bits", {}).values()))
    stream = int(sum(merged.get("stream_bits", {}).values()))
    if src.kind == "generator" and mode.decoder != "none":
        from phy802 import theory

        try:
            code = theory.rs_code(src.code)
        except ValueError:
            code = None
        if code is not None:
            what = ("corrects up to t=%d symbol errors per RS(%d,%d) codeword" % (code.t, code.n, code.k)
                    if mode.corrects else f"checks every RS({code.n},{code.k}) codeword")
            if mode.indicate:
                what += " and marks the rest, whose frames are resent"
            if not mode.corrects:
                return f"no flip delivered: --fec {mode.name} {what}"
            cer = theory.rs_codeword_error_ratio(theory.symbol_error_prob(src.ber, code.m), code)
            words = line / (code.n * code.m)
            return (f"no flip delivered: --fec {mode.name} {what}; at pre-FEC line BER {src.ber:g} it leaves ~0 "
                    f"post-FEC errors (model, independent bit errors: {words * cer:.2g} uncorrectable codewords "
                    f"expected in the {line:.3g} line bits carried)")
    bits = line if src.kind == "generator" else stream
    mean = src.ber * bits
    return (f"no flip delivered: {bits:.3g} {'line' if src.kind == 'generator' else 'stream'} bits at BER "
            f"{src.ber:g} expect {mean:.2g} flips (P(none) = {math.exp(-mean):.2g})")


def _write_failed_run(rank: int, world: int, cfg: TrainConfig, out_dir: str, exc: LinkFailure, group,
                      rec: _RunRecord, gpt: torch.nn.Module | None) -> None:
    """A run stopped by a :class:`LinkFailure`: gather the counters over the clean default group and
    write ``result.json`` (``failed``, ``failed_step``, ``final_val_loss`` NaN: the job did not finish)."""
    step = rec.step
    mine = {"metrics": group.metrics.to_dict(), "frames_steps": rec.frames_steps, "frozen_steps": rec.frozen_steps,
            "flips": len(group.log), "log_dropped": group.log.dropped, "rss_mb": _peak_rss_mb(),
            "grad_hits": group.log.elements_hit(GRAD_CLASSES)}
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, mine)
    if rank == 0:
        merged = Metrics.merge([p["metrics"] for p in parts])
        result = {
            "config": cfg.to_dict(), "train_loss": rec.train_loss, "evals": rec.evals + [(step or 0, math.nan)],
            "final_val_loss": math.nan, "divergence": [], "final_divergence": math.nan,
            "grad_norms": rec.grad_norms, "skipped_steps": rec.skipped,
            "nonfinite_steps": rec.nonfinite_steps, "overflow_steps": rec.overflow_steps,
            "first_nonfinite_step": rec.first_nonfinite, "nonfinite_loss_steps": 0,
            "first_nonfinite_loss_step": step,
            "step_time_ms": 1e3 * float(np.median(rec.step_times)) if rec.step_times else math.nan,
            "metrics": merged, "injected_noise": Metrics.injected_noise(merged), "injected_noise_steps": [],
            "injected_noise_step_median": math.nan, "flips_logged": int(sum(p["flips"] for p in parts)),
            "log_dropped": int(sum(p["log_dropped"] for p in parts)), "param_norm": math.nan,
            "peak_rss_mb": max(p["rss_mb"] for p in parts),
            "source_kind": resolved_kind(cfg.replay.source),
            **_frame_counts(merged, parts, cfg, exc, step),
        }
        last = rec.last_full
        if last.numel() == 0 and gpt is not None:  # failed before the first measurement
            try:
                last = flat_params(gpt).cpu()
            except Exception:  # noqa: BLE001 - sharded (FSDP) parameters: nothing to compare
                pass
        torch.save(last, os.path.join(out_dir, "params.pt"))  # the parameters at the last measurement
        _write_result(out_dir, result)
    dist.barrier()


def _clip_dtensor(params: list[torch.nn.Parameter], max_norm: float) -> tuple[float, bool]:
    """Global-norm clipping of FSDP2 (DTensor) gradients, as ``clip_grad_norm_`` does (fp32 norm)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else math.inf, foreach=False)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    norm = float(total)
    finite = math.isfinite(norm) or all(_all_finite(g.to_local() if hasattr(g, "to_local") else g) for g in grads)
    return norm, finite


def _peak_rss_mb() -> float:
    """This process's peak resident memory (MiB; Linux ``ru_maxrss`` is in KiB)."""
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1 << 20) if sys.platform == "darwin" else r / 1024


def _sum_tied_grad(w: torch.nn.Parameter, peer: int, group, wrapper: bool) -> None:
    """Sum the gradient of a tied matrix with its copy on ``peer`` (first <-> last pipeline stage).

    Both ranks send their gradient and add the one received (``a + b`` on one side, ``b + a`` on
    the other: bit-identical at BER 0, IEEE addition commutes). Through the replay group as
    traffic class ``tied_grads``, so link errors reach it like any other gradient.
    """
    from contextlib import nullcontext

    g = w.grad
    if g is None:
        g = w.grad = torch.zeros_like(w)
    buf = torch.empty_like(g)
    with group.traffic("tied_grads") if wrapper else nullcontext():
        reqs = [dist.isend(g, peer, group=group), dist.irecv(buf, peer, group=group)]
        for r in reqs:
            r.wait()
    g.add_(buf)


def _param_owners(gpt, world: int) -> list[int]:
    from integration.model import split_stages

    owner: dict[int, int] = {}
    for s, mod in enumerate(split_stages(gpt, world)):
        for p in mod.parameters():
            owner[id(p)] = s
    return [owner[id(p)] for p in gpt.parameters()]


def check_backends(cfgs: list[TrainConfig]) -> None:
    """Load each run's backend plugins here and check the inner backends its replay names, so that a
    bad name is refused (``ValueError`` naming it) before any process starts."""
    from integration.inner import check_inner_backends
    from integration.registration import load_backend_plugins

    for c in cfgs:
        load_backend_plugins(c.backend_plugins)
        if c.wrapper:
            check_inner_backends(c.replay.inner_backends)


def _many_worker(rank: int, cfgs: list[TrainConfig], stores: list[str], dirs: list[str]) -> None:
    from integration.works import end_process_if_waits_stuck

    for cfg, store, d in zip(cfgs, stores, dirs):
        train_worker(rank, cfg, f"file://{store}", d)
    end_process_if_waits_stuck(0)  # a failed pipeline may leave a gloo receive no peer completes


def run_many(cfgs: list[TrainConfig], *, timeout_s: float = 900.0, out_dir: str | None = None,
             on_done: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Run several configurations (same ``world_size``) one after the other in one set of processes.

    Each run gets its own FileStore, process groups and output folder ``<out_dir>/run<i>``
    (``result.json``, ``params.pt``). The processes are terminated and :class:`TrainingTimeout`
    raised if they do not all finish within ``timeout_s``; a process that dies or raises is a
    :class:`~phy802.runtime.workers.JobFailed` too (the command line exits 1). The FileStores' temporary folder is
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
    check_backends(cfgs)
    for key in dict.fromkeys((c.data, data_vocab(c), c.block_size, c.data_dtype) for c in cfgs if c.data is not None):
        from integration.data import TokenFiles

        TokenFiles(key[0], key[1], key[2], dtype=key[3])  # every id checked once here; the ranks open it unchecked
    root = tempfile.mkdtemp(prefix="phy802-train-") if out_dir is None else out_dir
    dirs = [os.path.join(root, f"run{i}") for i in range(len(cfgs))]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        for stale in ("result.json", "params.pt"):
            if os.path.exists(os.path.join(d, stale)):
                os.unlink(os.path.join(d, stale))
    from phy802.runtime.tempfiles import track_temp_dir

    env_prev = os.environ.get("OMP_NUM_THREADS")
    ctx = None
    store_dir = ""
    try:
        store_dir = track_temp_dir("phy802-store-")  # removed at exit too, should an interrupt hit the cleanup
        stores = [os.path.join(store_dir, f"store{i}") for i in range(len(cfgs))]
        os.environ["OMP_NUM_THREADS"] = str(cfgs[0].threads)
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
            raise JobFailed(f"a training process failed: {first[-1] if first else exc}") from None
        except mp.ProcessExitedException as exc:
            raise JobFailed(f"a training process died: {exc}") from None
        poll()
        results = []
        for d in dirs:
            with open(os.path.join(d, "result.json"), encoding="utf-8") as fh:
                r = json.load(fh)
            r["out_dir"] = d
            results.append(r)
        return results
    finally:
        _cleanup(ctx, store_dir, env_prev)


def _cleanup(ctx, store_dir: str, env_prev: str | None) -> None:
    """Stop the ranks, remove the FileStores' folder and torch's ``pytorch-errorfile-*.pickle`` files.

    A second Ctrl-C while this runs must not leave them behind: SIGINT is ignored here (main thread).
    """
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    prev = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        if ctx is not None:  # every exit path: no process outlives the call
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
            for f in getattr(ctx, "error_files", None) or []:  # torch's pytorch-errorfile-*.pickle
                with contextlib.suppress(OSError):
                    os.unlink(f)
        if env_prev is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_prev
        if store_dir:
            from phy802.runtime.tempfiles import remove_temp

            remove_temp(store_dir)
    finally:
        if main:
            signal.signal(signal.SIGINT, prev)


def run_training(cfg: TrainConfig, *, timeout_s: float = 900.0, out_dir: str | None = None) -> dict[str, Any]:
    """Run ``cfg`` in ``world_size`` spawned processes and return rank 0's result dict.

    A fresh FileStore per run (no ports); the processes are terminated and
    :class:`TrainingTimeout` raised if they do not finish within ``timeout_s``. The final
    parameters (float64, rank 0's replica or all stages) are in ``<out_dir>/params.pt``
    (``out_dir=None``: a new temporary folder ``phy802-train-*`` that the caller owns).
    """
    work = tempfile.mkdtemp(prefix="phy802-train-") if out_dir is None else out_dir
    os.makedirs(work, exist_ok=True)
    from phy802.runtime.tempfiles import remove_temp, track_temp_dir

    tmp_root = track_temp_dir("phy802-run-")
    try:
        res = run_many([cfg], timeout_s=timeout_s, out_dir=tmp_root)[0]
        for name in os.listdir(res["out_dir"]):  # result.json, params.pt, log_rank*.json
            os.replace(os.path.join(res["out_dir"], name), os.path.join(work, name))
    finally:
        remove_temp(tmp_root)
    res["out_dir"] = work
    return res
