"""Shared types of the channel models: the sparse error form and the channel protocol.

Every channel works on PAM4 level indices (``uint8`` 0..3) of one physical lane, taken as one
stream in C order (a ``[codewords, n]`` array is the concatenated stream). Two output forms:

* dense: ``apply(symbols, rng) -> received`` (same shape, ``uint8``);
* sparse: ``sample_symbol_errors(symbols, rng) -> SymbolErrors(positions, values, deltas)`` with
  ``positions`` sorted flat indices (``int64``), ``values`` the received levels (``uint8``) and
  ``deltas = values - sent`` (``int8``, never 0). ``apply_symbol_errors`` turns one into the other.

Per-lane parameters: :class:`phy802.channel.fault.LaneChannels`.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["SymbolErrors", "Channel", "apply_symbol_errors", "signs_to_values", "as_symbols", "capacity"]


class SymbolErrors(NamedTuple):
    """Sparse symbol errors of one stream: flat ``positions`` (sorted), received ``values``, ``deltas``."""

    positions: np.ndarray  # int64
    values: np.ndarray  # uint8, the received level
    deltas: np.ndarray  # int8, received - sent

    @property
    def count(self) -> int:
        return int(self.positions.size)

    @staticmethod
    def empty() -> "SymbolErrors":
        return SymbolErrors(np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int8))


@runtime_checkable
class Channel(Protocol):
    """What the link needs from a channel model of one lane."""

    def sample_symbol_errors(self, symbols: np.ndarray, rng: np.random.Generator) -> SymbolErrors: ...

    def apply(self, symbols: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


def as_symbols(symbols: np.ndarray, check: bool = True) -> np.ndarray:
    """Validate PAM4 level indices; returns a C-contiguous flat ``uint8`` view/copy."""
    s = np.asarray(symbols)
    if s.dtype.kind not in "iu":
        raise TypeError(f"symbols must be an integer array of PAM4 levels 0..3, got dtype {s.dtype}")
    if check and s.size and (s.min() < 0 or s.max() > 3):
        raise ValueError(f"symbols must be PAM4 level indices 0..3, got range [{s.min()}, {s.max()}]")
    return np.ascontiguousarray(s, dtype=np.uint8).reshape(-1)


def capacity(n: int, p: float) -> int:
    """Initial buffer size for ~``n * p`` events (kernels grow it if needed)."""
    mean = n * max(p, 0.0)
    return int(min(n, mean + 8.0 * np.sqrt(mean) + 64))


def signs_to_values(sent: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """Received level of a one-level error ``sent + sign``, reflected at the edges.

    A burst model gives an error direction; at the outer levels (0 going down, 3 going up) the only
    possible one-level error is the other way, so the sign is reflected ([I] modelling choice).
    """
    r = sent.astype(np.int16) + signs.astype(np.int16)
    out = np.where((r < 0) | (r > 3), sent.astype(np.int16) - signs, r)
    return out.astype(np.uint8)


def apply_symbol_errors(symbols: np.ndarray, errors: SymbolErrors) -> np.ndarray:
    """Dense received symbols from the sent ones and a sparse error pattern (a new array)."""
    s = np.asarray(symbols)
    out = np.array(s, dtype=np.uint8, copy=True)
    flat = out.reshape(-1)
    if errors.positions.size:
        if errors.positions[0] < 0 or errors.positions[-1] >= flat.size:
            raise ValueError(f"error positions outside the {flat.size}-symbol stream")
        flat[errors.positions] = errors.values
    return out
