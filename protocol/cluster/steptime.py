"""Step time of a training run: a communication log replayed through the collective model.

A **communication log** is a plain JSON-lines file (no torch needed to read it): the first line
is a header, every other line one operation one rank issued (written by
:mod:`integration.commlog`, ``phy802 train --comm-log FILE``, or by hand)::

    {"format": "phy802-commlog", "version": 1, "parallel": "ddp", "world_size": 2,
     "params": 823296, "tokens_per_step": 768, "microbatches": 4, "schedule": "1f1b",
     "timing": {"step_s": [0.041, 0.040, ...]}}
    {"rank": 0, "step": 3, "op": "allreduce", "bytes": 3293184, "dtype": "float32",
     "cls": "gradients", "peers": "all"}
    {"rank": 0, "step": 3, "op": "send", "bytes": 24576, "dtype": "float32",
     "cls": "activations", "peers": [1]}

``op`` is one of ``allreduce, reduce_scatter, allgather, broadcast, alltoall, send, recv,
barrier``; ``bytes`` is the full buffer of a collective (the input of a reduce-scatter, the
output of an all-gather) and the message of a send.  Only ``send`` is replayed of a
point-to-point pair (each message once).  ``timing`` holds wall-clock figures only.

Replay rules (documented model, [I] where marked):

* **Compute time** ``C`` per step and rank: measured (the median of ``timing.step_s``, which on
  the CPU test runs includes the local gloo exchange: an upper bound) or from a throughput:
  ``C = 6 P tokens / (ranks x peak_tflops x 1e12 x mfu)`` (6 N FLOPs per token: forward 2N,
  backward 4N; Kaplan et al. 2020, the nanoGPT/PaLM MFU convention).  Forward takes ``C/3``,
  backward ``2C/3`` [I].
* **DDP** (:func:`step_time` with ``parallel == "ddp"``): gradient buckets (``cls ==
  "gradients"``, in issue order) become ready during backward in proportion to the gradient
  bytes already produced: bucket ``i`` is ready at ``C/3 + (2C/3) x B_<=i / B_total`` [I].
  The network runs one collective at a time: ``start_i = max(ready_i, end_{i-1})``,
  ``end_i = start_i + T_i``.  Every other op of the step (control flags, parameter broadcasts)
  runs after backward and the last bucket.  ``step = max(C, end_last) + sum T_other``;
  ``exposed = step - C`` (the communication not hidden behind backward).
* **Pipeline** (``parallel == "pp"``, ``p`` stages = the log's world size, ``m``
  microbatches): per-microbatch compute ``c`` (= ``C / m`` of a stage, or measured
  ``step / (m + p - 1)``), activation hop ``a`` and gradient hop ``g`` (one ``sendrecv`` each,
  full-duplex links).  GPipe and 1F1B have the same bubble:
  ``T_pipe = (m + p - 1) max(c, a, g) + (p - 1)(a + g)``: ``m + p - 1`` slots of the slowest
  of compute and hop, and the ``p - 1`` forward and backward hops of the fill and drain on the
  critical path [I] (Huang et al. 2019, GPipe; Narayanan et al. 2019, PipeDream-1F1B).  With
  ``ranks > p`` the cluster runs ``ranks // p`` data-parallel pipelines: each stage's gradients
  (``4 P / p`` bytes, or the log's ``gradients`` all-reduces) are all-reduced over the
  ``ranks // p`` replicas after the flush, not overlapped [I].  Other ops run serially.
* **FSDP** (``parallel == "fsdp"``, FSDP2 ``fully_shard``): parameters are all-gathered per
  unit before its forward and again before its backward, gradients reduce-scattered per unit in
  backward.  FSDP prefetches the next unit's all-gather during the current unit's compute and
  reduce-scatters during the next unit's backward (Zhao et al., "PyTorch FSDP", VLDB 2023), so
  with the network running one collective at a time all but the first all-gather and the last
  reduce-scatter overlap compute [I]:
  ``step = T_first_ag + max(C, T_all - T_first_ag - T_last_rs) + T_last_rs + sum T_other``.
* A log recorded at one world size replays at any ``ranks``: per-rank bytes are kept
  (weak scaling: the per-rank batch is fixed), collectives are re-timed at ``ranks``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from .flat import Cluster, collective_time
from .topology import ClusterSpec

__all__ = [
    "FORMAT",
    "VERSION",
    "CommLogData",
    "read_commlog",
    "write_commlog",
    "MODEL_PRESETS",
    "MODEL_FIELDS",
    "model_preset",
    "compute_from_flops",
    "synthetic_ddp_log",
    "synthetic_pp_log",
    "synthetic_fsdp_log",
    "PARALLEL",
    "StepTime",
    "step_time",
    "op_time",
    "SimSettings",
    "DEFAULT_SIM",
    "per_trial_sum",
    "with_distribution",
]

FORMAT = "phy802-commlog"
VERSION = 1
PARALLEL = ("ddp", "fsdp", "pp")
_OPS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "alltoall", "send", "recv", "barrier")

#: Named model sizes: parameters, layers (``n_layer``), hidden size (``d_model``), sequence length,
#: tokens per step (the global batch), and ``tp``, the tensor-parallel size of the usual layout
#: (the default of ``--tp`` for the ``tp`` and ``decode`` workloads; None: a node's GPUs).
#:
#: * GPT-2 as published (Radford et al. 2019; 50,257-token vocabulary, 1024 positions, tied
#:   embeddings: ``V d + 1024 d + L (12 d^2 + 13 d) + 2 d``): ``gpt2-124m`` (12 x 768:
#:   124,439,808), ``gpt2-medium`` (24 x 1024: 354,823,168), ``gpt2-large`` (36 x 1280: 774,030,080),
#:   ``gpt2-xl`` (48 x 1600: 1,557,611,200); ``gpt2-small``: the training preset of that name
#:   (``integration.train.MODEL_PRESETS``: vocabulary padded to 50,304 as nanoGPT does:
#:   124,475,904, checked against the model by test).  Tokens per step: 524,288 (nanoGPT's GPT-2
#:   recipe, 0.5 M), 1,048,576 for the XL [I: the GPT-3 paper's batch sizes, 0.5 M tokens for its
#:   125M-760M models, 1 M for 1.3B].  ``tp`` 1: they fit one GPU, data parallel.
#: * ``llama2-7b`` (Touvron et al. 2023, "Llama 2": 32 x 4096, FFN 11,008, vocabulary 32,000,
#:   untied: 6,738,415,616; its global batch of 4 M tokens at 4K sequence), ``llama3-8b`` /
#:   ``llama3-70b`` (Meta, "The Llama 3 Herd of Models", 2024: 32 x 4096; 80 x 8192), 4 M tokens per
#:   step at 8K sequence [I: the paper's 405B batch starts at 4 M tokens], ``mixtral-8x7b``
#:   (Mistral AI, 2024: 32 x 4096, 8 experts top-2, 46.7 B parameters, 12.9 B active; expert
#:   parameters 45.1 B [I: 32 layers x 8 experts x 3 x 4096 x 14336]).  ``tp`` 8 for 70B and Mixtral
#:   (one node, as the Llama 3 paper's 405B layout [I]), 2 for 7-8B [I: the usual Megatron-LM layout].
#:
#: fp32 gradients, bf16 activations throughout.
_BF16_FP32 = dict(grad_dtype_bytes=4, act_dtype_bytes=2)
_GPT2 = dict(seq_len=1024, tokens_per_step=524_288, tp=1, **_BF16_FP32)
_LLAMA = dict(tokens_per_step=4_194_304, seq_len=8192, **_BF16_FP32)
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "gpt2-124m": dict(_GPT2, params=124_439_808, d_model=768, n_layer=12),
    "gpt2-small": dict(_GPT2, params=124_475_904, d_model=768, n_layer=12),
    "gpt2-medium": dict(_GPT2, params=354_823_168, d_model=1024, n_layer=24),
    "gpt2-large": dict(_GPT2, params=774_030_080, d_model=1280, n_layer=36),
    "gpt2-xl": dict(_GPT2, params=1_557_611_200, d_model=1600, n_layer=48, tokens_per_step=1_048_576),
    "llama2-7b": dict(_LLAMA, params=6_738_415_616, d_model=4096, n_layer=32, seq_len=4096, tp=2),
    "llama3-8b": dict(_LLAMA, params=8_030_261_248, d_model=4096, n_layer=32, tp=2),
    "llama3-70b": dict(_LLAMA, params=70_553_706_496, d_model=8192, n_layer=80, tp=8),
    "mixtral-8x7b": dict(_LLAMA, params=46_702_792_704, d_model=4096, n_layer=32, n_experts=8, top_k=2,
                         active_params=12_879_921_152, expert_params=45_097_156_608, tp=8),
}

#: the fields a model needs (:func:`model_preset` of a mapping): what the time side uses
MODEL_FIELDS = ("params", "tokens_per_step", "d_model", "n_layer", "seq_len")


def model_preset(name) -> dict[str, Any]:
    """The :data:`MODEL_PRESETS` entry ``name`` (a copy), or a model given as a mapping with the
    :data:`MODEL_FIELDS` (positive integers; ``tp`` optional, the preset defaults filled in)."""
    if isinstance(name, dict):
        d = {"grad_dtype_bytes": 4, "act_dtype_bytes": 2, "tp": None, **name}
        for k in MODEL_FIELDS:
            v = d.get(k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"model field {k!r} must be an integer >= 1, got {v!r}")
        return d
    key = str(name).strip().lower()
    if key not in MODEL_PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose from {', '.join(MODEL_PRESETS)}")
    return dict(MODEL_PRESETS[key])


def compute_from_flops(params: float, tokens_per_step: float, ranks: int, tflops: float, mfu: float) -> float:
    """``6 P tokens / (ranks x tflops x 1e12 x mfu)`` seconds of compute per step and rank."""
    if not (params > 0 and tokens_per_step > 0 and ranks >= 1):
        raise ValueError(f"params, tokens_per_step must be > 0 and ranks >= 1, got {params}, {tokens_per_step}, {ranks}")
    if not (tflops > 0 and 0 < mfu <= 1):
        raise ValueError(f"tflops must be > 0 and mfu in (0, 1], got {tflops}, {mfu}")
    return 6.0 * params * tokens_per_step / (ranks * tflops * 1e12 * mfu)


@dataclass(frozen=True)
class CommLogData:
    """A communication log: ``header`` (dict) and ``records`` (list of dicts, one per op)."""

    header: dict
    records: list = field(default_factory=list)

    @property
    def parallel(self) -> str:
        return str(self.header.get("parallel", "ddp"))

    @property
    def world_size(self) -> int:
        return int(self.header.get("world_size", 1))

    def steps(self) -> list[int]:
        return sorted({int(r["step"]) for r in self.records})

    def measured_step_s(self) -> float | None:
        """Median measured wall time of a step (``timing.step_s``), or None."""
        xs = [float(x) for x in (self.header.get("timing") or {}).get("step_s", []) if x is not None]
        xs = xs[min(5, len(xs) - 1):] if len(xs) > 1 else xs  # skip warm-up steps, as train does
        return float(statistics.median(xs)) if xs else None


def _check_record(r: Any, where: str) -> dict:
    if not isinstance(r, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(r).__name__}")
    for k in ("step", "op", "bytes"):
        if k not in r:
            raise ValueError(f"{where}: record has no field {k!r}")
    if not isinstance(r["op"], str) or r["op"] not in _OPS:
        raise ValueError(f"{where}: unknown op {r['op']!r} (choose from {', '.join(_OPS)})")
    if not _is_int(r["step"]) or r["step"] < 0:
        raise ValueError(f"{where}: step must be an int >= 0, got {r['step']!r}")
    if "rank" in r and (not _is_int(r["rank"]) or r["rank"] < 0):
        raise ValueError(f"{where}: rank must be an int >= 0, got {r['rank']!r}")
    if isinstance(r["bytes"], bool) or not isinstance(r["bytes"], (int, float)) or not math.isfinite(r["bytes"]) \
            or r["bytes"] < 0:
        raise ValueError(f"{where}: bytes must be a number >= 0, got {r['bytes']!r}")
    return r


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: A communication log is one JSON line per collective; 1 GiB is ~10 M records, far past any log
#: train writes, and a bound that keeps ``/dev/zero`` or a runaway file from filling memory.
MAX_COMMLOG_BYTES = 1 << 30


def _check_header(h: dict, p: str) -> dict:
    """The header's fields typed: a wrong type is a ValueError naming the file,
    the field and the value, not a KeyError/AttributeError/TypeError later."""
    if h.get("format") != FORMAT:
        raise ValueError(f"{p}: not a phy802 communication log (header 'format' must be {FORMAT!r})")
    for k, lo in (("version", 0), ("world_size", 1), ("microbatches", 1), ("params", 0), ("tokens_per_step", 0)):
        if k in h and (not _is_int(h[k]) or h[k] < lo):
            raise ValueError(f"{p}: header field {k!r} must be an int >= {lo}, got {h[k]!r}")
    if h.get("version", 0) > VERSION:
        raise ValueError(f"{p}: communication log version {h.get('version')} is newer than {VERSION}")
    if not isinstance(h.get("parallel", "ddp"), str) or h.get("parallel", "ddp") not in PARALLEL:
        raise ValueError(f"{p}: header parallel must be one of {', '.join(PARALLEL)}, got {h.get('parallel')!r}")
    timing = h.get("timing")
    if timing is not None:
        if not isinstance(timing, dict):
            raise ValueError(f"{p}: header field 'timing' must be a JSON object "
                             f"({{\"step_s\": [...]}}), got {type(timing).__name__} {str(timing)[:40]}")
        xs = timing.get("step_s", [])
        if not isinstance(xs, list):
            raise ValueError(f"{p}: header field 'timing.step_s' must be a list of seconds, got "
                             f"{type(xs).__name__} {str(xs)[:40]}")
        for i, x in enumerate(xs):
            if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))
                                  or not math.isfinite(x) or x < 0):
                raise ValueError(f"{p}: header field 'timing.step_s[{i}]' must be a number of seconds >= 0 "
                                 f"(or null), got {x!r}")
    return h


def read_commlog(path: str | os.PathLike) -> CommLogData:
    """Read a communication log (JSON lines, or one JSON object ``{"header":..., "records": [...]}``).

    A regular file of at most :data:`MAX_COMMLOG_BYTES`, UTF-8, strict JSON (no NaN), each line
    nested at most ``phy802.runtime.inputs.MAX_JSON_DEPTH`` deep, header fields and records typed; anything
    else is a ValueError naming the file (and line or field)."""
    from phy802.runtime.inputs import MAX_JSON_DEPTH, json_depth_ok as _json_depth_ok, read_input_bytes

    p = os.fspath(path)
    data = read_input_bytes(p, MAX_COMMLOG_BYTES, what="communication log")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n" not in stripped.strip():
        lines = [stripped.strip()]
    else:
        lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{p}: empty communication log")

    def constant(c):
        raise ValueError(f"non-JSON constant {c}")

    objs = []
    for i, ln in enumerate(lines, 1):
        if ln.count("[") + ln.count("{") > MAX_JSON_DEPTH and not _json_depth_ok(ln):  # cheap test first
            raise ValueError(f"{p}, line {i}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            objs.append(json.loads(ln, parse_constant=constant))
        except (json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{p}, line {i}: not JSON: {exc}") from None
    if len(objs) == 1 and isinstance(objs[0], dict) and "records" in objs[0]:
        header, recs = objs[0].get("header", {}), objs[0]["records"]
        if not isinstance(recs, list):
            raise ValueError(f"{p}: field 'records' must be a list, got {type(recs).__name__}")
        where = [f"{p}, record {i}" for i in range(len(recs))]
    else:
        header, recs = objs[0], objs[1:]
        where = [f"{p}, line {i + 2}" for i in range(len(recs))]
    if not isinstance(header, dict):
        raise ValueError(f"{p}: not a phy802 communication log (header 'format' must be {FORMAT!r})")
    _check_header(header, p)
    return CommLogData(header, [_check_record(r, w) for r, w in zip(recs, where)])


def write_commlog(path: str | os.PathLike, header: dict, records: Iterable[dict]) -> None:
    """Write a communication log as JSON lines, atomically (temp file + rename)."""
    from phy802.runtime.output import atomic_open

    h = {"format": FORMAT, "version": VERSION, **header}
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(h) + "\n")
        for r in records:
            fh.write(json.dumps(r) + "\n")


def synthetic_ddp_log(params: int, *, world_size: int = 2, bucket_bytes: int = 25 * 2**20,
                      first_bucket_bytes: int = 2**20, dtype_bytes: int = 4, tokens_per_step: int | None = None,
                      steps: int = 1) -> CommLogData:
    """The log DDP would write for a model of ``params`` parameters: gradient buckets of
    ``bucket_bytes`` (DDP's ``bucket_cap_mb = 25``; the first bucket 1 MiB,
    ``dist._DEFAULT_FIRST_BUCKET_BYTES``), then the trainer's one-int control all-reduce."""
    total = int(params) * int(dtype_bytes)
    sizes, left = [], total
    cap = first_bucket_bytes
    while left > 0:
        b = min(cap, left)
        sizes.append(b)
        left -= b
        cap = bucket_bytes
    recs = []
    for s in range(steps):
        recs += [dict(rank=0, step=s, op="allreduce", bytes=b, dtype="float32", cls="gradients", peers="all")
                 for b in sizes]
        recs.append(dict(rank=0, step=s, op="allreduce", bytes=4, dtype="int32", cls="control", peers="all"))
    header = {"format": FORMAT, "version": VERSION, "parallel": "ddp", "world_size": world_size,
              "params": int(params), "synthetic": True}
    if tokens_per_step is not None:
        header["tokens_per_step"] = int(tokens_per_step)
    return CommLogData(header, recs)


