"""Numba kernels of :mod:`phy802.theory`'s exact burst DP and rare-event estimator (private).

Kept apart from :mod:`phy802.channel._kernels` so that theory never imports the channel package
(the channel models use theory's closed forms, not the other way round).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["markov_count_forward", "conditional_fail_mc"]


@njit(cache=True)
def markov_count_forward(P, e, pi0, n_units, kmax):
    """Scaled forward table of (state, error count) for a hidden-Markov error model.

    ``alpha[j, x, c]`` is proportional to P(state_j = x, errors in units 0..j = c) for ``c <= kmax``;
    column ``kmax + 1`` collects ``c > kmax`` (absorbing), so the tail is never a difference.
    Row ``j`` is divided by its sum; ``logscale[j]`` is the log of the cumulative scale.
    """
    S = P.shape[0]
    alpha = np.zeros((n_units, S, kmax + 2))
    logscale = np.zeros(n_units)
    for x in range(S):
        alpha[0, x, 0] = pi0[x] * (1.0 - e[x])
        if kmax >= 1:
            alpha[0, x, 1] = pi0[x] * e[x]
        else:
            alpha[0, x, kmax + 1] = pi0[x] * e[x]
    tot = alpha[0].sum()
    alpha[0] /= tot
    logscale[0] = math.log(tot)
    pred = np.zeros(kmax + 2)
    for j in range(1, n_units):
        for x in range(S):
            for c in range(kmax + 2):
                acc = 0.0
                for y in range(S):
                    acc += alpha[j - 1, y, c] * P[y, x]
                pred[c] = acc
            ex = e[x]
            alpha[j, x, 0] = pred[0] * (1.0 - ex)
            for c in range(1, kmax + 1):
                alpha[j, x, c] = pred[c] * (1.0 - ex) + pred[c - 1] * ex
            alpha[j, x, kmax + 1] = pred[kmax + 1] + pred[kmax] * ex
        tot = alpha[j].sum()
        alpha[j] /= tot
        logscale[j] = logscale[j - 1] + math.log(tot)
    return alpha, logscale


@njit(cache=True)
def _sample_given_count(alpha, P, e, k, rng, z):
    """Backward sampling of the error flags ``z`` (uint8 [n_units]) given exactly ``k`` errors."""
    n_units, S, _ = alpha.shape
    # last state
    tot = 0.0
    for x in range(S):
        tot += alpha[n_units - 1, x, k]
    u = rng.random() * tot
    x = 0
    acc = alpha[n_units - 1, 0, k]
    while acc <= u and x < S - 1:
        x += 1
        acc += alpha[n_units - 1, x, k]
    c = k
    for j in range(n_units - 1, -1, -1):
        ex = e[x]
        # P(z_j = 1 | x_j = x, c_j = c)
        if j == 0:
            pz1 = 1.0 if c == 1 else 0.0
        else:
            w1 = 0.0
            w0 = 0.0
            for y in range(S):
                if c >= 1:
                    w1 += alpha[j - 1, y, c - 1] * P[y, x]
                w0 += alpha[j - 1, y, c] * P[y, x]
            w1 *= ex
            w0 *= 1.0 - ex
            pz1 = w1 / (w0 + w1) if (w0 + w1) > 0.0 else 0.0
        zj = 1 if (pz1 >= 1.0 or (pz1 > 0.0 and rng.random() < pz1)) else 0
        z[j] = zj
        c -= zj
        if j == 0:
            break
        # previous state given x_j = x and c_{j-1} = c
        tot = 0.0
        for y in range(S):
            tot += alpha[j - 1, y, c] * P[y, x]
        u = rng.random() * tot
        y = 0
        acc = alpha[j - 1, 0, c] * P[0, x]
        while acc <= u and y < S - 1:
            y += 1
            acc += alpha[j - 1, y, c] * P[y, x]
        x = y


@njit(cache=True)
def _sample_subset(n_units, k, rng, z):
    """Uniform k-subset of units (Floyd's algorithm) into the 0/1 array ``z``."""
    z[:] = 0
    for j in range(n_units - k, n_units):
        t = np.int64(rng.random() * (j + 1))
        if t > j:
            t = j
        if z[t]:
            z[j] = 1
        else:
            z[t] = 1


@njit(cache=True)
def conditional_fail_mc(alpha, P, e, iid, k, n_samples, units_per_symbol, n_symbols, t, precoded, alternate, rng):
    """Monte-Carlo P(decoder failure | K = k errors in the codeword's units), exact conditional law.

    Each sample draws the error flags given ``K = k`` (a uniform subset when ``iid``), gives each
    error a sign (alternating along runs if ``alternate``, else random), applies the RX precoder
    (data error at ``j`` is ``e(j) + e(j-1)`` mod 4) if ``precoded``, maps unit ``j`` to RS symbol
    ``j // units_per_symbol`` and fails when more than ``t`` RS symbols are wrong.
    Returns ``(failures, sum of wrong RS symbols over failing samples)``.
    """
    n_units = alpha.shape[0]
    z = np.zeros(n_units, dtype=np.uint8)
    sym_bad = np.zeros(n_symbols, dtype=np.uint8)
    fails = 0
    wsum = 0
    for _ in range(n_samples):
        if iid:
            _sample_subset(n_units, k, rng, z)
        else:
            _sample_given_count(alpha, P, e, k, rng, z)
        sym_bad[:] = 0
        w = 0
        prev_e = 0
        sign = 1
        for j in range(n_units):
            ej = 0
            if z[j]:
                if alternate and prev_e != 0:
                    sign = -prev_e
                else:
                    sign = 1 if rng.random() < 0.5 else -1
                ej = sign
            d = (ej + prev_e) & 3 if precoded else ej
            if d != 0:
                s = j // units_per_symbol
                if sym_bad[s] == 0:
                    sym_bad[s] = 1
                    w += 1
            prev_e = ej
        if w > t:
            fails += 1
            wsum += w
    return fails, wsum
