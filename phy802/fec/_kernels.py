"""Numba kernels of the RS codec (private: called only through :mod:`phy802.fec.rs`, which checks inputs).

Conventions shared by every kernel: a word is ``uint16[n]`` with index ``i`` holding the coefficient
of ``x^(n-1-i)`` (first in time first, parity last); an error at index ``i`` has locator
``X = alpha^(n-1-i)``; syndromes are ``S_j = r(alpha^j)``, ``j = 0..2t-1`` (first consecutive root 0).

Speed notes
-----------
* Division by g(x) (encoder, and the codeword check) is a CRC-style "slicing-by-6" LFSR: six
  message symbols per step, each looked up in its own table ``T[s, f] = f * x^(2t+5-s) mod g(x)``
  packed as 10-bit lanes, six per uint64 word (lane l = coefficient of x^(2t-1-l)). Shifting the
  register by 6 lanes is then a word move, and the six lookups of a step are independent, so the
  loop-carried chain is one load + xors per 6 symbols. For 2t <= 30 (KP4 exactly fills 5 words)
  the register lives in scalar words (CPU registers, also while the parity is written out or
  compared) and the tables are read through one flat view (constant offsets, no stride multiply);
  larger codes use an array version. The loop is bound by instruction/load throughput, not by
  latency or cache (measured on Zen-class cores: 2 or 4 interleaved codewords +0..5%, 12 symbols
  per step -10%, entries padded to 48 or 64 bytes -5%, 5-bit half tables that fit L1 -40%).
* Syndromes come from the remainder r(x) mod g(x) (2t coefficients) rather than from all n symbols,
  because g(alpha^j) = 0 for the 2t roots: r(alpha^j) = rem(alpha^j). An all-zero remainder means a
  codeword: the early exit of the decoder.
* Chien search runs only over the n real positions of the shortened code. Terms are kept as logs
  scaled to the current position; each root found deflates Lambda (a prefix XOR), the last root is
  solved in closed form, and (when t*(n-1) <= 16*1023, e.g. KP4/KR4) the logs carry a bias so that
  stepping needs no modulo and four positions are tested per pass. Forney values use the first
  consecutive root 0. Every correction is verified by recomputing all 2t syndromes of the error
  pattern, so a word marked corrected is always a codeword.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .gf1024 import EXP, LOG, LOG_ZERO, ORDER

__all__ = [
    "encode_batch",
    "remainder_batch",
    "syndromes_from_remainder",
    "syndromes_sparse_batch",
    "decode_batch",
    "decode_syndromes_batch",
    "outcome_batch",
]

_EXP = EXP
_LOG = LOG
_MASK = np.uint64(0x3FF)
_CHIEN_BIAS = 16 * ORDER
_EXPB = EXP[np.arange(_CHIEN_BIAS + ORDER) % ORDER]  # alpha^(i mod 1023) without a zero tail
_EXPB.setflags(write=False)


# --------------------------------------------------------------------------------------------
# Division by g(x): slicing-by-6 LFSR, 10-bit lanes, 6 lanes per uint64 word
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _lfsr5(row, count, Tf):
    """Remainder of ``sum row[i] x^(count-1-i) * x^(2t) mod g`` as 5 uint64 words (2t <= 30).

    Lane l (bits 10*(l%6).. of word l//6) is the coefficient of x^(2t-1-l). ``Tf`` is the
    (6, 1024, 5) table flattened, so that every lookup is one base register plus a constant
    offset (a 3-D index costs a multiply by the runtime stride and one live base per table,
    which spilled registers: ~25% slower).
    """
    w0 = np.uint64(0)
    w1 = np.uint64(0)
    w2 = np.uint64(0)
    w3 = np.uint64(0)
    w4 = np.uint64(0)
    mask = np.uint64(0x3FF)
    zero = np.uint64(0)
    # The first step may begin with virtual leading zeros (they do not change a remainder).
    # (Peeling that step out of the loop measured slower: it upsets register allocation.)
    i = -((6 - count % 6) % 6)
    while i < count:
        m0 = np.uint64(row[i]) if i >= 0 else zero
        m1 = np.uint64(row[i + 1]) if i + 1 >= 0 else zero
        m2 = np.uint64(row[i + 2]) if i + 2 >= 0 else zero
        m3 = np.uint64(row[i + 3]) if i + 3 >= 0 else zero
        m4 = np.uint64(row[i + 4]) if i + 4 >= 0 else zero
        m5 = np.uint64(row[i + 5])
        a = np.intp((w0 & mask) ^ m0) * 5
        b = np.intp(((w0 >> np.uint64(10)) & mask) ^ m1) * 5 + 5120
        c = np.intp(((w0 >> np.uint64(20)) & mask) ^ m2) * 5 + 10240
        d = np.intp(((w0 >> np.uint64(30)) & mask) ^ m3) * 5 + 15360
        e = np.intp(((w0 >> np.uint64(40)) & mask) ^ m4) * 5 + 20480
        g = np.intp((w0 >> np.uint64(50)) ^ m5) * 5 + 25600
        w0 = w1 ^ Tf[a] ^ Tf[b] ^ Tf[c] ^ Tf[d] ^ Tf[e] ^ Tf[g]
        w1 = w2 ^ Tf[a + 1] ^ Tf[b + 1] ^ Tf[c + 1] ^ Tf[d + 1] ^ Tf[e + 1] ^ Tf[g + 1]
        w2 = w3 ^ Tf[a + 2] ^ Tf[b + 2] ^ Tf[c + 2] ^ Tf[d + 2] ^ Tf[e + 2] ^ Tf[g + 2]
        w3 = w4 ^ Tf[a + 3] ^ Tf[b + 3] ^ Tf[c + 3] ^ Tf[d + 3] ^ Tf[e + 3] ^ Tf[g + 3]
        w4 = Tf[a + 4] ^ Tf[b + 4] ^ Tf[c + 4] ^ Tf[d + 4] ^ Tf[e + 4] ^ Tf[g + 4]
        i += 6
    return w0, w1, w2, w3, w4


@njit(cache=True)
def _lfsr_generic(row, start, count, T, w):
    """Same recurrence as :func:`_lfsr5` for any number of words; result left in ``w[:W]``."""
    W = T.shape[2]
    mask = np.uint64(0x3FF)
    for j in range(W + 1):
        w[j] = 0
    pad = (6 - count % 6) % 6
    i = start - pad
    end = start + count
    while i < end:
        w0 = w[0]
        f0 = (w0 & mask) ^ (np.uint64(row[i]) if i >= start else np.uint64(0))
        f1 = ((w0 >> np.uint64(10)) & mask) ^ (np.uint64(row[i + 1]) if i + 1 >= start else np.uint64(0))
        f2 = ((w0 >> np.uint64(20)) & mask) ^ (np.uint64(row[i + 2]) if i + 2 >= start else np.uint64(0))
        f3 = ((w0 >> np.uint64(30)) & mask) ^ (np.uint64(row[i + 3]) if i + 3 >= start else np.uint64(0))
        f4 = ((w0 >> np.uint64(40)) & mask) ^ (np.uint64(row[i + 4]) if i + 4 >= start else np.uint64(0))
        f5 = (w0 >> np.uint64(50)) ^ np.uint64(row[i + 5])
        for j in range(W):
            w[j] = (w[j + 1] ^ T[0, f0, j] ^ T[1, f1, j] ^ T[2, f2, j]
                    ^ T[3, f3, j] ^ T[4, f4, j] ^ T[5, f5, j])
        i += 6


@njit(cache=True)
def _flat(T):
    """``T`` (6, 1024, W) as one flat C-contiguous view, for :func:`_lfsr5`."""
    return T.reshape(T.size)


@njit(cache=True)
def _lane(w, l):
    return np.uint16((w[l // 6] >> np.uint64(10 * (l % 6))) & _MASK)


@njit(cache=True)
def _word5(w0, w1, w2, w3, w4, j):
    if j == 0:
        return w0
    if j == 1:
        return w1
    if j == 2:
        return w2
    if j == 3:
        return w3
    return w4


@njit(cache=True)
def _remainder_lanes(row, k, nparity, T, Tf, w, fill, rem):
    """r(x) mod g(x) of the whole word ``row``; return True if it is zero (a codeword).

    The encoder's parity of ``row[:k]`` is compared with the received parity ``row[k:]`` packed
    into the same 10-bit lanes (one 64-bit compare per 6 symbols). ``rem[:nparity]`` (lane l =
    coefficient of x^(nparity-1-l)) is filled when the word is not a codeword, or always if ``fill``.
    """
    if T.shape[2] <= 5:
        w0, w1, w2, w3, w4 = _lfsr5(row, k, Tf)  # kept in registers: no round trip through w
    else:
        _lfsr_generic(row, 0, k, T, w)
        w0 = w[0]
        w1 = w[1]
        w2 = w[2]
        w3 = w[3]
        w4 = w[4]
    diff = np.uint64(0)
    for j in range((nparity + 5) // 6):
        packed = np.uint64(0)
        for l in range(6 * j, min(6 * j + 6, nparity)):
            packed |= np.uint64(row[k + l]) << np.uint64(10 * (l - 6 * j))
        wj = _word5(w0, w1, w2, w3, w4, j) if j < 5 else w[j]
        diff |= packed ^ wj
    if fill or diff != 0:
        for l in range(nparity):
            j = l // 6
            wj = _word5(w0, w1, w2, w3, w4, j) if j < 5 else w[j]
            rem[l] = np.uint16((wj >> np.uint64(10 * (l % 6))) & _MASK) ^ row[k + l]
    return diff == 0


@njit(cache=True)
def encode_batch(msgs, T, nparity, out):
    """``out[w, :k] = msgs[w]``, ``out[w, k:] = parity``; msgs uint16[N, k], out uint16[N, k+nparity]."""
    N, k = msgs.shape
    W = T.shape[2]
    Tf = _flat(T)
    w = np.zeros(max(W, 5) + 1, dtype=np.uint64)
    for r in range(N):
        row = msgs[r]
        o = out[r]
        for i in range(k):
            o[i] = row[i]
        if W <= 5:
            w0, w1, w2, w3, w4 = _lfsr5(row, k, Tf)  # kept in registers: no round trip through w
            for l in range(nparity):
                wj = _word5(w0, w1, w2, w3, w4, l // 6)
                o[k + l] = np.uint16((wj >> np.uint64(10 * (l % 6))) & _MASK)
        else:
            _lfsr_generic(row, 0, k, T, w)
            for l in range(nparity):
                o[k + l] = _lane(w, l)


@njit(cache=True)
def remainder_batch(words, k, T, nparity, rem):
    """``rem[w] = words[w](x) mod g(x)`` (lanes high -> low); returns bool[N] "is a codeword"."""
    N = words.shape[0]
    W = T.shape[2]
    Tf = _flat(T)
    w = np.zeros(max(W, 5) + 1, dtype=np.uint64)
    ok = np.empty(N, dtype=np.bool_)
    for r in range(N):
        ok[r] = _remainder_lanes(words[r], k, nparity, T, Tf, w, True, rem[r])
    return ok


# --------------------------------------------------------------------------------------------
# Syndromes
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _syn_from_rem(rem, E, S):
    """S_j = rem(alpha^j) with ``E[j, l] = (nparity-1-l) * j mod 1023``."""
    nsyn = S.shape[0]
    nparity = rem.shape[0]
    for j in range(nsyn):
        S[j] = 0
    for l in range(nparity):
        lr = _LOG[rem[l]]
        if lr == LOG_ZERO:
            continue
        for j in range(nsyn):
            S[j] ^= _EXP[lr + E[j, l]]


@njit(cache=True)
def syndromes_from_remainder(rem, E, S):
    """Batch of :func:`_syn_from_rem`: rem uint16[N, 2t] -> S uint16[N, 2t]."""
    for r in range(rem.shape[0]):
        _syn_from_rem(rem[r], E, S[r])


@njit(cache=True)
def syndromes_sparse_batch(positions, values, n, S):
    """S[w, j] = sum_m values[w, m] * alpha^(j * (n-1-positions[w, m])); zero values contribute nothing."""
    N, nm = positions.shape
    nsyn = S.shape[1]
    for r in range(N):
        for j in range(nsyn):
            S[r, j] = 0
        for m in range(nm):
            lv = _LOG[values[r, m]]
            if lv == LOG_ZERO:
                continue
            p = n - 1 - positions[r, m]
            e = 0  # (p * j) mod 1023, stepped to avoid a multiply and a modulo per syndrome
            for j in range(nsyn):
                S[r, j] ^= _EXP[lv + e]
                e += p
                if e >= ORDER:
                    e -= ORDER


# --------------------------------------------------------------------------------------------
# Berlekamp-Massey, Chien, Forney
# --------------------------------------------------------------------------------------------


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def _solve(S, n, t, C, B, Tmp, dg, cl, pos, val, xl, U, lS, nx):
    """Bounded-distance decode from the 2t syndromes ``S``.

    Returns the number of errors ``nu`` (0..t) with ``pos[:nu]`` (word indices) and ``val[:nu]``
    (error values), or -1 when the word is not within distance t of a codeword. A returned pattern
    always reproduces all 2t syndromes, so applying it yields a codeword.
    """
    nsyn = 2 * t
    allzero = True
    for j in range(nsyn):
        if S[j] != 0:
            allzero = False
            break
    if allzero:
        return 0
    # --- Berlekamp-Massey: Lambda(x) = C(x), low -> high, C[0] = 1.
    size = C.shape[0]
    for i in range(size):
        C[i] = 0
        B[i] = 0
    C[0] = 1
    B[0] = 1
    L = 0
    m = 1
    nb = 1  # deg(B) + 1
    lb = 0  # LOG of the last nonzero discrepancy b (b = 1 initially)
    for j in range(nsyn):
        lS[j] = _LOG[S[j]]
    for r in range(nsyn):
        d = S[r]
        for i in range(1, L + 1):
            d ^= _EXP[_LOG[C[i]] + lS[r - i]]
        if d == 0:
            m += 1
            continue
        lc = _LOG[d] - lb
        if lc < 0:
            lc += ORDER
        hi = min(nb, size - m)  # deg(x^m B) <= r + 1 - L <= 2t, so nothing is cut off
        if 2 * L <= r:
            nc = L + 1
            for i in range(nc):
                Tmp[i] = C[i]
            for i in range(hi):
                C[i + m] ^= _EXP[lc + _LOG[B[i]]]
            L = r + 1 - L
            if L > t:
                return -1
            for i in range(nc):
                B[i] = Tmp[i]
            for i in range(nc, nb):
                B[i] = 0
            nb = nc
            lb = _LOG[d]
            m = 1
        else:
            for i in range(hi):
                C[i + m] ^= _EXP[lc + _LOG[B[i]]]
            m += 1
    for i in range(L + 1, size):
        if C[i] != 0:  # pragma: no cover - BM invariant: deg C <= L
            return -1
    if C[L] == 0:
        return -1
    # --- Chien search over the n real positions only, with deflation.
    # The terms are kept scaled to the current position p: u_i = lambda_i alpha^(-i p) (as logs
    # cl[], stepped by -i per position). A root at p means sum u_i = 0; Lambda is then divided by
    # (1 - y) in the scaled variable y (q_i = u_i ^ q_(i-1)), so later positions cost less.
    # When one root is left it is solved directly: 1 + u_1 y = 0 at y = alpha^-(p'-p), p' = p + log u_1.
    nt = 0
    for i in range(1, L + 1):
        if C[i] != 0:
            dg[nt] = i
            cl[nt] = _LOG[C[i]]
            nt += 1
    nroots = 0
    deg = L
    p = 0
    if t * (n - 1) <= _CHIEN_BIAS:
        # Fast form: logs carry a bias so that stepping never wraps (no modulo in the loop), and
        # four positions are evaluated per pass. Deflating at p does not change the other roots,
        # so a pass without a zero skips 4 positions safely; any zero sends us to the one-step path.
        for q in range(nt):
            cl[q] += _CHIEN_BIAS
        while p < n:
            if deg == 1:
                if nt != 1:
                    return -1
                pr = p + cl[0] % ORDER  # log u_1
                if pr < n:
                    pos[nroots] = n - 1 - pr
                    xl[nroots] = (ORDER - pr) % ORDER
                    nroots += 1
                break
            if p + 3 < n:
                s0 = 1
                s1 = 1
                s2 = 1
                s3 = 1
                for q in range(nt):
                    c = cl[q]
                    d = dg[q]
                    s0 ^= _EXPB[c]
                    s1 ^= _EXPB[c - d]
                    s2 ^= _EXPB[c - 2 * d]
                    s3 ^= _EXPB[c - 3 * d]
                    nx[q] = c - 4 * d
                if s0 != 0 and s1 != 0 and s2 != 0 and s3 != 0:
                    for q in range(nt):
                        cl[q] = nx[q]
                    p += 4
                    continue
            s = 1
            for q in range(nt):
                s ^= _EXPB[cl[q]]
            if s == 0:
                pos[nroots] = n - 1 - p
                xl[nroots] = (ORDER - p) % ORDER  # log of X^-1
                nroots += 1
                for i in range(1, deg + 1):
                    U[i] = 0
                for q in range(nt):
                    U[dg[q]] = _EXPB[cl[q]]
                acc = 1
                nt = 0
                for i in range(1, deg):
                    acc ^= U[i]
                    if acc != 0:
                        dg[nt] = i
                        cl[nt] = _LOG[acc] + _CHIEN_BIAS
                        nt += 1
                deg -= 1
            for q in range(nt):
                cl[q] -= dg[q]
            p += 1
    else:
        while p < n:
            if deg == 1:
                if nt != 1:
                    return -1
                pr = p + cl[0]  # cl[0] = log u_1, in 0..1022
                if pr < n:
                    pos[nroots] = n - 1 - pr
                    xl[nroots] = (ORDER - pr) % ORDER
                    nroots += 1
                break
            s = np.uint16(1)
            for q in range(nt):
                s ^= _EXP[cl[q]]
            if s == 0:
                pos[nroots] = n - 1 - p
                xl[nroots] = (ORDER - p) % ORDER  # log of X^-1
                nroots += 1
                # Deflate: dense scaled coefficients, then prefix XOR.
                for i in range(1, deg + 1):
                    U[i] = 0
                for q in range(nt):
                    U[dg[q]] = _EXP[cl[q]]
                acc = np.uint16(1)
                nt = 0
                for i in range(1, deg):
                    acc ^= U[i]
                    if acc != 0:
                        dg[nt] = i
                        cl[nt] = _LOG[acc]
                        nt += 1
                deg -= 1
            for q in range(nt):
                c = cl[q] - dg[q]
                if c < 0:
                    c += ORDER
                cl[q] = c
            p += 1
    if nroots != L:
        return -1
    # --- Forney (first consecutive root 0): e = X * Omega(X^-1) / Lambda'(X^-1),
    # Omega(x) = S(x) Lambda(x) mod x^L (its degree is < L for a valid solution; the syndrome check
    # below rejects anything else).
    for i in range(L):  # reuse Tmp for log(Omega_i)
        o = np.uint16(0)
        for j in range(i + 1):
            o ^= _EXP[lS[j] + _LOG[C[i - j]]]
        Tmp[i] = o
    for q in range(nroots):
        x = xl[q]
        om = np.uint16(0)
        e = 0
        for i in range(L):
            om ^= _EXP[_LOG[Tmp[i]] + e]
            e += x
            if e >= ORDER:
                e -= ORDER
        dl = np.uint16(0)
        x2 = (2 * x) % ORDER
        e = 0
        for i in range(1, L + 1, 2):
            dl ^= _EXP[_LOG[C[i]] + e]
            e += x2
            if e >= ORDER:
                e -= ORDER
        if om == 0 or dl == 0:
            return -1
        lv = (ORDER - x) + _LOG[om] - _LOG[dl]  # log X = -log X^-1
        lv %= ORDER
        val[q] = _EXP[lv]
    # --- Verify: the pattern must reproduce every syndrome (guarantees a codeword result).
    # Reuse dg (exponent stepper, p*j mod 1023) and cl (log of the value) per error.
    for q in range(nroots):
        dg[q] = 0
        cl[q] = _LOG[val[q]]
    for j in range(nsyn):
        s = S[j]
        for q in range(nroots):
            s ^= _EXP[cl[q] + dg[q]]
            e = dg[q] + (n - 1 - pos[q])
            if e >= ORDER:
                e -= ORDER
            dg[q] = e
        if s != 0:
            return -1
    return nroots


@njit(cache=True)
def decode_syndromes_batch(S, n, t, pos, val, count):
    """Batch of :func:`_solve`: S uint16[N, 2t] -> pos int16[N, t], val uint16[N, t], count int16[N]."""
    N = S.shape[0]
    size = 2 * t + 2
    C = np.zeros(size, np.uint16)
    B = np.zeros(size, np.uint16)
    Tmp = np.zeros(size, np.uint16)
    dg = np.zeros(size, np.int64)
    cl = np.zeros(size, np.int64)
    p_ = np.zeros(size, np.int64)
    v_ = np.zeros(size, np.uint16)
    xl = np.zeros(size, np.int64)
    U = np.zeros(size, np.uint16)
    lS = np.zeros(2 * t, np.int64)
    nx = np.zeros(size, np.int64)
    for r in range(N):
        for q in range(t):
            pos[r, q] = -1
            val[r, q] = 0
        nu = _solve(S[r], n, t, C, B, Tmp, dg, cl, p_, v_, xl, U, lS, nx)
        count[r] = nu
        for q in range(max(nu, 0)):
            pos[r, q] = p_[q]
            val[r, q] = v_[q]


@njit(cache=True)
def decode_batch(words, k, T, t, E, detect_only, ncorr):
    """Decode ``words`` (uint16[N, n]) in place; ``ncorr[w]`` = symbols corrected or -1."""
    N, n = words.shape
    nparity = n - k
    W = T.shape[2]
    Tf = _flat(T)
    w = np.zeros(max(W, 5) + 1, dtype=np.uint64)
    rem = np.zeros(nparity, np.uint16)
    S = np.zeros(2 * t, np.uint16)
    size = 2 * t + 2
    C = np.zeros(size, np.uint16)
    B = np.zeros(size, np.uint16)
    Tmp = np.zeros(size, np.uint16)
    dg = np.zeros(size, np.int64)
    cl = np.zeros(size, np.int64)
    p_ = np.zeros(size, np.int64)
    v_ = np.zeros(size, np.uint16)
    xl = np.zeros(size, np.int64)
    U = np.zeros(size, np.uint16)
    lS = np.zeros(2 * t, np.int64)
    nx = np.zeros(size, np.int64)
    for r in range(N):
        row = words[r]
        if _remainder_lanes(row, k, nparity, T, Tf, w, False, rem):
            ncorr[r] = 0
            continue
        if detect_only:
            ncorr[r] = -1
            continue
        _syn_from_rem(rem, E, S)
        nu = _solve(S, n, t, C, B, Tmp, dg, cl, p_, v_, xl, U, lS, nx)
        ncorr[r] = nu
        for q in range(max(nu, 0)):
            row[p_[q]] ^= v_[q]


@njit(cache=True)
def outcome_batch(positions, values, n, t, out):
    """0 = back to the sent word, 1 = reported uncorrectable, 2 = miscorrected (see rs.error_pattern_outcome).

    A pattern of weight <= t is always corrected by a bounded-distance decoder, so only heavier
    patterns are decoded (from their sparse syndromes).
    """
    N, nm = positions.shape
    nsyn = 2 * t
    size = 2 * t + 2
    C = np.zeros(size, np.uint16)
    B = np.zeros(size, np.uint16)
    Tmp = np.zeros(size, np.uint16)
    dg = np.zeros(size, np.int64)
    cl = np.zeros(size, np.int64)
    p_ = np.zeros(size, np.int64)
    v_ = np.zeros(size, np.uint16)
    xl = np.zeros(size, np.int64)
    U = np.zeros(size, np.uint16)
    lS = np.zeros(nsyn, np.int64)
    nx = np.zeros(size, np.int64)
    S = np.zeros((1, nsyn), np.uint16)
    e = np.zeros(n, np.uint16)
    for r in range(N):
        for m in range(nm):
            e[positions[r, m]] ^= values[r, m]
        weight = 0
        for m in range(nm):
            pm = positions[r, m]
            if e[pm] != 0 and e[pm] < 0x8000:
                weight += 1
                e[pm] |= np.uint16(0x8000)  # mark counted (duplicates), cleared below
        for m in range(nm):
            e[positions[r, m]] &= np.uint16(0x3FF)
        if weight <= t:
            out[r] = 0
        else:
            syndromes_sparse_batch(positions[r : r + 1], values[r : r + 1], n, S)
            nu = _solve(S[0], n, t, C, B, Tmp, dg, cl, p_, v_, xl, U, lS, nx)
            if nu < 0:
                out[r] = 1
            else:
                # true pattern XOR decoded pattern must vanish
                for q in range(nu):
                    e[p_[q]] ^= v_[q]
                same = True
                for m in range(nm):
                    if e[positions[r, m]] != 0:
                        same = False
                for q in range(nu):
                    if e[p_[q]] != 0:
                        same = False
                for q in range(nu):
                    e[p_[q]] = 0
                out[r] = 0 if same else 2
        for m in range(nm):
            e[positions[r, m]] = 0
