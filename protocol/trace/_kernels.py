"""Numba kernels of the trace file format (private; called only from :mod:`protocol.trace`).

Version-2 chunk encoding (``protocol/trace/TRACE_FORMAT.md``): a byte string of LEB128 varints
(7 bits per byte, low group first, bit 7 = more bytes follow; at most 9 bytes = 63 bits).

Flips, in offset order, as records ``varint(d << 2 | kind)`` with ``d = offset - prev - 1`` (``prev``
= the last offset of the previous record, ``stream_start - 1`` before the first):

* ``kind & 1``: a lane/flag byte ``lane | flags << 4`` follows (bits 6-7 zero); otherwise the
  record has the previous record's lane and flags (the first record must carry the byte);
* ``kind & 2``: the record is a descrambler triple ``offset, offset + 39, offset + 58`` (49.2.6:
  one scrambled-stream error flips these three payload bits), all with the same lane and flags.

Then the marks, ``varint(start - prev_end), varint(end - start - 1)`` each (``prev_end`` =
the previous mark's end, ``stream_start`` before the first).  The encoding cannot express an
unsorted, duplicate or negative offset, an empty or reversed mark, or overlapping marks; the
decoder rejects everything else (offsets or marks past the chunk end, a lane >= the trace's lane
count, undefined flag bits, a record without a lane, a truncated or over-long varint, more or
fewer flips or marks than the index says, trailing bytes) with an error code and the byte
position, in the same single pass that decodes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__: list[str] = []  # private module

# error codes returned (negated) by the kernels; protocol.trace maps them to field names
E_VARINT_TRUNCATED = 1
E_VARINT_LONG = 2
E_OFFSET_RANGE = 3
E_OFFSET_ORDER = 4
E_LANE = 5
E_FLAGS = 6
E_NO_LANE = 7
E_COUNT = 8
E_MARK_RANGE = 9
E_MARK_ORDER = 10
E_TRAILING = 11
E_LANE_BYTE = 12

TRIPLE_1 = 39
TRIPLE_2 = 58
MAX_FLAGS = 3  # protocol.source.FLAG_MISCORRECTED | FLAG_UNDETECTED


@njit(cache=True, nogil=True, inline="always")
def _put(out, n, v):
    while v >= 128:
        out[n] = (v & 127) | 128
        n += 1
        v >>= 7
    out[n] = v
    return n + 1


@njit(cache=True, nogil=True, inline="always")
def _put_fast(out, n, v):
    """Branch-light varint write for ``v < 2**28`` (4 bytes stored, the length is added)."""
    nb = 1 + np.int64(v >= 128) + np.int64(v >= 16384) + np.int64(v >= 2097152)
    out[n] = (v & 127) | 128
    out[n + 1] = ((v >> 7) & 127) | 128
    out[n + 2] = ((v >> 14) & 127) | 128
    out[n + 3] = (v >> 21) & 127
    out[n + nb - 1] &= 127
    return n + nb


@njit(cache=True, nogil=True, inline="always")
def put_record(out, n, o, lf, tri, prev, plf):
    """Write one flip record at ``out[n]``: offset ``o`` after a record that ended at ``prev``,
    lane/flag byte ``lf`` (written only when it differs from ``plf``), a triple when ``tri``.
    Returns ``(n, prev, plf)`` after it."""
    newlf = np.int64(lf != plf)
    v = ((o - prev - 1) << 2) | newlf | (tri << 1)
    if v < 268435456:
        n = _put_fast(out, n, v)
    else:
        n = _put(out, n, v)
    out[n] = lf
    return n + newlf, o + tri * TRIPLE_2, lf


@njit(cache=True, nogil=True, inline="always")
def encode_records(off, lane, flag, k, nf, final, n_lanes, out, n, prev, plf):
    """Greedy record encoder over entries ``[k, nf)``, streaming: continues after a record that
    ended at offset ``prev`` with lane/flag byte ``plf``.  Unless ``final``, it stops at the first
    entry that lacks two entries of lookahead (a triple needs them), so that encoding a stream in
    pieces gives the bytes of encoding it at once.  Returns ``(k, n, prev, plf)`` = first entry
    not encoded, byte count, state; ``n`` = ``-(code * 2**40 + index)`` on bad content."""
    while k < nf and (final or k + 2 < nf):
        o = off[k]
        if o <= prev:
            return k, -((E_OFFSET_RANGE if plf < 0 else E_OFFSET_ORDER) * (1 << 40) + k), prev, plf
        ln = np.int64(lane[k])
        fl = np.int64(flag[k])
        if ln < 0 or ln >= n_lanes or ln > 15 or fl > MAX_FLAGS:
            return k, -((E_FLAGS if fl > MAX_FLAGS else E_LANE) * (1 << 40) + k), prev, plf
        tri = np.int64(0)
        if k + 2 < nf:
            tri = np.int64((off[k + 1] == o + TRIPLE_1) & (off[k + 2] == o + TRIPLE_2)
                           & (lane[k + 1] == lane[k]) & (lane[k + 2] == lane[k])
                           & (flag[k + 1] == flag[k]) & (flag[k + 2] == flag[k]))
        n, prev, plf = put_record(out, n, o, ln | (fl << 4), tri, prev, plf)
        k += 1 + 2 * tri
    return k, n, prev, plf


@njit(cache=True, nogil=True)
def encode_flips(off, lane, flag, end, n_lanes, out, n, prev, plf):
    """Append the flip records of ``off``/``lane``/``flag`` to ``out[n:]``, continuing after a
    record that ended at offset ``prev`` with lane/flag byte ``plf`` (``start - 1`` and ``-1`` at
    the start of a chunk), validating on the way.  Returns the new byte count, or
    ``-(code * 2**40 + index)`` on bad content (``index`` = the flip that broke the rule).

    Encoding a chunk's flips in two parts, split before a flip more than ``TRIPLE_2`` bits after
    its predecessor (no triple spans the split), gives the same bytes as encoding them at once:
    worker processes encode all but a shard's first block that way (``protocol.trace``)."""
    nf = off.size
    if nf and off[nf - 1] >= end:
        return -(E_OFFSET_RANGE * (1 << 40) + nf - 1)
    _, n, _, _ = encode_records(off, lane, flag, 0, nf, True, n_lanes, out, n, prev, plf)
    return n


