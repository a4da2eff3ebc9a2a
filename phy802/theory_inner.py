"""Closed forms for the Clause 177 inner code and its concatenation with KP4.

Model (what the Monte Carlo of :mod:`phy802.link.concat` is checked against):

* **Inner code over a binary symmetric channel.** The decoder of :mod:`phy802.fec.inner` works on
  68 binary positions (60 pair-XORs of the message symbols, 8 parity bits).  On a BSC each
  position flips independently (``p_msg`` for the 60, ``p_par`` for the 8).  Single-error
  correction fails iff 2 or more positions flip:
  ``P_fail = 1 - (1-p)^68 - 68 p (1-p)^67`` (equal ``p``; :func:`bsc_block_failure`).
* **What a failed block hands the outer code.** Every pattern of weight <= ``max_weight``
  (default 4) is enumerated with its exact probability: the decoder's action (syndrome 0: nothing;
  a column: that position toggled, which for weight >= 3 may add a wrong position; otherwise
  detected, passed as received), then the wrong RS symbols it leaves (message position k lies in
  RS symbol ``k // 5`` of the block: 120 bits = 12 RS symbols, 5 PAM4 symbols each) and which
  KP4 codeword each belongs to.  Heavier patterns (weight 5..8, mass ~``C(68,5) p^5``) take
  their conditional law from 4000 fixed-seed random patterns per (weight, message/parity split)
  through the same decoder rule (deterministic); the mass beyond weight 8 is charged as a worst
  case (every RS symbol of the block wrong).
* **Concatenated FER by generating functions** (the approach of Sukmadji & Kschischang,
  arXiv 2402.09364, for RS + BCH): a KP4 codeword takes ``m`` of its symbols from each inner
  block it crosses (``m = 3`` with the X = 4 symbol interleave spread over the lanes, ``m = 12``
  when a lane carries one codeword, :mod:`phy802.link.concat`); with ``Q(z)`` the PGF of its wrong
  symbols per block, the codeword's PGF is ``Q(z)^(544 // m)`` times a remainder term (the
  ``544 mod m`` symbols of a partial block, taken as independent with the per-symbol marginal,
  [I] approximation), and ``FER = P(W > 15)``, summed from the tail (no cancellation).
* **Hops.** ``segmented``: every hop terminates KP4 (decode + re-encode), ``FER = 1 - (1 - F)^H``;
  ``end_to_end``: the inner code is terminated per hop but KP4 only at the end, so the wrong symbols
  of H independent hops add: PGF ``P(z)^H`` (coincident symbols of two hops counted twice: an
  upper bound, negligible at these rates).
* **PAM4 AWGN -> BSC** (:func:`awgn_position_probs`): ``p_msg`` = probability of an odd level
  jump (flips the pair XOR), ``p_par`` = the mean of the Gray A and B bit error probabilities.
  Not modelled [I]: even (2-level) jumps, which leave the XOR alone and hit the RS symbol unseen
  (~Q(3 / sigma)), and corrections towards the wrong neighbour (noise beyond 2 level spacings).
* **Erasure-aided KP4** (``concat_fer(..., erasure=True)``): blocks the inner decoder flags are
  erased (their m symbols of each codeword), the others hand over their wrong symbols; a
  bounded-distance errors-and-erasures decoder corrects iff ``2 e + v <= 30`` [C], so the FER is the
  tail beyond 30 of the PGF of the per-block cost ``2 e + v`` (:func:`erasure_cost_pgf`).
* **Soft decision** has no closed form here: :func:`inner_law_monte_carlo` measures the same
  per-block law with the Chase-2 kernel, and the generating function does the rest (semi-analytic).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from phy802 import theory
from phy802.clause119 import KP4_N as N_KP4
from phy802.clause119 import KP4_T as T_KP4
from phy802.fec import inner as _inner

__all__ = [
    "InnerLaw",
    "bsc_block_failure",
    "awgn_position_probs",
    "inner_law_bsc",
    "inner_law_monte_carlo",
    "codeword_error_pgf",
    "concat_fer",
    "erasure_cost_pgf",
    "layout_pieces",
    "layout_fer",
    "concat_point",
]

N_POS = 68
RS_PER_BLOCK = 12  # 120 message bits = 12 ten-bit RS symbols


def bsc_block_failure(p: float) -> float:
    """``P(2 or more of the 68 positions flip)`` on a BSC(p): the hard decoder's failure probability."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    from scipy import stats

    return float(stats.binom.sf(1, N_POS, p))  # P(W >= 2), no cancellation for small p


