"""PAM4 Gray mapping (IEEE 802.3 120.5.7.1).

Consecutive bit pairs ``{A, B}`` (A first in time) map to PAM4 symbols
``{0,0}->0, {0,1}->1, {1,1}->2, {1,0}->3``, i.e. ``symbol = 2A + (A xor B)``.
Symbols 0..3 are the level indices in increasing amplitude; :data:`LEVELS` gives the
unnormalised amplitudes ``-3, -1, +1, +3`` used by :mod:`phy802.channel`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LEVELS", "GRAY_ENCODE", "GRAY_DECODE", "gray_map", "gray_demap", "symbol_bit_errors", "bit_error_positions"]

#: amplitude of level index 0..3 (unit half-spacing; the decision thresholds are -2, 0, +2)
LEVELS = np.array([-3.0, -1.0, 1.0, 3.0])
#: ``GRAY_ENCODE[2A + B]`` = symbol (120.5.7.1)
GRAY_ENCODE = np.array([0, 1, 3, 2], dtype=np.uint8)
#: ``GRAY_DECODE[symbol]`` = ``2A + B``; the Gray table is its own inverse
GRAY_DECODE = np.array([0, 1, 3, 2], dtype=np.uint8)
# number of differing bits between the Gray labels of two symbols
_HD = np.array([[bin(int(GRAY_DECODE[a]) ^ int(GRAY_DECODE[b])).count("1") for b in range(4)] for a in range(4)])


def _as_bits(bits: np.ndarray) -> np.ndarray:
    b = np.asarray(bits)
    if b.dtype.kind not in "biu":
        raise TypeError(f"bits must be an integer or bool array, got dtype {b.dtype}")
    if b.ndim == 0 or b.shape[-1] % 2:
        raise ValueError(f"bits: last axis must have an even length (bit pairs), got shape {b.shape}")
    if b.size and (b.min() < 0 or b.max() > 1):
        raise ValueError("bits must be 0 or 1")
    return b.astype(np.uint8, copy=False)


def _as_symbols(symbols: np.ndarray, name: str = "symbols") -> np.ndarray:
    s = np.asarray(symbols)
    if s.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {s.dtype}")
    if s.size and (s.min() < 0 or s.max() > 3):
        raise ValueError(f"{name} must be PAM4 level indices 0..3, got range [{s.min()}, {s.max()}]")
    return s.astype(np.uint8, copy=False)


def gray_map(bits: np.ndarray) -> np.ndarray:
    """Map bits ``[..., 2n]`` (A, B, A, B, ...) to PAM4 symbols ``[..., n]`` (``uint8``). 120.5.7.1"""
    b = _as_bits(bits)
    return GRAY_ENCODE[(b[..., 0::2] << 1) | b[..., 1::2]]


def gray_demap(symbols: np.ndarray) -> np.ndarray:
    """Inverse of :func:`gray_map`: symbols ``[..., n]`` to bits ``[..., 2n]`` (``uint8``)."""
    s = _as_symbols(symbols)
    ab = GRAY_DECODE[s]
    out = np.empty(s.shape[:-1] + (2 * s.shape[-1],), dtype=np.uint8) if s.ndim else None
    if out is None:
        raise ValueError("symbols must have at least one axis")
    out[..., 0::2] = ab >> 1
    out[..., 1::2] = ab & 1
    return out


def symbol_bit_errors(sent: np.ndarray, received: np.ndarray) -> np.ndarray:
    """Number of Gray-demapped bit errors (0, 1 or 2) per symbol pair ``sent -> received``."""
    return _HD[_as_symbols(sent, "sent"), _as_symbols(received, "received")]


def bit_error_positions(positions: np.ndarray, sent: np.ndarray, received: np.ndarray) -> np.ndarray:
    """Lane bit positions flipped by sparse symbol errors (sorted ``int64``).

    Symbol ``j`` carries lane bits ``2j`` (A) and ``2j + 1`` (B); the flipped bits are those where
    the Gray labels of ``sent`` and ``received`` differ. Feed the result to
    :func:`phy802.pma.bitmux.lane_bit_to_pcsl` to reach the PCS lanes.
    """
    pos = np.asarray(positions, dtype=np.int64)
    diff = GRAY_DECODE[_as_symbols(sent, "sent")] ^ GRAY_DECODE[_as_symbols(received, "received")]
    if pos.shape != diff.shape:
        raise ValueError(f"positions, sent and received must have the same shape, got {pos.shape} and {diff.shape}")
    a = pos[(diff & 2) != 0] * 2
    b = pos[(diff & 1) != 0] * 2 + 1
    return np.sort(np.concatenate([a, b]))
