"""PAM4 on an AWGN channel with hard-decision slicing, set by SNR (dB) or by target pre-FEC BER.

SNR convention (see :mod:`phy802.theory`): levels -3, -1, +1, +3, SNR = E[a^2] / sigma^2 =
5 / sigma^2 (average symbol energy over noise variance), thresholds -2, 0, +2.

Two exact paths, both driven by a ``numpy.random.Generator``:

* ``method="events"`` (default, fast): samples only the symbol-error events. The probability that
  level ``s`` is sliced as ``r`` is known in closed form (:func:`phy802.theory.pam4_transition_matrix`,
  including 2- and 3-level jumps). Candidate positions arrive at the inner-level error rate by
  geometric skipping and are thinned by the sent level's own rate (outer levels err half as often),
  so the result has exactly the law of the per-symbol slicer, for the given sent data.
* ``method="waveform"``: draws ``y = a + sigma * N(0,1)`` for every symbol and slices it.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from phy802 import theory
from phy802.channel import _kernels as K
from phy802.channel.base import SymbolErrors, as_symbols, capacity

__all__ = ["Pam4Awgn", "IidSymbolErrors"]

Method = Literal["events", "waveform"]


class IidSymbolErrors(NamedTuple):
    """Error events for i.i.d. uniform sent data: ``positions``, the ``sent`` and ``received`` levels."""

    positions: np.ndarray
    sent: np.ndarray
    received: np.ndarray


@dataclass(frozen=True, slots=True)
class Pam4Awgn:
    """PAM4 AWGN channel of one lane.

    Parameters
    ----------
    snr_db : SNR = 5 / sigma^2 in dB (see module docstring). Use :meth:`from_ber` to set the
        pre-FEC (Gray) bit error ratio instead.
    """

    snr_db: float

    def __post_init__(self) -> None:
        if not np.isfinite(self.snr_db):
            raise ValueError(f"snr_db must be finite, got {self.snr_db}")

    @classmethod
    def from_ber(cls, ber: float) -> "Pam4Awgn":
        """The channel whose closed-form pre-FEC BER is ``ber`` (closed form inverted numerically)."""
        return cls(theory.snr_db_for_ber(ber))

    @classmethod
    def from_ser(cls, ser: float) -> "Pam4Awgn":
        return cls(theory.snr_db_for_ser(ser))

    @property
    def sigma(self) -> float:
        return float(theory.sigma_from_snr_db(self.snr_db))

    @property
    def transition(self) -> np.ndarray:
        """``[4, 4]`` P(received r | sent s)."""
        return theory.pam4_transition_matrix(self.snr_db)

    @property
    def ser(self) -> float:
        return float(theory.pam4_ser(self.snr_db))

    @property
    def ber(self) -> float:
        return float(theory.pam4_ber(self.snr_db))

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        return _event_tables(float(self.snr_db))

    def sample_symbol_errors(
        self, symbols: np.ndarray, rng: np.random.Generator, method: Method = "events"
    ) -> SymbolErrors:
        """Sparse errors for the given sent ``symbols`` (flat positions, received values, deltas)."""
        s = as_symbols(symbols)
        _check_rng(rng)
        if method == "events":
            p_err, cdf = self._tables()
            pos, val = K.awgn_events_known(s, p_err, cdf, rng, capacity(s.size, float(p_err.max())))
        elif method == "waveform":
            out = np.empty_like(s)
            K.awgn_waveform(s, self.sigma, rng, out)
            pos = np.flatnonzero(out != s).astype(np.int64)
            val = out[pos]
        else:
            raise ValueError(f"method must be 'events' or 'waveform', got {method!r}")
        return SymbolErrors(pos, val, (val.astype(np.int16) - s[pos]).astype(np.int8))

    def apply(self, symbols: np.ndarray, rng: np.random.Generator, method: Method = "events") -> np.ndarray:
        """Received (sliced) symbols, same shape as ``symbols`` (``uint8``)."""
        s = as_symbols(symbols)
        _check_rng(rng)
        if method == "waveform":
            out = np.empty_like(s)
            K.awgn_waveform(s, self.sigma, rng, out)
            return out.reshape(np.shape(symbols))
        err = self.sample_symbol_errors(s, rng, method)
        out = s.copy()
        out[err.positions] = err.values
        return out.reshape(np.shape(symbols))

    def sample_iid_errors(self, n_symbols: int, rng: np.random.Generator) -> IidSymbolErrors:
        """Error events when the sent levels are i.i.d. uniform (scrambled data) and not needed:
        positions at rate SER, then the sent level given an error, then the received level."""
        n = int(n_symbols)
        if n < 0:
            raise ValueError(f"n_symbols must be >= 0, got {n_symbols}")
        _check_rng(rng)
        p_err, cdf = self._tables()
        ser = float(p_err.mean())
        post = np.cumsum(p_err) / p_err.sum() if ser > 0 else np.ones(4)
        post[-1] = 1.0
        pos, s, r = K.awgn_events_iid(n, ser, post, cdf, rng, capacity(n, ser))
        return IidSymbolErrors(pos, s, r)


@functools.lru_cache(maxsize=256)
def _event_tables(snr_db: float) -> tuple[np.ndarray, np.ndarray]:
    """Per sent level: P(error) and the CDF of the received level given an error (read-only).

    Cached: the link asks for them on every batch and the closed forms cost more than the sampling.
    """
    T = theory.pam4_transition_matrix(snr_db)
    p_err = 1.0 - np.diag(T)
    off = T.copy()
    np.fill_diagonal(off, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cdf = np.cumsum(off, axis=1) / np.where(p_err > 0, p_err, 1.0)[:, None]
    for s in range(4):  # the last reachable level closes the law exactly
        last = 3 if s != 3 else 2
        cdf[s, last:] = 1.0
    p_err, cdf = np.ascontiguousarray(p_err), np.ascontiguousarray(cdf)
    p_err.flags.writeable = False
    cdf.flags.writeable = False
    return p_err, cdf


def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (see phy802._rng.as_generator), got {type(rng).__name__}")
