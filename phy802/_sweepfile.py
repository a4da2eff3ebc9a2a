"""Strict reading and merging of ``sweep.json`` files (used by :class:`phy802.sweep.SweepResult`).

Reading validates every field: the top-level keys, the config (via :class:`SweepConfig`), each
point's settings against the config, the raw counters (non-negative integers, array lengths that
match the geometry) and the derived fields (the set a point of this version writes, no more, no
less). Any problem is a :class:`SweepFileError` naming the file, the point and the field.

Merging adds the raw counts of the same (mode, point) over runs of the *same configuration*
(everything but the seed and the stopping rules) with *distinct seeds*; the merged result keeps
its provenance: which files and seeds went into it (``merged_from``), and merging merged files
keeps the whole chain, so a seed can never be counted twice.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["SweepFileError", "read_sweep_json", "merge_results", "SAME_CONFIG_EXEMPT"]

TOP_KEYS = frozenset({"format", "version", "phy802_version", "config", "interrupted", "points"})
OPTIONAL_TOP_KEYS = frozenset({"merged_from", "timing"})
# config fields that may differ between merged runs (what is simulated is the same)
SAME_CONFIG_EXEMPT = frozenset({"seed", "points", "modes", "code", "fec", "target_errors", "max_codewords", "max_seconds",
                                "batch_pairs", "shard_pairs", "workers"})
MAX_SWEEP_FILE = 1 << 30
_I64 = 1 << 63


# pre-issue-15 mode names -> (code, fec)
_OLD_MODES = {"kp4": ("kp4", "ieee"), "kr4": ("kr4", "ieee"), "detect": ("kp4", "detect_only"),
              "bypass": ("kp4", "bypass"), "none": ("none", "bypass")}


class SweepFileError(ValueError):
    """A malformed or unmergeable sweep file; the message names the file and field."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _counters(d: Any, where: str):
    from phy802.link.counters import LinkCounters

    if not isinstance(d, dict):
        raise SweepFileError(f"{where}: field counters must be an object, got {type(d).__name__}")
    names = [f.name for f in dataclasses.fields(LinkCounters)]
    missing = [k for k in names if k not in d]
    extra = [k for k in d if k not in names]
    if missing or extra:
        raise SweepFileError(f"{where}: counters: "
                             + "; ".join(s for s in (f"missing field(s) {', '.join(missing)}" if missing else "",
                                                     f"unknown field(s) {', '.join(map(repr, extra))}" if extra else "")
                                         if s))
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(LinkCounters):
        v = d[f.name]
        if f.name == "seconds":
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise SweepFileError(f"{where}: counters.seconds must be a finite number >= 0, got {v!r}")
            kw[f.name] = float(v)
        elif isinstance(v, list):
            if not all(_is_int(x) and 0 <= x < _I64 for x in v):
                raise SweepFileError(f"{where}: counters.{f.name} must be a list of integers in 0..2^63-1")
            kw[f.name] = np.asarray(v, dtype=np.int64)
        elif _is_int(v):
            if not 0 <= v < _I64:
                raise SweepFileError(f"{where}: counters.{f.name} must be in 0..2^63-1, got {v}")
            kw[f.name] = v
        else:
            raise SweepFileError(f"{where}: counters.{f.name} must be an integer or a list of integers, got {v!r:.40}")
    default = LinkCounters()
    for f in dataclasses.fields(LinkCounters):  # arrays where the dataclass has arrays, scalars elsewhere
        if isinstance(getattr(default, f.name), np.ndarray) != isinstance(kw[f.name], np.ndarray):
            raise SweepFileError(f"{where}: counters.{f.name} has the wrong shape (list vs number)")
    c = LinkCounters(**kw)
    if not (0 < c.k < c.n <= 1023) or c.n_phys <= 0 or c.n_pcsl <= 0:
        raise SweepFileError(f"{where}: counters geometry n={c.n} k={c.k} n_phys={c.n_phys} n_pcsl={c.n_pcsl} is invalid")
    lengths = {"lane_symbol_errors": c.n_phys, "lane_bit_errors": c.n_phys, "pcs_lane_bit_errors": c.n_pcsl,
               "pcs_lane_symbol_errors": c.n_pcsl, "pcs_lane_corrected": c.n_pcsl, "hist": c.n + 1}
    for name, n in lengths.items():
        arr = getattr(c, name, None)
        if isinstance(arr, np.ndarray) and arr.size != n:
            raise SweepFileError(f"{where}: counters.{name} has {arr.size} entries, expected {n}")
    for a, b in (("codeword_errors", "codewords"), ("corrected_codewords", "codewords"),
                 ("uncorrected_codewords", "codewords"), ("undetected_codeword_errors", "codeword_errors")):
        if getattr(c, a) > getattr(c, b):
            raise SweepFileError(f"{where}: counters.{a}={getattr(c, a)} exceeds counters.{b}={getattr(c, b)}")
    return c


