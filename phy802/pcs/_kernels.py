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

__all__: list[str] = []  # private module

_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_M32 = np.uint64(0xFFFFFFFF)


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
        t = dcur ^ ((dcur << np.uint64(39)) | (dprev >> np.uint64(25))) ^ ((dcur << np.uint64(58)) | (dprev >> np.uint64(6)))
        sw = t ^ ((s2 >> np.uint64(50)) | (s1 << np.uint64(14))) ^ ((s2 >> np.uint64(12)) | (s1 << np.uint64(52)))
        buf[w] = sw
        dprev = dcur
        s2 = s1
        s1 = sw


@njit(cache=True)
def descramble(buf, nbits, hist):
    """In place; ``hist`` holds the last 64 *received* (scrambled) bits, most recent in bit 63."""
    nchunks = (nbits + 31) // 32
    h = hist
    for c in range(nchunks):
        w = c >> 1
        sh = np.uint64(32 * (c & 1))
        s = (buf[w] >> sh) & _M32
        d = (s ^ (h >> np.uint64(25)) ^ (h >> np.uint64(6))) & _M32
        buf[w] = (buf[w] & ~(_M32 << sh)) | (d << sh)
        h = (h >> np.uint64(32)) | (s << np.uint64(32))
    return h


# ---------------------------------------------------------------------------------------------
# AM insertion + pre-FEC 10-bit distribution (119.2.4.4-5)

@njit(cache=True)
def data_to_messages(data, am_bits, am_pair, am_group_of_pair, am_nbits, msgs):
    """Build each pair's 10280-bit ``tx_scrambled_am`` and cut it into 1028 10-bit symbols.

    ``data``: scrambled 257b stream; ``am_bits[g]``: packed bits of AM group g; ``am_pair[p]``:
    pair p starts with an AM group.  ``msgs[p, i % 2, i // 2] = symbol i`` (A even, B odd).
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
            nd = 10280 - am_nbits
            copy_bits(data, dpos, tmp, am_nbits, nd)
            dpos += nd
            for i in range(1028):
                msgs[p, i & 1, i >> 1] = np.uint16(get_bits(tmp, 10 * i, 10))
        else:
            # two symbols (A then B) per 20-bit read
            for i in range(514):
                v = get64(data, dpos + 20 * i)
                msgs[p, 0, i] = np.uint16(v & np.uint64(1023))
                msgs[p, 1, i] = np.uint16((v >> np.uint64(10)) & np.uint64(1023))
            dpos += 10280
    return dpos


@njit(cache=True)
def messages_to_data(msgs, am_pair, am_nbits, data, am_out):
    """Inverse of :func:`data_to_messages` reading ``msgs[p, X, i]`` (``[P, 2, >=514]``, e.g. the
    decoded codewords): write the data bits into ``data`` (zeroed) and each AM group's bits into
    ``am_out[g]`` (zeroed)."""
    npairs = msgs.shape[0]
    tmp = np.zeros(162, dtype=np.uint64)
    dpos = 0
    g = 0
    for p in range(npairs):
        if am_pair[p]:
            for w in range(162):
                tmp[w] = 0
            for i in range(1028):
                or_bits(tmp, 10 * i, np.uint64(msgs[p, i & 1, i >> 1]), 10)
            copy_bits(tmp, 0, am_out[g], 0, am_nbits)
            g += 1
            nd = 10280 - am_nbits
            copy_bits(tmp, am_nbits, data, dpos, nd)
            dpos += nd
        else:
            # sequential bit writer: 20 bits (A, B symbol) per step, kept in a register
            w = dpos >> 6
            nb = dpos & 63
            acc = data[w]
            for i in range(514):
                v = np.uint64(msgs[p, 0, i]) | (np.uint64(msgs[p, 1, i]) << np.uint64(10))
                acc |= v << np.uint64(nb)
                nb += 20
                if nb >= 64:
                    data[w] = acc
                    w += 1
                    nb -= 64
                    acc = (v >> np.uint64(19 - nb)) >> np.uint64(1)  # the nb bits that did not fit
            data[w] = acc
            dpos += 10280
    return dpos


# ---------------------------------------------------------------------------------------------
# Clause 82 receive: 66b blocks -> frame bytes

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
