"""Numba kernels of the Clause 177 inner code (private: called only through :mod:`phy802.fec.inner`,
which checks inputs).

Conventions: a block is ``uint8[128]`` of 0/1, bits 0..119 the message, 120..127 the parity;
PAM4 symbol ``k`` carries bits ``2k`` (A, first, the Gray MSB) and ``2k + 1`` (B).  The binary code
the decoder works on has 68 positions: ``m_xor(k) = A xor B`` of message symbol ``k`` (positions
0..59) and the 8 parity bits themselves (positions 60..67).  Column ``j`` of the parity-check
matrix is ``col[j]`` (an 8-bit value; G row ``k`` for ``k < 60``, unit vectors for the parity);
``pos_of[s]`` is the position whose column is ``s`` (-1: none).

Speed notes: the parity is 8 table lookups of the 60 XOR bits packed as 8 bytes (``T[j, byte]`` =
XOR of the G rows ``8j .. 8j+7`` the byte selects); the hard decoder gets the syndrome the same way.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Gray bits ``2A + B`` of a PAM4 level (120.5.7.1: 0->00, 1->01, 2->11, 3->10)
GRAY_BITS = np.array([0, 1, 3, 2], dtype=np.uint8)


@njit(cache=True)
def _xor_bytes(w, i):
    """The 60 pair-XOR bits of block ``i`` of ``w`` packed as 8 bytes (byte j = m_xor 8j..8j+7)."""
    out = np.zeros(8, np.int64)
    for j in range(8):
        v = 0
        hi = 8 if j < 7 else 4
        for b in range(hi):
            k = 8 * j + b
            v |= ((w[i, 2 * k] ^ w[i, 2 * k + 1]) & 1) << b
        out[j] = v
    return out


@njit(cache=True)
def encode(msgs, T, out):
    """``msgs uint8[N, 120]`` -> ``out uint8[N, 128]`` (message then 8 parity bits, p0 first)."""
    for i in range(msgs.shape[0]):
        p = 0
        for j in range(8):
            v = 0
            hi = 8 if j < 7 else 4
            for b in range(hi):
                k = 8 * j + b
                v |= ((msgs[i, 2 * k] ^ msgs[i, 2 * k + 1]) & 1) << b
            p ^= T[j, v]
        for b in range(120):
            out[i, b] = msgs[i, b]
        for b in range(8):
            out[i, 120 + b] = (p >> b) & 1
    return out


@njit(cache=True)
def syndromes(words, T, out):
    """Syndrome (8-bit, bit b = parity check b) of every block of ``words uint8[N, 128]``."""
    for i in range(words.shape[0]):
        s = 0
        for j in range(8):
            v = 0
            hi = 8 if j < 7 else 4
            for b in range(hi):
                k = 8 * j + b
                v |= ((words[i, 2 * k] ^ words[i, 2 * k + 1]) & 1) << b
            s ^= T[j, v]
        for b in range(8):
            s ^= (words[i, 120 + b] & 1) << b
        out[i] = s
    return out


@njit(cache=True)
def decode_hard_bits(words, T, pos_of, out, status, where):
    """Hard-decision decoding of bit blocks (no sample): single-error correction in the 68-position
    code.  A message-symbol error (position k) is undone by flipping B (bit 2k+1) -- exact for an
    outer received level (00 or 10 has one neighbour), a documented choice for the inner ones
    (ambiguous without the sample).  ``status``: 0 clean, 1 corrected, 2 detected uncorrectable;
    ``where``: corrected position (0..67) or -1."""
    for i in range(words.shape[0]):
        s = 0
        for j in range(8):
            v = 0
            hi = 8 if j < 7 else 4
            for b in range(hi):
                k = 8 * j + b
                v |= ((words[i, 2 * k] ^ words[i, 2 * k + 1]) & 1) << b
            s ^= T[j, v]
        for b in range(8):
            s ^= (words[i, 120 + b] & 1) << b
        for b in range(128):
            out[i, b] = words[i, b]
        where[i] = -1
        if s == 0:
            status[i] = 0
            continue
        p = pos_of[s]
        if p < 0:
            status[i] = 2
            continue
        status[i] = 1
        where[i] = p
        if p < 60:
            out[i, 2 * p + 1] ^= 1
        else:
            out[i, 120 + (p - 60)] ^= 1
    return out


@njit(cache=True)
def slice_pam4(y, levels, bits):
    """Hard PAM4 decisions of samples ``y float64[N, 64]`` (thresholds -2, 0, 2): levels and bits."""
    for i in range(y.shape[0]):
        for k in range(y.shape[1]):
            v = y[i, k]
            lv = 0 if v < -2.0 else (1 if v < 0.0 else (2 if v < 2.0 else 3))
            levels[i, k] = lv
            g = GRAY_BITS[lv]
            bits[i, 2 * k] = (g >> 1) & 1
            bits[i, 2 * k + 1] = g & 1
    return levels


# Long on purpose: one compiled pass kept in one function (a split would cost a call or a scratch array per
# iteration of the hot loop).
@njit(cache=True)
def decode_soft(y, cols, pos_of, n_lrp, qstep, out, status, n_flips, sent):
    """Chase-2 decoding of blocks of 64 PAM4 samples ``y float64[N, 64]`` (level units, thresholds
    -2, 0, +2).

    Reliabilities: message symbol k (position k of the 68-position code, its pair XOR) = distance
    of the sample to the nearest threshold (any neighbour error flips the XOR); a parity symbol's
    bit A = ``|y|`` (threshold 0), bit B = ``||y| - 2|`` (thresholds +-2).  With ``qstep > 0`` they
    are quantised to ``floor(r / qstep)`` (the receivers' few-bit reliabilities).  The ``n_lrp``
    least reliable positions give ``2^n_lrp`` test patterns; each is flipped into the hard word and
    decoded by single-error correction; the candidate with the smallest sum of reliabilities of
    the positions where it differs from the hard decision wins (ties: the first pattern, i.e. the
    fewest test flips).  No valid candidate: hard decision out, ``status`` 2.  A message position
    flips A when the nearest threshold is 0 (``|y| < 1``), else B: the symbol moves to the
    neighbour on the sample's side.  ``n_lrp = 0`` is hard decision with that exact symbol rule.
    ``status``: 0 no change, 1 corrected, 2 no candidate; ``n_flips``: code positions changed.
    ``sent`` (``uint8[N, 128]`` or empty ``[0, 128]``): when given, the syndrome is taken of the
    hard decision XOR ``sent`` (the error pattern alone: the link's data-free path, where the sent
    levels need not form a codeword).
    """
    use_sent = sent.shape[0] > 0
    N = y.shape[0]
    rel = np.empty(68, np.float64)
    lrp = np.empty(8, np.int64)
    for i in range(N):
        # pass 1: slicer bits straight into the output, and the syndrome of the error pattern
        # branch-free: random PAM4 levels would mispredict every comparison
        s0 = 0
        for k in range(64):
            v = y[i, k]
            a = np.int64(v >= 0.0)  # Gray A (MSB): levels 2, 3
            b = np.int64(v >= -2.0) - np.int64(v >= 2.0)  # Gray B: levels 1, 2
            out[i, 2 * k] = a
            out[i, 2 * k + 1] = b
            if use_sent:
                a ^= sent[i, 2 * k]
                b ^= sent[i, 2 * k + 1]
            if k < 60:
                s0 ^= cols[k] * (a ^ b)
            else:
                s0 ^= cols[60 + 2 * (k - 60)] * a
                s0 ^= cols[61 + 2 * (k - 60)] * b
        if s0 == 0:
            # the hard decision is a codeword: metric 0, chosen by every test pattern set
            status[i] = 0
            n_flips[i] = 0
            continue
        # pass 2 (blocks with a nonzero syndrome only): reliabilities, n_lrp least reliable
        m = 0
        for k in range(64):
            av = abs(y[i, k])
            ra = av
            rb = abs(av - 2.0)
            if qstep > 0.0:
                ra = np.floor(ra / qstep)
                rb = np.floor(rb / qstep)
            if k < 60:
                rel[k] = ra if ra < rb else rb
                first = k
                last = k
            else:
                first = 60 + 2 * (k - 60)
                last = first + 1
                rel[first] = ra
                rel[last] = rb
            for p in range(first, last + 1):
                if n_lrp == 0:
                    break
                r = rel[p]
                if m < n_lrp:
                    q = m
                    m += 1
                elif r < rel[lrp[m - 1]]:
                    q = m - 1
                else:
                    continue
                while q > 0 and rel[lrp[q - 1]] > r:
                    lrp[q] = lrp[q - 1]
                    q -= 1
                lrp[q] = p
        best = -1.0
        best_mask = -1
        best_extra = -1
        for mask in range(1 << m):
            s = s0
            metric = 0.0
            for t in range(m):
                if (mask >> t) & 1:
                    s ^= cols[lrp[t]]
                    metric += rel[lrp[t]]
            extra = -1
            if s != 0:
                extra = pos_of[s]
                if extra < 0:
                    continue
                inpat = False
                for t in range(m):
                    if (mask >> t) & 1 and lrp[t] == extra:
                        inpat = True
                if inpat:
                    metric -= rel[extra]
                else:
                    metric += rel[extra]
            if best_mask < 0 or metric < best:
                best = metric
                best_mask = mask
                best_extra = extra
        if best_mask < 0:
            status[i] = 2
            n_flips[i] = 0
            continue
        nf = 0
        for t in range(m + 1):
            if t < m:
                if not (best_mask >> t) & 1:
                    continue
                p = lrp[t]
            else:
                p = best_extra
                if p < 0:
                    continue
            nf += 1
            if p < 60:
                if abs(y[i, p]) < 1.0:
                    out[i, 2 * p] ^= 1
                else:
                    out[i, 2 * p + 1] ^= 1
            else:
                out[i, 120 + (p - 60)] ^= 1
        # a pattern position also hit by the correction cancels: count net changes
        if best_extra >= 0:
            for t in range(m):
                if (best_mask >> t) & 1 and lrp[t] == best_extra:
                    nf -= 2
        n_flips[i] = nf
        status[i] = 1 if nf > 0 else 0
    return out