def synthetic_fsdp_log(params: int, *, units: int, world_size: int = 2, dtype_bytes: int = 4,
                       tokens_per_step: int | None = None) -> CommLogData:
    """The log of one FSDP2 step with ``units`` equal ``fully_shard`` units (one per block): per
    unit an all-gather before forward and before backward (the unit's full parameters), a
    reduce-scatter of its gradients in backward (reverse order), then the control all-reduce."""
    per = -(-int(params) // units) * int(dtype_bytes)
    recs = [dict(rank=0, step=0, op="allgather", bytes=per, dtype="float32", cls="params", peers="all")
            for _ in range(units)]
    for _ in range(units):
        recs.append(dict(rank=0, step=0, op="allgather", bytes=per, dtype="float32", cls="params", peers="all"))
        recs.append(dict(rank=0, step=0, op="reduce_scatter", bytes=per, dtype="float32", cls="gradients",
                         peers="all"))
    recs.append(dict(rank=0, step=0, op="allreduce", bytes=4, dtype="int32", cls="control", peers="all"))
    header = {"format": FORMAT, "version": VERSION, "parallel": "fsdp", "world_size": world_size,
              "params": int(params), "synthetic": True}
    if tokens_per_step is not None:
        header["tokens_per_step"] = int(tokens_per_step)
    return CommLogData(header, recs)


def synthetic_pp_log(params: int, *, stages: int, microbatches: int, act_bytes: int,
                     tokens_per_step: int | None = None, schedule: str = "1f1b") -> CommLogData:
    """The log of one pipeline step: per microbatch an activation send ``s -> s+1`` and a
    gradient send ``s+1 -> s`` of ``act_bytes`` on every stage boundary, then the trainer's
    two control all-reduces (squared grad norm, finite flag)."""
    recs = []
    for mb in range(microbatches):
        for s in range(stages - 1):
            recs.append(dict(rank=s, step=0, op="send", bytes=act_bytes, dtype="bfloat16", cls="activations",
                             peers=[s + 1], microbatch=mb))
            recs.append(dict(rank=s + 1, step=0, op="send", bytes=act_bytes, dtype="bfloat16",
                             cls="activation_grads", peers=[s], microbatch=mb))
    for r in range(stages):
        recs.append(dict(rank=r, step=0, op="allreduce", bytes=4, dtype="float32", cls="control", peers="all"))
        recs.append(dict(rank=r, step=0, op="allreduce", bytes=4, dtype="int32", cls="control", peers="all"))
    header = {"format": FORMAT, "version": VERSION, "parallel": "pp", "world_size": stages,
              "params": int(params), "microbatches": microbatches, "schedule": schedule, "synthetic": True}
    if tokens_per_step is not None:
        header["tokens_per_step"] = int(tokens_per_step)
    return CommLogData(header, recs)


@dataclass(frozen=True, slots=True)
class StepTime:
    """Modelled time of one training step, seconds, and its parts.

    ``step_s = compute_s + exposed_s``.  ``comm_s``: all communication, serialised (what it
    would cost with no overlap); ``phy_s`` / ``resend_s``: the FEC-latency and resend parts of
    ``comm_s`` (means); ``bubble_s``: pipeline fill/drain (PP only).

    With simulated loss recovery (a :class:`~protocol.cluster.topology.ClusterSpec` at BER > 0)
    the step is replayed once per trial (:func:`step_time`): ``samples_s`` holds the per-trial step
    times (inf where a queue pair failed), ``step_s`` is their mean over the completed trials,
    ``p50_s`` / ``p99_s`` / ``p999_s`` their quantiles and ``failure_rate`` the share that failed.
    Without it the step is deterministic and the quantiles equal ``step_s`` (NaN on the flat model).
    """

    parallel: str
    ranks: int
    code: str
    fec: str
    ber: float
    step_s: float
    compute_s: float
    exposed_s: float
    comm_s: float
    phy_s: float
    resend_s: float
    bubble_s: float
    ops: int
    failure_rate: float = 0.0
    p99_s: float = float("nan")
    p50_s: float = float("nan")
    p999_s: float = float("nan")
    samples_s: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SimSettings:
    """How a collective's loss recovery is simulated on a :class:`ClusterSpec` with BER > 0: ``trials``
    per collective (0: none, the deterministic prediction) and the ``seed`` they are drawn from
    (:func:`_op_seed`); passed explicitly to :func:`step_time`, :func:`op_time` and the workloads."""

    trials: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("trials", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"SimSettings.{name} must be an int >= 0, got {v!r}")


#: the simulation a caller gets without asking for one
DEFAULT_SIM = SimSettings()


@dataclass(frozen=True)
class OpTime:
    """One collective of a step on a :class:`ClusterSpec`: the deterministic prediction plus the
    simulated loss recovery (:mod:`protocol.cluster.transport`); ``time_s`` is the mean over the
    trials that completed, ``p99_delay_s`` the 99th percentile of the delay, ``samples_s`` the
    per-trial time (inf where the trial failed; None without losses)."""

    time_s: float
    phy_s: float
    resend_s: float
    p99_delay_s: float
    failure_rate: float
    prediction: Any = None
    delays_s: Any = None  # per-trial delay (s), inf where the trial failed; None without losses
    samples_s: Any = None


def _op_seed(op: str, nbytes: int, algo: str | None, seed: int):
    """The simulation seed of one collective: ``SeedSequence([seed, crc32(op, bytes, algo)])``, so
    different collectives of a step draw independent trials, while the same collective in two
    modes or BERs of a comparison draws the same uniforms (common random numbers) [I]."""
    import zlib

    import numpy as np

    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(f"{op}|{nbytes}|{algo}".encode())]))