def _finite_number(v: Any) -> bool:
    """A JSON number that is a finite float (an int past float range, 10**400, is not: OverflowError)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _read_config(p: Path, c: Any, config_cls, mode_label) -> tuple[Any, dict[str, str], bool]:
    """The file's ``config`` as a ``config_cls``, with the relabelling of old single-``fec`` mode names
    and whether the file is of that old kind."""
    names = [f.name for f in dataclasses.fields(config_cls)]
    relabel: dict[str, str] = {}
    legacy = isinstance(c, dict) and "modes" in c and "code" not in c and "fec" not in c
    if legacy:  # a file from before the code / receive-mode split: single-``fec`` mode names
        c = dict(c)
        modes = c.pop("modes")
        if not isinstance(modes, list) or not all(isinstance(m, str) and m in _OLD_MODES for m in modes):
            raise SweepFileError(f"{p}: config.modes must be a list of {', '.join(_OLD_MODES)}, got {modes!r:.60}")
        c["code"] = list(dict.fromkeys(_OLD_MODES[m][0] for m in modes))
        c["fec"] = list(dict.fromkeys(_OLD_MODES[m][1] for m in modes))
        relabel = {m: mode_label(*_OLD_MODES[m]) for m in _OLD_MODES}
    if not isinstance(c, dict) or set(c) != set(names):
        got = sorted(c) if isinstance(c, dict) else type(c).__name__
        raise SweepFileError(f"{p}: field config must hold exactly {', '.join(names)}; got {got}")
    c = dict(c)
    for key in ("points", "code", "fec"):
        if not isinstance(c[key], list):
            raise SweepFileError(f"{p}: config.{key} must be a list")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in c["points"]):
        raise SweepFileError(f"{p}: config.points must be numbers")
    if not all(isinstance(m, str) for m in c["code"] + c["fec"]):
        raise SweepFileError(f"{p}: config.code and config.fec must be names")
    c["points"], c["code"], c["fec"] = tuple(c["points"]), tuple(c["code"]), tuple(c["fec"])
    try:
        cfg = config_cls(**c)
    except (TypeError, ValueError) as exc:
        raise SweepFileError(f"{p}: config: {exc}") from None
    return cfg, relabel, legacy


def _read_point(where: str, d: Any, i: int, cfg, relabel: dict[str, str], legacy: bool, point_cls,
                grid: set) -> Any:
    """Point ``i`` of the file as a ``point_cls``, checked against the file's config and its own counters."""
    if not isinstance(d, dict):
        raise SweepFileError(f"{where}: must be an object")
    for key in ("mode", "axis", "x", "snr_db", "precoding", "burst_pb", "stop_reason", "counters"):
        if key not in d:
            raise SweepFileError(f"{where}: missing field {key}")
    if not _finite_number(d["x"]):
        raise SweepFileError(f"{where}: field x must be a finite number, got {d['x']!r:.40}")
    if not _finite_number(d["snr_db"]):
        raise SweepFileError(f"{where}: field snr_db must be a finite number, got {d['snr_db']!r:.40}")
    if not isinstance(d["mode"], str):
        raise SweepFileError(f"{where}: field mode must be a name, got {d['mode']!r:.40}")
    d = {**d, "mode": relabel.get(d["mode"], d["mode"])}
    point = (d["mode"], float(d["x"]))
    if point not in grid:
        raise SweepFileError(f"{where}: mode={d['mode']!r:.40} x={d['x']!r} is not a point of the file's config "
                             f"(modes {', '.join(cfg.modes)}; points {', '.join(map(repr, cfg.points))})")
    if d["axis"] != cfg.axis or d["precoding"] != cfg.precoding or d["burst_pb"] != cfg.burst_pb:
        raise SweepFileError(f"{where}: axis/precoding/burst_pb differ from the file's config")
    if abs(float(d["snr_db"]) - cfg.snr_db(float(d["x"]))) > 1e-9 * max(1.0, abs(float(d["snr_db"]))):
        raise SweepFileError(f"{where}: field snr_db={d['snr_db']!r} does not match x={d['x']!r}")
    if not isinstance(d["stop_reason"], str):
        raise SweepFileError(f"{where}: field stop_reason must be a string")
    counters = _counters(d["counters"], where)
    pr = point_cls(d["mode"], cfg.axis, float(d["x"]), float(d["snr_db"]), counters, d["stop_reason"], i,
                     cfg.precoding, cfg.burst_pb)
    try:
        expected = set(pr.row()) | {"counters"}
    except ValueError as exc:  # counts that contradict each other (e.g. more errors than trials)
        raise SweepFileError(f"{where}: inconsistent counters ({exc})") from None
    if not legacy and set(d) != expected:
        miss, unk = sorted(expected - set(d)), sorted(set(d) - expected)
        raise SweepFileError(f"{where}: " + "; ".join(s for s in (
            f"missing field(s) {', '.join(miss)}" if miss else "",
            f"unknown field(s) {', '.join(map(repr, unk))}" if unk else "") if s))
    return pr


