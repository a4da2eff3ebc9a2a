"""Numba kernels of the channel models and the rare-event estimator (private).

Kernels take a ``numpy.random.Generator`` (Numba supports it natively and draws the same stream
as numpy), preallocated or growable outputs, and never validate: the public wrappers do.
Geometric skipping: the number of failures before the next success of a Bernoulli(p) sequence is
``floor(log(U) / log(1 - p))`` with ``U`` uniform on (0, 1], one uniform and one log per event.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = [
    "awgn_events_known",
    "awgn_events_iid",
    "awgn_waveform",
    "dfe_events",
    "ge_events",
    "markov_count_forward",
    "conditional_fail_mc",
]


@njit(cache=True, inline="always")
def _skip(rng, log1m):
    """Geometric gap (failures before the next success) as a float, for log1m = log(1 - p) < 0."""
    u = 1.0 - rng.random()  # (0, 1]
    return math.floor(math.log(u) / log1m)


@njit(cache=True)
def _grow(a):
    """A copy of ``a`` with room for twice as many events (any dtype; Numba specialises)."""
    b = np.empty(2 * a.shape[0] + 16, dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def awgn_events_known(symbols, p_err, cdf, rng, cap):
    """Exact symbol-error events of PAM4 AWGN given the sent symbols (thinning).

    Candidates arrive at rate ``pmax = max(p_err)`` by geometric skipping; a candidate at a symbol
    of level ``s`` is kept with probability ``p_err[s] / pmax``, and then takes the received level
    from the conditional law ``cdf[s]`` (cumulative over ``r``, zero mass at ``r = s``).
    Returns ``(positions int64, received uint8)``.
    """
    n = symbols.shape[0]
    pos_out = np.empty(cap, dtype=np.int64)
    val_out = np.empty(cap, dtype=np.uint8)
    m = 0
    pmax = 0.0
    for s in range(4):
        if p_err[s] > pmax:
            pmax = p_err[s]
    if pmax <= 0.0:
        return pos_out[:0], val_out[:0]
    log1m = math.log1p(-pmax) if pmax < 1.0 else -np.inf
    pos = -1.0
    while True:
        gap = 0.0 if pmax >= 1.0 else _skip(rng, log1m)
        pos = pos + gap + 1.0
        if pos >= n:
            break
        j = np.int64(pos)
        s = symbols[j]
        acc = p_err[s] / pmax
        v = rng.random()
        if v >= acc:
            continue
        w = v / acc
        r = 0
        while r < 3 and w >= cdf[s, r]:
            r += 1
        if m == pos_out.shape[0]:
            pos_out = _grow(pos_out)
            val_out = _grow(val_out)
        pos_out[m] = j
        val_out[m] = r
        m += 1
    return pos_out[:m], val_out[:m]


@njit(cache=True)
def awgn_events_iid(n, ser, post, cdf, rng, cap):
    """Symbol-error events for i.i.d. uniform sent levels: positions at rate ``ser``; the sent level
    from ``post`` (cumulative P(sent = s | error)), the received level from ``cdf[s]``.
    Returns ``(positions int64, sent uint8, received uint8)``."""
    pos_out = np.empty(cap, dtype=np.int64)
    s_out = np.empty(cap, dtype=np.uint8)
    r_out = np.empty(cap, dtype=np.uint8)
    m = 0
    if ser <= 0.0:
        return pos_out[:0], s_out[:0], r_out[:0]
    log1m = math.log1p(-ser) if ser < 1.0 else -np.inf
    pos = -1.0
    while True:
        gap = 0.0 if ser >= 1.0 else _skip(rng, log1m)
        pos = pos + gap + 1.0
        if pos >= n:
            break
        u = rng.random()
        s = 0
        while s < 3 and u >= post[s]:
            s += 1
        w = rng.random()
        r = 0
        while r < 3 and w >= cdf[s, r]:
            r += 1
        if m == pos_out.shape[0]:
            pos_out = _grow(pos_out)
            s_out = _grow(s_out)
            r_out = _grow(r_out)
        pos_out[m] = np.int64(pos)
        s_out[m] = s
        r_out[m] = r
        m += 1
    return pos_out[:m], s_out[:m], r_out[:m]


@njit(cache=True)
def awgn_waveform(symbols, sigma, rng, out):
    """Waveform path: ``y = level + sigma * N(0, 1)`` per symbol, sliced at -2, 0, +2 into ``out``."""
    for i in range(symbols.shape[0]):
        y = 2.0 * symbols[i] - 3.0 + sigma * rng.standard_normal()
        if y < 0.0:
            out[i] = 0 if y < -2.0 else 1
        else:
            out[i] = 2 if y < 2.0 else 3


@njit(cache=True)
def dfe_events(n, pe, pb, start_bad, alternate, rng, cap):
    """1-tap DFE error propagation: two-state chain, G->B w.p. ``pe``, B->B w.p. ``pb``; a symbol
    is in error iff its state is B. Bursts are generated whole: start by geometric skipping at rate
    ``pe`` from the G state, length ``1 + Geometric(1 - pb)``, then one forced correct symbol (B->G).
    Signs (+1/-1): random per burst start; inside a burst alternating if ``alternate`` else random.
    Returns ``(positions int64, signs int8)``."""
    pos_out = np.empty(cap, dtype=np.int64)
    sg_out = np.empty(cap, dtype=np.int8)
    m = 0
    log_pe = math.log1p(-pe) if 0.0 < pe < 1.0 else 0.0
    log_pb = math.log(pb) if pb > 0.0 else -np.inf
    nxt = 1.0  # symbol 0 is in G (correct); symbol 1 is the first that may start a burst
    if start_bad:
        nxt = -1.0  # symbol 0 is in B: a burst is in progress at symbol 0
    while True:
        if nxt < 0.0:
            start = 0.0
        else:
            if pe <= 0.0:
                break
            gap = 0.0 if pe >= 1.0 else _skip(rng, log_pe)
            start = nxt + gap
        if start >= n:
            break
        # burst length L >= 1 with P(L = l) = (1 - pb) pb^(l-1)
        if pb <= 0.0:
            length = 1.0
        elif pb >= 1.0:
            length = n - start
        else:
            length = 1.0 + math.floor(math.log(1.0 - rng.random()) / log_pb)
        sign = 1 if rng.random() < 0.5 else -1
        end = min(start + length, float(n))
        j = np.int64(start)
        while j < end:
            if m == pos_out.shape[0]:
                pos_out = _grow(pos_out)
                sg_out = _grow(sg_out)
            pos_out[m] = j
            sg_out[m] = sign
            m += 1
            if alternate:
                sign = -sign
            else:
                sign = 1 if rng.random() < 0.5 else -1
            j += 1
        nxt = start + length + 1.0  # the B->G symbol is correct; G trials resume after it
    return pos_out[:m], sg_out[:m]


@njit(cache=True)
def ge_events(n, p_gb, p_bg, e_g, e_b, start_bad, alternate, rng, cap):
    """Gilbert-Elliott: state sojourns are geometric (leave G w.p. ``p_gb``, B w.p. ``p_bg`` per
    symbol); inside a sojourn each symbol errs independently with ``e_g`` / ``e_b`` (geometric
    skipping). Signs random, or alternating along runs of consecutive errors if ``alternate``.
    Returns ``(positions int64, signs int8)``."""
    pos_out = np.empty(cap, dtype=np.int64)
    sg_out = np.empty(cap, dtype=np.int8)
    m = 0
    t = 0.0
    bad = start_bad
    last = -2.0
    sign = 1
    while t < n:
        p_leave = p_bg if bad else p_gb
        # sojourn length >= 1: number of symbols spent in this state
        if p_leave >= 1.0:
            soj = 1.0
        elif p_leave <= 0.0:
            soj = n - t
        else:
            soj = 1.0 + _skip(rng, math.log1p(-p_leave))
        end = min(t + soj, float(n))
        e = e_b if bad else e_g
        if e > 0.0:
            log1m = math.log1p(-e) if e < 1.0 else 0.0
            pos = t - 1.0
            while True:
                gap = 0.0 if e >= 1.0 else _skip(rng, log1m)
                pos = pos + gap + 1.0
                if pos >= end:
                    break
                if alternate and pos == last + 1.0:
                    sign = -sign
                else:
                    sign = 1 if rng.random() < 0.5 else -1
                if m == pos_out.shape[0]:
                    pos_out = _grow(pos_out)
                    sg_out = _grow(sg_out)
                pos_out[m] = np.int64(pos)
                sg_out[m] = sign
                m += 1
                last = pos
        t = end
        bad = not bad
    return pos_out[:m], sg_out[:m]


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
