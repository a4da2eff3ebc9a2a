"""Numba kernels of :mod:`protocol.cluster.transport` (private).

:func:`sim_trials` is the simulation: per trial it walks the lost frames in order (chain, flow,
position) by geometric skips over the trial's frames, so the work is O(lost frames + trials), never
O(frames), no array of lost frames is built and nothing is sorted; a trial stops at the first frame
whose queue pair fails (its time is not used: the quantiles are over completed trials).
:func:`flow_delays` + :func:`reduce_trials` are the earlier array formulation (lost frames given as
sorted arrays), kept as the reference the streaming kernel is tested against on the same draws
(``record``) and benchmarked against (``benchmarks/bench_collective.py``).  Both price a loss with
the same two functions, :func:`_gbn_loss` and :func:`_sr_loss`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _detect_ns(uncovered, final, last_of_step, rtt, gap, rto):
    """Time until the sender learns of a loss: a gap seen by the next packet (``rtt``); the step's
    last frame waits for the next step's first packet (``gap + rtt``); the chain's very last frame
    for the retransmission timeout.  A loss inside an earlier loss's resent window: ``rtt``."""
    if not uncovered:
        return rtt
    if final:
        return rto
    if last_of_step:
        return gap + rtt
    return rtt


@njit(cache=True)
def _reloss_ns(final, rtt, rto):
    """Detection of a lost retransmission: its successors reveal it (``rtt``), except the chain's
    last frame's (the timeout again)."""
    return rto if final else rtt


@njit(cache=True)
def _gbn_loss(p, k, final, last_of_step, W, F, ft, rtt, gap, rto, uncovered):
    """Go-back-N cost of one lost frame (ns): detection + resent window, and each re-loss again; a
    loss inside an earlier loss's window costs only its re-losses."""
    win = min(W, F - p) * ft
    d = 0.0
    if uncovered:
        d += _detect_ns(True, final, last_of_step, rtt, gap, rto) + win
    d += k * (_reloss_ns(final, rtt, rto) + win)
    return d


@njit(cache=True)
def _sr_loss(p, k, final, last_of_step, F, ft, rtt, gap, rto, uncovered):
    """Selective-repeat terms of one lost frame: ``(t_end, extra)``: how far past the flow's last
    frame its resend lands (``(p + 1) ft + detection - F ft``) and its re-losses' cost
    (``k (detection + ft)``); the flow adds ``ft`` per lost frame, the largest ``t_end`` (if > 0)
    and the extras."""
    t_end = (p + 1) * ft + _detect_ns(uncovered, final, last_of_step, rtt, gap, rto) - F * ft
    return t_end, k * (_reloss_ns(final, rtt, rto) + ft)


