"""Numba kernels of the PMA (private; the public wrappers check dtypes and shapes)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["precode_kernel", "lfsr_kernel"]


@njit(cache=True)
def precode_kernel(g, init, out):
    """Row-wise ``P(j) = (G(j) - P(j-1)) mod 4`` (120.5.7.2); ``g``/``out`` uint8 [rows, n], ``init`` int64 [rows]."""
    rows, n = g.shape
    for r in range(rows):
        prev = init[r]
        for j in range(n):
            p = (np.int64(g[r, j]) - prev) & 3
            out[r, j] = p
            prev = p


@njit(cache=True)
def lfsr_kernel(state, taps, out):
    """Fibonacci LFSR: each step the new bit ``xor(state[taps])`` is output and shifted into ``state[0]``.

    ``state`` uint8 [N] (S0..S(N-1), modified in place), ``taps`` int64 indices, ``out`` uint8 [count].
    """
    nstate = state.shape[0]
    for i in range(out.shape[0]):
        b = 0
        for t in taps:
            b ^= state[t]
        for k in range(nstate - 1, 0, -1):
            state[k] = state[k - 1]
        state[0] = b
        out[i] = b
