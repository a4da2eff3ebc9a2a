"""Clause 82 64b/66b coding of Ethernet frames (the part of the Clause 119 PCS above transcoding).

Block representation (used by the whole :mod:`phy802.pcs` package): a :class:`Blocks66` pair of
arrays of equal length N,

* ``sync`` ``uint8[N]``: the 2-bit sync header as ``c<0> | c<1> << 1`` where ``c<0>`` is sent
  first.  Data blocks (``01`` on the wire) are **2** (:data:`SYNC_DATA`), control blocks (``10``)
  are **1** (:data:`SYNC_CTRL`); 0 and 3 are invalid headers.
* ``payload`` ``uint64[N]``: bit ``i`` is block bit ``c<i+2>``; octet ``k`` of the block is
  ``(payload >> 8k) & 0xFF`` and octets are sent LSB first.  For a control block octet 0 is the
  block type field.

Frames given to :func:`frames_to_blocks` are MAC frames *without* preamble/SFD (destination
address .. end of payload); the FCS (CRC-32, same as :func:`zlib.crc32`, sent low octet first) is
appended unless ``add_fcs=False``.  The start block carries the preamble ``55 55 55 55 55 55`` and
SFD ``D5`` in octets 1..7 (82.2.3, /S/ replaces the first preamble octet).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np
from numpy.typing import NDArray

from phy802.pcs import _kernels as _k

__all__ = [
    "Blocks66", "SYNC_DATA", "SYNC_CTRL", "BLOCK_TYPES", "TERMINATE_TYPES", "IDLE_PAYLOAD",
    "ERROR_PAYLOAD", "START_PAYLOAD", "crc32", "idle_blocks", "error_blocks", "ordered_set_blocks",
    "concat_blocks", "check_blocks", "frames_to_blocks", "blocks_to_frames", "DecodedFrames",
    "block_to_bits", "bits_to_block",
]

SYNC_DATA = 2  # c<0>=0, c<1>=1 ("01" in sending order)
SYNC_CTRL = 1  # c<0>=1, c<1>=0 ("10")

#: Clause 82 control block types (Figure 82-5): 0x1E C, 0x78 S, 0x4B O, 0x87..0xFF T0..T7.
BLOCK_TYPES = (0x1E, 0x78, 0x4B, 0x87, 0x99, 0xAA, 0xB4, 0xCC, 0xD2, 0xE1, 0xFF)
#: terminate block type for 0..7 data octets in the block
TERMINATE_TYPES = (0x87, 0x99, 0xAA, 0xB4, 0xCC, 0xD2, 0xE1, 0xFF)

#: idle block: type 0x1E and eight idle control codes /I/ = 0x00
IDLE_PAYLOAD = np.uint64(0x1E)
#: error block: type 0x1E and eight /E/ = 0x1E codes (7 bits each, from bit 8)
ERROR_PAYLOAD = np.uint64(0x1E | sum(0x1E << (8 + 7 * i) for i in range(8)))
#: start block: /S/ type 0x78, preamble 0x55 x 6, SFD 0xD5
START_PAYLOAD = np.uint64(int.from_bytes(bytes([0x78, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0xD5]), "little"))

_TERM_LEN = np.full(256, -1, dtype=np.int64)
for _i, _t in enumerate(TERMINATE_TYPES):
    _TERM_LEN[_t] = _i
_VALID_TYPE = np.zeros(256, dtype=bool)
_VALID_TYPE[list(BLOCK_TYPES)] = True


class Blocks66(NamedTuple):
    """A stream of 66-bit blocks (see the module docstring for the bit conventions)."""

    sync: NDArray[np.uint8]
    payload: NDArray[np.uint64]

    def __len__(self) -> int:  # type: ignore[override]
        return int(self.sync.shape[0])


def crc32(data: bytes) -> int:
    """Ethernet FCS of ``data`` (CRC-32, reflected, as :func:`zlib.crc32`)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def _const_blocks(n: int, sync: int, payload: np.uint64) -> Blocks66:
    if n < 0:
        raise ValueError(f"number of blocks must be >= 0, got {n}")
    return Blocks66(np.full(n, sync, np.uint8), np.full(n, payload, np.uint64))


