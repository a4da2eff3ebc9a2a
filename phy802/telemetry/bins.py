"""FEC codeword histograms ("FEC bins") the way a PHY and the Linux kernel report them.

IEEE 802.3ck/802.3df count codewords by the number of symbols the RS decoder corrected; Linux
exposes the counts through ethtool netlink FEC statistics (``stats.hist``: a list of entries with
inclusive ``bin-low``/``bin-high`` symbol counts, ``bin-val`` and optional ``bin-val-per-lane``,
beside ``corrected``, ``uncorrectable`` and ``corr-bits``: the kernel's ethtool netlink spec,
``Documentation/netlink/specs/ethtool.yaml``). This module converts between that structure, simple CSV files and phy802's own counters
(``LinkCounters.hist``, the trace metadata's ``symbol_error_hist``).

Conventions
-----------
* A bin ``[low, high]`` is inclusive on both ends, like the kernel's. Bins do not overlap; gaps are
  allowed (a vendor may report only some ranges) and mean "not observed by this histogram".
* ``uncorrectable`` counts codewords with more than ``t`` symbol errors (``None`` = not reported).
  From phy802 counters it is the ground-truth count of words with ``w > t`` pre-FEC symbol errors
  (a miscorrected word, ~1e-17 of failures for KP4, is counted there, not in the bin the decoder
  would report).
* ``per_lane``: codewords per lane in that bin, kept when the source gives it (kernel input). A
  Clause 119 codeword spans every PCS lane, so phy802's own 400G/200G counters have no per-lane
  histogram; their per-PCS-lane corrected *symbols* stay in ``LinkCounters.pcs_lane_corrected``.
* ``corrected`` = codewords with 1..t corrected symbols (the kernel's ``corrected``).

Input formats: every shape of :mod:`phy802.telemetry.parsers` (ethtool JSON and text, the kernel's YNL
form, SONiC ``fec-histogram`` and ``portstat -fh``, CSV); :func:`read_histogram` reads a one-port file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = ["FecBin", "FecHistogram", "parse_edges", "default_edges", "U64_MAX", "I64_MAX"]

#: the largest value of a kernel/SAI counter (unsigned 64-bit)
U64_MAX = 2**64 - 1
#: the most codewords one histogram may hold in all (its counts are fitted as int64)
I64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FecBin:
    """Codewords whose corrected-symbol count lies in ``[low, high]`` (inclusive)."""

    low: int
    high: int
    count: int
    per_lane: tuple[int, ...] | None = None

    def as_ynl(self) -> dict:
        """The kernel's netlink/YNL entry (``bin-low``, ``bin-high``, ``bin-val``, ``bin-val-per-lane``)."""
        d: dict[str, Any] = {"bin-low": self.low, "bin-high": self.high, "bin-val": self.count}
        if self.per_lane is not None:
            d["bin-val-per-lane"] = list(self.per_lane)
        return d

    def as_ethtool_json(self) -> dict:
        """``ethtool --json``'s entry (``bin_low``, ``bin_high``, ``total``, ``lanes``)."""
        d: dict[str, Any] = {"bin_low": self.low, "bin_high": self.high, "total": self.count}
        if self.per_lane is not None:
            d["lanes"] = list(self.per_lane)
        return d

    def label(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class FecHistogram:
    """A codeword histogram in bins (see the module docstring for the conventions).

    ``t``: the code's correction capability when known (bins must lie in ``0..t``); ``source``: a
    note on where the counts came from (file name, "phy802 link", ...).
    """

    bins: tuple[FecBin, ...]
    uncorrectable: int | None = None
    corrected: int | None = None
    corr_bits: int | None = None
    t: int | None = None
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        where = self.source or "histogram"
        last = -1
        for i, b in enumerate(self.bins):
            for name, v in (("bin-low", b.low), ("bin-high", b.high), ("bin-val", b.count)):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                    raise ValueError(f"{where}: hist[{i}].{name} must be a non-negative integer, got {v!r}")
            if b.high < b.low:
                raise ValueError(f"{where}: hist[{i}]: bin-high {b.high} < bin-low {b.low}")
            if b.low <= last:
                raise ValueError(f"{where}: hist[{i}]: bin [{b.low}, {b.high}] overlaps or is out of order "
                                 f"(previous bin ends at {last})")
            if self.t is not None and b.high > self.t:
                raise ValueError(f"{where}: hist[{i}]: bin-high {b.high} exceeds t = {self.t} "
                                 "(a decoder cannot correct more than t symbols)")
            if b.per_lane is not None:
                if any((isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0) for v in b.per_lane):
                    raise ValueError(f"{where}: hist[{i}].bin-val-per-lane must be non-negative integers")
                if sum(b.per_lane) != b.count:
                    raise ValueError(f"{where}: hist[{i}]: bin-val-per-lane sums to {sum(b.per_lane)}, "
                                     f"bin-val is {b.count}")
            last = b.high
        tot = sum(int(b.count) for b in self.bins) + int(self.uncorrectable or 0)
        if tot > I64_MAX:
            raise ValueError(f"{where}: the bins hold {tot} codewords in all, more than 2^63 - 1 "
                             "(a counter wrapped or the values are not codeword counts)")
        lanes = {len(b.per_lane) for b in self.bins if b.per_lane is not None}
        if len(lanes) > 1:
            raise ValueError(f"{where}: bin-val-per-lane lists have different lengths {sorted(lanes)}")
        for name in ("uncorrectable", "corrected", "corr_bits"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
                raise ValueError(f"{where}: {name.replace('_', '-')} must be a non-negative integer, got {v!r}")

    # ------------------------------------------------------------------ properties
    @property
    def total(self) -> int:
        """Codewords counted: all bins plus the uncorrectable ones (when reported)."""
        return int(sum(b.count for b in self.bins)) + int(self.uncorrectable or 0)

    @property
    def n_lanes(self) -> int | None:
        for b in self.bins:
            if b.per_lane is not None:
                return len(b.per_lane)
        return None

    def counts(self) -> np.ndarray:
        return np.array([b.count for b in self.bins], dtype=np.int64)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_counts(cls, hist: Sequence[int], t: int, edges: Sequence[tuple[int, int]] | None = None, *,
                    uncorrectable: int | None = None, source: str = "", per_lane=None) -> "FecHistogram":
        """Bins from a per-count histogram ``hist[w]`` (codewords with ``w`` symbol errors, ``w = 0..``).

        Counts with ``w > t`` become ``uncorrectable`` unless it is given. ``edges``: the bins as
        inclusive ``(low, high)`` pairs (default: one bin per count ``0..t``, :func:`default_edges`).
        ``per_lane``: optional ``[n_lanes][len(hist)]`` array of per-lane histograms.
        """
        h = np.asarray(hist, dtype=np.int64)
        if h.ndim != 1 or np.any(h < 0):
            raise ValueError("hist must be a 1-D array of non-negative counts")
        edges = default_edges(t) if edges is None else [tuple(map(int, e)) for e in edges]
        pl = None if per_lane is None else np.asarray(per_lane, dtype=np.int64)
        padded = np.zeros(max(t + 1, h.size), np.int64)
        padded[: h.size] = h
        bins = []
        for lo, hi in edges:
            if hi > t:
                raise ValueError(f"bin [{lo}, {hi}] exceeds t = {t}")
            lanes = None if pl is None else tuple(int(pl[:, lo:hi + 1].sum(axis=1)[j]) for j in range(pl.shape[0]))
            bins.append(FecBin(lo, hi, int(padded[lo:hi + 1].sum()), lanes))
        if uncorrectable is None:
            uncorrectable = int(padded[t + 1:].sum())
        corrected = int(padded[1:t + 1].sum())
        return cls(tuple(bins), int(uncorrectable), corrected, None, t, source)

    @classmethod
    def from_link_counters(cls, counters, t: int, edges=None, source: str = "phy802 link") -> "FecHistogram":
        """From :class:`phy802.link.LinkCounters` (``hist[w]``, ``w = 0..n``)."""
        return cls.from_counts(counters.hist, t, edges, source=source)

    def rebin(self, edges: Sequence[tuple[int, int]]) -> "FecHistogram":
        """Merge bins into coarser ``edges``; every new bin must be a union of whole old bins."""
        out = []
        for lo, hi in edges:
            inside = [b for b in self.bins if b.low >= lo and b.high <= hi]
            cut = [b for b in self.bins if not (b.high < lo or b.low > hi) and b not in inside]
            if cut:
                raise ValueError(f"bin [{lo}, {hi}] splits an existing bin [{cut[0].low}, {cut[0].high}]")
            lanes = None
            if inside and all(b.per_lane is not None for b in inside):
                lanes = tuple(int(sum(v)) for v in zip(*(b.per_lane for b in inside)))
            out.append(FecBin(lo, hi, int(sum(b.count for b in inside)), lanes))
        return FecHistogram(tuple(out), self.uncorrectable, self.corrected, self.corr_bits, self.t, self.source)

    # ------------------------------------------------------------------ output
    def to_ynl(self) -> dict:
        """The kernel's YNL structure (``ynl --do fec-get``, format name ``ynl``):
        ``{"stats": {"corrected": [n], "uncorrectable": [n], "hist": [...]}}``.

        Totals are written as one-element lists (netlink's array form, total first).
        """
        stats: dict[str, Any] = {}
        if self.corrected is not None:
            stats["corrected"] = [int(self.corrected)]
        if self.uncorrectable is not None:
            stats["uncorrectable"] = [int(self.uncorrectable)]
        if self.corr_bits is not None:
            stats["corr-bits"] = [int(self.corr_bits)]
        stats["hist"] = [b.as_ynl() for b in self.bins]
        return {"stats": stats}

    def to_ethtool_json(self, ifname: str) -> dict:
        """One device of ``ethtool --json --include-statistics --show-fec`` (format name ``ethtool-json``;
        ethtool prints a list of these): ``{"ifname", "statistics": {"corrected_blocks": {"total": n},
        "uncorrectable_blocks": {"total": n}, "hist": [{"bin_low", "bin_high", "total", "lanes"}]}}``."""
        stats: dict[str, Any] = {}
        for key, v in (("corrected_blocks", self.corrected), ("uncorrectable_blocks", self.uncorrectable),
                       ("corrected_bits", self.corr_bits)):
            if v is not None:
                stats[key] = {"total": int(v)}
        stats["hist"] = [b.as_ethtool_json() for b in self.bins]
        return {"ifname": str(ifname), "statistics": stats}

    def as_dict(self) -> dict:
        """phy802's JSON form: the kernel's YNL structure plus ``t``, ``total`` and ``source``."""
        return {"t": self.t, "total": self.total, "source": self.source, **self.to_ynl()["stats"]}

    def format_text(self, width: int = 40) -> str:
        """A table with one row per bin and a bar (log-scaled so that sparse top bins show)."""
        rows = [(b.label(), b.count) for b in self.bins]
        if self.uncorrectable is not None:
            rows.append((f">{self.t}" if self.t is not None else "uncorr", int(self.uncorrectable)))
        top = max((c for _, c in rows), default=0)
        lines = ["corrected symbols   codewords            fraction"]
        total = max(self.total, 1)
        for lab, c in rows:
            bar = "#" * (0 if c == 0 else max(1, int(round(width * np.log10(1 + c) / np.log10(1 + top)))))
            lines.append(f"  {lab:>8}   {c:>18}   {c / total:>10.3e}  {bar}")
        if self.n_lanes:
            lines.append(f"  (per-lane counts for {self.n_lanes} lanes in --json / --format ynl or ethtool-json)")
        return "\n".join(lines)


# ---------------------------------------------------------------------- edges


def default_edges(t: int) -> list[tuple[int, int]]:
    """One bin per corrected-symbol count ``0..t`` (what 802.3ck-style PHYs commonly report)."""
    return [(w, w) for w in range(int(t) + 1)]


def parse_edges(text: str, t: int) -> list[tuple[int, int]]:
    """``"0,1-3,4-7,8-15"`` -> ``[(0,0), (1,3), (4,7), (8,15)]``; ``"per-count"`` = :func:`default_edges`.

    Bins must be in order, non-overlapping and within ``0..t``.
    """
    text = str(text).strip()
    if text in ("", "per-count", "default"):
        return default_edges(t)
    out = []
    for tok in text.split(","):
        tok = tok.strip()
        try:
            if "-" in tok:
                a, b = tok.split("-", 1)
                lo, hi = int(a), int(b)
            else:
                lo = hi = int(tok)
        except ValueError:
            raise ValueError(f"--bins: {tok!r} is not a bin like '4' or '4-7' (list: '0,1-3,4-7,8-15')") from None
        out.append((lo, hi))
    last = -1
    for lo, hi in out:
        if lo < 0 or hi < lo or lo <= last or hi > t:
            raise ValueError(f"--bins: bin {lo}-{hi} must be ordered, non-overlapping and within 0..{t}")
        last = hi
    return out