def _provenance(p: Path, obj: dict, cfg) -> list:
    """Where the points came from: this file, or the files it was merged from (``merged_from``)."""
    prov = obj.get("merged_from")
    if prov is None:
        prov = [{"file": str(p), "seed": cfg.seed, "phy802_version": obj.get("phy802_version"),
                 "interrupted": obj["interrupted"]}]
    else:
        if not isinstance(prov, list) or not prov or not all(
                isinstance(e, dict) and _is_int(e.get("seed")) and isinstance(e.get("file"), str) for e in prov):
            raise SweepFileError(f"{p}: field merged_from must be a non-empty list of {{file, seed, ...}} objects")
    return prov


def read_sweep_json(cls, path, *, config_cls, point_cls, mode_label) -> Any:
    """Load and validate a ``sweep.json``; ``cls``, ``config_cls``, ``point_cls`` are
    :class:`phy802.sweep.SweepResult`, ``SweepConfig``, ``PointResult`` and ``mode_label`` its
    function (passed in: this module never imports :mod:`phy802.sweep`, which imports it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "sweep.json"
    from phy802.runtime.inputs import read_json_file

    # a regular file of bounded size and depth (a FIFO or /dev/zero is refused, not read forever)
    obj = read_json_file(p, MAX_SWEEP_FILE, what="JSON sweep file", error=SweepFileError)
    if not isinstance(obj, dict) or obj.get("format") != "phy802.sweep":
        fmt = obj.get("format") if isinstance(obj, dict) else None
        raise SweepFileError(f"{p}: not a phy802 sweep file (field 'format' is {fmt!r:.40})")
    if obj.get("version") != 1:
        raise SweepFileError(f"{p}: unsupported sweep file version {obj.get('version')!r:.40}")
    missing = sorted(TOP_KEYS - set(obj))
    extra = sorted(set(obj) - TOP_KEYS - OPTIONAL_TOP_KEYS)
    if missing or extra:
        raise SweepFileError(f"{p}: " + "; ".join(s for s in (f"missing field(s) {', '.join(missing)}" if missing else "",
                                                               f"unknown field(s) {', '.join(map(repr, extra))}" if extra else "")
                                                   if s))
    cfg, relabel, legacy = _read_config(p, obj["config"], config_cls, mode_label)
    if not isinstance(obj["points"], list) or not isinstance(obj["interrupted"], bool):
        raise SweepFileError(f"{p}: field points must be a list and interrupted a boolean")
    grid = {(m, x) for m in cfg.modes for x in cfg.points}
    pts, seen = [], set()
    for i, d in enumerate(obj["points"]):
        where = f"{p}: points[{i}]"
        pr = _read_point(where, d, i, cfg, relabel, legacy, point_cls, grid)
        point = (pr.mode, pr.x)
        if point in seen:
            raise SweepFileError(f"{where}: mode={pr.mode} x={d['x']!r} appears twice")
        seen.add(point)
        pts.append(pr)
    prov = _provenance(p, obj, cfg)
    res = cls(cfg, pts, obj["interrupted"])
    res.provenance = [dict(e) for e in prov]
    res.source = str(p)
    return res


def _config_key(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in SAME_CONFIG_EXEMPT}


# Independent seeds repeat every raw count of a point only by chance: with this many pre-FEC bit
# errors over the common points, the 8 physical lanes' Poisson counts alone (mean 1.25 each) agree
# with probability sum_k P(k)^2 ^ 8 = 0.27^8 ~ 3e-5 (4 lanes at 200G: 0.18^4 ~ 1e-3), and the PCS
# lanes' counts, the error-weight histogram and the symbol counts must agree too; so identical
# counts mean one run given twice.
REPEAT_MIN_BIT_ERRORS = 10


def _raw_counts(counters) -> dict:
    """A point's counts without its wall time (``seconds`` differs between copies of nothing)."""
    return {k: v for k, v in counters.as_dict().items() if k != "seconds"}