@njit(cache=True, nogil=True)
def encode_marks(marks, start, end, out, n):
    """Append the mark records (after all flips of the chunk) to ``out[n:]``; the new byte count
    or ``-(code * 2**40 + index)``."""
    pe = start
    for j in range(marks.shape[0]):
        a = marks[j, 0]
        b = marks[j, 1]
        if a < pe or b <= a:
            return -(E_MARK_ORDER * (1 << 40) + j)
        if b > end:
            return -(E_MARK_RANGE * (1 << 40) + j)
        n = _put(out, n, a - pe)
        n = _put(out, n, b - a - 1)
        pe = b
    return n


@njit(cache=True, nogil=True)
def encode_chunk(off, lane, flag, marks, start, end, n_lanes, out):
    """Encode one chunk into ``out`` (capacity >= 10 * (off.size + 2 * marks.shape[0]) + 16),
    validating it on the way.  Returns the byte count, or ``-(code * 2**40 + index)`` on bad
    content (``index`` = the flip or mark that broke the rule)."""
    n = encode_flips(off, lane, flag, end, n_lanes, out, 0, start - 1, -1)
    if n < 0:
        return n
    return encode_marks(marks, start, end, out, n)


@njit(cache=True, nogil=True, inline="always")
def _get(buf, p):
    """(value, new position); position -1 = truncated, -2 = over-long."""
    v = np.int64(0)
    shift = 0
    while True:
        if p >= buf.size:
            return v, -1
        c = np.int64(buf[p])
        p += 1
        if shift == 56 and c > 127:
            return v, -2
        v |= (c & 127) << shift
        if c < 128:
            return v, p
        shift += 7


