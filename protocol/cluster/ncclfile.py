"""nccl-tests output read strictly, compared with the model, diagnosed and calibrated.

Two inputs are read:

* the **text** that ``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
  ``alltoall_perf``, ``sendrecv_perf`` (and ``broadcast_perf``) print (any nccl-tests version;
  README and doc/PERFORMANCE.md of NVIDIA/nccl-tests): ``#`` header lines, one ``#  Rank  r Group g
  Pid p on HOST device d [bus] NAME`` line per rank (ranks = their count, nodes = distinct hosts),
  the column header ``# size count type redop root time algbw busbw #wrong ...`` (older versions
  have no ``root``, and no ``Group`` in the rank lines; Open MPI's ``[1,0]<stdout>:`` line prefix
  is stripped), one row per size with the out-of-place then the in-place columns, and
  ``# Avg bus bandwidth``.  The library's own lines in that stdout (its ``NCCL version ...`` banner,
  whole ``host:pid:tid [dev] NCCL INFO ...`` debug lines) are skipped; any other text is refused.  The op comes from ``# Collective test starting: NAME`` where present,
  otherwise from ``op=`` (the caller's ``--op``);
* the **CSV** form of ``tests/data/nccl/`` (``# key: value`` header lines with ``nodes``,
  ``gpus_per_node``, ``collective``; then ``size_bytes,time_us_out_of_place,algbw_GBps,busbw_GBps``).

Strict: a truncated file (text: no ``# Avg bus bandwidth`` line, or a short row), mixed ops, no
rank lines (text), sizes not increasing, or an algbw / busbw that contradicts time and size
(``algbw = size / time``, ``busbw = algbw x factor``, within the printed rounding) is a
:class:`NcclTestsError` naming the file, line and field.

**Diagnosis.**  A cluster whose peak measured bus bandwidth is below ``UNDERPERFORMING`` (0.6) of
the model's peak for the cluster described is said to underperform (a healthy 2 x 8 H100 with
8 x 400G InfiniBand reaches ~450-480 GB/s; nccl-tests issue 290's 167 GB/s is a broken inter-node
path); below ``BELOW_EXPECTED`` (0.8) it is said to be below expectation (a healthy run is within
20% of what its hardware gives; nccl issue 1244's H20 run at 68% is one its poster reports slow).
Small-message times far above the model (``SLOW_LATENCY``, 2x) point at the transport
(a TCP offload such as GPUDirect-TCPXO is ~120 us, IB/RoCE ~25-50 us).

**Calibration** fits the two constants a user cannot know, ``net_efficiency`` (effective
inter-node bandwidth) and ``latency_offset_us``, to the sizes of one run (least squares of log
time ratios), and refuses to present the fit as a healthy cluster's: it is reported with the
diagnosis.  Two constants cannot follow every run: a bus bandwidth that *falls* with size to a
plateau (nccl-tests #290's ring run: 102 GB/s at 64 MB, 87-90 GB/s from 512 MB) has no
``latency + bytes / bandwidth`` form, and a run whose regimes belong to different algorithms with
very different constants needs one pair per algorithm.  So the fit also tries, on top of the two
constants, NCCL's table refitted per algorithm (a latency shift and a bandwidth factor each, the
algorithm still chosen per size by minimum time) and a sustained bus-bandwidth ceiling
(``ClusterSpec`` fields; :mod:`protocol.cluster.nccl`), and keeps that richer fit only where the
small-sample Akaike criterion (AICc, counting two constants per algorithm chosen at a fitted size
and one for a ceiling that binds) is lower by more than 2; ``structure=`` forces either.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace

from .nccl import bus_factor, norm_op, predict
from .topology import ClusterSpec

__all__ = ["NcclTestsError", "NcclRun", "read_nccl_tests", "compare", "diagnose", "calibrate", "write_calibration",
           "read_calibration", "apply_calibration", "check_hardware", "HARDWARE", "implausible", "PLAUSIBLE", "UNDERPERFORMING", "BELOW_EXPECTED", "SLOW_LATENCY", "CAL_FORMAT"]

UNDERPERFORMING = 0.6
BELOW_EXPECTED = 0.8
SLOW_LATENCY = 2.0
CAL_FORMAT = "phy802-calibration"
#: the fields of the cluster a calibration was fitted on that it must agree with where it is applied
#: (the node count may differ: fit on 2 nodes, price 64)
HARDWARE = ("gpus_per_node", "nics_per_node", "rate", "scale_up", "gpu", "transport")
#: calibration file versions this reader knows (1: NIC share and latency offset; 2: + per-algorithm constants)
CAL_VERSIONS = (1, 2)
_BINARIES = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reduce_scatter",
             "alltoall_perf": "alltoall", "sendrecv_perf": "sendrecv", "broadcast_perf": "broadcast"}
_GPU_WORDS = (("B200", "blackwell"), ("B100", "blackwell"), ("GB200", "blackwell"), ("H100", "hopper"),
              ("H200", "hopper"), ("H800", "hopper"), ("GH200", "hopper"), ("A100", "ampere"), ("A800", "ampere"),
              ("V100", "volta"))


class NcclTestsError(ValueError):
    """A malformed nccl-tests file (the message names file, line and field)."""


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run: per size (bytes, us, GB/s); ranks/nodes/op as read (None if not stated)."""

    path: str
    op: str
    ranks: int | None
    nodes: int | None
    gpus_per_node: int | None
    gpu: str | None
    bytes: tuple
    time_us: tuple
    algbw: tuple
    busbw: tuple
    lines: tuple
    form: str
    meta: dict = field(default_factory=dict)