def _refuse_repeated_run(results: Sequence[Any], sources: Sequence[Any]) -> None:
    """Refuse two results whose common points hold identical raw counts (one run given twice under
    another name or with its seed edited: the seed check alone cannot see that)."""
    for j in range(1, len(results)):
        for i in range(j):
            a = {(p.mode, p.x): p.counters for p in results[i].points}
            common = [(p.mode, p.x, a[(p.mode, p.x)], p.counters) for p in results[j].points if (p.mode, p.x) in a]
            if not common or sum(ca.bit_errors for _, _, ca, _ in common) < REPEAT_MIN_BIT_ERRORS:
                continue
            if all(_raw_counts(ca) == _raw_counts(cb) for _, _, ca, cb in common):
                raise SweepFileError(
                    f"{sources[j] or 'result'}: every raw count of its {len(common)} common point(s) equals "
                    f"{sources[i] or 'an earlier result'}'s; that is one run given twice (runs with distinct seeds "
                    f"do not repeat the same errors)")


def merge_results(results: Sequence[Any]) -> Any:
    """Merge loaded results (each from :func:`read_sweep_json` or a run): same configuration,
    distinct seeds; returns a new result with ``provenance`` listing every source and seed."""
    if not results:
        raise SweepFileError("nothing to merge")
    sources = [getattr(r, "source", None) for r in results]
    for r, s in zip(results, sources):
        if not r.points:  # phy802 never writes such a file (an interrupted run with no point is not saved)
            raise SweepFileError(f"{s or 'result'}: holds no points; there is nothing in it to merge")
    real = [os.path.realpath(s) for s in sources if s]
    if len(set(real)) != len(real):
        dup = sorted({s for s in real if real.count(s) > 1})
        raise SweepFileError(f"{dup[0]}: the same file is given twice; merging a file with itself would double its counts")
    base = _config_key(results[0].config)
    for r, s in zip(results[1:], sources[1:]):
        other = _config_key(r.config)
        diff = [k for k in base if base[k] != other.get(k)]
        if diff:
            k = diff[0]
            raise SweepFileError(f"{s or 'result'}: config.{k}={other.get(k)!r} differs from {base[k]!r} in "
                                 f"{sources[0] or 'the first result'}; only runs of the same configuration merge")
    seen: dict[int, str] = {}
    for r, s in zip(results, sources):
        for e in (getattr(r, "provenance", None) or [{"file": s or "result", "seed": r.config.seed}]):
            seed = int(e["seed"])
            if seed in seen:
                raise SweepFileError(f"{s or 'result'}: seed {seed} was already merged from {seen[seed]}; runs with "
                                     f"the same seed repeat the same errors (give each run its own --seed)")
            seen[seed] = e.get("file", s)
    _refuse_repeated_run(results, sources)
    out = results[0]
    for r in results[1:]:
        out = out.merge(r)
    out.provenance = [dict(e) for r, s in zip(results, sources)
                      for e in (getattr(r, "provenance", None) or [{"file": s or "result", "seed": r.config.seed}])]
    return out
