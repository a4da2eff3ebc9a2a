"""The fast trace generator :class:`FastGenerator`.

:class:`FastGenerator` samples only the line bit errors (geometric skipping with exact
exponential gaps, independent errors at the pre-FEC BER), groups them per RS(544,514) codeword
of each pair, and decides each codeword by the mode: a bounded-distance decoder always corrects
<= t = 15 symbol errors, so only codewords with more are decoded, by linearity as the error
pattern alone (``phy802.fec.decode`` on the zero codeword + errors) to tell failure from the rare
miscorrection.  Surviving message-bit errors are then pushed through the 1 + x^39 + x^58
descrambler's error multiplication (n, n+39, n+58, XOR) and mapped to payload-stream offsets.
"""

from __future__ import annotations

import math

import numpy as np

from phy802._rng import as_generator
from phy802.clause119 import KP4_T as T_KP4

from . import _gen_kernels as K
from . import _kernels as TK
from ..framing import (
    BLOCK_BITS,
    BLOCK_PAYLOAD_BITS,
    PAIR_LINE_BITS,
    PAIR_MESSAGE_BITS,
    data_blocks_before,
)
from ..source import FLAG_MISCORRECTED, FLAG_UNDETECTED
from ._base import _Base, _lane_generators
from .config import HIST_BINS, K_272, N_272, T_272, EncodedChunk, GenChunk, GeneratorConfig

__all__ = [
    "FastGenerator",
]