def _op_of_binary(name: str) -> str | None:
    for b, op in _BINARIES.items():
        if b in name:
            return op
    return None


def _gpu_of(text: str) -> str | None:
    for w, g in _GPU_WORDS:
        if w in text:
            return g
    return None


#: what nccl-tests prints (``%12li`` sizes, ``%7.2f`` / ``%8.Nf`` figures): ASCII digits, a point,
#: an exponent; Python's ``float`` also takes ``+``, ``_``, ``inf``, spaces and non-ASCII digits
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[0-9]+")
#: the largest nccl-tests output read (a 16,000-rank run with NCCL_DEBUG=INFO is ~100 MB); a
#: device or a file that never ends is refused at this bound instead of filling memory
MAX_NCCL_TESTS_BYTES = 1 << 28


def _num(tok: str, path: str, line: int, name: str) -> float:
    if not _NUMBER.fullmatch(tok):
        raise NcclTestsError(f"{path}, line {line}: field {name!r} is not a number as nccl-tests prints it "
                             f"(digits, '.', exponent): {tok!r}")
    v = float(tok)
    if not math.isfinite(v):
        raise NcclTestsError(f"{path}, line {line}: field {name!r} must be a finite number >= 0, got {tok!r}")
    return v


def _size(tok: str, path: str, line: int, name: str) -> int:
    if not _INTEGER.fullmatch(tok):
        raise NcclTestsError(f"{path}, line {line}: field {name!r} must be a whole number of bytes in ASCII digits, "
                             f"got {tok!r}")
    return int(tok)


def _wrong(tok: str, path: str, line: int, where: str) -> None:
    """nccl-tests' ``#wrong`` column: ``N/A`` without ``-c 1``, else the count of wrong elements;
    a row with wrong results is no timing of a working collective."""
    if tok == "N/A":
        return
    if not _INTEGER.fullmatch(tok):
        raise NcclTestsError(f"{path}, line {line}: field '#wrong' ({where}) must be a count or N/A, got {tok!r}")
    if int(tok):
        raise NcclTestsError(f"{path}, line {line}: field '#wrong' ({where}) is {tok}: the collective returned "
                             "wrong results at this size; its time is not a valid measurement")


def _check_rows(path: str, op: str, ranks: int | None, rows: list[tuple[int, int, float, float, float]]) -> None:
    if not rows:
        raise NcclTestsError(f"{path}: no data rows (truncated?)")
    prev = None
    for ln, size, t, alg, bus in rows:
        if prev is not None and size <= prev:
            raise NcclTestsError(f"{path}, line {ln}: field 'size' {size} is not above the previous row's {prev}")
        prev = size
        if t <= 0:
            raise NcclTestsError(f"{path}, line {ln}: field 'time' must be > 0, got {t:g}")
        want = size / (t * 1e3)  # GB/s
        # printed with 2 decimals: half a unit of rounding plus 2% for the rounding of time
        if abs(alg - want) > 0.006 + 0.02 * want:
            raise NcclTestsError(f"{path}, line {ln}: field 'algbw' {alg:g} GB/s contradicts size / time = "
                                 f"{size} B / {t:g} us = {want:.3g} GB/s")
        if ranks is not None:
            f = bus_factor(op, ranks)
            wb = alg * f
            if abs(bus - wb) > 0.006 + 0.006 * f + 0.02 * wb:
                raise NcclTestsError(f"{path}, line {ln}: field 'busbw' {bus:g} GB/s contradicts algbw x {f:.4g} "
                                     f"({op}, {ranks} ranks) = {wb:.3g} GB/s")