def idle_blocks(n: int) -> Blocks66:
    """``n`` idle control blocks (type 0x1E, all /I/)."""
    return _const_blocks(n, SYNC_CTRL, IDLE_PAYLOAD)


def error_blocks(n: int) -> Blocks66:
    """``n`` error control blocks (type 0x1E, all /E/), i.e. EBLOCK_T/R."""
    return _const_blocks(n, SYNC_CTRL, ERROR_PAYLOAD)


def ordered_set_blocks(n: int, kind: str = "local_fault") -> Blocks66:
    """``n`` ordered-set blocks (type 0x4B, O code 0): ``local_fault`` (D3 = 0x01) or
    ``remote_fault`` (D3 = 0x02), D1 = D2 = 0 (81.3.4 sequence ordered sets)."""
    d3 = {"local_fault": 1, "remote_fault": 2}
    if kind not in d3:
        raise ValueError(f"ordered set kind must be one of {sorted(d3)}, got {kind!r}")
    return _const_blocks(n, SYNC_CTRL, np.uint64(0x4B | (d3[kind] << 24)))


def concat_blocks(*parts: Blocks66) -> Blocks66:
    """Concatenate block streams."""
    return Blocks66(np.concatenate([p.sync for p in parts]).astype(np.uint8),
                    np.concatenate([p.payload for p in parts]).astype(np.uint64))


def check_blocks(blocks: Blocks66 | tuple, *, name: str = "blocks", multiple_of: int = 1,
                 on_invalid: str = "raise") -> Blocks66:
    """Validate a block stream and return it as a :class:`Blocks66` of the right dtypes.

    Parameters
    ----------
    multiple_of : the length must be a multiple of this (4 for the 257b transcoder).
    on_invalid : ``"raise"`` (ValueError naming the first bad block) or ``"error_block"``
        (replace blocks with an invalid sync header or an unknown control type by error blocks,
        as a transmit PCS does with bad input from the MII).
    """
    try:
        sync, payload = blocks
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a (sync, payload) pair of arrays") from None
    sync = np.asarray(sync)
    payload = np.asarray(payload)
    if sync.ndim != 1 or payload.ndim != 1 or sync.shape != payload.shape:
        raise ValueError(f"{name}: sync and payload must be 1-D of equal length, got shapes "
                         f"{sync.shape} and {payload.shape}")
    if sync.dtype != np.uint8:
        if sync.dtype.kind not in "iu" or (sync.size and (sync.min() < 0 or sync.max() > 3)):
            raise ValueError(f"{name}: sync headers must be 2-bit integer values 0..3")
        sync = sync.astype(np.uint8)
    if payload.dtype != np.uint64:
        if payload.dtype.kind not in "iu":
            raise ValueError(f"{name}: payload must be an integer array (uint64), got {payload.dtype}")
        payload = payload.astype(np.uint64)
    if sync.shape[0] % multiple_of:
        raise ValueError(f"{name}: length {sync.shape[0]} is not a multiple of {multiple_of} 66b blocks")
    sync = np.ascontiguousarray(sync)
    payload = np.ascontiguousarray(payload)
    n_bad, first, smax = _k.validate_blocks(sync, payload, _VALID_TYPE)  # one pass, no temporaries
    if smax > 3:
        raise ValueError(f"{name}: sync headers must be 2-bit values 0..3, got {smax}")
    if n_bad:
        i = int(first)
        if on_invalid == "raise":
            what = ("invalid sync header " + format(int(sync[i]), "02b")[::-1]) if sync[i] in (0, 3) \
                else f"unknown Clause 82 block type 0x{int(payload[i]) & 0xFF:02X}"
            raise ValueError(f"{name}: block {i}: {what} ({int(n_bad)} bad block(s) in all)")
        if on_invalid != "error_block":
            raise ValueError(f"on_invalid must be 'raise' or 'error_block', got {on_invalid!r}")
        bad = (sync == 0) | (sync == 3)
        bad |= (sync == SYNC_CTRL) & ~_VALID_TYPE[(payload & np.uint64(0xFF)).astype(np.intp)]
        sync = sync.copy()
        payload = payload.copy()
        sync[bad] = SYNC_CTRL
        payload[bad] = ERROR_PAYLOAD
    return Blocks66(sync, payload)


