"""IEEE 802.3 Clause 119 PCS (400GBASE-R / 200GBASE-R), bit-exact, transmit and receive.
Owns 64b/66b, 256b/257b, the scrambler, alignment markers, FEC distribution and lane interleave.

Blocks follow the standard: :mod:`.codec66` (Clause 82 64b/66b and frames), :mod:`.transcode257`,
:mod:`.scrambler`, :mod:`.alignment` (markers, lock/deskew), :mod:`.distribution` (pre-FEC
distribution and lane interleave), :mod:`.transmit`, :mod:`.receive`, :mod:`.payload` (error
maps).  The RS code is :mod:`phy802.fec`.

Example
-------
>>> from phy802.pcs import PcsConfig, PcsTransmitter, PcsReceiver, frames_to_blocks
>>> cfg = PcsConfig(am_spacing=80)
>>> blocks = frames_to_blocks([bytes(60)])
>>> rx = PcsReceiver(cfg)(PcsTransmitter(cfg)(blocks))
>>> rx.frames.frames == [bytes(60)]
True
"""

from phy802.pcs.alignment import LockError
from phy802.pcs.codec66 import (
    Blocks66,
    DecodedFrames,
    SYNC_CTRL,
    SYNC_DATA,
    blocks_to_frames,
    crc32,
    error_blocks,
    frames_to_blocks,
    idle_blocks,
    ordered_set_blocks,
)
from phy802.pcs.config import PcsConfig
from phy802.pcs.distribution import bits_to_symbols, deinterleave, interleave, lane_of_symbol, symbols_to_bits
from phy802.pcs.payload import block_error_mask, data_bit_errors, payload_bit_errors, stream_bit_errors
from phy802.pcs.receive import PcsCounters, PcsReceiver, RxResult
from phy802.pcs.transmit import PcsTransmitter, TxResult

__all__ = [
    "PcsConfig", "PcsTransmitter", "PcsReceiver", "PcsCounters", "TxResult", "RxResult",
    "Blocks66", "DecodedFrames", "SYNC_DATA", "SYNC_CTRL", "frames_to_blocks", "blocks_to_frames",
    "idle_blocks", "error_blocks", "ordered_set_blocks", "crc32", "lane_of_symbol", "interleave",
    "deinterleave", "block_error_mask", "payload_bit_errors", "stream_bit_errors",
    "data_bit_errors", "LockError", "symbols_to_bits", "bits_to_symbols",
]
