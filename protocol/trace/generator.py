"""Trace generators: a fast event sampler and a bit-exact reference link.

Both produce the same thing: for a run of codeword pairs, the payload-stream bits delivered
flipped (with their PCS lane and flags) and the ranges the decoder marked, plus counters.

:class:`FastGenerator` samples only the line bit errors (geometric skipping with exact
exponential gaps, independent errors at the pre-FEC BER), groups them per RS(544,514) codeword
of each pair, and decides each codeword by the mode: a bounded-distance decoder always corrects
<= t = 15 symbol errors, so only codewords with more are decoded, by linearity as the error
pattern alone (``phy802.fec.decode`` on the zero codeword + errors) to tell failure from the rare
miscorrection.  Surviving message-bit errors are then pushed through the 1 + x^39 + x^58
descrambler's error multiplication (n, n+39, n+58, XOR) and mapped to payload-stream offsets.

:class:`BitExactGenerator` runs real random payload bits through 256b/257b (all-data blocks),
the scrambler, AM insertion, the 119.2.4.5 distribution, RS encoding, the 119.2.4.7 lane
interleave, a dense Bernoulli bit-error channel per line bit, and all the way back; the errors are
whatever differs.  It is slow and serves as the oracle of the fast one.

What a trace includes (both generators)
---------------------------------------
* payload flips: bits of the 256-bit payload of data 257b blocks that are wrong after the
  descrambler (after FEC decoding where the mode decodes);
* marks: payload ranges of blocks the MAC receives as error blocks: every data block of a pair
  whose codeword the decoder marked (indication modes) and every block whose 257b header bit was
  wrong after descrambling (its 66b control structure is lost); flips inside marks are kept;
* not included: errors on RS parity bits (stripped) and on alignment-marker bits (AMs are
  removed before descrambling; lane lock is assumed to survive), counted separately.
All data blocks are treated as all-data 257b blocks (x<0> = 1): long tensor frames are almost
entirely data; a control block's header/nibble errors are covered by the header mark.

Codes (``GeneratorConfig.code``, issue 10): ``kp4`` (default), ``rs272`` and ``none``.
``rs272`` (RS(272,257+1), t = 7): a trace *pair* is then two rs272 codeword pairs -- the same 40
257b blocks and 10880 line bits, so the stream coordinate, the AM spacing and every count per
pair are unchanged -- with pair-space positions ``P * 10880 + 5440 s + 20 t + 10 c + b`` (rs272
pair ``2 P + s``, codeword ``c``, symbol ``t`` of 272, bit ``b``): ten 257b blocks per codeword
dealt 10-bit round robin, the pad symbol last (t = 257, value 0; ``phy802.link`` and
``phy802.pcs`` make it configurable), and the 119.2.4.7 interleave generalised to n = 272.  The
fast generator draws the line errors in the KP4 lane layout (lane, row, bit) and maps them to the
rs272 symbols on the same lane and row, so per-lane bursts stay on their lane; it groups and
decodes them in numpy (not the fused kernels).  ``none``: no FEC sublayer, the KP4 layout with
nothing decoded whatever the mode (``fec`` still sets what delivery tolerates).  ``kr4`` has no
Clause 119 framing here (40 blocks would take 10560 line bits) and is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from phy802._rng import as_generator
from phy802.clause119 import CODE_SIZES, KP4_T as T_KP4

from . import _gen_kernels as K
from . import _kernels as TK
from ..framing import (
    BLOCK_BITS,
    BLOCK_PAYLOAD_BITS,
    BLOCKS_PER_PAIR,
    PAIR_LINE_BITS,
    PAIR_MESSAGE_BITS,
    RS_K,
    RS_N,
    RateGeometry,
    data_blocks_before,
    get_rate,
    pair_of_data_block,
)
from ..modes import FecMode, get_mode
from ..source import FLAG_MISCORRECTED, FLAG_UNDETECTED

__all__ = [
    "GeneratorConfig",
    "GenChunk",
    "TraceStats",
    "FastGenerator",
    "BitExactGenerator",
    "lane_of_symbol",
    "merge_ranges",
    "chunk_marks",
]

HIST_BINS = 64


TRACE_CODES = ("kp4", "rs272", "none")

#: The independent unit of both post-FEC intervals of a 400G/200G trace (``post_fec.ber_ci95``,
#: ``post_fec.decoder_output.ber_ci95``): the codeword pair -- 40 257b blocks, 10240 payload bits
#: (fewer in an AM pair).  Not the bit: a failed or miscorrected KP4 codeword delivers its ~18
#: wrong message bits together and the descrambler makes each 3 flips.  Not the codeword: A and B
#: are dealt 10 bits at a time into the same blocks (119.2.4.5), so a codeword's flips cover the
#: whole pair, and on the lane_dfe channel one lane burst hits A and B (rows alternate them on a
#: lane, 119.2.4.7); with rs272 a trace pair is two rs272 pairs (one rule for all codes, the
#: bypass mode too: there a line error is a cluster of up to 3 flips inside its pair).  Pairs are
#: independent on the BSC channel (each pair's line bits are its own), except that (a) the
#: descrambler's copies n + 39, n + 58 of a wrong bit in a pair's last 58 scrambled bits land in
#: the next pair (counted there: units are taken where the flips land, so a trace's own flips
#: give the counts back), ~0.6% of the bits, at most 2 flips per such bit, and (b) on the lane_dfe
#: channel a burst may run across a pair boundary (a lane carries 680 bits of a pair at 400G,
#: 1360 at 200G; bursts average 1 / (1 - burst_pb) bits).
CI_UNIT = "codeword pair (40 257b blocks: 2 KP4 codewords / 4 rs272 codewords)"
N_272, K_272, T_272 = CODE_SIZES["rs272"].n, CODE_SIZES["rs272"].data_symbols, CODE_SIZES["rs272"].t  # pad excluded


def lane_of_symbol(rate: str | RateGeometry, n: int = RS_N) -> np.ndarray:
    """int8[2, n]: PCS lane of symbol ``t`` (time order) of codeword A (row 0) / B (row 1).

    119.2.4.7: for t = J k + j (J = lanes / 2), k even: lane 2j <- A_t, lane 2j+1 <- B_t;
    k odd: swapped.  Computed here from the formula; the tests cross-check it against
    ``phy802.pcs.lane_of_symbol`` (the PCS helper's independent implementation).
    """
    g = get_rate(rate)
    J = g.n_lanes // 2
    t = np.arange(n)
    out = np.empty((2, n), dtype=np.int8)
    for c in (0, 1):
        out[c] = 2 * (t % J) + (c ^ ((t // J) & 1))
    return out


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """What a generator simulates.

    Parameters
    ----------
    rate : "400G" or "200G".
    fec : mode name (:data:`protocol.modes.MODES`).  ``unequal`` generates like ``bypass``; its
        sign/exponent protection is applied at delivery, where the element layout is known.
    ber : pre-FEC line bit error ratio.
    burst_pb : None (default): independent errors (a memoryless BSC per line bit).  A number:
        bursts along each PCS lane's serial bit stream, a two-state chain per bit (G->B with
        ``pe``, B->B with ``burst_pb``, error iff B; the 1-tap DFE error-propagation model of the
        notes section 7 applied at the PCS-lane bit level [I]: PAM4 symbols and the PMA bit-mux
        are not modelled), with ``pe`` chosen so that the stationary BER is ``ber``; burst lengths
        are geometric with mean 1 / (1 - burst_pb); each lane starts in G at ``start_pair``.
    lane_weights : None (default, all PCS lanes at ``ber``), a sequence of one relative weight per
        PCS lane (normalised to mean 1, so ``ber`` stays the average), or ``"pam4_gray"``: 2/3 on
        even and 4/3 on odd lanes, the MSB/LSB asymmetry of Gray PAM4 one-level errors under the
        default 2:1 bit-mux (cross-checked against ``phy802.link`` in the statistical tests).
    code : ``"kp4"`` (default), ``"rs272"`` or ``"none"`` (module docstring).
    """

    rate: str = "400G"
    fec: str = "bypass"
    ber: float = 1e-5
    burst_pb: float | None = None
    lane_weights: tuple[float, ...] | str | None = None
    code: str = "kp4"

    def __post_init__(self) -> None:
        g = get_rate(self.rate)
        if self.code == "kr4":
            raise ValueError("GeneratorConfig.code: 'kr4' has no Clause 119 framing in the trace generators "
                             "(use phy802.link at codeword level); choose kp4, rs272 or none")
        if self.code not in TRACE_CODES:
            raise ValueError(f"GeneratorConfig.code must be one of {', '.join(TRACE_CODES)}, got {self.code!r}")
        if self.lane_weights is not None:
            w = self.lane_weights
            if isinstance(w, str):
                if w != "pam4_gray":
                    raise ValueError(f"GeneratorConfig.lane_weights: unknown preset {w!r} (use 'pam4_gray' or numbers)")
                # Gray PAM4, one-level errors: 4 of the 6 neighbour transitions flip the LSB, 2 the
                # MSB; with the PMA's default 2:1 bit-mux, even PCS lanes ride on the MSBs [I]
                w = tuple(2.0 / 3.0 if L % 2 == 0 else 4.0 / 3.0 for L in range(g.n_lanes))
            try:
                w = tuple(float(x) for x in w)
            except (TypeError, ValueError):
                raise ValueError(f"GeneratorConfig.lane_weights must be numbers, got {self.lane_weights!r}") from None
            if len(w) != g.n_lanes or min(w) < 0 or sum(w) <= 0:
                raise ValueError(f"GeneratorConfig.lane_weights needs {g.n_lanes} non-negative weights, got {w!r}")
            mean = sum(w) / len(w)
            w = tuple(x / mean for x in w)
            if max(w) * float(self.ber) > 0.5:
                raise ValueError(f"GeneratorConfig: lane BER {max(w) * float(self.ber):.3g} above 0.5")
            object.__setattr__(self, "lane_weights", w)
        get_mode(self.fec)
        b = float(self.ber)
        if not (0.0 <= b <= 0.5) or math.isnan(b):
            raise ValueError(f"GeneratorConfig.ber must be in [0, 0.5], got {self.ber!r}")
        if 0.0 < b < 1e-16:
            raise ValueError(f"GeneratorConfig.ber={self.ber!r} is below 1e-16; use 0 for an error-free link")
        if self.burst_pb is not None and not (0.0 <= float(self.burst_pb) < 1.0):
            raise ValueError(f"GeneratorConfig.burst_pb must be in [0, 1) or None, got {self.burst_pb!r}")

    @property
    def channel(self) -> str:
        """``"bsc"`` (independent bit errors) or ``"lane_dfe"`` (bursts along each PCS lane)."""
        return "bsc" if self.burst_pb is None else "lane_dfe"

    @property
    def per_lane(self) -> bool:
        """True when errors are drawn lane by lane (bursts or unequal lane weights)."""
        return self.burst_pb is not None or self.lane_weights is not None

    def lane_ber(self, lane: int) -> float:
        """Bit error ratio of PCS lane ``lane`` (``ber`` times its normalised weight)."""
        w = 1.0 if self.lane_weights is None else self.lane_weights[lane]
        return float(self.ber) * w

    def lane_pe(self, lane: int) -> float:
        """G->B probability giving the lane's stationary BER: pe = b (1 - pb) / (1 - b)."""
        b = self.lane_ber(lane)
        pb = float(self.burst_pb or 0.0)
        return b * (1.0 - pb) / (1.0 - b)

    @property
    def burst_pe(self) -> float:
        """G->B probability giving the stationary bit error ratio ``ber``: pe = ber (1 - pb) / (1 - ber)."""
        pb = float(self.burst_pb or 0.0)
        return float(self.ber) * (1.0 - pb) / (1.0 - float(self.ber))

    @property
    def geometry(self) -> RateGeometry:
        return get_rate(self.rate)

    @property
    def mode(self) -> FecMode:
        return get_mode(self.fec)

    @property
    def phy_mode(self) -> FecMode:
        """What the PHY does: :attr:`mode`, or ``bypass`` without a code (``code="none"``)."""
        return get_mode("bypass") if self.code == "none" else self.mode


