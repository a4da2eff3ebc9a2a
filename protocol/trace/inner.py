"""Error traces of 800G / 1.6T links with the Clause 177 inner code concatenated with KP4.

The errors come from :class:`phy802.link.concat.ConcatLink` itself, batch by batch
(:meth:`~phy802.link.concat.ConcatLink.batches`): the same seeds and the same cuts as
``phy802 link --rate 800G --inner c177 --codewords N --seed S``, so the trace's counters are that
command's counters, bit for bit, and its flips are exactly the message bits that command counts
as post-FEC bit errors.

Stream coordinate (what a reader and the ``torch.distributed`` wrapper replay), the same as the
400G traces (``protocol/source.py``): the PCS payload stream, 256 bits per data 257b block.
An interleave *group* of X = 4 KP4 codewords carries 4 x 514 x 10 = 20560 message bits = 80
257b blocks = 20480 stream bits, i.e. two 400G "pairs" of 40 blocks; message symbol ``i`` of
codeword ``x`` is stream symbol ``4 i + x`` (the round-robin distribution of 119.2.4.5, extended
to X = 4 [S]).  The 802.3dj PCS details are **[?]** (open in the drafts, docs/800g.md); the
documented choices here, stated in the trace's ``inner`` metadata:

* every 257b block is a data block and there are **no alignment markers** (the concatenated
  link model has none; the 800G AM layout is [?]), so pair ``P`` starts at stream bit
  ``10240 P``;
* the **scrambler** is the 1 + x^39 + x^58 of 119.2.4.3 (Clause 172 keeps it [S]): a message bit
  wrong at scrambled position ``n`` reaches the payload as flips at ``n``, ``n + 39``, ``n + 58``
  (the 400G generators' descrambler kernel, :class:`protocol.trace._base._Expander`), and a
  wrong header bit marks its block;
* **marks**: a codeword KP4 flags uncorrectable marks its whole group (its 10-bit symbols are
  spread over all 80 blocks), and every block whose header bit is wrong after descrambling;
* **lanes**: the physical 200G lane (0..3 at 800G, 0..7 at 1.6T; ``n_lanes``) whose inner
  block carried the wrong symbol (``lane_rule``); **flags**: ``FLAG_MISCORRECTED`` on the flips
  of codewords KP4 delivered wrong without a flag.

One process, one writer: the concatenated link has no sharded generator (``workers`` > 1 and a
scheduler are refused by the CLI).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from phy802.clause119 import KP4_K, KP4_N

from ..source import FLAG_MISCORRECTED
from ._base import _Expander, _Scratch, merge_ranges
from .format import TraceWriter, encode_chunk
from .sources import LiveWindow

__all__ = ["GROUP_STREAM_BITS", "GROUP_BLOCKS", "FORMAT_MINOR", "UNIT_STREAM_BITS", "codewords_for_line_bits",
           "generate_inner_trace", "payload_ber_ci95", "StreamBatch", "stream_batches", "ConcatLiveSource", "concat_fec"]

_N, _K = KP4_N, KP4_K
X = 4  # KP4 codewords interleaved at 800G / 1.6T [S]
GROUP_BLOCKS = X * _K * 10 // 257  # 80 data 257b blocks per interleave group
GROUP_MSG_BITS = X * _K * 10  # 20560 = GROUP_BLOCKS * 257
GROUP_STREAM_BITS = GROUP_BLOCKS * 256  # 20480 = two 400G pairs of payload
FORMAT_MINOR = 1  # version 2.1: the "inner" member, rates 800G / 1.6T, n_lanes 4 / 8, no AMs
#: the independent unit of the payload BER interval: 3 interleave groups = 12 KP4 codewords, the
#: span whose lane bits are a whole number of 120-bit inner blocks at 800G (136 per lane) and 1.6T
#: (68 per lane); ConcatLink cuts its batches at these spans, so two spans share no inner block
UNIT_GROUPS = 3
UNIT_STREAM_BITS = UNIT_GROUPS * GROUP_BLOCKS * 256

assert GROUP_BLOCKS * 257 == GROUP_MSG_BITS


def codewords_for_line_bits(line_bits: float, inner: str = "c177", hops: int = 1) -> int:
    """KP4 codewords of a run of ``line_bits`` line bits per hop (the inner code adds 128/120)."""
    per_cw = _N * 10 * (128 / 120 if inner == "c177" else 1.0)
    return max(1, int(math.ceil(float(line_bits) / per_cw)))


class _UnitFlips:
    """Flips per :data:`UNIT_STREAM_BITS` span of the payload stream, accumulated over sorted
    chunks (a span cut by a chunk boundary is closed by the next chunk): spans with flips and the
    sum over spans of their flips squared."""

    def __init__(self) -> None:
        self.bad = 0
        self.sq = 0
        self._open = (-1, 0)  # the last span seen and its flips so far

    def add(self, off: np.ndarray) -> None:
        if off.size == 0:
            return
        u, c = np.unique(np.asarray(off, np.int64) // UNIT_STREAM_BITS, return_counts=True)
        c = c.astype(np.int64)
        if self._open[0] >= 0:
            if u[0] < self._open[0]:
                raise AssertionError("payload flips out of order across chunks")  # internal invariant
            if u[0] == self._open[0]:
                c[0] += self._open[1]
            else:
                self._close(self._open[1])
        self.bad += int(u.size - 1)
        self.sq += int((c[:-1] * c[:-1]).sum())
        self._open = (int(u[-1]), int(c[-1]))

    def _close(self, n: int) -> None:
        self.bad += 1
        self.sq += n * n

    def finish(self) -> tuple[int, int]:
        if self._open[0] >= 0:
            self._close(self._open[1])
            self._open = (-1, 0)
        return self.bad, self.sq


def payload_ber_ci95(flips: int, stream_bits: int, bad_units: int, flips_sq: int) -> list[float]:
    """95% interval of the payload BER after the descrambler over :data:`UNIT_STREAM_BITS` spans,
    not bits (:func:`phy802.link.concat.clustered_rate`).  The flips are not independent bits: a
    failed KP4 codeword delivers its wrong message bits together (~17 with the hard inner
    decoder) and the descrambler triples each, so a Clopper-Pearson interval on the flips is ~7x
    too narrow.  Codewords are not independent either: the 4 codewords of a group share inner
    blocks (interleaved lane rule) and a block straddling two groups of a span joins their
    errors; two spans share no inner block, independent but for the descrambler's copies of a
    span's last 58 bits landing in the next span (rare, at most 2 flips per wrong bit)."""
    from phy802.link.concat import clustered_rate

    r = clustered_rate(flips, stream_bits, stream_bits // UNIT_STREAM_BITS, bad_units, flips_sq, UNIT_STREAM_BITS)
    return [float(r.lo), float(r.hi)]


def _primaries(link, g0: int, res) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scrambled-stream positions (257 bits per data block, absolute), lanes and flags of the
    wrong message bits of one batch, sorted."""
    k, v = np.asarray(res.keys, np.int64), np.asarray(res.values, np.int64)
    if k.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.uint8)
    bits = (v[:, None] >> np.arange(10, dtype=np.int64)) & 1
    r, b = np.nonzero(bits)
    key = k[r]
    cw, sym = key // _N, key % _N
    g, x = g0 + cw // X, cw % X
    s = g * GROUP_MSG_BITS + (X * sym + x) * 10 + b
    lane = link.lane_of_key(key)
    flag = np.where(np.isin(cw, res.miscorrected), FLAG_MISCORRECTED, 0).astype(np.uint8)
    o = np.argsort(s, kind="stable")
    return s[o], lane[o], flag[o]


@dataclass(frozen=True)
class StreamBatch:
    """One batch of :meth:`ConcatLink.batches` in the payload-stream coordinate: stream window
    ``[start, end)``, absolute sorted payload flips with their lanes and flags, error-block
    ``marks`` (absolute, merged), the batch's link counters and what the trace metadata counts."""

    start: int
    end: int
    offsets: np.ndarray
    lanes: np.ndarray
    flags: np.ndarray
    marks: np.ndarray
    counters: object
    header_errors: int
    flagged_groups: int
    decoder_bit_errors: int
    miscorrected: int


def stream_batches(link, n_codewords: int, seed, *, batch_groups: int | None = None) -> Iterator[StreamBatch]:
    """The payload-stream errors of ``link.batches(n_codewords, seed, batch_groups=...)``, batch by
    batch (module docstring: scrambled positions, descrambler copies carried from batch to batch,
    marks).  The one path from the concatenated link to the stream: :func:`generate_inner_trace`
    writes these batches, :class:`ConcatLiveSource` serves them."""
    exp = _Expander(_Scratch())
    for g0, G, ctr, res in link.batches(n_codewords, seed, batch_groups=batch_groups):
        s, lane, flag = _primaries(link, g0, res)
        off, ln, fl, hdr = exp.run(s, lane, flag, np.int64((g0 + G) * GROUP_MSG_BITS))
        fg = np.unique(g0 + np.asarray(res.flagged, np.int64) // X)
        ranges = [np.stack([fg * GROUP_STREAM_BITS, (fg + 1) * GROUP_STREAM_BITS], 1)]
        if hdr.size:
            ranges.append(np.stack([hdr * 256, (hdr + 1) * 256], 1))
        marks = merge_ranges(np.concatenate(ranges))
        yield StreamBatch(g0 * GROUP_STREAM_BITS, (g0 + G) * GROUP_STREAM_BITS, off, ln, fl, marks, ctr,
                          int(hdr.size), int(fg.size), int(s.size), int(np.asarray(res.miscorrected).size))


def _inner_meta(config, channel, seed: int, path_kind: str) -> dict:
    """The metadata an 800G/1.6T trace is written with, before generation: what was asked."""
    L = config.n_lanes
    mode = {"ieee": ("correct", True, False), "bypass": ("none", False, True)}[config.fec]
    return {
        "rate": config.rate,
        "n_lanes": L,
        "line_gbps": {"800G": 4, "1.6T": 8}[config.rate] * 212.5 * (128 / 120 if config.inner == "c177" else 1.0),
        "fec": config.fec,
        "fec_mode": {"decoder": mode[0], "indicate": mode[1], "tolerant": mode[2], "protected": "none"},
        "code": "kp4",
        "code_params": "RS(544,514) t=15",
        "format_minor": FORMAT_MINOR,
        "channel": {"model": "pam4_awgn", "snr_db": float(channel.snr_db), "ber": float(channel.ber)},
        "seed": int(seed),
        "generator": f"concat-{path_kind}",
        "coordinate": "PCS payload stream bits (256 per data 257b block), see protocol/source.py; "
                      "80 blocks per group of 4 KP4 codewords, no AMs",
        "includes": "payload flips after the inner decoder, KP4 (per mode) and the descrambler (x^39, x^58 copies); "
                    "marks = error blocks (groups of flagged codewords, 257b header hits); excludes parity bits",
        "inner": {"code": config.inner, "decoder": config.inner_decoder if config.inner == "c177" else None,
                  "n_lrp": config.n_lrp_used, "interleave": X, "lane_rule": config.lane_rule,
                  "lanes": f"{L} physical 200G lanes (lane ids in the trace)", "hops": config.hops,
                  "outer": config.outer, "erasure": bool(config.erasure), "receive_mode": config.fec,
                  "path": path_kind, "am": "none (the 802.3dj AM layout is [?])",
                  "scrambler": "1 + x^39 + x^58 (Clause 119/172)"},
    }


class _InnerTally:
    """What the batches of an 800G/1.6T trace add up to, beside the link's own counters."""

    def __init__(self) -> None:
        from phy802.link.concat import ConcatCounters

        self.units = _UnitFlips()
        self.total = ConcatCounters()
        self.header_errors = self.marked_pairs = self.marked_bits = self.flips = 0
        self.dec_bits = self.miscorrected = 0

    def add(self, b) -> None:
        self.total.merge(b.counters)
        self.header_errors += b.header_errors
        self.marked_pairs += 2 * b.flagged_groups
        self.marked_bits += int((b.marks[:, 1] - b.marks[:, 0]).sum()) if b.marks.size else 0
        self.flips += int(b.offsets.size)
        self.units.add(b.offsets)
        self.dec_bits += b.decoder_bit_errors
        self.miscorrected += b.miscorrected


def _inner_summary(config, t: _InnerTally, wall: float, inner: dict, theory: dict | None) -> dict:
    """The metadata written after generation: the measured counters with their 95% intervals."""
    from phy802.stats import clopper_pearson

    c = t.total
    c.seconds = wall
    groups = c.codewords // X
    stream_bits = groups * GROUP_STREAM_BITS
    if groups % UNIT_GROUPS:  # ConcatLink runs whole batches of 3 groups
        raise AssertionError(f"{groups} interleave groups is not a whole number of {UNIT_GROUPS}-group spans")
    bad_units, flips_sq = t.units.finish()

    def ci(k, n):
        lo, hi = clopper_pearson(int(k), int(n))
        return [float(lo), float(hi)]

    hist = np.asarray(c.hist, np.int64)
    with_err = int(hist[1:].sum())
    bad = c.codeword_errors
    meta_extra = {
        "pairs": 2 * groups,
        "line_bits": c.line_bits,
        "pre_fec": {"bit_errors": c.line_bit_errors, "bits": c.line_bits,
                    "ber": c.line_bit_errors / c.line_bits if c.line_bits else 0.0,
                    "ber_ci95": ci(c.line_bit_errors, c.line_bits),
                    "definition": "PAM4 slicer bit errors on the line (all hops), before the inner decoder"},
        "post_fec": {"bit_errors": t.flips, "bits": stream_bits, "ber": t.flips / stream_bits if stream_bits else 0.0,
                     # over 12-codeword spans: flips come in failed codewords (payload_ber_ci95)
                     "ber_ci95": payload_ber_ci95(t.flips, stream_bits, bad_units, flips_sq),
                     "ci_unit": f"{4 * UNIT_GROUPS}-codeword span ({UNIT_STREAM_BITS} payload-stream bits)",
                     "marked_bits": t.marked_bits,
                     "definition": "payload BER after the descrambler (flips / payload-stream bits)",
                     "decoder_output": {"bit_errors": t.dec_bits, "bits": c.message_bits,
                                        "ber": t.dec_bits / c.message_bits if c.message_bits else 0.0,
                                        # over codewords: a KP4 failure delivers its wrong bits together
                                        "ber_ci95": [c.rates()["post_fec_ber"].lo, c.rates()["post_fec_ber"].hi],
                                        "ci_unit": "KP4 codeword",
                                        "definition": "post-FEC BER at the KP4 decoder output (message bits "
                                                      "before the descrambler) = link's post_fec_bit_errors"}},
        "codewords": {"total": c.codewords, "with_errors": with_err,
                      "corrected": max(0, with_err - c.uncorrected_codewords - t.miscorrected)
                      if config.fec == "ieee" else 0,
                      "uncorrectable": c.uncorrected_codewords, "miscorrected": t.miscorrected, "undetected": 0,
                      "delivered_wrong": bad, "marked_pairs": t.marked_pairs,
                      "symbol_error_hist": np.concatenate([hist[:63], [hist[63:].sum()]]).tolist()},
        "am_bit_errors": 0,
        "header_errors": t.header_errors,
        "wall_s": wall,
    }
    meta_extra["inner"] = dict(inner, counters=c.as_dict(),
                               rates={k: v.as_dict() for k, v in c.rates().items()},
                               **({"theory": theory} if theory is not None else {}))
    if t.dec_bits != c.post_fec_bit_errors:  # the flips are the link's post-FEC bit errors, by construction
        raise AssertionError(f"trace holds {t.dec_bits} wrong message bits, the link counted {c.post_fec_bit_errors}")
    return meta_extra


def generate_inner_trace(path: str | Path, config, channel, *, n_codewords: int, seed: int, path_kind: str = "fast",
                         batch_groups: int | None = None, progress: bool = False, theory: dict | None = None) -> dict:
    """Write the payload error trace of ``n_codewords`` KP4 codewords of an 800G/1.6T link
    (:class:`phy802.link.concat.ConcatConfig` ``config``, one :class:`phy802.channel.Pam4Awgn`
    ``channel``) to ``path`` (format 2.1, ``TRACE_FORMAT.md``); returns the metadata.

    ``path_kind``: the link's ``"fast"`` (data-free) or ``"exact"`` path; ``seed``: as
    ``ConcatLink.run``.  ``theory``: optional closed-form values stored beside the counters."""
    from phy802.link.concat import ConcatLink

    if int(config.interleave) != X:
        raise ValueError(f"800G/1.6T traces need interleave = {X} (the group of 80 257b blocks), "
                         f"got {config.interleave!r}")
    if isinstance(n_codewords, bool) or not isinstance(n_codewords, (int, np.integer)) or n_codewords <= 0:
        raise ValueError(f"n_codewords must be a positive int, got {n_codewords!r}")
    link = ConcatLink(config, channel, path=path_kind)
    meta = _inner_meta(config, channel, seed, path_kind)
    tally = _InnerTally()
    encode_chunk(0, 1, [], [], [])  # load the compiled kernels outside the timed run
    t0 = time.perf_counter()
    from phy802.runtime.progress import progress as bar

    with TraceWriter(path, meta) as w, bar(total=int(n_codewords), desc="trace generate", unit="codeword", enable=progress) as pb:
        for b in stream_batches(link, int(n_codewords), seed, batch_groups=batch_groups):
            w.write_chunk(b.start, b.end, b.offsets, b.lanes, b.flags, b.marks)
            tally.add(b)
            pb.update(b.counters.codewords)
        wall = time.perf_counter() - t0
        w.meta.update(_inner_summary(config, tally, wall, meta["inner"], theory))
    return dict(w.meta)


def concat_fec(fec: str) -> str:
    """The concatenated link's KP4 receive mode (``ieee`` or ``bypass``) for delivery mode ``fec``:
    ``ieee`` and ``llr`` decode, correct and mark alike (llr differs in who resends), ``bypass``
    and ``unequal`` do not decode; ``correct_no_indication`` and ``detect_only`` are not modelled
    at 800G/1.6T (ValueError)."""
    from ..modes import get_mode

    m = get_mode(fec)
    if m.decoder == "none":
        return "bypass"
    if m.decoder == "correct" and m.indicate:
        return "ieee"
    raise ValueError(f"fec {m.name!r}: the 800G/1.6T link models KP4 correcting and marking (ieee, llr) or not "
                     f"decoding (bypass, unequal), not {m.name}")


_ENDLESS = 1 << 62  # codewords asked of ConcatLink.batches by a live source: every batch is a whole one


class ConcatLiveSource(LiveWindow):
    """A live :class:`~protocol.source.ErrorSource` of an 800G / 1.6T link: the payload-stream
    errors of :class:`phy802.link.concat.ConcatLink`, batch by batch, through the same
    :func:`stream_batches` that ``phy802 trace generate --rate R --inner I`` writes.

    ``ConcatLiveSource(R, F, B, seed=S, inner=I)`` yields exactly the flips, lanes, flags and marks
    of ``phy802 trace generate --rate R --inner I --fec F --ber B --seed S`` (other options at their
    defaults; ``snr_db`` for ``--snr-db``) over every *whole* batch of that trace: ``batch_groups``
    interleave groups (default: the link's, 30000 on the fast path = 614.4 Mbit of stream, 300 on
    the exact path).  The trace's last batch, cut to its length, is drawn with another layout and
    differs; a trace of a whole number of batches equals this source over all of it.  Offsets
    depend only on the cursor (:class:`~protocol.trace.sources.LiveWindow`).

    Parameters
    ----------
    rate : ``"800G"`` or ``"1.6T"``.
    fec : delivery mode; :func:`concat_fec` maps it to the link's ``ieee`` / ``bypass``.
    ber, snr_db : the PAM4 AWGN line noise, one of the two: line BER in (0, 0.5) (before the inner
        decoder, as ``trace generate --ber`` at 800G) or SNR in dB.
    seed : int or ``numpy.random.SeedSequence`` (copied: the caller's is not advanced), as
        ``ConcatLink.run``.
    inner, inner_decoder, n_lrp, lane_rule, hops, outer, erasure : as
        :class:`phy802.link.concat.ConcatConfig` (``trace generate``'s defaults).
    path : the link's ``"fast"`` (default, as ``trace generate``) or ``"exact"`` path.
    batch_groups : as :meth:`ConcatLink.batches` (``None``: the link's default).
    """

    code = "kp4"

    def __init__(self, rate: str = "800G", fec: str = "ieee", ber: float | None = None, *, seed,
                 snr_db: float | None = None, inner: str = "c177", inner_decoder: str = "chase", n_lrp: int = 2,
                 lane_rule: str = "interleaved", hops: int = 1, outer: str = "segmented", erasure: bool = False,
                 path: str = "fast", batch_groups: int | None = None) -> None:
        from phy802.channel import Pam4Awgn
        from phy802.link.concat import ConcatConfig, ConcatLink

        if (ber is None) == (snr_db is None):
            raise ValueError(f"give the line noise as ber or snr_db, one of the two "
                             f"(got ber={ber!r}, snr_db={snr_db!r})")
        self.config = ConcatConfig(rate=rate, inner=inner, inner_decoder=inner_decoder, n_lrp=n_lrp,
                                   fec=concat_fec(fec), lane_rule=lane_rule, hops=hops, outer=outer, erasure=erasure)
        self.channel = Pam4Awgn.from_ber(float(ber)) if ber is not None else Pam4Awgn(snr_db=float(snr_db))
        if isinstance(seed, np.random.SeedSequence):  # a copy: ConcatLink spawns one child per batch from it
            seed = np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size,
                                          n_children_spawned=seed.n_children_spawned)
        self.link = ConcatLink(self.config, self.channel, path=path)
        self.rate = self.config.rate
        self._batches = stream_batches(self.link, _ENDLESS, seed, batch_groups=batch_groups)
        self._start_window()

    def _next_chunk(self, need_bits: int) -> tuple:
        b = next(self._batches)
        if b.start != self._end:  # internal invariant: batches tile the stream
            raise AssertionError(f"batch starts at stream bit {b.start}, the window ends at {self._end}")
        return b.end, b.offsets, b.lanes, b.flags, b.marks
