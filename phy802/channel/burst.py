"""Burst error models on PAM4 symbols: 1-tap DFE error propagation and Gilbert-Elliott.

* :class:`DfeBurst` (the model of the 802.3 FEC analyses): a two-state Markov chain per symbol,
  G->B with probability ``pe`` and B->B with ``pb`` (error propagation); a symbol is wrong iff
  its state is B. Bursts have geometric length P(L = l) = (1 - pb) pb^(l-1), mean 1/(1 - pb),
  and are separated by at least one correct symbol. Stationary SER = pe / (pe + 1 - pb).
* :class:`GilbertElliott`: states G and B with transitions ``p_gb``, ``p_bg`` and their own
  symbol error probabilities ``e_g``, ``e_b`` (the DFE model is the case e_g = 0, e_b = 1,
  p_gb = pe, p_bg = 1 - pb).

Errors are one-level (Gray: one bit); the direction is alternating along a run for the DFE by
default (a wrong decision fed back through a positive post-cursor tap pushes the next decision
the other way) or random, and is reflected at the outer levels (:func:`signs_to_values`).
The first symbol's state is drawn from the stationary law (``start="stationary"``) or is G.
Sparse form ``sample_events(n, rng) -> BurstEvents(positions, signs)`` needs no data; the
``Channel`` methods apply it to given symbols.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from phy802 import theory
from phy802.channel import _kernels as K
from phy802.channel.awgn import _check_rng
from phy802.channel.base import SymbolErrors, as_symbols, capacity, signs_to_values

__all__ = ["BurstEvents", "DfeBurst", "GilbertElliott", "run_lengths"]

Start = Literal["stationary", "good"]


class BurstEvents(NamedTuple):
    """Data-free error events: sorted ``positions`` (int64) and error ``signs`` (+1/-1, int8)."""

    positions: np.ndarray
    signs: np.ndarray


def run_lengths(positions: np.ndarray) -> np.ndarray:
    """Lengths of the maximal runs of consecutive positions (the burst lengths of a DFE pattern)."""
    p = np.asarray(positions, dtype=np.int64)
    if p.size == 0:
        return np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(p) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks + 1, [p.size]])
    return ends - starts


class _BurstChannel:
    def sample_events(self, n_symbols: int, rng: np.random.Generator) -> BurstEvents:  # pragma: no cover
        raise NotImplementedError

    def sample_symbol_errors(self, symbols: np.ndarray, rng: np.random.Generator) -> SymbolErrors:
        """Sparse errors for the given sent symbols (flat stream)."""
        s = as_symbols(symbols)
        ev = self.sample_events(s.size, rng)
        sent = s[ev.positions]
        vals = signs_to_values(sent, ev.signs)
        return SymbolErrors(ev.positions, vals, (vals.astype(np.int16) - sent).astype(np.int8))

    def apply(self, symbols: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Received symbols (same shape, ``uint8``)."""
        s = as_symbols(symbols)
        err = self.sample_symbol_errors(s, rng)
        out = s.copy()
        out[err.positions] = err.values
        return out.reshape(np.shape(symbols))

    def _start_bad(self, rng: np.random.Generator, start: str) -> bool:
        if start == "good":
            return False
        if start != "stationary":
            raise ValueError(f"start must be 'stationary' or 'good', got {start!r}")
        pi_b = self.chain.initial[1]
        return bool(rng.random() < pi_b)


@dataclass(frozen=True, slots=True)
class DfeBurst(_BurstChannel):
    """1-tap DFE error propagation (see module docstring).

    Parameters
    ----------
    pe : G->B probability per symbol (raw error probability)
    pb : B->B probability (error propagation), 0 <= pb < 1
    alternate : alternate the error sign along a burst (default True) or draw it at random
    start : ``"stationary"`` (default) or ``"good"``
    """

    pe: float
    pb: float
    alternate: bool = True
    start: Start = "stationary"

    def __post_init__(self) -> None:
        if not (0.0 <= self.pe <= 1.0) or not (0.0 <= self.pb < 1.0):
            raise ValueError(f"need 0 <= pe <= 1 and 0 <= pb < 1, got pe={self.pe}, pb={self.pb}")

    @classmethod
    def from_ser(cls, ser: float, pb: float, **kw) -> "DfeBurst":
        """The model with stationary symbol error ratio ``ser`` and propagation ``pb``."""
        if not 0 < ser < 1:
            raise ValueError(f"ser must be in (0, 1), got {ser}")
        pe = ser * (1.0 - pb) / (1.0 - ser)
        return cls(pe, pb, **kw)

    @property
    def ser(self) -> float:
        """Stationary symbol error ratio ``pe / (pe + 1 - pb)``."""
        return self.pe / (self.pe + 1.0 - self.pb) if self.pe > 0 else 0.0

    @property
    def ber(self) -> float:
        """Gray BER (one-level errors flip one of the two bits): SER / 2."""
        return self.ser / 2.0

    @property
    def mean_burst_length(self) -> float:
        return 1.0 / (1.0 - self.pb)

    def burst_length_pmf(self, lengths: np.ndarray) -> np.ndarray:
        """P(L = l) = (1 - pb) pb^(l-1)."""
        lengths = np.asarray(lengths)
        return (1.0 - self.pb) * self.pb ** (lengths - 1.0)

    @property
    def chain(self) -> theory.ErrorChain:
        return theory.ErrorChain.dfe(self.pe, self.pb, self.alternate)

    def sample_events(self, n_symbols: int, rng: np.random.Generator) -> BurstEvents:
        n = int(n_symbols)
        if n < 0:
            raise ValueError(f"n_symbols must be >= 0, got {n_symbols}")
        _check_rng(rng)
        bad = self._start_bad(rng, self.start)
        pos, sg = K.dfe_events(n, float(self.pe), float(self.pb), bad, self.alternate, rng, capacity(n, self.ser))
        return BurstEvents(pos, sg)


@dataclass(frozen=True, slots=True)
class GilbertElliott(_BurstChannel):
    """Gilbert-Elliott channel on symbols (see module docstring)."""

    p_gb: float
    p_bg: float
    e_g: float
    e_b: float
    alternate: bool = False
    start: Start = "stationary"

    def __post_init__(self) -> None:
        for name in ("p_gb", "p_bg", "e_g", "e_b"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability, got {v}")
        if self.p_gb + self.p_bg == 0:
            raise ValueError("p_gb and p_bg cannot both be 0")

    @property
    def ser(self) -> float:
        pi_b = self.p_gb / (self.p_gb + self.p_bg)
        return (1 - pi_b) * self.e_g + pi_b * self.e_b

    @property
    def ber(self) -> float:
        return self.ser / 2.0

    @property
    def chain(self) -> theory.ErrorChain:
        return theory.ErrorChain.gilbert_elliott(self.p_gb, self.p_bg, self.e_g, self.e_b, self.alternate)

    def sample_events(self, n_symbols: int, rng: np.random.Generator) -> BurstEvents:
        n = int(n_symbols)
        if n < 0:
            raise ValueError(f"n_symbols must be >= 0, got {n_symbols}")
        _check_rng(rng)
        bad = self._start_bad(rng, self.start)
        pos, sg = K.ge_events(n, float(self.p_gb), float(self.p_bg), float(self.e_g), float(self.e_b), bad,
                              self.alternate, rng, capacity(n, self.ser))
        return BurstEvents(pos, sg)