def _read_csv(path: str, lines: list[str]) -> NcclRun:
    meta: dict = {}
    rows = []
    header_at = None
    for i, raw in enumerate(lines, 1):
        s = raw.strip()
        if not s:
            continue
        if s.startswith("#"):
            k, sep, v = s[1:].partition(":")
            if sep and header_at is None and re.fullmatch(r"[a-z_ ]+", k.strip()):
                meta[k.strip()] = v.strip()
            continue
        if header_at is None:
            cols = [c.strip() for c in s.split(",")]
            need = ("size_bytes", "time_us_out_of_place", "algbw_GBps", "busbw_GBps")
            for n in need:
                if n not in cols:
                    raise NcclTestsError(f"{path}, line {i}: CSV header has no column {n!r}")
            idx = [cols.index(n) for n in need]
            header_at = i
            continue
        toks = [t.strip() for t in s.split(",")]
        if len(toks) < max(idx) + 1:
            raise NcclTestsError(f"{path}, line {i}: row has {len(toks)} fields, the header {max(idx) + 1} (truncated?)")
        size = _size(toks[idx[0]], path, i, "size_bytes")
        rows.append((i, size, _num(toks[idx[1]], path, i, "time_us_out_of_place"),
                     _num(toks[idx[2]], path, i, "algbw_GBps"), _num(toks[idx[3]], path, i, "busbw_GBps")))
    if header_at is None:
        raise NcclTestsError(f"{path}: no CSV header (size_bytes,time_us_out_of_place,algbw_GBps,busbw_GBps)")
    op = _op_of_binary(meta.get("collective", ""))

    def _int(key: str) -> int | None:
        v = meta.get(key)
        if v is None:
            return None
        m = re.match(r"\s*(\d+)", v)
        if not m:
            raise NcclTestsError(f"{path}: header field {key!r} is not an integer: {v!r}")
        return int(m.group(1))

    nodes, gpn = _int("nodes"), _int("gpus_per_node")
    ranks = nodes * gpn if nodes and gpn else None
    m = re.search(r"(\d+)\s+(?:MPI\s+)?ranks", meta.get("collective", ""))
    if m and ranks is not None and int(m.group(1)) != ranks:
        raise NcclTestsError(f"{path}: header says {m.group(1)} ranks but nodes x gpus_per_node = {ranks}")
    return NcclRun(path, op or "", ranks, nodes, gpn, _gpu_of(meta.get("gpu", "")), tuple(r[1] for r in rows),
                   tuple(r[2] for r in rows), tuple(r[3] for r in rows), tuple(r[4] for r in rows),
                   tuple(r[0] for r in rows), "csv", meta), rows


_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s*(.*)$")
#: a launcher's per-line prefix (Open MPI ``--tag-output``: ``[1,0]<stdout>:``), stripped
_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")


_LIB_LINE = re.compile(r"^NCCL version \S+$|^\S+:\d+:\d+ \[\d+\] NCCL (INFO|WARN|VERSION)\b")


@dataclass
class _TextState:
    """What :func:`_read_text` has read so far of an nccl-tests text output."""
    ops: list[tuple[int, str]] = field(default_factory=list)  #: (line, op) of each 'Collective test starting'
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)  #: rank -> (host, device text)
    cols: list[str] | None = None  #: the column header's fields
    rows: list[tuple] = field(default_factory=list)  #: (line, size, time, algbw, busbw)
    avg: bool = False  #: the closing '# Avg bus bandwidth' line was seen
    redops: set[str] = field(default_factory=set)


def _read_comment(st: _TextState, s: str, path: str, i: int) -> None:
    """One '#' line: the binary's name, a rank line, the column header, the closing lines."""
    m = re.search(r"Collective test starting:\s*(\S+)", s)
    if m:
        op = _op_of_binary(m.group(1))
        if op is None:
            raise NcclTestsError(f"{path}, line {i}: unknown nccl-tests binary {m.group(1)!r}")
        st.ops.append((i, op))
        return
    m = _RANK.match(s)
    if m:
        r = int(m.group(1))
        if r in st.ranks:
            raise NcclTestsError(f"{path}, line {i}: rank {r} listed twice")
        st.ranks[r] = (m.group(2), m.group(4))
        return
    body = s.lstrip("#").split()
    if body[:2] == ["size", "count"]:
        st.cols = body
        return
    if "Avg bus bandwidth" in s:
        st.avg = True
    m = re.search(r"Out of bounds values\s*:\s*(\S+)\s*(\S*)", s)
    if m and (m.group(1) != "0" or m.group(2) not in ("OK", "")):
        raise NcclTestsError(f"{path}, line {i}: field 'Out of bounds values' is {m.group(1)} "
                             f"{m.group(2)}: nccl-tests found wrong results; its times are not valid")


def _read_row(st: _TextState, s: str, path: str, i: int) -> None:
    """One data row: size count type [redop] [root] time algbw busbw #wrong (out-of-place), then in-place."""
    if st.cols is None:
        raise NcclTestsError(f"{path}, line {i}: data before the column header '# size count type ...'")
    cols, toks = st.cols, s.split()
    try:
        t_at = cols.index("time")
    except ValueError:
        raise NcclTestsError(f"{path}: column header has no 'time' field") from None
    if len(toks) < t_at + 4:
        raise NcclTestsError(f"{path}, line {i}: row has {len(toks)} fields, needs at least {t_at + 4} (truncated?)")
    if "redop" in cols:
        st.redops.add(toks[cols.index("redop")])
    size = _size(toks[0], path, i, "size")
    if len(toks) > t_at + 3:
        _wrong(toks[t_at + 3], path, i, "out-of-place")
    if len(toks) > t_at + 7:
        _wrong(toks[t_at + 7], path, i, "in-place")
    st.rows.append((i, size, _num(toks[t_at], path, i, "time"), _num(toks[t_at + 1], path, i, "algbw"),
                    _num(toks[t_at + 2], path, i, "busbw")))


