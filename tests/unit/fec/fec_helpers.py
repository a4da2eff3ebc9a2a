"""Shared helpers of the RS-FEC tests (a uniquely named module: the test folders are not packages)."""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=None)
def galois_rs(nparity: int):
    """galois RS(1023, 1023-2t) with p(x) = x^10+x^3+1, alpha = 2, first consecutive root c = 0.

    Shortened codes are used by passing k-symbol messages / n-symbol words (galois pads with
    leading zeros, i.e. the same shortening as ours).
    """
    import galois
    GF = galois.GF(2**10, irreducible_poly="x^10 + x^3 + 1")
    return galois.ReedSolomon(1023, 1023 - nparity, field=GF, alpha=GF(2), c=0)


def add_errors(rng: np.random.Generator, words: np.ndarray, n_err: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (received, positions): ``n_err`` distinct positions per word hit by nonzero values."""
    words = np.asarray(words)
    N, n = words.shape
    recv = words.copy()
    pos = np.argsort(rng.random((N, n)), axis=1)[:, :n_err]
    vals = rng.integers(1, 1024, size=(N, n_err)).astype(np.uint16)
    rows = np.arange(N)[:, None]
    recv[rows, pos] ^= vals
    return recv, pos
