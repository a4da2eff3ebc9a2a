"""The composed link: PCS -> RS-FEC -> PMA -> channel per physical lane -> back (bit-exact), and a
codeword-level fast simulator that only follows the error pattern.

Three simulators share one geometry (which line bit carries which codeword bit) and one counter
set (:class:`LinkCounters`, mergeable, like a PHY's registers plus ground truth):

* :class:`Link` with ``level="pcs"``: the full Clause 119 chain on real payload (random 64b data
  blocks or Ethernet frames): 256b/257b, scrambler, AMs, 119.2.4.5 distribution, RS(544,514)
  encode, 119.2.4.7 interleave onto PCS lanes (:mod:`phy802.pcs`), bit-mux onto 8 or 4 physical
  lanes, PAM4 Gray map and optional 1/(1+D) precoder (:mod:`phy802.pma`), one channel per lane,
  and the receiver back to frames (lane lock, decode/detect/bypass, error marking, FCS).
* :class:`Link` with ``level="codeword"``: the same geometry on random message symbols (what the
  scrambled data looks like) with real RS encode and decode of every codeword, no 257b/scrambler/AM.
  **KR4 is not a Clause 119 mode**: ``fec="kr4"`` always runs at this level, on a hypothetical
  Clause 119 layout with RS(528,514): the same codeword pairs (514-symbol messages A/B), 14 parity
  symbols, and the 119.2.4.7 interleave rule generalised to n = 528 (66 symbols per PCS lane and
  pair at 400G, 132 at 200G) -- a documented model choice, not a standard format.
* :class:`FastLink`: no data at all.  By linearity the decoder's behaviour depends only on the
  error pattern, so it samples line symbol errors per lane (data-free samplers of the channel
  models; sent levels of scrambled data are i.i.d. uniform), maps them through the receive
  precoder, Gray demap, bit-mux and lane interleave to RS symbol errors per codeword, and decodes
  only the words with more than t errors (syndromes of the error pattern alone); a bounded-distance
  decoder always corrects <= t.  Used by :mod:`phy802.sweep` at low BER.

FEC modes (``LinkConfig.fec``):

==========  ======================================================================================
``kp4``     RS(544,514), correct up to t = 15 and mark uncorrectable pairs (Cl.119 default)
``kr4``     RS(528,514), t = 7, codeword level only (see above)
``detect``  RS(544,514) syndrome check only ("bypass correction", 91.5.3.3): errored words flagged
            and marked, data passed uncorrected
``bypass``  RS(544,514) parity sent but never read: no decode, nothing marked
``none``    no FEC sublayer.  Clause 119 has no FEC-less format, so the line keeps the 544-symbol
            layout (parity as filler) and the receiver does not decode: statistically identical to
            ``bypass`` on the message bits; kept as its own name for the latency comparison
==========  ======================================================================================

Rates and counters: "pre-FEC" counts every RS bit/symbol of every codeword (= every line bit;
after the receive precoder, so one precoded line error gives two data symbol errors), "post-FEC"
counts the k message symbols at the decoder output (before the descrambler; the payload error
pattern of the ``pcs`` level is after it, where each bit error becomes ~3 (1 + x^39 + x^58)).
A codeword error is a word whose delivered message differs from the sent one.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from phy802 import _link_kernels as _k
from phy802._rng import spawn
from phy802.channel import Channel, LaneChannels, Noiseless, Pam4Awgn, signs_to_values
from phy802.fec import KP4, KR4, RSCode, decode, decode_syndromes, encode, syndromes_sparse
from phy802.pcs import (
    Blocks66,
    LockError,
    PcsConfig,
    PcsReceiver,
    PcsTransmitter,
    SYNC_DATA,
    frames_to_blocks,
    payload_bit_errors,
)
from phy802.pcs.distribution import pair_gather_index
from phy802.pcs.distribution import lane_of_symbol as _pcs_lane_of_symbol
from phy802.pma import BitMux, gray_demap, gray_map, precode, precode_decode
from phy802.stats import RateEstimate, rate

__all__ = [
    "FEC_MODES",
    "LinkConfig",
    "LinkGeometry",
    "LinkCounters",
    "LinkResult",
    "Link",
    "FastLink",
    "geometry",
    "code_of",
]

FecMode = Literal["kp4", "kr4", "detect", "bypass", "none"]
FEC_MODES: tuple[str, ...] = ("kp4", "kr4", "detect", "bypass", "none")
_DECODER = {"kp4": "correct", "kr4": "correct", "detect": "detect", "bypass": None, "none": None}
_POP10 = np.array([bin(i).count("1") for i in range(1024)], dtype=np.int64)
K_MSG = 514


def code_of(fec: str) -> RSCode:
    """The RS code whose layout the line carries in mode ``fec`` (KR4 for ``kr4``, else KP4)."""
    if fec not in FEC_MODES:
        raise ValueError(f"fec must be one of {', '.join(FEC_MODES)}, got {fec!r}")
    return KR4 if fec == "kr4" else KP4


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """Structure of a composed link (swept physics lives in the channels, not here).

    Parameters
    ----------
    rate : ``"400G"`` (16 PCS lanes) or ``"200G"`` (8 PCS lanes).
    fec : ``"kp4"``, ``"kr4"``, ``"detect"``, ``"bypass"`` or ``"none"`` (module docstring).
    precoding : 1/(1+D) mod 4 precoder on every physical lane (120.5.7.2), default off.
    precoder_init : initial precoder state ``P(-1)`` on TX and RX (0..3; [?] in the notes, default 0).
    n_lanes : physical lanes (default 8 for 400G, 4 for 200G); PCS lanes are bit-muxed onto them.
    lane_order : ``lane_order[i]`` = PCS lanes interleaved on physical lane ``i`` (see
        :class:`phy802.pma.BitMux`; default consecutive groups, [?] implementation specific).
    level : ``"pcs"`` (full Clause 119) or ``"codeword"``; default ``"pcs"``, except ``kr4``.
    payload : ``"data"`` (random 64b data blocks, fastest) or ``"frames"`` (random Ethernet frames
        of ``frame_bytes`` octets + FCS, so FCS errors and frame counts are meaningful).
    frame_bytes : MAC frame length without FCS (default 1514).
    am_spacing : AM group spacing in 257b blocks (``None`` = the standard's; see PcsConfig).
    error_marking : receiver marking of pairs with an uncorrectable codeword (``"pair"``/``"none"``).
    am_lock_tolerance : marker symbols allowed in error at lane lock (0..5, default 5: each batch
        has a single AM group, and a lock failure raises :class:`phy802.pcs.LockError`).
    """

    rate: Literal["400G", "200G"] = "400G"
    fec: FecMode = "kp4"
    precoding: bool = False
    precoder_init: int = 0
    n_lanes: int | None = None
    lane_order: tuple[tuple[int, ...], ...] | None = None
    level: Literal["pcs", "codeword"] | None = None
    payload: Literal["data", "frames"] = "data"
    frame_bytes: int = 1514
    am_spacing: int | None = None
    error_marking: Literal["pair", "none"] = "pair"
    am_lock_tolerance: int = 5

    def __post_init__(self) -> None:
        if self.rate not in ("400G", "200G"):
            raise ValueError(f"LinkConfig.rate must be '400G' or '200G', got {self.rate!r}")
        if self.fec not in FEC_MODES:
            raise ValueError(f"LinkConfig.fec must be one of {', '.join(FEC_MODES)}, got {self.fec!r}")
        if not isinstance(self.precoding, (bool, np.bool_)):
            raise ValueError(f"LinkConfig.precoding must be a bool, got {self.precoding!r}")
        if self.precoder_init not in (0, 1, 2, 3):
            raise ValueError(f"LinkConfig.precoder_init must be 0..3, got {self.precoder_init!r}")
        n_pcsl = 16 if self.rate == "400G" else 8
        if self.n_lanes is None:
            object.__setattr__(self, "n_lanes", 8 if self.rate == "400G" else 4)
        if not isinstance(self.n_lanes, (int, np.integer)) or self.n_lanes <= 0 or n_pcsl % self.n_lanes:
            raise ValueError(f"LinkConfig.n_lanes must divide the {n_pcsl} PCS lanes of {self.rate}, got {self.n_lanes!r}")
        if self.lane_order is not None:
            object.__setattr__(self, "lane_order", tuple(tuple(int(x) for x in g) for g in self.lane_order))
        try:
            BitMux(n_pcsl, int(self.n_lanes), self.lane_order)
        except ValueError as exc:
            raise ValueError(f"LinkConfig.lane_order: {exc}") from None
        if self.level is None:
            object.__setattr__(self, "level", "codeword" if self.fec == "kr4" else "pcs")
        if self.level not in ("pcs", "codeword"):
            raise ValueError(f"LinkConfig.level must be 'pcs' or 'codeword', got {self.level!r}")
        if self.fec == "kr4" and self.level != "codeword":
            raise ValueError("LinkConfig: fec='kr4' is not a Clause 119 mode; it runs at level='codeword' only")
        if self.payload not in ("data", "frames"):
            raise ValueError(f"LinkConfig.payload must be 'data' or 'frames', got {self.payload!r}")
        if not isinstance(self.frame_bytes, (int, np.integer)) or not 14 <= self.frame_bytes <= 16000:
            raise ValueError(f"LinkConfig.frame_bytes must be an int in 14..16000, got {self.frame_bytes!r}")
        if self.error_marking not in ("pair", "none"):
            raise ValueError(f"LinkConfig.error_marking must be 'pair' or 'none', got {self.error_marking!r}")
        if self.level == "pcs":
            self.pcs_config  # validates am_spacing

    @property
    def n_pcs_lanes(self) -> int:
        return 16 if self.rate == "400G" else 8

    @property
    def code(self) -> RSCode:
        return code_of(self.fec)

    @property
    def decoder(self) -> str | None:
        """``"correct"``, ``"detect"`` or ``None`` (no decoding)."""
        return _DECODER[self.fec]

    @property
    def mux(self) -> BitMux:
        return BitMux(self.n_pcs_lanes, int(self.n_lanes), self.lane_order)

    @property
    def pcs_config(self) -> PcsConfig:
        mode = {"kp4": "correct", "detect": "detect", "bypass": "bypass", "none": "bypass"}.get(self.fec, "correct")
        return PcsConfig(rate=self.rate, decode_mode=mode, am_spacing=self.am_spacing,
                         error_marking=self.error_marking, am_lock_tolerance=self.am_lock_tolerance)


# ------------------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class LinkGeometry:
    """Where every codeword bit travels (read-only arrays).

    ``lane_of[X, t]`` / ``slot_of[X, t]``: PCS lane and slot (0..K-1 within a pair) of symbol ``t``
    of codeword X (0 = A, 1 = B); ``gather[L, k] = X n + t``: the symbol PCS lane L sends k-th;
    ``order[i, m]``: PCS lane at mux position m of physical lane i.  Physical lane bit
    ``q`` = bit ``q // r`` of PCS lane ``order[i, q % r]``; PCS lane bit ``u`` = bit ``u % 10`` of
    its symbol ``u // 10``; that symbol is slot ``(u // 10) % K`` of pair ``(u // 10) // K``.
    """

    n: int
    n_pcsl: int
    n_phys: int
    K: int
    lane_of: NDArray[np.intp]
    slot_of: NDArray[np.intp]
    gather: NDArray[np.intp]
    order: NDArray[np.int64]

    @property
    def r(self) -> int:
        return self.n_pcsl // self.n_phys

    @property
    def line_symbols_per_pair(self) -> int:
        """PAM4 symbols per physical lane and codeword pair."""
        return self.K * 5 * self.r


def _interleave_maps(n: int, n_pcsl: int):
    """119.2.4.7 with ``h = n_pcsl / 2``, ``t = h k + j``: k even -> lane 2j <- A_t, 2j+1 <- B_t,
    k odd swapped; generalised to any n divisible by h (n = 528 for the kr4 model)."""
    h = n_pcsl // 2
    K = n // h
    t = np.arange(n)
    k, j = t // h, t % h
    lane = np.empty((2, n), np.intp)
    lane[0] = 2 * j + (k & 1)
    lane[1] = 2 * j + 1 - (k & 1)
    slot = np.stack([k, k]).astype(np.intp)
    gather = np.empty((n_pcsl, K), np.intp)
    for X in (0, 1):
        gather[lane[X], slot[X]] = X * n + t
    return lane, slot, gather


@functools.lru_cache(maxsize=None)
def _geometry(rate: str, n: int, n_phys: int, order: tuple) -> LinkGeometry:
    n_pcsl = 16 if rate == "400G" else 8
    if n == 544:  # the PCS package's own tables (119.2.4.7)
        la, lb, sa, sb = _pcs_lane_of_symbol(rate)
        lane, slot, gather = np.stack([la, lb]), np.stack([sa, sb]), np.array(pair_gather_index(rate))
    else:
        lane, slot, gather = _interleave_maps(n, n_pcsl)
    g = LinkGeometry(n, n_pcsl, n_phys, n // (n_pcsl // 2), np.array(lane), np.array(slot), np.array(gather),
                     np.array(order, dtype=np.int64))
    for a in (g.lane_of, g.slot_of, g.gather, g.order):
        a.setflags(write=False)
    return g


def geometry(config: LinkConfig) -> LinkGeometry:
    """The :class:`LinkGeometry` of ``config``."""
    return _geometry(config.rate, config.code.n, int(config.n_lanes), config.mux.order)


# ------------------------------------------------------------------------------------- counters


def _zeros(n: int) -> NDArray[np.int64]:
    return np.zeros(n, np.int64)


@dataclass
class LinkCounters:
    """Raw counts of a link run, like a PHY's registers plus the ground truth an emulator knows.

    Mergeable (:meth:`merge`) across batches, workers and runs; rates with Clopper-Pearson
    intervals come from :meth:`rates`.

    Attributes
    ----------
    pairs, codewords : codeword pairs / codewords sent; ``n``, ``k`` : code length and message length.
    line_symbols : PAM4 symbols sent over all physical lanes.
    lane_symbol_errors[i] : PAM4 symbols received wrong on physical lane i (before the precoder).
    lane_bit_errors[i] : data bits wrong on physical lane i after the receive precoder + Gray demap.
    pcs_lane_bit_errors[L], pcs_lane_symbol_errors[L] : wrong bits / 10-bit symbols carried by PCS
        lane L (ground truth, pre-FEC).
    pcs_lane_corrected[L] : symbols the decoder corrected on PCS lane L (the PHY's per-lane counter).
    bit_errors, symbol_errors : pre-FEC RS bits / symbols in error, over all n symbols of every word.
    hist[w] : codewords with w pre-FEC symbol errors (w = 0..n).
    corrected_codewords, uncorrected_codewords, corrected_symbols : decoder outcome counters
        (uncorrected = flagged: uncorrectable, or any error in ``detect``).
    miscorrected_codewords : words the decoder "corrected" to a wrong codeword.
    codeword_errors : words whose delivered message differs from the sent one (FER numerator).
    undetected_codeword_errors : codeword errors that were not flagged.
    post_fec_symbol_errors, post_fec_bit_errors, message_bits : at the decoder output, message part.
    frames, frames_ok, fcs_errors, payload_bits, payload_bit_errors, marked_blocks, block_errors :
        MAC-side counts of the ``pcs`` level (0 elsewhere).
    lock_failures : ``pcs``-level batches dropped because the receiver could not lock a lane on the
        batch's single AM group (nothing else of such a batch is counted; see :class:`Link`).
    seconds : wall time spent producing these counts.
    """

    n: int = 544
    k: int = K_MSG
    n_phys: int = 8
    n_pcsl: int = 16
    pairs: int = 0
    codewords: int = 0
    line_symbols: int = 0
    lane_symbol_errors: NDArray[np.int64] = field(default_factory=lambda: _zeros(8))
    lane_bit_errors: NDArray[np.int64] = field(default_factory=lambda: _zeros(8))
    pcs_lane_bit_errors: NDArray[np.int64] = field(default_factory=lambda: _zeros(16))
    pcs_lane_symbol_errors: NDArray[np.int64] = field(default_factory=lambda: _zeros(16))
    pcs_lane_corrected: NDArray[np.int64] = field(default_factory=lambda: _zeros(16))
    bit_errors: int = 0
    symbol_errors: int = 0
    hist: NDArray[np.int64] = field(default_factory=lambda: _zeros(545))
    corrected_codewords: int = 0
    uncorrected_codewords: int = 0
    corrected_symbols: int = 0
    miscorrected_codewords: int = 0
    codeword_errors: int = 0
    undetected_codeword_errors: int = 0
    post_fec_symbol_errors: int = 0
    post_fec_bit_errors: int = 0
    message_bits: int = 0
    frames: int = 0
    frames_ok: int = 0
    fcs_errors: int = 0
    payload_bits: int = 0
    payload_bit_errors: int = 0
    marked_blocks: int = 0
    block_errors: int = 0
    lock_failures: int = 0
    seconds: float = 0.0

    @classmethod
    def empty(cls, n: int, n_phys: int, n_pcsl: int) -> "LinkCounters":
        return cls(n=n, n_phys=n_phys, n_pcsl=n_pcsl, lane_symbol_errors=_zeros(n_phys),
                   lane_bit_errors=_zeros(n_phys), pcs_lane_bit_errors=_zeros(n_pcsl),
                   pcs_lane_symbol_errors=_zeros(n_pcsl), pcs_lane_corrected=_zeros(n_pcsl), hist=_zeros(n + 1))

    @property
    def line_bits(self) -> int:
        """Line bits sent (= RS bits of all codewords = 2 per PAM4 symbol)."""
        return self.codewords * self.n * 10

    def merge(self, other: "LinkCounters") -> "LinkCounters":
        """Add ``other`` into ``self`` (same geometry required); returns ``self``."""
        if not isinstance(other, LinkCounters):
            raise TypeError(f"can only merge LinkCounters, got {type(other).__name__}")
        if (self.n, self.k, self.n_phys, self.n_pcsl) != (other.n, other.k, other.n_phys, other.n_pcsl):
            raise ValueError("cannot merge counters of different link geometries "
                             f"({(self.n, self.n_phys, self.n_pcsl)} vs {(other.n, other.n_phys, other.n_pcsl)})")
        for name in _COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def copy(self) -> "LinkCounters":
        return LinkCounters(**{f.name: (np.array(v) if isinstance(v := getattr(self, f.name), np.ndarray) else v)
                               for f in fields(self)})

    def rates(self, confidence: float = 0.95) -> dict[str, RateEstimate]:
        """Every rate with its exact (Clopper-Pearson) interval.

        ``pre_fec_ber`` (line/RS bits), ``ser`` (PAM4 line symbols), ``rs_ser`` (10-bit symbols),
        ``fer`` (codeword errors / codewords), ``post_fec_ber`` (message bits at the decoder output,
        interval from :meth:`_post_fec_ber`), and ``payload_ber`` at the ``pcs`` level.  The other
        intervals treat events as independent trials: right for i.i.d. AWGN without precoding,
        too narrow for bursts and precoded pairs of errors.
        """
        out = {
            "pre_fec_ber": rate(self.bit_errors, self.line_bits, confidence),
            "ser": rate(int(self.lane_symbol_errors.sum()), self.line_symbols, confidence),
            "rs_ser": rate(self.symbol_errors, self.codewords * self.n, confidence),
            "fer": rate(self.codeword_errors, self.codewords, confidence),
            "post_fec_ber": self._post_fec_ber(confidence),
        }
        if self.payload_bits:
            out["payload_ber"] = rate(self.payload_bit_errors, self.payload_bits, confidence)
        return out

    def _post_fec_ber(self, confidence: float) -> RateEstimate:
        """Post-FEC BER with an interval that respects clustering: residual bit errors come in
        whole failed codewords (~t+1 symbols each), so a Clopper-Pearson interval on bits would be
        far too narrow.  With >= 1 codeword error the interval is the union of the bit-level
        Clopper-Pearson interval (right for independent bit errors, e.g. no decoding) and the FER
        interval times the mean wrong bits per wrong codeword over the message bits per codeword
        (right when errors cluster in failed words; the spread of that mean is ignored), i.e.
        conservative; with none, the bit-level interval (assumes independent bits)."""
        bits = rate(self.post_fec_bit_errors, self.message_bits, confidence)
        if self.codeword_errors == 0 or self.codewords == 0:
            return bits
        fer = rate(self.codeword_errors, self.codewords, confidence)
        scale = (self.post_fec_bit_errors / self.codeword_errors) / (self.k * 10)
        return RateEstimate(bits.events, bits.trials, min(fer.lo * scale, bits.lo), max(fer.hi * scale, bits.hi))

    def as_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "LinkCounters":
        kw = {}
        for f in fields(cls):
            if f.name in d:
                v = d[f.name]
                kw[f.name] = np.asarray(v, dtype=np.int64) if isinstance(v, list) else v
        return cls(**kw)


_COUNT_FIELDS = tuple(f.name for f in fields(LinkCounters) if f.name not in ("n", "k", "n_phys", "n_pcsl"))


@dataclass(frozen=True)
class LinkResult:
    """Result of :meth:`Link.run`: the ``counters`` and the payload error pattern.

    ``payload_errors``: sorted payload bit offsets (``64 b + i`` over the run's 66b data blocks,
    ``pcs`` level; at the ``codeword`` level, message bit offsets ``5140 c + 10 i + b`` over the
    run's codewords).  ``frames_sent`` / ``frames_ok`` are per run.
    """

    config: LinkConfig
    counters: LinkCounters
    payload_errors: NDArray[np.int64]

    def rates(self) -> dict[str, RateEstimate]:
        return self.counters.rates()


# ------------------------------------------------------------------------------------- channels


def _as_lane_channels(channels, n_phys: int) -> tuple:
    if channels is None:
        return (Noiseless(),) * n_phys
    if isinstance(channels, LaneChannels):
        chans = channels.channels
    elif isinstance(channels, Channel):
        return (channels,) * n_phys
    else:
        chans = tuple(channels)
    if len(chans) != n_phys:
        raise ValueError(f"need one channel per physical lane ({n_phys}), got {len(chans)}")
    for i, c in enumerate(chans):
        if not isinstance(c, Channel):
            raise TypeError(f"channel {i} ({type(c).__name__}) lacks apply/sample_symbol_errors")
    return tuple(chans)


def _seed_sequence(seed) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if seed is None or isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0 or a numpy SeedSequence, got {seed!r}")
    return np.random.SeedSequence(int(seed))


def _sorted_unique(a: NDArray[np.int64]):
    """``(values, first_index, counts)`` of a *sorted* array (cheaper than ``np.unique``)."""
    if a.size == 0:
        e = np.zeros(0, np.int64)
        return a[:0], e, e
    start = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    counts = np.diff(np.append(start, a.size))
    return a[start], start, counts


def _neighbours(pos: NDArray[np.int64], n_sym: int) -> NDArray[np.int64]:
    """Sorted union of ``pos``, ``pos - 1`` and ``pos + 1`` inside ``[0, n_sym)``."""
    U = np.sort(np.concatenate([pos - 1, pos, pos + 1]))
    U = _sorted_unique(U)[0]
    return U[(U >= 0) & (U < n_sym)]


def _flips(pos, sent_at, recv_at, n_sym: int, precoded: bool, init: int, neighbour_sent=None):
    """Wrong physical-lane bit positions for sparse line errors (see :func:`_link_kernels.line_flips`).

    ``sent_at``/``recv_at`` are the levels at ``pos``; ``neighbour_sent(U)`` gives the sent levels
    at the non-error neighbours (precoded case only).
    """
    if pos.size == 0:
        return np.zeros(0, np.int64)
    if precoded:
        U = _neighbours(pos, n_sym)
        is_err = np.isin(U, pos, assume_unique=True)
        sent = np.empty(U.size, np.uint8)
        recv = np.empty(U.size, np.uint8)
        sent[is_err] = sent_at
        recv[is_err] = recv_at
        others = U[~is_err]
        nb = neighbour_sent(others)
        sent[~is_err] = nb
        recv[~is_err] = nb
    else:
        U, is_err, sent, recv = pos, np.ones(pos.size, np.bool_), sent_at, recv_at
    out = np.empty(4 * U.size + 4, np.int64)
    m = _k.line_flips(np.ascontiguousarray(U, np.int64), np.ascontiguousarray(sent, np.uint8),
                      np.ascontiguousarray(recv, np.uint8), is_err, n_sym, bool(precoded), int(init), out)
    return out[:m]


# ------------------------------------------------------------------------------------- the link


class _Base:
    def __init__(self, config: LinkConfig, channels=None) -> None:
        if not isinstance(config, LinkConfig):
            raise TypeError(f"config must be a LinkConfig, got {type(config).__name__}")
        self.config = config
        self.geometry = geometry(config)
        self.channels = _as_lane_channels(channels, self.geometry.n_phys)
        self._gather64 = np.ascontiguousarray(self.geometry.gather, np.int64)

    def _new_counters(self) -> LinkCounters:
        g = self.geometry
        return LinkCounters.empty(g.n, g.n_phys, g.n_pcsl)

    def _locate(self, lane: int, q: NDArray[np.int64]):
        """Physical lane bits -> (PCS lane L, PCS-lane bit u, codeword c = 2 p + X, symbol t, bit b)."""
        g = self.geometry
        m = q.size
        L, u, c, t, b = (np.empty(m, np.int64) for _ in range(5))
        _k.locate(np.ascontiguousarray(q, np.int64), int(lane), g.order, self._gather64, g.n, g.K, L, u, c, t, b)
        return L, u, c, t, b

    def _line_counts(self, ctr: LinkCounters, per_lane) -> tuple:
        """Fill the pre-FEC counters from per-lane (n_line_errors, flips); return flat (L, u, c, t, b)."""
        g = self.geometry
        parts = []
        for i, (n_err, q) in enumerate(per_lane):
            ctr.lane_symbol_errors[i] += n_err
            ctr.lane_bit_errors[i] += q.size
            if q.size:
                parts.append(self._locate(i, q))
        if parts:
            L, u, c, t, b = (np.concatenate(x) for x in zip(*parts))
        else:
            L = u = c = t = b = np.zeros(0, np.int64)
        ctr.bit_errors += int(L.size)
        ctr.pcs_lane_bit_errors += np.bincount(L, minlength=g.n_pcsl).astype(np.int64)
        return L, u, c, t, b

    @staticmethod
    def _symbol_errors(c, t, b, n: int):
        """Unique wrong symbols: (key = c n + t sorted, XOR error value)."""
        if c.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.uint16)
        kb = np.sort((c.astype(np.int64) * n + t) << 4 | b)  # one sort of (symbol, bit) keys
        key, val = kb >> 4, np.int64(1) << (kb & 15)
        ukey, start, _ = _sorted_unique(key)
        return ukey, np.bitwise_or.reduceat(val, start).astype(np.uint16)  # distinct bits: OR == XOR

    def _pre_symbol_counts(self, ctr: LinkCounters, ukey, n_words: int):
        g = self.geometry
        c, t = ukey // g.n, ukey % g.n
        w = np.bincount(c, minlength=n_words)
        ctr.hist += np.bincount(w, minlength=g.n + 1)[: g.n + 1].astype(np.int64)
        ctr.symbol_errors += int(ukey.size)
        ctr.pcs_lane_symbol_errors += np.bincount(g.lane_of[c % 2, t], minlength=g.n_pcsl).astype(np.int64)
        return w


class Link(_Base):
    """The composed, bit-exact link (see the module docstring).

    Parameters
    ----------
    config : :class:`LinkConfig`.
    channels : one channel for every physical lane, a sequence with one per lane, a
        :class:`phy802.channel.LaneChannels`, or ``None`` (noiseless).  Any object with the
        :class:`phy802.channel.Channel` methods works.
    pma : ``"sparse"`` (default: the channel's sparse errors are carried back as bit flips into
        the PCS lane symbols; the line is built densely by one kernel only when a lane's channel
        is not a plain :class:`Pam4Awgn` or the precoder is on, else the AWGN sampler reads the
        sent level of each candidate position straight from the lane symbols) or ``"dense"``
        (every stage through the
        :mod:`phy802.pma` functions on full bit arrays; the oracle of the sparse path -- both give
        identical results for the same seed with channels whose ``apply`` equals
        ``sample_symbol_errors`` applied, as all :mod:`phy802.channel` models do).

    Notes
    -----
    Every batch is a fresh transmission with one AM group at its start.  The receiver must lock
    every PCS lane on that marker (:func:`phy802.pcs.alignment.lock_lanes`, which needs 2 of the
    3 common marker symbols exact); at pre-FEC BER above ~1e-3 a marker is occasionally unreadable.
    Such a batch is dropped as a whole and counted in ``lock_failures`` (for i.i.d. channels this
    biases nothing but the 12 marker symbols per lane; the sweep's fast path has no lock).

    Example
    -------
    >>> from phy802.link import Link, LinkConfig
    >>> from phy802.channel import Pam4Awgn
    >>> res = Link(LinkConfig(fec="kp4"), Pam4Awgn.from_ber(1e-4)).run(64, seed=1)
    >>> res.counters.uncorrected_codewords
    0
    """

    def __init__(self, config: LinkConfig, channels=None, *, pma: Literal["sparse", "dense"] = "sparse") -> None:
        super().__init__(config, channels)
        if pma not in ("sparse", "dense"):
            raise ValueError(f"pma must be 'sparse' or 'dense', got {pma!r}")
        self.pma = pma
        # no line array needed: non-precoded PAM4 AWGN lanes (exact type: the sampler is replicated)
        self._lazy_line = (pma == "sparse" and not config.precoding
                           and all(type(ch) is Pam4Awgn for ch in self.channels))
        if config.level == "pcs":
            self._tx = PcsTransmitter(config.pcs_config)
            self._rx = PcsReceiver(config.pcs_config)
        self._spread = _k.spread_table(self.geometry.r)

    # ---------------------------------------------------------------- PMA both ways
    def _line(self, lanes: NDArray[np.uint16]) -> NDArray[np.uint8]:
        cfg, g = self.config, self.geometry
        if self.pma == "dense":
            bits = ((lanes[:, :, None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8).reshape(g.n_pcsl, -1)
            sym = gray_map(cfg.mux.mux(bits))  # 120.5.2 then 120.5.7.1
            return precode(sym, cfg.precoder_init) if cfg.precoding else sym  # 120.5.7.2
        out = np.empty((g.n_phys, lanes.shape[1] * 5 * g.r), np.uint8)
        return _k.pam4_line(np.ascontiguousarray(lanes, np.uint16), g.order, self._spread, bool(cfg.precoding),
                            int(cfg.precoder_init), out)

    def _channel(self, lanes: NDArray[np.uint16], ss: np.random.SeedSequence, ctr: LinkCounters):
        """Send ``lanes`` (PCS lane symbols) over the PMA and channels; return received lanes and
        the located bit errors."""
        cfg, g = self.config, self.geometry
        if self._lazy_line:
            return self._channel_lazy(lanes, ss, ctr)
        line = self._line(lanes)
        rngs = spawn(ss, g.n_phys)
        n_sym = line.shape[1]
        ctr.line_symbols += line.size
        if self.pma == "dense":
            rx_line = np.stack([ch.apply(line[i], rngs[i]) for i, ch in enumerate(self.channels)]).astype(np.uint8)
            data = precode_decode(rx_line, cfg.precoder_init) if cfg.precoding else rx_line
            bits = cfg.mux.demux(gray_demap(data))  # [n_pcsl, 10 N]
            rx = (bits.reshape(g.n_pcsl, -1, 10).astype(np.uint16) << np.arange(10, dtype=np.uint16)).sum(
                axis=2, dtype=np.uint16)
            tx_bits = cfg.mux.mux(((lanes[:, :, None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8).reshape(
                g.n_pcsl, -1))
            per_lane = []
            for i in range(g.n_phys):
                n_err = int(np.count_nonzero(rx_line[i] != line[i]))
                q = np.flatnonzero(gray_demap(data[i]) != tx_bits[i]).astype(np.int64)
                per_lane.append((n_err, q))
            return rx, self._line_counts(ctr, per_lane)
        per_lane = []
        for i, ch in enumerate(self.channels):
            err = ch.sample_symbol_errors(line[i], rngs[i])
            pos = np.asarray(err.positions, np.int64)
            q = _flips(pos, line[i][pos], np.asarray(err.values, np.uint8), n_sym, cfg.precoding,
                       cfg.precoder_init, lambda U, row=line[i]: row[U])
            per_lane.append((int(pos.size), q))
        loc = self._line_counts(ctr, per_lane)
        rx = np.array(lanes, dtype=np.uint16, copy=True)
        L, u = loc[0], loc[1]
        if L.size:
            _k.xor_flips(rx, L, u)
        return rx, loc

    def _channel_lazy(self, lanes: NDArray[np.uint16], ss: np.random.SeedSequence, ctr: LinkCounters):
        """:meth:`_channel` for the sparse PMA without precoder on :class:`Pam4Awgn` lanes: the
        line is never built; the AWGN sampler reads the sent level of each candidate position
        from the PCS lane symbols (same draws, so the same errors as the dense line).  The flips
        go into ``lanes`` itself (both callers pass a temporary they do not read again)."""
        g = self.geometry
        syms = np.ascontiguousarray(lanes, np.uint16)
        rngs = spawn(ss, g.n_phys)
        n_sym = lanes.shape[1] * 5 * g.r
        ctr.line_symbols += g.n_phys * n_sym
        found = []
        for i, ch in enumerate(self.channels):
            p_err, cdf = ch._tables()
            mean = n_sym * float(p_err.max())
            cap = int(min(n_sym, mean + 8.0 * math.sqrt(mean) + 64))
            found.append(_k.awgn_line_errors(syms, i, g.order, n_sym, p_err, cdf, rngs[i], cap))
        n_err = np.array([f[0].size for f in found], np.int64)
        start = np.zeros(g.n_phys + 1, np.int64)
        np.cumsum(n_err, out=start[1:])
        pos, sent, recv = (np.concatenate([f[j] for f in found]) for j in range(3))
        m_max = 2 * int(start[-1])
        L, u, c, t, b = (np.empty(m_max, np.int64) for _ in range(5))
        lane_bits = np.zeros(g.n_phys, np.int64)
        m = _k.locate_level_errors(start, pos, sent, recv, g.order, self._gather64, g.n, g.K, lane_bits,
                                   L, u, c, t, b)
        L, u, c, t, b = L[:m], u[:m], c[:m], t[:m], b[:m]
        ctr.lane_symbol_errors += n_err
        ctr.lane_bit_errors += lane_bits
        ctr.bit_errors += m
        ctr.pcs_lane_bit_errors += np.bincount(L, minlength=g.n_pcsl).astype(np.int64)
        loc = (L, u, c, t, b)
        rx = syms
        L, u = loc[0], loc[1]
        if L.size:
            _k.xor_flips(rx, L, u)
        return rx, loc

    # ---------------------------------------------------------------- post-FEC counts
    def _post(self, ctr, tx_cw, dec_cw, ncorr, c, t, b, rx_corrected_per_lane=None):
        """Decoder and post-FEC counters; ``tx_cw``/``dec_cw`` are flat ``[C, n]``."""
        cfg, g = self.config, self.geometry
        C = tx_cw.shape[0]
        ukey, _ = self._symbol_errors(c, t, b, g.n)
        w = self._pre_symbol_counts(ctr, ukey, C)
        ctr.codewords += C
        ctr.pairs += C // 2
        ctr.message_bits += C * K_MSG * 10
        dec = cfg.decoder
        if dec is not None:
            ctr.corrected_codewords += int((ncorr > 0).sum())
            ctr.uncorrected_codewords += int((ncorr < 0).sum())
            ctr.corrected_symbols += int(ncorr[ncorr > 0].sum())
        # the decoder only touches words with a nonzero syndrome, i.e. words with errors
        nsym, nbit, ncw, und, mis = _k.post_fec_counts(
            np.ascontiguousarray(tx_cw, np.uint16), np.ascontiguousarray(dec_cw, np.uint16), w,
            np.ascontiguousarray(ncorr, np.int64) if dec is not None else np.zeros(C, np.int64),
            K_MSG, dec is not None, dec == "correct", _POP10)
        ctr.post_fec_symbol_errors += int(nsym)
        ctr.post_fec_bit_errors += int(nbit)
        ctr.codeword_errors += int(ncw)
        ctr.undetected_codeword_errors += int(und)
        ctr.miscorrected_codewords += int(mis)
        if rx_corrected_per_lane is not None:
            ctr.pcs_lane_corrected += rx_corrected_per_lane
        return w

    # ---------------------------------------------------------------- batches
    def _batch_pcs(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters, block_offset: int):
        cfg = self.config
        pcs = cfg.pcs_config
        data_ss, chan_ss = ss.spawn(2)
        drng = np.random.default_rng(data_ss)
        frames_sent = 0
        if cfg.payload == "data":
            n66 = 4 * pcs.data_blocks_257(P)
            blocks = Blocks66(np.full(n66, SYNC_DATA, np.uint8),
                              drng.integers(0, np.iinfo(np.uint64).max, n66, dtype=np.uint64, endpoint=True))
        else:
            per = 3 + (cfg.frame_bytes + 4) // 8
            frames_sent = max(1, (4 * pcs.data_blocks_257(P) - 3) // per)
            blocks = frames_to_blocks([drng.bytes(cfg.frame_bytes) for _ in range(frames_sent)])
        tx = self._tx.transmit(blocks)
        out = ctr
        ctr = self._new_counters()  # merged into ``out`` only once the receiver has locked
        rx_lanes, (L, u, c, t, b) = self._channel(tx.lanes, chan_ss, ctr)
        try:
            res = self._rx(rx_lanes, frames=cfg.payload == "frames")
        except LockError:
            out.lock_failures += 1
            return np.zeros(0, np.int64), len(blocks)
        n = self.geometry.n
        self._post(ctr, tx.codewords.reshape(-1, n), res.codewords.reshape(-1, n), res.n_corrected.reshape(-1),
                   c, t, b, rx_corrected_per_lane=np.asarray(res.counters.symbol_errors, np.int64))
        pc = res.counters
        ctr.marked_blocks += pc.marked_blocks
        ctr.block_errors += pc.block_errors
        ctr.frames += frames_sent
        if cfg.payload == "frames":
            ctr.frames_ok += pc.frames_delivered
            ctr.fcs_errors += pc.fcs_errors
        perr = payload_bit_errors(blocks, res.blocks)
        ctr.payload_bits += 64 * len(blocks)
        ctr.payload_bit_errors += int(perr.size)
        out.merge(ctr)
        return perr + 64 * block_offset, len(blocks)

    def _batch_codeword(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters, word_offset: int):
        cfg, g = self.config, self.geometry
        code = cfg.code
        data_ss, chan_ss = ss.spawn(2)
        msgs = np.random.default_rng(data_ss).integers(0, 1024, (P, 2, K_MSG), dtype=np.uint16)
        cw = encode(code, msgs).reshape(-1, g.n)  # parity is sent in every mode (filler for bypass/none)
        lanes = np.ascontiguousarray(cw.reshape(P, 2 * g.n)[:, g.gather].transpose(1, 0, 2).reshape(g.n_pcsl, -1))
        rx_lanes, (L, u, c, t, b) = self._channel(lanes, chan_ss, ctr)
        rx = np.empty((P, 2 * g.n), np.uint16)
        rx[:, g.gather] = rx_lanes.reshape(g.n_pcsl, P, g.K).transpose(1, 0, 2)
        rx = rx.reshape(-1, g.n)
        if cfg.decoder is None:
            dec, ncorr = rx, np.zeros(rx.shape[0], np.int16)
        else:
            dec, ncorr = decode(code, rx, mode=cfg.decoder)
        per_lane = np.zeros(g.n_pcsl, np.int64)
        if cfg.decoder == "correct":
            fixed = np.flatnonzero(ncorr > 0)
            if fixed.size:
                rows, cols = np.nonzero(rx[fixed] != dec[fixed])
                per_lane = np.bincount(g.lane_of[fixed[rows] % 2, cols], minlength=g.n_pcsl).astype(np.int64)
        self._post(ctr, cw, dec, ncorr, c, t, b, rx_corrected_per_lane=per_lane)
        hit = np.flatnonzero(np.any(cw[:, :K_MSG] != dec[:, :K_MSG], axis=1))
        if hit.size == 0:
            return np.zeros(0, np.int64), cw.shape[0]
        d = (cw[hit, :K_MSG] ^ dec[hit, :K_MSG])
        wi, si = np.nonzero(d)
        bits = (d[wi, si][:, None] >> np.arange(10, dtype=np.uint16)) & 1
        r_, bb = np.nonzero(bits)
        pos = (hit[wi[r_]] + word_offset).astype(np.int64) * (K_MSG * 10) + si[r_] * 10 + bb
        return np.sort(pos), cw.shape[0]

    def run_batch(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters, offset: int = 0):
        """Add one independent transmission of ``P`` pairs to ``ctr``.

        Returns ``(payload_errors, used)``: error offsets shifted by ``offset`` units (66b blocks at
        the ``pcs`` level, codewords at the ``codeword`` level) and the units this batch used.
        """
        if self.config.level == "pcs":
            return self._batch_pcs(int(P), ss, ctr, offset)
        return self._batch_codeword(int(P), ss, ctr, offset)

    def run(self, n_pairs: int, seed, *, batch_pairs: int = 256, keep_errors: bool = True) -> LinkResult:
        """Send ``n_pairs`` codeword pairs (at least; the ``frames`` payload rounds up a little).

        Each batch of ``batch_pairs`` pairs is an independent transmission from a fresh start
        (AM group, scrambler seed, precoder state); batch ``j`` draws its payload and each lane's
        channel from children of ``SeedSequence(seed)``, so a seed gives identical results.
        """
        if not isinstance(n_pairs, (int, np.integer)) or n_pairs <= 0:
            raise ValueError(f"n_pairs must be a positive int, got {n_pairs!r}")
        if not isinstance(batch_pairs, (int, np.integer)) or batch_pairs <= 0:
            raise ValueError(f"batch_pairs must be a positive int, got {batch_pairs!r}")
        ss = _seed_sequence(seed)
        ctr = self._new_counters()
        t0 = time.perf_counter()
        errs, offset, done = [], 0, 0
        n_batches = -(-int(n_pairs) // int(batch_pairs))
        for j, child in enumerate(ss.spawn(n_batches)):
            P = min(int(batch_pairs), int(n_pairs) - done)
            done += P
            e, used = self.run_batch(P, child, ctr, offset)
            offset += used
            if keep_errors and e.size:
                errs.append(e)
        ctr.seconds = time.perf_counter() - t0
        pe = np.concatenate(errs) if errs else np.zeros(0, np.int64)
        return LinkResult(self.config, ctr, pe)


# ------------------------------------------------------------------------------------- fast path


def _lane_sampler(channel, n_sym: int, rng: np.random.Generator):
    """Data-free line errors of one lane for i.i.d. uniform sent levels (scrambled data).

    Returns ``(positions, sent, received, neighbour_sent)`` where ``neighbour_sent(U)`` draws the
    sent level at error-free positions from its exact conditional law.
    """
    if isinstance(channel, Noiseless):
        e = np.zeros(0, np.int64)
        return e, e.astype(np.uint8), e.astype(np.uint8), None
    if isinstance(channel, Pam4Awgn):
        ev = channel.sample_iid_errors(n_sym, rng)
        T = channel.transition
        ok = np.clip(np.diag(T), 0.0, 1.0)
        law = ok / ok.sum() if ok.sum() > 0 else np.full(4, 0.25)  # P(sent = s | no error), uniform prior

        def nb(U):
            return rng.choice(4, size=U.size, p=law).astype(np.uint8)

        return (np.asarray(ev.positions, np.int64), np.asarray(ev.sent, np.uint8),
                np.asarray(ev.received, np.uint8), nb)
    if hasattr(channel, "sample_events"):  # burst models: error events independent of the data
        ev = channel.sample_events(n_sym, rng)
        sent = rng.integers(0, 4, ev.positions.size, dtype=np.uint8)
        recv = signs_to_values(sent, ev.signs)

        def nb(U):
            return rng.integers(0, 4, U.size, dtype=np.uint8)

        return np.asarray(ev.positions, np.int64), sent, recv, nb
    # any other channel: draw the whole line (exact, slower)
    line = rng.integers(0, 4, n_sym, dtype=np.uint8)
    err = channel.sample_symbol_errors(line, rng)
    pos = np.asarray(err.positions, np.int64)
    return pos, line[pos], np.asarray(err.values, np.uint8), lambda U: line[U]


class FastLink(_Base):
    """Codeword-level simulator on the error pattern alone (see the module docstring).

    Same :class:`LinkConfig` (``level`` and ``payload`` are ignored), same geometry and counters
    as :class:`Link` (payload/frame counters stay 0).  Sent levels are taken i.i.d. uniform (the
    scrambled stream; AM and parity symbols are treated the same way).
    """

    def auto_batch(self) -> int:
        """Batch size (pairs) giving ~20000 line errors per lane per batch at the channels' SER
        (where they expose ``ser``), within 4096 .. 2^20 pairs: big batches at low BER amortise the
        fixed per-batch cost, small ones at high BER bound the memory."""
        sers = [float(getattr(ch, "ser", 0.0) or 0.0) for ch in self.channels]
        ser = max(sers) if sers else 0.0
        if ser <= 0:
            return 1 << 20
        pairs = 20000.0 / (ser * self.geometry.line_symbols_per_pair)
        return int(min(max(pairs, 4096), 1 << 20))

    def run(self, n_pairs: int, seed, *, batch_pairs: int | None = None, max_seconds: float | None = None,
            target_errors: int | None = None) -> LinkResult:
        """Simulate ``n_pairs`` pairs in batches (default :meth:`auto_batch`); optional early stop
        once ``target_errors`` codeword errors are seen or after ``max_seconds`` (checked between
        batches)."""
        if not isinstance(n_pairs, (int, np.integer)) or n_pairs <= 0:
            raise ValueError(f"n_pairs must be a positive int, got {n_pairs!r}")
        if batch_pairs is None:
            batch_pairs = self.auto_batch()
        ss = _seed_sequence(seed)
        ctr = self._new_counters()
        t0 = time.perf_counter()
        done = 0
        while done < n_pairs:
            P = min(int(batch_pairs), int(n_pairs) - done)
            self.run_batch(P, ss.spawn(1)[0], ctr)
            done += P
            if target_errors is not None and ctr.codeword_errors >= target_errors:
                break
            if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                break
        ctr.seconds = time.perf_counter() - t0
        return LinkResult(self.config, ctr, np.zeros(0, np.int64))

    def run_batch(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters) -> LinkCounters:
        """Add one batch of ``P`` pairs (one independent transmission) to ``ctr``."""
        cfg, g = self.config, self.geometry
        code = cfg.code
        n_sym = P * g.line_symbols_per_pair
        rngs = spawn(ss, g.n_phys)
        per_lane = []
        for i, ch in enumerate(self.channels):
            pos, sent, recv, nb = _lane_sampler(ch, n_sym, rngs[i])
            q = _flips(pos, sent, recv, n_sym, cfg.precoding, cfg.precoder_init, nb)
            per_lane.append((int(pos.size), q))
        ctr.line_symbols += n_sym * g.n_phys
        L, u, c, t, b = self._line_counts(ctr, per_lane)
        C = 2 * P
        ctr.codewords += C
        ctr.pairs += P
        ctr.message_bits += C * K_MSG * 10
        ukey, uval = self._symbol_errors(c, t, b, g.n)
        w = self._pre_symbol_counts(ctr, ukey, C)
        if ukey.size == 0:
            return ctr
        wc = ukey // g.n
        wt = ukey % g.n
        dec = cfg.decoder
        # residual error pattern at the decoder output, as (key, value)
        res_key, res_val = ukey, uval
        if dec == "correct":
            tt = code.t
            light = (w[wc] <= tt)
            fixed_words = _sorted_unique(wc[light])[0]
            ctr.corrected_codewords += int(fixed_words.size)
            ctr.corrected_symbols += int(light.sum())
            ctr.pcs_lane_corrected += np.bincount(g.lane_of[wc[light] % 2, wt[light]], minlength=g.n_pcsl).astype(np.int64)
            hk, hv = ukey[~light], uval[~light]
            res_key, res_val = hk, hv
            if hk.size:
                hw_c = hk // g.n
                words, start, cnt = _sorted_unique(hw_c)
                rank = np.arange(hk.size) - np.repeat(start, cnt)
                row = np.repeat(np.arange(words.size), cnt)
                pos_pad = np.zeros((words.size, int(cnt.max())), np.int64)
                val_pad = np.zeros_like(pos_pad, dtype=np.uint16)
                pos_pad[row, rank] = hk % g.n
                val_pad[row, rank] = hv
                S = syndromes_sparse(code, pos_pad, val_pad)
                cpos, cval, ccnt = decode_syndromes(code, S)  # only the heavy words are decoded
                mis = ccnt >= 0
                ctr.uncorrected_codewords += int((~mis).sum())
                ctr.miscorrected_codewords += int(mis.sum())
                ctr.corrected_codewords += int(mis.sum())
                if mis.any():
                    used = (cpos >= 0) & mis[:, None]
                    mr, mcol = np.nonzero(used)
                    cw_of = words[mr]
                    ctr.corrected_symbols += int(mr.size)
                    ctr.pcs_lane_corrected += np.bincount(g.lane_of[cw_of % 2, cpos[mr, mcol]],
                                                          minlength=g.n_pcsl).astype(np.int64)
                    allk = np.concatenate([hk, cw_of.astype(np.int64) * g.n + cpos[mr, mcol]])
                    allv = np.concatenate([hv, cval[mr, mcol]]).astype(np.int64)
                    o = np.argsort(allk, kind="stable")
                    allk, allv = allk[o], allv[o]
                    uk, st, _ = _sorted_unique(allk)
                    uv = np.bitwise_xor.reduceat(allv, st)
                    nz = uv != 0
                    res_key, res_val = uk[nz], uv[nz].astype(np.uint16)
                flagged_words = words[~mis]
            else:
                flagged_words = np.zeros(0, np.int64)
        elif dec == "detect":
            words = _sorted_unique(wc)[0]
            flagged = w[words] <= 2 * code.t  # d = 2t + 1: a nonzero pattern of weight <= 2t is seen
            heavy = words[~flagged]
            if heavy.size:
                sel = np.isin(wc, heavy)
                hk, hv = ukey[sel], uval[sel]
                _, start, cnt = _sorted_unique(hk // g.n)
                rank = np.arange(hk.size) - np.repeat(start, cnt)
                row = np.repeat(np.arange(heavy.size), cnt)
                pos_pad = np.zeros((heavy.size, int(cnt.max())), np.int64)
                val_pad = np.zeros_like(pos_pad, dtype=np.uint16)
                pos_pad[row, rank] = hk % g.n
                val_pad[row, rank] = hv
                flagged[~flagged] = np.any(syndromes_sparse(code, pos_pad, val_pad) != 0, axis=1)
            flagged_words = words[flagged]
            ctr.uncorrected_codewords += int(flagged_words.size)
        else:
            flagged_words = np.zeros(0, np.int64)
        msg = (res_key % g.n) < K_MSG
        mk, mv = res_key[msg], res_val[msg]
        ctr.post_fec_symbol_errors += int(mk.size)
        ctr.post_fec_bit_errors += int(_POP10[mv].sum())
        bad_words = _sorted_unique(mk // g.n)[0]
        ctr.codeword_errors += int(bad_words.size)
        ctr.undetected_codeword_errors += int(np.count_nonzero(~np.isin(bad_words, flagged_words)))
        return ctr
