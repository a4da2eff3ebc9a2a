"""800G / 1.6T links with the Clause 177 inner code concatenated with KP4.

What is modelled (codeword level; the 802.3dj drafts as docs/800g.md cites them):

* **Outer code**: RS(544,514) "KP4" [C], unchanged from 802.3bs; at 800G and 1.6T the PCS
  interleaves **X = 4** codewords [S] (``interleave``).  The stream is the X codewords' symbols
  in turn: stream symbol ``X i + x`` = symbol ``i`` of codeword ``x`` (10 bits, bit 0 first).
* **Lanes**: 800G = 4 physical lanes of 200G, 1.6T = 8 [C].  How the 802.3dj PCS/PMA builds its
  flows and lanes is **[?]** in the notes; our documented, configurable choice (``lane_rule``):
  ``"interleaved"`` (default) sends the X-symbol chunk ``i`` (symbol i of every codeword) to lane
  ``i mod L``, so every lane carries all X codewords and an inner block (12 RS symbols) holds 3
  symbols of each; ``"codeword"`` sends stream symbol ``s`` to lane ``s mod L`` (with X = 4 and
  L = 4 or 8 a lane then carries a single codeword, 12 symbols per block: the worst case for
  inner-block failures).  No alignment markers, scrambler or 257b framing (random message
  symbols are what scrambled data looks like).
* **Inner code** per lane (Clause 177, :mod:`phy802.fec.inner`): the lane's bits cut into
  120-bit messages, each encoded to 128 bits (line rate x 128/120), Gray-mapped PAM4, one
  :class:`phy802.channel.Pam4Awgn` per lane, then ``inner_decoder`` ``"hard"`` (single-error
  correction, the sample says which neighbour) or ``"chase"`` (Chase-2, ``n_lrp`` least reliable
  positions), or ``inner="none"`` (the slicer's bits straight to KP4, same PAM4 symbol rate).
* **Hops** (``hops``, ``outer``): a path of H optical hops, each terminating the inner code.
  ``"segmented"``: each hop also decodes KP4 and re-encodes the delivered message;
  ``"end_to_end"``: KP4 is decoded only at the far end, so the hops' residual symbol errors add up
  in the same codewords (the 802.3df "bypass the module's FEC termination" option [S]).
* ``fec``: ``"ieee"`` (KP4 corrects) or ``"bypass"`` (no outer decoding); ``erasure``: the
  inner decoder's flagged blocks erased for KP4 (``2 e + v <= 30``, a decision model).

Two paths, one counter set (:class:`ConcatCounters`):

* :class:`ConcatLink` ``path="exact"``: every bit -- KP4 encode, interleave, inner encode, PAM4
  AWGN samples, inner and KP4 decode.
* ``path="fast"``: data-free.  Slicer errors are sampled sparsely per lane
  (:meth:`Pam4Awgn.sample_iid_errors`); only the inner blocks holding one are built, their 64
  samples drawn from the exact conditional law (:func:`phy802.link._kernels.inner_error_blocks`:
  a block without slicer errors always decodes to itself, also under Chase-2, whose hard-decision
  candidate then has metric 0).  Valid because every symbol's inner/outer status is i.i.d.
  uniform under random data (B bits; the parity bits are functions of the pair-XORs, which are
  independent of the B bits) and the decoders act on the error pattern and the reliabilities
  only.  The residual RS symbol errors are judged by :func:`phy802.fec.error_pattern_outcome`.
  Post-FEC bit counts of failed codewords are the wrong message bits as delivered.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from phy802.channel import Pam4Awgn
from phy802.fec import KP4, decode, encode, error_pattern_outcome
from phy802.fec import inner as _inner
from phy802.link import _kernels as _k
from phy802.link._base import _seed_sequence
from phy802.stats import RateEstimate, clopper_pearson, rate

__all__ = ["INNER_RATES", "INNER_CODES", "ConcatConfig", "ConcatCounters", "ConcatResult", "ConcatLink", "Residual",
           "clustered_rate"]

#: the 200G-per-lane rates and their physical lanes
INNER_RATES: dict[str, int] = {"800G": 4, "1.6T": 8}
INNER_CODES: tuple[str, ...] = ("c177", "none")
_N, _K = KP4.n, KP4.k
_NO_SENT = np.zeros((0, 128), np.uint8)


@dataclass(frozen=True, slots=True)
class ConcatConfig:
    """Structure of an 800G/1.6T link with the inner code (module docstring).

    Parameters
    ----------
    rate : ``"800G"`` (4 lanes) or ``"1.6T"`` (8 lanes).
    inner : ``"c177"`` (default) or ``"none"``.
    inner_decoder : ``"hard"`` or ``"chase"`` (default).
    n_lrp : Chase-2 least reliable positions (0..6; default 2 = 4 test patterns [S]).
    fec : outer receive mode, ``"ieee"`` (correct, default) or ``"bypass"``.
    interleave : KP4 codewords interleaved symbol by symbol (default 4, the notes' X = 4 [S]).
    lane_rule : ``"interleaved"`` (default) or ``"codeword"`` ([?] choice, module docstring).
    hops : optical hops on the path (default 1); ``outer`` : ``"segmented"`` (default) or
        ``"end_to_end"``.
    erasure : erasure-aided KP4 (default off): the RS symbols of every inner block the inner
        decoder flags (status 2) are erased, and KP4 is modelled as a bounded-distance
        errors-and-erasures decoder that delivers the sent word iff ``2 e + v <= 30`` [C] and
        otherwise passes the word on flagged (a decision model, not an erasure decoder
        implementation).
    """

    rate: Literal["800G", "1.6T"] = "800G"
    inner: Literal["c177", "none"] = "c177"
    inner_decoder: Literal["hard", "chase"] = "chase"
    n_lrp: int = 2
    fec: Literal["ieee", "bypass"] = "ieee"
    interleave: int = 4
    lane_rule: Literal["interleaved", "codeword"] = "interleaved"
    hops: int = 1
    outer: Literal["segmented", "end_to_end"] = "segmented"
    erasure: bool = False

    def __post_init__(self) -> None:
        if self.rate not in INNER_RATES:
            raise ValueError(f"ConcatConfig.rate must be one of {', '.join(INNER_RATES)} (the 200G-per-lane rates "
                             f"with an inner code), got {self.rate!r}")
        if self.inner not in INNER_CODES:
            raise ValueError(f"ConcatConfig.inner must be one of {', '.join(INNER_CODES)}, got {self.inner!r}")
        if self.inner_decoder not in ("hard", "chase"):
            raise ValueError(f"ConcatConfig.inner_decoder must be 'hard' or 'chase', got {self.inner_decoder!r}")
        if isinstance(self.n_lrp, bool) or not isinstance(self.n_lrp, (int, np.integer)) or not 0 <= self.n_lrp <= 6:
            raise ValueError(f"ConcatConfig.n_lrp must be an int in 0..6, got {self.n_lrp!r}")
        if self.fec not in ("ieee", "bypass"):
            raise ValueError(f"ConcatConfig.fec must be 'ieee' or 'bypass', got {self.fec!r}")
        if self.interleave not in (1, 2, 4):
            raise ValueError(f"ConcatConfig.interleave must be 1, 2 or 4, got {self.interleave!r}")
        if self.lane_rule not in ("interleaved", "codeword"):
            raise ValueError(f"ConcatConfig.lane_rule must be 'interleaved' or 'codeword', got {self.lane_rule!r}")
        if isinstance(self.hops, bool) or not isinstance(self.hops, (int, np.integer)) or not 1 <= self.hops <= 16:
            raise ValueError(f"ConcatConfig.hops must be an int in 1..16, got {self.hops!r}")
        if self.outer not in ("segmented", "end_to_end"):
            raise ValueError(f"ConcatConfig.outer must be 'segmented' or 'end_to_end', got {self.outer!r}")
        if not isinstance(self.erasure, (bool, np.bool_)):
            raise ValueError(f"ConcatConfig.erasure must be a bool, got {self.erasure!r}")
        if self.erasure and (self.inner != "c177" or self.fec != "ieee"
                             or (self.hops > 1 and self.outer != "segmented")):
            raise ValueError("ConcatConfig.erasure needs inner='c177', fec='ieee' and one hop or segmented hops "
                             "(the erasures are the inner decoder's flags of the same hop)")

    @property
    def n_lanes(self) -> int:
        return INNER_RATES[self.rate]

    @property
    def n_lrp_used(self) -> int:
        """Test-pattern positions the decoder uses (0 = hard decision)."""
        return int(self.n_lrp) if self.inner_decoder == "chase" else 0

    @property
    def symbols_per_block(self) -> int:
        """RS symbols of one codeword per inner block (the ``m`` of :mod:`phy802.theory_inner`)."""
        per_lane_cw = _lane_codewords(self.interleave, self.n_lanes, self.lane_rule)
        return 12 // per_lane_cw

    @property
    def label(self) -> str:
        inner = "none" if self.inner == "none" else f"c177-{self.inner_decoder}"
        return f"kp4/{self.fec}+{inner}"


def _lane_codewords(X: int, L: int, rule: str) -> int:
    """How many distinct codewords share one inner block (12 consecutive lane symbols)."""
    idx = _lane_index(X, L, rule)
    return len(set((idx[0, :12] % X).tolist()))


@functools.lru_cache(maxsize=None)
def _lane_index(X: int, L: int, rule: str) -> NDArray[np.int64]:
    """``idx[l, j]`` = stream position (``X i + x``) of the ``j``-th symbol lane ``l`` sends per group."""
    S = X * _N
    if rule == "interleaved":
        idx = np.array([[X * i + x for i in range(l, _N, L) for x in range(X)] for l in range(L)], np.int64)
    else:
        idx = np.array([list(range(l, S, L)) for l in range(L)], np.int64)
    if idx.shape[1] * L != S:
        raise ValueError(f"{X} x {_N} symbols do not split evenly over {L} lanes")
    idx.setflags(write=False)
    return idx


def clustered_rate(bit_errors: int, bits: int, units: int, bad_units: int, bit_errors_sq: int, unit_bits: int,
                   confidence: float = 0.95) -> RateEstimate:
    """A BER whose wrong bits come in clusters: ``bits`` split into ``units`` independent units of
    ``unit_bits`` each, ``bad_units`` of them holding ``bit_errors`` wrong bits in all, whose sum of
    squares per unit is ``bit_errors_sq``.  BER = (bad_units / units) x (mean wrong bits per bad
    unit) / unit_bits: the unit failure rate's Clopper-Pearson interval and the mean's normal
    interval (its spread from the sum of squares), each at (1 + confidence) / 2 so that both hold
    together with at least ``confidence`` (Bonferroni); with fewer than 2 bad units the mean is
    bounded by [0, unit_bits] only.  ``units == 0``: [0, 1]."""
    n, k, b = int(units), int(bad_units), int(bit_errors)
    if n == 0:
        return RateEstimate(b, int(bits), 0.0, 1.0)
    if not 0 <= k <= n or not 0 <= b <= k * unit_bits:
        raise ValueError(f"clustered_rate needs 0 <= bad_units <= units and 0 <= bit_errors <= bad_units x unit_bits, "
                         f"got units={n}, bad_units={k}, bit_errors={b}, unit_bits={unit_bits}")
    c2 = (1.0 + confidence) / 2.0
    flo, fhi = clopper_pearson(k, n, c2)
    if k >= 2:
        from scipy.stats import norm

        m = b / k
        var = max(0.0, (int(bit_errors_sq) - k * m * m) / (k - 1))
        half = float(norm.ppf(0.5 + c2 / 2)) * math.sqrt(var / k)
        mlo, mhi = max(0.0, m - half), min(float(unit_bits), m + half)
    else:
        mlo, mhi = 0.0, float(unit_bits)
    return RateEstimate(b, int(bits), flo * mlo / unit_bits, min(1.0, fhi * mhi / unit_bits))


def _zeros():
    return np.zeros(0, np.int64)


@dataclass
class ConcatCounters:
    """Counts of a concatenated-link run (mergeable).

    ``line_*``: PAM4 symbols / bits on the line (all hops; bits = slicer bits of message and
    parity); ``inner_blocks``: inner blocks received, ``inner_failed``: blocks whose 120 message
    bits differ after the inner decoder, ``inner_corrected`` / ``inner_uncorrectable``: the
    decoder's own status; ``inner_output_bit_errors`` over ``inner_message_bits``: message bits
    wrong after the inner decoder, all hops (``inner_output_bit_errors_sq``: the sum over inner
    blocks -- over PAM4 symbols with ``inner="none"`` -- of their wrong bits squared, for the
    clustered ``kp4_input_ber`` interval of :meth:`rates`); ``kp4_input_bit_errors`` /
    ``kp4_input_symbol_errors``: at the KP4
    decoder input (last hop; over all n symbols); ``codewords``, ``codeword_errors`` (delivered
    message differs), ``uncorrected_codewords`` (flagged), ``post_fec_bit_errors`` over
    ``message_bits`` (``post_fec_bit_errors_sq``: the sum over codewords of their wrong message
    bits squared, for the clustered interval of :meth:`rates`); ``hist[w]``: codewords with w
    wrong symbols at the (last) KP4 input.
    """

    line_symbols: int = 0
    line_symbol_errors: int = 0
    line_bits: int = 0
    line_bit_errors: int = 0
    inner_blocks: int = 0
    inner_failed: int = 0
    inner_corrected: int = 0
    inner_uncorrectable: int = 0
    inner_message_bits: int = 0
    inner_output_bit_errors: int = 0
    inner_output_bit_errors_sq: int = 0
    codewords: int = 0
    kp4_input_bit_errors: int = 0
    kp4_input_symbol_errors: int = 0
    codeword_errors: int = 0
    uncorrected_codewords: int = 0
    post_fec_bit_errors: int = 0
    post_fec_bit_errors_sq: int = 0
    message_bits: int = 0
    hist: NDArray[np.int64] = field(default_factory=lambda: np.zeros(_N + 1, np.int64))
    seconds: float = 0.0

    def merge(self, other: "ConcatCounters") -> "ConcatCounters":
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def rates(self, confidence: float = 0.95) -> dict[str, RateEstimate]:
        """Rates with 95% intervals: Clopper-Pearson for ``line_ser``, ``line_ber``,
        ``inner_block_failure``, ``kp4_input_ser`` and ``fer``; clustered (:func:`clustered_rate`)
        for ``kp4_input_ber`` (inner decoder output, :meth:`_kp4_input_ber`) and ``post_fec_ber``
        (:meth:`_post_fec_ber`), whose bit errors come in groups."""
        return {
            "line_ser": rate(self.line_symbol_errors, self.line_symbols, confidence),
            "line_ber": rate(self.line_bit_errors, self.line_bits, confidence),
            "inner_block_failure": rate(self.inner_failed, self.inner_blocks, confidence),
            "kp4_input_ber": self._kp4_input_ber(confidence),
            "kp4_input_ser": rate(self.kp4_input_symbol_errors, self.codewords * _N, confidence),
            "fer": rate(self.codeword_errors, self.codewords, confidence),
            "post_fec_ber": self._post_fec_ber(confidence),
        }

    def _kp4_input_ber(self, confidence: float) -> RateEstimate:
        """KP4-input BER (the inner decoder's output) with an interval over inner blocks, not
        bits.  The inner decoder acts on one 128-bit block at a time: a failed block delivers
        its wrong bits together (2-3 with the hard decoder: the channel's pair plus a
        miscorrection), so its bits are not independent trials; distinct blocks are (i.i.d. AWGN
        samples and random data, one decode per block; the blocks of every hop are counted).
        Hence the unit is the block: ``inner_failed`` of ``inner_blocks`` and the sum of squares
        ``inner_output_bit_errors_sq``.  Without the inner code (``inner="none"``) the slicer's
        bits go straight to KP4 and the unit is the PAM4 symbol (a symbol error is 1 or 2 wrong
        bits of the Gray pair).  A KP4 codeword would be a wrong unit: under the interleaved
        lane rule an inner block holds symbols of all 4 codewords of its group."""
        if self.inner_blocks:
            units, bad, unit_bits = self.inner_blocks, self.inner_failed, 120
        else:
            units, bad, unit_bits = self.line_symbols, self.line_symbol_errors, 2
        return clustered_rate(self.inner_output_bit_errors, self.inner_message_bits, units, bad,
                              self.inner_output_bit_errors_sq, unit_bits, confidence)

    def _post_fec_ber(self, confidence: float) -> RateEstimate:
        """Post-FEC BER with an interval over codewords, not bits: a KP4 failure delivers its wrong
        bits together (dozens per failed codeword), so Clopper-Pearson on bits is far too narrow
        (:func:`clustered_rate` with the codeword as unit)."""
        return clustered_rate(self.post_fec_bit_errors, self.message_bits, self.codewords, self.codeword_errors,
                              self.post_fec_bit_errors_sq, _K * 10, confidence)

    def as_dict(self) -> dict:
        return {f.name: (getattr(self, f.name).tolist() if f.name == "hist" else getattr(self, f.name))
                for f in fields(self)}


@dataclass(frozen=True)
class Residual:
    """What the far end of a batch received wrong: ``keys`` (sorted, ``codeword * 544 + symbol``,
    message symbols only, codewords counted from the batch's first) with XOR ``values`` (10-bit
    error patterns), the codewords KP4 flagged uncorrectable (``flagged``) and those it delivered
    wrong without a flag (``miscorrected``; empty in bypass)."""

    keys: NDArray[np.int64]
    values: NDArray[np.int64]
    flagged: NDArray[np.int64]
    miscorrected: NDArray[np.int64]


@dataclass(frozen=True)
class ConcatResult:
    config: ConcatConfig
    counters: ConcatCounters

    def rates(self) -> dict[str, RateEstimate]:
        return self.counters.rates()


def _bits_of(sym: NDArray[np.uint16]) -> NDArray[np.uint8]:
    return ((sym[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8).reshape(*sym.shape[:-1], -1)


def _syms_of(bits: NDArray[np.uint8]) -> NDArray[np.uint16]:
    b = bits.reshape(*bits.shape[:-1], -1, 10).astype(np.uint16)
    return (b << np.arange(10, dtype=np.uint16)).sum(-1).astype(np.uint16)


class ConcatLink:
    """An 800G/1.6T link with the inner code (module docstring).

    Parameters
    ----------
    config : :class:`ConcatConfig`.
    channel : one :class:`phy802.channel.Pam4Awgn` for every lane and hop (the inner decoder needs
        the PAM4 samples, so only this channel model is accepted).
    path : ``"exact"`` (every bit) or ``"fast"`` (data-free, module docstring).
    """

    def __init__(self, config: ConcatConfig, channel: Pam4Awgn, *, path: Literal["exact", "fast"] = "exact") -> None:
        if not isinstance(config, ConcatConfig):
            raise TypeError(f"config must be a ConcatConfig, got {type(config).__name__}")
        if type(channel) is not Pam4Awgn:
            raise TypeError(f"channel must be a Pam4Awgn (the inner decoder reads PAM4 samples), got "
                            f"{type(channel).__name__}")
        if path not in ("exact", "fast"):
            raise ValueError(f"path must be 'exact' or 'fast', got {path!r}")
        self.config, self.channel, self.path = config, channel, path
        self._idx = _lane_index(config.interleave, config.n_lanes, config.lane_rule)
        self._sigma = float(channel.sigma)

    # --------------------------------------------------------------------- shared geometry
    def _lanes(self, cw: NDArray[np.uint16]) -> NDArray[np.uint16]:
        """Codewords ``[G X, 544]`` -> lane symbols ``[L, G S/L]``."""
        X = self.config.interleave
        G = cw.shape[0] // X
        stream = cw.reshape(G, X, _N).transpose(0, 2, 1).reshape(G, X * _N)
        return np.ascontiguousarray(stream[:, self._idx].transpose(1, 0, 2).reshape(self._idx.shape[0], -1))

    def _unlanes(self, lanes: NDArray, G: int) -> NDArray:
        X = self.config.interleave
        L, S = self._idx.shape
        stream = np.empty((G, X * _N), lanes.dtype)
        stream[:, self._idx] = lanes.reshape(L, G, S).transpose(1, 0, 2)
        return stream.reshape(G, _N, X).transpose(0, 2, 1).reshape(G * X, _N)

    def _hop_exact(self, cw: NDArray[np.uint16], rng: np.random.Generator, ctr: ConcatCounters):
        """One optical hop: lanes -> inner code -> PAM4 AWGN -> inner decode -> codewords, and the
        symbols of blocks the inner decoder flagged (bool, same shape)."""
        cfg = self.config
        G = cw.shape[0] // cfg.interleave
        bits = _bits_of(self._lanes(cw))  # [L, nbits]
        L = bits.shape[0]
        if cfg.inner == "c177":
            msg = bits.reshape(-1, 120)
            blk = _inner.encode(msg)
            y = _inner.pam4_samples(blk, self._sigma, rng)
            hard = np.empty_like(blk)
            _inner._k.slice_pam4(y, np.empty(y.shape, np.uint8), hard)
            dec, st, _ = _inner.decode_soft(y, cfg.n_lrp_used)
            ctr.line_symbols += y.size
            ctr.line_symbol_errors += int(np.count_nonzero((hard[:, 0::2] != blk[:, 0::2]) | (hard[:, 1::2] != blk[:, 1::2])))
            ctr.line_bits += blk.size
            ctr.line_bit_errors += int(np.count_nonzero(hard != blk))
            wrong = dec[:, :120] != msg
            ctr.inner_blocks += msg.shape[0]
            ctr.inner_failed += int(np.count_nonzero(wrong.any(1)))
            ctr.inner_corrected += int(np.count_nonzero(st == 1))
            ctr.inner_uncorrectable += int(np.count_nonzero(st == 2))
            ctr.inner_message_bits += msg.size
            per_blk = wrong.sum(1, dtype=np.int64)
            ctr.inner_output_bit_errors += int(per_blk.sum())
            ctr.inner_output_bit_errors_sq += int((per_blk * per_blk).sum())
            rx_bits = np.ascontiguousarray(dec[:, :120]).reshape(L, -1)
            flagged = np.repeat((st == 2).reshape(L, -1), 12, axis=1)  # 12 RS symbols per block
        else:
            flagged = None
            pairs = bits.reshape(-1, 2)
            lv = np.array([0, 1, 3, 2], np.uint8)[2 * pairs[:, 0] + pairs[:, 1]]
            y = 2.0 * lv - 3.0 + rng.normal(0.0, self._sigma, lv.shape)
            rl = np.clip(np.floor((y + 4.0) / 2.0), 0, 3).astype(np.int64)
            g = np.array([0, 1, 3, 2], np.uint8)[rl]
            rx_bits = np.stack([(g >> 1) & 1, g & 1], -1).reshape(L, -1).astype(np.uint8)
            ctr.line_symbols += lv.size
            ctr.line_symbol_errors += int(np.count_nonzero(rl != lv))
            ctr.line_bits += bits.size
            per_sym = (rx_bits != bits).reshape(-1, 2).sum(1, dtype=np.int64)  # the Gray pair of one PAM4 symbol
            e = int(per_sym.sum())
            ctr.line_bit_errors += e
            ctr.inner_message_bits += bits.size
            ctr.inner_output_bit_errors += e
            ctr.inner_output_bit_errors_sq += int((per_sym * per_sym).sum())
        er = self._unlanes(flagged, G) if flagged is not None else None
        return self._unlanes(_syms_of(rx_bits), G), er

    # --------------------------------------------------------------------- exact path
    def _batch_exact(self, G: int, ss: np.random.SeedSequence, ctr: ConcatCounters, residual: list | None = None) -> None:
        cfg = self.config
        rngs = [np.random.default_rng(s) for s in ss.spawn(cfg.hops + 1)]
        msgs = rngs[0].integers(0, 1024, (G * cfg.interleave, _K), dtype=np.uint16)
        cw = encode(KP4, msgs)
        tx = cw
        flagged = np.zeros(cw.shape[0], bool)
        for h in range(cfg.hops):
            rx, er = self._hop_exact(tx, rngs[h + 1], ctr)
            last = h == cfg.hops - 1
            if last:
                wrong = rx != tx
                w = wrong.sum(1)
                ctr.hist += np.bincount(w, minlength=_N + 1)[: _N + 1]
                ctr.kp4_input_symbol_errors += int(w.sum())
                ctr.kp4_input_bit_errors += int(np.unpackbits((rx ^ tx).view(np.uint8)).sum())
            if cfg.fec == "ieee" and (last or cfg.outer == "segmented"):
                if cfg.erasure:  # 2 e + v <= 2t decision model of an errors-and-erasures decoder
                    e = ((rx != tx) & ~er).sum(1)
                    ok = 2 * e + er.sum(1) <= 2 * KP4.t
                    dec = np.where(ok[:, None], tx, rx)
                    nc = np.where(ok, 0, -1)
                else:
                    dec, nc = decode(KP4, rx)
                flagged |= nc < 0
                tx = encode(KP4, dec[:, :_K]) if not last else dec  # the hop terminates and re-encodes
            else:
                tx = rx
        d = tx[:, :_K] ^ msgs
        bad = np.any(d != 0, axis=1)
        if residual is not None:
            r, c = np.nonzero(d)
            decoded = cfg.fec == "ieee"
            residual.append(Residual(r.astype(np.int64) * _N + c, d[r, c].astype(np.int64), np.flatnonzero(flagged),
                                     np.flatnonzero(bad & ~flagged) if decoded else np.zeros(0, np.int64)))
        ctr.codewords += cw.shape[0]
        ctr.codeword_errors += int(bad.sum())
        ctr.uncorrected_codewords += int(flagged.sum())
        per_cw = np.unpackbits(d.view(np.uint8).reshape(d.shape[0], -1), axis=1).sum(1, dtype=np.int64)
        ctr.post_fec_bit_errors += int(per_cw.sum())
        ctr.post_fec_bit_errors_sq += int((per_cw * per_cw).sum())
        ctr.message_bits += cw.shape[0] * _K * 10

    # --------------------------------------------------------------------- fast path
    def _hop_fast(self, n_groups: int, rng: np.random.Generator, ctr: ConcatCounters):
        """Residual RS symbol errors of one hop: sorted keys ``codeword * 544 + symbol`` and XOR
        values, and the keys of the symbols in blocks the inner decoder flagged."""
        cfg = self.config
        L, S = self._idx.shape
        lane_bits = S * 10 * n_groups
        keys, vals, erased = [], [], []
        ch = self.channel
        law = np.clip(np.diag(ch.transition), 0.0, 1.0)
        ok_cdf = np.cumsum(law / law.sum())
        coded = cfg.inner == "c177"
        n_blocks = lane_bits // 120
        n_sym = n_blocks * 64 if coded else lane_bits // 2
        for lane in range(L):
            ev = ch.sample_iid_errors(n_sym, rng)
            pos = np.asarray(ev.positions, np.int64)
            sent = np.asarray(ev.sent, np.uint8)
            recv = np.asarray(ev.received, np.uint8)
            ctr.line_symbols += n_sym
            ctr.line_symbol_errors += pos.size
            ctr.line_bits += 2 * n_sym
            gb = np.array([0, 1, 3, 2], np.uint8)
            d = gb[sent] ^ gb[recv]
            ctr.line_bit_errors += int(((d >> 1) & 1).sum() + (d & 1).sum())
            if coded:
                ctr.inner_blocks += n_blocks
                ctr.inner_message_bits += n_blocks * 120
                if pos.size == 0:
                    continue
                blk = pos // 64
                ublk, start = np.unique(blk, return_index=True)
                start = np.append(start, pos.size).astype(np.int64)
                y = np.empty((ublk.size, 64), np.float64)
                sb = np.empty((ublk.size, 128), np.uint8)
                _k.inner_error_blocks(start, (pos % 64).astype(np.int64), sent.astype(np.int64), recv.astype(np.int64),
                                      self._sigma, ok_cdf, rng, y, sb)
                dec = np.empty((ublk.size, 128), np.uint8)
                st = np.empty(ublk.size, np.int8)
                nf = np.empty(ublk.size, np.int64)
                _inner._k.decode_soft(y, _inner._COLS, _inner._POS_OF, cfg.n_lrp_used, 0.0, dec, st, nf, sb)
                err = dec[:, :120] ^ sb[:, :120]
                ctr.inner_corrected += int(np.count_nonzero(st == 1))
                ctr.inner_uncorrectable += int(np.count_nonzero(st == 2))
                r, b = np.nonzero(err)
                fb = ublk[st == 2]
                if fb.size:
                    u2 = (fb[:, None] * 12 + np.arange(12)).ravel()
                    g2, j2 = u2 // S, u2 % S
                    s2 = self._idx[lane, j2]
                    erased.append((g2 * cfg.interleave + s2 % cfg.interleave) * _N + s2 // cfg.interleave)
                ctr.inner_failed += int(np.unique(r).size)
                ctr.inner_output_bit_errors += int(r.size)
                per_blk = np.bincount(r)
                ctr.inner_output_bit_errors_sq += int((per_blk * per_blk).sum())
                q = ublk[r] * 120 + b  # lane bit
            else:
                bit_a = np.flatnonzero((d >> 1) & 1)
                bit_b = np.flatnonzero(d & 1)
                q = np.sort(np.concatenate([2 * pos[bit_a], 2 * pos[bit_b] + 1]))
                ctr.inner_message_bits += 2 * n_sym
                ctr.inner_output_bit_errors += q.size
                nb = ((d >> 1) & 1).astype(np.int64) + (d & 1)  # wrong bits of each wrong PAM4 symbol
                ctr.inner_output_bit_errors_sq += int((nb * nb).sum())
            if q.size == 0:
                continue
            u = q // 10  # lane symbol
            g, j = u // S, u % S
            s = self._idx[lane, j]
            cwi = g * cfg.interleave + s % cfg.interleave
            keys.append(cwi * _N + s // cfg.interleave)
            vals.append((1 << (q % 10)).astype(np.int64))
        er = np.unique(np.concatenate(erased)) if erased else np.zeros(0, np.int64)
        if not keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), er
        k = np.concatenate(keys)
        v = np.concatenate(vals)
        o = np.argsort(k, kind="stable")
        return k[o], v[o], er

    @staticmethod
    def _combine(k, v):
        """Merge duplicate keys by XOR, dropping cancelled ones."""
        if k.size == 0:
            return k, v
        o = np.argsort(k, kind="stable")
        k, v = k[o], v[o]
        st = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        uk, uv = k[st], np.bitwise_xor.reduceat(v, st)
        nz = uv != 0
        return uk[nz], uv[nz]

    def _outcome(self, k, v, er=None):
        """Per wrong codeword: ids, symbol counts, decoder outcome (0 ok, 1 flagged, 2 miscorrected);
        with ``er`` (erased keys) the ``2 e + v <= 2t`` rule, over every codeword with an error or
        an erasure."""
        cw = k // _N
        if er is not None:
            bad = ~np.isin(k, er)
            ids = np.union1d(cw, er // _N)
            e = np.bincount(np.searchsorted(ids, cw[bad]), minlength=ids.size)
            vv = np.bincount(np.searchsorted(ids, er // _N), minlength=ids.size)
            return ids, e, np.where(2 * e + vv <= 2 * KP4.t, 0, 1).astype(np.int64)
        ucw, start, cnt = np.unique(cw, return_index=True, return_counts=True)
        if self.config.fec != "ieee":
            return ucw, cnt, np.full(ucw.size, 3, np.int64)
        heavy = cnt > KP4.t
        out = np.zeros(ucw.size, np.int64)
        if heavy.any():
            hi = np.flatnonzero(heavy)
            W = int(cnt[hi].max())
            P = np.full((hi.size, W), 0, np.int64)
            V = np.zeros((hi.size, W), np.uint16)
            for r, i in enumerate(hi):
                P[r, : cnt[i]] = k[start[i]: start[i] + cnt[i]] % _N
                V[r, : cnt[i]] = v[start[i]: start[i] + cnt[i]]
            out[hi] = error_pattern_outcome(KP4, P, V)
        return ucw, cnt, out

    def _batch_fast(self, G: int, ss: np.random.SeedSequence, ctr: ConcatCounters, residual: list | None = None) -> None:
        cfg = self.config
        rngs = [np.random.default_rng(s) for s in ss.spawn(cfg.hops)]
        n_cw = G * cfg.interleave
        acc_k, acc_v = np.zeros(0, np.int64), np.zeros(0, np.int64)
        failed = np.zeros(0, np.int64)  # codewords lost at a segmented hop
        flagged_all = np.zeros(0, np.int64)
        mis_all = np.zeros(0, np.int64)
        for h in range(cfg.hops):
            k, v, er = self._hop_fast(G, rngs[h], ctr)
            acc_k, acc_v = self._combine(np.concatenate([acc_k, k]), np.concatenate([acc_v, v]))
            last = h == cfg.hops - 1
            if last:
                cwid = acc_k // _N
                w = np.bincount(np.unique(cwid, return_counts=True)[1], minlength=_N + 1)[: _N + 1].astype(np.int64)
                w[0] = 0
                ctr.hist += w
                ctr.hist[0] += n_cw - int(w.sum())
                ctr.kp4_input_symbol_errors += int(acc_k.size)
                ctr.kp4_input_bit_errors += int(np.unpackbits(acc_v.astype(np.uint16).view(np.uint8)).sum())
            if cfg.fec == "ieee" and (last or cfg.outer == "segmented"):
                ucw, cnt, out = self._outcome(acc_k, acc_v, er if cfg.erasure else None)
                keep = np.isin(acc_k // _N, ucw[out != 0])  # <= t errors: corrected, gone
                flagged_all = np.concatenate([flagged_all, ucw[out == 1]])
                mis_all = np.concatenate([mis_all, ucw[out == 2]])
                failed = np.concatenate([failed, ucw[out != 0]])
                acc_k, acc_v = acc_k[keep], acc_v[keep]
        msg = (acc_k % _N) < _K
        bad = np.union1d(np.unique(acc_k[msg] // _N), failed if cfg.outer == "segmented" else np.zeros(0, np.int64))
        ctr.codewords += n_cw
        ctr.codeword_errors += int(bad.size)
        ctr.uncorrected_codewords += int(np.unique(flagged_all).size)
        if residual is not None:
            fl = np.unique(flagged_all)
            residual.append(Residual(acc_k[msg], acc_v[msg], fl, np.setdiff1d(np.unique(mis_all), fl)))
        mv = acc_v[msg].astype(np.uint16)
        if mv.size:
            nb = np.unpackbits(mv.view(np.uint8).reshape(-1, 2), axis=1).sum(1, dtype=np.int64)
            per_cw = np.bincount(np.unique(acc_k[msg] // _N, return_inverse=True)[1], weights=nb).astype(np.int64)
            ctr.post_fec_bit_errors += int(nb.sum())
            ctr.post_fec_bit_errors_sq += int((per_cw * per_cw).sum())
        ctr.message_bits += n_cw * _K * 10

    # --------------------------------------------------------------------- driver
    def _cuts(self, n_codewords: int, seed, batch_groups: int | None, residual: bool):
        """The one batch loop of :meth:`batches` and :meth:`run`: yields ``(g0, G, counters of the
        batch, Residual or None)``; the caller may stop early (``run``'s error / time limits)."""
        if not isinstance(n_codewords, (int, np.integer)) or n_codewords <= 0:
            raise ValueError(f"n_codewords must be a positive int, got {n_codewords!r}")
        X = self.config.interleave
        if batch_groups is None:
            batch_groups = 300 if self.path == "exact" else 30000
        batch_groups = max(3, int(batch_groups) // 3 * 3)
        ss = _seed_sequence(seed)
        batch = self._batch_exact if self.path == "exact" else self._batch_fast
        done = 0
        g0 = 0
        while done < n_codewords:
            need = -(-(int(n_codewords) - done) // X)
            G = min(batch_groups, -(-need // 3) * 3)  # whole batches of 3 interleave groups
            child = ss.spawn(1)[0]
            ctr = ConcatCounters()
            res: list | None = [] if residual else None
            batch(G, child, ctr, res)
            done += ctr.codewords
            yield g0, G, ctr, (res[0] if residual else None)
            g0 += G

    def batches(self, n_codewords: int, seed, *, batch_groups: int | None = None):
        """The batches :meth:`run` simulates, one at a time: yields ``(g0, G, counters, residual)``
        for interleave groups ``[g0, g0 + G)`` (``counters`` of this batch alone, a
        :class:`Residual` of what the far end received).  ``run(n, seed)`` is the sum of these
        batches' counters (same seeds, same cuts), so a consumer of the residual errors (the
        800G/1.6T error traces, ``protocol.trace.inner``) counts exactly what ``run`` counts."""
        yield from self._cuts(n_codewords, seed, batch_groups, residual=True)

    def run(self, n_codewords: int, seed, *, batch_groups: int | None = None, target_errors: int | None = None,
            max_seconds: float | None = None) -> ConcatResult:
        """Simulate at least ``n_codewords`` KP4 codewords (rounded up to whole batches of 3
        interleave groups: 120-bit inner blocks then align with the lanes' codeword groups), with
        optional early stop on ``target_errors`` codeword errors or ``max_seconds``."""
        total = ConcatCounters()
        t0 = time.perf_counter()
        for _, _, ctr, _ in self._cuts(n_codewords, seed, batch_groups, residual=False):
            total.merge(ctr)
            if target_errors is not None and total.codeword_errors >= target_errors:
                break
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                break
        total.seconds = time.perf_counter() - t0
        return ConcatResult(self.config, total)

    def lane_of_key(self, keys: NDArray[np.int64]) -> NDArray[np.int8]:
        """Physical lane (0..L-1) that carried RS symbol ``key = codeword * 544 + symbol``."""
        X = self.config.interleave
        L, S = self._idx.shape
        lane = np.empty(X * _N, np.int8)
        lane[self._idx.ravel()] = np.repeat(np.arange(L, dtype=np.int8), S)
        k = np.asarray(keys, np.int64)
        return lane[X * (k % _N) + (k // _N) % X]