def _check_whole(st: _TextState, path: str) -> None:
    """What a whole nccl-tests output has: a header, rank lines 0..N-1, the closing line, one op."""
    if st.cols is None:
        raise NcclTestsError(f"{path}: no column header '# size count type redop root time algbw busbw' (not "
                             "nccl-tests output, or truncated)")
    if not st.ranks:
        raise NcclTestsError(f"{path}: no '#  Rank N Group G Pid P on HOST device D' lines: ranks and nodes unknown")
    if not st.avg:
        raise NcclTestsError(f"{path}: no '# Avg bus bandwidth' line at the end (truncated?)")
    if len({o for _, o in st.ops}) > 1:
        (l1, o1), (l2, o2) = st.ops[0], next(x for x in st.ops if x[1] != st.ops[0][1])
        raise NcclTestsError(f"{path}, line {l2}: field 'Collective test starting' is {o2}, line {l1} said {o1} "
                             "(mixed ops in one file)")
    if len(st.redops) > 1:
        raise NcclTestsError(f"{path}: field 'redop' takes several values ({', '.join(sorted(st.redops))}): "
                             "mixed ops")
    if sorted(st.ranks) != list(range(len(st.ranks))):
        raise NcclTestsError(f"{path}: rank lines are not 0..{len(st.ranks) - 1}")


def _read_text(path: str, lines: list[str]) -> tuple[NcclRun, list]:
    st = _TextState()
    for i, raw in enumerate(lines, 1):
        s = _PREFIX.sub("", raw.strip()).strip()
        if not s:
            continue
        if s.startswith("#"):
            _read_comment(st, s, path, i)
        elif not _LIB_LINE.search(s):
            # (_LIB_LINE: the library's own stdout, not nccl-tests': its banner ("NCCL version 2.25.1+cuda12.8",
            # printed by rank 0 between the rank lines and the table) and whole NCCL_DEBUG lines
            # ("host:pid:tid [d] NCCL INFO ..."))
            _read_row(st, s, path, i)
    _check_whole(st, path)
    from collections import Counter

    ranks, rows = st.ranks, st.rows
    per = Counter(h for h, _ in ranks.values())  # one pass: hosts.count per host was O(hosts^2)
    nodes = len(per)
    gpn = next(iter(per.values())) if len(set(per.values())) == 1 else None
    op = st.ops[0][1] if st.ops else ""
    return NcclRun(path, op, len(ranks), nodes, gpn, _gpu_of(" ".join(d for _, d in ranks.values())),
                   tuple(r[1] for r in rows), tuple(r[2] for r in rows), tuple(r[3] for r in rows),
                   tuple(r[4] for r in rows), tuple(r[0] for r in rows), "text", {}), rows


def read_nccl_tests(path: str | os.PathLike, op: str | None = None) -> NcclRun:
    """Read a nccl-tests text output or a reference CSV (module docstring); ``op`` (``--op``) is
    used where the file does not name it and must agree where it does."""
    from phy802.runtime.inputs import read_input_bytes, read_stdin_bytes

    p = os.fspath(path)
    try:
        if p == "-":  # standard input, as every phy802 reader takes it
            p = "<stdin>"
            data = read_stdin_bytes(MAX_NCCL_TESTS_BYTES, what="nccl-tests output", error=NcclTestsError, name=p)
        else:
            data = read_input_bytes(p, MAX_NCCL_TESTS_BYTES, what="nccl-tests output", error=NcclTestsError)
    except OSError as exc:
        raise NcclTestsError(f"{p}: cannot read: {exc.strerror}") from None
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not any(ln.strip() for ln in lines):
        raise NcclTestsError(f"{p}: empty file")
    is_csv = any(ln.strip().startswith("size_bytes,") for ln in lines)
    run, rows = (_read_csv if is_csv else _read_text)(p, lines)
    zero = [ln for ln, size, *_ in rows if size == 0]
    if zero:
        # NCCL moves nothing for a 0-byte buffer: the row times a launch, there is no model time to
        # hold it to (the ratio would be infinite); left out and said so (NcclRun.meta)
        rows = [r for r in rows if r[1] != 0]
        if not rows:
            raise NcclTestsError(f"{p}: only 0-byte rows (line {zero[0]}): nothing to compare")
        run = replace(run, bytes=tuple(r[1] for r in rows), time_us=tuple(r[2] for r in rows),
                      algbw=tuple(r[3] for r in rows), busbw=tuple(r[4] for r in rows), lines=tuple(r[0] for r in rows),
                      meta={**run.meta, "zero_byte_lines": zero})
    want = norm_op(op) if op else None
    if run.op and want and run.op != want:
        raise NcclTestsError(f"{p}: the file is {run.op} but --op is {want}")
    final = run.op or want
    if not final:
        raise NcclTestsError(f"{p}: the file does not name its collective (no 'Collective test starting' line); "
                             "give --op")
    run = replace(run, op=final)
    _check_rows(p, final, run.ranks, rows)
    return run


def compare(run: NcclRun, cluster: ClusterSpec, *, algo: str | None = None, proto: str | None = None,
            table: dict | None = None) -> list[dict]:
    """One row per size: measured and predicted time and bus bandwidth, and their ratio."""
    out = []
    for b, t, bus in zip(run.bytes, run.time_us, run.busbw):
        pr = predict(run.op, b, cluster, algo=algo, proto=proto, table=table)
        out.append({"bytes": int(b), "measured_us": float(t), "predicted_us": pr.time_us,
                    "ratio": float(t) / pr.time_us if pr.time_us > 0 else math.inf,
                    "measured_busbw": float(bus), "predicted_busbw": pr.busbw_GBps, "algo": pr.algo,
                    "proto": pr.proto})
    return out


