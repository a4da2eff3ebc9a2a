"""Optional 1/(1+D) mod 4 precoder (IEEE 802.3 120.5.7.2, added by 802.3cd).

TX: ``P(j) = (G(j) - P(j-1)) mod 4``; RX: ``G(j) = (P(j) + P(j-1)) mod 4``.
The initial state ``P(-1)`` is not pinned by our sources ([?] in the notes); it is a parameter
(default 0) and must be the same on TX and RX. Arrays are ``[..., n]``; each row (e.g. one
physical lane) is an independent stream, and ``initial_state`` may be a scalar or one value per row.
To continue a stream across calls, pass the last precoded symbol of the previous call (TX) or the
last received symbol (RX) as ``initial_state``.
"""

from __future__ import annotations

import numpy as np

from phy802.pma._kernels import precode_kernel
from phy802.pma.pam4 import _as_symbols

__all__ = ["precode", "precode_decode", "precoded_errors_to_data_errors"]


def _init(initial_state, rows_shape: tuple) -> np.ndarray:
    init = np.asarray(initial_state)
    if init.dtype.kind not in "iu":
        raise TypeError(f"initial_state must be an integer 0..3, got {initial_state!r}")
    if init.size and (init.min() < 0 or init.max() > 3):
        raise ValueError(f"initial_state must be in 0..3, got {initial_state!r}")
    try:
        return np.broadcast_to(init, rows_shape).astype(np.int64)
    except ValueError:
        raise ValueError(f"initial_state shape {init.shape} does not match rows {rows_shape}") from None


def precode(symbols: np.ndarray, initial_state: int | np.ndarray = 0) -> np.ndarray:
    """Precode Gray-coded symbols ``G`` ``[..., n]`` to ``P`` (``uint8``). 120.5.7.2"""
    g = _as_symbols(symbols)
    if g.ndim == 0:
        raise ValueError("symbols must have at least one axis")
    init = _init(initial_state, g.shape[:-1]).reshape(-1)
    g2 = np.ascontiguousarray(g.reshape(-1, g.shape[-1]))
    out = np.empty_like(g2)
    precode_kernel(g2, init, out)
    return out.reshape(g.shape)


def precode_decode(symbols: np.ndarray, initial_state: int | np.ndarray = 0) -> np.ndarray:
    """Receiver side ``G(j) = (P(j) + P(j-1)) mod 4`` on ``[..., n]`` (``uint8``). 120.5.7.2"""
    p = _as_symbols(symbols)
    if p.ndim == 0:
        raise ValueError("symbols must have at least one axis")
    init = _init(initial_state, p.shape[:-1]).astype(np.uint8)
    prev = np.concatenate([init[..., None], p[..., :-1]], axis=-1)
    return (p + prev) & np.uint8(3)


def precoded_errors_to_data_errors(
    positions: np.ndarray, deltas: np.ndarray, n_symbols: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sparse error pattern after the RX precoder, from the pattern on the precoded line.

    The decoder is linear mod 4: if the received precoded symbol is ``P(j) + e(j)``, the
    decoded symbol is ``G(j) + e(j) + e(j-1)`` (mod 4). So an isolated error ``e`` at ``j``
    becomes two errors ``e`` at ``j`` and ``j+1`` (the second is dropped if ``j+1 >= n_symbols``),
    and an alternating ``+1, -1`` burst collapses to its two ends.

    Parameters
    ----------
    positions : sorted unique int positions of line errors in one stream
    deltas : their ``received - sent`` level differences (any integers; used mod 4)
    n_symbols : stream length

    Returns
    -------
    (positions int64, deltas_mod4 uint8) of the decoded (data) symbol errors, ``deltas_mod4`` in 1..3;
    the decoded symbol is ``(G + deltas_mod4) mod 4``.
    """
    pos = np.asarray(positions, dtype=np.int64)
    d = np.asarray(deltas).astype(np.int64) & 3
    if pos.shape != d.shape or pos.ndim != 1:
        raise ValueError(f"positions and deltas must be equal-length 1-D arrays, got {pos.shape} and {d.shape}")
    if pos.size and (np.any(np.diff(pos) <= 0) or pos[0] < 0 or pos[-1] >= n_symbols):
        raise ValueError("positions must be sorted, unique and inside [0, n_symbols)")
    keep = d != 0
    pos, d = pos[keep], d[keep]
    cand = np.concatenate([pos, pos + 1])
    vals = np.concatenate([d, d])
    order = np.argsort(cand, kind="stable")
    cand, vals = cand[order], vals[order]
    uniq, start = np.unique(cand, return_index=True)
    summed = np.add.reduceat(vals, start) & 3 if cand.size else vals
    ok = (summed != 0) & (uniq < n_symbols)
    return uniq[ok].astype(np.int64), summed[ok].astype(np.uint8)
