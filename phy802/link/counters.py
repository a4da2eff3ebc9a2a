"""PHY-style per-lane counters plus ground truth (:class:`LinkCounters`) and a run's result."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
from numpy.typing import NDArray

from phy802.stats import RateEstimate, rate
from phy802.clause119 import KP4_N
from phy802.link.config import K_MSG, LinkConfig


def _zeros(n: int) -> NDArray[np.int64]:
    return np.zeros(n, np.int64)


@dataclass
class LinkCounters:
    """Raw counts of a link run, like a PHY's registers plus the ground truth an emulator knows.

    Mergeable (:meth:`merge`) across batches, workers and runs; rates with Clopper-Pearson
    intervals come from :meth:`rates`.

    Attributes
    ----------
    pairs, codewords : codeword pairs / codewords sent; ``n``, ``k`` : code length and payload
        symbols per codeword (the message length; 257 for ``rs272``, whose pad carries no payload).
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
    llr_retries : ``fec="llr"`` only: what link-level retry resends -- frames not delivered (marked
        or FCS-failed) with the ``frames`` payload at the ``pcs`` level, otherwise codeword pairs
        holding a flagged codeword (one replay of the pair's data each) [I].
    lock_failures : ``pcs``-level batches dropped because the receiver could not lock a lane on the
        batch's single AM group (nothing else of such a batch is counted; see :class:`Link`).
    seconds : wall time spent producing these counts.
    """

    n: int = KP4_N
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
    llr_retries: int = 0
    lock_failures: int = 0
    seconds: float = 0.0

    @classmethod
    def empty(cls, n: int, n_phys: int, n_pcsl: int, k: int = K_MSG) -> "LinkCounters":
        return cls(n=n, k=k, n_phys=n_phys, n_pcsl=n_pcsl, lane_symbol_errors=_zeros(n_phys),
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
