"""Numba kernels of the Clause 119 PCS (private).

All bit streams are *packed* in ``uint64`` words, LSB first: stream bit ``i`` is
``(words[i >> 6] >> (i & 63)) & 1``.  Every buffer carries at least one spare word at the end so
that a 64-bit read or write that straddles a word boundary never indexes past the array.
The public, checked API lives in the block modules (``transcode257``, ``scrambler``, ...);
nothing here validates its input.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# a compile-time constant of the kernels (Numba freezes module globals when it compiles)
from phy802.clause119 import PAIR_MESSAGE_BITS

__all__: list[str] = []  # private module

_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_M32 = np.uint64(0xFFFFFFFF)
_M10 = np.uint64(1023)


@njit(cache=True)
def _mask(n):
    if n >= 64:
        return _ONES
    return (np.uint64(1) << np.uint64(n)) - np.uint64(1)


@njit(cache=True)
def get64(buf, pos):
    """Read 64 bits starting at stream bit ``pos`` (branch-free: two words, double shift)."""
    w = pos >> 6
    o = np.uint64(pos & 63)
    return (buf[w] >> o) | ((buf[w + 1] << (np.uint64(63) - o)) << np.uint64(1))


@njit(cache=True)
def get_bits(buf, pos, n):
    """Read ``n`` (1..64) bits starting at stream bit ``pos``."""
    return get64(buf, pos) & _mask(n)


@njit(cache=True)
def or_bits(buf, pos, val, n):
    """OR the ``n`` low bits of ``val`` into the (zeroed) stream at ``pos``; ``val`` must be masked."""
    w = pos >> 6
    o = pos & 63
    buf[w] |= val << np.uint64(o)
    if o != 0 and o + n > 64:
        buf[w + 1] |= val >> np.uint64(64 - o)


@njit(cache=True)
def or64(buf, pos, val):
    """OR a full 64-bit ``val`` into the stream at ``pos`` (branch-free, like :func:`get64`)."""
    w = pos >> 6
    o = np.uint64(pos & 63)
    buf[w] |= val << o
    buf[w + 1] |= (val >> (np.uint64(63) - o)) >> np.uint64(1)


@njit(cache=True)
def copy_bits(src, spos, dst, dpos, n):
    """Copy ``n`` bits from ``src`` at ``spos`` into the zeroed region of ``dst`` at ``dpos``."""
    done = 0
    while n - done >= 64:
        or_bits(dst, dpos + done, get_bits(src, spos + done, 64), 64)
        done += 64
    r = n - done
    if r > 0:
        or_bits(dst, dpos + done, get_bits(src, spos + done, r), r)


# ---------------------------------------------------------------------------------------------
# Input validation

@njit(cache=True)
def validate_blocks(sync, payload, valid_type):
    """One pass: ``(n_bad, first_bad, max_sync)``; bad = sync header 00/11 or a control block with
    a type not in ``valid_type``."""
    n_bad = 0
    first = -1
    smax = 0
    for b in range(sync.shape[0]):
        sh = sync[b]
        if sh > smax:
            smax = sh
        bad = sh == 0 or sh == 3
        if sh == 1 and not valid_type[payload[b] & np.uint64(0xFF)]:
            bad = True
        if bad:
            if first < 0:
                first = b
            n_bad += 1
    return n_bad, first, smax


# ---------------------------------------------------------------------------------------------
# 256b/257b transcoding (91.5.2.5 / 119.2.4.2)

@njit(cache=True)
def transcode_encode(sync, payload, out):
    """4 x 66b -> 257b, ``sync`` holds c<0> | c<1> << 1 (data = 2, control = 1)."""
    ng = sync.shape[0] // 4
    for g in range(ng):
        pos = g * 257
        b0 = 4 * g
        alldata = True
        for j in range(4):
            if sync[b0 + j] != 2:
                alldata = False
        if alldata:
            or_bits(out, pos, np.uint64(1), 1)
            for j in range(4):
                or_bits(out, pos + 1 + 64 * j, payload[b0 + j], 64)
            continue
        # x<0> = 0; x<j+1> = c_j<1> (1 = data, 0 = control)
        m = np.uint64(0)
        for j in range(4):
            m |= np.uint64((sync[b0 + j] >> 1) & 1) << np.uint64(j)
        or_bits(out, pos + 1, m, 4)
        p = pos + 5
        first = True
        for j in range(4):
            v = payload[b0 + j]
            if sync[b0 + j] != 2 and first:
                # first control block: drop the high nibble of its type byte (payload bits 4..7)
                or_bits(out, p, v & np.uint64(0xF), 4)
                or_bits(out, p + 4, v >> np.uint64(8), 56)
                p += 60
                first = False
            else:
                or_bits(out, p, v, 64)
                p += 64


@njit(cache=True)
def transcode_decode(buf, ngroups, hi_of_lo, sync, payload, bad):
    """257b -> 4 x 66b.  Invalid 257b blocks give four blocks with sync header 11 (= 3).

    ``hi_of_lo[nibble]`` is the full Clause 82 block type for a low nibble, or -1.
    ``bad[g]`` is set to 1 for an invalid 257b block.
    """
    for g in range(ngroups):
        pos = g * 257
        b0 = 4 * g
        if get_bits(buf, pos, 1) == 1:
            for j in range(4):
                sync[b0 + j] = 2
                payload[b0 + j] = get_bits(buf, pos + 1 + 64 * j, 64)
            continue
        m = get_bits(buf, pos + 1, 4)
        if m == 0xF:
            bad[g] = 1
            for j in range(4):
                sync[b0 + j] = 3
                payload[b0 + j] = get_bits(buf, pos + 1 + 64 * j, 64)
            continue
        p = pos + 5
        first = True
        invalid = False
        for j in range(4):
            if (m >> np.uint64(j)) & np.uint64(1):
                sync[b0 + j] = 2
                payload[b0 + j] = get_bits(buf, p, 64)
                p += 64
            elif first:
                lo = get_bits(buf, p, 4)
                t = hi_of_lo[lo]
                if t < 0:
                    invalid = True
                    t = 0
                payload[b0 + j] = np.uint64(t) | (get_bits(buf, p + 4, 56) << np.uint64(8))
                sync[b0 + j] = 1
                p += 60
                first = False
            else:
                sync[b0 + j] = 1
                payload[b0 + j] = get_bits(buf, p, 64)
                p += 64
        if invalid:
            bad[g] = 1
            for j in range(4):
                sync[b0 + j] = 3


# ---------------------------------------------------------------------------------------------
# Scrambler 1 + x^39 + x^58 (49.2.6), 32 bits per step: the taps are >= 39 bits back, so a
# 32-bit chunk depends only on already-finished output.  ``hist`` holds the last 64 scrambled
# bits with the most recent in bit 63.

@njit(cache=True)
def scramble(buf, nbits, hist):
    """In place (bits past ``nbits`` in the last word are scrambled too; ignore them).  The first
    128 bits go 32 at a time from ``hist``; after that a whole word per
    step: with G(x)^2 = 1 + x^78 + x^116 (over GF(2)), s = (G d) / G^2, i.e.
    ``s_n = t_n ^ s_{n-78} ^ s_{n-116}`` with ``t_n = d_n ^ d_{n-39} ^ d_{n-58}``, and both lags
    exceed 64, so every output word depends only on finished words."""
    nchunks = (nbits + 31) // 32
    h = hist
    head = min(nchunks, 4)
    for c in range(head):
        w = c >> 1
        sh = np.uint64(32 * (c & 1))
        d = (buf[w] >> sh) & _M32
        s = (d ^ (h >> np.uint64(25)) ^ (h >> np.uint64(6))) & _M32
        buf[w] = (buf[w] & ~(_M32 << sh)) | (s << sh)
        h = (h >> np.uint64(32)) | (s << np.uint64(32))
    nwords = (nbits + 63) // 64
    if nwords <= 2:
        return
    # t of word 2 needs d of word 1: recover it from the finished words 0 and 1 (descrambler rule)
    s0 = buf[0]
    s1 = buf[1]
    d1 = s1 ^ ((s1 << np.uint64(39)) | (s0 >> np.uint64(25))) ^ ((s1 << np.uint64(58)) | (s0 >> np.uint64(6)))
    dprev = d1
    s2 = s0
    for w in range(2, nwords):
        dcur = buf[w]
        # the ORs join disjoint bits, so they are XORs; grouped so that only two shifts and two
        # XORs depend on the previous output word (the loop's critical path)
        t = dcur ^ (dcur << np.uint64(39)) ^ (dprev >> np.uint64(25)) ^ (dcur << np.uint64(58)) ^ (dprev >> np.uint64(6))
        x = t ^ (s2 >> np.uint64(50)) ^ (s2 >> np.uint64(12))
        sw = x ^ ((s1 << np.uint64(14)) ^ (s1 << np.uint64(52)))
        buf[w] = sw
        dprev = dcur
        s2 = s1
        s1 = sw


@njit(cache=True)
def descramble(buf, nbits, hist):
    """In place; ``hist`` holds the last 64 *received* (scrambled) bits, most recent in bit 63.

    ``d_n = s_n ^ s_{n-39} ^ s_{n-58}`` has no feedback, so a whole word is done per step with
    the previous received word (``hist`` for word 0) supplying the lagged bits.  As the 32-bit
    form did, the words are processed up to the last whole 32-bit chunk and the last 64
    received bits up to that chunk are returned."""
    nchunks = (nbits + 31) // 32
    nfull = nchunks >> 1
    prev = hist
    for w in range(nfull):
        s = buf[w]
        buf[w] = s ^ ((s << np.uint64(39)) | (prev >> np.uint64(25))) ^ ((s << np.uint64(58)) | (prev >> np.uint64(6)))
        prev = s
    if nchunks & 1:
        w = nfull
        s = buf[w] & _M32
        d = (s ^ ((s << np.uint64(39)) | (prev >> np.uint64(25))) ^ ((s << np.uint64(58)) | (prev >> np.uint64(6)))) & _M32
        buf[w] = (buf[w] & ~_M32) | d
        return (prev >> np.uint64(32)) | (s << np.uint64(32))
    return prev


# ---------------------------------------------------------------------------------------------
# Fused transmit front end: validate + pad + 256b/257b transcode + scramble in one pass

@njit(cache=True)
def _scr_word(out, w, d, h, s1, s2, dprev):
    """Scramble data word ``d`` as stream word ``w`` and store it; the same arithmetic as
    :func:`scramble` (words 0, 1 in 32-bit chunks from ``h``, later words with the G^2 form).
    Returns the new ``(h, s1, s2, dprev)``."""
    if w >= 2:
        # as in :func:`scramble`: ORs of disjoint bits written as XORs, off the critical path first
        t = d ^ (d << np.uint64(39)) ^ (dprev >> np.uint64(25)) ^ (d << np.uint64(58)) ^ (dprev >> np.uint64(6))
        x = t ^ (s2 >> np.uint64(50)) ^ (s2 >> np.uint64(12))
        s = x ^ ((s1 << np.uint64(14)) ^ (s1 << np.uint64(52)))
    else:
        lo = ((d & _M32) ^ (h >> np.uint64(25)) ^ (h >> np.uint64(6))) & _M32
        h = (h >> np.uint64(32)) | (lo << np.uint64(32))
        hi = ((d >> np.uint64(32)) ^ (h >> np.uint64(25)) ^ (h >> np.uint64(6))) & _M32
        h = (h >> np.uint64(32)) | (hi << np.uint64(32))
        s = lo | (hi << np.uint64(32))
    out[w] = s
    return h, s, s1, d


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def tx_transcode_scramble(sync, payload, n_groups, valid_type, pad_payload, hist, out):
    """Validate, pad, transcode and scramble in one streaming pass (119.2.4.2-3).

    Blocks ``[0, len(sync))`` are the input, blocks up to ``4 n_groups`` are control blocks with
    payload ``pad_payload`` (idle).  Each finished 64-bit word of the 257b stream is scrambled at
    once and stored in ``out`` (every word up to the last partial one is written; no zeroing
    needed).  Returns ``(n_bad, max_sync)`` of the input like :func:`validate_blocks`; when
    ``n_bad > 0`` or ``max_sync > 3`` it stops early and ``out`` is garbage (the caller then takes
    the checked path).  Output equals :func:`transcode_encode` followed by :func:`scramble`.
    """
    n_in = sync.shape[0]
    smax = 0
    n_bad = 0
    # one pass of validation first (branch-free; cheap next to the transcoder)
    for b in range(n_in):
        sh = sync[b]
        smax = max(smax, sh)
        t = payload[b] & np.uint64(0xFF)
        n_bad += (sh == 0) | (sh == 3) | ((sh == 1) & (not valid_type[t]))
    if n_bad > 0 or smax > 3:
        return n_bad, smax
    h = hist
    s1 = np.uint64(0)
    s2 = np.uint64(0)
    dprev = np.uint64(0)
    acc = np.uint64(0)  # bit writer: nb (< 64) pending bits in acc
    nb = 0
    w = 0
    for g in range(n_groups):
        b0 = 4 * g
        if b0 + 4 <= n_in:
            c0 = sync[b0]
            c1 = sync[b0 + 1]
            c2 = sync[b0 + 2]
            c3 = sync[b0 + 3]
        else:
            c0 = sync[b0] if b0 < n_in else np.uint8(1)
            c1 = sync[b0 + 1] if b0 + 1 < n_in else np.uint8(1)
            c2 = sync[b0 + 2] if b0 + 2 < n_in else np.uint8(1)
            c3 = sync[b0 + 3] if b0 + 3 < n_in else np.uint8(1)
        if c0 == 2 and c1 == 2 and c2 == 2 and c3 == 2:
            # header bit 1, then four whole payloads: 257 bits
            acc |= np.uint64(1) << np.uint64(nb)
            nb += 1
            if nb == 64:
                h, s1, s2, dprev = _scr_word(out, w, acc, h, s1, s2, dprev)
                w += 1
                nb = 0
                acc = np.uint64(0)
            for j in range(4):
                v = payload[b0 + j]
                if nb == 0:
                    h, s1, s2, dprev = _scr_word(out, w, v, h, s1, s2, dprev)
                else:
                    h, s1, s2, dprev = _scr_word(out, w, acc | (v << np.uint64(nb)), h, s1, s2, dprev)
                    acc = v >> np.uint64(64 - nb)
                w += 1
            continue
        # x<0> = 0; x<j+1> = c_j<1> (1 = data, 0 = control), then the payloads with the first
        # control block's type high nibble dropped: 5 + 60 + 3 * 64 = 257 bits
        m = (np.uint64((c0 >> 1) & 1) | (np.uint64((c1 >> 1) & 1) << np.uint64(1))
             | (np.uint64((c2 >> 1) & 1) << np.uint64(2)) | (np.uint64((c3 >> 1) & 1) << np.uint64(3)))
        first = True
        for j in range(5):
            if j == 0:
                v = m << np.uint64(1)
                n = 5
            else:
                b = b0 + j - 1
                if b < n_in:
                    v = payload[b]
                    c = sync[b]
                else:
                    v = pad_payload
                    c = np.uint8(1)
                if c != 2 and first:
                    v = (v & np.uint64(0xF)) | ((v >> np.uint64(8)) << np.uint64(4))
                    n = 60
                    first = False
                else:
                    n = 64
            acc |= v << np.uint64(nb)
            nb += n
            if nb >= 64:
                h, s1, s2, dprev = _scr_word(out, w, acc, h, s1, s2, dprev)
                w += 1
                nb -= 64
                acc = (v >> np.uint64(n - nb)) if nb > 0 else np.uint64(0)
    if nb > 0:
        h, s1, s2, dprev = _scr_word(out, w, acc, h, s1, s2, dprev)
    return n_bad, smax


# ---------------------------------------------------------------------------------------------
# AM insertion + pre-FEC 10-bit distribution (119.2.4.4-5)

@njit(cache=True)
def _split_pair(src, pos, msgs, p):
    """Cut the 10280 bits of ``src`` from stream bit ``pos`` into pair p's 1028 10-bit symbols
    (A even, B odd).  32 symbols = 320 bits = 5 words, a multiple of 64, so the bit offset
    ``o`` within a word is the same for every block: each block reads 6 words once, realigns
    them to 5 and cuts them with constant shifts (body generated)."""
    a = msgs[p, 0]
    b = msgs[p, 1]
    w0 = pos >> 6
    o = np.uint64(pos & 63)
    ro = np.uint64(63) - o
    for blk in range(32):
        bw = w0 + 5 * blk
        o16 = 16 * blk
        d0 = src[bw + 0]
        d1 = src[bw + 1]
        d2 = src[bw + 2]
        d3 = src[bw + 3]
        d4 = src[bw + 4]
        d5 = src[bw + 5]
        t0 = (d0 >> o) | ((d1 << ro) << np.uint64(1))
        t1 = (d1 >> o) | ((d2 << ro) << np.uint64(1))
        t2 = (d2 >> o) | ((d3 << ro) << np.uint64(1))
        t3 = (d3 >> o) | ((d4 << ro) << np.uint64(1))
        t4 = (d4 >> o) | ((d5 << ro) << np.uint64(1))
        v = t0
        a[o16 + 0] = np.uint16(v & _M10)
        b[o16 + 0] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t0 >> np.uint64(20)
        a[o16 + 1] = np.uint16(v & _M10)
        b[o16 + 1] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t0 >> np.uint64(40)
        a[o16 + 2] = np.uint16(v & _M10)
        b[o16 + 2] = np.uint16((v >> np.uint64(10)) & _M10)
        v = (t0 >> np.uint64(60)) | (t1 << np.uint64(4))
        a[o16 + 3] = np.uint16(v & _M10)
        b[o16 + 3] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t1 >> np.uint64(16)
        a[o16 + 4] = np.uint16(v & _M10)
        b[o16 + 4] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t1 >> np.uint64(36)
        a[o16 + 5] = np.uint16(v & _M10)
        b[o16 + 5] = np.uint16((v >> np.uint64(10)) & _M10)
        v = (t1 >> np.uint64(56)) | (t2 << np.uint64(8))
        a[o16 + 6] = np.uint16(v & _M10)
        b[o16 + 6] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t2 >> np.uint64(12)
        a[o16 + 7] = np.uint16(v & _M10)
        b[o16 + 7] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t2 >> np.uint64(32)
        a[o16 + 8] = np.uint16(v & _M10)
        b[o16 + 8] = np.uint16((v >> np.uint64(10)) & _M10)
        v = (t2 >> np.uint64(52)) | (t3 << np.uint64(12))
        a[o16 + 9] = np.uint16(v & _M10)
        b[o16 + 9] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t3 >> np.uint64(8)
        a[o16 + 10] = np.uint16(v & _M10)
        b[o16 + 10] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t3 >> np.uint64(28)
        a[o16 + 11] = np.uint16(v & _M10)
        b[o16 + 11] = np.uint16((v >> np.uint64(10)) & _M10)
        v = (t3 >> np.uint64(48)) | (t4 << np.uint64(16))
        a[o16 + 12] = np.uint16(v & _M10)
        b[o16 + 12] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t4 >> np.uint64(4)
        a[o16 + 13] = np.uint16(v & _M10)
        b[o16 + 13] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t4 >> np.uint64(24)
        a[o16 + 14] = np.uint16(v & _M10)
        b[o16 + 14] = np.uint16((v >> np.uint64(10)) & _M10)
        v = t4 >> np.uint64(44)
        a[o16 + 15] = np.uint16(v & _M10)
        b[o16 + 15] = np.uint16((v >> np.uint64(10)) & _M10)
    v = get64(src, pos + 10240)  # symbols 1024..1027
    a[512] = np.uint16(v & _M10)
    b[512] = np.uint16((v >> np.uint64(10)) & _M10)
    a[513] = np.uint16((v >> np.uint64(20)) & _M10)
    b[513] = np.uint16((v >> np.uint64(30)) & _M10)


@njit(cache=True)
def _join_pair_stream(msgs, p, dst, w, nb, acc):
    """Append pair p's 1028 symbols (10280 bits) to the stream being written at word ``w``
    with ``nb`` (< 64) pending bits in ``acc``; returns the new ``(w, nb, acc)``.  Whole words
    are stored, never read back, so ``dst`` needs no zeroing; a 64-bit append leaves ``nb``
    unchanged, so the shifts are the same for the whole pair (block body generated)."""
    a = msgs[p, 0]
    b = msgs[p, 1]
    s = np.uint64(nb)
    rs = np.uint64(63) - s
    for blk in range(32):
        o = 16 * blk
        v0 = np.uint64(a[o + 0]) | (np.uint64(b[o + 0]) << np.uint64(10))
        v1 = np.uint64(a[o + 1]) | (np.uint64(b[o + 1]) << np.uint64(10))
        v2 = np.uint64(a[o + 2]) | (np.uint64(b[o + 2]) << np.uint64(10))
        v3 = np.uint64(a[o + 3]) | (np.uint64(b[o + 3]) << np.uint64(10))
        v4 = np.uint64(a[o + 4]) | (np.uint64(b[o + 4]) << np.uint64(10))
        v5 = np.uint64(a[o + 5]) | (np.uint64(b[o + 5]) << np.uint64(10))
        v6 = np.uint64(a[o + 6]) | (np.uint64(b[o + 6]) << np.uint64(10))
        v7 = np.uint64(a[o + 7]) | (np.uint64(b[o + 7]) << np.uint64(10))
        v8 = np.uint64(a[o + 8]) | (np.uint64(b[o + 8]) << np.uint64(10))
        v9 = np.uint64(a[o + 9]) | (np.uint64(b[o + 9]) << np.uint64(10))
        v10 = np.uint64(a[o + 10]) | (np.uint64(b[o + 10]) << np.uint64(10))
        v11 = np.uint64(a[o + 11]) | (np.uint64(b[o + 11]) << np.uint64(10))
        v12 = np.uint64(a[o + 12]) | (np.uint64(b[o + 12]) << np.uint64(10))
        v13 = np.uint64(a[o + 13]) | (np.uint64(b[o + 13]) << np.uint64(10))
        v14 = np.uint64(a[o + 14]) | (np.uint64(b[o + 14]) << np.uint64(10))
        v15 = np.uint64(a[o + 15]) | (np.uint64(b[o + 15]) << np.uint64(10))
        x = v0 | (v1 << np.uint64(20)) | (v2 << np.uint64(40)) | (v3 << np.uint64(60))
        dst[w] = acc | (x << s)
        acc = (x >> rs) >> np.uint64(1)
        w += 1
        x = (v3 >> np.uint64(4)) | (v4 << np.uint64(16)) | (v5 << np.uint64(36)) | (v6 << np.uint64(56))
        dst[w] = acc | (x << s)
        acc = (x >> rs) >> np.uint64(1)
        w += 1
        x = (v6 >> np.uint64(8)) | (v7 << np.uint64(12)) | (v8 << np.uint64(32)) | (v9 << np.uint64(52))
        dst[w] = acc | (x << s)
        acc = (x >> rs) >> np.uint64(1)
        w += 1
        x = (v9 >> np.uint64(12)) | (v10 << np.uint64(8)) | (v11 << np.uint64(28)) | (v12 << np.uint64(48))
        dst[w] = acc | (x << s)
        acc = (x >> rs) >> np.uint64(1)
        w += 1
        x = (v12 >> np.uint64(16)) | (v13 << np.uint64(4)) | (v14 << np.uint64(24)) | (v15 << np.uint64(44))
        dst[w] = acc | (x << s)
        acc = (x >> rs) >> np.uint64(1)
        w += 1
    x = np.uint64(0)
    for j in range(2):
        x |= (np.uint64(a[512 + j]) | (np.uint64(b[512 + j]) << np.uint64(10))) << np.uint64(20 * j)
    acc |= x << s  # last 40 bits
    nb += 40
    if nb >= 64:
        dst[w] = acc
        w += 1
        nb -= 64
        acc = x >> np.uint64(40 - nb)
    return w, nb, acc


@njit(cache=True)
def _join_pair(msgs, p, dst, pos):
    """Inverse of :func:`_split_pair`: OR pair p's 1028 symbols into the zeroed stream ``dst``
    from bit ``pos`` (generated constant-shift body; 24 zero bits past the 10280 are ORed too)."""
    a = msgs[p, 0]
    b = msgs[p, 1]
    for blk in range(32):
        o = 16 * blk
        q = pos + 320 * blk
        v0 = np.uint64(a[o + 0]) | (np.uint64(b[o + 0]) << np.uint64(10))
        v1 = np.uint64(a[o + 1]) | (np.uint64(b[o + 1]) << np.uint64(10))
        v2 = np.uint64(a[o + 2]) | (np.uint64(b[o + 2]) << np.uint64(10))
        v3 = np.uint64(a[o + 3]) | (np.uint64(b[o + 3]) << np.uint64(10))
        v4 = np.uint64(a[o + 4]) | (np.uint64(b[o + 4]) << np.uint64(10))
        v5 = np.uint64(a[o + 5]) | (np.uint64(b[o + 5]) << np.uint64(10))
        v6 = np.uint64(a[o + 6]) | (np.uint64(b[o + 6]) << np.uint64(10))
        v7 = np.uint64(a[o + 7]) | (np.uint64(b[o + 7]) << np.uint64(10))
        v8 = np.uint64(a[o + 8]) | (np.uint64(b[o + 8]) << np.uint64(10))
        v9 = np.uint64(a[o + 9]) | (np.uint64(b[o + 9]) << np.uint64(10))
        v10 = np.uint64(a[o + 10]) | (np.uint64(b[o + 10]) << np.uint64(10))
        v11 = np.uint64(a[o + 11]) | (np.uint64(b[o + 11]) << np.uint64(10))
        v12 = np.uint64(a[o + 12]) | (np.uint64(b[o + 12]) << np.uint64(10))
        v13 = np.uint64(a[o + 13]) | (np.uint64(b[o + 13]) << np.uint64(10))
        v14 = np.uint64(a[o + 14]) | (np.uint64(b[o + 14]) << np.uint64(10))
        v15 = np.uint64(a[o + 15]) | (np.uint64(b[o + 15]) << np.uint64(10))
        or64(dst, q + 0, v0 | (v1 << np.uint64(20)) | (v2 << np.uint64(40)) | (v3 << np.uint64(60)))
        or64(dst, q + 64, (v3 >> np.uint64(4)) | (v4 << np.uint64(16)) | (v5 << np.uint64(36)) | (v6 << np.uint64(56)))
        or64(dst, q + 128, (v6 >> np.uint64(8)) | (v7 << np.uint64(12)) | (v8 << np.uint64(32)) | (v9 << np.uint64(52)))
        or64(dst, q + 192, (v9 >> np.uint64(12)) | (v10 << np.uint64(8)) | (v11 << np.uint64(28)) | (v12 << np.uint64(48)))
        or64(dst, q + 256, (v12 >> np.uint64(16)) | (v13 << np.uint64(4)) | (v14 << np.uint64(24)) | (v15 << np.uint64(44)))
    v = np.uint64(0)
    for j in range(2):
        v |= (np.uint64(a[512 + j]) | (np.uint64(b[512 + j]) << np.uint64(10))) << np.uint64(20 * j)
    or64(dst, pos + 10240, v)


@njit(cache=True)
def data_to_messages(data, am_bits, am_pair, am_group_of_pair, am_nbits, msgs):
    """Build each pair's 10280-bit ``tx_scrambled_am`` and cut it into 1028 10-bit symbols.

    ``data``: scrambled 257b stream; ``am_bits[g]``: packed bits of AM group g; ``am_pair[p]``:
    pair p starts with an AM group.  ``msgs[p, i % 2, i // 2] = symbol i`` (A even, B odd).
    Pairs without AM are cut straight from ``data``; an AM pair is assembled in a word buffer.
    """
    npairs = msgs.shape[0]
    tmp = np.zeros(162, dtype=np.uint64)
    dpos = 0
    for p in range(npairs):
        if am_pair[p]:
            for w in range(162):
                tmp[w] = 0
            g = am_group_of_pair[p]
            copy_bits(am_bits[g], 0, tmp, 0, am_nbits)
            nd = PAIR_MESSAGE_BITS - am_nbits
            copy_bits(data, dpos, tmp, am_nbits, nd)
            dpos += nd
            _split_pair(tmp, 0, msgs, p)
        else:
            _split_pair(data, dpos, msgs, p)
            dpos += PAIR_MESSAGE_BITS
    return dpos


@njit(cache=True)
def messages_to_data(msgs, am_pair, am_nbits, data, am_out):
    """Inverse of :func:`data_to_messages` reading ``msgs[p, X, i]`` (``[P, 2, >=514]``, e.g. the
    decoded codewords): write the data bits into ``data`` (a sequential whole-word writer: no
    zeroing needed; the words past the stream are set to 0) and each AM group's bits into
    ``am_out[g]`` (zeroed)."""
    npairs = msgs.shape[0]
    tmp = np.zeros(162, dtype=np.uint64)
    w = 0
    nb = 0
    acc = np.uint64(0)
    g = 0
    for p in range(npairs):
        if am_pair[p]:
            for k in range(162):
                tmp[k] = 0
            _join_pair(msgs, p, tmp, 0)
            copy_bits(tmp, 0, am_out[g], 0, am_nbits)
            g += 1
            nd = PAIR_MESSAGE_BITS - am_nbits
            q = am_nbits
            while nd > 0:  # append the data part through the writer
                n = min(nd, 64)
                x = get64(tmp, q) & _mask(n)
                acc |= x << np.uint64(nb)
                nb += n
                if nb >= 64:
                    data[w] = acc
                    w += 1
                    nb -= 64
                    acc = (x >> np.uint64(n - nb)) if nb > 0 else np.uint64(0)
                q += n
                nd -= n
        else:
            w, nb, acc = _join_pair_stream(msgs, p, data, w, nb, acc)
    for k in range(w, data.shape[0]):
        data[k] = 0
    if w < data.shape[0]:
        data[w] = acc
    return 64 * w + nb


# ---------------------------------------------------------------------------------------------
# Clause 82 receive: 66b blocks -> frame bytes

# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def blocks_to_bytes(sync, payload, term_len, out, starts, lens, status, counts):
    """Walk the block stream with a small state machine (outside / inside a frame).

    ``term_len[type]`` = number of data bytes of a terminate block (0..7), else -1.
    Frames are written to ``out`` back to back (bytes after the start block, FCS included);
    ``status``: 0 = ended by a terminate block, 1 = aborted by an error/control block.
    ``counts``: [data, control, idle, ordered_set, error_blocks, invalid_sync, invalid_type,
    sequence_errors, truncated].  Returns the number of frames.
    """
    n = sync.shape[0]
    nf = 0
    inframe = False
    o = 0
    for b in range(n):
        sh = sync[b]
        v = payload[b]
        if sh == 2:
            counts[0] += 1
            if inframe:
                for k in range(8):
                    out[o] = np.uint8((v >> np.uint64(8 * k)) & np.uint64(0xFF))
                    o += 1
            else:
                counts[7] += 1
            continue
        if sh != 1:
            counts[5] += 1
            counts[4] += 1
            if inframe:
                lens[nf] = o - starts[nf]
                status[nf] = 1
                nf += 1
                inframe = False
            continue
        counts[1] += 1
        t = np.int64(v & np.uint64(0xFF))
        if t == 0x78:
            if inframe:
                lens[nf] = o - starts[nf]
                status[nf] = 1
                nf += 1
                counts[7] += 1
            inframe = True
            starts[nf] = o
            continue
        k = term_len[t]
        if k >= 0:
            if inframe:
                for i in range(k):
                    out[o] = np.uint8((v >> np.uint64(8 * (i + 1))) & np.uint64(0xFF))
                    o += 1
                lens[nf] = o - starts[nf]
                status[nf] = 0
                nf += 1
                inframe = False
            else:
                counts[7] += 1
            continue
        if t == 0x1E:
            # eight 7-bit control codes at payload bits 8 + 7i: 0x00 = idle, 0x06 = LPI, else error
            err = False
            for i in range(8):
                c = (v >> np.uint64(8 + 7 * i)) & np.uint64(0x7F)
                if c != 0 and c != 6:
                    err = True
            if err:
                counts[4] += 1
            else:
                counts[2] += 1
        elif t == 0x4B:
            counts[3] += 1
        else:
            counts[6] += 1
            counts[4] += 1
        if inframe:
            lens[nf] = o - starts[nf]
            status[nf] = 1
            nf += 1
            inframe = False
    if inframe:
        counts[8] += 1
    return nf


# ---------------------------------------------------------------------------------------------
# 119.2.4.7 codeword interleave onto PCS lanes

@njit(cache=True)
def lanes_from_codewords(cw, gather, lanes):
    """``lanes[l, p K + k] = cw[p, gather[l, k]]`` for cw ``[P, 1088]`` (pairs flattened)."""
    P = cw.shape[0]
    L, K = gather.shape
    for p in range(P):
        for l in range(L):
            for k in range(K):
                lanes[l, p * K + k] = cw[p, gather[l, k]]


@njit(cache=True)
def codewords_from_lanes(lanes, gather, cw):
    """Inverse of :func:`lanes_from_codewords`; returns the OR of all symbols (range check)."""
    P = cw.shape[0]
    L, K = gather.shape
    acc = 0
    for p in range(P):
        for l in range(L):
            for k in range(K):
                v = lanes[l, p * K + k]
                acc |= v
                cw[p, gather[l, k]] = v
    return acc


@njit(cache=True)
def _lanes64_body(cw, lanes64, h):
    P = cw.shape[0]
    K4 = 544 // h // 4
    for p in range(P):
        for j in range(h):
            for k4 in range(K4):
                col = p * K4 + k4
                t = 4 * h * k4 + j
                a0 = np.uint64(cw[p, t])
                a1 = np.uint64(cw[p, t + h])
                a2 = np.uint64(cw[p, t + 2 * h])
                a3 = np.uint64(cw[p, t + 3 * h])
                b0 = np.uint64(cw[p, 544 + t])
                b1 = np.uint64(cw[p, 544 + t + h])
                b2 = np.uint64(cw[p, 544 + t + 2 * h])
                b3 = np.uint64(cw[p, 544 + t + 3 * h])
                lanes64[2 * j, col] = a0 | (b1 << np.uint64(16)) | (a2 << np.uint64(32)) | (b3 << np.uint64(48))
                lanes64[2 * j + 1, col] = b0 | (a1 << np.uint64(16)) | (b2 << np.uint64(32)) | (a3 << np.uint64(48))


@njit(cache=True)
def lanes_from_pairs64(cw, h, lanes64):
    """Fast form of :func:`lanes_from_codewords` for the 119.2.4.7 map itself (``h`` = lanes / 2):
    symbol k of lane 2j (2j+1) in a pair is ``cA[h k + j]`` (``cB``) for even k, swapped for odd
    k.  ``lanes64`` is the ``uint64`` view of the ``uint16`` lanes (4 symbols per word, K % 4 ==
    0), so each lane gets one 64-bit store per 4 symbols.  ``h`` is passed to the body as a
    literal (8 or 4) so the index arithmetic is constant-folded (3x faster than a runtime h)."""
    if h == 8:
        _lanes64_body(cw, lanes64, 8)
    else:
        _lanes64_body(cw, lanes64, 4)


@njit(cache=True)
def _pairs64_body(lanes64, cw, h):
    P = cw.shape[0]
    K4 = 544 // h // 4
    M = np.uint64(0xFFFF)
    acc = np.uint64(0)
    for p in range(P):
        for j in range(h):
            for k4 in range(K4):
                col = p * K4 + k4
                t = 4 * h * k4 + j
                x = lanes64[2 * j, col]
                y = lanes64[2 * j + 1, col]
                acc |= x | y
                cw[p, t] = np.uint16(x & M)
                cw[p, 544 + t + h] = np.uint16((x >> np.uint64(16)) & M)
                cw[p, t + 2 * h] = np.uint16((x >> np.uint64(32)) & M)
                cw[p, 544 + t + 3 * h] = np.uint16(x >> np.uint64(48))
                cw[p, 544 + t] = np.uint16(y & M)
                cw[p, t + h] = np.uint16((y >> np.uint64(16)) & M)
                cw[p, 544 + t + 2 * h] = np.uint16((y >> np.uint64(32)) & M)
                cw[p, t + 3 * h] = np.uint16(y >> np.uint64(48))
    return (acc | (acc >> np.uint64(16)) | (acc >> np.uint64(32)) | (acc >> np.uint64(48))) & M


@njit(cache=True)
def pairs_from_lanes64(lanes64, h, cw):
    """Inverse of :func:`lanes_from_pairs64`; returns the OR of all symbols (range check)."""
    if h == 8:
        return _pairs64_body(lanes64, cw, 8)
    return _pairs64_body(lanes64, cw, 4)


@njit(cache=True)
def corrected_per_lane(rx_cw, dec, ncorr, lane_of_pos, out):
    """``out[L] +=`` symbols changed by the decoder in corrected codewords (``ncorr > 0``) whose
    position is carried by PCS lane L (``lane_of_pos[X, t]``); only those words are read."""
    P = rx_cw.shape[0]
    n = lane_of_pos.shape[1]
    for p in range(P):
        for X in range(2):
            if ncorr[p, X] <= 0:
                continue
            for t in range(n):
                if rx_cw[p, X, t] != dec[p, X, t]:
                    out[lane_of_pos[X, t]] += 1


# ---------------------------------------------------------------------------------------------
# Marker search (lane lock)

@njit(cache=True)
def first_marker(v, start, stop, stride, am_syms, tol):
    """First offset ``o`` in ``[start, stop)`` where the 12 values ``v[o + stride s]`` are within
    ``tol`` symbols of exactly one row of ``am_syms`` (and at least two of the common symbols 0, 1,
    4 match).  Returns ``(offset, lane)`` or ``(-1, -1)``."""
    L = am_syms.shape[0]
    c0 = am_syms[0, 0]
    c1 = am_syms[0, 1]
    c4 = am_syms[0, 4]
    last = min(stop, v.shape[0] - 11 * stride)
    for o in range(start, last):
        c = int(v[o] == c0) + int(v[o + stride] == c1) + int(v[o + 4 * stride] == c4)
        if c < 2:
            continue
        best = 13
        nbest = 0
        lane = -1
        for l in range(L):
            m = 0
            for s in range(12):
                if v[o + stride * s] != am_syms[l, s]:
                    m += 1
            if m < best:
                best = m
                nbest = 1
                lane = l
            elif m == best:
                nbest += 1
        if best <= tol and nbest == 1:
            return o, lane
    return -1, -1