@njit(cache=True)
def flow_delays(trial, chain, flow, pos, step, extra, F, last_step, W, ft, rtt, gap, rto, retry_cnt, mode,
                llr, llr_ok, llr_ns, llr_retries):
    """Delay (ns) of every flow that lost frames, and whether its queue pair failed (reference).

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
                n_lost += 1
                t_end, x = _sr_loss(p, k, final, last_of_step, F, ft, rtt, gap, rto, uncovered)
                if t_end > tail:
                    tail = t_end
                extra_sel += x
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
def sim_trials_sorted(seed, n_trials, M, qp, per_chain, F, off, last_step, W, ft, rtt, gap, rto, retry_cnt, mode,
                      llr, llr_ok, llr_ns, llr_retries):
    """The earlier simulation (benchmark baseline only): per trial a binomial number of lost frames
    at uniform positions (drawn with replacement), sorted, then :func:`flow_delays` and
    :func:`reduce_trials`; O(K log K) per trial in K lost frames, and K-sized arrays."""
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


@njit(cache=True, inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True)
def _seed_state(seed):
    """xoshiro256+ state from ``seed`` by splitmix64 (the seeding its authors recommend)."""
    st = np.empty(4, np.uint64)
    z = np.uint64(seed)
    for i in range(4):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        x = z
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        st[i] = x ^ (x >> np.uint64(31))
    return st


@njit(cache=True, inline="always")
def _uniform(st):
    """A double in [0, 1) from the top 53 bits of xoshiro256+ (Blackman and Vigna, "Scrambled linear
    pseudorandom number generators", ACM TOMS 2021): ~10x cheaper than numba's Mersenne Twister
    draw, which was most of the kernel's time."""
    s0, s1, s2, s3 = st[0], st[1], st[2], st[3]
    r = s0 + s3
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return float(r >> np.uint64(11)) * (1.0 / 9007199254740992.0)


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def sim_trials(seed, n_trials, M, qp, per_chain, F, off, last_step, W, ft, rtt, gap, rto, retry_cnt, mode,
               llr, llr_ok, llr_ns, llr_retries, rec_t, rec_idx, rec_k):
    """All trials in one pass, streaming (module docstring).  Per trial the lost frames are found
    in increasing frame index ``idx`` (chain-major, then flow, then position) by geometric skips:
    each frame is lost independently with probability ``qp`` (``skip = floor(ln U / ln(1 - qp))``
    frames are not); each lost frame is lost ``k`` more times, ``P(k >= j) = qp^j``: the lost
    frames with ``k >= 1`` are found by geometric skips over the lost frames in the same way (they
    run on across trials), and their ``k = 1 + floor(ln U / ln qp)``.  Flows, steps and chains close as
    the index passes them: a flow's delay (:func:`_gbn_loss` / :func:`_sr_loss`), a step's the max
    of its flows', a chain's the sum of its steps', the trial's the max of its chains'.  A trial
    stops at the first frame that fails its queue pair (``k`` past ``retry_cnt``, after
    ``llr_retries`` link-level replays where they apply).

    ``rec_t``, ``rec_idx``, ``rec_k``: if not empty, the first ``len(rec_t)`` draws (trial, frame
    index, re-losses) are written there (tests replay them through the reference).  Seeded: the
    uniforms are xoshiro256+ (:func:`_uniform`) from ``seed``.  Returns ``(delay_ns, failed, lost frames drawn, recorded)``.
    """
    st = _seed_state(seed)
    delay = np.zeros(n_trials, np.float64)
    fail = np.zeros(n_trials, np.bool_)
    losses = 0
    nrec = 0
    if not 0.0 < qp < 1.0:  # the caller handles no loss and certain loss
        return delay, fail, losses, nrec
    cap = rec_t.shape[0]
    il1q = 1.0 / math.log1p(-qp)
    ilq = 1.0 / math.log(qp)
    sel = mode == 1 and not (llr and llr_ok)
    fail_k = retry_cnt + (llr_retries if (llr and llr_ok) else 0)
    # lost frames until the next one whose retransmission is lost too (each is, with probability qp,
    # independently: a geometric count, so a frame lost once costs no draw for its k)
    u = _uniform(st)
    plain = int(min(np.floor(math.log(u) * il1q), 2.0**62)) if u > 0.0 else 2**62
    for t in range(n_trials):
        best = 0.0  # max over closed chains
        cur_c = -1
        cur_f = -1
        cur_s = -1
        chain_total = 0.0
        step_max = 0.0
        # flow state
        d = 0.0
        n_lost = 0
        tail = 0.0
        extra_sel = 0.0
        covered_until = -1
        failed = False
        idx = -1
        flow_start = -F  # frame index of the current flow's first frame
        while True:
            u = _uniform(st)
            skip = np.floor(math.log(u) * il1q) if u > 0.0 else float(M)
            if skip >= M - 1 - idx:
                break
            idx += 1 + int(skip)
            k = 0
            if plain == 0:  # this lost frame is lost again: k >= 1, P(k >= 1 + j) = qp^j
                u = _uniform(st)
                k = 1 + (int(np.floor(math.log(u) * ilq)) if u > 0.0 else fail_k)
                u = _uniform(st)
                plain = int(min(np.floor(math.log(u) * il1q), 2.0**62)) if u > 0.0 else 2**62
            else:
                plain -= 1
            losses += 1
            if nrec < cap:
                rec_t[nrec] = t
                rec_idx[nrec] = idx
                rec_k[nrec] = k
                nrec += 1
            if k >= fail_k:
                failed = True
                break
            p = idx - flow_start
            if p >= F:  # past the current flow (or the first loss of the trial): locate it
                ch = idx // per_chain
                rem = idx - ch * per_chain
                fl = rem // F
                p = rem - fl * F
                flow_start = idx - p
                if cur_f >= 0:  # close the flow
                    fd = d + (n_lost * ft + tail + extra_sel if sel else 0.0)
                    if fd > step_max:
                        step_max = fd
                if ch != cur_c:  # close the chain
                    chain_total += step_max
                    if chain_total > best:
                        best = chain_total
                    chain_total = 0.0
                    step_max = 0.0
                    cur_s = -1
                    cur_c = ch
                if cur_s < 0 or fl >= off[cur_s + 1]:
                    s = _searchsorted_right(off, fl)
                    chain_total += step_max  # close the step
                    step_max = 0.0
                    cur_s = s
                cur_f = fl
                d = 0.0
                n_lost = 0
                tail = 0.0
                extra_sel = 0.0
                covered_until = -1
            final = (cur_s == last_step) and (p == F - 1)
            last_of_step = p == F - 1
            if llr and llr_ok:
                if k < llr_retries:
                    d += (1 + k) * (llr_ns + ft)
                    continue
                d += llr_retries * (llr_ns + ft)  # the link gave up: the transport sees the loss
                k = k - llr_retries
            uncovered = p > covered_until
            if sel:
                n_lost += 1
                t_end, x = _sr_loss(p, k, final, last_of_step, F, ft, rtt, gap, rto, uncovered)
                if t_end > tail:
                    tail = t_end
                extra_sel += x
            else:
                d += _gbn_loss(p, k, final, last_of_step, W, F, ft, rtt, gap, rto, uncovered)
            if uncovered:
                covered_until = p + W - 1
        if failed:
            fail[t] = True
            continue
        if cur_f >= 0:
            fd = d + (n_lost * ft + tail + extra_sel if sel else 0.0)
            if fd > step_max:
                step_max = fd
            chain_total += step_max
            if chain_total > best:
                best = chain_total
        delay[t] = best
    return delay, fail, losses, nrec
