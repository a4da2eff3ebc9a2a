"""Self-synchronous scrambler G(x) = 1 + x^39 + x^58 (49.2.6, applied by 119.2.4.3).

``s_n = d_n ^ s_{n-39} ^ s_{n-58}``; the descrambler computes ``d_n = s_n ^ s_{n-39} ^ s_{n-58}``.
In Clause 119 it runs continuously over the transcoded 257-bit blocks (all 257 bits, header bit
included); alignment markers are inserted afterwards and are not scrambled.

Seed convention (documented choice): bit ``i`` of the 58-bit integer seed is ``S<i>`` =
``s_{n-1-i}``, the scrambled bit sent ``i + 1`` bits before the first one scrambled (``S<0>`` is
the most recent).  The default 0x24E6959D0FA5DBD is the initial state of the Annex 119A example.
The packed streams are the ones of :mod:`phy802.pcs.transcode257`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from phy802.pcs import _kernels as _k

__all__ = ["DEFAULT_SEED", "seed_to_history", "scramble", "descramble"]

DEFAULT_SEED = 0x24E6959D0FA5DBD


def seed_to_history(seed: int) -> np.uint64:
    """Kernel history word (last 64 scrambled bits, most recent in bit 63) for a 58-bit seed."""
    if not 0 <= int(seed) < (1 << 58):
        raise ValueError(f"scrambler seed must be a 58-bit value, got {seed:#x}")
    h = 0
    for i in range(58):
        h |= ((int(seed) >> i) & 1) << (63 - i)
    return np.uint64(h)


def _check(stream: NDArray[np.uint64], nbits: int) -> NDArray[np.uint64]:
    if not isinstance(stream, np.ndarray) or stream.dtype != np.uint64 or stream.ndim != 1:
        raise ValueError("stream must be a 1-D uint64 array of packed bits")
    if nbits < 0 or stream.size < (nbits + 63) // 64:
        raise ValueError(f"stream of {stream.size} words is shorter than {nbits} bits")
    if not stream.flags.c_contiguous or not stream.flags.writeable:
        raise ValueError("stream must be C-contiguous and writeable")
    return stream


def scramble(stream: NDArray[np.uint64], nbits: int, seed: int = DEFAULT_SEED, *, inplace: bool = False
             ) -> NDArray[np.uint64]:
    """Scramble the first ``nbits`` bits of a packed stream (bits past ``nbits`` in the last
    32-bit chunk are scrambled too and must be ignored)."""
    s = _check(stream if inplace else stream.copy(), nbits)
    _k.scramble(s, nbits, seed_to_history(seed))
    return s


def descramble(stream: NDArray[np.uint64], nbits: int, seed: int = DEFAULT_SEED, *, inplace: bool = False
               ) -> NDArray[np.uint64]:
    """Descramble; ``seed`` plays the role of the 58 bits received before the stream (only the
    first 58 output bits depend on it; the descrambler self-synchronises)."""
    s = _check(stream if inplace else stream.copy(), nbits)
    _k.descramble(s, nbits, seed_to_history(seed))
    return s
