"""The bit-exact trace generator, the oracle of the fast one.

:class:`BitExactGenerator` runs real random payload bits through 256b/257b (all-data blocks),
the scrambler, AM insertion, the 119.2.4.5 distribution, RS encoding, the 119.2.4.7 lane
interleave, a dense Bernoulli bit-error channel per line bit, and all the way back; the errors are
whatever differs.  It is slow and serves as the oracle of the fast one.
"""

from __future__ import annotations


import numpy as np

from phy802._rng import as_generator
from phy802.clause119 import KP4_T as T_KP4

from . import _gen_kernels as K
from ..framing import (
    BLOCK_BITS,
    BLOCK_PAYLOAD_BITS,
    BLOCKS_PER_PAIR,
    PAIR_LINE_BITS,
    PAIR_MESSAGE_BITS,
    RS_K,
    RS_N,
    data_blocks_before,
)
from ..source import FLAG_MISCORRECTED, FLAG_UNDETECTED
from ._base import _Base, _chunk_line_errors, _lane_generators
from .config import HIST_BINS, K_272, N_272, T_272, GenChunk, GeneratorConfig, lane_of_symbol

__all__ = [
    "BitExactGenerator",
]


class BitExactGenerator(_Base):
    """Reference link on real bits (slow): the oracle for :class:`FastGenerator`.

    Composition per pair (all-data 257b blocks, 119.2.4.x): random payload -> 257b blocks with
    x<0> = 1 -> scrambler 1 + x^39 + x^58 -> AM group (8 / 4 blocks of PRBS-like filler; their
    content does not matter here) -> 10-bit round-robin to A/B (119.2.4.5) -> RS(544,514) encode
    (``phy802.fec.encode``) -> 119.2.4.7 interleave to PCS lanes -> dense Bernoulli(ber) flips of
    every line bit -> de-interleave -> decode per mode (``phy802.fec.decode``) -> strip parity
    and AMs -> descrambler -> compare with the sent payload.
    """

    def __init__(self, cfg: GeneratorConfig, seed, *, start_pair: int = 0) -> None:
        super().__init__(cfg, start_pair)
        self._rng = as_generator(seed)
        self._tx_state = np.zeros(58, np.uint8)
        self._rx_state = np.zeros(58, np.uint8)
        self._lane_of = lane_of_symbol(self.geom)
        self._lane_of_272 = lane_of_symbol(self.geom, N_272)

    def next_chunk(self, n_pairs: int, line_errors: np.ndarray | None = None) -> GenChunk:
        """Simulate the next ``n_pairs`` pairs.

        ``line_errors`` (optional) replaces the Bernoulli channel by an explicit error pattern:
        absolute pair-space positions ``P * 10880 + 20 t + 10 c + b`` (see :mod:`protocol.trace._gen_kernels`)
        inside the chunk, each flipping bit ``b`` of symbol ``t`` of codeword ``c`` on its lane
        (``rs272``: ``P * 10880 + 5440 s + 20 t + 10 c + b``, module docstring).
        """
        n_pairs = int(n_pairs)
        if n_pairs <= 0:
            raise ValueError(f"n_pairs must be > 0, got {n_pairs}")
        # refuse bad input before any state (Generator, scrambler) moves
        le = None if line_errors is None else _chunk_line_errors(line_errors, self.pair, self.pair + n_pairs)
        if self.cfg.code == "rs272":
            if le is None and self.cfg.per_lane:
                raise ValueError("the bit-exact rs272 generator supports independent errors (no burst_pb/lane_weights)")
            return self._next_chunk_rs272(n_pairs, le)

        P0, P1, pairs, has_am, am_bits, blocks, scr, msg = self._tx_messages(n_pairs)
        cw, line = self._encode_kp4(msg)
        err = self._channel_kp4(line, le)
        self._record_line_errors(err)
        rx_cw = self._deinterleave_kp4(line ^ err)
        out, marked_cw, cwflag = self._decode_kp4(rx_cw, cw)
        mark_pairs = pairs[marked_cw.reshape(n_pairs, 2).any(axis=1)]
        # strip parity, undo 119.2.4.5, remove AMs
        msg_sym = out.reshape(n_pairs, 2, RS_N)[:, :, :RS_K]
        rx_msg = ((msg_sym.transpose(0, 2, 1)[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)
        rx_msg = rx_msg.reshape(n_pairs, PAIR_MESSAGE_BITS)
        # per-message-bit lane and flag (for attributing payload errors)
        u = np.arange(PAIR_MESSAGE_BITS)
        lane_u = self._lane_of[(u // 10) & 1, u // 20]
        flag_u = cwflag.reshape(n_pairs, 2)[:, (u // 10) & 1]
        return self._tail_and_finish(P0, P1, has_am, am_bits, msg, rx_msg, scr, blocks, lane_u, flag_u, mark_pairs)

    def _encode_kp4(self, msg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TX for ``code="kp4"``: message bits ``msg[q]`` of each pair -> the sent codewords
        ``cw[q, c, t]`` and the line bits ``line[q, row, lane, b]`` (bit 0 first)."""
        from phy802.fec.rs import KP4, encode

        geom = self.geom
        n_pairs = msg.shape[0]
        # 119.2.4.5: bit 20 i + 10 c + b -> bit b of message symbol i (time order) of codeword c
        w = (1 << np.arange(10, dtype=np.uint16))
        sym = (msg.reshape(n_pairs, RS_K, 2, 10).astype(np.uint16) * w).sum(axis=3, dtype=np.uint16)
        cw = encode(KP4, sym.transpose(0, 2, 1).reshape(-1, RS_K)).reshape(n_pairs, 2, RS_N)
        # 119.2.4.7 interleave: lane L gets, per row k, the symbol of (c, t) with lane_of[c, t] = L
        J = geom.n_lanes // 2
        t = np.arange(RS_N)
        lanes_sym = np.empty((n_pairs, geom.rows_per_pair, geom.n_lanes), np.uint16)
        for c in (0, 1):
            lanes_sym[:, t // J, self._lane_of[c]] = cw[:, c, :]
        line = ((lanes_sym[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)  # bit 0 first
        return cw, line

    def _channel_kp4(self, line: np.ndarray, le) -> np.ndarray:
        """The error bits on ``line`` (same shape): per-lane Bernoulli or burst chains, one
        Bernoulli(ber) over all bits, or the explicit pattern ``le`` (checked line errors)."""
        geom, rng = self.geom, self._rng
        n_pairs, rows = line.shape[0], geom.rows_per_pair
        if le is None and self.cfg.per_lane:
            err = np.zeros(line.shape, np.uint8)
            if self.cfg.ber > 0:
                if not hasattr(self, "_lane_rngs"):
                    self._lane_rngs = _lane_generators(rng, geom.n_lanes)
                    self._lane_chain = [np.zeros(1, np.int64) for _ in range(geom.n_lanes)]
                for L in range(geom.n_lanes):
                    u_ = self._lane_rngs[L].random(n_pairs * rows * 10)
                    if self.cfg.burst_pb is not None:
                        bits = K.dense_markov(u_, self.cfg.lane_pe(L), float(self.cfg.burst_pb), self._lane_chain[L])
                    else:
                        bits = (u_ < self.cfg.lane_ber(L)).astype(np.uint8)
                    err[:, :, L, :] = bits.reshape(n_pairs, rows, 10)
        elif le is None:
            err = (rng.random(line.shape) < self.cfg.ber).astype(np.uint8)
        else:
            err = np.zeros(line.shape, np.uint8)
            q, u = le
            c_, t_, b_ = (u // 10) & 1, u // 20, u % 10
            err[q, t_ // (geom.n_lanes // 2), self._lane_of[c_, t_], b_] ^= 1
        return err

    def _record_line_errors(self, err: np.ndarray) -> None:
        """Count the line errors ``err[q, row, lane, b]`` of a chunk (total, per pair for the burst
        intervals, per lane)."""
        st = self.stats
        st.line_bit_errors += int(err.sum())
        self._line_units = (err.reshape(err.shape[0], -1).sum(axis=1, dtype=np.int64) if self.cfg.burst_pb is not None
                            else None)
        np.add.at(st.lane_errors, np.nonzero(err)[2], 1)

    def _deinterleave_kp4(self, rx_line: np.ndarray) -> np.ndarray:
        """RX: received line bits -> the received codewords ``rx_cw[q, c, t]`` (undoes 119.2.4.7)."""
        J = self.geom.n_lanes // 2
        t = np.arange(RS_N)
        rx_lanes = (rx_line.astype(np.uint16) << np.arange(10, dtype=np.uint16)).sum(axis=3, dtype=np.uint16)
        rx_cw = np.empty((rx_line.shape[0], 2, RS_N), np.uint16)
        for c in (0, 1):
            rx_cw[:, c, :] = rx_lanes[:, t // J, self._lane_of[c]]
        return rx_cw

    def _decode_kp4(self, rx_cw: np.ndarray, cw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Decode the received codewords per the mode and count them.  Returns the decoder output
        ``out[k, t]`` (codewords flattened), which codewords the decoder marks, and each codeword's
        flag (miscorrected / undetected / 0)."""
        from phy802.fec.rs import KP4, decode

        mode, st = self.mode, self.stats
        e_cw = rx_cw ^ cw
        wts = (e_cw != 0).sum(axis=2).reshape(-1)
        np.add.at(st.symbol_hist, np.minimum(wts[wts > 0], HIST_BINS - 1), 1)
        st.codewords_with_errors += int((wts > 0).sum())
        flat = rx_cw.reshape(-1, RS_N)
        marked_cw = np.zeros(flat.shape[0], bool)
        if mode.decoder == "correct":
            dec, ncorr = decode(KP4, flat, mode="correct")
            fail = ncorr < 0
            out = np.where(fail[:, None], flat, dec)
            resid = (out ^ cw.reshape(-1, RS_N))
            st.corrected_codewords += int(((wts > 0) & (wts <= T_KP4)).sum())
            st.uncorrectable_codewords += int(fail.sum())
            st.miscorrected_codewords += int(((wts > T_KP4) & ~fail & (resid != 0).any(axis=1)).sum())
            if mode.indicate:
                marked_cw = fail
            cwflag = np.where((wts > T_KP4) & ~fail, FLAG_MISCORRECTED, 0).astype(np.uint8)
        elif mode.decoder == "detect":
            _, ncorr = decode(KP4, flat, mode="detect")
            out = flat
            marked_cw = ncorr < 0
            st.undetected_codewords += int(((wts > 0) & (ncorr >= 0)).sum())
            cwflag = np.where((wts > 0) & (ncorr >= 0), FLAG_UNDETECTED, 0).astype(np.uint8)
        else:
            out = flat
            cwflag = np.zeros(flat.shape[0], np.uint8)
        return out, marked_cw, cwflag

    def _tail_and_finish(self, P0, P1, has_am, am_bits, msg, rx_msg, scr, blocks, lane_u, flag_u, mark_pairs):
        """Shared receive tail: remove AMs, descramble, attribute each payload error to the lane and
        flag of its scrambled-domain origin, count AM-bit errors, finish the chunk."""
        geom, st = self.geom, self.stats
        n_pairs = P1 - P0
        parts, lparts, fparts = [], [], []
        for q in range(n_pairs):
            a = am_bits if has_am[q] else 0
            parts.append(rx_msg[q, a:])
            lparts.append(lane_u[a:])
            fparts.append(flag_u[q, a:])
        rx_scr = np.concatenate(parts)
        rx_lane = np.concatenate(lparts)
        rx_flag = np.concatenate(fparts)
        s0 = data_blocks_before(P0, geom) * BLOCK_BITS
        rx_blocks = K.descramble_bits(rx_scr, self._rx_state)
        diff = np.nonzero(rx_blocks != blocks)[0]
        # lane/flag attribution: origin at v, else v-39, else v-58 among scrambled-domain errors
        scr_err = (rx_scr != scr)
        st.decoder_bit_errors += int(scr_err.sum())
        dec_units = self._per_pair(P0, P1, (s0 + np.flatnonzero(scr_err)) // BLOCK_BITS)
        # the previous chunk's tail can be the origin of this chunk's first errors
        tail = getattr(self, "_tail", None)
        if tail is None:
            tail = (np.zeros(58, bool), np.zeros(58, np.int8), np.zeros(58, np.uint8))
        ext_err = np.concatenate([tail[0], scr_err])
        ext_lane = np.concatenate([tail[1], rx_lane.astype(np.int8)])
        ext_flag = np.concatenate([tail[2], rx_flag.astype(np.uint8)])
        self._tail = (ext_err[-58:].copy(), ext_lane[-58:].copy(), ext_flag[-58:].copy())
        lanes = np.empty(diff.size, np.int8)
        flags = np.empty(diff.size, np.uint8)
        for q, v in enumerate(diff + 58):
            for d in (0, 39, 58):
                if ext_err[v - d]:
                    lanes[q] = ext_lane[v - d]
                    flags[q] = ext_flag[v - d]
                    break
            else:  # pragma: no cover - the descrambler cannot create an error from nothing
                raise AssertionError("payload error without a scrambled-domain origin")
        gv = s0 + diff
        hdr = gv % BLOCK_BITS == 0
        off = (gv // BLOCK_BITS) * BLOCK_PAYLOAD_BITS + gv % BLOCK_BITS - 1
        hdr_blocks = gv[hdr] // BLOCK_BITS
        # AM-bit and parity errors are not payload: count AM ones like the fast generator
        for q in range(n_pairs):
            if has_am[q]:
                st.am_bit_errors += int((rx_msg[q, :am_bits] != msg[q, :am_bits]).sum())
        return self._finish_chunk(P0, P1, off[~hdr].astype(np.int64), lanes[~hdr], flags[~hdr], hdr_blocks, mark_pairs,
                                  dec_units)

    def _tx_messages(self, n_pairs: int):
        """The TX side every code shares, for the next ``n_pairs`` pairs: random payload -> 257b
        (x<0> = 1) -> scramble, AM blocks (random bits) at the start of AM pairs.  Returns
        ``(P0, P1, pairs, has_am, am_bits, blocks, scr, msg)`` with ``msg[q]`` the message bits of
        pair ``P0 + q`` (``n_pairs > 0``, checked by :meth:`next_chunk`)."""
        geom, rng = self.geom, self._rng
        P0, P1 = self.pair, self.pair + n_pairs
        pairs = np.arange(P0, P1)
        has_am = pairs % geom.am_period_pairs == 0
        n_data = int(BLOCKS_PER_PAIR * n_pairs - geom.am_blocks * has_am.sum())
        payload = rng.integers(0, 2, size=(n_data, BLOCK_PAYLOAD_BITS), dtype=np.uint8)
        blocks = np.concatenate([np.ones((n_data, 1), np.uint8), payload], axis=1).reshape(-1)
        scr = K.scramble_bits(blocks, self._tx_state)
        msg = np.empty((n_pairs, PAIR_MESSAGE_BITS), np.uint8)
        am_bits = geom.am_blocks * BLOCK_BITS
        cursor = 0
        for q in range(n_pairs):  # per pair (AM insertion), not per symbol
            a = am_bits if has_am[q] else 0
            if a:
                msg[q, :a] = rng.integers(0, 2, a, dtype=np.uint8)
            take = PAIR_MESSAGE_BITS - a
            msg[q, a:] = scr[cursor:cursor + take]
            cursor += take
        return P0, P1, pairs, has_am, am_bits, blocks, scr, msg

    def _next_chunk_rs272(self, n_pairs: int, le) -> GenChunk:
        """:meth:`next_chunk` for ``code="rs272"`` (``le``: the checked line errors, or None): each
        trace pair is two rs272 pairs ``s = 0, 1`` (20 257b blocks each: 5140 message bits dealt
        10-bit round robin to A/B, 257 data symbols + the pad (0, last) per codeword, RS(272,258)
        encode, 119.2.4.7 rows ``34 s + t // J``)."""
        from phy802.fec.rs import RS272, decode, encode

        geom, mode, st, rng = self.geom, self.mode, self.stats, self._rng
        P0, P1, pairs, has_am, am_bits, blocks, scr, msg = self._tx_messages(n_pairs)
        # per rs272 pair s: bit 20 i + 10 c + b of its 5140 -> bit b of data symbol i of codeword c
        w = (1 << np.arange(10, dtype=np.uint16))
        sym = (msg.reshape(n_pairs, 2, K_272, 2, 10).astype(np.uint16) * w).sum(axis=4, dtype=np.uint16)
        m = np.zeros((n_pairs, 2, 2, K_272 + 1), np.uint16)  # [P, s, c, 258], pad (last) = 0
        m[..., :K_272] = sym.transpose(0, 1, 3, 2)
        cw = encode(RS272, m.reshape(-1, K_272 + 1)).reshape(n_pairs, 2, 2, N_272)
        J = geom.n_lanes // 2
        R = geom.rows_per_pair // 2
        t = np.arange(N_272)
        lane_of = self._lane_of_272
        rows = geom.rows_per_pair
        lanes_sym = np.empty((n_pairs, rows, geom.n_lanes), np.uint16)
        for sub in (0, 1):
            for c in (0, 1):
                lanes_sym[:, sub * R + t // J, lane_of[c]] = cw[:, sub, c, :]
        line = ((lanes_sym[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)
        if le is None:
            err = (rng.random(line.shape) < self.cfg.ber).astype(np.uint8)
        else:
            err = np.zeros(line.shape, np.uint8)
            q, u = le
            sub_, v = np.divmod(u, PAIR_LINE_BITS // 2)
            c_, t_, b_ = (v // 10) & 1, v // 20, v % 10
            err[q, sub_ * R + t_ // J, lane_of[c_, t_], b_] ^= 1
        self._record_line_errors(err)
        rx_lanes = ((line ^ err).astype(np.uint16) << np.arange(10, dtype=np.uint16)).sum(axis=3, dtype=np.uint16)
        rx_cw = np.empty((n_pairs, 2, 2, N_272), np.uint16)
        for sub in (0, 1):
            for c in (0, 1):
                rx_cw[:, sub, c, :] = rx_lanes[:, sub * R + t // J, lane_of[c]]
        flat = rx_cw.reshape(-1, N_272)
        sent = cw.reshape(-1, N_272)
        wts = (flat != sent).sum(axis=1)
        np.add.at(st.symbol_hist, np.minimum(wts[wts > 0], HIST_BINS - 1), 1)
        st.codewords_with_errors += int((wts > 0).sum())
        marked_cw = np.zeros(flat.shape[0], bool)
        cwflag = np.zeros(flat.shape[0], np.uint8)
        out = flat
        if mode.decoder == "correct":
            dec, ncorr = decode(RS272, flat, mode="correct")
            fail = ncorr < 0
            out = np.where(fail[:, None], flat, dec)
            resid = out ^ sent
            st.corrected_codewords += int(((wts > 0) & (wts <= T_272)).sum())
            st.uncorrectable_codewords += int(fail.sum())
            misc = (wts > T_272) & ~fail & (resid != 0).any(axis=1)
            st.miscorrected_codewords += int(misc.sum())
            marked_cw = fail if mode.indicate else marked_cw
            cwflag = np.where((wts > T_272) & ~fail, FLAG_MISCORRECTED, 0).astype(np.uint8)
        elif mode.decoder == "detect":
            _, ncorr = decode(RS272, flat, mode="detect")
            marked_cw = ncorr < 0
            und = (wts > 0) & (ncorr >= 0)
            st.undetected_codewords += int(und.sum())
            cwflag = np.where(und, FLAG_UNDETECTED, 0).astype(np.uint8)
        mark_ids = (2 * pairs[:, None] + np.arange(2)[None, :])[marked_cw.reshape(n_pairs, 2, 2).any(axis=2)]
        msg_sym = out.reshape(n_pairs, 2, 2, N_272)[..., :K_272]  # [P, s, c, i]
        rx_msg = ((msg_sym.transpose(0, 1, 3, 2)[..., None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8)
        rx_msg = rx_msg.reshape(n_pairs, PAIR_MESSAGE_BITS)
        u = np.arange(PAIR_MESSAGE_BITS)
        su, vu = np.divmod(u, PAIR_MESSAGE_BITS // 2)
        lane_u = lane_of[(vu // 10) & 1, vu // 20]
        flag_u = cwflag.reshape(n_pairs, 4)[:, 2 * su + ((vu // 10) & 1)]
        return self._tail_and_finish(P0, P1, has_am, am_bits, msg, rx_msg, scr, blocks, lane_u, flag_u, mark_ids)
