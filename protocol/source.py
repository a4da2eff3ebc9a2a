"""The ``ErrorSource`` protocol: where the payload bit errors of a link come from.

Coordinate system
-----------------
Every error source and every trace indexes the **PCS payload stream** of one direction of a
link: the bits the MAC hands to the PCS (preamble/SFD, headers, payload, FCS and inter-packet
idles all included), 256 bits per 257-bit transcoded block, in transmission order.  At 400G this
stream runs at 400 Gb/s; the line carries 425 Gb/s because of 256b/257b transcoding, the RS(544,514)
parity and the alignment markers (see :mod:`protocol.framing` for the exact mapping).  Bit ``i`` of
the stream is bit ``i % 8`` (LSB first, as Ethernet sends octets) of stream octet ``i // 8``.

``take(n_bits)`` returns the sorted ``int64`` offsets, relative to the current cursor, of the
stream bits in ``[cursor, cursor + n_bits)`` that are delivered flipped, and advances the cursor by
``n_bits``.  Sources that know more (lanes, decoder marks) also offer ``take_chunk`` returning an
:class:`ErrorChunk`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ErrorSource",
    "DetailedErrorSource",
    "ErrorChunk",
    "FLAG_MISCORRECTED",
    "FLAG_UNDETECTED",
    "empty_chunk",
]

# Per-error flags (uint8 bit field) stored next to each payload error offset.
FLAG_MISCORRECTED = 1  # the decoder "corrected" the codeword to a wrong codeword (residual + added errors)
FLAG_UNDETECTED = 2  # detect-only/ieee mode: the codeword's error pattern was itself a codeword (zero syndrome)


@dataclass(frozen=True)
class ErrorChunk:
    """The errors of one window ``[0, n_bits)`` of a payload stream (offsets relative to the window).

    Attributes
    ----------
    n_bits : int
        Window length in payload-stream bits.
    offsets : int64[k]
        Sorted offsets of payload bits delivered flipped.
    lanes : int8[k]
        PCS lane (0..15 at 400G, 0..7 at 200G) of the line error each payload error comes from;
        a descrambler copy (n+39, n+58) keeps its origin's lane.
    flags : uint8[k]
        ``FLAG_*`` bits.
    marks : int64[m, 2]
        Half-open ``[start, end)`` ranges (relative, clipped to the window, sorted, disjoint) of
        payload bits in 66b blocks that reach the MAC as error blocks: blocks of codewords that the
        decoder marked uncorrectable (119.2.5.3 error indication, ``ieee`` and ``detect_only``
        modes) and blocks whose 257b header bit was hit (their 66b control structure is lost).
        A frame overlapping a mark fails at the MAC whatever the traffic class.
    """

    n_bits: int
    offsets: np.ndarray
    lanes: np.ndarray
    flags: np.ndarray
    marks: np.ndarray = field(default_factory=lambda: np.empty((0, 2), dtype=np.int64))


def empty_chunk(n_bits: int) -> ErrorChunk:
    """An error-free window of ``n_bits``."""
    return ErrorChunk(
        int(n_bits),
        np.empty(0, np.int64),
        np.empty(0, np.int8),
        np.empty(0, np.uint8),
        np.empty((0, 2), np.int64),
    )


@runtime_checkable
class ErrorSource(Protocol):
    """Anything with ``take(n_bits) -> sorted int64 offsets in [0, n_bits)`` of flipped bits.

    The cursor advances by ``n_bits`` at each call; the offsets depend only on the source's seed
    (or trace) and on the cursor position, never on how the stream is cut into calls.
    """

    def take(self, n_bits: int) -> np.ndarray:  # pragma: no cover - protocol
        ...


@runtime_checkable
class DetailedErrorSource(ErrorSource, Protocol):
    """An :class:`ErrorSource` that also reports lanes, flags and decoder marks."""

    def take_chunk(self, n_bits: int) -> ErrorChunk:  # pragma: no cover - protocol
        ...
