"""Clause 119 PCS receive: lane lock + deskew + reorder -> de-interleave -> RS(544,514) decode
(correct / detect / bypass) -> error marking -> AM removal -> descrambler -> 257b -> 66b ->
frames (119.2.5).

Per-lane counters follow 119.3 / 45.2.3: symbol errors are charged to the PCS lane that carried
each corrected symbol (a deterministic map, :func:`phy802.pcs.distribution.lane_of_symbol`).
In ``detect`` mode corrected symbols are not known, so per-lane symbol errors stay 0 and every
codeword with errors counts as uncorrected.

``PcsConfig(fec="rs272")``: RS(272,258) words (34 / 68 symbols per lane and pair), the pad
symbol ignored, the stream rebuilt in units of two rs272 pairs (see :mod:`phy802.pcs.transmit`);
error marking covers the 20 blocks of an rs272 pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
from numpy.typing import NDArray

from phy802.fec import decode
from phy802.pcs import _kernels as _k
from phy802.pcs._scratch import Scratch
from phy802.pcs.alignment import LaneLock, am_bits, am_mapping, am_symbols, lock_lanes
from phy802.pcs.codec66 import Blocks66, DecodedFrames, blocks_to_frames
from phy802.pcs.config import PcsConfig
from phy802.pcs.distribution import deinterleave, deinterleave_n, lane_of_symbol
from phy802.pcs.scrambler import seed_to_history
from phy802.pcs.transcode257 import decode_257, words_for_bits
from phy802.pcs.transmit import am_pair_flags

__all__ = ["PcsReceiver", "PcsCounters", "RxResult"]


@dataclass
class PcsCounters:
    """Receive-side counters, like a PHY's registers (all plain ints / int64 arrays).

    ``lane_of_input[r]``/``skew[r]`` (in ``skew_unit``): lane map and skew found by deskew.
    ``symbol_errors[L]``: corrected symbols carried by PCS lane L.  ``marked_blocks``: 66b blocks
    whose sync header was invalidated because their pair had an uncorrectable codeword.
    ``block_errors``: 66b blocks seen as errors (invalid sync header, invalid type, /E/ codes).
    """

    n_lanes: int = 16
    lane_of_input: NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, np.intp))
    skew: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    skew_unit: str = "symbols"
    symbol_errors: NDArray[np.int64] = field(default_factory=lambda: np.zeros(16, np.int64))
    pairs: int = 0
    codewords: int = 0
    corrected_codewords: int = 0
    uncorrected_codewords: int = 0
    corrected_symbols: int = 0
    marked_pairs: int = 0
    am_groups: int = 0
    am_marker_errors: int = 0
    am_status: int = -1
    blocks_257: int = 0
    invalid_257: int = 0
    blocks_66: int = 0
    marked_blocks: int = 0
    block_errors: int = 0
    frames_delivered: int = 0
    fcs_errors: int = 0
    preamble_errors: int = 0
    frames_aborted: int = 0
    frames_truncated: int = 0

    def as_dict(self) -> dict:
        """Plain-Python dict (arrays as lists) for JSON output."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        return out


@dataclass(frozen=True)
class RxResult:
    """Receiver output: the 66b ``blocks`` (from the first AM group found), ``counters``, the
    ``frames`` (when requested), the decoded ``codewords`` ``uint16[P, 2, n]`` and the lane
    ``lock``."""

    blocks: Blocks66
    counters: PcsCounters
    frames: DecodedFrames | None
    codewords: NDArray[np.uint16]
    n_corrected: NDArray[np.int16]
    lock: LaneLock


