"""One reader for the FEC codeword histograms link engineers paste.

Every shape below (ethtool, the kernel's YNL, SONiC, CSV) is read here, the format detected from the
content (or forced with ``fmt``), into one :class:`~phy802.telemetry.bins.FecHistogram` per port:

``ethtool-json``
    ``ethtool --json --include-statistics --show-fec DEV``: a JSON **list**, one object per device
    (``ifname``, ``active``, ``statistics``: ``corrected_blocks`` / ``uncorrectable_blocks`` /
    ``corrected_bits`` as ``{"total": N, "lanes": [...]}`` and ``hist[]`` of ``bin_low`` /
    ``bin_high`` / ``total`` / optional ``lanes``).
``ethtool-text``
    the same command without ``--json``: ``FEC parameters for DEV:`` then ``corrected_blocks: N``,
    ``fec_symbols_err_0: N`` / ``fec_symbols_err_1_to_3: N``, per-lane values either inline
    (``N [ per_lane: a, b, c ]``) or on following ``Lane i: v`` lines.
``ynl``
    the kernel's YNL form (``ynl --spec ethtool.yaml --do fec-get``): ``stats.hist[]`` of
    ``bin-low`` / ``bin-high`` / ``bin-val`` / ``bin-val-per-lane`` beside ``corrected`` /
    ``uncorr`` / ``corr-bits`` (netlink arrays: total first, then lanes); one reply, a list of
    replies, or the ``stats`` object alone; the device from ``header.dev-name``.
``sonic-hist``
    SONiC ``show interfaces counters fec-histogram [IFACE]``: rows ``BIN0`` .. ``BIN15`` (codewords
    with that many symbol errors) under the header ``Symbol Errors Per Codeword  Codewords``; a
    line naming an interface (``Ethernet0``) starts that port's block.
``portstat``
    SONiC ``portstat -fh``: a header ``IFACE ... BIN0 ... BIN15`` and one row per port.
``csv``
    rows ``bin,count`` or ``bin_low,bin_high,count`` (an optional header line without digits;
    ``#`` comments; a row ``uncorrectable,N``).

Numbers are plain ASCII digits (values are unsigned 64-bit counters); SONiC's thousands commas
(``1,200,470``) are accepted in the two SONiC formats only. Signs, ``_``, decimals, exponents and
non-ASCII digits or separators are refused, as are control characters and non-UTF-8 bytes. JSON
objects with a key twice and JSON nested deeper than :data:`MAX_JSON_DEPTH` are refused. Per-lane
counts are checked against their totals, and a corrected-blocks counter against the bins (it holds
every codeword with 1..t corrections). Text pastes may carry CRLF line ends and shell-prompt lines
(``admin@sonic:~$ CMD``: skipped; a ``show interfaces counters fec-histogram IFACE`` command names
its port); input is read up to :data:`MAX_TELEMETRY_BYTES`. Every error is a :class:`TelemetryError` (a ValueError)
naming the file, the line or field, and the value.

Snapshots: all these counters are cumulative since link-up; :func:`difference` subtracts an older
snapshot, refusing a counter that went down (reset or wrap) and a different set of ports or bins.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from phy802.telemetry.bins import U64_MAX, FecBin, FecHistogram

__all__ = ["FORMATS", "MAX_JSON_DEPTH", "TelemetryError", "Port", "Telemetry", "parse_telemetry",
           "read_telemetry", "read_text", "detect_format", "difference", "for_code", "parse_histogram_text", "read_histogram"]

FORMATS = ("ethtool-json", "ethtool-text", "ynl", "sonic-hist", "portstat", "csv")
#: deepest JSON nesting accepted (the real shapes are 5 deep; a RecursionError is never reached)
MAX_JSON_DEPTH = 32


class TelemetryError(ValueError):
    """A telemetry file that cannot be read as it stands (names the file, line/field and value)."""


@dataclass(frozen=True)
class Port:
    """One device/port's histogram; ``notes``: things the reader noticed but accepted."""

    name: str
    hist: FecHistogram
    notes: tuple[str, ...] = ()
    fec_mode: str | None = None


@dataclass(frozen=True)
class Telemetry:
    """All ports of one file, in file order, and the format they were read as."""

    ports: tuple[Port, ...]
    fmt: str
    source: str
    info: dict = field(default_factory=dict)

    def names(self) -> list[str]:
        return [p.name for p in self.ports]

    def pick(self, ifname: str) -> "Telemetry":
        """Only the port ``ifname`` (exact name); TelemetryError listing the ports when absent."""
        hit = [p for p in self.ports if p.name == ifname]
        if not hit:
            names = self.names()
            shown = ", ".join(names[:12]) + (f", ... ({len(names)} ports)" if len(names) > 12 else "")
            raise TelemetryError(f"{self.source}: --ifname {ifname!r} is not in this file (ports: {shown})")
        return replace(self, ports=tuple(hit))


# ------------------------------------------------------------------------------ numbers

_DIGITS = re.compile(r"[0-9]+\Z", re.ASCII)
_COMMA_DIGITS = re.compile(r"[0-9]{1,3}(,[0-9]{3})+\Z", re.ASCII)