@dataclass
class TraceStats:
    """Counters of a generator run (raw counts, so that confidence intervals can be formed)."""

    n_lanes: int = 16
    pairs: int = 0
    line_bits: int = 0
    stream_bits: int = 0
    line_bit_errors: int = 0
    am_bit_errors: int = 0
    codewords: int = 0
    codewords_with_errors: int = 0
    corrected_codewords: int = 0
    uncorrectable_codewords: int = 0
    miscorrected_codewords: int = 0
    undetected_codewords: int = 0
    marked_pairs: int = 0
    header_errors: int = 0
    payload_flips: int = 0
    decoder_bit_errors: int = 0  # message bits wrong at the decoder output, before the descrambler
    decoder_bits: int = 0  # scrambled 257b-block bits (message bits less AMs) they are counted over
    marked_bits: int = 0
    # the clustered post-FEC intervals (``unit_ber_ci95``): per codeword pair, the independent
    # unit (:data:`CI_UNIT`), pairs with payload flips / wrong decoder-output bits and the sum over
    # pairs of their count squared; a pair lies in one chunk, so chunk and shard sums are exact
    payload_bad_pairs: int = 0
    payload_flips_sq: int = 0
    decoder_bad_pairs: int = 0
    decoder_bit_errors_sq: int = 0
    # the same for the line bit errors (pre-FEC), counted and taken over pairs on the lane_dfe
    # channel only (there a burst is several dependent bits; independent bits otherwise: 0)
    line_bad_pairs: int = 0
    line_bit_errors_sq: int = 0
    lane_errors: np.ndarray = field(default_factory=lambda: np.zeros(16, np.int64))
    symbol_hist: np.ndarray = field(default_factory=lambda: np.zeros(HIST_BINS, np.int64))

    def __post_init__(self) -> None:
        if self.lane_errors.size != self.n_lanes:
            self.lane_errors = np.zeros(self.n_lanes, np.int64)

    @property
    def pre_fec_ber(self) -> float:
        return self.line_bit_errors / self.line_bits if self.line_bits else float("nan")

    @property
    def post_fec_ber(self) -> float:
        return self.payload_flips / self.stream_bits if self.stream_bits else float("nan")

    def add(self, other: "TraceStats") -> "TraceStats":
        """Add another run's counters (e.g. a shard of the same trace) in place; returns self."""
        for k in self.__dataclass_fields__:
            if k == "n_lanes":
                continue
            a = getattr(self, k)
            if isinstance(a, np.ndarray):
                a += getattr(other, k)
            else:
                setattr(self, k, a + getattr(other, k))
        return self

    @property
    def decoder_ber(self) -> float:
        """Post-FEC BER at the decoder output (before the descrambler's x3; README "Two post-FEC BERs")."""
        return self.decoder_bit_errors / self.decoder_bits if self.decoder_bits else float("nan")

    def add_units(self, flips_per_pair: np.ndarray | None, dec_per_pair: np.ndarray | None,
                  line_per_pair: np.ndarray | None = None) -> None:
        """Count the pairs of a chunk with payload flips / decoder-output bit errors / line bit
        errors (int64 counts per pair; None: none) and the sums of their squares."""
        for c, bad, sq in ((flips_per_pair, "payload_bad_pairs", "payload_flips_sq"),
                           (dec_per_pair, "decoder_bad_pairs", "decoder_bit_errors_sq"),
                           (line_per_pair, "line_bad_pairs", "line_bit_errors_sq")):
            if c is None or not c.size:
                continue
            c = np.asarray(c, np.int64)
            setattr(self, bad, getattr(self, bad) + int(np.count_nonzero(c)))
            setattr(self, sq, getattr(self, sq) + int(np.dot(c, c)))  # no temporary array

    def unit_ber_ci95(self, confidence: float = 0.95) -> tuple[list[float], list[float]]:
        """Intervals of (payload BER, decoder-output BER) over codeword pairs, not bits
        (:func:`phy802.link.concat.clustered_rate`; :data:`CI_UNIT` says why the pair)."""
        from phy802.link.concat import clustered_rate

        out = []
        for b, bits, bad, sq in ((self.payload_flips, self.stream_bits, self.payload_bad_pairs, self.payload_flips_sq),
                                 (self.decoder_bit_errors, self.decoder_bits, self.decoder_bad_pairs,
                                  self.decoder_bit_errors_sq)):
            # the mean bits of a pair (AM pairs carry fewer data blocks), so that the point
            # estimate is exactly bit_errors / bits
            r = clustered_rate(b, bits, self.pairs, bad, sq, bits / self.pairs if self.pairs else 1, confidence)
            out.append([float(r.lo), float(r.hi)])
        return out[0], out[1]

    def line_ber_ci95_over_pairs(self, confidence: float = 0.95) -> list[float]:
        """Interval of the pre-FEC BER over codeword pairs (10880 line bits each), for bursty
        channels (``pre_fec.ber_ci95`` with ``burst_pb``)."""
        from phy802.link.concat import clustered_rate

        r = clustered_rate(self.line_bit_errors, self.line_bits, self.pairs, self.line_bad_pairs,
                           self.line_bit_errors_sq, PAIR_LINE_BITS, confidence)
        return [float(r.lo), float(r.hi)]

    def histogram(self) -> np.ndarray:
        """Per-codeword symbol-error-count histogram including the error-free codewords."""
        h = self.symbol_hist.copy()
        h[0] = self.codewords - int(h[1:].sum())
        return h

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["lane_errors"] = self.lane_errors.tolist()
        d["symbol_hist"] = self.histogram().tolist()
        d["pre_fec_ber"] = self.pre_fec_ber
        d["post_fec_ber"] = self.post_fec_ber
        d["decoder_ber"] = self.decoder_ber
        return d