@njit(cache=True, nogil=True)
def decode_records(buf, start, end, n_lanes, off, lane, flag, head_end):
    """Decode and validate a chunk's flip records into ``off``/``lane``/``flag`` (size = the
    chunk's flip count).  Returns ``(k, p, err)``: flips decoded, byte position after them, and 0
    or ``-(code * 2**40 + byte position)``.

    It stops early, before the first record that starts more than ``TRIPLE_2`` bits after the
    flip before it with that flip at or after ``head_end`` (``head_end >= end``: never).  No
    triple record spans that point, so the bytes from there on do not depend on what precedes:
    ``protocol.trace`` decodes and re-encodes only such a head when it joins a descrambler carry.
    """
    nf = off.size
    p = 0
    k = 0
    prev = start - 1
    plf = -1
    while k < nf:
        at = p
        v, p = _get(buf, p)
        if p < 0:
            return k, at, -((E_VARINT_TRUNCATED if p == -1 else E_VARINT_LONG) * (1 << 40) + at)
        kind = v & 3
        d = v >> 2
        if k > 0 and prev >= head_end and d >= TRIPLE_2:
            return k, at, 0
        if d >= end - prev - 1:
            return k, at, -(E_OFFSET_RANGE * (1 << 40) + at)
        o = prev + 1 + d
        if kind & 1:
            if p >= buf.size:
                return k, p, -(E_VARINT_TRUNCATED * (1 << 40) + p)
            lf = np.int64(buf[p])
            p += 1
            if lf >> 6:
                return k, p, -(E_LANE_BYTE * (1 << 40) + p - 1)
            if (lf & 15) >= n_lanes:
                return k, p, -(E_LANE * (1 << 40) + p - 1)
            plf = lf
        elif plf < 0:
            return k, at, -(E_NO_LANE * (1 << 40) + at)
        ln = plf & 15
        fl = plf >> 4
        if kind & 2:
            if k + 3 > nf:
                return k, at, -(E_COUNT * (1 << 40) + at)
            if o + TRIPLE_2 >= end:
                return k, at, -(E_OFFSET_RANGE * (1 << 40) + at)
            off[k] = o
            off[k + 1] = o + TRIPLE_1
            off[k + 2] = o + TRIPLE_2
            for r in range(3):
                lane[k + r] = ln
                flag[k + r] = fl
            k += 3
            prev = o + TRIPLE_2
        else:
            off[k] = o
            lane[k] = ln
            flag[k] = fl
            k += 1
            prev = o
    return k, p, 0


@njit(cache=True, nogil=True)
def decode_chunk(buf, start, end, n_lanes, off, lane, flag, marks):
    """Decode a chunk into ``off``/``lane``/``flag`` (size = the index's flip count) and ``marks``
    ([m, 2]).  Returns 0, or ``-(code * 2**40 + byte position)``."""
    _, p, err = decode_records(buf, start, end, n_lanes, off, lane, flag, end)
    if err:
        return err
    pe = start
    for j in range(marks.shape[0]):
        at = p
        g, p = _get(buf, p)
        if p < 0:
            return -((E_VARINT_TRUNCATED if p == -1 else E_VARINT_LONG) * (1 << 40) + at)
        if g > end - pe:
            return -(E_MARK_RANGE * (1 << 40) + at)
        a = pe + g
        at = p
        ln_, p = _get(buf, p)
        if p < 0:
            return -((E_VARINT_TRUNCATED if p == -1 else E_VARINT_LONG) * (1 << 40) + at)
        if ln_ >= end - a:
            return -(E_MARK_RANGE * (1 << 40) + at)
        marks[j, 0] = a
        marks[j, 1] = a + ln_ + 1
        pe = a + ln_ + 1
    if p != buf.size:
        return -(E_TRAILING * (1 << 40) + p)
    return 0


@njit(cache=True, nogil=True)
def check_chunk(off, lane, flag, marks, start, end, n_lanes):
    """Validate raw (version-1) chunk arrays in one pass; 0 or ``-(code * 2**40 + index)``."""
    prev = start - 1
    for k in range(off.size):
        o = off[k]
        if o < start or o >= end:
            return -(E_OFFSET_RANGE * (1 << 40) + k)
        if o <= prev:
            return -(E_OFFSET_ORDER * (1 << 40) + k)
        prev = o
        ln = np.int64(lane[k])
        if ln < 0 or ln >= n_lanes:
            return -(E_LANE * (1 << 40) + k)
        fl = np.int64(flag[k])
        if fl < 0 or fl > MAX_FLAGS:
            return -(E_FLAGS * (1 << 40) + k)
    pe = start
    for j in range(marks.shape[0]):
        a = marks[j, 0]
        b = marks[j, 1]
        if a < start or b > end:
            return -(E_MARK_RANGE * (1 << 40) + j)
        if b <= a or a < pe:
            return -(E_MARK_ORDER * (1 << 40) + j)
        pe = b
    return 0
