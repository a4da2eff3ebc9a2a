"""Numba kernels of :mod:`protocol.cluster.transport` (private).

Inputs are the lost frames of a batch of trials, sorted by (trial, chain, flow, position); the
work is O(lost frames), never O(frames).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _gbn_loss(p, k, final, last_of_step, W, F, ft, rtt, gap, rto, uncovered):
    """Go-back-N cost of one lost frame (ns): detection + resent window, and each re-loss again."""
    win = min(W, F - p) * ft
    d = 0.0
    if uncovered:
        if final:
            rec = rto
        elif last_of_step:
            rec = gap + rtt
        else:
            rec = rtt
        d += rec + win
    rec_k = rto if final else rtt
    d += k * (rec_k + win)
    return d


@njit(cache=True)
def flow_delays(trial, chain, flow, pos, step, extra, F, last_step, W, ft, rtt, gap, rto, retry_cnt, mode,
                llr, llr_ok, llr_ns, llr_retries):
    """Delay (ns) of every flow that lost frames, and whether its queue pair failed.

    ``mode`` 0: go-back-N, 1: selective repeat; ``llr``: link-level retry first (``llr_ok``: the
    replay buffer holds a link round trip).  Selective repeat is never slower than go-back-N on
    the same draws: its ``n ft`` is at most go-back-N's resent windows (every lost frame lies in
    one, and they are disjoint), its tail term ``max((p+1) ft + rec) - F ft`` is at most the
    largest uncovered detection cost go-back-N pays, and each re-loss costs ``rec + ft`` against
    ``rec + window``.
    Returns ``(delay, trial, chain, step, failed)`` per flow.
    """
    K = trial.shape[0]
    out_d = np.zeros(K, np.float64)
    out_t = np.zeros(K, np.int64)
    out_c = np.zeros(K, np.int64)
    out_s = np.zeros(K, np.int64)
    out_f = np.zeros(K, np.bool_)
    nf = 0
    i = 0
    while i < K:
        j = i
        while j < K and trial[j] == trial[i] and chain[j] == chain[i] and flow[j] == flow[i]:
            j += 1
        s = step[i]
        covered_until = -1
        d = 0.0
        n_lost = 0
        tail = 0.0
        extra_sel = 0.0
        fail = False
        for m in range(i, j):
            p = pos[m]
            k = extra[m]
            final = (s == last_step) and (p == F - 1)
            last_of_step = p == F - 1
            if llr and llr_ok:
                if k < llr_retries:
                    d += (1 + k) * (llr_ns + ft)
                    continue
                # the link gave up: the transport sees the loss
                d += llr_retries * (llr_ns + ft)
                k = k - llr_retries
            if k >= retry_cnt:
                fail = True
                k = retry_cnt
            uncovered = p > covered_until
            if mode == 0 or (llr and llr_ok):
                d += _gbn_loss(p, k, final, last_of_step, W, F, ft, rtt, gap, rto, uncovered)
            else:
                if uncovered:
                    if final:
                        rec = rto
                    elif last_of_step:
                        rec = gap + rtt
                    else:
                        rec = rtt
                else:
                    rec = rtt
                n_lost += 1
                t_end = (p + 1) * ft + rec - F * ft
                if t_end > tail:
                    tail = t_end
                rec_k = rto if final else rtt
                extra_sel += k * (rec_k + ft)
            if uncovered:
                covered_until = p + W - 1
        if mode == 1 and not (llr and llr_ok):
            d += n_lost * ft + tail + extra_sel
        out_d[nf] = d
        out_t[nf] = trial[i]
        out_c[nf] = chain[i]
        out_s[nf] = s
        out_f[nf] = fail
        nf += 1
        i = j
    return out_d[:nf], out_t[:nf], out_c[:nf], out_s[:nf], out_f[:nf]


@njit(cache=True)
def reduce_trials(d, t, c, s, f, first, n_trials):
    """Per trial: max over chains of (sum over steps of (max over the step's flows)) and any failure."""
    delay = np.zeros(n_trials, np.float64)
    fail = np.zeros(n_trials, np.bool_)
    K = d.shape[0]
    i = 0
    while i < K:
        tr = t[i]
        best = 0.0
        while i < K and t[i] == tr:
            ch = c[i]
            total = 0.0
            while i < K and t[i] == tr and c[i] == ch:
                st = s[i]
                mx = 0.0
                while i < K and t[i] == tr and c[i] == ch and s[i] == st:
                    if d[i] > mx:
                        mx = d[i]
                    if f[i]:
                        fail[tr - first] = True
                    i += 1
                total += mx
            if total > best:
                best = total
        delay[tr - first] = best
    return delay, fail


@njit(cache=True)
def _searchsorted_right(off, x):
    lo, hi = 0, off.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if off[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@njit(cache=True)
def sim_trials(seed, n_trials, M, qp, per_chain, F, off, last_step, W, ft, rtt, gap, rto, retry_cnt, mode,
               llr, llr_ok, llr_ns, llr_retries):
    """All trials in one pass, O(lost frames): per trial the number of lost frames (binomial over
    the ``M`` frames), their positions (uniform, sorted: chain, flow, frame), their re-losses
    (geometric), then :func:`flow_delays` and :func:`reduce_trials` on them.  Seeded: numba's
    generator is seeded with ``seed`` (drawn from the caller's numpy Generator)."""
    np.random.seed(seed)
    delay = np.zeros(n_trials, np.float64)
    fail = np.zeros(n_trials, np.bool_)
    losses = 0
    for t in range(n_trials):
        K = np.random.binomial(M, qp)
        if K == 0:
            continue
        losses += K
        idx = np.empty(K, np.int64)
        for m in range(K):
            idx[m] = np.random.randint(0, M)
        idx.sort()
        chain = idx // per_chain
        rem = idx - chain * per_chain
        flow = rem // F
        pos = rem - flow * F
        step = np.empty(K, np.int64)
        extra = np.empty(K, np.int64)
        trial = np.full(K, t, np.int64)
        for m in range(K):
            step[m] = _searchsorted_right(off, flow[m])
            extra[m] = np.random.geometric(1.0 - qp) - 1
        d, ft_, fc, fs, ff = flow_delays(trial, chain, flow, pos, step, extra, F, last_step, W, ft, rtt, gap, rto,
                                         retry_cnt, mode, llr, llr_ok, llr_ns, llr_retries)
        dl, fl = reduce_trials(d, ft_, fc, fs, ff, t, 1)
        delay[t] = dl[0]
        fail[t] = fl[0]
    return delay, fail, losses
