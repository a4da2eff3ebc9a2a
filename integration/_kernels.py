"""Numba kernels of the replay wrapper (CPU tensors, through their numpy views)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["guard_inplace", "guard_at", "deliver_frames", "flip_bits", "receive_flips", "sum_squares"]


@njit(cache=True, nogil=True, inline="always")
def _guard(x, i, clamp):
    """The receive guard on element ``i``: NaN/Inf -> 0, then clamp to [-clamp, clamp]; 1 if changed."""
    v = x[i]
    if not math.isfinite(v):
        x[i] = 0.0
        return 1
    if v > clamp:
        x[i] = clamp
        return 1
    if v < -clamp:
        x[i] = -clamp
        return 1
    return 0


@njit(cache=True, nogil=True)
def guard_inplace(x, clamp):
    """One pass: NaN/Inf -> 0, then clamp to [-clamp, clamp]; returns the number of elements changed."""
    n = 0
    for i in range(x.shape[0]):
        n += _guard(x, i, clamp)
    return n


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True, nogil=True)
def deliver_frames(off, k0, marks, m0, cursor, avail_end, fstart, pstart, pend, cend, fend, pfirst, plen,
                   tolerant, max_attempts, flips, lost):
    """Frame fates of one message over a buffered error stream (``protocol.delivery.deliver``'s rules).

    ``off`` holds sorted absolute stream offsets of errors (entries ``>= k0`` are ``>= cursor``),
    ``marks`` sorted absolute ``[a, b)`` error blocks (rows ``>= m0`` end after ``cursor``); the
    buffer knows the stream up to ``avail_end``. The message's frames occupy ``[cursor, cursor +
    fend[-1])``; each dropped frame is resent, in frame order, over the next ``fend - fstart`` bits
    until it passes or ``max_attempts`` sends are spent. Writes payload flips to ``flips`` and lost
    payload ranges to ``lost``.

    Returns ``(n_flips, used_bits, resent, n_lost, max_resends, k_next, m_next)``; ``n_flips`` is -1
    when the buffer ends before the message does (extend it and call again: nothing is consumed).
    """
    nf = fstart.shape[0]
    nk = off.shape[0]
    nm = marks.shape[0]
    S = fend[nf - 1]
    end = cursor + S
    if end > avail_end:
        return -1, 0, 0, 0, 0, k0, m0
    dropped = np.zeros(nf, np.bool_)
    # first window: headers hit (or, non-tolerant, any checked bit) -> dropped
    i = k0
    f = 0
    while i < nk and off[i] < end:
        o = off[i] - cursor
        while fend[f] <= o:
            f += 1
        if o < pstart[f]:
            dropped[f] = True
        elif not tolerant and o < cend[f]:
            dropped[f] = True
        i += 1
    i_end = i
    # a mark [a, b) drops every frame whose [frame_start, check_end) it overlaps
    for j in range(m0, nm):
        if marks[j, 0] >= end:
            break  # marks are sorted and disjoint: none further reaches into the message
        a = max(marks[j, 0] - cursor, 0)
        b = min(marks[j, 1] - cursor, S)
        if b > a:
            lo = np.searchsorted(cend, a, side="right")
            hi = np.searchsorted(fstart, b, side="left")
            for q in range(lo, hi):
                dropped[q] = True
    n = 0
    f = 0
    for i in range(k0, i_end):
        o = off[i] - cursor
        while fend[f] <= o:
            f += 1
        if o >= pstart[f] and o < pend[f] and not dropped[f]:
            flips[n] = pfirst[f] + o - pstart[f]
            n += 1
    # resends, frame by frame in fresh stream bits
    c = end
    i = i_end
    m = m0
    resent = 0
    nl = 0
    maxr = 0
    for f in range(nf):
        if not dropped[f]:
            continue
        span = fend[f] - fstart[f]
        sh = fstart[f]
        ps = pstart[f] - sh
        pe = pend[f] - sh
        ce = cend[f] - sh
        attempts = 1
        ok = False
        while attempts < max_attempts:
            attempts += 1
            resent += 1
            if c + span > avail_end:
                return -1, 0, 0, 0, 0, k0, m0
            while m < nm and marks[m, 1] <= c:
                m += 1
            d = False
            i1 = i
            while i1 < nk and off[i1] < c + span:
                o = off[i1] - c
                if o < ps or (not tolerant and o < ce):
                    d = True
                i1 += 1
            for j in range(m, nm):
                if marks[j, 0] >= c + span:
                    break  # sorted: the rest start after this send
                if marks[j, 1] > c and max(marks[j, 0] - c, 0) < ce:
                    d = True
            if not d:
                for q in range(i, i1):
                    o = off[q] - c
                    if o >= ps and o < pe:
                        flips[n] = pfirst[f] + o - ps
                        n += 1
                ok = True
            i = i1
            c += span
            if ok:
                break
        if attempts - 1 > maxr:
            maxr = attempts - 1
        if not ok:
            lost[nl, 0] = pfirst[f]
            lost[nl, 1] = pfirst[f] + plen[f]
            nl += 1
    while m < nm and marks[m, 1] <= c:
        m += 1
    flips[:n].sort()
    return n, c - cursor, resent, nl, maxr, i, m


@njit(cache=True, nogil=True)
def flip_bits(vals, words, offsets, width, protect_lo, protect_hi, ints, floats):
    """Flip message bits ``offsets`` of the elements ``words`` (integer view of ``vals``) in place.

    ``width`` bits per element; offsets outside ``[0, width * len(words))`` hit no element and are
    skipped; with ``protect_lo <= protect_hi`` flips on those element bits are removed. Fills rows
    ``ints = (element, bit, index within offsets)`` and ``floats = (old, new)``: the element's value
    before and after all of the message's flips. Returns ``(n_applied, n_protected, n_nonfinite)``
    where the last counts applied flips whose element is non-finite afterwards.
    """
    nbits = width * words.shape[0]
    elem, bit, idx = ints[0], ints[1], ints[2]
    old, new = floats[0], floats[1]
    n = 0
    n_prot = 0
    for i in range(offsets.shape[0]):
        o = offsets[i]
        if o < 0 or o >= nbits:
            continue
        e = o // width
        b = o - e * width
        if protect_lo <= b <= protect_hi:
            n_prot += 1
            continue
        elem[n] = e
        bit[n] = b
        idx[n] = i
        old[n] = vals[e]
        n += 1
    one = words.dtype.type(1)
    for j in range(n):
        words[elem[j]] ^= one << words.dtype.type(bit[j])
    n_bad = 0
    for j in range(n):
        v = vals[elem[j]]
        new[j] = v
        if not math.isfinite(v):
            n_bad += 1
    return n, n_prot, n_bad


@njit(cache=True, nogil=True)
def guard_at(x, elems, clamp, final):
    """Receive guard on the elements ``elems`` only (the ones the link flipped): NaN/Inf -> 0, clamp.

    Writes each element's value after the guard to ``final``; returns the number changed.
    """
    n = 0
    for j in range(elems.shape[0]):
        n += _guard(x, elems[j], clamp)
        final[j] = x[elems[j]]
    return n


_SQ_BLOCK = 256  # elements summed in the array's own precision before the float64 total
_SQ_TINY = 2.0 ** -100  # a block sum below this may have lost terms to fp32 underflow: redone in float64


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def sum_squares(x):
    """``sum(x[i]**2)`` as a float64, for the injected-noise metric's ``signal_sq``.

    Blocks of ``_SQ_BLOCK`` elements are summed in the array's own precision (vectorised: only
    ``reassoc``/``contract``, so NaN/Inf keep their IEEE meaning), the block sums in float64; a
    block whose sum overflowed, underflowed below ``_SQ_TINY`` or is not finite is summed again
    in float64 element by element, so the result is within a few fp32 ulps (relative) of the exact
    sum for any finite input -- NaN or Inf in ``x`` give NaN or Inf, as the exact sum would.
    No slower than ``torch.linalg.vector_norm`` of an fp32 message on one core, faster where
    memory bandwidth does not bound both (``benchmarks/bench_receive.py`` prints the ratio), and
    more accurate (torch's fp32 result is ~1e-5 off at 0.5 M elements).
    """
    s = 0.0
    n = x.shape[0]
    for a in range(0, n, _SQ_BLOCK):
        # a slice of fixed bounds: the inner loop over range(a, min(a + block, n)) was not
        # vectorised usefully (12x slower on AVX-512)
        xb = x[a:a + _SQ_BLOCK]
        t = x.dtype.type(0)
        for i in range(xb.shape[0]):
            t += xb[i] * xb[i]
        t64 = np.float64(t)
        if not (t64 >= _SQ_TINY and t64 <= 1e300):  # NaN fails both tests
            t64 = 0.0
            for i in range(xb.shape[0]):
                v = np.float64(xb[i])
                t64 += v * v
        s += t64
    return s


@njit(cache=True, nogil=True)
def receive_flips(vals, words, offsets, width, protect_lo, protect_hi, clamp, measure, block, elem_base):
    """The whole CPU receive path of one message in one pass: the clean message's
    :func:`sum_squares` (``measure``), :func:`flip_bits`, then per flipped element the guard
    (``clamp >= 0``: ``nan_to_zero_clamp`` on that element only) and its change.

    ``offsets`` are sorted (as delivered), so the applied flips of one element are adjacent.
    ``block`` is int64[5, k] (``k = len(offsets)``), filled as an injection-log block
    (``integration.replay.InjectionLog.BLOCK_ROWS``): element + ``elem_base``, bit, the applied
    offset (msg_bit), then old and new as float64 (rows 3-4 viewed). The change of a distinct flipped element is (value after the guard) -
    (value before the flips), 0 where the value before was non-finite (a clean Inf/NaN is the
    sender's, not the link's); their squares are summed in float64 in element order. Returns
    ``(n_applied, n_protected, n_nonfinite, n_guarded, signal_sq, perturbation_sq)``:
    ``signal_sq`` is NaN unless ``measure``; ``perturbation_sq`` is 0 unless ``measure`` and ``inf``
    when an element finite before is not finite after.
    """
    sig = sum_squares(vals) if measure else np.nan
    ints = block[:3]
    floats = block[3:].view(np.float64)
    n, n_prot, n_bad = flip_bits(vals, words, offsets, width, protect_lo, protect_hi, ints, floats)
    elem, old, new = ints[0], floats[0], floats[1]
    n_guard = 0
    pert = 0.0
    finite = True
    j = 0
    while j < n:
        e = elem[j]
        k = j
        while k + 1 < n and elem[k + 1] == e:
            k += 1
        if clamp >= 0.0:
            n_guard += _guard(vals, e, clamp)
            f = float(vals[e])
        else:
            f = new[k]
        o = old[j]
        if math.isfinite(o):
            if not math.isfinite(f):
                finite = False
            else:
                pert += (f - o) * (f - o)
        j = k + 1
    for j in range(n):  # the log's columns: the message's offset, the element in the whole tensor
        ints[2, j] = offsets[ints[2, j]]
        elem[j] += elem_base
    if not measure:
        pert = 0.0
    elif not finite:
        pert = np.inf
    return n, n_prot, n_bad, n_guard, sig, pert