def frames_to_blocks(frames: Sequence[bytes], idle_blocks: int = 1, *, add_fcs: bool = True,
                     lead_idles: int = 0, align: int = 4) -> Blocks66:
    """Encode MAC frames into Clause 82 66b blocks.

    Each frame becomes a start block (preamble/SFD), ``len // 8`` data blocks and a terminate block
    holding the last ``len % 8`` octets (the rest of that block is /I/), followed by
    ``idle_blocks`` idle blocks.  ``lead_idles`` idle blocks come first and idle blocks are
    appended until the length is a multiple of ``align`` (the 257b transcoder needs 4).
    Vectorised: one Python step per frame (for the FCS), none per block or octet.
    """
    if idle_blocks < 0 or lead_idles < 0 or align < 1:
        raise ValueError("idle_blocks and lead_idles must be >= 0 and align >= 1")
    bufs = []
    for i, f in enumerate(frames):
        if not isinstance(f, (bytes, bytearray, memoryview)):
            raise ValueError(f"frame {i}: expected bytes, got {type(f).__name__}")
        f = bytes(f)
        bufs.append(f + crc32(f).to_bytes(4, "little") if add_fcs else f)
    n = np.array([len(b) for b in bufs], dtype=np.int64)
    nblk = 2 + n // 8 + idle_blocks
    start = lead_idles + np.concatenate(([0], np.cumsum(nblk)[:-1])).astype(np.int64)
    total = lead_idles + int(nblk.sum())
    total += (-total) % align
    pb = np.zeros((total, 8), dtype=np.uint8)
    pb[:, 0] = 0x1E  # idle blocks everywhere first
    sync = np.full(total, SYNC_CTRL, dtype=np.uint8)
    if len(bufs):
        pb[start] = np.frombuffer(START_PAYLOAD.tobytes(), np.uint8)
        full = 8 * (n // 8)
        term = start + 1 + n // 8
        pb[term, 0] = np.asarray(TERMINATE_TYPES, np.uint8)[n % 8]
        flat = pb.reshape(-1)
        cat = np.frombuffer(b"".join(bufs), dtype=np.uint8)
        fi = np.repeat(np.arange(len(bufs)), n)
        j = np.arange(cat.size, dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        dest = 8 * (start[fi] + 1) + j + (j >= full[fi])
        flat[dest] = cat
        nd = n // 8
        dblk = np.repeat(start + 1, nd) + (np.arange(int(nd.sum())) - np.repeat(np.cumsum(nd) - nd, nd))
        sync[dblk] = SYNC_DATA
    return Blocks66(sync, pb.reshape(-1).view("<u8").astype(np.uint64))


@dataclass(frozen=True)
class DecodedFrames:
    """Result of :func:`blocks_to_frames`.

    ``frames``: every frame ended by a terminate block, FCS stripped; ``fcs_ok[i]`` says whether
    its FCS matched and ``preamble_ok[i]`` whether its start block carried the preamble and SFD
    (55 55 55 55 55 55 D5).  Frames cut short by an error/control block (``aborted``) or by the
    end of the stream (``truncated``) are counted but not returned.
    """

    frames: list[bytes]
    fcs_ok: NDArray[np.bool_]
    aborted: int = 0
    truncated: int = 0
    block_counts: dict[str, int] = field(default_factory=dict)
    preamble_ok: NDArray[np.bool_] | None = None

    def __post_init__(self) -> None:
        if self.preamble_ok is None:
            object.__setattr__(self, "preamble_ok", np.ones(len(self.frames), dtype=bool))

    @property
    def delivered(self) -> list[bytes]:
        """Frames with a good preamble/SFD and a good FCS (what a MAC would pass up)."""
        return [f for f, ok, pre in zip(self.frames, self.fcs_ok, self.preamble_ok) if ok and pre]

    @property
    def preamble_errors(self) -> int:
        return int((~self.preamble_ok).sum())

    @property
    def fcs_errors(self) -> int:
        return int((~self.fcs_ok).sum())


_COUNT_NAMES = ("data", "control", "idle", "ordered_set", "error_blocks", "invalid_sync",
                "invalid_type", "sequence_errors", "truncated")


def blocks_to_frames(blocks: Blocks66 | tuple, *, has_fcs: bool = True) -> DecodedFrames:
    """Decode a 66b block stream into frames and check each FCS (82.2 receive, simplified).

    Blocks with an invalid sync header or an unknown type, and error codes, count as error
    blocks; a frame interrupted by any non-data, non-terminate block is aborted.
    """
    sync, payload = _loose(blocks)
    n = sync.shape[0]
    out = np.empty(8 * n + 8, dtype=np.uint8)
    nmax = n // 2 + 1
    starts = np.zeros(nmax, np.int64)
    lens = np.zeros(nmax, np.int64)
    status = np.zeros(nmax, np.int64)
    counts = np.zeros(len(_COUNT_NAMES), np.int64)
    nf = _k.blocks_to_bytes(sync, payload, _TERM_LEN, out, starts, lens, status, counts)
    raw = out.tobytes()
    frames, ok = [], []
    for s, ln in zip(starts[:nf][status[:nf] == 0].tolist(), lens[:nf][status[:nf] == 0].tolist()):
        f = raw[s:s + ln]
        if has_fcs:
            good = ln >= 4 and crc32(f[:-4]) == int.from_bytes(f[-4:], "little")
            frames.append(f[:-4] if ln >= 4 else f)
        else:
            good = True
            frames.append(f)
        ok.append(good)
    bc = dict(zip(_COUNT_NAMES, counts.tolist()))
    # The kernel opens one frame entry per start block, in stream order, so entry i belongs to the
    # i-th start block; its octets 1..7 must be the preamble and SFD (82.2.3.3, 4.2.5).
    start_blocks = np.flatnonzero((sync == SYNC_CTRL) & ((payload & np.uint64(0xFF)) == np.uint64(0x78)))
    pre = (payload[start_blocks[:nf]] >> np.uint64(8)) == (START_PAYLOAD >> np.uint64(8))
    return DecodedFrames(frames, np.array(ok, dtype=bool), int((status[:nf] == 1).sum()),
                         bc.pop("truncated"), bc, pre[status[:nf] == 0])


def _loose(blocks) -> Blocks66:
    """Shape/dtype checks only (invalid headers/types are legal receive input)."""
    try:
        sync, payload = blocks
    except (TypeError, ValueError):
        raise ValueError("blocks: expected a (sync, payload) pair of arrays") from None
    sync = np.ascontiguousarray(sync, dtype=np.uint8)
    payload = np.ascontiguousarray(payload, dtype=np.uint64)
    if sync.ndim != 1 or sync.shape != payload.shape:
        raise ValueError(f"blocks: sync and payload must be 1-D of equal length, got {sync.shape}, {payload.shape}")
    return Blocks66(sync, payload)


def block_to_bits(blocks: Blocks66 | tuple) -> NDArray[np.uint8]:
    """Unpack blocks into ``uint8[N, 66]`` bits in sending order (c<0> first)."""
    sync, payload = _loose(blocks)
    bits = np.empty((sync.shape[0], 66), np.uint8)
    bits[:, 0] = sync & 1
    bits[:, 1] = (sync >> 1) & 1
    bits[:, 2:] = np.unpackbits(payload.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1,
                                bitorder="little")
    return bits


def bits_to_block(bits: NDArray[np.uint8]) -> Blocks66:
    """Inverse of :func:`block_to_bits`."""
    bits = np.asarray(bits, dtype=np.uint8)
    if bits.ndim != 2 or bits.shape[1] != 66:
        raise ValueError(f"bits must have shape [N, 66], got {bits.shape}")
    sync = (bits[:, 0] | (bits[:, 1] << 1)).astype(np.uint8)
    payload = np.packbits(bits[:, 2:], axis=1, bitorder="little").view("<u8").reshape(-1).astype(np.uint64)
    return Blocks66(sync, payload)
