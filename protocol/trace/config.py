"""What a trace generator is asked for and what it counted: :class:`GeneratorConfig` (rate, FEC
mode, code, channel), :class:`TraceStats`, the chunks :class:`GenChunk` / :class:`EncodedChunk`,
and :data:`CI_UNIT`, the independent unit of a trace's post-FEC intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from phy802.clause119 import CODE_SIZES

from ..framing import (
    PAIR_LINE_BITS,
    RS_N,
    RateGeometry,
    get_rate,
)
from ..modes import FecMode, get_mode

__all__ = [
    "GeneratorConfig",
    "TraceStats",
    "GenChunk",
    "EncodedChunk",
    "CI_UNIT",
    "TRACE_CODES",
    "lane_of_symbol",
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