def diagnose(run: NcclRun, rows: list[dict], cluster: ClusterSpec) -> list[str]:
    """Plain sentences about a run that is far from what its cluster should give ([] if healthy)."""
    notes = []
    big = [r for r in rows if r["bytes"] >= 64 * 2**20] or rows
    m_peak = max(r["measured_busbw"] for r in big)
    p_peak = max(r["predicted_busbw"] for r in big)
    if p_peak > 0 and m_peak < UNDERPERFORMING * p_peak:
        notes.append(f"UNDERPERFORMING: peak measured bus bandwidth {m_peak:.0f} GB/s is {m_peak / p_peak:.0%} of "
                     f"the {p_peak:.0f} GB/s this cluster should reach ({cluster.nodes} x {cluster.gpus_per_node} "
                     f"{cluster.gpu}, {cluster.nics_per_node} x {cluster.rate} per node). Something is wrong "
                     "(NICs not all used, PCIe/NUMA placement, a degraded link, adaptive routing off); do not "
                     "calibrate the model to this run.")
    elif p_peak > 0 and m_peak < BELOW_EXPECTED * p_peak:
        notes.append(f"BELOW EXPECTED: peak measured bus bandwidth {m_peak:.0f} GB/s is {m_peak / p_peak:.0%} of "
                     f"the {p_peak:.0f} GB/s the model gives this cluster at the same sizes (a healthy run is within "
                     f"{1 - BELOW_EXPECTED:.0%}); check the algorithm NCCL picked (NCCL_DEBUG=INFO), the NICs "
                     "and the PCIe placement before calibrating to it.")
    small = [r for r in rows if r["bytes"] <= 64 * 1024]
    if small:
        worst = max(small, key=lambda r: r["ratio"])
        if worst["ratio"] > SLOW_LATENCY:
            notes.append(f"SLOW SMALL MESSAGES: {worst['bytes']} B takes {worst['measured_us']:.1f} us, "
                         f"{worst['ratio']:.1f}x the model's {worst['predicted_us']:.1f} us (IB/RoCE: ~25-50 us on "
                         "2 nodes); a non-RDMA transport (TCP offload, sockets) or a proxy in the path.")
    return notes


def _fit_offset(pred: list[float], meas: list[float]) -> tuple[float, float]:
    """Offset ``o`` minimising sum (log(p + o) - log m)^2 (golden section) and that sum; never below the
    calibration reader's bound (``PLAUSIBLE``), so a fit writes only what ``--calibration`` reads back."""
    lo = max(-0.95 * min(pred), PLAUSIBLE["latency_offset_us"][0])
    hi = max(meas) + 1.0

    def f(o: float) -> float:
        return sum((math.log(p + o) - math.log(m)) ** 2 for p, m in zip(pred, meas))

    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(80):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    o = (a + b) / 2
    return o, f(o)