@dataclass(frozen=True)
class GenChunk:
    """Errors of pairs ``[pair_start, pair_end)``, in absolute payload-stream offsets.

    ``offsets`` lie in ``[stream_start, stream_end)``, sorted; ``marks`` are disjoint sorted
    ``[start, end)`` ranges inside that window.
    """

    pair_start: int
    pair_end: int
    stream_start: int
    stream_end: int
    offsets: np.ndarray
    lanes: np.ndarray
    flags: np.ndarray
    marks: np.ndarray


@dataclass(frozen=True)
class EncodedChunk:
    """A :class:`GenChunk` as version-2 trace bytes: ``blob`` is the chunk's record string
    (``protocol/trace/TRACE_FORMAT.md``) with ``n_flips`` flips (the first ``flips_nbytes`` bytes) and
    ``n_marks`` marks.  ``hdr`` (257b blocks whose header bit flipped) and ``mark_pairs``
    (decoder-marked pairs) are what the marks are made of, kept for joining a shard's carry."""

    pair_start: int
    pair_end: int
    stream_start: int
    stream_end: int
    n_flips: int
    n_marks: int
    blob: np.ndarray
    flips_nbytes: int
    hdr: np.ndarray
    mark_pairs: np.ndarray
    first_pair_flips: int = 0  # flips in the chunk's first pair (a shard's carry join fixes its unit count)