@functools.lru_cache(maxsize=8192)
def _op_time_cached(op: str, nbytes: int, cluster, algo: str | None, trials: int, seed: int):
    if isinstance(cluster, Cluster):
        return collective_time(op, nbytes, cluster, (algo or "ring") if op in ("allreduce", "broadcast") else None)
    from .nccl import predict
    from .transport import simulate

    pr = predict(op, nbytes, cluster, algo=algo if op == "allreduce" else None)
    if cluster.ber == 0 or trials <= 0:
        return OpTime(pr.time_s, pr.phy_s, 0.0, 0.0, 0.0, pr)
    res = simulate(pr, cluster, trials, seed=_op_seed(op, nbytes, algo, seed))
    samples = res.samples_us * 1e-6  # inf where the trial failed
    samples.flags.writeable = False
    delays = samples - res.deterministic_us * 1e-6
    delays.flags.writeable = False
    if not math.isfinite(res.mean_us):
        return OpTime(math.inf, pr.phy_s, math.inf, math.inf, res.failure_rate, pr, delays, samples)
    d = (res.mean_us - res.deterministic_us) * 1e-6
    return OpTime(res.mean_us * 1e-6, pr.phy_s, d, (res.p99_us - res.deterministic_us) * 1e-6, res.failure_rate, pr,
                  delays, samples)


