"""Numba kernels of :mod:`phy802.link` (private; the public wrappers check dtypes and shapes).

* :func:`pam4_line` builds the PAM4 line symbols of every physical lane straight from the PCS
  lane symbols: bit-mux (120.5.2), Gray map (120.5.7.1) and the optional 1/(1+D) mod 4 precoder
  (120.5.7.2) in one pass, with no per-bit arrays.
* :func:`awgn_line_errors` samples PAM4 AWGN symbol errors of one physical lane reading the sent
  level of a candidate position straight from the PCS lane symbols (no line array), with exactly
  the draws of :func:`phy802.channel._kernels.awgn_events_known` on the dense line.
* :func:`line_flips` turns sparse line symbol errors into the physical-lane *bits* that are wrong
  after the receive precoder and Gray demap.  It only needs the sent and received levels at the
  error positions and their neighbours, so the same kernel serves the bit-exact link (neighbours
  read from the dense line) and the data-free fast path (neighbours drawn from their law).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["spread_table", "pam4_line", "line_flips", "awgn_line_errors", "xor_flips", "post_fec_counts",
           "locate_level_errors"]

#: ``2A + B`` of a PAM4 level (Gray labels, 120.5.7.1: 0->00, 1->01, 2->11, 3->10)
GRAY_BITS = np.array([0, 1, 3, 2], dtype=np.uint8)
#: level of the bit pair whose value in a physical-lane chunk is ``A | B << 1`` (A first in time)
GRAY_OF_CHUNK = np.array([0, 3, 1, 2], dtype=np.uint8)


def spread_table(r: int) -> np.ndarray:
    """``T[v]`` = the 10 bits of ``v`` moved to bit positions ``0, r, 2r, ..., 9r`` (uint64)."""
    v = np.arange(1024, dtype=np.uint64)
    out = np.zeros(1024, dtype=np.uint64)
    for b in range(10):
        out |= ((v >> np.uint64(b)) & np.uint64(1)) << np.uint64(r * b)
    return out


@njit(cache=True)
def pam4_line(syms, order, spread, precoded, init, out):
    """PCS lane symbols ``uint16[L, N]`` -> line levels ``uint8[n_phys, N * 5 r]``.

    Physical lane ``i`` bit ``q`` is bit ``q // r`` of PCS lane ``order[i, q % r]`` (symbols sent
    bit 0 first); PAM4 symbol ``j`` takes bits ``2j`` (A) and ``2j + 1`` (B).  For one PCS-lane
    symbol slot the ``r`` lanes' 10 bits interleave into a ``10 r``-bit chunk = ``5 r`` symbols.
    """
    n_phys, r = order.shape
    N = syms.shape[1]
    per = 5 * r
    for i in range(n_phys):
        prev = init
        for s in range(N):
            chunk = np.uint64(0)
            for m in range(r):
                chunk |= spread[syms[order[i, m], s]] << np.uint64(m)
            base = s * per
            for k in range(per):
                g = GRAY_OF_CHUNK[(chunk >> np.uint64(2 * k)) & np.uint64(3)]
                if precoded:
                    prev = (g - prev) & 3
                    out[i, base + k] = prev
                else:
                    out[i, base + k] = g
    return out


@njit(cache=True)
def line_flips(U, sent, recv, is_err, n_sym, precoded, init, flips):
    """Physical-lane bit positions that are wrong after the receiver's precoder + Gray demap.

    ``U`` (sorted int64) holds every error position and, when precoded, its neighbours
    ``j - 1`` and ``j + 1`` inside ``[0, n_sym)``; ``sent``/``recv`` are the line levels there
    (equal where ``is_err`` is False).  With precoding the decoded symbol is
    ``G(x) = P(x) + P(x-1) mod 4`` (``P(-1) = init``), so an error at ``j`` touches ``x = j`` and
    ``x = j + 1``.  Writes bit positions ``2x`` (A) / ``2x + 1`` (B) into ``flips`` and returns how
    many (``flips`` needs room for ``4 len(U)``).
    """
    m = 0
    nU = U.shape[0]
    for a in range(nU):
        x = U[a]
        affected = is_err[a]
        if precoded and not affected and a > 0 and U[a - 1] == x - 1 and is_err[a - 1]:
            affected = True
        if not affected:
            continue
        if precoded:
            if x == 0:
                ps, pr = init, init
            else:
                # x - 1 is in U whenever x is affected (neighbour of an error or an error's successor)
                ps, pr = sent[a - 1], recv[a - 1]
            g = (sent[a] + ps) & 3
            gr = (recv[a] + pr) & 3
        else:
            g = sent[a]
            gr = recv[a]
        d = GRAY_BITS[g] ^ GRAY_BITS[gr]
        if d & 2:
            flips[m] = 2 * x
            m += 1
        if d & 1:
            flips[m] = 2 * x + 1
            m += 1
    return m


@njit(cache=True)
def locate(q, lane, order, gather, n, K, L_out, u_out, c_out, t_out, b_out):
    """Physical-lane bits ``q`` of lane ``lane`` -> PCS lane, PCS-lane bit, codeword ``2 p + X``,
    symbol ``t`` and bit ``b`` (see :class:`phy802.link.LinkGeometry`)."""
    r = order.shape[1]
    for i in range(q.shape[0]):
        L = order[lane, q[i] % r]
        u = q[i] // r
        s = u // 10
        g = gather[L, s % K]
        L_out[i] = L
        u_out[i] = u
        c_out[i] = 2 * (s // K) + g // n
        t_out[i] = g % n
        b_out[i] = u % 10


@njit(cache=True)
def line_level(syms, lane, order, j):
    """Sent (non-precoded) PAM4 level of symbol ``j`` of physical lane ``lane``: physical bit ``q``
    is bit ``q // r`` of PCS lane ``order[lane, q % r]``; symbol j = Gray(bit 2j, bit 2j + 1)."""
    r = order.shape[1]
    q = 2 * j
    u = q // r
    a = (syms[order[lane, q % r], u // 10] >> (u % 10)) & 1
    q += 1
    u = q // r
    b = (syms[order[lane, q % r], u // 10] >> (u % 10)) & 1
    return GRAY_OF_CHUNK[a | (b << 1)]


@njit(cache=True)
def awgn_line_errors(syms, lane, order, n_sym, p_err, cdf, rng, cap):
    """PAM4 AWGN symbol errors on physical lane ``lane`` (no precoder), sent levels read lazily.

    Same algorithm and the same random draws, in the same order, as
    :func:`phy802.channel._kernels.awgn_events_known` applied to the dense line of that lane
    (thinning: candidates at rate ``max(p_err)`` by geometric skipping, kept with probability
    ``p_err[s] / pmax``, received level from ``cdf[s]``), so a seed gives the same errors; only
    the ~``n_sym * pmax`` candidate symbols are ever formed.  Returns ``(positions int64, sent
    uint8, received uint8)``.
    """
    pos_out = np.empty(cap, dtype=np.int64)
    s_out = np.empty(cap, dtype=np.uint8)
    r_out = np.empty(cap, dtype=np.uint8)
    m = 0
    pmax = 0.0
    for s in range(4):
        if p_err[s] > pmax:
            pmax = p_err[s]
    if pmax <= 0.0:
        return pos_out[:0], s_out[:0], r_out[:0]
    log1m = math.log1p(-pmax) if pmax < 1.0 else -np.inf
    pos = -1.0
    while True:
        if pmax >= 1.0:
            gap = 0.0
        else:
            u = 1.0 - rng.random()  # (0, 1]
            gap = math.floor(math.log(u) / log1m)
        pos = pos + gap + 1.0
        if pos >= n_sym:
            break
        j = np.int64(pos)
        s = line_level(syms, lane, order, j)
        acc = p_err[s] / pmax
        v = rng.random()
        if v >= acc:
            continue
        w = v / acc
        r = 0
        while r < 3 and w >= cdf[s, r]:
            r += 1
        if m == pos_out.shape[0]:
            n2 = 2 * m + 16
            p2 = np.empty(n2, np.int64)
            s2 = np.empty(n2, np.uint8)
            r2 = np.empty(n2, np.uint8)
            p2[:m] = pos_out
            s2[:m] = s_out
            r2[:m] = r_out
            pos_out, s_out, r_out = p2, s2, r2
        pos_out[m] = j
        s_out[m] = s
        r_out[m] = r
        m += 1
    return pos_out[:m], s_out[:m], r_out[:m]


@njit(cache=True)
def xor_flips(rx, L, u):
    """Flip PCS-lane bit ``u[i]`` of lane ``L[i]`` in the symbol array ``rx`` (in place)."""
    for i in range(L.shape[0]):
        rx[L[i], u[i] // 10] ^= np.uint16(1 << (u[i] % 10))


@njit(cache=True)
def post_fec_counts(tx_cw, dec_cw, w, ncorr, k0, k1, decoded, correct, pop10):
    """Post-FEC counters over the words with pre-FEC errors (``w[c] > 0``; the others are
    untouched by any decoder): ``(symbol errors, bit errors, codeword errors, undetected,
    miscorrected)`` of the payload symbols ``k0 .. k1-1`` (the message less any pad);
    "miscorrected" = the decoder reported a correction (``correct`` mode) and the word still
    differs anywhere."""
    n = tx_cw.shape[1]
    nsym = 0
    nbit = 0
    ncw = 0
    und = 0
    mis = 0
    for c in range(tx_cw.shape[0]):
        if w[c] == 0:
            continue
        ws = 0
        for i in range(k0, k1):
            d = tx_cw[c, i] ^ dec_cw[c, i]
            if d != 0:
                ws += 1
                nbit += pop10[d]
        nsym += ws
        if ws > 0:
            ncw += 1
            if not (decoded and ncorr[c] < 0):
                und += 1
        if correct and ncorr[c] > 0:
            differs = ws > 0
            i = 0
            while not differs and i < n:
                if i < k0 or i >= k1:
                    differs = tx_cw[c, i] != dec_cw[c, i]
                i += 1
            if differs:
                mis += 1
    return nsym, nbit, ncw, und, mis


@njit(cache=True)
def locate_level_errors(lane_start, pos, sent, recv, order, gather, n, K, lane_bits, L_out, u_out, c_out, t_out, b_out):
    """Non-precoded line errors of all lanes -> wrong bits, located (what :func:`line_flips` then
    :func:`locate` do per lane, in the same order).  Lane ``i``'s errors are
    ``[lane_start[i], lane_start[i + 1])`` of ``pos``/``sent``/``recv``; ``lane_bits[i]`` gets its
    number of wrong bits.  Outputs need room for two bits per error; returns the count."""
    r = order.shape[1]
    m = 0
    for lane in range(lane_start.shape[0] - 1):
        m0 = m
        for e in range(lane_start[lane], lane_start[lane + 1]):
            d = GRAY_BITS[sent[e]] ^ GRAY_BITS[recv[e]]
            for k in range(2):  # A (bit 2x) first, then B (bit 2x + 1)
                if d & (2 >> k):
                    q = 2 * pos[e] + k
                    L = order[lane, q % r]
                    u = q // r
                    sy = u // 10
                    g = gather[L, sy % K]
                    L_out[m] = L
                    u_out[m] = u
                    c_out[m] = 2 * (sy // K) + g // n
                    t_out[m] = g % n
                    b_out[m] = u % 10
                    m += 1
        lane_bits[lane] = m - m0
    return m


# ------------------------------------------------------------------ Clause 177 inner code


@njit(cache=True)
def _tail_normal(alpha, rng):
    """``Z ~ N(0, 1)`` conditioned on ``Z >= alpha`` (``alpha >= 0``): Robert's (1995) exponential
    rejection, efficient however far the threshold is."""
    lam = 0.5 * (alpha + math.sqrt(alpha * alpha + 4.0))
    while True:
        z = alpha + rng.standard_exponential() / lam
        if rng.random() <= math.exp(-0.5 * (z - lam) * (z - lam)):
            return z


@njit(cache=True)
def inner_error_blocks(start, sym, sent, recv, sigma, ok_cdf, rng, y_out, sent_out):
    """PAM4 samples of the inner blocks that hold slicer errors, drawn from their exact
    conditional law (the data-free path of :mod:`phy802.link.concat`).

    Block ``j`` has the errors ``start[j] .. start[j + 1] - 1`` (symbol ``sym`` 0..63, sent and
    received levels).  An erroneous symbol's sample is the sent level plus noise conditioned on
    landing in the received level's region (tail sampler, rejection of the far side); every other
    symbol draws its sent level from ``P(level | no error)`` (``ok_cdf``) and its noise conditioned
    on staying in that level's region (plain rejection).  Writes ``y_out[j, 64]`` (levels -3..3)
    and the sent Gray bits ``sent_out[j, 128]`` (A = bit 2k).
    """
    lo_t = np.array([-np.inf, -2.0, 0.0, 2.0])
    hi_t = np.array([-2.0, 0.0, 2.0, np.inf])
    gray = np.array([0, 1, 3, 2], np.uint8)
    for j in range(start.shape[0] - 1):
        for k in range(64):
            y_out[j, k] = np.nan
        for e in range(start[j], start[j + 1]):
            k = sym[e]
            s = sent[e]
            r = recv[e]
            a = 2.0 * s - 3.0
            while True:
                if r > s:
                    v = a + sigma * _tail_normal((lo_t[r] - a) / sigma, rng)
                    if v < hi_t[r]:
                        break
                else:
                    v = a - sigma * _tail_normal((a - hi_t[r]) / sigma, rng)
                    if v >= lo_t[r]:
                        break
            y_out[j, k] = v
            g = gray[s]
            sent_out[j, 2 * k] = (g >> 1) & 1
            sent_out[j, 2 * k + 1] = g & 1
        for k in range(64):
            if not np.isnan(y_out[j, k]):
                continue
            u = rng.random()
            s = 0
            while s < 3 and u >= ok_cdf[s]:
                s += 1
            a = 2.0 * s - 3.0
            while True:
                v = a + sigma * rng.standard_normal()
                if v >= lo_t[s] and v < hi_t[s]:
                    break
            y_out[j, k] = v
            g = gray[s]
            sent_out[j, 2 * k] = (g >> 1) & 1
            sent_out[j, 2 * k + 1] = g & 1
    return y_out
