"""Clause 119 PCS transmit: 66b blocks -> 257b -> scrambler -> AM insertion -> pre-FEC
distribution -> RS(544,514) -> PCS lanes (119.2.4).

One call transmits one stream from a fresh start: the stream begins with an AM group, the
scrambler starts from ``config.scrambler_seed`` and the pad PRBS9 from ``config.prbs9_seed``.
There is no rate matching: every input block is sent and the input is padded with idle blocks to
fill the last codeword pair (the emulator's lane rate is set by the input, not a clock).

``PcsConfig(fec="rs272")``: the stream is built exactly as for KP4 in units of two
rs272 pairs (40 blocks, an AM group at the start of every ``period_pairs``-th rs272 pair); rs272
pair ``2q + s`` takes the 10-bit symbols ``257 s .. 257 s + 256`` of the KP4-style A/B messages of
unit ``q`` (the round robin of 119.2.4.5 over its own 5140 bits), plus its pad symbol, then
RS(272,258) and the 119.2.4.7 interleave with n = 272.  An odd number of rs272 pairs ends with
half a unit, whose other half (idle blocks) is never sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from phy802.fec import KP4, RS272, encode
from phy802.pcs import _kernels as _k
from phy802.pcs._scratch import Scratch
from phy802.pcs.alignment import am_group_bits
from phy802.pcs.codec66 import BLOCK_TYPES, IDLE_PAYLOAD, Blocks66, check_blocks
from phy802.pcs.config import PcsConfig
from phy802.pcs.distribution import interleave, interleave_n
from phy802.pcs.scrambler import seed_to_history
from phy802.pcs.transcode257 import words_for_bits

__all__ = ["PcsTransmitter", "TxResult", "am_pair_flags", "pack_am_groups"]


@dataclass(frozen=True)
class TxResult:
    """Everything the transmitter produced.

    ``lanes``: ``uint16[n_lanes, P * K]``; ``codewords``: ``uint16[P, 2, n]`` (A, B; n = 544, or
    272 for rs272);
    ``n_input_blocks`` 66b blocks were given and ``n_pad_blocks`` idle blocks appended.
    """

    lanes: NDArray[np.uint16]
    codewords: NDArray[np.uint16]
    n_input_blocks: int
    n_pad_blocks: int

    @property
    def n_pairs(self) -> int:
        return int(self.codewords.shape[0])


def am_pair_flags(config: PcsConfig, n_pairs: int) -> NDArray[np.bool_]:
    """``am[p]``: pair p starts with an AM group (pairs 0, period, 2 period, ...)."""
    return (np.arange(n_pairs) % config.period_pairs) == 0


def pack_am_groups(config: PcsConfig, n_groups: int) -> NDArray[np.uint64]:
    """``uint64[n_groups, words]`` packed AM-group bits (pad PRBS9 running on across groups)."""
    bits = am_group_bits(config.markers, n_groups, config.prbs9_seed, config.am_status)
    nw = words_for_bits(bits.shape[1])
    out = np.zeros((n_groups, nw), np.uint64)
    packed = np.packbits(bits, axis=1, bitorder="little")
    out.view(np.uint8)[:, : packed.shape[1]] = packed
    return out


_VALID_TYPE = np.zeros(256, dtype=np.bool_)  # Clause 82 control block types (Figure 82-5)
_VALID_TYPE[list(BLOCK_TYPES)] = True
_VALID_TYPE.setflags(write=False)


def _fast_blocks(blocks) -> Blocks66 | None:
    """``blocks`` as-is when it is already a pair of 1-D contiguous ``uint8``/``uint64`` arrays of
    equal length (what :func:`check_blocks` would return unchanged once the values are checked,
    which the fused kernel does); else None (take the checked path)."""
    try:
        sync, payload = blocks
    except (TypeError, ValueError):
        return None
    if not (isinstance(sync, np.ndarray) and isinstance(payload, np.ndarray)):
        return None
    if (sync.dtype != np.uint8 or payload.dtype != np.uint64 or sync.ndim != 1 or payload.ndim != 1
            or sync.shape != payload.shape or not sync.flags.c_contiguous or not payload.flags.c_contiguous):
        return None
    return Blocks66(sync, payload)


class PcsTransmitter:
    """Clause 119 transmit PCS.

    Parameters
    ----------
    config : :class:`PcsConfig`.
    on_invalid : ``"raise"`` (default) or ``"error_block"``: what to do with input blocks that
        have an invalid sync header or unknown type (see :func:`~phy802.pcs.codec66.check_blocks`).

    Call
    ----
    ``tx(blocks) -> uint16[n_lanes, n_symbols]``: the PCS lanes, 10-bit symbols each sent bit 0
    first.  :meth:`transmit` returns a :class:`TxResult` with the codewords too.  An instance
    reuses internal scratch buffers between calls (outputs are always new arrays): use one
    instance per thread.
    """

    def __init__(self, config: PcsConfig | None = None, *, on_invalid: str = "raise") -> None:
        self.config = config or PcsConfig()
        self.on_invalid = on_invalid
        # packed AM groups of the longest stream so far: group g does not depend on how many
        # follow (the pad PRBS9 runs on from group 0), so shorter streams use a prefix
        self._am_words = pack_am_groups(self.config, 0)
        # per-instance scratch buffers (stream words, messages): internal only, never returned, so
        # repeated calls do not page-fault fresh memory in for them
        self._scratch = Scratch()

    def __call__(self, blocks: Blocks66 | tuple) -> NDArray[np.uint16]:
        return self.transmit(blocks).lanes

    def messages(self, blocks: Blocks66 | tuple) -> tuple[NDArray[np.uint16], int, int]:
        """Stages up to 119.2.4.5: returns ``(msgs uint16[P, 2, k], n_input, n_pad)`` (k = 514, or
        258 with the pad for rs272)."""
        if self.config.fec == "rs272":
            return self._messages_rs272(blocks)
        return self._messages(blocks, scratch=False)

    def _blocks(self, blocks: Blocks66 | tuple) -> Blocks66:
        """The input as Blocks66: as given when it already has the right dtypes, else checked."""
        b = _fast_blocks(blocks)
        return b if b is not None else check_blocks(blocks, on_invalid=self.on_invalid)

    def _transcode_scramble(self, blocks, b: Blocks66, n257: int, data: NDArray[np.uint64]) -> None:
        """119.2.4.2 transcode (idle padding appended to ``n257`` blocks) + 119.2.4.3 scramble into
        ``data``, one pass; the kernel also validates the input and stops at a bad block, which the
        checked path then reports or replaces (``on_invalid``)."""
        hist = seed_to_history(self.config.scrambler_seed)
        n_bad, smax = _k.tx_transcode_scramble(b.sync, b.payload, n257, _VALID_TYPE, IDLE_PAYLOAD, hist, data)
        if n_bad or smax > 3:
            b = check_blocks(blocks, on_invalid=self.on_invalid)
            n_bad, smax = _k.tx_transcode_scramble(b.sync, b.payload, n257, _VALID_TYPE, IDLE_PAYLOAD, hist, data)
            assert n_bad == 0 and smax <= 3

    def _am_words_for(self, am: NDArray[np.bool_]) -> NDArray[np.uint64]:
        """Packed 119.2.4.4 AM groups for the ``am.sum()`` groups of this stream (cached, grown)."""
        n_groups = int(am.sum())
        if n_groups > self._am_words.shape[0]:
            self._am_words = pack_am_groups(self.config, n_groups)
            self._am_words.setflags(write=False)
        return self._am_words[:n_groups]

    def _messages_rs272(self, blocks) -> tuple[NDArray[np.uint16], int, int]:
        """:meth:`messages` for rs272 (module docstring): KP4-style units of two pairs, split."""
        cfg = self.config
        b = self._blocks(blocks)
        n_in = len(b.sync)
        P = cfg.pairs_for_blocks66(n_in)
        n257 = cfg.data_blocks_257(P)
        Q = -(-P // 2)
        n257_q = n257 + 20 * (P % 2)  # the unsent half unit: 20 idle data blocks (never an AM)
        data = np.zeros(words_for_bits(257 * n257_q), np.uint64)
        self._transcode_scramble(blocks, b, n257_q, data)
        am = (np.arange(Q) % (cfg.period_pairs // 2)) == 0  # AM group at rs272 pair 2q, q = 0, period/2, ..
        unit = np.empty((Q, 2, 514), np.uint16)
        _k.data_to_messages(data, self._am_words_for(am), am, np.cumsum(am) - 1, cfg.am_bits, unit)  # 119.2.4.5
        k = cfg.data_symbols
        msgs = np.empty((2 * Q, 2, k + 1), np.uint16)
        d0 = 0 if cfg.pad_position == "last" else 1
        msgs[:, :, d0:d0 + k] = unit.reshape(Q, 2, 2, k).transpose(0, 2, 1, 3).reshape(2 * Q, 2, k)
        msgs[:, :, cfg.pad_index] = cfg.pad_value
        return np.ascontiguousarray(msgs[:P]), n_in, 4 * n257 - n_in

    def _messages(self, blocks: Blocks66 | tuple, scratch: bool) -> tuple[NDArray[np.uint16], int, int]:
        """:meth:`messages`; with ``scratch`` the messages land in a reused buffer (for
        :meth:`transmit`, which only feeds them to the encoder)."""
        cfg = self.config
        b = self._blocks(blocks)
        n_in = len(b.sync)
        P = cfg.pairs_for_blocks66(n_in)
        n257 = cfg.data_blocks_257(P)
        n_pad = 4 * n257 - n_in
        data = self._scratch.get("data", (words_for_bits(257 * n257),), np.uint64)
        data[-1] = 0
        self._transcode_scramble(blocks, b, n257, data)
        am = am_pair_flags(cfg, P)
        am_words = self._am_words_for(am)
        group_of = np.cumsum(am) - 1
        # stream symbol 2i -> A[i], 2i + 1 -> B[i]
        msgs = self._scratch.get("msgs", (P, 2, 514), np.uint16) if scratch else np.empty((P, 2, 514), np.uint16)
        _k.data_to_messages(data, am_words, am, group_of, cfg.am_bits, msgs)  # 119.2.4.5
        return msgs, n_in, n_pad

    def transmit(self, blocks: Blocks66 | tuple) -> TxResult:
        if self.config.fec == "rs272":
            msgs, n_in, n_pad = self._messages_rs272(blocks)
            cw = encode(RS272, msgs)  # RS(272,258), same field and generator form as 119.2.4.6
            return TxResult(interleave_n(cw, self.config.rate), cw, n_in, n_pad)
        msgs, n_in, n_pad = self._messages(blocks, scratch=True)
        cw = encode(KP4, msgs)  # 119.2.4.6
        return TxResult(interleave(cw, self.config.rate), cw, n_in, n_pad)  # 119.2.4.7
