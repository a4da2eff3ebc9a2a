"""Numba kernels of the replay wrapper (CPU tensors, through their numpy views)."""

from __future__ import annotations

import math

from numba import njit

__all__ = ["guard_inplace"]


@njit(cache=True, nogil=True)
def guard_inplace(x, clamp):
    """One pass: NaN/Inf -> 0, then clamp to [-clamp, clamp]; returns the number of elements changed."""
    n = 0
    for i in range(x.shape[0]):
        v = x[i]
        if not math.isfinite(v):
            x[i] = 0.0
            n += 1
        elif v > clamp:
            x[i] = clamp
            n += 1
        elif v < -clamp:
            x[i] = -clamp
            n += 1
    return n
