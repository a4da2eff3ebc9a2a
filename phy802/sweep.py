"""BER/FER sweeps over SNR or pre-FEC BER and FEC modes (like Sionna's ``sim_ber`` with AFF3CT's
monitors), with exact confidence intervals, mergeable raw counts and any executor.

A sweep runs every (code, receive mode) pair of ``code`` x ``fec`` (labelled
``"code/fec"``, e.g. ``"kp4/ieee"``, or ``"none"`` for the code-less line) at every channel point.
Each (mode, channel point) is an independent task with its own child of ``SeedSequence(seed)``
(assigned in task order, so results do not depend on where or in which order tasks run).  A point
runs batches of growing size until one stopping rule holds (checked between batches):

* ``target_errors`` codeword errors seen (delivered messages that differ from the sent ones),
* ``max_codewords`` codewords simulated,
* ``max_seconds`` of wall time,
* (bit-exact link only) ``no_lock``: most batches were dropped because a lane never locked.

Sharded points (``shard_pairs``): a point is cut into shards of ``shard_pairs`` pairs
(shard ``j`` seeded by the ``j``-th child of the point's seed) that run in parallel on the
executor, ``2 x workers`` in flight.  Results are taken in shard order and the stopping rule is
applied to the shortest prefix ``0..k`` that meets it (shards finished beyond it are dropped), so
for a seed and shard size the counts are the same for any number of workers.  ``max_seconds``
is the exception: it stops a point at the prefix finished when the time is up, which depends on
speed (the worker-count tests run with ``max_seconds=None``).

Every rate gets a 95% Clopper-Pearson interval (:mod:`phy802.stats`); raw counts are kept so that
two runs of the same sweep merge (:meth:`SweepResult.merge`).  Channel: PAM4 AWGN on every lane
(:class:`phy802.channel.Pam4Awgn`), set by SNR (dB) or by its closed-form pre-FEC BER, or
(``burst_pb``) the 1-tap DFE burst model :class:`phy802.channel.DfeBurst` with the same symbol
error ratio (2 x BER on the BER axis, the AWGN SER on the SNR axis) and propagation ``burst_pb``.

The theory columns (closed forms of :mod:`phy802.theory`, independent errors, no precoding):
``pre_fec_ber`` = PAM4 Gray BER, ``ser`` = PAM4 SER, ``fer`` = binomial P(W > t) of the code for
the correcting modes (ieee, correct_no_indication, llr) and P(any of the payload symbols wrong:
514, or 257 for rs272) for detect_only/bypass/unequal/none, ``post_fec_ber`` =
:func:`phy802.theory.post_fec_ber` of the code for the correcting modes and the pre-FEC BER
otherwise.  With precoding
they are left empty (NaN): one line error becomes two data errors; so are they for bursts.

Two post-FEC BERs (README, "Two post-FEC BERs"): ``post_fec_ber`` is the BER of the k message
symbols **at the decoder output** (before the descrambler); ``payload_ber`` is the BER of the payload
**after the 1 + x^39 + x^58 descrambler**, which turns each surviving error into ~3 (what an error
trace of :mod:`protocol.trace` records as flips).  The bit-exact link at the ``pcs`` level
(``simulator="link"``) measures ``payload_ber``; elsewhere it is the model value
``DESCRAMBLER_FACTOR x post_fec_ber`` (``payload_ber_source`` says which).

This module never imports :mod:`protocol`; the CLI passes the latency model in.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import io
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Literal

import numpy as np

from phy802 import theory
from phy802.runtime.interrupts import check_interrupt
from phy802.runtime.output import atomic_write_text
from phy802.runtime.workers import stop_pool, worker_pool
from phy802._sweepfile import merge_results, read_sweep_json
from phy802.clause119 import CODE_SIZES
from phy802.channel import DfeBurst, Pam4Awgn
from phy802.link import CODE_NAMES, FEC_MODES, OLD_FEC_SPELLINGS, FastLink, Link, LinkConfig, LinkCounters
from phy802.stats import RateEstimate

__all__ = [
    "SweepConfig",
    "PointTask",
    "PointResult",
    "SweepResult",
    "run_point",
    "run_shard",
    "shard_seed",
    "run_sweep",
    "theory_point",
    "format_header",
    "format_row",
    "RATE_NAMES",
    "DESCRAMBLER_FACTOR",
    "mode_label",
    "split_label",
]

RATE_NAMES = ("pre_fec_ber", "ser", "rs_ser", "fer", "post_fec_ber")
#: payload bit errors per surviving decoder-output bit error: the descrambler 1 + x^39 + x^58
#: (119.2.4.3) copies an error at scrambled bit n to n, n+39, n+58.  A model value: two copies on
#: one bit cancel (rare at these BERs), and in the bit-exact link a 257b header hit spoils a whole
#: 66b block, so the measured ratio there is ~3.1-3.3
DESCRAMBLER_FACTOR = 3
_CORRECTING = ("ieee", "correct_no_indication", "llr")


def mode_label(code: str, fec: str) -> str:
    """``"code/fec"`` (``"none"`` for the code-less line: no mode changes anything without a code)."""
    return "none" if code == "none" else f"{code}/{fec}"


def split_label(label: str) -> tuple[str, str]:
    """Inverse of :func:`mode_label`: ``(code, fec)`` (``("none", "bypass")`` for ``"none"``)."""
    if label == "none":
        return "none", "bypass"
    code, sep, fec = str(label).partition("/")
    if not sep or code not in CODE_NAMES or fec not in FEC_MODES:
        raise ValueError(f"not a sweep mode label 'code/fec': {label!r}")
    return code, fec


def _as_names(v, what: str) -> tuple[str, ...]:
    vals = (v,) if isinstance(v, str) else tuple(v)
    return tuple(str(x) for x in vals)


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """What a sweep simulates.

    Parameters
    ----------
    points : channel points: pre-FEC BER values (``axis="ber"``) or SNR in dB (``axis="snr"``).
    axis : ``"ber"`` or ``"snr"``.
    code : RS codes (:data:`phy802.link.CODE_NAMES`: kp4, kr4, rs272, none), a name or a tuple;
        default ``("kp4",)``.
    fec : receive modes (:data:`phy802.link.FEC_MODES`), a name or a tuple; default
        ``("ieee", "bypass")``.  The sweep runs every pair (``modes``: their labels); ``none``
        runs once whatever ``fec`` holds.  Old single-``fec`` spellings (``kp4``, ``kr4``,
        ``detect``, ``none``) raise ValueError naming the new spelling.
    rate, n_lanes, precoding, precoder_init : passed to :class:`phy802.link.LinkConfig`.
    simulator : ``"fast"`` (:class:`phy802.link.FastLink`, error pattern only) or ``"link"``
        (the bit-exact :class:`phy802.link.Link`; ``kr4`` at codeword level).
    target_errors : stop a point after this many codeword errors (``None``: never).
    max_codewords : stop a point after this many codewords.
    max_seconds : stop a point after this many seconds (``None``: never).
    burst_pb : DFE error-propagation probability; ``None`` (default) = AWGN.
    batch_pairs : largest batch (codeword pairs; default: :meth:`phy802.link.FastLink.auto_batch`
        for the fast path, 256 for the link); batches start at 64 pairs and double.
    seed : master seed.
    shard_pairs : ``None`` (default): each point is one task.  A number: each point is cut into
        shards of this many codeword pairs (the last one cut at ``max_codewords``), shard ``j``
        seeded by :func:`shard_seed`; shards run on the executor in parallel and the stopping
        rule is applied to the shortest prefix of shards ``0..k`` (in shard order) that meets
        it, so the result does not depend on the number of workers (``max_seconds`` excepted:
        where the clock stops depends on speed).
    """

    points: tuple[float, ...]
    axis: Literal["ber", "snr"] = "ber"
    code: tuple[str, ...] = ("kp4",)
    fec: tuple[str, ...] = ("ieee", "bypass")
    rate: str = "400G"
    n_lanes: int | None = None
    precoding: bool = False
    precoder_init: int = 0
    burst_pb: float | None = None
    simulator: Literal["fast", "link"] = "fast"
    target_errors: int | None = 100
    max_codewords: int = 1_000_000
    max_seconds: float | None = 30.0
    batch_pairs: int | None = None
    seed: int = 1
    shard_pairs: int | None = None

    def __post_init__(self) -> None:
        pts = tuple(float(x) for x in np.atleast_1d(np.asarray(self.points, dtype=float)))
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "code", _as_names(self.code, "code"))
        object.__setattr__(self, "fec", _as_names(self.fec, "fec"))
        if not pts:
            raise ValueError("SweepConfig.points: give at least one point")
        if self.axis not in ("ber", "snr"):
            raise ValueError(f"SweepConfig.axis must be 'ber' or 'snr', got {self.axis!r}")
        for x in pts:
            if not math.isfinite(x) or (self.axis == "ber" and not 0.0 < x < 0.375):
                raise ValueError(f"SweepConfig.points: {x!r} is not a valid {'pre-FEC BER in (0, 0.375)' if self.axis == 'ber' else 'SNR in dB'}")
        for f in self.fec:
            if f in OLD_FEC_SPELLINGS:
                c, m = OLD_FEC_SPELLINGS[f]
                raise ValueError(f"SweepConfig.fec: {f!r} is an old spelling: it is now code={c!r}, fec={m!r}")
        if not self.fec or any(m not in FEC_MODES for m in self.fec):
            raise ValueError(f"SweepConfig.fec must be a non-empty subset of {', '.join(FEC_MODES)}, got {self.fec!r}")
        if not self.code or any(c not in CODE_NAMES for c in self.code):
            raise ValueError(f"SweepConfig.code must be a non-empty subset of {', '.join(CODE_NAMES)}, got {self.code!r}")
        if (len(set(self.fec)) != len(self.fec) or len(set(self.code)) != len(self.code)
                or len(set(pts)) != len(pts)):
            raise ValueError("SweepConfig: codes, modes and points must not repeat")
        if self.simulator not in ("fast", "link"):
            raise ValueError(f"SweepConfig.simulator must be 'fast' or 'link', got {self.simulator!r}")
        if self.target_errors is not None and (not isinstance(self.target_errors, (int, np.integer)) or self.target_errors <= 0):
            raise ValueError(f"SweepConfig.target_errors must be a positive int or None, got {self.target_errors!r}")
        if not isinstance(self.max_codewords, (int, np.integer)) or self.max_codewords < 2:
            raise ValueError(f"SweepConfig.max_codewords must be an int >= 2, got {self.max_codewords!r}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"SweepConfig.max_seconds must be > 0 or None, got {self.max_seconds!r}")
        if self.batch_pairs is not None and (not isinstance(self.batch_pairs, (int, np.integer)) or self.batch_pairs <= 0):
            raise ValueError(f"SweepConfig.batch_pairs must be a positive int, got {self.batch_pairs!r}")
        if self.burst_pb is not None and not 0.0 <= float(self.burst_pb) < 1.0:
            raise ValueError(f"SweepConfig.burst_pb must be in [0, 1) or None, got {self.burst_pb!r}")
        if self.shard_pairs is not None and (not isinstance(self.shard_pairs, (int, np.integer))
                                             or isinstance(self.shard_pairs, bool) or self.shard_pairs <= 0):
            raise ValueError(f"SweepConfig.shard_pairs must be a positive int or None, got {self.shard_pairs!r}")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"SweepConfig.seed must be an int >= 0, got {self.seed!r}")
        for m in self.modes:
            self.link_config(m)  # validates rate / lanes / precoder

    @property
    def modes(self) -> tuple[str, ...]:
        """Labels (:func:`mode_label`) of the (code, fec) pairs swept, code-major."""
        return tuple(dict.fromkeys(mode_label(c, f) for c in self.code for f in self.fec))

    def link_config(self, mode: str) -> LinkConfig:
        """The :class:`LinkConfig` of a mode label (``"kp4/ieee"``)."""
        code, fec = split_label(mode)
        return LinkConfig(rate=self.rate, code=code, fec=fec, precoding=self.precoding,
                          precoder_init=self.precoder_init, n_lanes=self.n_lanes)

    def snr_db(self, x: float) -> float:
        """SNR of the AWGN channel at point ``x`` (for bursts: of the AWGN with the same BER/SNR)."""
        return float(theory.snr_db_for_ber(x)) if self.axis == "ber" else float(x)

    def channel(self, x: float):
        if self.burst_pb is not None:
            ser = 2.0 * x if self.axis == "ber" else float(theory.pam4_ser(x))
            return DfeBurst.from_ser(ser, float(self.burst_pb))
        return Pam4Awgn.from_ber(x) if self.axis == "ber" else Pam4Awgn(float(x))

    def tasks(self) -> list["PointTask"]:
        """One task per (mode, point), mode-major, each with its own child seed."""
        keys = [(m, x) for m in self.modes for x in self.points]
        seeds = np.random.SeedSequence(int(self.seed)).spawn(len(keys))
        return [PointTask(self, m, x, s, i) for i, ((m, x), s) in enumerate(zip(keys, seeds))]


@dataclass(frozen=True)
class PointTask:
    """One independent sweep point (picklable: sent to worker processes or a Dask cluster)."""

    config: SweepConfig
    mode: str
    x: float
    seed: np.random.SeedSequence
    index: int


def theory_point(mode: str, snr_db: float, precoding: bool = False) -> dict[str, float]:
    """Closed-form rates at one point for a mode label (``"kp4/ieee"``, see the module docstring);
    NaN where none applies."""
    nan = float("nan")
    if precoding:
        return {k: nan for k in RATE_NAMES}
    ber = float(theory.pam4_ber(snr_db))
    ps = float(theory.symbol_error_prob(ber))
    out = {"pre_fec_ber": ber, "ser": float(theory.pam4_ser(snr_db)), "rs_ser": ps}
    code_name, fec = split_label(mode)
    if code_name != "none" and fec in _CORRECTING:
        code = theory.rs_code(code_name)
        out["fer"] = float(theory.rs_codeword_error_ratio(ps, code))
        out["post_fec_ber"] = float(theory.post_fec_ber(ber, code))
    else:
        k_data = CODE_SIZES["rs272" if code_name == "rs272" else "kp4"].data_symbols  # rs272: less its pad
        out["fer"] = float(-math.expm1(k_data * math.log1p(-ps)))
        out["post_fec_ber"] = ber
    return out


@dataclass
class PointResult:
    """Result of one point: raw ``counters`` plus where and why it stopped."""

    mode: str
    axis: str
    x: float
    snr_db: float
    counters: LinkCounters
    stop_reason: str
    index: int = 0
    precoding: bool = False
    burst_pb: float | None = None

    @property
    def channel_ber(self) -> float:
        """Closed-form pre-FEC BER of the channel setting (PAM4 Gray, no precoding)."""
        return float(theory.pam4_ber(self.snr_db))

    def rates(self) -> dict[str, RateEstimate]:
        return self.counters.rates()

    def theory(self) -> dict[str, float]:
        return theory_point(self.mode, self.snr_db, self.precoding or self.burst_pb is not None)

    def payload_ber(self) -> tuple[float, float, float, str]:
        """Payload BER after the descrambler as ``(value, lo, hi, source)``: ``source`` is
        ``"measured"`` (bit-exact link at the ``pcs`` level, 95% Clopper-Pearson) or ``"model"``
        (:data:`DESCRAMBLER_FACTOR` x the decoder-output post-FEC BER and its interval)."""
        r = self.rates()
        if "payload_ber" in r:
            e = r["payload_ber"]
            return e.value, e.lo, e.hi, "measured"
        post, f = r["post_fec_ber"], DESCRAMBLER_FACTOR
        return min(1.0, f * post.value), min(1.0, f * post.lo), min(1.0, f * post.hi), "model"

    @property
    def gbps(self) -> float:
        s = self.counters.seconds
        return self.counters.line_bits / s / 1e9 if s > 0 else float("nan")

    def row(self) -> dict:
        """Flat record (CSV / JSON): settings, raw counts, every rate with its interval, theory."""
        c = self.counters
        code, fec = split_label(self.mode)
        out = {
            "mode": self.mode, "code": code, "fec": fec, "axis": self.axis, "x": self.x, "snr_db": self.snr_db,
            "channel_ber": self.channel_ber, "precoding": self.precoding, "burst_pb": self.burst_pb,
            "codewords": c.codewords, "line_bits": c.line_bits, "bit_errors": c.bit_errors,
            "line_symbols": c.line_symbols, "line_symbol_errors": int(c.lane_symbol_errors.sum()),
            "symbol_errors": c.symbol_errors, "codeword_errors": c.codeword_errors,
            "corrected_codewords": c.corrected_codewords, "uncorrected_codewords": c.uncorrected_codewords,
            "miscorrected_codewords": c.miscorrected_codewords,
            "undetected_codeword_errors": c.undetected_codeword_errors,
            "post_fec_bit_errors": c.post_fec_bit_errors, "message_bits": c.message_bits,
        }
        th = self.theory()
        for name, est in self.rates().items():
            if name not in RATE_NAMES:
                continue
            out[name] = est.value
            out[f"{name}_lo"] = est.lo
            out[f"{name}_hi"] = est.hi
            out[f"theory_{name}"] = th[name]
        out["payload_ber"], out["payload_ber_lo"], out["payload_ber_hi"], out["payload_ber_source"] = self.payload_ber()
        out.update(seconds=c.seconds, gbps=self.gbps, stop_reason=self.stop_reason)
        return out


def _simulator(cfg: SweepConfig, mode: str, x: float):
    lc = cfg.link_config(mode)
    ch = cfg.channel(x)
    return FastLink(lc, ch) if cfg.simulator == "fast" else Link(lc, ch)


def _warm_up(sim) -> None:
    """Load the compiled kernels (Numba cache) before the point's clock starts: a fresh worker
    process would otherwise spend its first ~1 s of ``max_seconds`` on it.  Nothing is counted."""
    from phy802.fec import decode_syndromes

    sim.run_batch(1, np.random.SeedSequence(0), sim._new_counters())
    code = sim.config.rs
    decode_syndromes(code, np.zeros((1, code.nparity), np.uint16))


def run_point(task: PointTask) -> PointResult:
    """Run one point until a stopping rule holds (module docstring).  Picklable entry point."""
    cfg = task.config
    sim = _simulator(cfg, task.mode, task.x)
    ctr = sim._new_counters()
    cap = int(cfg.batch_pairs or (sim.auto_batch() if cfg.simulator == "fast" else 256))
    batch = min(64, cap)
    _warm_up(sim)
    t0 = time.perf_counter()
    reason = "max_codewords"
    ss = task.seed
    n_batches = 0
    while True:
        left_pairs = (int(cfg.max_codewords) - ctr.codewords + 1) // 2
        P = max(1, min(batch, left_pairs))
        sim.run_batch(P, ss.spawn(1)[0], ctr)
        check_interrupt()  # Ctrl-C / SIGTERM: between batches, never inside a compiled kernel
        n_batches += 1
        batch = min(2 * batch, cap)
        if ctr.lock_failures >= 8 and 2 * ctr.lock_failures > n_batches:
            reason = "no_lock"  # the bit-exact receiver cannot lock its lanes at this point
            break
        if cfg.target_errors is not None and ctr.codeword_errors >= cfg.target_errors:
            reason = "target_errors"
            break
        if ctr.codewords >= cfg.max_codewords:
            reason = "max_codewords"
            break
        if cfg.max_seconds is not None and time.perf_counter() - t0 >= cfg.max_seconds:
            reason = "max_seconds"
            break
    ctr.seconds = time.perf_counter() - t0
    return PointResult(task.mode, cfg.axis, task.x, cfg.snr_db(task.x), ctr, reason, task.index, bool(cfg.precoding),
                       cfg.burst_pb)


def shard_seed(task: PointTask, j: int) -> np.random.SeedSequence:
    """Seed of shard ``j`` of a point: the ``j``-th child of the point's seed (as ``spawn`` gives)."""
    ss = task.seed
    return np.random.SeedSequence(ss.entropy, spawn_key=tuple(ss.spawn_key) + (int(j),), pool_size=ss.pool_size)