class _Trials:
    """Per-trial replay (:func:`step_time`): the k-th use of a simulated collective in a step gets
    its own trials: the first use its trials as simulated (trial i of the step is trial i of the
    collective), every later use a bootstrap resample of them (indices drawn with replacement from
    a Generator seeded from the simulation's seed), so repeated identical collectives (DDP's equal buckets,
    a TP layer's all-reduces) are independent draws of one simulated distribution [I], not the same
    trial counted again."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x57E9]))
        self.uses: dict[int, int] = {}
        self.n: int | None = None

    def draw(self, t: "OpTime") -> "OpTime":
        import dataclasses

        a = t.samples_s
        if a is None:
            return t
        if self.n is None:
            self.n = len(a)
        elif len(a) != self.n:
            raise ValueError(f"collectives of one step simulated with {self.n} and {len(a)} trials")
        k = self.uses.get(id(a), 0)
        self.uses[id(a)] = k + 1
        return dataclasses.replace(t, time_s=a if k == 0 else a[self.rng.integers(0, len(a), len(a))])


def op_time(op: str, nbytes: int, cluster, algo: str | None = "ring", sim: SimSettings = DEFAULT_SIM):
    """One collective on ``cluster`` (:class:`OpTime` on a :class:`ClusterSpec`, simulated as ``sim``
    says at BER > 0; the flat model's time on a :class:`Cluster`); cached."""
    return _op_time_cached(op, int(nbytes), cluster, algo, sim.trials, sim.seed)


class _Replay:
    """One replay of a step: the simulation settings, and either the list of the collectives it used
    (``track``: the first, mean replay) or the per-trial draws (``trials``: each collective's
    ``time_s`` replaced by its per-trial times, so the step's rules (``max``, sums) give the
    per-trial step time)."""

    def __init__(self, sim: SimSettings, per_trial: bool = False) -> None:
        self.sim = sim
        self.trials = _Trials(sim.seed) if per_trial else None
        self.track: list = []

    def op(self, op: str, nbytes: int, cluster, algo: str | None = "ring"):
        t = op_time(op, nbytes, cluster, algo, self.sim)
        if self.trials is not None and isinstance(t, OpTime):
            return self.trials.draw(t)
        self.track.append(t)
        return t


def per_trial_sum(ops: list, seed: int):
    """Per-trial sum of the times of ``ops`` run one after the other (each use its own trials,
    :class:`_Trials` seeded from ``seed``); a float when none is simulated."""
    tr = _Trials(seed)
    return sum((tr.draw(t).time_s if isinstance(t, OpTime) else t.time_s for t in ops), 0.0)


def with_distribution(st: StepTime, per_trial_step_s) -> StepTime:
    """``st`` with its mean, quantiles and failure rate taken from the per-trial step times
    (inf where a queue pair failed): mean and quantiles (inverted CDF) over the completed trials."""
    import dataclasses

    a = np.array(per_trial_step_s, dtype=np.float64)
    ok = np.isfinite(a)
    fail = float(1.0 - ok.mean())
    if ok.any():
        good = a[ok]
        lo = float(good.min())
        # taken from the smallest: never below it, and exactly it when all trials are equal (the mean
        # of n equal floats is not that float: a residue of ~1e-16 s, a negative exposed time)
        mean = lo + float((good - lo).mean())
        p50, p99, p999 = (float(np.quantile(good, x, method="inverted_cdf")) for x in (0.5, 0.99, 0.999))
    else:
        mean = p50 = p99 = p999 = math.inf
    a.flags.writeable = False
    return dataclasses.replace(st, step_s=mean, exposed_s=mean - st.compute_s, failure_rate=fail, p50_s=p50,
                               p99_s=p99, p999_s=p999, samples_s=a)


def deterministic(st: StepTime) -> StepTime:
    """``st`` with its quantiles set to ``step_s`` (no simulated loss: one value)."""
    import dataclasses

    return dataclasses.replace(st, p50_s=st.step_s, p99_s=st.step_s, p999_s=st.step_s)


def _replay_op(r: dict, cluster: Cluster, algo: str, rp: _Replay):
    op = r["op"]
    if op in ("recv",):
        return None
    if op == "send":
        return rp.op("sendrecv", int(r["bytes"]), cluster)
    if op == "barrier":
        return rp.op("allreduce", 4, cluster, algo)  # a barrier costs a one-int all-reduce's latency [I]
    if op == "alltoall":
        if isinstance(cluster, ClusterSpec):
            return rp.op("alltoall", int(r["bytes"]), cluster)
        # N-1 messages of S/N per rank, one per step [I]: like a ring all-gather's traffic
        return rp.op("allgather", int(r["bytes"]), cluster)
    return rp.op(op, int(r["bytes"]), cluster, algo)


def _pick_step(log: CommLogData, rank: int = 0) -> list[dict]:
    """The records of one representative step of ``rank``: the last recorded step (DDP rebuilds
    its buckets after the first one)."""
    mine = [r for r in log.records if int(r.get("rank", 0)) == rank]
    if not mine:
        return []
    last = max(int(r["step"]) for r in mine)
    return [r for r in mine if int(r["step"]) == last]


def step_time(log: CommLogData, cluster, *, compute_s: float | None = None, algo: str | None = None,
              sim: SimSettings = DEFAULT_SIM) -> StepTime:
    """Replay one step of ``log`` over ``cluster`` (module docstring for the rules).

    ``cluster``: a flat :class:`~protocol.cluster.flat.Cluster` or a
    :class:`~protocol.cluster.topology.ClusterSpec` (then every collective is NCCL's choice unless
    ``algo`` forces one, and at BER > 0 its loss recovery is simulated: ``sim.trials`` trials,
    seeds from ``sim.seed`` (:func:`_op_seed`); the step is then replayed once per trial with each
    collective's time in that trial (:class:`_Replay`; so a delay hidden behind backward stays
    hidden in that trial), and ``step_s``, ``p50_s``, ``p99_s``, ``p999_s`` and ``failure_rate`` are
    the mean, quantiles and failed share of those per-trial step times, :func:`with_distribution`).
    ``compute_s``: compute per step and rank; default the log's measured step time.  ``algo``:
    the all-reduce and broadcast algorithm (flat: ``ring`` or ``tree``; cluster: any NCCL algorithm,
    or None for NCCL's choice).
    """
    if isinstance(cluster, Cluster):
        algo = algo or "ring"
        if algo not in ("ring", "tree"):
            raise ValueError(f"algo must be 'ring' or 'tree', got {algo!r}")
    mean = _Replay(sim)
    st = _step_time(log, cluster, compute_s, algo, mean)
    ops = [t for t in mean.track if isinstance(t, OpTime)]
    if not ops:
        return st
    simulated = [t.samples_s for t in ops if t.samples_s is not None]
    if not simulated:
        return deterministic(st)
    per = _step_time(log, cluster, compute_s, algo, _Replay(sim, per_trial=True))
    return with_distribution(st, np.broadcast_to(per.step_s, (len(simulated[0]),)))


def _step_time(log: CommLogData, cluster, compute_s, algo, rp: _Replay) -> StepTime:
    if not log.records:
        raise ValueError("the communication log has no records (header only): it would model zero communication")
    if log.parallel != "pp" and not _pick_step(log):
        raise ValueError("the communication log has no records of rank 0: it would model zero communication")
    if compute_s is None:
        compute_s = log.measured_step_s()
        if compute_s is None:
            raise ValueError("step_time: the log has no measured step time (timing.step_s); give compute_s")
        if log.parallel == "pp":  # the measured step holds the bubble: busy = step x m / (m + p - 1)
            m = int(log.header.get("microbatches", 1))
            compute_s *= m / (m + log.world_size - 1)
    if not (math.isfinite(compute_s) and compute_s >= 0):
        raise ValueError(f"compute_s must be a finite number >= 0, got {compute_s!r}")
    if log.parallel == "pp":
        return _pp_step(log, cluster, compute_s, algo, rp)
    if log.parallel == "fsdp":
        return _fsdp_step(log, cluster, compute_s, algo, rp)
    recs = _pick_step(log)
    grads = [r for r in recs if r.get("cls") == "gradients" and r["op"] in ("allreduce", "reduce_scatter")]
    others = [r for r in recs if r not in grads]
    total = sum(int(r["bytes"]) for r in grads) or 1
    fwd, bwd = compute_s / 3.0, 2.0 * compute_s / 3.0
    end, done, comm, phy, res = 0.0, 0, 0.0, 0.0, 0.0
    for r in grads:
        t = _replay_op(r, cluster, algo, rp)
        done += int(r["bytes"])
        ready = fwd + bwd * done / total
        end = np.maximum(ready, end) + t.time_s
        comm, phy, res = comm + t.time_s, phy + t.phy_s, res + t.resend_s
    step = np.maximum(compute_s, end)
    n = len(grads)
    s, p, q, k = _serial(others, cluster, algo, rp)
    step, comm, phy, res, n = step + s, comm + s, phy + p, res + q, n + k
    return StepTime("ddp", cluster.ranks, cluster.code, cluster.fec, cluster.ber, step, compute_s, step - compute_s,
                    comm, phy, res, 0.0, n)


def _serial(records: list[dict], cluster: Cluster, algo: str, rp: _Replay) -> tuple[float, float, float, int]:
    """Ops outside a parallelism's overlap rule (control traffic, odd collectives) run one after
    the other on the critical path: ``(time_s, phy_s, resend_s, ops)`` summed over them."""
    tot = phy = res = 0.0
    n = 0
    for r in records:
        t = _replay_op(r, cluster, algo, rp)
        if t is None:
            continue
        tot, phy, res, n = tot + t.time_s, phy + t.phy_s, res + t.resend_s, n + 1
    return tot, phy, res, n


def _fsdp_step(log: CommLogData, cluster: Cluster, compute_s: float, algo: str, rp: _Replay) -> StepTime:
    recs = _pick_step(log)
    ag = [r for r in recs if r["op"] == "allgather" and r.get("cls") != "control"]
    rs = [r for r in recs if r["op"] == "reduce_scatter" and r.get("cls") != "control"]
    others = [r for r in recs if r not in ag and r not in rs]
    t_ag = [_replay_op(r, cluster, algo, rp) for r in ag]
    t_rs = [_replay_op(r, cluster, algo, rp) for r in rs]
    first = t_ag[0].time_s if t_ag else 0.0
    last = t_rs[-1].time_s if t_rs else 0.0
    ts = t_ag + t_rs
    total = sum(t.time_s for t in ts)
    step = first + np.maximum(compute_s, total - first - last) + last
    comm, phy, res, n = total, sum(t.phy_s for t in ts), sum(t.resend_s for t in ts), len(ts)
    s, p, q, k = _serial(others, cluster, algo, rp)
    step, comm, phy, res, n = step + s, comm + s, phy + p, res + q, n + k
    return StepTime("fsdp", cluster.ranks, cluster.code, cluster.fec, cluster.ber, step, compute_s,
                    step - compute_s, comm, phy, res, 0.0, n)


def _pp_step(log: CommLogData, cluster: Cluster, compute_s: float, algo: str, rp: _Replay) -> StepTime:
    p = log.world_size
    m = int(log.header.get("microbatches", 1))
    if p < 2 or m < 1:
        raise ValueError(f"pipeline log needs world_size >= 2 and microbatches >= 1, got {p}, {m}")
    if isinstance(cluster, ClusterSpec):  # a stage boundary between two nodes (one inside a node on one node)
        hop = cluster.with_(nodes=2) if cluster.nodes >= 2 else cluster.with_(gpus_per_node=max(2, cluster.gpus_per_node))
    else:
        hop = cluster.with_(ranks=2)  # a stage boundary: one sendrecv over one path
    last = max((int(r["step"]) for r in log.records), default=0)
    recs = [r for r in log.records if int(r["step"]) == last]
    grad_cls = ("activation_grads", "activation_gradients")  # the group's and protocol.modes' names
    sends = [r for r in recs if r["op"] == "send" and r.get("cls") in ("activations", *grad_cls)]

    def hop_time(cls: str):
        xs = [int(r["bytes"]) for r in sends if r.get("cls") == cls or (cls == "activation_grads" and r.get("cls") in grad_cls)]
        return rp.op("sendrecv", max(xs), hop) if xs else None

    ta, tg = hop_time("activations"), hop_time("activation_grads")
    a = ta.time_s if ta else 0.0
    g = tg.time_s if tg else 0.0
    c = compute_s / m  # per-microbatch compute of a stage
    slot = np.maximum(np.maximum(c, a), g)
    pipe = (m + p - 1) * slot + (p - 1) * (a + g)
    bubble = (p - 1) * slot
    comm = m * (a + g)
    phy = m * ((ta.phy_s if ta else 0.0) + (tg.phy_s if tg else 0.0))
    res = m * ((ta.resend_s if ta else 0.0) + (tg.resend_s if tg else 0.0))
    step, n = pipe, len(sends)
    dp = cluster.ranks // p
    if dp > 1:
        gb = [int(r["bytes"]) for r in recs if r.get("cls") == "gradients" and r["op"] == "allreduce"
              and int(r.get("rank", 0)) == 0]
        stage_bytes = sum(gb) if gb else int(log.header.get("params", 0)) * 4 // p
        t = rp.op("allreduce", stage_bytes, cluster.with_(ranks=dp), algo)
        step += t.time_s
        comm, phy, res, n = comm + t.time_s, phy + t.phy_s, res + t.resend_s, n + 1
    ctrl = [r for r in recs if r["op"] != "send" and r["op"] != "recv" and r.get("cls") != "gradients"
            and int(r.get("rank", 0)) == 0]
    for r in ctrl:
        t = _replay_op(r, cluster.with_(ranks=max(p, cluster.ranks)), algo, rp)
        step += t.time_s
        comm, phy, res, n = comm + t.time_s, phy + t.phy_s, res + t.resend_s, n + 1
    return StepTime("pp", cluster.ranks, cluster.code, cluster.fec, cluster.ber, step, m * c,
                    step - m * c, comm, phy, res, bubble, n)
