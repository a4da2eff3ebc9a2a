"""The bit-exact link (:class:`Link`): real payload through PCS, FEC, PMA and channel and back."""

from __future__ import annotations

import math
import time
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from phy802.link import _kernels as _k
from phy802._rng import spawn
from phy802.channel import Pam4Awgn
from phy802.fec import decode, encode
from phy802.pcs import (
    Blocks66,
    LockError,
    PcsReceiver,
    PcsTransmitter,
    SYNC_DATA,
    frames_to_blocks,
    idle_blocks,
    payload_bit_errors,
)
from phy802.pma import gray_demap, gray_map, precode, precode_decode
from phy802.link.config import LinkConfig, _POP10
from phy802.link.counters import LinkCounters, LinkResult
from phy802.link._base import _Base, _flips, _seed_sequence


class Link(_Base):
    """The composed, bit-exact link (see the module docstring).

    Parameters
    ----------
    config : :class:`LinkConfig`.
    channels : one channel for every physical lane, a sequence with one per lane, a
        :class:`phy802.channel.LaneChannels`, or ``None`` (noiseless).  Any object with the
        :class:`phy802.channel.Channel` methods works.
    pma : ``"sparse"`` (default: the channel's sparse errors are carried back as bit flips into
        the PCS lane symbols; the line is built densely by one kernel only when a lane's channel
        is not a plain :class:`Pam4Awgn` or the precoder is on, else the AWGN sampler reads the
        sent level of each candidate position straight from the lane symbols) or ``"dense"``
        (every stage through the
        :mod:`phy802.pma` functions on full bit arrays; the oracle of the sparse path -- both give
        identical results for the same seed with channels whose ``apply`` equals
        ``sample_symbol_errors`` applied, as all :mod:`phy802.channel` models do).

    Notes
    -----
    Every batch is a fresh transmission with one AM group at its start.  The receiver must lock
    every PCS lane on that marker (:func:`phy802.pcs.alignment.lock_lanes`, which needs 2 of the
    3 common marker symbols exact); at pre-FEC BER above ~1e-3 a marker is occasionally unreadable.
    Such a batch is dropped as a whole and counted in ``lock_failures`` (for i.i.d. channels this
    biases nothing but the 12 marker symbols per lane; the sweep's fast path has no lock).

    Example
    -------
    >>> from phy802.link import Link, LinkConfig
    >>> from phy802.channel import Pam4Awgn
    >>> res = Link(LinkConfig(code="kp4", fec="ieee"), Pam4Awgn.from_ber(1e-4)).run(64, seed=1)
    >>> res.counters.uncorrected_codewords
    0
    """

    def __init__(self, config: LinkConfig, channels=None, *, pma: Literal["sparse", "dense"] = "sparse") -> None:
        super().__init__(config, channels)
        if pma not in ("sparse", "dense"):
            raise ValueError(f"pma must be 'sparse' or 'dense', got {pma!r}")
        self.pma = pma
        # no line array needed: non-precoded PAM4 AWGN lanes (exact type: the sampler is replicated)
        self._lazy_line = (pma == "sparse" and not config.precoding
                           and all(type(ch) is Pam4Awgn for ch in self.channels))
        if config.level == "pcs":
            self._tx = PcsTransmitter(config.pcs_config)
            self._rx = PcsReceiver(config.pcs_config)
        self._spread = _k.spread_table(self.geometry.r)

    # ---------------------------------------------------------------- PMA both ways
    def _line(self, lanes: NDArray[np.uint16]) -> NDArray[np.uint8]:
        cfg, g = self.config, self.geometry
        if self.pma == "dense":
            bits = ((lanes[:, :, None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8).reshape(g.n_pcsl, -1)
            sym = gray_map(cfg.mux.mux(bits))  # 120.5.2 then 120.5.7.1
            return precode(sym, cfg.precoder_init) if cfg.precoding else sym  # 120.5.7.2
        out = np.empty((g.n_phys, lanes.shape[1] * 5 * g.r), np.uint8)
        return _k.pam4_line(np.ascontiguousarray(lanes, np.uint16), g.order, self._spread, bool(cfg.precoding),
                            int(cfg.precoder_init), out)

    def _channel(self, lanes: NDArray[np.uint16], ss: np.random.SeedSequence, ctr: LinkCounters):
        """Send ``lanes`` (PCS lane symbols) over the PMA and channels; return received lanes and
        the located bit errors."""
        cfg, g = self.config, self.geometry
        if self._lazy_line:
            return self._channel_lazy(lanes, ss, ctr)
        line = self._line(lanes)
        rngs = spawn(ss, g.n_phys)
        n_sym = line.shape[1]
        ctr.line_symbols += line.size
        if self.pma == "dense":
            rx_line = np.stack([ch.apply(line[i], rngs[i]) for i, ch in enumerate(self.channels)]).astype(np.uint8)
            data = precode_decode(rx_line, cfg.precoder_init) if cfg.precoding else rx_line
            bits = cfg.mux.demux(gray_demap(data))  # [n_pcsl, 10 N]
            rx = (bits.reshape(g.n_pcsl, -1, 10).astype(np.uint16) << np.arange(10, dtype=np.uint16)).sum(
                axis=2, dtype=np.uint16)
            tx_bits = cfg.mux.mux(((lanes[:, :, None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8).reshape(
                g.n_pcsl, -1))
            per_lane = []
            for i in range(g.n_phys):
                n_err = int(np.count_nonzero(rx_line[i] != line[i]))
                q = np.flatnonzero(gray_demap(data[i]) != tx_bits[i]).astype(np.int64)
                per_lane.append((n_err, q))
            return rx, self._line_counts(ctr, per_lane)
        per_lane = []
        for i, ch in enumerate(self.channels):
            err = ch.sample_symbol_errors(line[i], rngs[i])
            pos = np.asarray(err.positions, np.int64)
            q = _flips(pos, line[i][pos], np.asarray(err.values, np.uint8), n_sym, cfg.precoding,
                       cfg.precoder_init, lambda U, row=line[i]: row[U])
            per_lane.append((int(pos.size), q))
        loc = self._line_counts(ctr, per_lane)
        rx = np.array(lanes, dtype=np.uint16, copy=True)
        L, u = loc[0], loc[1]
        if L.size:
            _k.xor_flips(rx, L, u)
        return rx, loc

    def _channel_lazy(self, lanes: NDArray[np.uint16], ss: np.random.SeedSequence, ctr: LinkCounters):
        """:meth:`_channel` for the sparse PMA without precoder on :class:`Pam4Awgn` lanes: the
        line is never built; the AWGN sampler reads the sent level of each candidate position
        from the PCS lane symbols (same draws, so the same errors as the dense line).  The flips
        go into ``lanes`` itself (both callers pass a temporary they do not read again)."""
        g = self.geometry
        syms = np.ascontiguousarray(lanes, np.uint16)
        rngs = spawn(ss, g.n_phys)
        n_sym = lanes.shape[1] * 5 * g.r
        ctr.line_symbols += g.n_phys * n_sym
        found = []
        for i, ch in enumerate(self.channels):
            p_err, cdf = ch._tables()
            mean = n_sym * float(p_err.max())
            cap = int(min(n_sym, mean + 8.0 * math.sqrt(mean) + 64))
            found.append(_k.awgn_line_errors(syms, i, g.order, n_sym, p_err, cdf, rngs[i], cap))
        n_err = np.array([f[0].size for f in found], np.int64)
        start = np.zeros(g.n_phys + 1, np.int64)
        np.cumsum(n_err, out=start[1:])
        pos, sent, recv = (np.concatenate([f[j] for f in found]) for j in range(3))
        m_max = 2 * int(start[-1])
        L, u, c, t, b = (np.empty(m_max, np.int64) for _ in range(5))
        lane_bits = np.zeros(g.n_phys, np.int64)
        m = _k.locate_level_errors(start, pos, sent, recv, g.order, self._gather64, g.n, g.K, lane_bits,
                                   L, u, c, t, b)
        L, u, c, t, b = L[:m], u[:m], c[:m], t[:m], b[:m]
        ctr.lane_symbol_errors += n_err
        ctr.lane_bit_errors += lane_bits
        ctr.bit_errors += m
        ctr.pcs_lane_bit_errors += np.bincount(L, minlength=g.n_pcsl).astype(np.int64)
        loc = (L, u, c, t, b)
        rx = syms
        L, u = loc[0], loc[1]
        if L.size:
            _k.xor_flips(rx, L, u)
        return rx, loc

    # ---------------------------------------------------------------- post-FEC counts
    def _post(self, ctr, tx_cw, dec_cw, ncorr, c, t, b, rx_corrected_per_lane=None):
        """Decoder and post-FEC counters; ``tx_cw``/``dec_cw`` are flat ``[C, n]``."""
        cfg, g = self.config, self.geometry
        C = tx_cw.shape[0]
        ukey, _ = self._symbol_errors(c, t, b, g.n)
        w = self._pre_symbol_counts(ctr, ukey, C)
        d0, d1 = cfg.data_slice
        ctr.codewords += C
        ctr.pairs += C // 2
        ctr.message_bits += C * (d1 - d0) * 10
        dec = cfg.decoder
        if dec is not None:
            ctr.corrected_codewords += int((ncorr > 0).sum())
            ctr.uncorrected_codewords += int((ncorr < 0).sum())
            ctr.corrected_symbols += int(ncorr[ncorr > 0].sum())
            if cfg.level == "codeword" or cfg.payload != "frames":
                self._count_llr(ctr, np.flatnonzero(ncorr < 0))
        # the decoder only touches words with a nonzero syndrome, i.e. words with errors
        nsym, nbit, ncw, und, mis = _k.post_fec_counts(
            np.ascontiguousarray(tx_cw, np.uint16), np.ascontiguousarray(dec_cw, np.uint16), w,
            np.ascontiguousarray(ncorr, np.int64) if dec is not None else np.zeros(C, np.int64),
            d0, d1, dec is not None, dec == "correct", _POP10)
        ctr.post_fec_symbol_errors += int(nsym)
        ctr.post_fec_bit_errors += int(nbit)
        ctr.codeword_errors += int(ncw)
        ctr.undetected_codeword_errors += int(und)
        ctr.miscorrected_codewords += int(mis)
        if rx_corrected_per_lane is not None:
            ctr.pcs_lane_corrected += rx_corrected_per_lane
        return w

    # ---------------------------------------------------------------- batches
    def _batch_pcs(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters, block_offset: int):
        cfg = self.config
        pcs = cfg.pcs_config
        data_ss, chan_ss = ss.spawn(2)
        drng = np.random.default_rng(data_ss)
        frames_sent = 0
        if cfg.payload == "data":
            n66 = 4 * pcs.data_blocks_257(P)
            blocks = Blocks66(np.full(n66, SYNC_DATA, np.uint8),
                              drng.integers(0, np.iinfo(np.uint64).max, n66, dtype=np.uint64, endpoint=True))
        else:
            per = 3 + (cfg.frame_bytes + 4) // 8
            frames_sent = max(1, (4 * pcs.data_blocks_257(P) - 3) // per)
            blocks = frames_to_blocks([drng.bytes(cfg.frame_bytes) for _ in range(frames_sent)])
            short = 4 * pcs.data_blocks_257(P - 1) + 1 - len(blocks) if P > 1 else 0
            if short > 0:  # whole frames left more than a pair empty (rs272's 20-block pairs): idle up to P pairs
                idle = idle_blocks(short)
                blocks = Blocks66(np.concatenate([blocks.sync, idle.sync]), np.concatenate([blocks.payload, idle.payload]))
        tx = self._tx.transmit(blocks)
        out = ctr
        ctr = self._new_counters()  # merged into ``out`` only once the receiver has locked
        rx_lanes, (L, u, c, t, b) = self._channel(tx.lanes, chan_ss, ctr)
        try:
            res = self._rx(rx_lanes, frames=cfg.payload == "frames")
        except LockError:
            out.lock_failures += 1
            return np.zeros(0, np.int64), len(blocks)
        n = self.geometry.n
        self._post(ctr, tx.codewords.reshape(-1, n), res.codewords.reshape(-1, n), res.n_corrected.reshape(-1),
                   c, t, b, rx_corrected_per_lane=np.asarray(res.counters.symbol_errors, np.int64))
        pc = res.counters
        ctr.marked_blocks += pc.marked_blocks
        ctr.block_errors += pc.block_errors
        ctr.frames += frames_sent
        if cfg.payload == "frames":
            ctr.frames_ok += pc.frames_delivered
            ctr.fcs_errors += pc.fcs_errors
            if cfg.fec == "llr":
                ctr.llr_retries += frames_sent - pc.frames_delivered
        perr = payload_bit_errors(blocks, res.blocks)
        ctr.payload_bits += 64 * len(blocks)
        ctr.payload_bit_errors += int(perr.size)
        out.merge(ctr)
        return perr + 64 * block_offset, len(blocks)

    def _batch_codeword(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters, word_offset: int):
        cfg, g = self.config, self.geometry
        code = cfg.rs
        d0, d1 = cfg.data_slice
        data_ss, chan_ss = ss.spawn(2)
        msgs = np.random.default_rng(data_ss).integers(0, 1024, (P, 2, code.k), dtype=np.uint16)
        if cfg.pad_index is not None:  # rs272: the pad symbol carries no data
            msgs[:, :, cfg.pad_index] = cfg.pad_value
        cw = encode(code, msgs).reshape(-1, g.n)  # parity is sent in every mode (filler for bypass/none)
        lanes = np.ascontiguousarray(cw.reshape(P, 2 * g.n)[:, g.gather].transpose(1, 0, 2).reshape(g.n_pcsl, -1))
        rx_lanes, (L, u, c, t, b) = self._channel(lanes, chan_ss, ctr)
        rx = np.empty((P, 2 * g.n), np.uint16)
        rx[:, g.gather] = rx_lanes.reshape(g.n_pcsl, P, g.K).transpose(1, 0, 2)
        rx = rx.reshape(-1, g.n)
        if cfg.decoder is None:
            dec, ncorr = rx, np.zeros(rx.shape[0], np.int16)
        else:
            dec, ncorr = decode(code, rx, mode=cfg.decoder)
        per_lane = np.zeros(g.n_pcsl, np.int64)
        if cfg.decoder == "correct":
            fixed = np.flatnonzero(ncorr > 0)
            if fixed.size:
                rows, cols = np.nonzero(rx[fixed] != dec[fixed])
                per_lane = np.bincount(g.lane_of[fixed[rows] % 2, cols], minlength=g.n_pcsl).astype(np.int64)
        self._post(ctr, cw, dec, ncorr, c, t, b, rx_corrected_per_lane=per_lane)
        hit = np.flatnonzero(np.any(cw[:, d0:d1] != dec[:, d0:d1], axis=1))
        if hit.size == 0:
            return np.zeros(0, np.int64), cw.shape[0]
        d = (cw[hit, d0:d1] ^ dec[hit, d0:d1])
        wi, si = np.nonzero(d)
        bits = (d[wi, si][:, None] >> np.arange(10, dtype=np.uint16)) & 1
        r_, bb = np.nonzero(bits)
        pos = (hit[wi[r_]] + word_offset).astype(np.int64) * ((d1 - d0) * 10) + si[r_] * 10 + bb
        return np.sort(pos), cw.shape[0]

    def run_batch(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters, offset: int = 0):
        """Add one independent transmission of ``P`` pairs to ``ctr``.

        Returns ``(payload_errors, used)``: error offsets shifted by ``offset`` units (66b blocks at
        the ``pcs`` level, codewords at the ``codeword`` level) and the units this batch used.
        """
        if self.config.level == "pcs":
            return self._batch_pcs(int(P), ss, ctr, offset)
        return self._batch_codeword(int(P), ss, ctr, offset)

    def run(self, n_pairs: int, seed, *, batch_pairs: int = 256, keep_errors: bool = True) -> LinkResult:
        """Send ``n_pairs`` codeword pairs (at least; the ``frames`` payload rounds up a little).

        Each batch of ``batch_pairs`` pairs is an independent transmission from a fresh start
        (AM group, scrambler seed, precoder state); batch ``j`` draws its payload and each lane's
        channel from children of ``SeedSequence(seed)``, so a seed gives identical results.
        """
        if not isinstance(n_pairs, (int, np.integer)) or n_pairs <= 0:
            raise ValueError(f"n_pairs must be a positive int, got {n_pairs!r}")
        if not isinstance(batch_pairs, (int, np.integer)) or batch_pairs <= 0:
            raise ValueError(f"batch_pairs must be a positive int, got {batch_pairs!r}")
        ss = _seed_sequence(seed)
        ctr = self._new_counters()
        t0 = time.perf_counter()
        errs, offset, done = [], 0, 0
        while done < int(n_pairs):
            # one child at a time (= ss.spawn(n_batches)[j]): memory does not grow with n_pairs
            child = ss.spawn(1)[0]
            P = min(int(batch_pairs), int(n_pairs) - done)
            done += P
            e, used = self.run_batch(P, child, ctr, offset)
            offset += used
            if keep_errors and e.size:
                errs.append(e)
        ctr.seconds = time.perf_counter() - t0
        pe = np.concatenate(errs) if errs else np.zeros(0, np.int64)
        return LinkResult(self.config, ctr, pe)


# ------------------------------------------------------------------------------------- fast path
