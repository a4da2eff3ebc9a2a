"""What both trace generators share (:class:`_Base`: pair bookkeeping, chunk assembly and encoding,
the descrambler expansion); :mod:`protocol.trace.fast` and :mod:`protocol.trace.bitexact` build on it.

Both produce the same thing: for a run of codeword pairs, the payload-stream bits delivered
flipped (with their PCS lane and flags) and the ranges the decoder marked, plus counters.

What a trace includes (both generators)
---------------------------------------
* payload flips: bits of the 256-bit payload of data 257b blocks that are wrong after the
  descrambler (after FEC decoding where the mode decodes);
* marks: payload ranges of blocks the MAC receives as error blocks: every data block of a pair
  whose codeword the decoder marked (indication modes) and every block whose 257b header bit was
  wrong after descrambling (its 66b control structure is lost); flips inside marks are kept;
* not included: errors on RS parity bits (stripped) and on alignment-marker bits (AMs are
  removed before descrambling; lane lock is assumed to survive), counted separately.
All data blocks are treated as all-data 257b blocks (x<0> = 1): long tensor frames are almost
entirely data; a control block's header/nibble errors are covered by the header mark.

Codes (``GeneratorConfig.code``): ``kp4`` (default), ``rs272`` and ``none``.
``rs272`` (RS(272,257+1), t = 7): a trace *pair* is then two rs272 codeword pairs -- the same 40
257b blocks and 10880 line bits, so the stream coordinate, the AM spacing and every count per
pair are unchanged -- with pair-space positions ``P * 10880 + 5440 s + 20 t + 10 c + b`` (rs272
pair ``2 P + s``, codeword ``c``, symbol ``t`` of 272, bit ``b``): ten 257b blocks per codeword
dealt 10-bit round robin, the pad symbol last (t = 257, value 0; ``phy802.link`` and
``phy802.pcs`` make it configurable), and the 119.2.4.7 interleave generalised to n = 272.  The
fast generator draws the line errors in the KP4 lane layout (lane, row, bit) and maps them to the
rs272 symbols on the same lane and row, so per-lane bursts stay on their lane; it groups and
decodes them in numpy (not the fused kernels).  ``none``: no FEC sublayer, the KP4 layout with
nothing decoded whatever the mode (``fec`` still sets what delivery tolerates).  ``kr4`` has no
Clause 119 framing here (40 blocks would take 10560 line bits) and is refused.
"""

from __future__ import annotations


import numpy as np

from phy802.clause119 import KP4_T as T_KP4

from . import _gen_kernels as K
from . import _kernels as TK
from ..framing import (
    BLOCK_BITS,
    BLOCK_PAYLOAD_BITS,
    BLOCKS_PER_PAIR,
    PAIR_LINE_BITS,
    RS_K,
    RS_N,
    RateGeometry,
    data_blocks_before,
    pair_of_data_block,
)
from ..source import FLAG_MISCORRECTED, FLAG_UNDETECTED
from .config import EncodedChunk, GenChunk, GeneratorConfig, TraceStats