class FastGenerator(_Base):
    """Event-driven generator: cost proportional to the number of line errors.

    Parameters
    ----------
    cfg : :class:`GeneratorConfig`.
    seed : int, SeedSequence or Generator (explicit; no global RNG).
    start_pair : first codeword pair (default 0; pair 0 carries an AM group).

    The output depends only on the seed and the pair range, never on how pairs are chunked.
    """


    _enc_bytes_per_slot = 4.0  # record bytes reserved per flip slot (tests shrink it to force the retry)

    def __init__(self, cfg: GeneratorConfig, seed, *, start_pair: int = 0) -> None:
        super().__init__(cfg, start_pair)
        self._rng = as_generator(seed)
        self._last = self.pair * PAIR_LINE_BITS - 1
        ber = float(cfg.ber)
        self._scale = (1.0 / -math.log1p(-ber)) if ber > 0 else math.inf
        self._nxt: int | None = None  # next error position already drawn (pair-space)
        self.fused = True  # bypass mode: one fused kernel (False: the general path, for tests)
        if cfg.per_lane and ber > 0:
            self._lane_rngs = _lane_generators(self._rng, self.geom.n_lanes)
            rowbits = self.geom.rows_per_pair * 10
            self._lane_state = []
            for L, r in enumerate(self._lane_rngs):
                p = cfg.lane_pe(L) if cfg.burst_pb is not None else cfg.lane_ber(L)
                sc = 1.0 / -math.log1p(-p) if p > 0 else math.inf
                # each lane starts in G at start_pair: its first error after Geometric(p) good bits
                first = self.pair * rowbits + int(r.standard_exponential() * sc) if p > 0 else 2**62
                self._lane_state.append((first, -1))
        self._decoder = {"none": 0, "correct": 1, "detect": 2}[self.mode.decoder]

    def _lane_positions(self, P1: int) -> np.ndarray:
        """Pair-space positions of the per-lane errors (bursts or weighted BSC) up to pair ``P1``."""
        geom, cfg = self.geom, self.cfg
        rowbits = geom.rows_per_pair * 10
        J = geom.n_lanes // 2
        end = P1 * rowbits
        pb = float(cfg.burst_pb) if cfg.burst_pb is not None else None
        pb_scale = 1.0 / -math.log(pb) if pb else 0.0
        parts = []
        for L in range(geom.n_lanes):
            rng = self._lane_rngs[L]
            nxt, run_left = self._lane_state[L]
            p = cfg.lane_pe(L) if pb is not None else cfg.lane_ber(L)
            if p <= 0:
                continue
            scale = 1.0 / -math.log1p(-p)
            expect = max(0.0, (end - nxt) * cfg.lane_ber(L))
            cap = int(expect + 8 * math.sqrt(expect) + 64)
            while True:
                state = rng.bit_generator.state
                out = np.empty(cap, np.int64)
                if pb is not None:
                    n, nxt2, run2 = K.lane_bursts(rng, scale, pb_scale, np.int64(nxt), np.int64(run_left),
                                                  np.int64(end), out)
                else:
                    n, nxt2 = K.sample_positions(rng, scale, np.int64(nxt), np.int64(end), out)
                    run2 = -1
                    if n == cap and nxt2 < end:
                        n = -1
                if n >= 0:
                    break
                rng.bit_generator.state = state
                cap *= 2
            self._lane_state[L] = (int(nxt2), int(run2))
            q = out[:n]
            P, rem = np.divmod(q, rowbits)
            k, b = np.divmod(rem, 10)
            t = J * k + (L >> 1)
            c = (L & 1) ^ (k & 1)
            parts.append(P * PAIR_LINE_BITS + 20 * t + 10 * c + b)
        pos = np.concatenate(parts) if parts else np.empty(0, np.int64)
        pos.sort()
        return pos

    def _positions(self, end: int) -> np.ndarray:
        """Line-error positions below ``end`` (pair-space), drawn in Numba from the seeded stream."""
        if self._scale == math.inf:
            return np.empty(0, np.int64)
        if self.cfg.per_lane:
            return self._lane_positions(end // PAIR_LINE_BITS)
        if self._nxt is None:
            # the first error: position start - 1 + Geometric(p)
            self._nxt = self._last + 1 + int(self._rng.standard_exponential() * self._scale)
        expect = (end - self._nxt) / self._scale if end > self._nxt else 0.0
        parts = []
        cap = int(expect + 6 * math.sqrt(expect) + 64)
        while True:
            out = np.empty(cap, np.int64)
            n, nxt = K.sample_positions(self._rng, self._scale, np.int64(self._nxt), np.int64(end), out)
            self._nxt = int(nxt)
            parts.append(out[:n])
            if n < cap:
                break
            cap = max(cap, 1024)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def next_chunk(self, n_pairs: int) -> GenChunk:
        """Simulate the next ``n_pairs`` codeword pairs."""
        n_pairs = int(n_pairs)
        if n_pairs <= 0:
            raise ValueError(f"n_pairs must be > 0, got {n_pairs}")
        P0, P1 = self.pair, self.pair + n_pairs
        if self.cfg.code == "rs272":
            return self._process_rs272(P0, P1, self._rs272_positions(self._positions(P1 * PAIR_LINE_BITS)))
        if self._fused_bypass():
            return self._bypass_chunk(P0, P1)[0]
        return self._process(P0, P1, self._positions(P1 * PAIR_LINE_BITS))

    def _rs272_positions(self, pos: np.ndarray) -> np.ndarray:
        """KP4-layout pair-space positions (lane L, row k, bit b of trace pair P) -> the rs272
        symbol on the same lane, row and bit (module docstring), sorted."""
        J = self.geom.n_lanes // 2
        R = self.geom.rows_per_pair // 2  # rows per rs272 pair: 34 (400G) / 68 (200G)
        P, u = np.divmod(np.asarray(pos, np.int64), PAIR_LINE_BITS)
        t, c, b = u // 20, (u // 10) & 1, u % 10
        k = t // J
        L = 2 * (t % J) + (c ^ (k & 1))
        s, k2 = np.divmod(k, R)
        t2 = J * k2 + (L >> 1)
        c2 = (L & 1) ^ (k2 & 1)
        out = P * PAIR_LINE_BITS + s * (PAIR_LINE_BITS // 2) + 20 * t2 + 10 * c2 + b
        out.sort()
        return out

    def _process_rs272(self, P0: int, P1: int, pos: np.ndarray) -> GenChunk:
        """Group rs272 line errors (rs272 pair-space, sorted) per codeword, decide each by the
        mode (bounded distance, t = 7; words with more errors decoded as error patterns) and pass
        the surviving data-bit errors on (numpy path, see the module docstring)."""
        ukey, uval = self._rs272_symbol_errors(P0, P1, pos)
        ut, words, w_first, w_cnt = self._rs272_words(ukey)
        rk, rv, rf, marked = self._rs272_decode(ukey, uval, ut, words, w_first, w_cnt)
        s_pos, r_lane, r_flag = self._rs272_payload_errors(rk, rv, rf)
        order = np.argsort(s_pos, kind="stable")
        return self._finish(P0, P1, np.asarray(s_pos, np.int64)[order], r_lane[order], r_flag[order],
                            words[marked] // 2)

    def _rs272_symbol_errors(self, P0: int, P1: int, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count the line errors ``pos`` (total, per lane, per pair for bursts) and merge them into
        symbol errors: sorted keys ``word * N_272 + t`` (word: 2 * rs272 pair + c) with their
        10-bit error values."""
        geom, st = self.geom, self.stats
        J = geom.n_lanes // 2
        half = PAIR_LINE_BITS // 2
        st.line_bit_errors += int(pos.size)
        self._line_units = self._per_pair_line(P0, P1, pos) if self.cfg.burst_pb is not None else None
        P, u = np.divmod(pos, PAIR_LINE_BITS)
        sub, v = np.divmod(u, half)
        t, c, b = v // 20, (v // 10) & 1, v % 10
        lane = (2 * (t % J) + (c ^ ((t // J) & 1))).astype(np.int8)
        st.lane_errors += np.bincount(lane, minlength=geom.n_lanes).astype(np.int64)
        word = (2 * P + sub) * 2 + c  # global rs272 codeword index: 2 * (rs272 pair) + c
        key = np.sort((word * N_272 + t) << 4 | b)
        skey, sbit = key >> 4, np.int64(1) << (key & 15)
        if skey.size:
            first = np.flatnonzero(np.concatenate(([True], skey[1:] != skey[:-1])))
            ukey = skey[first]
            uval = np.bitwise_or.reduceat(sbit, first)
        else:
            ukey = uval = np.empty(0, np.int64)
        return ukey, uval

    def _rs272_words(self, ukey: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Symbol index of each sorted symbol-error key, and the errored words: ``(ut, words,
        w_first, w_cnt)`` (each word's first key and symbol-error count); counts the weights."""
        st = self.stats
        uw, ut = np.divmod(ukey, N_272)
        words, w_first, w_cnt = (np.empty(0, np.int64),) * 3
        if uw.size:
            w_first = np.flatnonzero(np.concatenate(([True], uw[1:] != uw[:-1])))
            words = uw[w_first]
            w_cnt = np.diff(np.append(w_first, uw.size))
        np.add.at(st.symbol_hist, np.minimum(w_cnt, HIST_BINS - 1), 1)
        st.codewords_with_errors += int(words.size)
        return ut, words, w_first, w_cnt

    def _rs272_decode(self, ukey: np.ndarray, uval: np.ndarray, ut: np.ndarray, words: np.ndarray,
                      w_first: np.ndarray, w_cnt: np.ndarray):
        """Decide each errored word by the mode and count it.  Returns the residual symbol errors
        ``(keys, values, flags)`` at the decoder output (miscorrection symbols appended) and which
        of ``words`` the decoder marks."""
        from phy802.fec import RS272, decode

        st, mode = self.stats, self.mode
        flag_of = np.zeros(words.size, np.uint8)
        keep = np.ones(ukey.size, bool)  # which error symbols survive the decoder
        extra_k, extra_v = [], []  # miscorrection symbols the decoder adds
        marked = np.zeros(words.size, bool)
        heavy = np.flatnonzero(w_cnt > (T_272 if mode.decoder == "correct" else 2 * T_272))
        rows = np.empty((heavy.size, N_272), np.uint16)
        if mode.decoder != "none" and heavy.size:
            rows[:] = 0
            for r, wi in enumerate(heavy):
                sl = slice(w_first[wi], w_first[wi] + w_cnt[wi])
                rows[r, ut[sl]] = uval[sl]
        if mode.decoder == "correct":
            light = w_cnt <= T_272
            st.corrected_codewords += int(light.sum())
            keep = np.repeat(~light, w_cnt)  # light words are corrected exactly
            if heavy.size:
                dec, ncorr = decode(RS272, rows, mode="correct")
                fail = ncorr < 0
                st.uncorrectable_codewords += int(fail.sum())
                misc = ~fail  # more than t errors: a success is a miscorrection (bounded distance)
                st.miscorrected_codewords += int(misc.sum())
                flag_of[heavy[misc]] = FLAG_MISCORRECTED
                marked[heavy[fail]] = mode.indicate
                for r in np.flatnonzero(misc):
                    wi = heavy[r]
                    keep[w_first[wi]:w_first[wi] + w_cnt[wi]] = False
                    res = np.flatnonzero(dec[r])
                    extra_k.append(words[wi] * N_272 + res)
                    extra_v.append(dec[r, res].astype(np.int64))
        elif mode.decoder == "detect":
            marked[:] = True
            if heavy.size:
                _, ncorr = decode(RS272, rows, mode="detect")
                und = ncorr >= 0
                st.undetected_codewords += int(und.sum())
                marked[heavy[und]] = False
                flag_of[heavy[und]] = FLAG_UNDETECTED
        rk, rv = ukey[keep], uval[keep]
        rf = np.repeat(flag_of, w_cnt)[keep]
        if extra_k:
            rk = np.concatenate([rk] + extra_k)
            rv = np.concatenate([rv] + extra_v)
            rf = np.concatenate([rf] + [np.full(x.size, FLAG_MISCORRECTED, np.uint8) for x in extra_k])
        return rk, rv, rf, marked

    def _rs272_payload_errors(self, rk: np.ndarray, rv: np.ndarray,
                              rf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Residual symbol errors -> the scrambled-stream positions of their data bits (unsorted),
        with lane and flag; bits inside AM groups are counted and dropped."""
        geom, st = self.geom, self.stats
        J = geom.n_lanes // 2
        rw, rt = np.divmod(rk, N_272)
        data = rt < K_272  # the pad (t = 257) and the parity carry no payload
        rw, rt, rv, rf = rw[data], rt[data], rv[data], rf[data]
        bits = (rv[:, None] >> np.arange(10)) & 1
        ri, bb = np.nonzero(bits)
        rw, rt, rf = rw[ri], rt[ri], rf[ri]
        rc, rsub, rP = rw & 1, (rw >> 1) & 1, rw >> 2
        m = rsub * (PAIR_MESSAGE_BITS // 2) + 20 * rt + 10 * rc + bb
        am_bits = np.where(rP % geom.am_period_pairs == 0, geom.am_blocks * BLOCK_BITS, 0)
        in_am = m < am_bits
        st.am_bit_errors += int(in_am.sum())
        ok = ~in_am
        s_pos = data_blocks_before(rP[ok], geom) * BLOCK_BITS - am_bits[ok] + m[ok]
        r_lane = (2 * (rt[ok] % J) + (rc[ok] ^ ((rt[ok] // J) & 1))).astype(np.int8)
        return s_pos, r_lane, rf[ok].astype(np.uint8)

    def _bypass_chunk(self, P0: int, P1: int, encode: bool = False):
        """The fused bypass kernel (same output as ``_process`` on the same positions); with
        ``encode`` the flips come out as version-2 records: ``(GenChunk or None, EncodedChunk or None)``."""
        geom, st, ex = self.geom, self.stats, self._expander
        end = P1 * PAIR_LINE_BITS
        if self._nxt is None:
            self._nxt = self._last + 1 + int(self._rng.standard_exponential() * self._scale)
        s_end = data_blocks_before(P1, geom) * BLOCK_BITS
        lo = int(data_blocks_before(P0, geom)) * BLOCK_PAYLOAD_BITS
        expect = (end - self._nxt) / self._scale if end > self._nxt else 0.0
        cap = 3 * int(expect + 8 * math.sqrt(expect) + 64) + ex.key.size + 3
        ecap = int(self._enc_bytes_per_slot * cap) + 64  # ~1.5 bytes per flip expected; an overflow is redone larger
        g = self._scratch.get
        while True:
            state = self._rng.bit_generator.state
            bufs = [g("b_off", cap, np.int64), g("b_lane", cap, np.int8), g("b_flag", cap, np.uint8),
                    g("b_hdr", cap, np.int64), g("b_nk", cap, np.int64), g("b_nl", cap, np.int8),
                    g("b_nf", cap, np.uint8)]
            enc = np.empty(ecap if encode else 0, np.uint8)  # fresh: the bytes leave with the chunk, uncopied
            enc_state = np.array([0, lo - 1, -1, 0], np.int64)
            counters = np.zeros(4, np.int64)
            units = np.zeros((3, 6), np.int64)
            units[:, 0] = -1
            nxt, no, nh, nn = K.bypass_run(
                self._rng, self._scale, np.int64(self._nxt), np.int64(end), geom.n_lanes // 2,
                geom.am_period_pairs, geom.am_blocks, np.int64(s_end), st.symbol_hist, st.lane_errors,
                ex.key, ex.lane, ex.flag, *bufs, counters, enc, enc_state, units, np.int64(P0),
            )
            if nxt >= 0:
                break
            if nxt == -2:
                raise RuntimeError("internal: the fused bypass kernel produced flips the trace format cannot hold")
            self._rng.bit_generator.state = state  # rare: more errors than room, redo larger
            cap *= 2
            ecap *= 2
        self._nxt = int(nxt)
        st.line_bit_errors += int(counters[0])
        # the kernel's running unit counts (rows line, decoder output, flips; _gen_kernels.bypass_run)
        st.decoder_bad_pairs += int(units[1, 2])
        st.decoder_bit_errors_sq += int(units[1, 3])
        st.payload_bad_pairs += int(units[2, 2])
        st.payload_flips_sq += int(units[2, 3])
        if int(units[1, 5]) != int(counters[0] - counters[2] - counters[3]):
            raise RuntimeError(f"internal: the fused kernel counted {int(units[1, 5])} decoder-output errors per pair")
        st.codewords_with_errors += int(counters[1])
        st.am_bit_errors += int(counters[3])
        st.decoder_bit_errors += int(counters[0] - counters[2] - counters[3])  # message bits, AMs excluded
        off, ln, fl, hdr, nk, nl, nf = bufs
        ex.key, ex.lane, ex.flag = nk[:nn].copy(), nl[:nn].copy(), nf[:nn].copy()
        mark_pairs = np.empty(0, np.int64)
        if not encode:
            off = off[:no].copy()
            self.last_raw = (off, ln[:no].copy(), fl[:no].copy(), hdr[:nh].copy(), mark_pairs)
            lo_, hi, marks = self._count_chunk(P0, P1, no, self.last_raw[3], mark_pairs)
            self.first_pair_flips = int(units[2, 4])
            return GenChunk(P0, P1, lo_, hi, *self.last_raw[:3], marks), None
        self.last_raw = None
        n_flips = int(enc_state[3])
        hdr = hdr[:nh].copy()
        nb = int(enc_state[0])
        if int(units[2, 5]) != n_flips:  # the kernel counts each flip it makes in its pair
            raise RuntimeError(f"internal: {int(units[2, 5])} flips counted per pair, {n_flips} written")
        lo_, hi, marks = self._count_chunk(P0, P1, n_flips, hdr, mark_pairs)
        self.first_pair_flips = int(units[2, 4])
        blob = enc
        if nb + 20 * marks.shape[0] + 16 > enc.size:
            blob = np.empty(nb + 20 * marks.shape[0] + 16, np.uint8)
            blob[:nb] = enc[:nb]
        n = TK.encode_marks(marks, np.int64(lo_), np.int64(hi), blob, np.int64(nb))
        if n < 0:
            raise RuntimeError(f"internal: marks of chunk [{lo_}, {hi}) not encodable (code {n})")
        return None, EncodedChunk(P0, P1, lo_, hi, n_flips, int(marks.shape[0]), blob[:n], nb, hdr, mark_pairs,
                                  self.first_pair_flips)

    def next_encoded(self, n_pairs: int) -> EncodedChunk:
        """:meth:`next_chunk` as version-2 trace bytes (the bytes ``protocol.trace.encode_chunk``
        gives for the chunk, the same counters and Generator state).  The bypass mode encodes in
        its fused kernel, with no intermediate flip arrays."""
        n_pairs = int(n_pairs)
        if n_pairs > 0 and self._fused_bypass():
            return self._bypass_chunk(self.pair, self.pair + n_pairs, encode=True)[1]
        return super().next_encoded(n_pairs)

    def _fused_bypass(self) -> bool:
        return (self.cfg.code != "rs272" and self._decoder == 0 and self._scale != math.inf and self.fused
                and not self.cfg.per_lane)

    def _process(self, P0: int, P1: int, pos: np.ndarray) -> GenChunk:
        geom, st = self.geom, self.stats
        n = pos.size
        g = self._scratch.get
        prim_s = g("prim_s", n, np.int64)
        prim_lane = g("prim_lane", n, np.int8)
        hp = g("hp", n, np.int64)
        hlo = g("hlo", n, np.int64)
        hhi = g("hhi", n, np.int64)
        mp = g("mp", n, np.int64)
        counters = np.zeros(8, np.int64)
        n_prim, n_heavy, n_mark = K.group_pairs(
            pos, geom.n_lanes // 2, geom.am_period_pairs, geom.am_blocks, T_KP4, self._decoder,
            st.symbol_hist, st.lane_errors, prim_s, prim_lane, hp, hlo, hhi, mp, counters,
        )
        st.line_bit_errors += n
        self._line_units = self._per_pair_line(P0, P1, pos) if self.cfg.burst_pb is not None else None
        st.codewords_with_errors += int(counters[1])
        st.corrected_codewords += int(counters[2])
        st.am_bit_errors += int(counters[3])
        s = prim_s[:n_prim]
        lane = prim_lane[:n_prim]
        flag = g("flag0", n_prim, np.uint8)
        flag[:] = 0
        marks = mp[:n_mark].copy()
        if n_heavy:
            Pl, cl, tl, vl = [], [], [], []
            for q in range(n_heavy):
                P = int(hp[q])
                u = pos[hlo[q]:hhi[q]] - P * PAIR_LINE_BITS
                Pl.append(P)
                cl.append((u // 10) & 1)
                tl.append(u // 20)
                vl.append(np.left_shift(1, u % 10))
            rs, rl, rf, rm = self._decode_heavy(Pl, cl, tl, vl)
            s = np.concatenate([s, rs])
            lane = np.concatenate([lane, rl])
            flag = np.concatenate([flag, rf])
            marks = np.concatenate([marks, rm])
        return self._finish(P0, P1, s, lane, flag, marks)
