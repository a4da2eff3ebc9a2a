"""Numba kernels of the fast trace generator (private; called from :mod:`protocol.trace.fast` and :mod:`.bitexact`).

Coordinates (all int64):

* pair-space index ``g = P * 10880 + u``: line bit ``u`` of codeword pair ``P`` with
  ``u = 20 t + 10 c + b`` (symbol time ``t`` = 0..543, codeword ``c`` = 0 for A / 1 for B,
  bit ``b`` of the symbol).  For ``t < 514`` this ``u`` is exactly the bit index of the pair's
  ``tx_scrambled_am`` message (119.2.4.5: bit ``20i + 10c + b`` is bit ``b`` of message symbol
  ``i`` of codeword ``c``), so no table is needed.  Line errors are independent, so the order in
  which the line bits are enumerated does not matter for sampling.
* scrambled-stream index ``s``: bits of the data (non-AM) 257b blocks in order, 257 per block;
  the 1 + x^39 + x^58 descrambler (49.2.6) runs on this stream.
* payload-stream offset: ``256 * block + (s % 257 - 1)`` for ``s % 257 != 0``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# compile-time constants of the kernels below (Clause 119 geometry, defined in phy802.clause119)
from phy802.clause119 import BLOCK_BITS, BLOCKS_PER_PAIR, PAIR_MESSAGE_BITS
from phy802.clause119 import PAIR_LINE_BITS as PAIR_BITS

from ._kernels import encode_records, put_record

__all__: list[str] = []  # private module


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def group_pairs(pos, half_lanes, period, am_blocks, t_corr, decoder, hist, err_lane,
                prim_s, prim_lane, heavy_pair, heavy_lo, heavy_hi, mark_pair, counters):
    """Group sorted pair-space error positions by codeword and decide each codeword's fate.

    Parameters
    ----------
    pos : int64[n] sorted pair-space positions of line bit errors.
    half_lanes : PCS lanes / 2 (8 at 400G, 4 at 200G, a power of two); lane of symbol t of
        codeword c is ``2 (t % J) + (c ^ ((t // J) & 1))`` (119.2.4.7).
    period, am_blocks : AM geometry (period in pairs, a power of two).
    t_corr : correction capability t (15).  decoder : 0 none, 1 correct, 2 detect.
    hist : int64[H] per-codeword symbol-error-count histogram (the last bin collects >= H-1),
        updated in place; bin 0 only counts codewords of pairs with errors, so callers derive it
        from the number of codewords instead.
    err_lane : int64[lanes] pre-FEC bit errors per PCS lane, updated in place.
    prim_s, prim_lane : outputs, primary (pre-descrambler) errors passed through untouched.
    heavy_pair, heavy_lo, heavy_hi : outputs, pairs the caller must decode (their errors are
        ``pos[lo:hi]``): correct mode, a codeword with more than t symbol errors; detect mode,
        more than 2t (below that, a nonzero pattern cannot be a codeword, d = 2t + 1).
    mark_pair : output, pairs marked by the detect-only indication.
    counters : int64[8] in place: [-, codewords with errors, corrected codewords, errors in AM bits].

    Returns (n_prim, n_heavy, n_mark).
    """
    n = pos.size
    jm = half_lanes - 1  # powers of two: shifts and masks instead of divisions
    js = 0
    while (1 << js) < half_lanes:
        js += 1
    ps = 0
    while (1 << ps) < period:
        ps += 1
    pm = period - 1
    n_prim = 0
    n_heavy = 0
    n_mark = 0
    H = hist.size
    cw_err = 0
    corrected = 0
    am_err = 0
    i = 0
    while i < n:
        P = pos[i] // PAIR_BITS
        base = P * PAIR_BITS
        am_bits = am_blocks * BLOCK_BITS if (P & pm) == 0 else 0
        s0 = (P * BLOCKS_PER_PAIR - ((P + pm) >> ps) * am_blocks) * BLOCK_BITS - am_bits
        j = i
        w0 = 0
        w1 = 0
        last0 = -1
        last1 = -1
        np0 = n_prim
        am0 = am_err
        while j < n and pos[j] < base + PAIR_BITS:
            u = pos[j] - base
            sym = u // 10  # = 2 t + c
            c = sym & 1
            t = sym >> 1
            lane = 2 * (t & jm) + (c ^ ((t >> js) & 1))
            err_lane[lane] += 1
            # branch-free distinct-symbol count per codeword (the A/B choice is random)
            nc = 1 - c
            w0 += nc * (sym != last0)
            w1 += c * (sym != last1)
            last0 += nc * (sym - last0)
            last1 += c * (sym - last1)
            if decoder != 1 and u < PAIR_MESSAGE_BITS:  # provisional pass-through of message bits
                if u < am_bits:
                    am_err += 1  # alignment-marker bit: removed before descrambling
                else:
                    prim_s[n_prim] = s0 + u
                    prim_lane[n_prim] = lane
                    n_prim += 1
            j += 1
        # branch-free: bin 0 also counts here but is recomputed by the caller from the totals
        hist[min(w0, H - 1)] += 1
        hist[min(w1, H - 1)] += 1
        cw_err += (1 if w0 > 0 else 0) + (1 if w1 > 0 else 0)
        if decoder == 1:
            if w0 > t_corr or w1 > t_corr:
                heavy_pair[n_heavy] = P
                heavy_lo[n_heavy] = i
                heavy_hi[n_heavy] = j
                n_heavy += 1
            corrected += (1 if 0 < w0 <= t_corr else 0) + (1 if 0 < w1 <= t_corr else 0)
        elif decoder == 2:
            if w0 > 2 * t_corr or w1 > 2 * t_corr:
                heavy_pair[n_heavy] = P
                heavy_lo[n_heavy] = i
                heavy_hi[n_heavy] = j
                n_heavy += 1
                n_prim = np0  # the caller decodes this pair and supplies its primaries
                am_err = am0
            else:
                mark_pair[n_mark] = P
                n_mark += 1
        i = j
    counters[1] += cw_err
    counters[2] += corrected
    counters[3] += am_err
    return n_prim, n_heavy, n_mark


@njit(cache=True)
def _expand_cluster(keys, lanes, flags, s_end, out_off, out_lane, out_flag, hdr_block,
                    new_key, new_lane, new_flag, no, nh, nn):
    """General path of :func:`descramble_expand` for interacting contributions (rare)."""
    m = keys.size
    order = np.argsort(keys, kind="mergesort")
    a = 0
    while a < m:
        k0 = keys[order[a]]
        v = k0 >> 2
        b = a + 1
        while b < m and (keys[order[b]] >> 2) == v:
            b += 1
        if v >= s_end:
            # not cancelled yet: the next chunk's primaries may still hit this bit
            for c in range(a, b):
                o = order[c]
                new_key[nn] = keys[o]
                new_lane[nn] = lanes[o]
                new_flag[nn] = flags[o]
                nn += 1
        elif (b - a) & 1:
            o = order[a]
            blk = v // BLOCK_BITS
            rem = v - blk * BLOCK_BITS
            if rem == 0:
                hdr_block[nh] = blk
                nh += 1
            else:
                out_off[no] = blk * 256 + rem - 1
                out_lane[no] = lanes[o]
                out_flag[no] = flags[o]
                no += 1
        a = b
    return no, nh, nn


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def descramble_expand(prim_s, prim_lane, prim_flag, pend_key, pend_lane, pend_flag, s_end,
                      out_off, out_lane, out_flag, hdr_block, new_key, new_lane, new_flag):
    """Error multiplication of the 1 + x^39 + x^58 descrambler (49.2.6) on a sorted error stream.

    A received error at ``s`` corrupts descrambled bits ``s``, ``s+39`` and ``s+58`` (XOR: an even
    number of hits on one bit cancels).  Contributions are ordered by the key ``4 * value + rank``
    (rank 0, 1, 2 for the offsets 0, 39, 58; pending entries keep theirs) so that a bit hit several
    times keeps the lane and flags of its lowest-key contributor.  Primaries more than 58 apart
    cannot interact, so isolated ones take a straight path and only clusters are sorted.
    Copies at or beyond ``s_end`` (the chunk end) become the new pending list (sorted by key,
    not yet cancelled); ``pend_*`` is the previous chunk's.

    Outputs: payload offsets (``256 * (v // 257) + v % 257 - 1``), lanes and flags of flipped
    payload bits; ``hdr_block`` the 257b blocks whose header bit (``v % 257 == 0``) flipped.
    Returns (n_out, n_hdr, n_new).
    """
    n = prim_s.size
    npend = pend_key.size
    no = 0
    nh = 0
    nn = 0
    i = 0
    if npend > 0:
        # pending copies interact with the first primaries up to the first gap > 58 past them
        j = 0
        lim = pend_key[npend - 1] >> 2
        while j < n and (prim_s[j] <= lim or (j > 0 and prim_s[j] - prim_s[j - 1] <= 58)):
            j += 1
        m = npend + 3 * j
        keys = np.empty(m, np.int64)
        lanes = np.empty(m, np.int8)
        flags = np.empty(m, np.uint8)
        keys[:npend] = pend_key
        lanes[:npend] = pend_lane
        flags[:npend] = pend_flag
        q = npend
        for a in range(j):
            for r in range(3):
                d = 0 if r == 0 else (39 if r == 1 else 58)
                keys[q] = 4 * (prim_s[a] + d) + r
                lanes[q] = prim_lane[a]
                flags[q] = prim_flag[a]
                q += 1
        no, nh, nn = _expand_cluster(keys, lanes, flags, s_end, out_off, out_lane, out_flag, hdr_block,
                                     new_key, new_lane, new_flag, no, nh, nn)
        i = j
    while i < n:
        j = i + 1
        while j < n and prim_s[j] - prim_s[j - 1] <= 58:
            j += 1
        s = prim_s[i]
        if j == i + 1 and s + 58 < s_end:
            ln = prim_lane[i]
            fl = prim_flag[i]
            blk = s // BLOCK_BITS
            rem = s - blk * BLOCK_BITS
            for r in range(3):
                if r == 1:
                    rem += 39
                elif r == 2:
                    rem += 19
                if rem >= BLOCK_BITS:
                    rem -= BLOCK_BITS
                    blk += 1
                if rem == 0:
                    hdr_block[nh] = blk
                    nh += 1
                else:
                    out_off[no] = blk * 256 + rem - 1
                    out_lane[no] = ln
                    out_flag[no] = fl
                    no += 1
        else:
            m = 3 * (j - i)
            keys = np.empty(m, np.int64)
            lanes = np.empty(m, np.int8)
            flags = np.empty(m, np.uint8)
            q = 0
            for a in range(i, j):
                for r in range(3):
                    d = 0 if r == 0 else (39 if r == 1 else 58)
                    keys[q] = 4 * (prim_s[a] + d) + r
                    lanes[q] = prim_lane[a]
                    flags[q] = prim_flag[a]
                    q += 1
            no, nh, nn = _expand_cluster(keys, lanes, flags, s_end, out_off, out_lane, out_flag, hdr_block,
                                         new_key, new_lane, new_flag, no, nh, nn)
        i = j
    return no, nh, nn


@njit(cache=True)
def scramble_bits(bits, state):
    """Self-synchronous scrambler s_n = d_n ^ s_{n-39} ^ s_{n-58} over uint8 bits (49.2.6).

    ``state`` (uint8[58], state[0] = s_{n-1}) is updated in place; returns the scrambled bits.
    """
    n = bits.size
    out = np.empty(n, np.uint8)
    hist = np.empty(n + 58, np.uint8)
    for k in range(58):
        hist[57 - k] = state[k]
    for i in range(n):
        s = bits[i] ^ hist[i + 58 - 39] ^ hist[i]
        hist[i + 58] = s
        out[i] = s
    for k in range(58):
        state[k] = hist[n + 57 - k]
    return out


@njit(cache=True)
def descramble_bits(bits, state):
    """Descrambler d_n = s_n ^ s_{n-39} ^ s_{n-58}; ``state`` holds the last 58 received bits."""
    n = bits.size
    out = np.empty(n, np.uint8)
    hist = np.empty(n + 58, np.uint8)
    for k in range(58):
        hist[57 - k] = state[k]
    for i in range(n):
        hist[i + 58] = bits[i]
        out[i] = bits[i] ^ hist[i + 58 - 39] ^ hist[i]
    for k in range(58):
        state[k] = hist[n + 57 - k]
    return out


@njit(cache=True)
def sample_positions(rng, scale, nxt, end, out):
    """Independent bit errors by exponential gaps (geometric skipping).

    ``nxt`` is the next error position already drawn; positions below ``end`` are written to
    ``out`` (while it has room) and each draws the gap to its successor: ``1 + floor(E * scale)``
    with ``E ~ Exp(1)`` and ``scale = -1 / log(1 - p)`` is exactly Geometric(p) on {1, 2, ...}.
    The Generator's stream is consumed in order, so the positions do not depend on chunking.
    Returns (count written, next position).
    """
    n = 0
    cap = out.size
    while nxt < end and n < cap:
        out[n] = nxt
        n += 1
        nxt += 1 + np.int64(rng.standard_exponential() * scale)
    return n, nxt


@njit(cache=True, nogil=True)
def _encode_staged(off, lane, flag, no, final, n_lanes, enc, nbytes, prev, plf, nfl):
    """Run the greedy encoder over the staged flips; keep the (at most two) that still wait for
    their lookahead at the front.  Returns ``(no, nbytes, prev, plf, nfl)``."""
    k, nbytes, prev, plf = encode_records(off, lane, flag, 0, no, final, n_lanes, enc, nbytes, prev, plf)
    for i in range(no - k):
        off[i] = off[k + i]
        lane[i] = lane[k + i]
        flag[i] = flag[k + i]
    return no - k, nbytes, prev, plf, nfl + k


@njit(cache=True, nogil=True, inline="always")
def _acc(units, r, u, w):
    """Add ``w`` errors in pair ``u`` (relative; not below the open one) to row ``r`` of ``units``
    (:func:`bypass_run`); a new pair closes the open one.  Branch-free: at BER 1e-4 the pair
    changes at an unpredictable ~2/3 of the errors."""
    c = units[r, 1]
    new = np.int64(u != units[r, 0])
    units[r, 2] += new * np.int64(c > 0)
    units[r, 3] += new * c * c
    units[r, 4] += new * np.int64(units[r, 0] == 0) * c
    units[r, 0] = u
    units[r, 1] = c * (1 - new) + w
    units[r, 5] += w


@njit(cache=True, nogil=True, inline="always")
def _pair_of_offset(o, period, am_blocks):
    """The pair that carries payload offset ``o`` (``protocol.framing.pair_of_data_block``)."""
    blk = o // 256
    d = BLOCKS_PER_PAIR * period - am_blocks
    q = blk // d
    r = blk - q * d
    first = BLOCKS_PER_PAIR - am_blocks
    return q * period + (0 if r < first else 1 + (r - first) // BLOCKS_PER_PAIR)


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True, nogil=True)
def bypass_run(rng, scale, nxt, end, half_lanes, period, am_blocks, s_end, hist_out, lane_out,
               pend_key, pend_lane, pend_flag, out_off, out_lane, out_flag, hdr_block,
               new_key, new_lane, new_flag, counters, enc, enc_state, units, unit_p0):
    """Fused fast path of the ``bypass`` mode: sample, count, multiply and map in one pass.

    Equivalent to :func:`sample_positions` + :func:`group_pairs` (decoder 0) +
    :func:`descramble_expand` (the tests check it), without the intermediate arrays.
    Primaries are buffered while they can still interact (a new primary within 58 bits of the
    previous one, or at or below the last pending copy); isolated ones are written directly.

    Returns (next position, n_out, n_hdr, n_new), or next position -1 when the outputs are too
    small (3 per error plus the pending entries); then nothing is valid and the caller must
    restore the Generator state and retry with larger arrays.  ``counters`` in place: [line
    errors, codewords with errors, parity-bit errors, AM-bit errors] (only on success).

    With a non-empty ``enc`` (uint8) the flips are written as version-2 trace records
    (``protocol/trace/TRACE_FORMAT.md``) instead of ``out_*`` (then a small staging area, n_out = 0):
    ``enc_state`` = [bytes written, ``prev``, ``plf``, flips encoded] in and out, starting at
    ``[0, stream_start - 1, -1, 0]``.  The bytes equal ``encode_chunk`` of the raw output (a test
    checks): an isolated primary whose three copies fall inside one 257b block (77% of them) is
    one triple record; the copies of another isolated primary wait in the staging area until
    the next primary's lane is known (a triple record needs three flips on one lane, so staged
    flips on other lanes than the newcomer's are single records); clusters and same-lane
    neighbours go through :func:`protocol.trace._kernels.encode_records`, the greedy encoder.

    ``units`` (int64[3, 6], in place): per codeword pair, the clustered post-FEC intervals' unit,
    running counts (:func:`_acc`; columns: open pair - ``unit_p0`` or -1, its count, pairs with
    errors, sum of counts squared, the count of pair ``unit_p0``, total) of the decoder-output
    (message, non-AM) bit errors (row 1) and the payload flips (row 2); row 0, line bit errors,
    is used for the bursty channels only, which never take this path.  Errors come pair by pair
    and flips are made in increasing offset order, so no per-pair array is needed.  A flip counts
    in the pair it lands in: a lone primary's copies in its own pair or, past the pair's last
    scrambled bit, the next.  Closed and valid only on success.
    """
    encode = enc.size > 0
    nbytes = enc_state[0]
    eprev = enc_state[1]
    eplf = enc_state[2]
    nfl = enc_state[3]
    n_lanes = 2 * half_lanes
    jm = half_lanes - 1
    js = 0
    while (1 << js) < half_lanes:
        js += 1
    ps = 0
    while (1 << ps) < period:
        ps += 1
    pm = period - 1
    H = hist_out.size
    hist = np.zeros(H + 1, np.int64)  # bin H discards (branch-free pair change below)
    lane_count = np.zeros(lane_out.size, np.int64)
    no = 0
    nh = 0
    nn = 0
    # cluster buffer: keys 4 * value + rank (rank = which of the copies n, n + 39, n + 58)
    cap = 192 + pend_key.size
    bk = np.empty(cap, np.int64)
    bl = np.empty(cap, np.int8)
    bf = np.empty(cap, np.uint8)
    bmax = -1  # largest value in the buffer
    for a in range(pend_key.size):
        bk[a] = pend_key[a]
        bl[a] = pend_lane[a]
        bf[a] = pend_flag[a]
        bmax = max(bmax, pend_key[a] >> 2)
    nb = pend_key.size
    iso = np.int64(-1)  # a lone primary (scrambled-stream position), not yet written
    iso_l = np.int64(0)
    curP = -1
    base = 0
    am_bits = 0
    s0 = 0
    w0 = 0
    w1 = 0
    last0 = -1
    last1 = -1
    n_err = 0
    am_err = 0
    par_err = 0
    iso_u = np.int64(0)  # the lone primary's pair - unit_p0
    iso_se = np.int64(0)  # and the scrambled-stream end of that pair
    limit = out_off.size - pend_key.size - 3
    err_cap = limit // 3 - 1  # 3 copies per error must fit the outputs
    # records: at most 10 bytes each.  Each error checks room for a lone primary's flush (its
    # three copies and at most three staged flips); a cluster's flush checks for itself
    enc_lim = enc.size - 160 if encode else np.int64(1) << 62
    while True:
        done = nxt >= end
        s = np.int64(0)
        lane = np.int64(0)
        if not done:
            if n_err >= err_cap or nbytes > enc_lim:
                return np.int64(-1), 0, 0, 0  # outputs could overflow: the caller retries larger
            g = nxt
            nxt += 1 + np.int64(rng.standard_exponential() * scale)
            n_err += 1
            gs = g // 10  # global symbol index: 1088 per pair, its parity = the codeword (119.2.4.5)
            P = gs // 1088
            # a new pair closes the previous pair's two codewords; branch-free, since the pair
            # changes at an unpredictable ~2/3 of the errors at BER 1e-4
            newp = np.int64(P != curP)
            fl = newp & np.int64(curP >= 0)
            hist[fl * min(w0, H - 1) + (1 - fl) * H] += 1
            hist[fl * min(w1, H - 1) + (1 - fl) * H] += 1
            curP = P
            base = P * PAIR_BITS
            am_bits = am_blocks * BLOCK_BITS * np.int64((P & pm) == 0)
            s0 = (P * BLOCKS_PER_PAIR - ((P + pm) >> ps) * am_blocks) * BLOCK_BITS - am_bits
            keep = 1 - newp
            u = g - base
            c = gs & 1
            t = gs >> 1  # symbol time, counted globally: 544 per pair, a multiple of 2 * half_lanes
            lane = 2 * (t & jm) + (c ^ ((t >> js) & 1))
            lane_count[lane] += 1
            nc = 1 - c
            # distinct symbols hit per codeword (global symbol ids: no reset needed at a new pair)
            w0 = w0 * keep + nc * (gs != last0)
            w1 = w1 * keep + c * (gs != last1)
            last0 += nc * (gs - last0)
            last1 += c * (gs - last1)
            if u >= PAIR_MESSAGE_BITS or u < am_bits:
                par_err += np.int64(u >= PAIR_MESSAGE_BITS)  # parity
                am_err += np.int64(u < PAIR_MESSAGE_BITS)  # alignment marker
                continue
            s = s0 + u
            _acc(units, 1, P - unit_p0, 1)
            if nb > 0 and s <= bmax:
                # interacts with the cluster: append its three copies
                if nb + 3 > bk.size:
                    k2 = np.empty(2 * bk.size, np.int64)
                    l2 = np.empty(2 * bk.size, np.int8)
                    f2 = np.empty(2 * bk.size, np.uint8)
                    k2[:nb] = bk[:nb]
                    l2[:nb] = bl[:nb]
                    f2[:nb] = bf[:nb]
                    bk, bl, bf = k2, l2, f2
                for r in range(3):
                    bk[nb] = 4 * (s + (0 if r == 0 else (39 if r == 1 else 58))) + r
                    bl[nb] = lane
                    bf[nb] = 0
                    nb += 1
                bmax = s + 58
                continue
            if iso >= 0 and s <= iso + 58:
                # the lone primary and this one interact: both become a cluster
                for q in range(2):
                    v = iso if q == 0 else s
                    for r in range(3):
                        bk[3 * q + r] = 4 * (v + (0 if r == 0 else (39 if r == 1 else 58))) + r
                        bl[3 * q + r] = iso_l if q == 0 else lane
                        bf[3 * q + r] = 0
                nb = 6
                bmax = s + 58
                iso = -1
                continue
        if iso >= 0 and done and iso + 58 >= s_end:
            # the chunk ends within the lone primary's reach: its late copies are carried
            for r in range(3):
                bk[r] = 4 * (iso + (0 if r == 0 else (39 if r == 1 else 58))) + r
                bl[r] = iso_l
                bf[r] = 0
            nb = 3
            iso = -1
        if nb > 0:
            if encode and nbytes + 10 * (no + nb) + 160 > enc.size:
                return np.int64(-1), 0, 0, 0
            no0 = no
            no, nh, nn = _expand_cluster(bk[:nb], bl[:nb], bf[:nb], s_end, out_off, out_lane, out_flag,
                                         hdr_block, new_key, new_lane, new_flag, no, nh, nn)
            for i in range(no0, no):
                _acc(units, 2, _pair_of_offset(out_off[i], period, am_blocks) - unit_p0, 1)
            nb = 0
            if encode:
                no, nbytes, eprev, eplf, nfl = _encode_staged(out_off, out_lane, out_flag, no, False, n_lanes, enc,
                                                              nbytes, eprev, eplf, nfl)
                if nbytes < 0:
                    return np.int64(-2), 0, 0, 0  # internal: the flips broke the format's rules
        elif iso >= 0:
            # write the lone primary's copies n, n + 39, n + 58 (49.2.6) in payload offsets
            blk0 = np.int64(np.uint64(iso) // np.uint64(BLOCK_BITS))
            rem0 = iso - blk0 * BLOCK_BITS
            clean = rem0 != 0 and rem0 + 58 < BLOCK_BITS  # all three inside one block's payload
            greedy = False
            if encode and no > 0:
                for i in range(no):  # can a staged flip start a triple with this primary's copies?
                    greedy |= np.int64(out_lane[i]) == iso_l
                if not greedy:  # no (a triple is three flips on one lane): single records
                    for i in range(no):
                        lf = np.int64(out_lane[i]) | (np.int64(out_flag[i]) << 4)
                        nbytes, eprev, eplf = put_record(enc, nbytes, out_off[i], lf, 0, eprev, eplf)
                    nfl += no
                    no = 0
            if encode and no == 0 and clean:
                nbytes, eprev, eplf = put_record(enc, nbytes, blk0 * 256 + rem0 - 1, iso_l, 1, eprev, eplf)
                _acc(units, 2, iso_u, 3)  # one block: the lone primary's pair
                nfl += 3
            elif encode and no == 0 and (done or lane != iso_l):
                # no triple of its own, and none with the next primary's copies (another lane, or
                # none): single records now; the newcomer's flips come more than 58 bits later
                for r in range(3):
                    v = iso + (0 if r == 0 else (39 if r == 1 else 58))
                    blk = np.int64(np.uint64(v) // np.uint64(BLOCK_BITS))
                    rem = v - blk * BLOCK_BITS
                    if rem == 0:
                        hdr_block[nh] = blk
                        nh += 1
                    else:
                        nbytes, eprev, eplf = put_record(enc, nbytes, blk * 256 + rem - 1, iso_l, 0, eprev, eplf)
                        _acc(units, 2, iso_u + np.int64(v >= iso_se), 1)
                        nfl += 1
            else:  # branch-free: a copy on a 257b header bit goes to hdr_block instead
                for r in range(3):
                    v = iso + (0 if r == 0 else (39 if r == 1 else 58))
                    blk = np.int64(np.uint64(v) // np.uint64(BLOCK_BITS))
                    rem = v - blk * BLOCK_BITS
                    out_off[no] = blk * 256 + rem - 1
                    out_lane[no] = iso_l
                    out_flag[no] = 0
                    hdr_block[nh] = blk
                    h = np.int64(rem == 0)
                    _acc(units, 2, iso_u + np.int64(v >= iso_se), 1 - h)
                    no += 1 - h
                    nh += h
            if greedy:
                no, nbytes, eprev, eplf, nfl = _encode_staged(out_off, out_lane, out_flag, no, False, n_lanes, enc,
                                                              nbytes, eprev, eplf, nfl)
                if nbytes < 0:
                    return np.int64(-2), 0, 0, 0
            iso = -1
        if done:
            if encode and no > 0:
                no, nbytes, eprev, eplf, nfl = _encode_staged(out_off, out_lane, out_flag, no, True, n_lanes, enc,
                                                              nbytes, eprev, eplf, nfl)
                if nbytes < 0:
                    return np.int64(-2), 0, 0, 0
            break
        iso = s
        iso_l = lane
        iso_u = curP - unit_p0
        iso_se = s0 + PAIR_MESSAGE_BITS  # s0 + u, u < 10280 (message bits; u < am_bits are AM bits)
    hist[min(w0, H - 1) if curP >= 0 else H] += 1
    hist[min(w1, H - 1) if curP >= 0 else H] += 1
    cw_err = hist[1:H].sum()  # codewords with errors: every closed codeword with w >= 1
    for r in range(3):
        _acc(units, r, np.int64(-2), 0)  # close the open pairs
    enc_state[0] = nbytes
    enc_state[1] = eprev
    enc_state[2] = eplf
    enc_state[3] = nfl
    counters[0] += n_err
    counters[1] += cw_err
    counters[2] += par_err
    counters[3] += am_err
    hist_out += hist[:H]
    lane_out += lane_count
    return nxt, no, nh, nn


@njit(cache=True)
def lane_bursts(rng, pe_scale, pb_scale, nxt, run_left, end, out):
    """Sparse 1-tap-DFE-style bursts along one lane's serial bit stream.

    Two-state chain per bit: G->B with probability pe, B->B with pb; a bit is in error iff B.
    ``nxt``: position of the next bit in state B (already drawn); ``run_left``: how many more
    B bits follow it in the current burst (-1: not drawn yet).  Gaps in G are
    ``floor(E * pe_scale)`` with ``pe_scale = -1/log(1-pe)`` (Geometric(pe) failures), extra burst
    bits ``floor(E * pb_scale)`` with ``pb_scale = -1/log(pb)`` (P(L = l) = (1-pb) pb^(l-1)).
    Writes lane positions below ``end`` into ``out``; returns (count, nxt, run_left), or count -1
    when ``out`` is full (the caller restores the Generator state and retries larger).
    """
    n = 0
    cap = out.size
    while nxt < end:
        if run_left < 0:
            run_left = np.int64(rng.standard_exponential() * pb_scale) if pb_scale > 0 else 0
        if n >= cap:
            return -1, nxt, run_left
        out[n] = nxt
        n += 1
        if run_left > 0:
            run_left -= 1
            nxt += 1
        else:
            # burst over: the next bit is G, then Geometric(pe) more G bits before the next B
            nxt += 2 + np.int64(rng.standard_exponential() * pe_scale)
            run_left = -1
    return n, nxt, run_left


@njit(cache=True)
def dense_markov(uniforms, pe, pb, state):
    """Reference: the same chain drawn bit by bit (one uniform per bit); ``state[0]`` 0 = G, 1 = B
    carries across calls.  Returns uint8 error bits."""
    n = uniforms.size
    out = np.empty(n, np.uint8)
    s = state[0]
    for i in range(n):
        if s == 0:
            s = 1 if uniforms[i] < pe else 0
        else:
            s = 1 if uniforms[i] < pb else 0
        out[i] = s
    state[0] = s
    return out
