"""Per-lane channels and the whole-lane fault scenario (one bad lane among several).

:class:`LaneChannels` applies channel ``i`` to row ``i`` of a ``[n_lanes, n]`` symbol array; each
lane draws from its own child generator (``rng.spawn``), so a lane's errors do not depend on the
other lanes' parameters. :func:`lane_fault` builds the common study case: every lane gets ``good``
except ``bad_lane``. :class:`DeadLane` models a lost lane (random or stuck symbols).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from phy802.channel.awgn import _check_rng
from phy802.channel.base import Channel, SymbolErrors, as_symbols

__all__ = ["Noiseless", "DeadLane", "LaneChannels", "lane_fault"]


@dataclass(frozen=True, slots=True)
class Noiseless:
    """A perfect lane."""

    def sample_symbol_errors(self, symbols: np.ndarray, rng: np.random.Generator) -> SymbolErrors:
        as_symbols(symbols)
        return SymbolErrors.empty()

    def apply(self, symbols: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return as_symbols(symbols).copy().reshape(np.shape(symbols))


@dataclass(frozen=True, slots=True)
class DeadLane:
    """A failed lane: the receiver slices uniform random levels (``"random"``, SER 3/4) or a constant."""

    mode: Literal["random", "stuck"] = "random"
    value: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("random", "stuck") or not 0 <= self.value <= 3:
            raise ValueError(f"DeadLane(mode={self.mode!r}, value={self.value}) is invalid")

    def apply(self, symbols: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        s = as_symbols(symbols)
        _check_rng(rng)
        if self.mode == "stuck":
            out = np.full_like(s, self.value)
        else:
            out = rng.integers(0, 4, s.size, dtype=np.uint8)
        return out.reshape(np.shape(symbols))

    def sample_symbol_errors(self, symbols: np.ndarray, rng: np.random.Generator) -> SymbolErrors:
        s = as_symbols(symbols)
        r = self.apply(s, rng)
        pos = np.flatnonzero(r != s).astype(np.int64)
        return SymbolErrors(pos, r[pos], (r[pos].astype(np.int16) - s[pos]).astype(np.int8))


@dataclass(frozen=True)
class LaneChannels:
    """One channel per physical lane.

    Parameters
    ----------
    channels : a sequence of channels (anything with ``apply`` and ``sample_symbol_errors``)
    """

    channels: tuple

    def __init__(self, channels: Sequence[Channel]) -> None:
        chans = tuple(channels)
        if not chans:
            raise ValueError("LaneChannels needs at least one channel")
        for i, c in enumerate(chans):
            if not isinstance(c, Channel):
                raise TypeError(f"channel {i} ({type(c).__name__}) lacks apply/sample_symbol_errors")
        object.__setattr__(self, "channels", chans)

    @property
    def n_lanes(self) -> int:
        return len(self.channels)

    def _check(self, symbols: np.ndarray, rng) -> np.ndarray:
        s = np.asarray(symbols)
        if s.ndim != 2 or s.shape[0] != self.n_lanes:
            raise ValueError(f"symbols must have shape [{self.n_lanes}, n] (one row per lane), got {s.shape}")
        _check_rng(rng)
        return s

    def sample_symbol_errors(self, symbols: np.ndarray, rng: np.random.Generator) -> list[SymbolErrors]:
        """Per-lane sparse errors; positions are within each lane's row."""
        s = self._check(symbols, rng)
        rngs = rng.spawn(self.n_lanes)
        return [c.sample_symbol_errors(s[i], g) for i, (c, g) in enumerate(zip(self.channels, rngs))]

    def apply(self, symbols: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Received ``[n_lanes, n]`` symbols."""
        s = self._check(symbols, rng)
        rngs = rng.spawn(self.n_lanes)
        return np.stack([c.apply(s[i], g) for i, (c, g) in enumerate(zip(self.channels, rngs))])


def lane_fault(n_lanes: int, bad_lane: int, bad: Channel, good: Channel | None = None) -> LaneChannels:
    """``n_lanes`` lanes with ``good`` (default :class:`Noiseless`) everywhere except ``bad_lane``."""
    if not 0 <= bad_lane < n_lanes:
        raise ValueError(f"bad_lane must be in [0, {n_lanes}), got {bad_lane}")
    good = Noiseless() if good is None else good
    return LaneChannels([bad if i == bad_lane else good for i in range(n_lanes)])
