"""Numba kernels of the channel models (private).

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