def _lane_generators(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """Independent per-lane child generators (so lane streams do not depend on chunking)."""
    return list(rng.spawn(n))


def merge_ranges(r: np.ndarray) -> np.ndarray:
    """Sort ``[start, end)`` ranges (int64[m, 2]) and merge overlapping or touching ones."""
    r = np.asarray(r, dtype=np.int64).reshape(-1, 2)
    if r.shape[0] <= 1:
        return r.copy()
    r = r[np.argsort(r[:, 0], kind="stable")]
    reach = np.maximum.accumulate(r[:, 1])
    new = np.ones(r.shape[0], bool)
    new[1:] = r[1:, 0] > reach[:-1]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(r[:, 1], idx)
    return np.stack([r[idx, 0], ends], axis=1)


def _half_pair_ranges(ids: np.ndarray, geom: RateGeometry) -> np.ndarray:
    """Payload ranges of rs272 pairs ``ids`` (pair ``2 P + s`` = blocks ``20 s .. 20 s + 19`` of
    trace pair ``P``; an AM group takes the first ``am_blocks`` of ``s = 0``)."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    if not ids.size:
        return np.empty((0, 2), np.int64)
    P, sub = np.divmod(ids, 2)
    first = BLOCKS_PER_PAIR // 2 - np.where(P % geom.am_period_pairs == 0, geom.am_blocks, 0)
    lo = data_blocks_before(P, geom) + sub * first
    hi = lo + np.where(sub == 0, first, BLOCKS_PER_PAIR // 2)
    return np.stack([lo * BLOCK_PAYLOAD_BITS, hi * BLOCK_PAYLOAD_BITS], axis=1)


def chunk_marks(mark_pairs: np.ndarray, hdr: np.ndarray, geom: RateGeometry, split: int = 1) -> np.ndarray:
    """Marks of a chunk: the data blocks of the marked pairs and the blocks whose header bit flipped.

    ``split = 2`` (rs272): ``mark_pairs`` are rs272 pairs ``2 P + s`` (:func:`_half_pair_ranges`)."""
    ranges = [(_pair_ranges if split == 1 else _half_pair_ranges)(mark_pairs, geom)]
    if hdr.size:
        ranges.append(np.stack([hdr * BLOCK_PAYLOAD_BITS, (hdr + 1) * BLOCK_PAYLOAD_BITS], axis=1))
    return merge_ranges(np.concatenate(ranges)) if sum(r.shape[0] for r in ranges) else np.empty((0, 2), np.int64)


def _pair_ranges(pairs: np.ndarray, geom: RateGeometry) -> np.ndarray:
    pairs = np.unique(np.asarray(pairs, dtype=np.int64))
    lo = data_blocks_before(pairs, geom) * BLOCK_PAYLOAD_BITS
    hi = data_blocks_before(pairs + 1, geom) * BLOCK_PAYLOAD_BITS
    return np.stack([np.atleast_1d(lo), np.atleast_1d(hi)], axis=1) if pairs.size else np.empty((0, 2), np.int64)


def _chunk_line_errors(line_errors, P0: int, P1: int) -> tuple[np.ndarray, np.ndarray]:
    """Given line-error positions (pair-space) of the pairs ``[P0, P1)``: (pair within the chunk,
    line bit within the pair); ``ValueError`` when one lies outside the chunk."""
    le = np.asarray(line_errors, dtype=np.int64)
    if le.size and (le.min() < P0 * PAIR_LINE_BITS or le.max() >= P1 * PAIR_LINE_BITS):
        raise ValueError("line_errors must lie inside the chunk's pairs")
    return np.divmod(le - P0 * PAIR_LINE_BITS, PAIR_LINE_BITS)


class _Scratch:
    """Grow-only work buffers reused across chunks (fresh large arrays cost page faults)."""

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype) -> np.ndarray:
        b = self._bufs.get(name)
        if b is None or b.size < n:
            b = self._bufs[name] = np.empty(max(n, 1024, 0 if b is None else 2 * b.size), dtype)
        return b[:n]


class _Expander:
    """Descrambler error multiplication with state carried across chunks."""

    def __init__(self, scratch: _Scratch) -> None:
        self.key = np.empty(0, np.int64)
        self.lane = np.empty(0, np.int8)
        self.flag = np.empty(0, np.uint8)
        self._scratch = scratch

    def run(self, s, lane, flag, s_end):
        n = s.size + self.key.size
        cap = 3 * n + 1
        g = self._scratch.get
        out_off = g("x_off", cap, np.int64)
        out_lane = g("x_lane", cap, np.int8)
        out_flag = g("x_flag", cap, np.uint8)
        hdr = g("x_hdr", cap, np.int64)
        nk = g("x_nk", cap, np.int64)
        nl = g("x_nl", cap, np.int8)
        nf = g("x_nf", cap, np.uint8)
        if s.size and s[-1] >= s_end:
            raise AssertionError("primary errors beyond the chunk end")  # internal invariant
        n_out, n_hdr, n_new = K.descramble_expand(
            s, lane, flag, self.key, self.lane, self.flag, np.int64(s_end),
            out_off, out_lane, out_flag, hdr, nk, nl, nf,
        )
        self.key, self.lane, self.flag = nk[:n_new].copy(), nl[:n_new].copy(), nf[:n_new].copy()
        return out_off[:n_out].copy(), out_lane[:n_out].copy(), out_flag[:n_out].copy(), hdr[:n_hdr].copy()


class _Base:
    cfg: GeneratorConfig
    stats: TraceStats

    def __init__(self, cfg: GeneratorConfig, start_pair: int = 0) -> None:
        if int(start_pair) < 0:
            raise ValueError(f"start_pair must be >= 0, got {start_pair!r}")
        self.cfg = cfg
        self.geom = cfg.geometry
        self.mode = cfg.phy_mode
        self._split = 2 if cfg.code == "rs272" else 1  # rs272 codeword pairs per trace pair
        self.pair = int(start_pair)
        self.stats = TraceStats(n_lanes=self.geom.n_lanes)
        self._scratch = _Scratch()
        self._expander = _Expander(self._scratch)

    def _finish(self, P0, P1, s, lane, flag, mark_pairs) -> GenChunk:
        """Descramble-expand primaries, build marks, update counters."""
        geom = self.geom
        s_end = data_blocks_before(P1, geom) * BLOCK_BITS
        if s.size > 1 and np.any(s[1:] < s[:-1]):  # heavy-codeword residuals were appended
            order = np.argsort(s, kind="stable")
            s, lane, flag = s[order], lane[order], flag[order]
        off, ln, fl, hdr = self._expander.run(s, lane, flag, s_end)
        self.stats.decoder_bit_errors += int(s.size)
        return self._finish_chunk(P0, P1, off, ln, fl, hdr, mark_pairs, self._per_pair(P0, P1, s // BLOCK_BITS))

    def _per_pair(self, P0: int, P1: int, blocks: np.ndarray) -> np.ndarray:
        """int64[P1 - P0]: how many of the errors in data 257b blocks ``blocks`` lie in each pair."""
        if not blocks.size:
            return np.zeros(P1 - P0, np.int64)
        return np.bincount(pair_of_data_block(blocks, self.geom) - P0, minlength=P1 - P0).astype(np.int64)

    @staticmethod
    def _per_pair_line(P0: int, P1: int, pos: np.ndarray) -> np.ndarray:
        """int64[P1 - P0]: line bit errors per pair of sorted pair-space positions ``pos``."""
        return np.bincount(np.asarray(pos, np.int64) // PAIR_LINE_BITS - P0, minlength=P1 - P0).astype(np.int64)

    def _finish_chunk(self, P0, P1, off, ln, fl, hdr, mark_pairs, dec_units=None) -> GenChunk:
        """Counters and marks of pairs [P0, P1) (shared by the fast and the bit-exact generator);
        ``dec_units``: decoder-output bit errors per pair."""
        self.last_raw = (off, ln, fl, hdr, mark_pairs)  # what next_encoded keeps beside the bytes
        lo, hi, marks = self._count_chunk(P0, P1, int(off.size), hdr, mark_pairs,
                                          self._per_pair(P0, P1, off // BLOCK_PAYLOAD_BITS), dec_units)
        return GenChunk(P0, P1, lo, hi, off, ln, fl, marks)

    def _count_chunk(self, P0, P1, n_flips: int, hdr, mark_pairs, flip_units=None,
                     dec_units=None) -> tuple[int, int, np.ndarray]:
        """Update the counters for pairs [P0, P1); return the chunk's stream window and marks.
        ``flip_units`` / ``dec_units``: payload flips / decoder-output bit errors per pair."""
        self.stats.add_units(flip_units, dec_units, getattr(self, "_line_units", None))
        self._line_units = None
        self.first_pair_flips = int(flip_units[0]) if flip_units is not None and flip_units.size else 0
        geom = self.geom
        marks = chunk_marks(mark_pairs, hdr, geom, self._split)
        st = self.stats
        st.pairs += P1 - P0
        st.line_bits += (P1 - P0) * PAIR_LINE_BITS
        lo = data_blocks_before(P0, geom) * BLOCK_PAYLOAD_BITS
        hi = data_blocks_before(P1, geom) * BLOCK_PAYLOAD_BITS
        st.stream_bits += hi - lo
        st.codewords += 2 * self._split * (P1 - P0)
        st.marked_pairs += int(np.unique(mark_pairs).size)
        st.header_errors += int(hdr.size)
        st.payload_flips += n_flips
        st.decoder_bits += (hi - lo) // BLOCK_PAYLOAD_BITS * BLOCK_BITS
        st.marked_bits += int((marks[:, 1] - marks[:, 0]).sum()) if marks.size else 0
        self.pair = P1
        return int(lo), int(hi), marks

    def next_encoded(self, n_pairs: int) -> EncodedChunk:
        """:meth:`next_chunk` as version-2 trace bytes (``protocol/trace/TRACE_FORMAT.md``, what
        ``protocol.trace.encode_chunk`` gives for the chunk): the same stream, counters and
        Generator state.  ``last_raw`` is not kept."""
        ch = self.next_chunk(n_pairs)
        _, _, _, hdr, mark_pairs = self.last_raw
        self.last_raw = None
        out = np.empty(10 * (ch.offsets.size + 2 * ch.marks.shape[0]) + 16, np.uint8)
        nf = TK.encode_flips(ch.offsets, ch.lanes, ch.flags, np.int64(ch.stream_end), np.int64(self.geom.n_lanes),
                             out, np.int64(0), np.int64(ch.stream_start - 1), np.int64(-1))
        n = TK.encode_marks(np.ascontiguousarray(ch.marks, np.int64), np.int64(ch.stream_start),
                            np.int64(ch.stream_end), out, np.int64(nf)) if nf >= 0 else nf
        if n < 0:
            raise RuntimeError(f"internal: chunk [{ch.stream_start}, {ch.stream_end}) not encodable (code {n})")
        return EncodedChunk(ch.pair_start, ch.pair_end, ch.stream_start, ch.stream_end, int(ch.offsets.size),
                            int(ch.marks.shape[0]), out[:n], int(nf), hdr, mark_pairs, self.first_pair_flips)

    def _decode_heavy(self, P_list, c_list, t_list, v_list):
        """Decode the error words of the listed pairs; return residual primaries and marked pairs.

        ``P_list`` int64[h] pairs; ``c_list/t_list/v_list``: per pair, arrays of (codeword,
        symbol time, error value) of all its symbol errors.  Uses phy802.fec on the error pattern
        alone (sent word = 0, linearity).
        """
        from phy802.fec.rs import KP4, decode

        geom, mode, st = self.geom, self.mode, self.stats
        h = len(P_list)
        words = np.zeros((h, 2, RS_N), np.uint16)
        for q in range(h):
            np.bitwise_xor.at(words[q], (c_list[q], t_list[q]), v_list[q].astype(np.uint16))
        flat = words.reshape(-1, RS_N)
        weight = (flat != 0).sum(axis=1)
        dec, ncorr = decode(KP4, flat, mode="detect" if mode.decoder == "detect" else "correct")
        if mode.decoder == "correct":
            fail = ncorr < 0
            resid = np.where(fail[:, None], flat, dec)
            heavy = weight > T_KP4
            misc = heavy & ~fail & (resid != 0).any(axis=1)
            st.uncorrectable_codewords += int(fail.sum())
            st.miscorrected_codewords += int(misc.sum())
            cw_flag = np.where(misc, FLAG_MISCORRECTED, 0).astype(np.uint8)
            cw_mark = fail if mode.indicate else np.zeros_like(fail)
        else:  # detect
            resid = flat
            undetected = (weight > 0) & (ncorr >= 0)
            st.undetected_codewords += int(undetected.sum())
            cw_flag = np.where(undetected, FLAG_UNDETECTED, 0).astype(np.uint8)
            cw_mark = (weight > 0) & (ncorr < 0)
        cw_mark = cw_mark.reshape(h, 2).any(axis=1)
        marked = np.asarray(P_list, np.int64)[cw_mark]
        # residual message bits -> primaries in scrambled-stream coordinates
        J = geom.n_lanes // 2
        S, L, F = [], [], []
        r3 = resid.reshape(h, 2, RS_N)
        f2 = cw_flag.reshape(h, 2)
        for q in range(h):
            P = int(P_list[q])
            am_bits = geom.am_blocks * BLOCK_BITS if P % geom.am_period_pairs == 0 else 0
            s0 = data_blocks_before(P, geom) * BLOCK_BITS - am_bits
            cc, tt = np.nonzero(r3[q, :, :RS_K])
            for b in range(10):
                hit = (r3[q, cc, tt] >> b) & 1 == 1
                u = 20 * tt[hit] + 10 * cc[hit] + b
                keep = u >= am_bits
                st.am_bit_errors += int((~keep).sum())
                u, c_, t_ = u[keep], cc[hit][keep], tt[hit][keep]
                S.append(s0 + u)
                L.append((2 * (t_ % J) + (c_ ^ ((t_ // J) & 1))).astype(np.int8))
                F.append(f2[q, c_])
        if S:
            return np.concatenate(S).astype(np.int64), np.concatenate(L), np.concatenate(F).astype(np.uint8), marked
        return np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.uint8), marked