def _uint_text(tok: str, where: str, commas: bool = False) -> int:
    """A counter written as plain ASCII digits (SONiC: thousands commas too), at most 2^64 - 1."""
    if _DIGITS.match(tok):
        v = int(tok)
    elif commas and _COMMA_DIGITS.match(tok):
        v = int(tok.replace(",", ""))
    else:
        hint = " (thousands commas only in SONiC output)" if "," in tok and not commas else ""
        raise TelemetryError(f"{where}: {tok[:30]!r} is not a count (plain digits 0-9{hint})")
    if v > U64_MAX:
        raise TelemetryError(f"{where}: {tok[:30]} exceeds a 64-bit counter (2^64 - 1)")
    return v


def _uint_json(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TelemetryError(f"{where}: expected a non-negative integer, got {v!r}")
    if v < 0:
        raise TelemetryError(f"{where}: expected a non-negative integer, got {v}")
    if v > U64_MAX:
        raise TelemetryError(f"{where}: {v} exceeds a 64-bit counter (2^64 - 1)")
    return int(v)


def _lanes_json(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise TelemetryError(f"{where}: expected a list of per-lane counts, got {type(v).__name__}")
    return tuple(_uint_json(x, f"{where}[{j}]") for j, x in enumerate(v))


# ------------------------------------------------------------------------------ text hygiene

_BAD_CHAR = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\xa0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]")


def _check_chars(text: str, where: str) -> None:
    m = _BAD_CHAR.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise TelemetryError(f"{where}:{line}: character U+{ord(m.group()):04X} is not allowed "
                             "(plain text: ASCII spaces, tabs and newlines separate fields)")


#: the largest telemetry input read (bytes): a 64-port portstat is ~10 KB, ethtool JSON of 1,000 ports with
#: per-lane counts a few MB; a device or stream that never ends is refused at this size, not read until
#: memory runs out
MAX_TELEMETRY_BYTES = 64 << 20


def read_text(path: str | os.PathLike, limit: int = MAX_TELEMETRY_BYTES) -> tuple[str, str]:
    """``(text, name)`` of a file or of stdin (``'-'``), decoded as strict UTF-8 in both cases; at most
    ``limit`` bytes are read (a longer input, ``/dev/zero`` or an endless pipe, is a TelemetryError
    naming it); a closed stdin, a folder and a socket are TelemetryErrors too."""
    name = os.fspath(path)
    if name == "-":
        from phy802.runtime.inputs import read_stdin_bytes

        name = "<stdin>"
        data = read_stdin_bytes(limit, what="FEC telemetry input", error=TelemetryError, name=name)
    else:
        from phy802.runtime.inputs import check_stream_input

        check_stream_input(name, what="telemetry file", error=TelemetryError)
        with open(name, "rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise TelemetryError(f"{name}: more than {limit >> 20} MiB, too large for FEC telemetry (a device or a "
                                 "stream that does not end?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TelemetryError(f"{name}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark some editors write
    return text, name


# ------------------------------------------------------------------------------ detection

_SONIC_BIN_ROW = re.compile(r"^[ \t]*BIN(\d+)[ \t]+[0-9,]+[ \t]*$", re.M)
_ETHTOOL_TEXT = re.compile(r"^[ \t]*(fec_symbols_err_\d|FEC parameters for |corrected_blocks:)", re.M)
_PORTSTAT_HDR = re.compile(r"^[ \t]*IFACE\b.*\bBIN0\b", re.M)


def detect_format(text: str) -> str:
    """The format of ``text`` (one of :data:`FORMATS`), from its content."""
    s = text.lstrip()
    if s[:1] in ("[", "{"):
        head = s[:20000]
        if "bin_low" in head or '"statistics"' in head or '"ifname"' in head:
            return "ethtool-json"
        return "ynl"
    if _PORTSTAT_HDR.search(text):
        return "portstat"
    if _SONIC_BIN_ROW.search(text):
        return "sonic-hist"
    if _ETHTOOL_TEXT.search(text):
        return "ethtool-text"
    return "csv"


# ------------------------------------------------------------------------------ JSON


def _no_duplicates(where: str):
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise TelemetryError(f"{where}: key {k!r} appears twice in one object (which one is meant?)")
            out[k] = v
        return out
    return hook


def _json_depth_ok(text: str, where: str) -> None:
    """Refuse nesting deeper than MAX_JSON_DEPTH before parsing (no RecursionError, no deep stack)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    b = np.frombuffer(stripped.encode("utf-8", "replace"), np.uint8)
    step = (np.isin(b, (ord("["), ord("{"))).astype(np.int64) - np.isin(b, (ord("]"), ord("}"))))
    if step.size and int(np.cumsum(step).max()) > MAX_JSON_DEPTH:
        at = int(np.argmax(np.cumsum(step) > MAX_JSON_DEPTH))
        line = stripped.count("\n", 0, at) + 1
        raise TelemetryError(f"{where}:{line}: JSON nested deeper than {MAX_JSON_DEPTH} levels "
                             "(FEC statistics are a few levels deep)")


def _load_json(text: str, where: str) -> Any:
    _json_depth_ok(text, where)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates(where))
    except json.JSONDecodeError as exc:
        raise TelemetryError(f"{where}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise TelemetryError(f"{where}: JSON nested too deeply") from None


def _total_and_lanes(v: Any, where: str, lanes_key: str = "lanes") -> tuple[int | None, tuple[int, ...] | None]:
    """A counter as ``N``, ``{"total": N, "lanes": [...]}`` (ethtool) or ``[total, lane0, ...]``
    (netlink arrays); lanes checked against the total."""
    if v is None:
        return None, None
    lanes = None
    if isinstance(v, dict):
        unknown = set(v) - {"total", lanes_key}
        if unknown:
            raise TelemetryError(f"{where}: unexpected key {sorted(unknown)[0]!r} (expected 'total', '{lanes_key}')")
        if "total" not in v:
            raise TelemetryError(f"{where}: an object needs a 'total' key")
        total = _uint_json(v["total"], f"{where}.total")
        if lanes_key in v:
            lanes = _lanes_json(v[lanes_key], f"{where}.{lanes_key}")
    elif isinstance(v, list):
        if not v:
            return None, None
        total = _uint_json(v[0], f"{where}[0]")
        if len(v) > 1:
            lanes = tuple(_uint_json(x, f"{where}[{j}]") for j, x in enumerate(v[1:], start=1))
    else:
        total = _uint_json(v, where)
    if lanes is not None and sum(lanes) != total:
        raise TelemetryError(f"{where}: per-lane counts sum to {sum(lanes)}, the total is {total}")
    return total, lanes


def _ethtool_json(obj: Any, where: str) -> list[Port]:
    devs = obj if isinstance(obj, list) else [obj]
    if not devs:
        raise TelemetryError(f"{where}: an empty list (no devices)")
    ports = []
    for d_i, dev in enumerate(devs):
        at = f"{where}: [{d_i}]"
        if not isinstance(dev, dict):
            raise TelemetryError(f"{at}: expected a device object, got {type(dev).__name__}")
        name = dev.get("ifname", "-" if len(devs) == 1 else f"dev{d_i}")
        if not isinstance(name, str) or not name:
            raise TelemetryError(f"{at}.ifname: expected a device name, got {name!r}")
        st = dev.get("statistics")
        if st is None and ("stats" in dev or "hist" in dev):
            raise TelemetryError(f"{at}: this is the kernel's YNL shape ('stats'/'hist' of bin-low, bin-high, bin-val, "
                                 "as 'ynl --do fec-get' and phy802's --format ynl write), not ethtool --json's: read it "
                                 "with --format ynl (or without --format)")
        if st is None:
            raise TelemetryError(f"{at}.statistics is missing ({name}: run ethtool with --include-statistics)")
        if not isinstance(st, dict):
            raise TelemetryError(f"{at}.statistics: expected an object")
        if "hist" not in st:
            raise TelemetryError(f"{at}.statistics.hist is missing ({name}: no FEC histogram; the kernel needs "
                                 "ETHTOOL_A_FEC_STAT_HIST, Linux 6.18+, and a driver that reports it)")
        hist = st["hist"]
        if not isinstance(hist, list) or not hist:
            raise TelemetryError(f"{at}.statistics.hist: expected a non-empty list of bins")
        bins = []
        for i, e in enumerate(hist):
            f = f"{at}.statistics.hist[{i}]"
            if not isinstance(e, dict):
                raise TelemetryError(f"{f}: expected an object")
            unknown = set(e) - {"bin_low", "bin_high", "total", "lanes"}
            if unknown:
                raise TelemetryError(f"{f}: unexpected key {sorted(unknown)[0]!r} "
                                     "(ethtool bins have bin_low, bin_high, total, lanes)")
            for k in ("bin_low", "bin_high"):
                if k not in e:
                    raise TelemetryError(f"{f}.{k} is missing")
            lo, hi = _uint_json(e["bin_low"], f"{f}.bin_low"), _uint_json(e["bin_high"], f"{f}.bin_high")
            lanes = _lanes_json(e["lanes"], f"{f}.lanes") if "lanes" in e else None
            if "total" in e:
                tot = _uint_json(e["total"], f"{f}.total")
                if lanes is not None and sum(lanes) != tot:
                    raise TelemetryError(f"{f}: lanes sum to {sum(lanes)}, total is {tot}")
            elif lanes is not None:
                tot = sum(lanes)
            else:
                raise TelemetryError(f"{f}.total is missing")
            bins.append(FecBin(lo, hi, tot, lanes))
        corr, _ = _total_and_lanes(st.get("corrected_blocks"), f"{at}.statistics.corrected_blocks")
        unc, _ = _total_and_lanes(st.get("uncorrectable_blocks"), f"{at}.statistics.uncorrectable_blocks")
        bits, _ = _total_and_lanes(st.get("corrected_bits"), f"{at}.statistics.corrected_bits")
        mode = dev.get("active")
        mode = mode[0] if isinstance(mode, list) and mode and isinstance(mode[0], str) else None
        ports.append(_port(name, bins, unc, corr, bits, f"{where} {name}", [], mode))
    return ports


_YNL_BIN_KEYS = {"bin-low", "bin-high", "bin-val", "bin-val-per-lane"}


def _ynl(obj: Any, where: str) -> list[Port]:
    replies = obj if isinstance(obj, list) else [obj]
    if not replies:
        raise TelemetryError(f"{where}: an empty list (no replies)")
    ports = []
    for r_i, rep in enumerate(replies):
        at = "" if len(replies) == 1 else f"[{r_i}]."
        if not isinstance(rep, dict):
            raise TelemetryError(f"{where}: field '{at or ''}': expected a JSON object with 'stats' or 'hist', "
                                 f"got {type(rep).__name__}")
        name = "-" if len(replies) == 1 else f"dev{r_i}"
        hdr = rep.get("header")
        if isinstance(hdr, dict) and isinstance(hdr.get("dev-name"), str):
            name = hdr["dev-name"]
        if "statistics" in rep or "ifname" in rep:
            raise TelemetryError(f"{where}: field '{at or ''}statistics': this is ethtool --json's shape (a list of "
                                 "devices, statistics.hist of bin_low, bin_high, total), not the kernel's YNL shape: "
                                 "read it with --format ethtool-json (or without --format)")
        if "stats" in rep:
            stats, pre = rep["stats"], f"{at}stats"
        else:
            stats, pre = rep, (at.rstrip(".") or "stats")
        if not isinstance(stats, dict):
            raise TelemetryError(f"{where}: field '{pre}' must be an object")
        if "hist" not in stats:
            raise TelemetryError(f"{where}: field '{pre}.hist' is missing (no FEC bins in this file)")
        hist = stats["hist"]
        if not isinstance(hist, list):
            raise TelemetryError(f"{where}: field '{pre}.hist' must be a list of bins")
        bins = []
        for i, e in enumerate(hist):
            f = f"{pre}.hist[{i}]"
            if not isinstance(e, dict):
                raise TelemetryError(f"{where}: field '{f}' must be an object")
            unknown = set(e) - _YNL_BIN_KEYS
            if unknown:
                raise TelemetryError(f"{where}: field '{f}': unexpected key {sorted(unknown)[0]!r}")
            for k in ("bin-low", "bin-high"):
                if k not in e:
                    raise TelemetryError(f"{where}: field '{f}.{k}' is missing")
            lo = _uint_json(e["bin-low"], f"{where}: field '{f}.bin-low'")
            hi = _uint_json(e["bin-high"], f"{where}: field '{f}.bin-high'")
            lanes = e.get("bin-val-per-lane")
            if lanes is not None:
                lanes = _lanes_json(lanes, f"{where}: field '{f}.bin-val-per-lane'")
            if "bin-val" in e:
                val = _uint_json(e["bin-val"], f"{where}: field '{f}.bin-val'")
                if lanes is not None and sum(lanes) != val:
                    raise TelemetryError(f"{where}: field '{f}.bin-val-per-lane' sums to {sum(lanes)}, bin-val is {val}")
            elif lanes is not None:
                val = sum(lanes)  # the kernel core sums lanes when bin-val is absent
            else:
                raise TelemetryError(f"{where}: field '{f}' has neither bin-val nor bin-val-per-lane")
            bins.append(FecBin(lo, hi, val, lanes))
        if "uncorr" in stats and "uncorrectable" in stats:
            raise TelemetryError(f"{where}: field '{pre}' has both 'uncorr' and 'uncorrectable' (which one is meant?)")
        ukey = "uncorr" if "uncorr" in stats else "uncorrectable"
        unc, _ = _total_and_lanes(stats.get(ukey), f"{where}: field '{pre}.{ukey}'")
        corr, _ = _total_and_lanes(stats.get("corrected"), f"{where}: field '{pre}.corrected'")
        bits, _ = _total_and_lanes(stats.get("corr-bits"), f"{where}: field '{pre}.corr-bits'")
        src = where if name == "-" else f"{where} {name}"
        ports.append(_port(name, bins, unc, corr, bits, src, []))
    return ports


# ------------------------------------------------------------------------------ text forms

_ET_LINE = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*:[ \t]*(\S+)[ \t]*(?:\[[ \t]*per_lane[ \t]*:([^\]]*)\][ \t]*)?$")
_ET_LANE = re.compile(r"^[ \t]*Lane[ \t]+(\d+)[ \t]*:[ \t]*(\S+)[ \t]*$")
_ET_BIN = re.compile(r"fec_symbols_err_(\d+)(?:_to_(\d+))?\Z")


def _ethtool_text(text: str, where: str) -> list[Port]:
    devs: list[dict] = []
    cur: dict | None = None
    last_counter: list | None = None

    def new(name):
        d = {"name": name, "bins": [], "counters": {}, "mode": None, "line": 0}
        devs.append(d)
        return d

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        at = f"{where}:{lineno}"
        m = re.match(r"^FEC parameters for (\S+?):?$", line.strip())
        if m:
            cur = new(m.group(1))
            last_counter = None
            continue
        if cur is None:
            cur = new("-")
        if line.strip().startswith(("Supported/Configured FEC encodings", "Configured FEC encodings", "Statistics:")):
            continue
        m = re.match(r"^[ \t]*Active FEC encodings?:[ \t]*(\S+)", line)
        if m:
            cur["mode"] = m.group(1)
            continue
        m = _ET_LANE.match(line)
        if m:
            if last_counter is None:
                raise TelemetryError(f"{at}: a 'Lane {m.group(1)}' line before any counter")
            lane, val = int(m.group(1)), _uint_text(m.group(2), f"{at}: Lane {m.group(1)}")
            if lane != len(last_counter[1]):
                raise TelemetryError(f"{at}: Lane {lane} out of order (expected Lane {len(last_counter[1])})")
            last_counter[1].append(val)
            continue
        m = _ET_LINE.match(line)
        if not m:
            raise TelemetryError(f"{at}: not an ethtool FEC statistics line: {line.strip()[:60]!r}")
        key, val_t, lanes_t = m.group(1), m.group(2), m.group(3)
        val = _uint_text(val_t, f"{at}: {key}")
        lanes = []
        if lanes_t is not None:
            lanes = [_uint_text(x.strip(), f"{at}: {key} per_lane[{j}]") for j, x in enumerate(lanes_t.split(","))
                     if x.strip() or len(lanes_t.split(",")) > 1]
            if not lanes:
                raise TelemetryError(f"{at}: {key}: an empty per_lane list")
        bm = _ET_BIN.match(key)
        if bm:
            lo = int(bm.group(1))
            hi = int(bm.group(2)) if bm.group(2) else lo
            last_counter = [key, lanes, val, at, ("bin", lo, hi)]
            cur["bins"].append(last_counter)
        elif key in ("corrected_blocks", "uncorrectable_blocks", "corrected_bits"):
            if key in cur["counters"]:
                raise TelemetryError(f"{at}: {key} appears twice for {cur['name']}")
            last_counter = [key, lanes, val, at, ("counter",)]
            cur["counters"][key] = last_counter
        else:
            raise TelemetryError(f"{at}: unknown ethtool FEC counter {key!r}")
    if not devs:
        raise TelemetryError(f"{where}: no ethtool FEC statistics found")
    ports = []
    for d in devs:
        src = where if d["name"] == "-" else f"{where} {d['name']}"
        for c in list(d["bins"]) + list(d["counters"].values()):
            key, lanes, val, at = c[0], c[1], c[2], c[3]
            if lanes and sum(lanes) != val:
                raise TelemetryError(f"{at}: {key}: per-lane counts sum to {sum(lanes)}, the total is {val}")
        if not d["bins"]:
            raise TelemetryError(f"{src}: no fec_symbols_err_* lines (no FEC histogram for {d['name']})")
        bins = [FecBin(c[4][1], c[4][2], c[2], tuple(c[1]) if c[1] else None) for c in d["bins"]]
        cnt = {k: v[2] for k, v in d["counters"].items()}
        ports.append(_port(d["name"], bins, cnt.get("uncorrectable_blocks"), cnt.get("corrected_blocks"),
                           cnt.get("corrected_bits"), src, [], d["mode"]))
    return ports


def _split(line: str) -> list[str]:
    return [tok for tok in re.split(r"[ \t]+", line.strip()) if tok]


_IFACE_LINE = re.compile(r"^[ \t]*([A-Za-z][A-Za-z0-9_/.:-]*?):?[ \t]*$")
#: a shell prompt pasted with the output: ``admin@sonic:~$ CMD``, ``root@host:/x# CMD``, ``$ CMD``
_PROMPT = re.compile(r"^[ \t]*(?:[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+(?::[^\s$#]*)?[ \t]*[$#]|[$#])(?:[ \t]+(\S.*?))?[ \t]*$", re.M)
_FEC_HIST_CMD = re.compile(r"show[ \t]+interfaces?[ \t]+counters[ \t]+fec-histogram(?:[ \t]+(?:-i[ \t]+)?(\S+))?")


def _drop_prompts(text: str) -> tuple[str, list[str]]:
    """``text`` with each pasted shell-prompt line blanked (line numbers kept), and the interfaces its
    ``show interfaces counters fec-histogram IFACE`` commands name."""
    named: list[str] = []

    def blank(m: re.Match) -> str:
        c = _FEC_HIST_CMD.search(m.group(1) or "")
        if c and c.group(1):
            named.append(c.group(1))
        return ""

    return _PROMPT.sub(blank, text), named


def _sonic_hist(text: str, where: str, named: Sequence[str] = ()) -> list[Port]:
    blocks: list[dict] = []
    cur = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        at = f"{where}:{lineno}"
        if not s or set(s) <= set("-= \t"):
            continue
        if "Codewords" in s or s.startswith("Symbol Errors"):
            continue
        m = re.match(r"^BIN(\d+)[ \t]+(\S+)$", s)
        if m:
            if cur is None:
                cur = {"name": "-", "bins": {}, "line": lineno}
                blocks.append(cur)
            i = int(m.group(1))
            if i in cur["bins"]:
                raise TelemetryError(f"{at}: BIN{i} appears twice for {cur['name']}")
            if cur["bins"] and i != max(cur["bins"]) + 1:
                raise TelemetryError(f"{at}: BIN{i} out of order (after BIN{max(cur['bins'])})")
            if not cur["bins"] and i != 0:
                raise TelemetryError(f"{at}: the histogram starts at BIN{i}, expected BIN0")
            cur["bins"][i] = _uint_text(m.group(2), f"{at}: BIN{i}", commas=True)
            continue
        m = _IFACE_LINE.match(s)
        if m and not s.upper().startswith("BIN"):
            cur = {"name": m.group(1), "bins": {}, "line": lineno}
            blocks.append(cur)
            continue
        raise TelemetryError(f"{at}: not a SONiC fec-histogram line: {s[:60]!r}")
    blocks = [b for b in blocks if b["bins"] or b["name"] != "-"]
    if not blocks:
        raise TelemetryError(f"{where}: no BIN rows found")
    if len(named) == 1 and len(blocks) == 1 and blocks[0]["name"] == "-":
        blocks[0]["name"] = named[0]  # the port the pasted command asked for
    ports = []
    seen = set()
    for b in blocks:
        if not b["bins"]:
            raise TelemetryError(f"{where}:{b['line']}: interface {b['name']} has no BIN rows")
        if b["name"] in seen:
            raise TelemetryError(f"{where}:{b['line']}: interface {b['name']} appears twice")
        seen.add(b["name"])
        bins = [FecBin(i, i, c) for i, c in sorted(b["bins"].items())]
        src = where if b["name"] == "-" else f"{where} {b['name']}"
        ports.append(_port(b["name"], bins, None, None, None, src, []))
    return ports


def _portstat(text: str, where: str) -> list[Port]:
    header = None
    bin_cols: list[tuple[int, int]] = []
    ports = []
    seen = set()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        at = f"{where}:{lineno}"
        if not s or set(s) <= set("-= \t"):
            continue
        toks = _split(s)
        if header is None:
            if _SONIC_BIN_ROW.match(raw) or "Symbol Errors Per Codeword" in s:
                raise TelemetryError(f"{at}: a SONiC fec-histogram row before the portstat table: this file holds "
                                     "two commands' output; give each its own file (its ports would be dropped)")
            if toks[0] != "IFACE":
                continue  # a banner line before the table ("Last cached time was ...")
            header = toks
            for j, h in enumerate(toks):
                m = re.match(r"BIN(\d+)\Z", h)
                if m:
                    bin_cols.append((j, int(m.group(1))))
            idx = [i for _, i in bin_cols]
            if not idx or idx != list(range(len(idx))):
                raise TelemetryError(f"{at}: portstat header needs columns BIN0, BIN1, ... in order, got "
                                     f"{' '.join(h for h in toks if h.startswith('BIN'))[:80]!r}")
            continue
        if toks[0] == "IFACE":
            raise TelemetryError(f"{at}: a second header line")
        if len(toks) != len(header):
            if _SONIC_BIN_ROW.search(text) or "Symbol Errors Per Codeword" in text:
                raise TelemetryError(f"{at}: a SONiC fec-histogram block after the portstat table: this file holds "
                                     "two commands' output; give each its own file")
            raise TelemetryError(f"{at}: {len(toks)} columns, the header has {len(header)}")
        name = toks[0]
        if name in seen:
            raise TelemetryError(f"{at}: interface {name} appears twice")
        seen.add(name)
        vals = [toks[j] for j, _ in bin_cols]
        if all(v.upper() == "N/A" for v in vals):
            ports.append(Port(name, _empty(f"{where} {name}"), (f"{name}: no FEC counters (N/A)",)))
            continue
        bins = [FecBin(i, i, _uint_text(toks[j], f"{at}: {name} BIN{i}", commas=True)) for j, i in bin_cols]
        ports.append(_port(name, bins, None, None, None, f"{where} {name}", []))
    if header is None:
        raise TelemetryError(f"{where}: no portstat header line (IFACE ... BIN0 ...)")
    if not ports:
        raise TelemetryError(f"{where}: no port rows under the header")
    return ports


def _empty(src: str) -> FecHistogram:
    return FecHistogram((), None, None, None, None, src)


_HEADER_CELL = re.compile(r"[A-Za-z_ ]+\Z")


def _csv_rows(text: str, where: str):
    """``(line, cells)`` of each CSV record; a record the csv module refuses (a field over its
    131072-character limit, a NUL, an unclosed quote) is a TelemetryError naming the file and line,
    not a ``_csv.Error``."""
    reader = csv.reader(io.StringIO(text))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            # line_num counts the lines read so far, the bad one included
            raise TelemetryError(f"{where}:{max(reader.line_num, 1)}: not a valid CSV line ({exc})") from None
        yield reader.line_num, row


def _csv(text: str, where: str) -> list[Port]:
    bins: list[FecBin] = []
    unc = None
    ncols = None
    header_seen = False
    for lineno, row in _csv_rows(text, where):
        cells = [c.strip(" \t") for c in row]
        at = f"{where}:{lineno}"
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if cells[-1] == "":
            cells = cells[:-1]
        if len(cells) not in (2, 3):
            raise TelemetryError(f"{at}: expected 'bin,count' or 'bin_low,bin_high,count', got {len(cells)} fields")
        if ncols is None and not header_seen and all(_HEADER_CELL.match(c) for c in cells) \
                and cells[0].lower() not in ("uncorrectable", "uncorr", "uncorrected"):
            header_seen = True  # a header line: words only, no digits
            ncols = len(cells)
            continue
        if ncols is not None and len(cells) != ncols:
            raise TelemetryError(f"{at}: expected {ncols} fields like the first line, got {len(cells)}")
        ncols = len(cells)
        if cells[0].lower() in ("uncorrectable", "uncorr", "uncorrected"):
            if unc is not None:
                raise TelemetryError(f"{at}: a second uncorrectable row")
            unc = _uint_text(cells[-1], f"{at}: field count")
            continue
        names = ("bin", "count") if len(cells) == 2 else ("bin_low", "bin_high", "count")
        vals = [_uint_text(c, f"{at}: field {n}") for n, c in zip(names, cells)]
        lo, hi, cnt = (vals[0], vals[0], vals[1]) if len(vals) == 2 else vals
        if hi < lo:
            raise TelemetryError(f"{at}: field bin_high: {hi} < bin_low {lo}")
        if bins and lo <= bins[-1].high:
            raise TelemetryError(f"{at}: field bin_low: bin {lo}-{hi} overlaps or is out of order")
        bins.append(FecBin(lo, hi, cnt))
    if not bins:
        raise TelemetryError(f"{where}: no histogram rows found")
    return [_port("-", bins, unc, None, None, where, [])]


# ------------------------------------------------------------------------------ assembly


def _port(name, bins, unc, corr, bits, src, notes, mode=None) -> Port:
    try:
        h = FecHistogram(tuple(bins), uncorrectable=unc, corrected=corr, corr_bits=bits, t=None, source=src)
    except ValueError as exc:
        raise TelemetryError(str(exc)) from None
    return Port(name, h, tuple(notes), mode)


#: how far a corrected-blocks counter and the bins it must agree with may differ (relative): counters of one
#: snapshot are read moments apart on a live link (~4e6 corrected codewords/s at 400G and pre-FEC BER 1e-5,
#: so 1 ms apart is ~1e-3 of a one-second snapshot); a counter of another port, time or kind is off by far more
CORRECTED_AGREEMENT = 0.01


def _check_corrected(h: FecHistogram, t: int | None) -> None:
    """The corrected-blocks counter (codewords with 1..t corrected symbols) against the bins: it holds every
    codeword of the bins from 1 up, and equals their sum when the bins cover every count 1..t."""
    if h.corrected is None or not h.bins:
        return
    s = sum(int(b.count) for b in h.bins if b.low >= 1)
    covered = t is not None and sorted(c for b in h.bins for c in range(max(b.low, 1), min(b.high, t) + 1)) \
        == list(range(1, t + 1))
    c = int(h.corrected)
    tol = CORRECTED_AGREEMENT * max(c, s)
    if s - c > tol or (covered and c - s > tol):
        rel = "holds only" if c < s else "is far more than"
        raise TelemetryError(f"{h.source}: the corrected-blocks counter {c} {rel} the {s} codewords the bins count with "
                             f"1{'..' + str(t) if covered else ' or more'} corrected symbols: the counters are not "
                             "from one snapshot of this port (or not codeword counts)")


def _for_code(p: Port, t: int | None, n: int | None) -> Port:
    """Bins checked against the code: within 0..n; above t only when empty (SONiC's fixed BIN0..15 on a
    t = 7 code), then dropped; a non-empty bin above t is refused; the corrected-blocks counter must agree
    with the bins (:func:`_check_corrected`)."""
    h = p.hist
    if t is None or not h.bins:
        _check_corrected(h, None)
        return p
    keep = []
    for i, b in enumerate(h.bins):
        if n is not None and b.high > n:
            raise TelemetryError(f"{h.source}: bin {b.label()}: bin-high {b.high} exceeds the codeword's {n} symbols")
        if b.high > t:
            if b.count == 0 and b.low > t:
                continue
            raise TelemetryError(f"{h.source}: bin {b.label()}: bin-high {b.high} > t with {b.count} codewords; the code corrects at "
                                 f"most t = {t} symbols (choose the right --code)")
        keep.append(b)
    try:
        h2 = FecHistogram(tuple(keep), h.uncorrectable, h.corrected, h.corr_bits, t, h.source)
    except ValueError as exc:
        raise TelemetryError(str(exc)) from None
    _check_corrected(h2, t)
    return replace(p, hist=h2)


def parse_telemetry(text: str, where: str = "<text>", *, fmt: str | None = None, t: int | None = None,
                    n: int | None = None) -> Telemetry:
    """Every port of ``text`` (format detected, or ``fmt``); bins checked against ``t``/``n`` when given."""
    if fmt is not None and fmt not in FORMATS:
        raise TelemetryError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    _check_chars(text, where)
    text = text.replace("\r\n", "\n")  # a paste from a Windows terminal or a SONiC web console
    if not text.strip():
        raise TelemetryError(f"{where}: empty file")
    named: list[str] = []
    if text.lstrip()[:1] not in ("[", "{"):
        text, named = _drop_prompts(text)
        if not text.strip():
            raise TelemetryError(f"{where}: only a shell prompt line, no output")
    f = fmt or detect_format(text)
    if f in ("ethtool-json", "ynl"):
        obj = _load_json(text, where)
        ports = _ethtool_json(obj, where) if f == "ethtool-json" else _ynl(obj, where)
    elif f == "ethtool-text":
        ports = _ethtool_text(text, where)
    elif f == "sonic-hist":
        ports = _sonic_hist(text, where, named)
    elif f == "portstat":
        ports = _portstat(text, where)
    else:
        ports = _csv(text, where)
    names = [p.name for p in ports]
    if len(set(names)) != len(names):
        dup = next(x for x in names if names.count(x) > 1)
        raise TelemetryError(f"{where}: port {dup!r} appears twice")
    ports = [_for_code(p, t, n) for p in ports]
    return Telemetry(tuple(ports), f, where)


def for_code(tel: Telemetry, t: int, n: int) -> Telemetry:
    """``tel`` (read without a code) with every port's bins checked against a code of ``t``/``n``, as
    :func:`parse_telemetry` with ``t``/``n`` does: for a caller that picks the code from the ports'
    active FEC modes."""
    return replace(tel, ports=tuple(_for_code(p, t, n) for p in tel.ports))


def read_telemetry(path: str | os.PathLike, *, fmt: str | None = None, t: int | None = None,
                   n: int | None = None) -> Telemetry:
    """Read a telemetry file (``'-'`` = stdin, the same strict UTF-8 as a file)."""
    text, name = read_text(path)
    return parse_telemetry(text, name, fmt=fmt, t=t, n=n)


# ------------------------------------------------------------------------------ snapshots


def difference(new: Telemetry, old: Telemetry) -> Telemetry:
    """``new - old`` per port, bin and lane: the counts between two cumulative snapshots.

    Refused (TelemetryError naming port and bin): different port sets, different bins, lanes or
    reported counters, and any counter that went down (a reset or wrap between the snapshots, or
    NEW older than OLD).
    """
    a, b = new.names(), old.names()
    if set(a) != set(b):
        only_new = sorted(set(a) - set(b))
        only_old = sorted(set(b) - set(a))
        raise TelemetryError(f"{new.source} vs --since {old.source}: different ports"
                             + (f"; only in NEW: {', '.join(only_new[:8])}" if only_new else "")
                             + (f"; only in OLD: {', '.join(only_old[:8])}" if only_old else ""))
    olds = {p.name: p for p in old.ports}
    out = []
    for p in new.ports:
        q = olds[p.name]
        hn, ho = p.hist, q.hist
        tag = f"{new.source} vs --since {old.source}: port {p.name}"
        if [(x.low, x.high) for x in hn.bins] != [(x.low, x.high) for x in ho.bins]:
            raise TelemetryError(f"{tag}: the bins differ ({', '.join(x.label() for x in hn.bins)} vs "
                                 f"{', '.join(x.label() for x in ho.bins)})")
        bins = []
        for x, y in zip(hn.bins, ho.bins):
            if x.count < y.count:
                raise TelemetryError(f"{tag} bin {x.label()}: count went down from {y.count} to {x.count} "
                                     "(counter reset or wrap between the snapshots, or NEW is older than OLD)")
            lanes = None
            if (x.per_lane is None) != (y.per_lane is None) or (x.per_lane and len(x.per_lane) != len(y.per_lane)):
                raise TelemetryError(f"{tag} bin {x.label()}: per-lane counts in one snapshot only, or a different "
                                     "number of lanes")
            if x.per_lane is not None:
                for j, (u, v) in enumerate(zip(x.per_lane, y.per_lane)):
                    if u < v:
                        raise TelemetryError(f"{tag} bin {x.label()} lane {j}: count went down from {v} to {u} "
                                             "(counter reset or wrap)")
                lanes = tuple(u - v for u, v in zip(x.per_lane, y.per_lane))
            bins.append(FecBin(x.low, x.high, x.count - y.count, lanes))
        vals = {}
        for k in ("uncorrectable", "corrected", "corr_bits"):
            u, v = getattr(hn, k), getattr(ho, k)
            if (u is None) != (v is None):
                raise TelemetryError(f"{tag}: {k} is reported in one snapshot only")
            if u is not None and u < v:
                raise TelemetryError(f"{tag} {k}: went down from {v} to {u} (counter reset or wrap)")
            vals[k] = None if u is None else u - v
        h = FecHistogram(tuple(bins), vals["uncorrectable"], vals["corrected"], vals["corr_bits"], hn.t,
                         f"{hn.source} since {old.source}")
        out.append(replace(p, hist=h, notes=p.notes + tuple(n for n in q.notes if n not in p.notes)))
    return Telemetry(tuple(out), new.fmt, f"{new.source} since {old.source}", {"since": old.source})


# ---------------------------------------------------------------------- one port


def parse_histogram_text(text: str, where: str = "<text>", t: int | None = None, fmt: str | None = None) -> FecHistogram:
    """The one histogram of ``text`` (any format of :func:`parse_telemetry`); errors name ``where``
    and the field. A file with several ports is refused (read it with :func:`parse_telemetry`)."""
    tel = parse_telemetry(text, where, fmt=fmt, t=t)
    if len(tel.ports) != 1:
        raise TelemetryError(f"{where}: {len(tel.ports)} ports ({', '.join(tel.names()[:6])}, ...): pick one")
    return tel.ports[0].hist


def read_histogram(path: str | os.PathLike, t: int | None = None, fmt: str | None = None) -> FecHistogram:
    """Read a one-port histogram file (any format of :func:`parse_telemetry`; ``'-'`` = stdin)."""
    text, name = read_text(path)
    return parse_histogram_text(text, name, t, fmt)
