"""256b/257b transcoding (91.5.2.5, used by 119.2.4.2).

Four 66b blocks ``c_0..c_3`` (oldest first) become one 257-bit block ``x<256:0>`` (``x<0>`` sent
first):

* all four data: ``x<0> = 1``, ``x<64j+64:64j+1> = c_j<65:2>``;
* otherwise ``x<0> = 0``, ``x<j+1> = c_j<1>`` (1 = data, 0 = control), then the payloads in order
  with the high nibble of the first control block's type octet removed (payload bits 4..7); the
  receiver restores it from the low nibble (the eleven Clause 82 types have distinct low nibbles).

257b blocks are held as a packed stream (``uint64`` words, stream bit i = word[i//64] bit i%64),
block g at bits ``[257 g, 257 g + 257)``.

Choices for open points: on transmit, blocks with an invalid sync header or an unknown control
type are rejected (ValueError) or replaced by error blocks (``on_invalid="error_block"``) before
transcoding ([?] in 119.2.4.2).  On receive, a 257b block with ``x<0> = 0`` and header mask
``1111``, or whose first control block has an unknown type nibble, yields four blocks with sync
header ``11`` (decoded as error blocks by :func:`phy802.pcs.codec66.blocks_to_frames`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phy802.pcs import _kernels as _k
from phy802.pcs.codec66 import BLOCK_TYPES, Blocks66, check_blocks

__all__ = ["encode_257", "decode_257", "words_for_bits", "bits_of", "words_of", "HI_OF_LO"]

#: full Clause 82 block type for each low nibble (-1 = no such type)
HI_OF_LO = np.full(16, -1, dtype=np.int64)
for _t in BLOCK_TYPES:
    HI_OF_LO[_t & 0xF] = _t
assert (HI_OF_LO >= 0).sum() == len(BLOCK_TYPES)  # the low nibbles are distinct (notes section 1)


def words_for_bits(nbits: int) -> int:
    """Words needed to hold ``nbits`` packed bits plus the one spare word the kernels need."""
    return (nbits + 63) // 64 + 1


def encode_257(blocks: Blocks66 | tuple, *, on_invalid: str = "raise") -> NDArray[np.uint64]:
    """Transcode N (multiple of 4) 66b blocks into a packed stream of N/4 257-bit blocks."""
    sync, payload = check_blocks(blocks, multiple_of=4, on_invalid=on_invalid)
    ng = sync.shape[0] // 4
    out = np.zeros(words_for_bits(257 * ng), np.uint64)
    _k.transcode_encode(np.ascontiguousarray(sync), np.ascontiguousarray(payload), out)
    return out


def decode_257(stream: NDArray[np.uint64], n_blocks257: int) -> tuple[Blocks66, NDArray[np.bool_]]:
    """Inverse of :func:`encode_257`; returns ``(blocks, invalid257)`` where ``invalid257[g]``
    flags 257b blocks that could not be decoded (their four 66b blocks get sync header 11)."""
    stream = np.ascontiguousarray(stream, dtype=np.uint64)
    if n_blocks257 < 0 or stream.size < words_for_bits(257 * n_blocks257):
        raise ValueError(f"stream of {stream.size} words is too short for {n_blocks257} 257b blocks "
                         f"(need {words_for_bits(257 * n_blocks257)} incl. one spare word)")
    sync = np.empty(4 * n_blocks257, np.uint8)
    payload = np.empty(4 * n_blocks257, np.uint64)
    bad = np.zeros(n_blocks257, np.uint8)
    _k.transcode_decode(stream, n_blocks257, HI_OF_LO, sync, payload, bad)
    return Blocks66(sync, payload), bad.astype(bool)


def bits_of(stream: NDArray[np.uint64], nbits: int) -> NDArray[np.uint8]:
    """Unpack the first ``nbits`` bits of a packed stream into ``uint8`` 0/1 (sending order)."""
    return np.unpackbits(np.ascontiguousarray(stream, dtype="<u8").view(np.uint8), bitorder="little")[:nbits]


def words_of(bits: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """Pack 0/1 bits (sending order) into a stream with a spare word."""
    bits = np.asarray(bits, dtype=np.uint8)
    out = np.zeros(words_for_bits(bits.size), np.uint64)
    packed = np.packbits(bits, bitorder="little")
    out.view(np.uint8)[: packed.size] = packed
    return out