def calibrate(run: NcclRun, cluster: ClusterSpec, *, algo: str | None = None, proto: str | None = None,
              table: dict | None = None, use: list[int] | None = None, structure: str = "auto") -> dict:
    """Fit the model's unknown constants to the sizes ``use`` (indices; default all).

    ``structure``: ``"two-constant"`` fits ``net_efficiency`` and ``latency_offset_us`` only;
    ``"per-algorithm"`` adds, on top of that fit, a latency shift and a bandwidth factor per NCCL
    algorithm and a sustained bus-bandwidth ceiling (module docstring); ``"auto"`` (default) keeps
    the richer fit only where the small-sample Akaike criterion (AICc) says its extra constants
    are worth their cost on these sizes."""
    if structure not in ("auto", "two-constant", "per-algorithm"):
        raise ValueError(f"calibrate: structure must be auto, two-constant or per-algorithm, got {structure!r}")
    idx = list(range(len(run.bytes))) if use is None else list(use)
    if not idx:
        raise ValueError("calibrate: no sizes to fit")
    meas = [run.time_us[i] for i in idx]
    best = None
    base = replace(cluster, latency_offset_us=0.0)
    not_identified = _unidentified(run, base, algo, proto, table, idx)
    # the NIC share is a share of the line rate: at most 1 (NCCL gets ~0.94 of NDR, 46-48 of 50 GB/s)
    grid = [0.02 * 1.06 ** k for k in range(0, 80) if 0.02 * 1.06 ** k <= 1.0]
    if "net_efficiency" in not_identified:
        grid = [cluster.net_efficiency]
    for eff in grid:
        c = replace(base, net_efficiency=eff)
        pred = [predict(run.op, run.bytes[i], c, algo=algo, proto=proto, table=table).time_us for i in idx]
        o, err = _fit_offset(pred, meas)
        if best is None or err < best[0]:
            best = (err, eff, o)
    err, eff, o = best
    # refine the efficiency around the grid point
    lo, hi = eff / 1.06, min(1.0, eff * 1.06)
    for _ in range(30 if len(grid) > 1 else 0):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        e1 = _fit_offset([predict(run.op, run.bytes[i], replace(base, net_efficiency=m1), algo=algo, proto=proto,
                                  table=table).time_us for i in idx], meas)
        e2 = _fit_offset([predict(run.op, run.bytes[i], replace(base, net_efficiency=m2), algo=algo, proto=proto,
                                  table=table).time_us for i in idx], meas)
        if e1[1] < e2[1]:
            hi = m2
        else:
            lo = m1
    eff = (lo + hi) / 2 if len(grid) > 1 else cluster.net_efficiency
    o, err = _fit_offset([predict(run.op, run.bytes[i], replace(base, net_efficiency=eff), algo=algo, proto=proto,
                                  table=table).time_us for i in idx], meas)
    out = {"format": CAL_FORMAT, "version": 2, "structure": "two-constant", "net_efficiency": eff,
           "latency_offset_us": o, "algo_latency_us": {}, "algo_bw_factor": {}, "sustained_busbw_GBps": None,
           "rms_log_ratio": math.sqrt(err / len(idx)), "fitted_on": os.path.abspath(run.path), "op": run.op,
           "sizes_fitted": [int(run.bytes[i]) for i in idx], "cluster": cluster.describe(),
           "hardware": {k: getattr(cluster, k) for k in HARDWARE}, "aicc": {},
           "not_identified": not_identified}
    if "latency_offset_us" in not_identified:  # left at its default, the error taken there
        o = 0.0
        pred = [predict(run.op, run.bytes[i], replace(base, net_efficiency=eff), algo=algo, proto=proto,
                        table=table).time_us for i in idx]
        err = sum((math.log(p) - math.log(m)) ** 2 for p, m in zip(pred, meas))
        out.update(latency_offset_us=0.0, rms_log_ratio=math.sqrt(err / len(idx)))
    if structure == "two-constant":
        out["implausible"] = implausible(out, cluster)
        return out
    st = _fit_structured(run, replace(base, net_efficiency=eff), algo, proto, table, idx, o)
    n = len(idx)
    a2 = _aicc(err, n, 2)
    out["aicc"] = {"two-constant": a2}
    if st is None:
        return out
    a_s = _aicc(st["rss"], n, st["k"])
    out["aicc"]["per-algorithm"] = a_s
    # prefer the simpler fit unless the richer one is clearly better (AICc lower by more than 2,
    # the usual threshold below which two models are equally supported)
    if structure == "per-algorithm" or (a_s < a2 - 2.0):
        out.update({"structure": "per-algorithm", "latency_offset_us": o, "algo_latency_us": st["algo_latency_us"],
                    "algo_bw_factor": st["algo_bw_factor"], "sustained_busbw_GBps": st["sustained_busbw_GBps"],
                    "rms_log_ratio": math.sqrt(st["rss"] / n), "parameters": st["k"],
                    "algos_chosen": st["algos_chosen"]})
    out["implausible"] = implausible(out, cluster)
    return out


#: what a fitted constant may be before the fit is reported as physically implausible for the cluster
#: described: a NIC share far below the link (NCCL reaches ~0.94 of NDR), a latency floor removed
#: below NCCL's smallest fixed cost (ring/LL's 6.6 us base latency) or raised past what an RDMA
#: transport costs (IB/RoCE floors are 25-60 us on 2 nodes)
PLAUSIBLE = {"net_efficiency": (0.5, 1.0), "latency_offset_us": (-6.6, 100.0), "algo_bw_factor": (0.25, 4.0)}


def implausible(cal: dict, cluster: ClusterSpec) -> list[str]:
    """Sentences naming each fitted constant outside :data:`PLAUSIBLE` (``[]`` if none): the fit is
    still written, with these beside it, never applied as a healthy cluster's constants silently."""
    out = []
    lo, hi = PLAUSIBLE["net_efficiency"]
    e = cal["net_efficiency"]
    if "net_efficiency" not in cal.get("not_identified", ()) and not lo <= e <= hi:
        out.append(f"net_efficiency {e:.3g}: the collective gets {e:.0%} of the NICs' line rate "
                   f"({cluster.nics_per_node} x {cluster.rate}); a healthy cluster gets {lo:.0%}-{hi:.0%} (fewer NICs "
                   "in use, PCIe/NUMA placement, a degraded link, or a bottleneck the model lacks)")
    lo, hi = PLAUSIBLE["latency_offset_us"]
    o = cal["latency_offset_us"]
    if not lo <= o <= hi:
        out.append(f"latency_offset_us {o:+.3g}: outside [{lo:g}, {hi:g}] us of NCCL's table (a non-RDMA "
                   "transport, a proxy in the path, or the wrong cluster)")
    lo, hi = PLAUSIBLE["algo_bw_factor"]
    for a, f in sorted(cal.get("algo_bw_factor", {}).items()):
        if a in cal.get("algos_chosen", ()) and not lo <= f <= hi:
            out.append(f"algo_bw_factor {a} {f:.3g}: {a}'s bandwidth moved by more than {hi:g}x from NCCL's table")
    return out