def awgn_position_probs(snr_db: float) -> tuple[float, float]:
    """``(p_msg, p_par)`` of the BSC seen by the inner decoder on PAM4 AWGN (module docstring)."""
    T = theory.pam4_transition_matrix(float(snr_db))
    gray = np.array([0, 1, 3, 2])
    s, r = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    odd = (np.abs(s - r) % 2 == 1)
    p_msg = float((T * odd).sum() / 4.0)
    d = gray[s] ^ gray[r]
    pa = float((T * ((d >> 1) & 1)).sum() / 4.0)
    pb = float((T * (d & 1)).sum() / 4.0)
    return p_msg, 0.5 * (pa + pb)


@functools.lru_cache(maxsize=4)
def _patterns(max_weight: int, m: int):
    """Every position pattern of weight 1..max_weight with the decoder's outcome (p-independent):
    ``(weights, n_msg_pos, counts[P, n_classes], failed, bit_errors, detected)``."""
    out_w, out_msg, out_cnt, out_fail, out_bits, out_det, out_rsm = [], [], [], [], [], [], []
    for w in range(1, max_weight + 1):
        comb = np.array(list(itertools.combinations(range(N_POS), w)), dtype=np.int64)
        cnt, fail, bits, det, rsm = _outcome(comb, m)
        out_det.append(det)
        out_rsm.append(rsm)
        out_w.append(np.full(comb.shape[0], w))
        out_msg.append((comb < 60).sum(1))
        out_cnt.append(cnt)
        out_fail.append(fail)
        out_bits.append(bits)
    return (np.concatenate(out_w), np.concatenate(out_msg), np.concatenate(out_cnt),
            np.concatenate(out_fail), np.concatenate(out_bits), np.concatenate(out_det), np.concatenate(out_rsm))