class PcsReceiver:
    """Clause 119 receive PCS.

    Call
    ----
    ``rx(lanes, *, frames=True) -> RxResult``.  ``lanes`` is ``uint16[n_lanes, n]`` (10-bit
    symbols; lanes in any order, skew in whole symbols) or a sequence of ``uint8`` bit arrays per
    lane (any order, any bit skew, lengths may differ); all rows are taken as sampled together.
    Raises :class:`~phy802.pcs.alignment.LockError` (a ValueError) when lanes never lock.  An
    instance reuses internal scratch buffers between calls (results are always new arrays): use
    one instance per thread.
    """

    def __init__(self, config: PcsConfig | None = None) -> None:
        self.config = config or PcsConfig()
        cfg = self.config
        self._am_syms = am_symbols(cfg.markers)
        self._am_field = am_bits(cfg.markers).ravel()[am_mapping(cfg.n_lanes)]
        la, lb, _, _ = lane_of_symbol(cfg.rate, cfg.code.n)
        self._lane_of_pos = np.ascontiguousarray(np.stack([la, lb]), np.int64)  # [2, n]
        # reused internal buffers (received codewords before decoding, the 257b stream): repeated
        # calls do not page-fault fresh memory in for them; nothing returned points into them
        self._scratch = Scratch()

    def __call__(self, lanes, *, frames: bool = True) -> RxResult:
        cfg = self.config
        L = cfg.n_lanes
        K = cfg.symbols_per_pair
        aligned, lock = lock_lanes(lanes, self._am_syms, cfg.period_pairs * K, K, cfg.am_lock_tolerance,
                                   _view_ok=True)
        ctr = PcsCounters(n_lanes=L, lane_of_input=lock.lane_of_input, skew=lock.skew,
                          skew_unit=lock.unit, symbol_errors=np.zeros(L, np.int64))
        code = cfg.code
        if cfg.fec == "rs272":
            rx_cw = deinterleave_n(aligned, cfg.rate, code.n)
        else:
            # the decoder copies its input, so outside bypass the received words can be scratch
            scratch = (None if cfg.decode_mode == "bypass"
                       else self._scratch.get("rx_cw", (aligned.shape[1] // K, 2, 544), np.uint16))
            rx_cw = deinterleave(aligned, cfg.rate, _out=scratch)
        P = rx_cw.shape[0]
        ctr.pairs, ctr.codewords = P, 2 * P
        # 119.2.5.3 / 91.5.3.3: RS decoding
        if cfg.decode_mode == "bypass":
            dec, ncorr = rx_cw, np.zeros((P, 2), np.int16)
        else:
            dec, ncorr = decode(code, rx_cw, mode=cfg.decode_mode)
            ncorr = np.asarray(ncorr, np.int16)
            ctr.uncorrected_codewords = int((ncorr < 0).sum())
            ctr.corrected_codewords = int((ncorr > 0).sum())
            ctr.corrected_symbols = int(ncorr[ncorr > 0].sum())
            if ctr.corrected_codewords:
                _k.corrected_per_lane(rx_cw, dec, ncorr, self._lane_of_pos, ctr.symbol_errors)
        # AM removal (119.2.5.4) and rebuilding the scrambled 257b stream
        am = am_pair_flags(cfg, P)
        n_groups = int(am.sum())
        n257 = cfg.data_blocks_257(P)
        am_words = np.zeros((n_groups, words_for_bits(cfg.am_bits)), np.uint64)
        if cfg.fec == "rs272":  # units of two rs272 pairs in the KP4 message layout (transmit.py)
            Q, k = -(-P // 2), cfg.data_symbols
            d0 = 0 if cfg.pad_position == "last" else 1
            half = np.zeros((2 * Q, 2, k), np.uint16)
            half[:P] = dec[:, :, d0:d0 + k]
            unit = np.ascontiguousarray(half.reshape(Q, 2, 2, k).transpose(0, 2, 1, 3).reshape(Q, 2, 2 * k))
            n_words = words_for_bits(257 * (n257 + 20 * (P % 2)))
            data = self._scratch.get("data", (n_words,), np.uint64)
            _k.messages_to_data(unit, am[::2], cfg.am_bits, data, am_words)
        else:
            data = self._scratch.get("data", (words_for_bits(257 * n257),), np.uint64)  # fully written below
            _k.messages_to_data(dec, am, cfg.am_bits, data, am_words)
        ctr.am_groups = n_groups
        if n_groups:
            gb = np.unpackbits(am_words.view(np.uint8), axis=1, bitorder="little")
            nf = self._am_field.size
            ctr.am_marker_errors = int((gb[:, :nf] != self._am_field).any(axis=1).sum())
            sf = gb[-1, cfg.am_bits - 3: cfg.am_bits]
            ctr.am_status = int(sf[0]) | int(sf[1]) << 1 | int(sf[2]) << 2
        # 119.2.5.5 descramble, 119.2.5.6 257b -> 66b
        _k.descramble(data, 257 * n257, seed_to_history(cfg.scrambler_seed))
        blocks, bad257 = decode_257(data, n257)
        ctr.blocks_257, ctr.invalid_257 = n257, int(bad257.sum())
        ctr.blocks_66 = len(blocks)
        if cfg.decode_mode != "bypass" and cfg.error_marking == "pair":
            bad_pair = (ncorr < 0).any(axis=1)
            if bad_pair.any():
                nblk = 4 * (cfg.blocks_per_pair - cfg.am_blocks * am.astype(np.int64))
                mask = np.repeat(bad_pair, nblk)
                blocks.sync[mask] = 3
                ctr.marked_pairs = int(bad_pair.sum())
                ctr.marked_blocks = int(mask.sum())
        dframes = None
        if frames:
            dframes = blocks_to_frames(blocks)
            ctr.block_errors = dframes.block_counts["error_blocks"]
            ctr.frames_delivered = len(dframes.delivered)
            ctr.fcs_errors = dframes.fcs_errors
            ctr.preamble_errors = dframes.preamble_errors
            ctr.frames_aborted = dframes.aborted
            ctr.frames_truncated = dframes.truncated
        else:
            # 257b decoding only yields headers 01, 10 or 11 (error), so counting 11 suffices
            ctr.block_errors = int(np.count_nonzero(blocks.sync == 3))
        return RxResult(blocks, ctr, dframes, dec, ncorr, lock)