def _unidentified(run: NcclRun, c: ClusterSpec, algo, proto, table, idx: list[int]) -> list[str]:
    """The constants the sizes ``idx`` of ``run`` cannot identify: the NIC share where the cluster has
    no network (one node) or no fitted size spends half its modelled time on bandwidth; the latency
    offset where no fitted size spends half its modelled time on latency.  They keep their defaults."""
    out = []
    prs = [predict(run.op, run.bytes[i], c, algo=algo, proto=proto, table=table) for i in idx]
    if c.nodes <= 1 or not any(p.bandwidth_s >= 0.5 * p.time_s for p in prs if p.time_s > 0):
        out.append("net_efficiency")
    if not any(p.latency_s >= 0.5 * p.time_s for p in prs if p.time_s > 0):
        out.append("latency_offset_us")
    return out


def _aicc(rss: float, n: int, k: int) -> float:
    """Small-sample Akaike criterion of a least-squares fit of ``k`` constants to ``n`` log ratios
    (``inf`` where ``n <= k + 1``: too few sizes to tell the fit from noise)."""
    if n <= k + 1:
        return math.inf
    return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


# the per-algorithm fit's bounds are the calibration reader's: bandwidth factor >= 0.01, latency shift
# >= PLAUSIBLE's floor, a ceiling <= 1e4 GB/s (so that what is written can be read back)
_LF_LO = math.log(1e-2)
_CEIL_HI = math.log(1e4)


def _shift(v: float) -> float:
    return max(PLAUSIBLE["latency_offset_us"][0], float(v))


def _fit_structured(run: NcclRun, c: ClusterSpec, algo, proto, table, idx: list[int], offset: float) -> dict | None:
    """Per-algorithm latency shift and bandwidth factor, and a sustained bus-bandwidth ceiling, fitted
    (least squares of log ratios, Nelder-Mead from the two-constant fit and a few other starts) with
    the algorithm chosen per size by minimum time, as NCCL does.  ``k`` counts the constants that act
    on a fitted size (two per algorithm chosen there, one for a ceiling that binds)."""
    import numpy as np
    from scipy.optimize import minimize

    from .nccl import enabled

    pool = enabled(run.op, c, algo, proto, table)
    if not pool:
        return None
    fams = sorted({a for a, _ in pool})
    sizes = [int(run.bytes[i]) for i in idx]
    parts = []
    for a, p in pool:
        prs = [predict(run.op, b, c, algo=a, proto=p, table=table) for b in sizes]
        parts.append((fams.index(a), np.array([(pr.latency_s + pr.path_s) * 1e6 + offset for pr in prs]),
                      np.array([pr.bandwidth_s * 1e6 for pr in prs])))
    bf = np.array([b * bus_factor(run.op, run.ranks) / 1000.0 for b in sizes])  # us at 1 GB/s busbw
    meas = np.log(np.array([run.time_us[i] for i in idx]))
    nf = len(fams)
    peak = max(run.busbw[i] for i in idx) or 1.0
    # no algorithm gets more than the NICs' line rate: net_efficiency x factor <= 1
    lf_hi = min(6.0, math.log(1.0 / c.net_efficiency))

    def lfc(v: float) -> float:
        return min(lf_hi, max(_LF_LO, v))

    def times(x):
        t = None
        for k, lat, bwt in parts:
            tt = lat + _shift(x[2 * k]) + bwt / math.exp(lfc(x[2 * k + 1]))
            t = tt if t is None else np.minimum(t, tt)
        ceil = bf / math.exp(min(_CEIL_HI, max(-6.0, x[-1])))
        return np.maximum(t, ceil), t, ceil

    def f(x):
        t = times(x)[0]
        if np.any(t <= 0):
            return 1e9
        return float(np.sum((np.log(t) - meas) ** 2))

    best = None
    off_cap = math.log(1e3 * peak)
    starts = [(dl, lf, cap) for dl in (0.0, 100.0, 500.0) for lf in (0.0, min(lf_hi, math.log(2.0)))
              for cap in (off_cap, math.log(peak))]
    for dl, lf, cap in starts:
        if True:
            x0 = np.array([dl, lf] * nf + [cap])
            r = minimize(f, x0, method="Nelder-Mead",
                         options={"maxiter": 4000 * len(x0), "xatol": 1e-6, "fatol": 1e-12})
            if best is None or r.fun < best.fun:
                best = r
    x = best.x
    full, t, ceil = times(x)
    binds = bool(np.any(ceil > t))
    chosen = set()
    for i in range(len(sizes)):
        ts = [(lat[i] + _shift(x[2 * k]) + bwt[i] / math.exp(lfc(x[2 * k + 1])), k) for k, lat, bwt in parts]
        chosen.add(min(ts)[1])
    k_used = 2 * len(chosen) + (1 if binds else 0)
    lat_d = {fams[k]: _shift(x[2 * k]) for k in range(nf)}
    bw_d = {fams[k]: float(math.exp(lfc(x[2 * k + 1]))) for k in range(nf)}
    return {"rss": float(best.fun), "k": k_used, "algos_chosen": sorted(fams[k] for k in chosen),
            "algo_latency_us": lat_d, "algo_bw_factor": bw_d,
            "sustained_busbw_GBps": float(math.exp(min(_CEIL_HI, max(-6.0, x[-1])))) if binds else None}


