"""Numba kernel behind :mod:`phy802.fec.tail`: the codeword symbol-error count of a Markov error
chain, truncated at ``kmax`` (the last row absorbs every count >= kmax)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def block_transfer(P, e, units):  # pragma: no cover - compiled
    """``(N, Y)``: from the state of a symbol's first unit to the next symbol's first unit, with the
    symbol (``units`` consecutive units) all correct / with at least one unit wrong."""
    S = e.shape[0]
    N = np.eye(S)
    Y = np.zeros((S, S))
    for _ in range(units):
        N0 = N.copy()
        nN = np.zeros((S, S))
        nY = np.zeros((S, S))
        for i in range(S):
            for j in range(S):
                acc_n = 0.0
                acc_y = 0.0
                for k in range(S):
                    acc_n += N0[i, k] * (1.0 - e[k]) * P[k, j]
                    acc_y += Y[i, k] * P[k, j] + N0[i, k] * e[k] * P[k, j]
                nN[i, j] = acc_n
                nY[i, j] = acc_y
        N = nN
        Y = nY
    return N, Y


@njit(cache=True)
def markov_count_pmf(N, Y, init, n_symbols, kmax):  # pragma: no cover - compiled
    """``(pmf[0..kmax], m)``: ``pmf[k] = P(W = k)`` for ``k < kmax``, ``pmf[kmax] = P(W >= kmax)``,
    ``m = E[W 1{W >= kmax}]``.

    ``N[s, r]`` / ``Y[s, r]``: probability of going from state ``s`` at a symbol's first unit to
    state ``r`` at the next symbol's first unit with the symbol correct / wrong (the block
    transfer of :func:`phy802.theory.markov_symbol_error_pmf`); ``init``: the first unit's law.
    Every entry is a sum of non-negative terms (no cancellation in the tail).
    """
    S = init.shape[0]
    v = np.zeros((kmax + 1, S))
    m = np.zeros(S)
    for s in range(S):
        v[0, s] = init[s]
    nv = np.zeros((kmax + 1, S))
    nm = np.zeros(S)
    for _ in range(n_symbols):
        nv[:, :] = 0.0
        nm[:] = 0.0
        for k in range(kmax + 1):
            for s in range(S):
                a = v[k, s]
                if a == 0.0:
                    continue
                for r in range(S):
                    nv[k, r] += a * N[s, r]
                    if k < kmax:
                        nv[k + 1, r] += a * Y[s, r]
                        if k + 1 == kmax:
                            nm[r] += a * Y[s, r] * kmax
                    else:
                        nv[k, r] += a * Y[s, r]
        for s in range(S):
            ms = m[s]
            if ms == 0.0 and v[kmax, s] == 0.0:
                continue
            for r in range(S):
                nm[r] += ms * N[s, r] + (ms + v[kmax, s]) * Y[s, r]
        v, nv = nv, v
        m, nm = nm, m
    out = np.zeros(kmax + 1)
    for k in range(kmax + 1):
        for s in range(S):
            out[k] += v[k, s]
    tot = 0.0
    for s in range(S):
        tot += m[s]
    return out, tot