def _outcome(comb: NDArray[np.int64], m: int):
    """Decoder outcome of position patterns ``comb[P, w]``: (class counts [P, 12 // m], failed, bits,
    detected = flagged uncorrectable by the decoder)."""
    cols, pos_of = _inner._COLS, _inner._POS_OF
    n_classes = RS_PER_BLOCK // m
    cls_mask = [sum(1 << r for r in range(RS_PER_BLOCK) if r % n_classes == x) for x in range(n_classes)]
    syn = np.bitwise_xor.reduce(cols[comb], axis=1)
    extra = np.where(syn == 0, -1, pos_of[syn])
    in_pat = (comb == extra[:, None]) & (extra[:, None] >= 0)  # output = pattern XOR {extra}
    posm = np.where(in_pat, -1, comb)
    add = (extra >= 0) & ~in_pat.any(1)
    allpos = np.concatenate([posm, np.where(add, extra, -1)[:, None]], axis=1)
    msg = (allpos >= 0) & (allpos < 60)
    rs_mask = np.bitwise_or.reduce(np.where(msg, 1 << np.where(msg, allpos // 5, 0), 0), axis=1)
    cnt = np.stack([_POPCOUNT12[rs_mask & cm] for cm in cls_mask], axis=1)
    return cnt, rs_mask != 0, msg.sum(1), (syn != 0) & (extra < 0), rs_mask


_POPCOUNT12 = np.array([bin(v).count("1") for v in range(1 << RS_PER_BLOCK)], dtype=np.int64)
_HEAVY_SAMPLES = 4000


@functools.lru_cache(maxsize=64)
def _heavy(m: int, w: int, a: int):
    """Conditional law of a weight-``w`` pattern with ``a`` message positions (fixed-seed sample):
    ``(q[n_classes, m + 1], P(fail), mean bit errors, cost[n_classes, 2m + 1])``."""
    rng = np.random.default_rng(1000 * w + a)
    msgp = np.argsort(rng.random((_HEAVY_SAMPLES, 60)), axis=1)[:, :a]
    parp = 60 + np.argsort(rng.random((_HEAVY_SAMPLES, 8)), axis=1)[:, : w - a]
    cnt, fail, bits, det, rsm = _outcome(np.concatenate([msgp, parp], axis=1).astype(np.int64), m)
    outcome = np.bincount(rsm * 2 + det, minlength=_N_OUT) / _HEAVY_SAMPLES
    q = np.stack([np.bincount(cnt[:, x], minlength=m + 1)[: m + 1] / _HEAVY_SAMPLES for x in range(cnt.shape[1])])
    cost = _erasure_cost(cnt, det, np.full(cnt.shape[0], 1.0 / _HEAVY_SAMPLES), m)
    return q, float(fail.mean()), float(bits.mean()), cost, outcome


_N_OUT = 2 << RS_PER_BLOCK  # (12-bit mask of wrong RS symbols) * 2 + flagged


def _erasure_cost(cnt, det, prob, m: int):
    """``cost[x, c]``: probability that class ``x`` pays ``c = 2 e + v`` in an errors-and-erasures
    decoder when every block the inner decoder flags is erased (its m symbols: v = m) and the others
    hand over their wrong symbols as errors (cost 2 each)."""
    n_classes = cnt.shape[1]
    out = np.zeros((n_classes, 2 * m + 1))
    for x in range(n_classes):
        c = np.where(det, m, 2 * cnt[:, x])
        out[x] = np.bincount(c, weights=prob, minlength=2 * m + 1)[: 2 * m + 1]
    return out


@dataclass(frozen=True)
class InnerLaw:
    """What one inner block hands the outer code.

    ``q[x, j]``: probability that codeword class ``x`` (of ``12 // m``) gets ``j`` wrong RS symbols
    (j = 0..m) from one block; ``p_fail``: a block's message differs after decoding; ``ber_out``:
    message bit error ratio after the inner decoder (= the KP4 input BER); ``ser_rs``: RS symbol
    error probability per symbol; ``remainder``: probability mass not enumerated (charged as all
    symbols wrong); ``m``: symbols per codeword per block; ``cost[x, c]``: the law of
    ``c = 2 e + v`` per block when flagged blocks are erased (erasure-aided KP4); ``outcome[2 M + f]``:
    probability of the block outcome "RS symbols ``M`` (12-bit mask) wrong, flagged ``f``", from
    which any codeword layout's pieces follow (:func:`concat_fer` ``layout=``).
    """

    q: NDArray[np.float64]
    p_fail: float
    ber_out: float
    ser_rs: float
    remainder: float
    m: int
    cost: NDArray[np.float64] | None = None
    outcome: NDArray[np.float64] | None = None


def inner_law_bsc(p_msg: float, p_par: float | None = None, *, m: int = 3, max_weight: int = 4) -> InnerLaw:
    """The exact per-block law (to weight ``max_weight``) of the hard decoder on a BSC (module docstring)."""
    if m not in (3, 6, 12):
        raise ValueError(f"m (RS symbols per codeword per inner block) must be 3, 6 or 12, got {m!r}")
    if not isinstance(max_weight, int) or not 2 <= max_weight <= 5:
        raise ValueError(f"max_weight must be an int in 2..5, got {max_weight!r}")
    p_par = p_msg if p_par is None else p_par
    for name, v in (("p_msg", p_msg), ("p_par", p_par)):
        if not 0.0 <= v < 0.5:
            raise ValueError(f"{name} must be in [0, 0.5), got {v!r}")
    w, nmsg, cnt, fail, bits, det, rsm = _patterns(max_weight, m)
    npar = w - nmsg
    log0 = 60 * math.log1p(-p_msg) + 8 * math.log1p(-p_par)
    lo_m = math.log(p_msg / (1 - p_msg)) if p_msg > 0 else -math.inf
    lo_p = math.log(p_par / (1 - p_par)) if p_par > 0 else -math.inf
    with np.errstate(invalid="ignore"):
        lw = log0 + np.where(nmsg > 0, nmsg * lo_m, 0.0) + np.where(npar > 0, npar * lo_p, 0.0)
    prob = np.exp(lw)
    n_classes = RS_PER_BLOCK // m
    q = np.zeros((n_classes, m + 1))
    for x in range(n_classes):
        q[x] = np.bincount(cnt[:, x], weights=prob, minlength=m + 1)[: m + 1]
    p_fail = float(prob[fail].sum())
    nbits = float((prob * bits).sum())
    cost = _erasure_cost(cnt, det, prob, m)
    outcome = np.bincount(rsm * 2 + det, weights=prob, minlength=_N_OUT)
    outcome[0] += math.exp(log0)
    covered = math.exp(log0) + float(prob.sum())
    for wt in range(max_weight + 1, 9):  # heavier patterns: sampled conditional laws
        for a in range(max(0, wt - 8), wt + 1):
            pw = (math.comb(60, a) * p_msg ** a * (1 - p_msg) ** (60 - a)
                  * math.comb(8, wt - a) * p_par ** (wt - a) * (1 - p_par) ** (8 - wt + a))
            if pw == 0.0:
                continue
            hq, hf, hb, hc, ho = _heavy(m, wt, a)
            q += pw * hq
            cost += pw * hc
            outcome += pw * ho
            p_fail += pw * hf
            nbits += pw * hb
            covered += pw
    rem = max(0.0, 1.0 - covered)
    q[:, m] += rem
    q[:, 0] = 1.0 - q[:, 1:].sum(1)
    cost[:, 2 * m] += rem
    cost[:, 0] = 1.0 - cost[:, 1:].sum(1)
    outcome[((1 << RS_PER_BLOCK) - 1) * 2] += rem  # worst case: every symbol wrong, not flagged
    ser = float(sum((q[x] * np.arange(m + 1)).sum() for x in range(n_classes)) / RS_PER_BLOCK)
    return InnerLaw(q, p_fail + rem, (nbits + rem * 60) / 120.0, ser, rem, m, cost, outcome)


def inner_law_monte_carlo(snr_db: float, n_blocks: int, seed, *, n_lrp: int = 2, m: int = 3) -> InnerLaw:
    """The per-block law of the Chase-2 decoder (``n_lrp``; 0 = hard with the sample's side) on PAM4
    AWGN, measured on ``n_blocks`` random blocks (empirical frequencies; no enumeration remainder)."""
    rng = np.random.default_rng(seed)
    sigma = float(theory.sigma_from_snr_db(snr_db))
    n_classes = RS_PER_BLOCK // m
    counts = np.zeros((n_classes, m + 1))
    cost = np.zeros((n_classes, 2 * m + 1))
    outcome = np.zeros(_N_OUT)
    fails = bits = 0
    done = 0
    while done < n_blocks:
        B = min(200_000, n_blocks - done)
        c = _inner.encode(rng.integers(0, 2, (B, 120), dtype=np.uint8))
        d, st, _ = _inner.decode_soft(_inner.pam4_samples(c, sigma, rng), n_lrp)
        e = (d[:, :120] != c[:, :120])
        bits += int(e.sum())
        rs = e.reshape(B, RS_PER_BLOCK, 10).any(2)
        fails += int(rs.any(1).sum())
        cnt = np.stack([rs[:, x::n_classes].sum(1) for x in range(n_classes)], axis=1)
        for x in range(n_classes):
            counts[x] += np.bincount(cnt[:, x], minlength=m + 1)[: m + 1]
        cost += _erasure_cost(cnt, st == 2, np.ones(B), m)
        rsm = (rs.astype(np.int64) << np.arange(RS_PER_BLOCK)).sum(1)
        outcome += np.bincount(rsm * 2 + (st == 2), minlength=_N_OUT)
        done += B
    q = counts / n_blocks
    ser = float(sum((q[x] * np.arange(m + 1)).sum() for x in range(n_classes)) / RS_PER_BLOCK)
    return InnerLaw(q, fails / n_blocks, bits / (120.0 * n_blocks), ser, 0.0, m, cost / n_blocks,
                    outcome / n_blocks)


def _polypow(p: NDArray[np.float64], e: int, cap: int) -> NDArray[np.float64]:
    out = np.array([1.0])
    base = p.copy()
    while e:
        if e & 1:
            out = np.convolve(out, base)[:cap]
        e >>= 1
        if e:
            base = np.convolve(base, base)[:cap]
    return out


def codeword_error_pgf(law: InnerLaw, x: int = 0, n: int = N_KP4) -> NDArray[np.float64]:
    """PGF coefficients ``P(W = w)`` (w = 0..n) of the wrong symbols of one KP4 codeword of class ``x``."""
    m = law.m
    full, rem = divmod(n, m)
    pgf = _polypow(law.q[x], full, n + 1)
    if rem:
        s = float((law.q[x] * np.arange(m + 1)).sum() / m)
        tail = np.array([math.comb(rem, j) * s ** j * (1 - s) ** (rem - j) for j in range(rem + 1)])
        pgf = np.convolve(pgf, tail)[: n + 1]
    return pgf


def erasure_cost_pgf(law: InnerLaw, x: int = 0, n: int = N_KP4) -> NDArray[np.float64]:
    """PGF of ``2 e + v`` of one KP4 codeword of class ``x`` with flagged inner blocks erased (the
    ``n mod m`` remainder symbols as independent errors with the per-symbol marginal)."""
    if law.cost is None:
        raise ValueError("this InnerLaw carries no erasure law")
    m = law.m
    full, rem = divmod(n, m)
    cap = 2 * n + 1
    pgf = _polypow(law.cost[x], full, cap)
    if rem:
        s = float((law.q[x] * np.arange(m + 1)).sum() / m)
        tail = np.zeros(2 * rem + 1)
        for j in range(rem + 1):
            tail[2 * j] = math.comb(rem, j) * s ** j * (1 - s) ** (rem - j)
        pgf = np.convolve(pgf, tail)[:cap]
    return pgf


@functools.lru_cache(maxsize=16)
def layout_pieces(interleave: int = 4, n_lanes: int = 4, lane_rule: str = "interleaved") -> tuple:
    """The exact layout of :mod:`phy802.link.concat`: for each codeword of a period of 3 interleave
    groups (block boundaries repeat every 3 groups), the masks (12-bit, RS symbol r of the block)
    of its pieces, one per inner block it touches, as ``((mask, count), ...)`` per codeword."""
    from phy802.link.concat import _lane_index

    idx = _lane_index(interleave, n_lanes, lane_rule)
    L, S = idx.shape
    G = 3
    out = []
    for g in range(G):
        for x in range(interleave):
            pieces: dict = {}
            for lane in range(L):
                j = np.flatnonzero(idx[lane] % interleave == x)
                P = g * S + j
                for blk, r in zip(P // RS_PER_BLOCK, P % RS_PER_BLOCK):
                    pieces[(lane, int(blk))] = pieces.get((lane, int(blk)), 0) | (1 << int(r))
            masks, counts = np.unique(np.array(list(pieces.values())), return_counts=True)
            out.append(tuple(zip(masks.tolist(), counts.tolist())))
    return tuple(out)


def _piece_pgfs(outcome: NDArray[np.float64], mask: int, erasure: bool) -> NDArray[np.float64]:
    keys = np.arange(_N_OUT)
    j = _POPCOUNT12[(keys >> 1) & mask]
    if erasure:
        c = np.where(keys & 1, _POPCOUNT12[mask], 2 * j)
        size = 2 * _POPCOUNT12[mask] + 1
    else:
        c = j
        size = _POPCOUNT12[mask] + 1
    return np.bincount(c, weights=outcome, minlength=size)[:size]


def layout_fer(law: InnerLaw, layout: tuple, *, hops: int = 1, outer: str = "segmented", t: int = T_KP4,
               erasure: bool = False) -> float:
    """:func:`concat_fer` on the exact piece layout of :func:`layout_pieces` (mean over its codewords)."""
    if law.outcome is None:
        raise ValueError("this InnerLaw carries no block outcome law")
    if erasure and hops > 1 and outer != "segmented":
        raise ValueError("erasure-aided decoding is modelled for one hop or segmented hops")
    thr = 2 * t if erasure else t
    cache: dict = {}
    tot = 0.0
    for pieces in layout:
        pgf = np.array([1.0])
        for mask, count in pieces:
            key = (mask, count)
            if key not in cache:
                cache[key] = _polypow(_piece_pgfs(law.outcome, mask, erasure), count, 2 * N_KP4 + 1)
            pgf = np.convolve(pgf, cache[key])[: 2 * N_KP4 + 1]
        if erasure or outer == "segmented" or hops == 1:
            f = float(pgf[thr + 1:].sum())
            f = -math.expm1(hops * math.log1p(-min(f, 1.0 - 1e-300))) if hops > 1 else f
        else:
            f = float(_polypow(pgf, hops, hops * N_KP4 + 1)[thr + 1:].sum())
        tot += f
    return tot / len(layout)


def concat_fer(law: InnerLaw, *, hops: int = 1, outer: str = "segmented", t: int = T_KP4,
               erasure: bool = False, layout: tuple | None = None) -> float:
    """KP4 codeword error ratio after the inner code (module docstring), averaged over the classes.

    ``erasure``: erasure-aided KP4 -- every block the inner decoder flags is erased, and a
    bounded-distance errors-and-erasures decoder succeeds iff ``2 e + v <= 2 t`` (= 30); one hop,
    or segmented hops (erasures are per hop).  ``layout`` (:func:`layout_pieces`): the exact pieces
    of every codeword instead of the ``544 // m`` blocks + remainder approximation."""
    if layout is not None:
        return layout_fer(law, layout, hops=hops, outer=outer, t=t, erasure=erasure)
    if erasure:
        if hops > 1 and outer != "segmented":
            raise ValueError("erasure-aided decoding is modelled for one hop or segmented hops")
        f = sum(float(erasure_cost_pgf(law, x)[2 * t + 1:].sum()) for x in range(law.q.shape[0])) / law.q.shape[0]
        return -math.expm1(hops * math.log1p(-min(f, 1.0 - 1e-300))) if hops > 1 else f
    if outer not in ("segmented", "end_to_end"):
        raise ValueError(f"outer must be 'segmented' or 'end_to_end', got {outer!r}")
    if not isinstance(hops, int) or hops < 1:
        raise ValueError(f"hops must be an int >= 1, got {hops!r}")
    out = 0.0
    n_classes = law.q.shape[0]
    for x in range(n_classes):
        pgf = codeword_error_pgf(law, x)
        if outer == "segmented" or hops == 1:
            f = float(pgf[t + 1:].sum())
            f = -math.expm1(hops * math.log1p(-min(f, 1.0 - 1e-300))) if hops > 1 else f
        else:
            f = float(_polypow(pgf, hops, hops * N_KP4 + 1)[t + 1:].sum())
        out += f / n_classes
    return out


def concat_point(snr_db: float, *, hops: int = 1, outer: str = "segmented", m: int = 3) -> dict[str, float]:
    """Closed-form row for hard inner decoding on PAM4 AWGN at ``snr_db``: line BER, inner block
    failure, KP4-input BER and symbol error ratio, concatenated FER; plus KP4 alone (no inner code)
    on the same line."""
    p_msg, p_par = awgn_position_probs(snr_db)
    law = inner_law_bsc(p_msg, p_par, m=m)
    line_ber = float(theory.pam4_ber(snr_db))
    return {"snr_db": float(snr_db), "line_ber": line_ber, "p_msg": p_msg, "inner_block_failure": law.p_fail,
            "kp4_input_ber": law.ber_out, "kp4_input_ser": law.ser_rs,
            "fer": concat_fer(law, hops=hops, outer=outer),
            "fer_kp4_alone": float(theory.rs_codeword_error_ratio(theory.symbol_error_prob(line_ber)))}
