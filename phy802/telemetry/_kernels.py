"""Numba kernel behind :mod:`phy802.telemetry.fit`: the codeword symbol-error count of a Markov error
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


# ------------------------------------------------------------------------------ fast path
# The same codeword law as markov_count_pmf, by repeated squaring of the symbol's polynomial
# transfer matrix M(z) = N + z Y truncated at degree kmax (the last coefficient absorbs every count
# >= kmax, and a matrix of E[W 1{W >= kmax}] rides along). Powers of one M commute, so the binary
# powering is exact; every entry stays a sum of non-negative terms (no 1 - sum cancellation in the
# tail). About 11 products of 2x2 polynomial matrices for n = 544 instead of 544 DP steps.


@njit(cache=True)
def _poly_mul(a, ma, b, mb, kmax):  # pragma: no cover - compiled
    S = a.shape[1]
    c = np.zeros_like(a)
    mc = np.zeros_like(ma)
    # suffix sums of B: SB[j] = sum_{l >= j} b[l] (b[kmax] included), MB[j] = sum_{j <= l < kmax} l b[l] + mb
    SB = np.zeros_like(a)
    MB = np.zeros_like(a)
    SB[kmax] = b[kmax]
    MB[kmax] = mb
    for j in range(kmax - 1, -1, -1):
        for r in range(S):
            for s in range(S):
                SB[j, r, s] = SB[j + 1, r, s] + b[j, r, s]
                MB[j, r, s] = MB[j + 1, r, s] + j * b[j, r, s]
    for k in range(kmax):
        for i in range(k + 1):
            ai = a[i]
            bj = b[k - i]
            for r in range(S):
                for s in range(S):
                    acc = 0.0
                    for u in range(S):
                        acc += ai[r, u] * bj[u, s]
                    c[k, r, s] += acc
    for r in range(S):
        for s in range(S):
            acc_c = 0.0
            acc_m = 0.0
            for u in range(S):
                acc_c += a[kmax, r, u] * SB[0, u, s]
                acc_m += ma[r, u] * SB[0, u, s] + a[kmax, r, u] * MB[0, u, s]
            for i in range(kmax):
                j = kmax - i
                for u in range(S):
                    x = a[i, r, u]
                    if x != 0.0:
                        acc_c += x * SB[j, u, s]
                        acc_m += x * (i * SB[j, u, s] + MB[j, u, s])
            c[kmax, r, s] = acc_c
            mc[r, s] = acc_m
    return c, mc


@njit(cache=True)
def markov_count_pmf_fast(N, Y, init, n_symbols, kmax):  # pragma: no cover - compiled
    """Same result as :func:`markov_count_pmf` (to rounding), by binary powering."""
    S = init.shape[0]
    p = np.zeros((kmax + 1, S, S))
    p[0] = N
    p[1] = Y
    mp = np.zeros((S, S))
    r = np.zeros((kmax + 1, S, S))
    mr = np.zeros((S, S))
    have = False
    e = n_symbols
    while e > 0:
        if e & 1:
            if have:
                r, mr = _poly_mul(r, mr, p, mp, kmax)
            else:
                r = p.copy()
                mr = mp.copy()
                have = True
        e >>= 1
        if e > 0:
            p, mp = _poly_mul(p, mp, p, mp, kmax)
    out = np.zeros(kmax + 1)
    tot = 0.0
    for k in range(kmax + 1):
        for s0 in range(S):
            for s1 in range(S):
                out[k] += init[s0] * r[k, s0, s1]
    for s0 in range(S):
        for s1 in range(S):
            tot += init[s0] * mr[s0, s1]
    return out, tot


@njit(cache=True)
def _sigmoid(v):  # pragma: no cover - compiled
    v = min(max(v, -30.0), 30.0)
    return 1.0 / (1.0 + np.exp(-v))


@njit(cache=True)
def params_from_x(model, x):  # pragma: no cover - compiled
    """``tail._from_x`` for model 1 = dfe (ser, pb) and 2 = ge (p_gb, p_bg, e_g, e_b); 4 slots."""
    out = np.zeros(4)
    if model == 1:
        out[0] = 10.0 ** min(max(x[0], -20.0), -0.5)
        out[1] = min(max(_sigmoid(x[1]), 0.0), 0.9999)
        return out
    eg = 10.0 ** min(max(x[0], -20.0), 0.0)
    eb = 10.0 ** min(max(x[1], -20.0), 0.0)
    pgb = 10.0 ** min(max(x[2], -20.0), 0.0)
    pbg = 10.0 ** min(max(x[3], -20.0), 0.0)
    if eg > eb:  # label the states so that B is the worse one
        eg, eb, pgb, pbg = eb, eg, pbg, pgb
    out[0] = pgb
    out[1] = max(pbg, 1e-12)
    out[2] = eg
    out[3] = eb
    return out


@njit(cache=True)
def chain_law(model, par, n, t, units):  # pragma: no cover - compiled
    """``(q[0..t], fer, ew_fail, ber, bits_per_sym)`` of ``tail.model_pmf`` for dfe (1) / ge (2)."""
    P = np.zeros((2, 2))
    e = np.zeros(2)
    pi = np.zeros(2)
    if model == 1:
        ser, pb = par[0], par[1]
        pe = min(ser * (1.0 - pb) / (1.0 - ser), 1.0)
        P[0, 0] = 1.0 - pe
        P[0, 1] = pe
        P[1, 0] = 1.0 - pb
        P[1, 1] = pb
        e[1] = 1.0
        d = 1.0 - pb + pe
        pi[0] = (1.0 - pb) / d
        pi[1] = pe / d
    else:
        a, b = par[0], par[1]
        P[0, 0] = 1.0 - a
        P[0, 1] = a
        P[1, 0] = b
        P[1, 1] = 1.0 - b
        e[0] = par[2]
        e[1] = par[3]
        pi[0] = b / (a + b)
        pi[1] = a / (a + b)
    Nm, Ym = block_transfer(P, e, units)
    out, ew = markov_count_pmf_fast2(Nm, Ym, pi, n, t + 1)
    ser = pi[0] * e[0] + pi[1] * e[1]
    v0 = pi[0] * (1.0 - e[0])
    v1 = pi[1] * (1.0 - e[1])
    for _ in range(units - 1):
        w0 = (v0 * P[0, 0] + v1 * P[1, 0]) * (1.0 - e[0])
        w1 = (v0 * P[0, 1] + v1 * P[1, 1]) * (1.0 - e[1])
        v0, v1 = w0, w1
    p_sym = 1.0 - (v0 + v1)
    bps = (units * ser / p_sym / 10.0) if p_sym > 0 else 0.1
    return out[: t + 1].copy(), out[t + 1], ew, ser / 2.0, bps


@njit(cache=True)
def nll_x(model, x, lows, highs, counts, has_fail, n, t, units):  # pragma: no cover - compiled
    """Negative binned log-likelihood (``tail._loglik`` of ``tail._bin_probs``) at transformed ``x``."""
    return _nll_g(model, x, 0, lows, highs, counts, has_fail, n, t, units)[0]


@njit(cache=True)
def _objective(model, x, lam, kind, lows, highs, counts, has_fail, n, t, units):  # pragma: no cover - compiled
    """What :func:`_nelder_mead` minimises: the nll (``kind`` < 0) or ``nll - lam ln g`` (:func:`_lagr`)."""
    if kind < 0:
        return nll_x(model, x, lows, highs, counts, has_fail, n, t, units)
    return _lagr(model, x, lam, kind, lows, highs, counts, has_fail, n, t, units)


@njit(cache=True)
def nelder_mead(model, x0, step, lows, highs, counts, has_fail, n, t, units, xatol, fatol, maxiter, maxfev):  # pragma: no cover
    """scipy.optimize.minimize(method="Nelder-Mead", initial_simplex = x0 + diag(step)) (standard
    coefficients 1, 2, 0.5, 0.5, same stopping rule), compiled; returns ``(x, f, nfev)``."""
    return _nelder_mead(model, x0, step, 0.0, -1, lows, highs, counts, has_fail, n, t, units, xatol, fatol,
                        maxiter, maxfev)


@njit(cache=True)
def _nelder_mead(model, x0, step, lam, kind, lows, highs, counts, has_fail, n, t, units, xatol, fatol, maxiter,
                 maxfev):  # pragma: no cover - compiled
    """The one simplex search of :func:`nelder_mead` and :func:`nelder_mead_lagr` (objective: :func:`_objective`)."""
    d = x0.shape[0]
    sim = np.zeros((d + 1, d))
    fs = np.zeros(d + 1)
    sim[0] = x0
    for i in range(d):
        sim[i + 1] = x0
        sim[i + 1, i] += step
    for i in range(d + 1):
        fs[i] = _objective(model, sim[i], lam, kind, lows, highs, counts, has_fail, n, t, units)
    nfev = d + 1
    it = 1
    while nfev < maxfev and it < maxiter:
        order = np.argsort(fs)
        sim = sim[order].copy()
        fs = fs[order].copy()
        xmax = 0.0
        fmax = 0.0
        for i in range(1, d + 1):
            fmax = max(fmax, abs(fs[0] - fs[i]))
            for j in range(d):
                xmax = max(xmax, abs(sim[i, j] - sim[0, j]))
        if xmax <= xatol and fmax <= fatol:
            break
        xbar = np.zeros(d)
        for i in range(d):
            xbar += sim[i]
        xbar /= d
        xr = 2.0 * xbar - sim[d]
        fr = _objective(model, xr, lam, kind, lows, highs, counts, has_fail, n, t, units)
        nfev += 1
        shrink = False
        if fr < fs[0]:
            xe = 3.0 * xbar - 2.0 * sim[d]
            fe = _objective(model, xe, lam, kind, lows, highs, counts, has_fail, n, t, units)
            nfev += 1
            if fe < fr:
                sim[d] = xe
                fs[d] = fe
            else:
                sim[d] = xr
                fs[d] = fr
        elif fr < fs[d - 1]:
            sim[d] = xr
            fs[d] = fr
        else:
            if fr < fs[d]:
                xc = 1.5 * xbar - 0.5 * sim[d]
                fc = _objective(model, xc, lam, kind, lows, highs, counts, has_fail, n, t, units)
                nfev += 1
                if fc <= fr:
                    sim[d] = xc
                    fs[d] = fc
                else:
                    shrink = True
            else:
                xcc = 0.5 * xbar + 0.5 * sim[d]
                fcc = _objective(model, xcc, lam, kind, lows, highs, counts, has_fail, n, t, units)
                nfev += 1
                if fcc < fs[d]:
                    sim[d] = xcc
                    fs[d] = fcc
                else:
                    shrink = True
            if shrink:
                for i in range(1, d + 1):
                    sim[i] = sim[0] + 0.5 * (sim[i] - sim[0])
                    fs[i] = _objective(model, sim[i], lam, kind, lows, highs, counts, has_fail, n, t, units)
                nfev += d
        it += 1
    best = np.argmin(fs)
    return sim[best].copy(), fs[best], nfev


@njit(cache=True)
def _scaled_par(model, par, s):  # pragma: no cover - compiled
    """``fit.scaled_params``: error probabilities x s, shape held; ok = False when out of range."""
    out = par.copy()
    if model == 1:
        out[0] = par[0] * s
        return out, 0.0 < out[0] < 0.5
    # GE: both error probabilities x s; the shape is held only while e_b s <= 1 (past it the bad state
    # would saturate and the "margin" would grow e_g alone: absurd factors at e_b ~ 1)
    out[2] = par[2] * s
    out[3] = par[3] * s
    return out, out[2] < 1.0 and out[3] <= 1.0


@njit(cache=True)
def _g_margin(model, par, ls, n, t, units, log_target):  # pragma: no cover - compiled
    sp, ok = _scaled_par(model, par, 10.0 ** ls)
    if not ok:
        return np.inf
    _, fer, _, _, _ = chain_law(model, sp, n, t, units)
    return (np.log(fer) if fer > 0 else -800.0) - log_target


@njit(cache=True)
def margin_factor(model, par, n, t, units, target):  # pragma: no cover - compiled
    """``tail._margin`` compiled: the scale s of the error probabilities at which FER = target (root in
    log10 s on [-12, 24], the upper end cut to the model's range by bisection); NaN when none."""
    lt = np.log(target)
    lo, hi = -12.0, 24.0
    if not np.isfinite(_g_margin(model, par, hi, n, t, units, lt)):
        a, b = lo, hi
        for _ in range(40):
            mid = 0.5 * (a + b)
            if np.isfinite(_g_margin(model, par, mid, n, t, units, lt)):
                a = mid
            else:
                b = mid
        hi = a
    glo = _g_margin(model, par, lo, n, t, units, lt)
    ghi = _g_margin(model, par, hi, n, t, units, lt)
    if not (glo < 0.0 < ghi):
        return np.nan
    # Illinois false position, bisection-guarded: |root - x| <= 1e-6 in log10 s (brentq's xtol)
    a, fa, b, fb = lo, glo, hi, ghi
    side = 0
    x = a
    for _ in range(200):
        x = (a * fb - b * fa) / (fb - fa)
        if not (a < x < b):
            x = 0.5 * (a + b)
        fx = _g_margin(model, par, x, n, t, units, lt)
        if fx == 0.0:
            break
        if fx < 0:
            a, fa = x, fx
            if side == -1:
                fb *= 0.5
            side = -1
        else:
            b, fb = x, fx
            if side == 1:
                fa *= 0.5
            side = 1
        if b - a <= 2e-6:
            x = 0.5 * (a + b)
            break
    return 10.0 ** x


@njit(cache=True)
def bootstrap_refits(model, draws, x_hat, step, lows, highs, has_fail, n, t, units, target, xatol, fatol,
                     maxiter, use_lm):  # pragma: no cover - compiled
    """Refit every bootstrap draw (rows of ``draws``) from ``x_hat`` and predict: columns pre-FEC BER,
    FER, post-FEC BER, margin factor (NaN when none), refit method (1 = Fisher scoring, 0 = Nelder-Mead)
    per replicate. ``use_lm``: try :func:`lm_refit` first (an interior ``x_hat``), Nelder-Mead when it
    does not converge."""
    R = draws.shape[0]
    out = np.zeros((R, 5))
    for k in range(R):
        done = False
        if use_lm:
            xb, _, ok = lm_refit(model, x_hat, lows, highs, draws[k], has_fail, n, t, units, 60, 1e-4)
            done = ok
            out[k, 4] = 1.0 if ok else 0.0
        if not done:
            xb, _, _ = nelder_mead(model, x_hat, step, lows, highs, draws[k], has_fail, n, t, units, xatol, fatol,
                                   maxiter, maxiter * 2)
        par = params_from_x(model, xb)
        _, fer, ew, ber, bps = chain_law(model, par, n, t, units)
        out[k, 0] = ber
        out[k, 1] = fer
        out[k, 2] = 0.0 if fer == 0 else ew / n * bps
        out[k, 3] = margin_factor(model, par, n, t, units, target)
    return out


# 2-state specialisation of the powering (both burst models have two states): 2x2 matrices as 4
# scalars [00, 01, 10, 11], products unrolled, work arrays reused (no allocation per product).


@njit(cache=True, inline="always")
def _mm_acc(x, i, y, j, out, k):  # pragma: no cover - compiled
    """``out[k] += x[i] @ y[j]`` for 2x2 matrices stored as rows [00, 01, 10, 11] (indexed, not sliced:
    a row view costs a reference count, which was most of a product's time)."""
    out[k, 0] += x[i, 0] * y[j, 0] + x[i, 1] * y[j, 2]
    out[k, 1] += x[i, 0] * y[j, 1] + x[i, 1] * y[j, 3]
    out[k, 2] += x[i, 2] * y[j, 0] + x[i, 3] * y[j, 2]
    out[k, 3] += x[i, 2] * y[j, 1] + x[i, 3] * y[j, 3]


@njit(cache=True)
def _poly_mul2(a, ma, b, mb, kmax, c, mc, SB, MB, da, db):  # pragma: no cover - compiled
    # da, db: the degrees of a and b (kmax: the absorbing last coefficient may be non-zero). The
    # coefficients above them are exact zeros, whose products would add +0.0: skipping them changes
    # no bit, and the powers' first squarings (degrees 1, 2, 4, 8) cost a fraction of a full product.
    # ma, mb, mc: (1, 4) (one matrix each, indexed as row 0).
    for q in range(4):
        SB[kmax, q] = b[kmax, q]
        MB[kmax, q] = mb[0, q]
    for j in range(kmax - 1, -1, -1):
        for q in range(4):
            SB[j, q] = SB[j + 1, q] + b[j, q]
            MB[j, q] = MB[j + 1, q] + j * b[j, q]
    c[:, :] = 0.0
    mc[:, :] = 0.0
    for k in range(min(kmax, da + db + 1)):
        # in registers (c may not alias a or b, but the compiler cannot know): the same sums, in order
        s0 = s1 = s2 = s3 = 0.0
        for i in range(max(0, k - db), min(k, da) + 1):
            j = k - i
            s0 += a[i, 0] * b[j, 0] + a[i, 1] * b[j, 2]
            s1 += a[i, 0] * b[j, 1] + a[i, 1] * b[j, 3]
            s2 += a[i, 2] * b[j, 0] + a[i, 3] * b[j, 2]
            s3 += a[i, 2] * b[j, 1] + a[i, 3] * b[j, 3]
        c[k, 0] = s0
        c[k, 1] = s1
        c[k, 2] = s2
        c[k, 3] = s3
    _mm_acc(a, kmax, SB, 0, c, kmax)
    _mm_acc(ma, 0, SB, 0, mc, 0)
    _mm_acc(a, kmax, MB, 0, mc, 0)
    for i in range(kmax):
        if a[i, 0] == 0.0 and a[i, 1] == 0.0 and a[i, 2] == 0.0 and a[i, 3] == 0.0:
            continue
        j = kmax - i
        # x @ SB[j] once: c[kmax] gains the same bits as from its own product (0 + x is x)
        t0 = a[i, 0] * SB[j, 0] + a[i, 1] * SB[j, 2]
        t1 = a[i, 0] * SB[j, 1] + a[i, 1] * SB[j, 3]
        t2 = a[i, 2] * SB[j, 0] + a[i, 3] * SB[j, 2]
        t3 = a[i, 2] * SB[j, 1] + a[i, 3] * SB[j, 3]
        c[kmax, 0] += t0
        c[kmax, 1] += t1
        c[kmax, 2] += t2
        c[kmax, 3] += t3
        mc[0, 0] += i * t0
        mc[0, 1] += i * t1
        mc[0, 2] += i * t2
        mc[0, 3] += i * t3
        _mm_acc(a, i, MB, j, mc, 0)


@njit(cache=True)
def markov_count_pmf_fast2(N, Y, init, n_symbols, kmax):  # pragma: no cover - compiled
    """:func:`markov_count_pmf_fast` for two states (the burst models), about twice as fast."""
    K1 = kmax + 1
    p = np.zeros((K1, 4))
    p[0, 0], p[0, 1], p[0, 2], p[0, 3] = N[0, 0], N[0, 1], N[1, 0], N[1, 1]
    p[1, 0], p[1, 1], p[1, 2], p[1, 3] = Y[0, 0], Y[0, 1], Y[1, 0], Y[1, 1]
    mp = np.zeros((1, 4))
    r = np.zeros((K1, 4))
    mr = np.zeros((1, 4))
    c = np.zeros((K1, 4))
    mc = np.zeros((1, 4))
    SB = np.zeros((K1, 4))
    MB = np.zeros((K1, 4))
    have = False
    dp = min(1, kmax)
    dr = 0
    e = n_symbols
    while e > 0:
        if e & 1:
            if have:
                _poly_mul2(r, mr, p, mp, kmax, c, mc, SB, MB, dr, dp)
                r, c = c, r
                mr, mc = mc, mr
                dr = min(dr + dp, kmax)
            else:
                r[:, :] = p
                mr[:] = mp
                dr = dp
                have = True
        e >>= 1
        if e > 0:
            _poly_mul2(p, mp, p, mp, kmax, c, mc, SB, MB, dp, dp)
            p, c = c, p
            mp, mc = mc, mp
            dp = min(2 * dp, kmax)
    out = np.zeros(K1)
    for k in range(K1):
        out[k] = init[0] * (r[k, 0] + r[k, 1]) + init[1] * (r[k, 2] + r[k, 3])
    tot = init[0] * (mr[0, 0] + mr[0, 1]) + init[1] * (mr[0, 2] + mr[0, 3])
    return out, tot


@njit(cache=True)
def _cell_probs(model, x, lows, highs, m, has_fail, n, t, units):  # pragma: no cover - compiled
    q, fer, _, _, _ = chain_law(model, params_from_x(model, x), n, t, units)
    nb = lows.shape[0]
    pr = np.zeros(m)
    for i in range(nb):
        acc = 0.0
        for w in range(lows[i], highs[i] + 1):
            acc += q[w]
        pr[i] = acc
    if has_fail:
        pr[nb] = fer
    s = pr.sum()
    if s > 0:
        pr /= s
    return pr


@njit(cache=True)
def _nll_probs(pr, counts):  # pragma: no cover - compiled
    ll = 0.0
    for i in range(counts.shape[0]):
        if counts[i] > 0:
            ll += counts[i] * np.log(max(pr[i], 1e-300))
    return -ll


@njit(cache=True)
def lm_refit(model, x0, lows, highs, counts, has_fail, n, t, units, maxit, h):  # pragma: no cover - compiled
    """Levenberg-Marquardt / Fisher scoring for the binned multinomial likelihood from ``x0``:
    Jacobian of the cell probabilities by central differences (step ``h``), information
    ``N J' diag(1/pi) J``; stops when an accepted step gains < 1e-9 relative and < 1e-6 absolute.
    Returns ``(x, nll, converged)``."""
    p = x0.shape[0]
    m = counts.shape[0]
    Ntot = 0.0
    for i in range(m):
        Ntot += counts[i]
    x = x0.copy()
    pr = _cell_probs(model, x, lows, highs, m, has_fail, n, t, units)
    f = _nll_probs(pr, counts)
    lam = 1e-4
    J = np.zeros((m, p))
    converged = False
    for _ in range(maxit):
        for j in range(p):
            xp = x.copy()
            xm = x.copy()
            xp[j] += h
            xm[j] -= h
            a = _cell_probs(model, xp, lows, highs, m, has_fail, n, t, units)
            b = _cell_probs(model, xm, lows, highs, m, has_fail, n, t, units)
            for i in range(m):
                J[i, j] = (a[i] - b[i]) / (2 * h)
        g = np.zeros(p)
        info = np.zeros((p, p))
        for i in range(m):
            if pr[i] <= 0:
                continue
            w = counts[i] / pr[i]
            wi = Ntot / pr[i]
            for j in range(p):
                g[j] += w * J[i, j]
                for k in range(p):
                    info[j, k] += wi * J[i, j] * J[i, k]
        tr = 0.0
        for j in range(p):
            tr += info[j, j]
        accepted = False
        for _try in range(30):
            A = info.copy()
            for j in range(p):
                A[j, j] += lam * info[j, j] + 1e-12 * tr + 1e-300
            delta = np.linalg.solve(A, g)
            xn = x + delta
            prn = _cell_probs(model, xn, lows, highs, m, has_fail, n, t, units)
            fn = _nll_probs(prn, counts)
            if fn < f:
                gain = f - fn
                x = xn
                pr = prn
                f = fn
                lam = max(lam * 0.1, 1e-9)
                accepted = True
                if gain < 1e-6 or gain < 1e-9 * abs(f):
                    converged = True
                break
            lam *= 10.0
            if lam > 1e12:
                break
        if not accepted:
            converged = True  # no descent along any damped Fisher step: a (flat) minimum
            break
        if converged:
            break
    return x, f, converged


# ------------------------------------------------------------------------------ profile likelihood
# The interval of a prediction g (FER, pre-FEC BER, post-FEC BER) is the profile-likelihood set
# {g(x) : 2 (nll(x) - nll_hat) <= crit}. Its ends are found with a Lagrangian sweep: for a
# multiplier lam > 0 the minimiser of nll(x) -/+ lam ln g(x) is the point of largest/smallest g at
# its own deviance, and the deviance grows with lam; lam is searched until the deviance reaches
# crit. Each sweep step is a compiled Nelder-Mead warm-started from the previous step, run from
# every local optimum of the point fit (the GE likelihood has two modes: long mild and short
# intense bursts; a parametric bootstrap drawn at one mode never visits the other, which is why its
# percentile interval under-covered).


#: sweep tolerances: Nelder-Mead x (log10 / logit units) and f (nll) tolerances, and the relative
#: deviance tolerance at an end (0.05 x 3.84: the end's ln g then moves by ~1% of the half-width)
_PXTOL = 1e-3
_PFTOL = 1e-4
_PDTOL = 0.05


@njit(cache=True)
def _nll_g(model, x, kind, lows, highs, counts, has_fail, n, t, units):  # pragma: no cover - compiled
    """``(nll, ln g)`` at ``x``; ``kind`` 0 = FER, 1 = pre-FEC BER, 2 = post-FEC BER."""
    q, fer, ew, ber, bps = chain_law(model, params_from_x(model, x), n, t, units)
    nb = lows.shape[0]
    probs = np.zeros(counts.shape[0])
    for i in range(nb):
        acc = 0.0
        for w in range(lows[i], highs[i] + 1):
            acc += q[w]
        probs[i] = acc
    if has_fail:
        probs[nb] = fer
    Q = probs.sum()
    if kind == 0:
        g = fer
    elif kind == 1:
        g = ber
    else:
        g = 0.0 if fer == 0 else ew / n * bps
    lg = np.log(max(g, 1e-300))
    if not Q > 0:
        return 1e300, lg
    ll = 0.0
    for i in range(counts.shape[0]):
        if counts[i] > 0:
            ll += counts[i] * np.log(max(probs[i], 1e-300) / Q)
    return -ll, lg


@njit(cache=True)
def _lagr(model, x, lam, kind, lows, highs, counts, has_fail, n, t, units):  # pragma: no cover - compiled
    f, lg = _nll_g(model, x, kind, lows, highs, counts, has_fail, n, t, units)
    return f - lam * lg


@njit(cache=True)
def nelder_mead_lagr(model, x0, step, lam, kind, lows, highs, counts, has_fail, n, t, units, xatol, fatol,
                     maxiter):  # pragma: no cover - compiled
    """:func:`nelder_mead` on ``nll(x) - lam ln g(x)`` (same coefficients and stopping rule)."""
    x, _, nfev = _nelder_mead(model, x0, step, lam, kind, lows, highs, counts, has_fail, n, t, units, xatol, fatol,
                              maxiter, 2 * maxiter)
    return x, nfev


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def profile_end(model, starts, nll_hat, kind, sign, crit, step, lows, highs, counts, has_fail, n, t, units,
                max_steps):  # pragma: no cover - compiled
    """One end of the profile-likelihood interval of ``g`` (``kind`` as in :func:`_nll_g`); ``sign``
    +1 = upper end, -1 = lower end. ``starts``: rows = the sweep's starting points (the first the
    MLE; then the point fit's other local optima and its raw starts: the Lagrangian has branches
    that no optimum of the likelihood alone lies on). Returns ``(ln g_end, x_end, closed, nfev)``: ``closed`` False when the deviance never
    reached ``crit`` up to the largest multiplier (the end is then the most extreme ``g`` found, at
    the parameters' range)."""
    K = starts.shape[0]
    cur = starts.copy()
    alive = np.ones(K, dtype=np.bool_)
    nfev = 0
    lam = 1.0
    lam_lo = 0.0
    lam_hi = np.inf
    # bracket points (deviance, ln g, x) below / above crit; the MLE is the first "below" point
    f0, g0 = _nll_g(model, starts[0], kind, lows, highs, counts, has_fail, n, t, units)
    d_lo, g_lo = 0.0, g0
    x_lo = starts[0].copy()
    d_hi, g_hi = np.inf, g0
    x_hi = starts[0].copy()
    for _ in range(max_steps):
        best_val = np.inf
        bx = cur[0].copy()
        kb = 0
        fk = np.zeros(K)
        gk = np.zeros(K)
        for k in range(K):
            if not alive[k]:
                continue
            xk, nf = nelder_mead_lagr(model, cur[k], step, sign * lam, kind, lows, highs, counts, has_fail, n, t,
                                      units, _PXTOL, _PFTOL, 400)
            nfev += nf
            cur[k] = xk
            fk[k], gk[k] = _nll_g(model, xk, kind, lows, highs, counts, has_fail, n, t, units)
            v = fk[k] - sign * lam * gk[k]
            if v < best_val:
                best_val = v
                bx = xk.copy()
                kb = k
        fb, gb = fk[kb], gk[kb]
        dev = 2.0 * (fb - nll_hat)
        if dev < 0.0:
            dev = 0.0
        # a path that reached the best one's optimum (same nll and ln g; on a ridge the x may differ)
        # stops: its later steps would repeat the best path's
        # stops, and so does one whose objective is worse than the best's by more than crit (in nll units:
        # a deviance 2 crit above it; a branch that far behind was not seen to overtake within the sweep)
        for k in range(K):
            if alive[k] and k != kb and abs(fk[k] - fb) < 0.02 and abs(gk[k] - gb) < 0.01:
                alive[k] = False
            elif alive[k] and k != kb and fk[k] - sign * lam * gk[k] > best_val + crit:
                alive[k] = False
        if dev <= crit:
            if sign * gb >= sign * g_lo:
                d_lo, g_lo = dev, gb
                x_lo = bx.copy()
            lam_lo = lam
        else:
            d_hi, g_hi = dev, gb
            x_hi = bx.copy()
            lam_hi = lam
        if abs(dev - crit) < _PDTOL * crit:
            return gb, bx, True, nfev
        if lam_hi == np.inf:
            # deviance ~ (lam sigma)^2 near a quadratic optimum: rescale, at most x10 per step
            fac = np.sqrt(crit / dev) if dev > 0.0 else 10.0
            lam = lam * min(max(fac, 1.05), 10.0)
            if lam > 1e7:
                return g_lo, x_lo, False, nfev
        else:
            # secant on sqrt(deviance), linear in lam near a quadratic optimum; kept inside the bracket
            a = np.sqrt(d_lo)
            b = np.sqrt(d_hi)
            lam = lam_lo + (np.sqrt(crit) - a) * (lam_hi - lam_lo) / (b - a) if b > a else 0.5 * (lam_lo + lam_hi)
            w = lam_hi - lam_lo
            lam = min(max(lam, lam_lo + 0.1 * w), lam_hi - 0.1 * w)
    if d_hi == np.inf:
        return g_lo, x_lo, False, nfev
    # the ends bracket crit: interpolate ln g linearly in the deviance (a chord of the convex hull)
    w = (crit - d_lo) / (d_hi - d_lo) if d_hi > d_lo else 0.0
    return g_lo + w * (g_hi - g_lo), (x_hi if w > 0.5 else x_lo), True, nfev