def apply_calibration(cluster: ClusterSpec, cal: dict) -> ClusterSpec:
    """``cluster`` with the constants of a :func:`calibrate` / :func:`read_calibration` result."""
    kw = {k: cal[k] for k in ("net_efficiency", "latency_offset_us", "sustained_busbw_GBps") if k in cal}
    for k in ("algo_latency_us", "algo_bw_factor"):
        if k in cal:
            kw[k] = tuple(sorted(dict(cal[k]).items()))
    return replace(cluster, **kw)


def _duplicate_key(path: str) -> str | None:
    """The first key given twice in one JSON object of the (already validated) file ``path``."""
    found: list[str] = []

    def pairs(items):
        seen = set()
        for k, _ in items:
            if k in seen and not found:
                found.append(k)
            seen.add(k)
        return dict(items)

    with open(path, encoding="utf-8") as fh:
        json.load(fh, object_pairs_hook=pairs)
    return found[0] if found else None


def write_calibration(path: str | os.PathLike, cal: dict) -> None:
    from phy802.runtime.output import atomic_write_text

    atomic_write_text(path, json.dumps(cal, indent=1) + "\n")


def read_calibration(path: str | os.PathLike) -> dict:
    """``{"net_efficiency": ..., "latency_offset_us": ...}`` of a ``--calibrate`` output file."""
    p = os.fspath(path)
    from phy802.runtime.inputs import read_json_file

    try:  # the project's strict reader: a regular file, bounded size and nesting, no NaN constants
        doc = read_json_file(p, 1 << 20, what="calibration (JSON)")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read: {exc.strerror}") from None
    if not isinstance(doc, dict) or doc.get("format") != CAL_FORMAT:
        raise ValueError(f"{p}: not a phy802 calibration (field 'format' must be {CAL_FORMAT!r})")
    v = doc.get("version")
    if isinstance(v, bool) or v not in CAL_VERSIONS:
        raise ValueError(f"{p}: field 'version' must be one of {', '.join(map(str, CAL_VERSIONS))} (this "
                         f"phy802's calibration formats), got {v!r}")
    dup = _duplicate_key(p)
    if dup:
        raise ValueError(f"{p}: field {dup!r} is given twice (a JSON reader would silently keep the last)")
    out = {}
    # a share of the line rate is at most 1; a latency offset below NCCL's smallest fixed cost (ring/LL's
    # 6.6 us base latency) would take small collectives below zero (PLAUSIBLE: what a fit may need)
    for k, lo, hi in (("net_efficiency", 0.0, 1.0), ("latency_offset_us", PLAUSIBLE["latency_offset_us"][0], 1e6)):
        v = doc.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (lo < v <= hi if k == "net_efficiency"
                                                                          else lo <= v <= hi):
            raise ValueError(f"{p}: field {k!r} must be a number in {'(' if k == 'net_efficiency' else '['}{lo:g}, "
                             f"{hi:g}], got {v!r}")
        out[k] = float(v)
    # version 2 adds the per-algorithm constants (absent or empty: NCCL's table as it is)
    from .nccl import ALGOS

    # a bandwidth factor on top of the NIC share: the two together stay within the line rate
    bw_hi = 1.0 / out["net_efficiency"]
    for k, lo, hi in (("algo_latency_us", PLAUSIBLE["latency_offset_us"][0], 1e6), ("algo_bw_factor", 1e-2, bw_hi)):
        v = doc.get(k, {})
        if not isinstance(v, dict):
            raise ValueError(f"{p}: field {k!r} must be an object of algorithm: number, got {v!r}")
        for a, x in v.items():
            if a not in ALGOS:
                raise ValueError(f"{p}: field {k!r}: unknown algorithm {a!r} (known: {', '.join(ALGOS)})")
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not (lo <= x <= hi * (1 + 1e-9)):
                why = " (x net_efficiency above the line rate)" if k == "algo_bw_factor" and x > hi else ""
                raise ValueError(f"{p}: field {k!r}: {a} must be a number in [{lo:g}, {hi:.4g}]{why}, got {x!r}")
        out[k] = {a: float(x) for a, x in v.items()}
    v = doc.get("sustained_busbw_GBps")
    if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 < v <= 1e4)):
        raise ValueError(f"{p}: field 'sustained_busbw_GBps' must be null or a number in (0, 1e4], got {v!r}")
    out["sustained_busbw_GBps"] = None if v is None else float(v)
    hw = doc.get("hardware")
    if hw is not None:
        if not isinstance(hw, dict) or set(hw) - set(HARDWARE):
            raise ValueError(f"{p}: field 'hardware' must be an object with keys among {', '.join(HARDWARE)}, "
                             f"got {hw!r}")
        out["hardware"] = dict(hw)
    return out


def check_hardware(cal: dict, cluster: ClusterSpec, path: str | os.PathLike) -> None:
    """ValueError naming both where the calibration ``cal`` (read from ``path``) was fitted on other
    hardware than ``cluster`` (:data:`HARDWARE`; files without the record are not checked)."""
    hw = cal.get("hardware") or {}
    bad = [f"{k} {hw[k]!r} (calibration) vs {getattr(cluster, k)!r} (cluster)" for k in HARDWARE
           if k in hw and hw[k] != getattr(cluster, k)]
    if bad:
        raise ValueError(f"{os.fspath(path)}: a calibration of another cluster: " + "; ".join(bad))