def n_shards(task: PointTask) -> int:
    """Shards of a point: ``max_codewords`` codewords rounded up to pairs, in ``shard_pairs`` pieces."""
    cfg = task.config
    pairs = (int(cfg.max_codewords) + 1) // 2
    return -(-pairs // int(cfg.shard_pairs))


def run_shard(task: PointTask, j: int) -> tuple[int, int, LinkCounters, int]:
    """Simulate shard ``j`` of a point: a fixed number of pairs in batches (picklable entry point).

    Returns ``(point index, j, counters, batches)``; ``counters.seconds`` is this shard's compute time.
    """
    cfg = task.config
    sim = _simulator(cfg, task.mode, task.x)
    ctr = sim._new_counters()
    total = (int(cfg.max_codewords) + 1) // 2
    S = int(cfg.shard_pairs)
    n = min(S, total - j * S)
    if n <= 0:
        raise ValueError(f"shard {j} is past the point's max_codewords")
    cap = int(cfg.batch_pairs or (sim.auto_batch() if cfg.simulator == "fast" else 256))
    _warm_up(sim)
    ss = shard_seed(task, j)
    t0 = time.perf_counter()
    done = batches = 0
    while done < n:
        P = min(cap, n - done)
        sim.run_batch(P, ss.spawn(1)[0], ctr)
        check_interrupt()
        done += P
        batches += 1
    ctr.seconds = time.perf_counter() - t0
    return task.index, j, ctr, batches


class _ShardedPoint:
    """Book-keeping of one sharded point: results in shard order, the prefix and the stop rule."""

    def __init__(self, task: PointTask) -> None:
        self.task = task
        self.n = n_shards(task)
        self.next_j = 0
        self.results: dict[int, tuple[LinkCounters, int]] = {}
        self.batches = 0
        self.prefix = 0
        self.ctr: LinkCounters | None = None
        self.inflight: dict = {}
        self.t0: float | None = None
        self.reason: str | None = None
        self.compute_s = 0.0

    def can_submit(self) -> bool:
        return self.reason is None and self.next_j < self.n

    def add(self, j: int, ctr: LinkCounters, batches: int) -> None:
        cfg = self.task.config
        self.results[j] = (ctr, batches)
        while self.reason is None and self.prefix in self.results:
            c, nb = self.results.pop(self.prefix)
            self.batches += nb
            self.compute_s += c.seconds
            self.ctr = c if self.ctr is None else self.ctr.merge(c)
            self.prefix += 1
            k = self.ctr
            if k.lock_failures >= 8 and 2 * k.lock_failures > self.batches:
                self.reason = "no_lock"
            elif cfg.target_errors is not None and k.codeword_errors >= cfg.target_errors:
                self.reason = "target_errors"
            elif self.prefix >= self.n:
                self.reason = "max_codewords"
        if (self.reason is None and self.ctr is not None and cfg.max_seconds is not None
                and time.perf_counter() - self.t0 >= cfg.max_seconds):
            self.reason = "max_seconds"

    def result(self) -> PointResult:
        t, cfg = self.task, self.task.config
        c = self.ctr
        c.seconds = time.perf_counter() - self.t0  # wall time of the point (all shards, all workers)
        return PointResult(t.mode, cfg.axis, t.x, cfg.snr_db(t.x), c, self.reason, t.index, bool(cfg.precoding),
                           cfg.burst_pb)


def _run_sharded(tasks: list[PointTask], ex, slots: int, callback, on_shard) -> list[PointResult]:
    """Run sharded points on ``ex`` (``None``: in this process), ``slots`` shards in flight."""
    points = [_ShardedPoint(t) for t in tasks]
    done: list[PointResult] = []
    futs: dict = {}

    def finish(sp: _ShardedPoint) -> None:
        for f in sp.inflight.values():
            f.cancel()
        sp.inflight.clear()
        p = sp.result()
        done.append(p)
        if callback:
            callback(p)

    def submit() -> None:
        while len(futs) < slots:
            live = [sp for sp in points if sp.can_submit()]
            if not live:
                return
            sp = min(live, key=lambda q: (len(q.inflight), q.task.index))
            j = sp.next_j
            sp.next_j += 1
            if sp.t0 is None:
                sp.t0 = time.perf_counter()
            f = ex.submit(run_shard, sp.task, j)
            sp.inflight[j] = f
            futs[f] = (sp, j)

    if ex is None:  # in this process, shard by shard in order
        for sp in points:
            sp.t0 = time.perf_counter()
            while sp.reason is None:
                _, j, c, nb = run_shard(sp.task, sp.next_j)
                sp.next_j += 1
                sp.add(j, c, nb)
                if on_shard:
                    on_shard(sp.task, sp.prefix, sp.n)
            finish(sp)
        return done
    try:
        submit()
        while futs:
            ready, _ = cf.wait(list(futs), return_when=cf.FIRST_COMPLETED)
            for f in ready:
                if f not in futs:  # dropped when its point stopped earlier in this loop
                    continue
                sp, j = futs.pop(f)
                if f.cancelled() or sp.reason is not None:
                    continue
                sp.inflight.pop(j, None)
                _, _, c, nb = f.result()
                sp.add(j, c, nb)
                if on_shard:
                    on_shard(sp.task, sp.prefix, sp.n)
                if sp.reason is not None:
                    for g in sp.inflight.values():
                        futs.pop(g, None)
                    finish(sp)
            submit()
    except KeyboardInterrupt:
        for f in futs:
            f.cancel()
        raise
    return done


@dataclass
class SweepResult:
    """All points of a sweep, ordered mode-major then by channel point (as in the config)."""

    config: SweepConfig
    points: list[PointResult] = field(default_factory=list)
    interrupted: bool = False
    # which files/seeds went into a merged result (``merged_from`` in the JSON); ``None`` for a run
    provenance: list | None = None
    source: str | None = None  # the file it was read from

    def point(self, mode: str, x: float) -> PointResult:
        for p in self.points:
            if p.mode == mode and p.x == float(x):
                return p
        raise KeyError(f"no point for mode {mode!r} at x={x!r}")

    def rows(self) -> list[dict]:
        return [p.row() for p in self.points]

    def merge(self, other: "SweepResult") -> "SweepResult":
        """A new result whose points add the raw counts of both (same modes, points and link
        structure required; use a different seed for the second run)."""
        a, b = self.config, other.config
        same = ((a.axis, a.rate, a.n_lanes, a.precoding, a.precoder_init, a.burst_pb)
                == (b.axis, b.rate, b.n_lanes, b.precoding, b.precoder_init, b.burst_pb))
        if not same:
            raise ValueError("cannot merge sweeps of different link structure or axis")
        out: dict[tuple, PointResult] = {}
        for p in list(self.points) + list(other.points):
            key = (p.mode, p.x)
            if key in out:
                q = out[key]
                q.counters = q.counters.copy().merge(p.counters)
                q.stop_reason = f"{q.stop_reason}+{p.stop_reason}"
            else:
                out[key] = PointResult(p.mode, p.axis, p.x, p.snr_db, p.counters.copy(), p.stop_reason, p.index,
                                       p.precoding, p.burst_pb)
        codes = tuple(dict.fromkeys(a.code + b.code))
        fecs = tuple(dict.fromkeys(a.fec + b.fec))
        pts = tuple(dict.fromkeys(a.points + b.points))
        cfg = SweepConfig(points=pts, axis=a.axis, code=codes, fec=fecs, rate=a.rate, n_lanes=a.n_lanes, precoding=a.precoding,
                          precoder_init=a.precoder_init, burst_pb=a.burst_pb, simulator=a.simulator, target_errors=a.target_errors,
                          max_codewords=a.max_codewords, max_seconds=a.max_seconds, batch_pairs=a.batch_pairs, seed=a.seed,
                          shard_pairs=a.shard_pairs)
        order = {(m, x): i for i, (m, x) in enumerate((m, x) for m in cfg.modes for x in pts)}
        return SweepResult(cfg, sorted(out.values(), key=lambda p: order[(p.mode, p.x)]), self.interrupted or other.interrupted)

    # ------------------------------------------------------------------ files
    def to_json_obj(self) -> dict:
        from phy802 import __version__

        return {
            "format": "phy802.sweep", "version": 1, "phy802_version": __version__,
            "config": asdict(self.config), "interrupted": self.interrupted,
            "points": [{**p.row(), "counters": p.counters.as_dict()} for p in self.points],
            **({"merged_from": self.provenance} if self.provenance is not None else {}),
        }

    def write_json(self, path) -> None:
        from phy802.runtime.jsonable import to_jsonable

        atomic_write_text(path, json.dumps(to_jsonable(self.to_json_obj()), indent=2) + "\n")

    def to_csv_text(self) -> str:
        rows = self.rows()
        buf = io.StringIO()
        if rows:
            w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{v:.6e}" if isinstance(v, float) else v) for k, v in r.items()})
        return buf.getvalue()

    def write_csv(self, path) -> None:
        atomic_write_text(path, self.to_csv_text())

    @classmethod
    def read_json(cls, path) -> "SweepResult":
        """Load and validate a result written by :meth:`write_json` (raw counts included, so it can
        be merged); a malformed file raises :class:`phy802._sweepfile.SweepFileError` (a ValueError)."""
        return read_sweep_json(cls, path, config_cls=SweepConfig, point_cls=PointResult, mode_label=mode_label)

    @classmethod
    def merge_files(cls, paths) -> "SweepResult":
        """Read and merge ``sweep.json`` files of runs of the same configuration with distinct
        seeds (see :mod:`phy802._sweepfile`); the result lists its sources in ``provenance``."""
        return merge_results([cls.read_json(p) for p in paths])


def _executor_for(executor, workers: int | None):
    if executor is None or executor == "serial":
        return None, False
    if executor == "process":
        return worker_pool(workers), True  # workers leave Ctrl-C to this process
    if isinstance(executor, cf.Executor) or hasattr(executor, "submit"):
        return executor, False
    raise ValueError(f"executor must be None, 'serial', 'process' or a concurrent.futures Executor, got {executor!r}")


def run_sweep(
    config: SweepConfig,
    *,
    executor=None,
    workers: int | None = None,
    callback: Callable[[PointResult], None] | None = None,
    on_shard: Callable[[PointTask, int, int], None] | None = None,
) -> SweepResult:
    """Run every (mode, point) of ``config``.

    Parameters
    ----------
    executor : ``None``/``"serial"`` (in this process, in order), ``"process"`` (a
        ``ProcessPoolExecutor`` with ``workers`` processes, default all cores), or any
        ``concurrent.futures.Executor``-like object with ``submit`` -- e.g. a Dask cluster's
        ``distributed.Client(address).get_executor()``.
    callback : called with each :class:`PointResult` as it finishes (completion order).
    on_shard : (sharded points, ``config.shard_pairs``) called as ``on_shard(task, shards_in_prefix,
        n_shards)`` whenever a point's prefix of finished shards grows (progress).

    Results are identical for every executor and number of workers (each point, and each shard,
    has its own seed; sharded points stop on a prefix of shards in shard order).  On Ctrl-C the points
    finished so far are returned with ``interrupted=True``.
    """
    if not isinstance(config, SweepConfig):
        raise TypeError(f"config must be a SweepConfig, got {type(config).__name__}")
    tasks = config.tasks()
    ex, own = _executor_for(executor, workers)
    done: list[PointResult] = []
    interrupted = False
    try:
        if config.shard_pairs is not None:
            slots = 2 * int(workers or os.cpu_count() or 1)
            if ex is not None and hasattr(ex, "_max_workers"):
                slots = 2 * int(ex._max_workers)
            done = _run_sharded(tasks, ex, slots, callback, on_shard)
        elif ex is None:
            for t in tasks:
                p = run_point(t)
                done.append(p)
                if callback:
                    callback(p)
        else:
            futs = [ex.submit(run_point, t) for t in tasks]
            try:
                for f in cf.as_completed(futs):
                    p = f.result()
                    done.append(p)
                    if callback:
                        callback(p)
            except KeyboardInterrupt:
                for f in futs:
                    f.cancel()
                raise
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if own:
            if interrupted:  # stop now: no worker keeps computing for ~a point's time after Ctrl-C
                stop_pool(ex)
            else:
                ex.shutdown(wait=True, cancel_futures=True)
    done.sort(key=lambda p: p.index)
    return SweepResult(config, done, interrupted)


# ---------------------------------------------------------------------- progress table

_COLS = [("mode", 17), ("point", 9), ("SNR dB", 7), ("codewords", 10), ("FE", 7), ("pre-BER", 9), ("FER", 9),
         ("FER 95% CI", 21), ("post-BER", 9), ("payload", 9), ("Gb/s", 7), ("time s", 7), ("stop", 13)]


def format_header() -> str:
    """Header of the live table (one line per finished point, AFF3CT style)."""
    head = " | ".join(f"{n:>{w}}" for n, w in _COLS)
    return (f"# {head}\n# " + "-+-".join("-" * w for _, w in _COLS)
            + "\n# post-BER: post-FEC BER at the decoder output; payload: BER after the descrambler "
              f"(~ = model, {DESCRAMBLER_FACTOR} x post-BER)")


def format_row(p: PointResult) -> str:
    r = p.rates()
    c = p.counters
    fer = r["fer"]
    vals = [p.mode, f"{p.x:.3g}", f"{p.snr_db:.2f}", str(c.codewords), str(c.codeword_errors),
            f"{r['pre_fec_ber'].value:.2e}", f"{fer.value:.2e}", f"[{fer.lo:.2e},{fer.hi:.2e}]",
            f"{r['post_fec_ber'].value:.2e}", _payload_cell(p), f"{p.gbps:.2f}", f"{c.seconds:.2f}", p.stop_reason]
    return "  " + " | ".join(f"{v:>{w}}" for v, (_, w) in zip(vals, _COLS))


def _payload_cell(p: PointResult) -> str:
    v, _, _, src = p.payload_ber()
    return f"{v:.2e}" if src == "measured" else f"~{v:.1e}"