def _lane_generators(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """Independent per-lane child generators (so lane streams do not depend on chunking)."""
    return list(rng.spawn(n))


def merge_ranges(r: np.ndarray) -> np.ndarray:
    """Sort ``[start, end)`` ranges (int64[m, 2]) and merge overlapping or touching ones."""
    r = np.asarray(r, dtype=np.int64).reshape(-1, 2)
    if r.shape[0] <= 1:
        return r.copy()
    r = r[np.argsort(r[:, 0], kind="stable")]
    reach = np.maximum.accumulate(r[:, 1])
    new = np.ones(r.shape[0], bool)
    new[1:] = r[1:, 0] > reach[:-1]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(r[:, 1], idx)
    return np.stack([r[idx, 0], ends], axis=1)


def _half_pair_ranges(ids: np.ndarray, geom: RateGeometry) -> np.ndarray:
    """Payload ranges of rs272 pairs ``ids`` (pair ``2 P + s`` = blocks ``20 s .. 20 s + 19`` of
    trace pair ``P``; an AM group takes the first ``am_blocks`` of ``s = 0``)."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    if not ids.size:
        return np.empty((0, 2), np.int64)
    P, sub = np.divmod(ids, 2)
    first = BLOCKS_PER_PAIR // 2 - np.where(P % geom.am_period_pairs == 0, geom.am_blocks, 0)
    lo = data_blocks_before(P, geom) + sub * first
    hi = lo + np.where(sub == 0, first, BLOCKS_PER_PAIR // 2)
    return np.stack([lo * BLOCK_PAYLOAD_BITS, hi * BLOCK_PAYLOAD_BITS], axis=1)


def chunk_marks(mark_pairs: np.ndarray, hdr: np.ndarray, geom: RateGeometry, split: int = 1) -> np.ndarray:
    """Marks of a chunk: the data blocks of the marked pairs and the blocks whose header bit flipped.

    ``split = 2`` (rs272): ``mark_pairs`` are rs272 pairs ``2 P + s`` (:func:`_half_pair_ranges`)."""
    ranges = [(_pair_ranges if split == 1 else _half_pair_ranges)(mark_pairs, geom)]
    if hdr.size:
        ranges.append(np.stack([hdr * BLOCK_PAYLOAD_BITS, (hdr + 1) * BLOCK_PAYLOAD_BITS], axis=1))
    return merge_ranges(np.concatenate(ranges)) if sum(r.shape[0] for r in ranges) else np.empty((0, 2), np.int64)


def _pair_ranges(pairs: np.ndarray, geom: RateGeometry) -> np.ndarray:
    pairs = np.unique(np.asarray(pairs, dtype=np.int64))
    lo = data_blocks_before(pairs, geom) * BLOCK_PAYLOAD_BITS
    hi = data_blocks_before(pairs + 1, geom) * BLOCK_PAYLOAD_BITS
    return np.stack([np.atleast_1d(lo), np.atleast_1d(hi)], axis=1) if pairs.size else np.empty((0, 2), np.int64)


def _chunk_line_errors(line_errors, P0: int, P1: int) -> tuple[np.ndarray, np.ndarray]:
    """Given line-error positions (pair-space) of the pairs ``[P0, P1)``: (pair within the chunk,
    line bit within the pair); ``ValueError`` when one lies outside the chunk."""
    le = np.asarray(line_errors, dtype=np.int64)
    if le.size and (le.min() < P0 * PAIR_LINE_BITS or le.max() >= P1 * PAIR_LINE_BITS):
        raise ValueError("line_errors must lie inside the chunk's pairs")
    return np.divmod(le - P0 * PAIR_LINE_BITS, PAIR_LINE_BITS)


class _Scratch:
    """Grow-only work buffers reused across chunks (fresh large arrays cost page faults)."""

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype) -> np.ndarray:
        b = self._bufs.get(name)
        if b is None or b.size < n:
            b = self._bufs[name] = np.empty(max(n, 1024, 0 if b is None else 2 * b.size), dtype)
        return b[:n]


class _Expander:
    """Descrambler error multiplication with state carried across chunks."""

    def __init__(self, scratch: _Scratch) -> None:
        self.key = np.empty(0, np.int64)
        self.lane = np.empty(0, np.int8)
        self.flag = np.empty(0, np.uint8)
        self._scratch = scratch

    def run(self, s, lane, flag, s_end):
        n = s.size + self.key.size
        cap = 3 * n + 1
        g = self._scratch.get
        out_off = g("x_off", cap, np.int64)
        out_lane = g("x_lane", cap, np.int8)
        out_flag = g("x_flag", cap, np.uint8)
        hdr = g("x_hdr", cap, np.int64)
        nk = g("x_nk", cap, np.int64)
        nl = g("x_nl", cap, np.int8)
        nf = g("x_nf", cap, np.uint8)
        if s.size and s[-1] >= s_end:
            raise AssertionError("primary errors beyond the chunk end")  # internal invariant
        n_out, n_hdr, n_new = K.descramble_expand(
            s, lane, flag, self.key, self.lane, self.flag, np.int64(s_end),
            out_off, out_lane, out_flag, hdr, nk, nl, nf,
        )
        self.key, self.lane, self.flag = nk[:n_new].copy(), nl[:n_new].copy(), nf[:n_new].copy()
        return out_off[:n_out].copy(), out_lane[:n_out].copy(), out_flag[:n_out].copy(), hdr[:n_hdr].copy()


class _Base:
    cfg: GeneratorConfig
    stats: TraceStats

    def __init__(self, cfg: GeneratorConfig, start_pair: int = 0) -> None:
        if int(start_pair) < 0:
            raise ValueError(f"start_pair must be >= 0, got {start_pair!r}")
        self.cfg = cfg
        self.geom = cfg.geometry
        self.mode = cfg.phy_mode
        self._split = 2 if cfg.code == "rs272" else 1  # rs272 codeword pairs per trace pair
        self.pair = int(start_pair)
        self.stats = TraceStats(n_lanes=self.geom.n_lanes)
        self._scratch = _Scratch()
        self._expander = _Expander(self._scratch)

    def _finish(self, P0, P1, s, lane, flag, mark_pairs) -> GenChunk:
        """Descramble-expand primaries, build marks, update counters."""
        geom = self.geom
        s_end = data_blocks_before(P1, geom) * BLOCK_BITS
        if s.size > 1 and np.any(s[1:] < s[:-1]):  # heavy-codeword residuals were appended
            order = np.argsort(s, kind="stable")
            s, lane, flag = s[order], lane[order], flag[order]
        off, ln, fl, hdr = self._expander.run(s, lane, flag, s_end)
        self.stats.decoder_bit_errors += int(s.size)
        return self._finish_chunk(P0, P1, off, ln, fl, hdr, mark_pairs, self._per_pair(P0, P1, s // BLOCK_BITS))

    def _per_pair(self, P0: int, P1: int, blocks: np.ndarray) -> np.ndarray:
        """int64[P1 - P0]: how many of the errors in data 257b blocks ``blocks`` lie in each pair."""
        if not blocks.size:
            return np.zeros(P1 - P0, np.int64)
        return np.bincount(pair_of_data_block(blocks, self.geom) - P0, minlength=P1 - P0).astype(np.int64)

    @staticmethod
    def _per_pair_line(P0: int, P1: int, pos: np.ndarray) -> np.ndarray:
        """int64[P1 - P0]: line bit errors per pair of sorted pair-space positions ``pos``."""
        return np.bincount(np.asarray(pos, np.int64) // PAIR_LINE_BITS - P0, minlength=P1 - P0).astype(np.int64)

    def _finish_chunk(self, P0, P1, off, ln, fl, hdr, mark_pairs, dec_units=None) -> GenChunk:
        """Counters and marks of pairs [P0, P1) (shared by the fast and the bit-exact generator);
        ``dec_units``: decoder-output bit errors per pair."""
        self.last_raw = (off, ln, fl, hdr, mark_pairs)  # what next_encoded keeps beside the bytes
        lo, hi, marks = self._count_chunk(P0, P1, int(off.size), hdr, mark_pairs,
                                          self._per_pair(P0, P1, off // BLOCK_PAYLOAD_BITS), dec_units)
        return GenChunk(P0, P1, lo, hi, off, ln, fl, marks)

    def _count_chunk(self, P0, P1, n_flips: int, hdr, mark_pairs, flip_units=None,
                     dec_units=None) -> tuple[int, int, np.ndarray]:
        """Update the counters for pairs [P0, P1); return the chunk's stream window and marks.
        ``flip_units`` / ``dec_units``: payload flips / decoder-output bit errors per pair."""
        self.stats.add_units(flip_units, dec_units, getattr(self, "_line_units", None))
        self._line_units = None
        self.first_pair_flips = int(flip_units[0]) if flip_units is not None and flip_units.size else 0
        geom = self.geom
        marks = chunk_marks(mark_pairs, hdr, geom, self._split)
        st = self.stats
        st.pairs += P1 - P0
        st.line_bits += (P1 - P0) * PAIR_LINE_BITS
        lo = data_blocks_before(P0, geom) * BLOCK_PAYLOAD_BITS
        hi = data_blocks_before(P1, geom) * BLOCK_PAYLOAD_BITS
        st.stream_bits += hi - lo
        st.codewords += 2 * self._split * (P1 - P0)
        st.marked_pairs += int(np.unique(mark_pairs).size)
        st.header_errors += int(hdr.size)
        st.payload_flips += n_flips
        st.decoder_bits += (hi - lo) // BLOCK_PAYLOAD_BITS * BLOCK_BITS
        st.marked_bits += int((marks[:, 1] - marks[:, 0]).sum()) if marks.size else 0
        self.pair = P1
        return int(lo), int(hi), marks

    def next_encoded(self, n_pairs: int) -> EncodedChunk:
        """:meth:`next_chunk` as version-2 trace bytes (``protocol/trace/TRACE_FORMAT.md``, what
        ``protocol.trace.encode_chunk`` gives for the chunk): the same stream, counters and
        Generator state.  ``last_raw`` is not kept."""
        ch = self.next_chunk(n_pairs)
        _, _, _, hdr, mark_pairs = self.last_raw
        self.last_raw = None
        out = np.empty(10 * (ch.offsets.size + 2 * ch.marks.shape[0]) + 16, np.uint8)
        nf = TK.encode_flips(ch.offsets, ch.lanes, ch.flags, np.int64(ch.stream_end), np.int64(self.geom.n_lanes),
                             out, np.int64(0), np.int64(ch.stream_start - 1), np.int64(-1))
        n = TK.encode_marks(np.ascontiguousarray(ch.marks, np.int64), np.int64(ch.stream_start),
                            np.int64(ch.stream_end), out, np.int64(nf)) if nf >= 0 else nf
        if n < 0:
            raise RuntimeError(f"internal: chunk [{ch.stream_start}, {ch.stream_end}) not encodable (code {n})")
        return EncodedChunk(ch.pair_start, ch.pair_end, ch.stream_start, ch.stream_end, int(ch.offsets.size),
                            int(ch.marks.shape[0]), out[:n], int(nf), hdr, mark_pairs, self.first_pair_flips)

    def _decode_heavy(self, P_list, c_list, t_list, v_list):
        """Decode the error words of the listed pairs; return residual primaries and marked pairs.

        ``P_list`` int64[h] pairs; ``c_list/t_list/v_list``: per pair, arrays of (codeword,
        symbol time, error value) of all its symbol errors.  Uses phy802.fec on the error pattern
        alone (sent word = 0, linearity).
        """
        from phy802.fec.rs import KP4, decode

        geom, mode, st = self.geom, self.mode, self.stats
        h = len(P_list)
        words = np.zeros((h, 2, RS_N), np.uint16)
        for q in range(h):
            np.bitwise_xor.at(words[q], (c_list[q], t_list[q]), v_list[q].astype(np.uint16))
        flat = words.reshape(-1, RS_N)
        weight = (flat != 0).sum(axis=1)
        dec, ncorr = decode(KP4, flat, mode="detect" if mode.decoder == "detect" else "correct")
        if mode.decoder == "correct":
            fail = ncorr < 0
            resid = np.where(fail[:, None], flat, dec)
            heavy = weight > T_KP4
            misc = heavy & ~fail & (resid != 0).any(axis=1)
            st.uncorrectable_codewords += int(fail.sum())
            st.miscorrected_codewords += int(misc.sum())
            cw_flag = np.where(misc, FLAG_MISCORRECTED, 0).astype(np.uint8)
            cw_mark = fail if mode.indicate else np.zeros_like(fail)
        else:  # detect
            resid = flat
            undetected = (weight > 0) & (ncorr >= 0)
            st.undetected_codewords += int(undetected.sum())
            cw_flag = np.where(undetected, FLAG_UNDETECTED, 0).astype(np.uint8)
            cw_mark = (weight > 0) & (ncorr < 0)
        cw_mark = cw_mark.reshape(h, 2).any(axis=1)
        marked = np.asarray(P_list, np.int64)[cw_mark]
        # residual message bits -> primaries in scrambled-stream coordinates
        J = geom.n_lanes // 2
        S, L, F = [], [], []
        r3 = resid.reshape(h, 2, RS_N)
        f2 = cw_flag.reshape(h, 2)
        for q in range(h):
            P = int(P_list[q])
            am_bits = geom.am_blocks * BLOCK_BITS if P % geom.am_period_pairs == 0 else 0
            s0 = data_blocks_before(P, geom) * BLOCK_BITS - am_bits
            cc, tt = np.nonzero(r3[q, :, :RS_K])
            for b in range(10):
                hit = (r3[q, cc, tt] >> b) & 1 == 1
                u = 20 * tt[hit] + 10 * cc[hit] + b
                keep = u >= am_bits
                st.am_bit_errors += int((~keep).sum())
                u, c_, t_ = u[keep], cc[hit][keep], tt[hit][keep]
                S.append(s0 + u)
                L.append((2 * (t_ % J) + (c_ ^ ((t_ // J) & 1))).astype(np.int8))
                F.append(f2[q, c_])
        if S:
            return np.concatenate(S).astype(np.int64), np.concatenate(L), np.concatenate(F).astype(np.uint8), marked
        return np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.uint8), marked


class FastGenerator(_Base):
    """Event-driven generator: cost proportional to the number of line errors.

    Parameters
    ----------
    cfg : :class:`GeneratorConfig`.
    seed : int, SeedSequence or Generator (explicit; no global RNG).
    start_pair : first codeword pair (default 0; pair 0 carries an AM group).

    The output depends only on the seed and the pair range, never on how pairs are chunked.
    """


    _enc_bytes_per_slot = 4.0  # record bytes reserved per flip slot (tests shrink it to force the retry)

    def __init__(self, cfg: GeneratorConfig, seed, *, start_pair: int = 0) -> None:
        super().__init__(cfg, start_pair)
        self._rng = as_generator(seed)
        self._last = self.pair * PAIR_LINE_BITS - 1
        ber = float(cfg.ber)
        self._scale = (1.0 / -math.log1p(-ber)) if ber > 0 else math.inf
        self._nxt: int | None = None  # next error position already drawn (pair-space)
        self.fused = True  # bypass mode: one fused kernel (False: the general path, for tests)
        if cfg.per_lane and ber > 0:
            self._lane_rngs = _lane_generators(self._rng, self.geom.n_lanes)
            rowbits = self.geom.rows_per_pair * 10
            self._lane_state = []
            for L, r in enumerate(self._lane_rngs):
                p = cfg.lane_pe(L) if cfg.burst_pb is not None else cfg.lane_ber(L)
                sc = 1.0 / -math.log1p(-p) if p > 0 else math.inf
                # each lane starts in G at start_pair: its first error after Geometric(p) good bits
                first = self.pair * rowbits + int(r.standard_exponential() * sc) if p > 0 else 2**62
                self._lane_state.append((first, -1))
        self._decoder = {"none": 0, "correct": 1, "detect": 2}[self.mode.decoder]

    def _lane_positions(self, P1: int) -> np.ndarray:
        """Pair-space positions of the per-lane errors (bursts or weighted BSC) up to pair ``P1``."""
        geom, cfg = self.geom, self.cfg
        rowbits = geom.rows_per_pair * 10
        J = geom.n_lanes // 2
        end = P1 * rowbits
        pb = float(cfg.burst_pb) if cfg.burst_pb is not None else None
        pb_scale = 1.0 / -math.log(pb) if pb else 0.0
        parts = []
        for L in range(geom.n_lanes):
            rng = self._lane_rngs[L]
            nxt, run_left = self._lane_state[L]
            p = cfg.lane_pe(L) if pb is not None else cfg.lane_ber(L)
            if p <= 0:
                continue
            scale = 1.0 / -math.log1p(-p)
            expect = max(0.0, (end - nxt) * cfg.lane_ber(L))
            cap = int(expect + 8 * math.sqrt(expect) + 64)
            while True:
                state = rng.bit_generator.state
                out = np.empty(cap, np.int64)
                if pb is not None:
                    n, nxt2, run2 = K.lane_bursts(rng, scale, pb_scale, np.int64(nxt), np.int64(run_left),
                                                  np.int64(end), out)
                else:
                    n, nxt2 = K.sample_positions(rng, scale, np.int64(nxt), np.int64(end), out)
                    run2 = -1
                    if n == cap and nxt2 < end:
                        n = -1
                if n >= 0:
                    break
                rng.bit_generator.state = state
                cap *= 2
            self._lane_state[L] = (int(nxt2), int(run2))
            q = out[:n]
            P, rem = np.divmod(q, rowbits)
            k, b = np.divmod(rem, 10)
            t = J * k + (L >> 1)
            c = (L & 1) ^ (k & 1)
            parts.append(P * PAIR_LINE_BITS + 20 * t + 10 * c + b)
        pos = np.concatenate(parts) if parts else np.empty(0, np.int64)
        pos.sort()
        return pos

    def _positions(self, end: int) -> np.ndarray:
        """Line-error positions below ``end`` (pair-space), drawn in Numba from the seeded stream."""
        if self._scale == math.inf:
            return np.empty(0, np.int64)
        if self.cfg.per_lane:
            return self._lane_positions(end // PAIR_LINE_BITS)
        if self._nxt is None:
            # the first error: position start - 1 + Geometric(p)
            self._nxt = self._last + 1 + int(self._rng.standard_exponential() * self._scale)
        expect = (end - self._nxt) / self._scale if end > self._nxt else 0.0
        parts = []
        cap = int(expect + 6 * math.sqrt(expect) + 64)
        while True:
            out = np.empty(cap, np.int64)
            n, nxt = K.sample_positions(self._rng, self._scale, np.int64(self._nxt), np.int64(end), out)
            self._nxt = int(nxt)
            parts.append(out[:n])
            if n < cap:
                break
            cap = max(cap, 1024)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def next_chunk(self, n_pairs: int) -> GenChunk:
        """Simulate the next ``n_pairs`` codeword pairs."""
        n_pairs = int(n_pairs)
        if n_pairs <= 0:
            raise ValueError(f"n_pairs must be > 0, got {n_pairs}")
        P0, P1 = self.pair, self.pair + n_pairs
        if self.cfg.code == "rs272":
            return self._process_rs272(P0, P1, self._rs272_positions(self._positions(P1 * PAIR_LINE_BITS)))
        if self._fused_bypass():
            return self._bypass_chunk(P0, P1)[0]
        return self._process(P0, P1, self._positions(P1 * PAIR_LINE_BITS))

    def _rs272_positions(self, pos: np.ndarray) -> np.ndarray:
        """KP4-layout pair-space positions (lane L, row k, bit b of trace pair P) -> the rs272
        symbol on the same lane, row and bit (module docstring), sorted."""
        J = self.geom.n_lanes // 2
        R = self.geom.rows_per_pair // 2  # rows per rs272 pair: 34 (400G) / 68 (200G)
        P, u = np.divmod(np.asarray(pos, np.int64), PAIR_LINE_BITS)
        t, c, b = u // 20, (u // 10) & 1, u % 10
        k = t // J
        L = 2 * (t % J) + (c ^ (k & 1))
        s, k2 = np.divmod(k, R)
        t2 = J * k2 + (L >> 1)
        c2 = (L & 1) ^ (k2 & 1)
        out = P * PAIR_LINE_BITS + s * (PAIR_LINE_BITS // 2) + 20 * t2 + 10 * c2 + b
        out.sort()
        return out

    def _process_rs272(self, P0: int, P1: int, pos: np.ndarray) -> GenChunk:
        """Group rs272 line errors (rs272 pair-space, sorted) per codeword, decide each by the
        mode (bounded distance, t = 7; words with more errors decoded as error patterns) and pass
        the surviving data-bit errors on (numpy path, see the module docstring)."""
        from phy802.fec import RS272, decode

        geom, st, mode = self.geom, self.stats, self.mode
        J = geom.n_lanes // 2
        half = PAIR_LINE_BITS // 2
        st.line_bit_errors += int(pos.size)
        self._line_units = self._per_pair_line(P0, P1, pos) if self.cfg.burst_pb is not None else None
        P, u = np.divmod(pos, PAIR_LINE_BITS)
        sub, v = np.divmod(u, half)
        t, c, b = v // 20, (v // 10) & 1, v % 10
        lane = (2 * (t % J) + (c ^ ((t // J) & 1))).astype(np.int8)
        st.lane_errors += np.bincount(lane, minlength=geom.n_lanes).astype(np.int64)
        word = (2 * P + sub) * 2 + c  # global rs272 codeword index: 2 * (rs272 pair) + c
        key = np.sort((word * N_272 + t) << 4 | b)
        skey, sbit = key >> 4, np.int64(1) << (key & 15)
        if skey.size:
            first = np.flatnonzero(np.concatenate(([True], skey[1:] != skey[:-1])))
            ukey = skey[first]
            uval = np.bitwise_or.reduceat(sbit, first)
        else:
            ukey = uval = np.empty(0, np.int64)
        uw, ut = np.divmod(ukey, N_272)
        words, w_first, w_cnt = (np.empty(0, np.int64),) * 3
        if uw.size:
            w_first = np.flatnonzero(np.concatenate(([True], uw[1:] != uw[:-1])))
            words = uw[w_first]
            w_cnt = np.diff(np.append(w_first, uw.size))
        np.add.at(st.symbol_hist, np.minimum(w_cnt, HIST_BINS - 1), 1)
        st.codewords_with_errors += int(words.size)
        flag_of = np.zeros(words.size, np.uint8)
        keep = np.ones(ukey.size, bool)  # which error symbols survive the decoder
        extra_k, extra_v = [], []  # miscorrection symbols the decoder adds
        marked = np.zeros(words.size, bool)
        heavy = np.flatnonzero(w_cnt > (T_272 if mode.decoder == "correct" else 2 * T_272))
        rows = np.empty((heavy.size, N_272), np.uint16)
        if mode.decoder != "none" and heavy.size:
            rows[:] = 0
            for r, wi in enumerate(heavy):
                sl = slice(w_first[wi], w_first[wi] + w_cnt[wi])
                rows[r, ut[sl]] = uval[sl]
        if mode.decoder == "correct":
            light = w_cnt <= T_272
            st.corrected_codewords += int(light.sum())
            keep = np.repeat(~light, w_cnt)  # light words are corrected exactly
            if heavy.size:
                dec, ncorr = decode(RS272, rows, mode="correct")
                fail = ncorr < 0
                st.uncorrectable_codewords += int(fail.sum())
                misc = ~fail  # more than t errors: a success is a miscorrection (bounded distance)
                st.miscorrected_codewords += int(misc.sum())
                flag_of[heavy[misc]] = FLAG_MISCORRECTED
                marked[heavy[fail]] = mode.indicate
                for r in np.flatnonzero(misc):
                    wi = heavy[r]
                    keep[w_first[wi]:w_first[wi] + w_cnt[wi]] = False
                    res = np.flatnonzero(dec[r])
                    extra_k.append(words[wi] * N_272 + res)
                    extra_v.append(dec[r, res].astype(np.int64))
        elif mode.decoder == "detect":
            marked[:] = True
            if heavy.size:
                _, ncorr = decode(RS272, rows, mode="detect")
                und = ncorr >= 0
                st.undetected_codewords += int(und.sum())
                marked[heavy[und]] = False
                flag_of[heavy[und]] = FLAG_UNDETECTED
        rk, rv = ukey[keep], uval[keep]
        rf = np.repeat(flag_of, w_cnt)[keep]
        if extra_k:
            rk = np.concatenate([rk] + extra_k)
            rv = np.concatenate([rv] + extra_v)
            rf = np.concatenate([rf] + [np.full(x.size, FLAG_MISCORRECTED, np.uint8) for x in extra_k])
        mark_ids = words[marked] // 2
        rw, rt = np.divmod(rk, N_272)
        data = rt < K_272  # the pad (t = 257) and the parity carry no payload
        rw, rt, rv, rf = rw[data], rt[data], rv[data], rf[data]
        bits = (rv[:, None] >> np.arange(10)) & 1
        ri, bb = np.nonzero(bits)
        rw, rt, rf = rw[ri], rt[ri], rf[ri]
        rc, rsub, rP = rw & 1, (rw >> 1) & 1, rw >> 2
        m = rsub * (PAIR_MESSAGE_BITS // 2) + 20 * rt + 10 * rc + bb
        am_bits = np.where(rP % geom.am_period_pairs == 0, geom.am_blocks * BLOCK_BITS, 0)
        in_am = m < am_bits
        st.am_bit_errors += int(in_am.sum())
        ok = ~in_am
        s_pos = data_blocks_before(rP[ok], geom) * BLOCK_BITS - am_bits[ok] + m[ok]
        r_lane = (2 * (rt[ok] % J) + (rc[ok] ^ ((rt[ok] // J) & 1))).astype(np.int8)
        order = np.argsort(s_pos, kind="stable")
        return self._finish(P0, P1, np.asarray(s_pos, np.int64)[order], r_lane[order],
                            rf[ok].astype(np.uint8)[order], mark_ids)

    def _bypass_chunk(self, P0: int, P1: int, encode: bool = False):
        """The fused bypass kernel (same output as ``_process`` on the same positions); with
        ``encode`` the flips come out as version-2 records: ``(GenChunk or None, EncodedChunk or None)``."""
        geom, st, ex = self.geom, self.stats, self._expander
        end = P1 * PAIR_LINE_BITS
        if self._nxt is None:
            self._nxt = self._last + 1 + int(self._rng.standard_exponential() * self._scale)
        s_end = data_blocks_before(P1, geom) * BLOCK_BITS
        lo = int(data_blocks_before(P0, geom)) * BLOCK_PAYLOAD_BITS
        expect = (end - self._nxt) / self._scale if end > self._nxt else 0.0
        cap = 3 * int(expect + 8 * math.sqrt(expect) + 64) + ex.key.size + 3
        ecap = int(self._enc_bytes_per_slot * cap) + 64  # ~1.5 bytes per flip expected; an overflow is redone larger
        g = self._scratch.get
        while True:
            state = self._rng.bit_generator.state
            bufs = [g("b_off", cap, np.int64), g("b_lane", cap, np.int8), g("b_flag", cap, np.uint8),
                    g("b_hdr", cap, np.int64), g("b_nk", cap, np.int64), g("b_nl", cap, np.int8),
                    g("b_nf", cap, np.uint8)]
            enc = np.empty(ecap if encode else 0, np.uint8)  # fresh: the bytes leave with the chunk, uncopied
            enc_state = np.array([0, lo - 1, -1, 0], np.int64)
            counters = np.zeros(4, np.int64)
            units = np.zeros((3, 6), np.int64)
            units[:, 0] = -1
            nxt, no, nh, nn = K.bypass_run(
                self._rng, self._scale, np.int64(self._nxt), np.int64(end), geom.n_lanes // 2,
                geom.am_period_pairs, geom.am_blocks, np.int64(s_end), st.symbol_hist, st.lane_errors,
                ex.key, ex.lane, ex.flag, *bufs, counters, enc, enc_state, units, np.int64(P0),
            )
            if nxt >= 0:
                break
            if nxt == -2:
                raise RuntimeError("internal: the fused bypass kernel produced flips the trace format cannot hold")
            self._rng.bit_generator.state = state  # rare: more errors than room, redo larger
            cap *= 2
            ecap *= 2
        self._nxt = int(nxt)
        st.line_bit_errors += int(counters[0])
        # the kernel's running unit counts (rows line, decoder output, flips; _gen_kernels.bypass_run)
        st.decoder_bad_pairs += int(units[1, 2])
        st.decoder_bit_errors_sq += int(units[1, 3])
        st.payload_bad_pairs += int(units[2, 2])
        st.payload_flips_sq += int(units[2, 3])
        if int(units[1, 5]) != int(counters[0] - counters[2] - counters[3]):
            raise RuntimeError(f"internal: the fused kernel counted {int(units[1, 5])} decoder-output errors per pair")
        st.codewords_with_errors += int(counters[1])
        st.am_bit_errors += int(counters[3])
        st.decoder_bit_errors += int(counters[0] - counters[2] - counters[3])  # message bits, AMs excluded
        off, ln, fl, hdr, nk, nl, nf = bufs
        ex.key, ex.lane, ex.flag = nk[:nn].copy(), nl[:nn].copy(), nf[:nn].copy()
        mark_pairs = np.empty(0, np.int64)
        if not encode:
            off = off[:no].copy()
            self.last_raw = (off, ln[:no].copy(), fl[:no].copy(), hdr[:nh].copy(), mark_pairs)
            lo_, hi, marks = self._count_chunk(P0, P1, no, self.last_raw[3], mark_pairs)
            self.first_pair_flips = int(units[2, 4])
            return GenChunk(P0, P1, lo_, hi, *self.last_raw[:3], marks), None
        self.last_raw = None
        n_flips = int(enc_state[3])
        hdr = hdr[:nh].copy()
        nb = int(enc_state[0])
        if int(units[2, 5]) != n_flips:  # the kernel counts each flip it makes in its pair
            raise RuntimeError(f"internal: {int(units[2, 5])} flips counted per pair, {n_flips} written")
        lo_, hi, marks = self._count_chunk(P0, P1, n_flips, hdr, mark_pairs)
        self.first_pair_flips = int(units[2, 4])
        blob = enc
        if nb + 20 * marks.shape[0] + 16 > enc.size:
            blob = np.empty(nb + 20 * marks.shape[0] + 16, np.uint8)
            blob[:nb] = enc[:nb]
        n = TK.encode_marks(marks, np.int64(lo_), np.int64(hi), blob, np.int64(nb))
        if n < 0:
            raise RuntimeError(f"internal: marks of chunk [{lo_}, {hi}) not encodable (code {n})")
        return None, EncodedChunk(P0, P1, lo_, hi, n_flips, int(marks.shape[0]), blob[:n], nb, hdr, mark_pairs,
                                  self.first_pair_flips)

    def next_encoded(self, n_pairs: int) -> EncodedChunk:
        """:meth:`next_chunk` as version-2 trace bytes (the bytes ``protocol.trace.encode_chunk``
        gives for the chunk, the same counters and Generator state).  The bypass mode encodes in
        its fused kernel, with no intermediate flip arrays."""
        n_pairs = int(n_pairs)
        if n_pairs > 0 and self._fused_bypass():
            return self._bypass_chunk(self.pair, self.pair + n_pairs, encode=True)[1]
        return super().next_encoded(n_pairs)

    def _fused_bypass(self) -> bool:
        return (self.cfg.code != "rs272" and self._decoder == 0 and self._scale != math.inf and self.fused
                and not self.cfg.per_lane)

    def _process(self, P0: int, P1: int, pos: np.ndarray) -> GenChunk:
        geom, st = self.geom, self.stats
        n = pos.size
        g = self._scratch.get
        prim_s = g("prim_s", n, np.int64)
        prim_lane = g("prim_lane", n, np.int8)
        hp = g("hp", n, np.int64)
        hlo = g("hlo", n, np.int64)
        hhi = g("hhi", n, np.int64)
        mp = g("mp", n, np.int64)
        counters = np.zeros(8, np.int64)
        n_prim, n_heavy, n_mark = K.group_pairs(
            pos, geom.n_lanes // 2, geom.am_period_pairs, geom.am_blocks, T_KP4, self._decoder,
            st.symbol_hist, st.lane_errors, prim_s, prim_lane, hp, hlo, hhi, mp, counters,
        )
        st.line_bit_errors += n
        self._line_units = self._per_pair_line(P0, P1, pos) if self.cfg.burst_pb is not None else None
        st.codewords_with_errors += int(counters[1])
        st.corrected_codewords += int(counters[2])
        st.am_bit_errors += int(counters[3])
        s = prim_s[:n_prim]
        lane = prim_lane[:n_prim]
        flag = g("flag0", n_prim, np.uint8)
        flag[:] = 0
        marks = mp[:n_mark].copy()
        if n_heavy:
            Pl, cl, tl, vl = [], [], [], []
            for q in range(n_heavy):
                P = int(hp[q])
                u = pos[hlo[q]:hhi[q]] - P * PAIR_LINE_BITS
                Pl.append(P)
                cl.append((u // 10) & 1)
                tl.append(u // 20)
                vl.append(np.left_shift(1, u % 10))
            rs, rl, rf, rm = self._decode_heavy(Pl, cl, tl, vl)
            s = np.concatenate([s, rs])
            lane = np.concatenate([lane, rl])
            flag = np.concatenate([flag, rf])
            marks = np.concatenate([marks, rm])
        return self._finish(P0, P1, s, lane, flag, marks)


class BitExactGenerator(_Base):
    """Reference link on real bits (slow): the oracle for :class:`FastGenerator`.

    Composition per pair (all-data 257b blocks, 119.2.4.x): random payload -> 257b blocks with
    x<0> = 1 -> scrambler 1 + x^39 + x^58 -> AM group (8 / 4 blocks of PRBS-like filler; their
    content does not matter here) -> 10-bit round-robin to A/B (119.2.4.5) -> RS(544,514) encode
    (``phy802.fec.encode``) -> 119.2.4.7 interleave to PCS lanes -> dense Bernoulli(ber) flips of
    every line bit -> de-interleave -> decode per mode (``phy802.fec.decode``) -> strip parity
    and AMs -> descrambler -> compare with the sent payload.
    """

    def __init__(self, cfg: GeneratorConfig, seed, *, start_pair: int = 0) -> None:
        super().__init__(cfg, start_pair)
        self._rng = as_generator(seed)
        self._tx_state = np.zeros(58, np.uint8)
        self._rx_state = np.zeros(58, np.uint8)
        self._lane_of = lane_of_symbol(self.geom)
        self._lane_of_272 = lane_of_symbol(self.geom, N_272)

    def next_chunk(self, n_pairs: int, line_errors: np.ndarray | None = None) -> GenChunk:
        """Simulate the next ``n_pairs`` pairs.

        ``line_errors`` (optional) replaces the Bernoulli channel by an explicit error pattern:
        absolute pair-space positions ``P * 10880 + 20 t + 10 c + b`` (see :mod:`protocol.trace._gen_kernels`)
        inside the chunk, each flipping bit ``b`` of symbol ``t`` of codeword ``c`` on its lane
        (``rs272``: ``P * 10880 + 5440 s + 20 t + 10 c + b``, module docstring).
        """
        from phy802.fec.rs import KP4, decode, encode

        n_pairs = int(n_pairs)
        if n_pairs <= 0:
            raise ValueError(f"n_pairs must be > 0, got {n_pairs}")
        # refuse bad input before any state (Generator, scrambler) moves
        le = None if line_errors is None else _chunk_line_errors(line_errors, self.pair, self.pair + n_pairs)
        if self.cfg.code == "rs272":
            if le is None and self.cfg.per_lane:
                raise ValueError("the bit-exact rs272 generator supports independent errors (no burst_pb/lane_weights)")
            return self._next_chunk_rs272(n_pairs, le)

        geom, mode, st, rng = self.geom, self.mode, self.stats, self._rng
        P0, P1, pairs, has_am, am_bits, blocks, scr, msg = self._tx_messages(n_pairs)
        # 119.2.4.5: bit 20 i + 10 c + b -> bit b of message symbol i (time order) of codeword c
        w = (1 << np.arange(10, dtype=np.uint16))
        sym = (msg.reshape(n_pairs, RS_K, 2, 10).astype(np.uint16) * w).sum(axis=3, dtype=np.uint16)
        cw = encode(KP4, sym.transpose(0, 2, 1).reshape(-1, RS_K)).reshape(n_pairs, 2, RS_N)
        # 119.2.4.7 interleave: lane L gets, per row k, the symbol of (c, t) with lane_of[c, t] = L
        J = geom.n_lanes // 2
        t = np.arange(RS_N)
        rows = geom.rows_per_pair
        lanes_sym = np.empty((n_pairs, rows, geom.n_lanes), np.uint16)
        for c in (0, 1):
            lanes_sym[:, t // J, self._lane_of[c]] = cw[:, c, :]
        line = ((lanes_sym[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)  # bit 0 first
        # channel: independent bit errors on every line bit
        if le is None and self.cfg.per_lane:
            err = np.zeros(line.shape, np.uint8)
            if self.cfg.ber > 0:
                if not hasattr(self, "_lane_rngs"):
                    self._lane_rngs = _lane_generators(rng, geom.n_lanes)
                    self._lane_chain = [np.zeros(1, np.int64) for _ in range(geom.n_lanes)]
                for L in range(geom.n_lanes):
                    u_ = self._lane_rngs[L].random(n_pairs * rows * 10)
                    if self.cfg.burst_pb is not None:
                        bits = K.dense_markov(u_, self.cfg.lane_pe(L), float(self.cfg.burst_pb), self._lane_chain[L])
                    else:
                        bits = (u_ < self.cfg.lane_ber(L)).astype(np.uint8)
                    err[:, :, L, :] = bits.reshape(n_pairs, rows, 10)
        elif le is None:
            err = (rng.random(line.shape) < self.cfg.ber).astype(np.uint8)
        else:
            err = np.zeros(line.shape, np.uint8)
            q, u = le
            c_, t_, b_ = (u // 10) & 1, u // 20, u % 10
            err[q, t_ // J, self._lane_of[c_, t_], b_] ^= 1
        st.line_bit_errors += int(err.sum())
        self._line_units = (err.reshape(n_pairs, -1).sum(axis=1, dtype=np.int64) if self.cfg.burst_pb is not None
                            else None)
        np.add.at(st.lane_errors, np.nonzero(err)[2], 1)
        rx_line = line ^ err
        # RX: de-interleave
        rx_lanes = (rx_line.astype(np.uint16) << np.arange(10, dtype=np.uint16)).sum(axis=3, dtype=np.uint16)
        rx_cw = np.empty((n_pairs, 2, RS_N), np.uint16)
        for c in (0, 1):
            rx_cw[:, c, :] = rx_lanes[:, t // J, self._lane_of[c]]
        e_cw = rx_cw ^ cw
        wts = (e_cw != 0).sum(axis=2).reshape(-1)
        np.add.at(st.symbol_hist, np.minimum(wts[wts > 0], HIST_BINS - 1), 1)
        st.codewords_with_errors += int((wts > 0).sum())
        flat = rx_cw.reshape(-1, RS_N)
        marked_cw = np.zeros(flat.shape[0], bool)
        if mode.decoder == "correct":
            dec, ncorr = decode(KP4, flat, mode="correct")
            fail = ncorr < 0
            out = np.where(fail[:, None], flat, dec)
            resid = (out ^ cw.reshape(-1, RS_N))
            st.corrected_codewords += int(((wts > 0) & (wts <= T_KP4)).sum())
            st.uncorrectable_codewords += int(fail.sum())
            st.miscorrected_codewords += int(((wts > T_KP4) & ~fail & (resid != 0).any(axis=1)).sum())
            if mode.indicate:
                marked_cw = fail
            cwflag = np.where((wts > T_KP4) & ~fail, FLAG_MISCORRECTED, 0).astype(np.uint8)
        elif mode.decoder == "detect":
            _, ncorr = decode(KP4, flat, mode="detect")
            out = flat
            marked_cw = ncorr < 0
            st.undetected_codewords += int(((wts > 0) & (ncorr >= 0)).sum())
            cwflag = np.where((wts > 0) & (ncorr >= 0), FLAG_UNDETECTED, 0).astype(np.uint8)
        else:
            out = flat
            cwflag = np.zeros(flat.shape[0], np.uint8)
        mark_pairs = pairs[marked_cw.reshape(n_pairs, 2).any(axis=1)]
        # strip parity, undo 119.2.4.5, remove AMs
        msg_sym = out.reshape(n_pairs, 2, RS_N)[:, :, :RS_K]
        rx_msg = ((msg_sym.transpose(0, 2, 1)[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)
        rx_msg = rx_msg.reshape(n_pairs, PAIR_MESSAGE_BITS)
        # per-message-bit lane and flag (for attributing payload errors)
        u = np.arange(PAIR_MESSAGE_BITS)
        lane_u = self._lane_of[(u // 10) & 1, u // 20]
        flag_u = cwflag.reshape(n_pairs, 2)[:, (u // 10) & 1]
        return self._tail_and_finish(P0, P1, has_am, am_bits, msg, rx_msg, scr, blocks, lane_u, flag_u, mark_pairs)

    def _tail_and_finish(self, P0, P1, has_am, am_bits, msg, rx_msg, scr, blocks, lane_u, flag_u, mark_pairs):
        """Shared receive tail: remove AMs, descramble, attribute each payload error to the lane and
        flag of its scrambled-domain origin, count AM-bit errors, finish the chunk."""
        geom, st = self.geom, self.stats
        n_pairs = P1 - P0
        parts, lparts, fparts = [], [], []
        for q in range(n_pairs):
            a = am_bits if has_am[q] else 0
            parts.append(rx_msg[q, a:])
            lparts.append(lane_u[a:])
            fparts.append(flag_u[q, a:])
        rx_scr = np.concatenate(parts)
        rx_lane = np.concatenate(lparts)
        rx_flag = np.concatenate(fparts)
        s0 = data_blocks_before(P0, geom) * BLOCK_BITS
        rx_blocks = K.descramble_bits(rx_scr, self._rx_state)
        diff = np.nonzero(rx_blocks != blocks)[0]
        # lane/flag attribution: origin at v, else v-39, else v-58 among scrambled-domain errors
        scr_err = (rx_scr != scr)
        st.decoder_bit_errors += int(scr_err.sum())
        dec_units = self._per_pair(P0, P1, (s0 + np.flatnonzero(scr_err)) // BLOCK_BITS)
        # the previous chunk's tail can be the origin of this chunk's first errors
        tail = getattr(self, "_tail", None)
        if tail is None:
            tail = (np.zeros(58, bool), np.zeros(58, np.int8), np.zeros(58, np.uint8))
        ext_err = np.concatenate([tail[0], scr_err])
        ext_lane = np.concatenate([tail[1], rx_lane.astype(np.int8)])
        ext_flag = np.concatenate([tail[2], rx_flag.astype(np.uint8)])
        self._tail = (ext_err[-58:].copy(), ext_lane[-58:].copy(), ext_flag[-58:].copy())
        lanes = np.empty(diff.size, np.int8)
        flags = np.empty(diff.size, np.uint8)
        for q, v in enumerate(diff + 58):
            for d in (0, 39, 58):
                if ext_err[v - d]:
                    lanes[q] = ext_lane[v - d]
                    flags[q] = ext_flag[v - d]
                    break
            else:  # pragma: no cover - the descrambler cannot create an error from nothing
                raise AssertionError("payload error without a scrambled-domain origin")
        gv = s0 + diff
        hdr = gv % BLOCK_BITS == 0
        off = (gv // BLOCK_BITS) * BLOCK_PAYLOAD_BITS + gv % BLOCK_BITS - 1
        hdr_blocks = gv[hdr] // BLOCK_BITS
        # AM-bit and parity errors are not payload: count AM ones like the fast generator
        for q in range(n_pairs):
            if has_am[q]:
                st.am_bit_errors += int((rx_msg[q, :am_bits] != msg[q, :am_bits]).sum())
        return self._finish_chunk(P0, P1, off[~hdr].astype(np.int64), lanes[~hdr], flags[~hdr], hdr_blocks, mark_pairs,
                                  dec_units)

    def _tx_messages(self, n_pairs: int):
        """The TX side every code shares, for the next ``n_pairs`` pairs: random payload -> 257b
        (x<0> = 1) -> scramble, AM blocks (random bits) at the start of AM pairs.  Returns
        ``(P0, P1, pairs, has_am, am_bits, blocks, scr, msg)`` with ``msg[q]`` the message bits of
        pair ``P0 + q`` (``n_pairs > 0``, checked by :meth:`next_chunk`)."""
        geom, rng = self.geom, self._rng
        P0, P1 = self.pair, self.pair + n_pairs
        pairs = np.arange(P0, P1)
        has_am = pairs % geom.am_period_pairs == 0
        n_data = int(BLOCKS_PER_PAIR * n_pairs - geom.am_blocks * has_am.sum())
        payload = rng.integers(0, 2, size=(n_data, BLOCK_PAYLOAD_BITS), dtype=np.uint8)
        blocks = np.concatenate([np.ones((n_data, 1), np.uint8), payload], axis=1).reshape(-1)
        scr = K.scramble_bits(blocks, self._tx_state)
        msg = np.empty((n_pairs, PAIR_MESSAGE_BITS), np.uint8)
        am_bits = geom.am_blocks * BLOCK_BITS
        cursor = 0
        for q in range(n_pairs):  # per pair (AM insertion), not per symbol
            a = am_bits if has_am[q] else 0
            if a:
                msg[q, :a] = rng.integers(0, 2, a, dtype=np.uint8)
            take = PAIR_MESSAGE_BITS - a
            msg[q, a:] = scr[cursor:cursor + take]
            cursor += take
        return P0, P1, pairs, has_am, am_bits, blocks, scr, msg

    def _next_chunk_rs272(self, n_pairs: int, le) -> GenChunk:
        """:meth:`next_chunk` for ``code="rs272"`` (``le``: the checked line errors, or None): each
        trace pair is two rs272 pairs ``s = 0, 1`` (20 257b blocks each: 5140 message bits dealt
        10-bit round robin to A/B, 257 data symbols + the pad (0, last) per codeword, RS(272,258)
        encode, 119.2.4.7 rows ``34 s + t // J``)."""
        from phy802.fec.rs import RS272, decode, encode

        geom, mode, st, rng = self.geom, self.mode, self.stats, self._rng
        P0, P1, pairs, has_am, am_bits, blocks, scr, msg = self._tx_messages(n_pairs)
        # per rs272 pair s: bit 20 i + 10 c + b of its 5140 -> bit b of data symbol i of codeword c
        w = (1 << np.arange(10, dtype=np.uint16))
        sym = (msg.reshape(n_pairs, 2, K_272, 2, 10).astype(np.uint16) * w).sum(axis=4, dtype=np.uint16)
        m = np.zeros((n_pairs, 2, 2, K_272 + 1), np.uint16)  # [P, s, c, 258], pad (last) = 0
        m[..., :K_272] = sym.transpose(0, 1, 3, 2)
        cw = encode(RS272, m.reshape(-1, K_272 + 1)).reshape(n_pairs, 2, 2, N_272)
        J = geom.n_lanes // 2
        R = geom.rows_per_pair // 2
        t = np.arange(N_272)
        lane_of = self._lane_of_272
        rows = geom.rows_per_pair
        lanes_sym = np.empty((n_pairs, rows, geom.n_lanes), np.uint16)
        for sub in (0, 1):
            for c in (0, 1):
                lanes_sym[:, sub * R + t // J, lane_of[c]] = cw[:, sub, c, :]
        line = ((lanes_sym[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)
        if le is None:
            err = (rng.random(line.shape) < self.cfg.ber).astype(np.uint8)
        else:
            err = np.zeros(line.shape, np.uint8)
            q, u = le
            sub_, v = np.divmod(u, PAIR_LINE_BITS // 2)
            c_, t_, b_ = (v // 10) & 1, v // 20, v % 10
            err[q, sub_ * R + t_ // J, lane_of[c_, t_], b_] ^= 1
        st.line_bit_errors += int(err.sum())
        self._line_units = (err.reshape(n_pairs, -1).sum(axis=1, dtype=np.int64) if self.cfg.burst_pb is not None
                            else None)
        np.add.at(st.lane_errors, np.nonzero(err)[2], 1)
        rx_lanes = ((line ^ err).astype(np.uint16) << np.arange(10, dtype=np.uint16)).sum(axis=3, dtype=np.uint16)
        rx_cw = np.empty((n_pairs, 2, 2, N_272), np.uint16)
        for sub in (0, 1):
            for c in (0, 1):
                rx_cw[:, sub, c, :] = rx_lanes[:, sub * R + t // J, lane_of[c]]
        flat = rx_cw.reshape(-1, N_272)
        sent = cw.reshape(-1, N_272)
        wts = (flat != sent).sum(axis=1)
        np.add.at(st.symbol_hist, np.minimum(wts[wts > 0], HIST_BINS - 1), 1)
        st.codewords_with_errors += int((wts > 0).sum())
        marked_cw = np.zeros(flat.shape[0], bool)
        cwflag = np.zeros(flat.shape[0], np.uint8)
        out = flat
        if mode.decoder == "correct":
            dec, ncorr = decode(RS272, flat, mode="correct")
            fail = ncorr < 0
            out = np.where(fail[:, None], flat, dec)
            resid = out ^ sent
            st.corrected_codewords += int(((wts > 0) & (wts <= T_272)).sum())
            st.uncorrectable_codewords += int(fail.sum())
            misc = (wts > T_272) & ~fail & (resid != 0).any(axis=1)
            st.miscorrected_codewords += int(misc.sum())
            marked_cw = fail if mode.indicate else marked_cw
            cwflag = np.where((wts > T_272) & ~fail, FLAG_MISCORRECTED, 0).astype(np.uint8)
        elif mode.decoder == "detect":
            _, ncorr = decode(RS272, flat, mode="detect")
            marked_cw = ncorr < 0
            und = (wts > 0) & (ncorr >= 0)
            st.undetected_codewords += int(und.sum())
            cwflag = np.where(und, FLAG_UNDETECTED, 0).astype(np.uint8)
        mark_ids = (2 * pairs[:, None] + np.arange(2)[None, :])[marked_cw.reshape(n_pairs, 2, 2).any(axis=2)]
        msg_sym = out.reshape(n_pairs, 2, 2, N_272)[..., :K_272]  # [P, s, c, i]
        rx_msg = ((msg_sym.transpose(0, 1, 3, 2)[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)
        rx_msg = rx_msg.reshape(n_pairs, PAIR_MESSAGE_BITS)
        u = np.arange(PAIR_MESSAGE_BITS)
        su, vu = np.divmod(u, PAIR_MESSAGE_BITS // 2)
        lane_u = lane_of[(vu // 10) & 1, vu // 20]
        flag_u = cwflag.reshape(n_pairs, 4)[:, 2 * su + ((vu // 10) & 1)]
        return self._tail_and_finish(P0, P1, has_am, am_bits, msg, rx_msg, scr, blocks, lane_u, flag_u, mark_ids)
