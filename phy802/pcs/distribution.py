"""Pre-FEC distribution and codeword interleave onto PCS lanes (119.2.4.5, 119.2.4.7).

* 119.2.4.5: the 10280-bit ``tx_scrambled_am`` of one codeword pair is cut into 1028 10-bit
  symbols (first bit = symbol bit 0) dealt round robin A, B, A, B, ...  In the FEC API convention
  (index 0 = coefficient of x^(n-1) = first in time) message symbol i of A is stream symbol 2i and
  of B stream symbol 2i + 1.
* 119.2.4.7: with ``h = n_lanes / 2`` and temporal index ``t = h k + j`` (k = 0..544/h - 1,
  j = 0..h-1): for even k lane 2j gets ``cA[t]`` and lane 2j+1 ``cB[t]``; for odd k swapped.  PCS
  lane L sends ``out[n_lanes k + L]`` as its k-th symbol of the pair, bit 0 first.  Each lane gets
  68 (400G) or 136 (200G) symbols per pair.  The 200G form (h = 4) is [I] in the notes.
* Other code lengths (``n`` argument): the same rule with ``k = 0..n/h - 1``, e.g. the
  low-latency RS(272,257+1) ("rs272"): 34 (400G) or 68 (200G) symbols per lane per pair [I].
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from phy802.clause119 import KP4_N as N
from phy802.clause119 import KP4_K, PAIR_MESSAGE_BITS, pcs_lanes
from phy802.pcs import _kernels as _k

__all__ = ["lane_of_symbol", "pair_gather_index", "interleave", "deinterleave", "n_lanes_of", "interleave_n",
           "deinterleave_n",
           "symbols_to_bits", "bits_to_symbols", "round_robin", "round_robin_inverse"]


def n_lanes_of(rate: str) -> int:
    """PCS lanes of ``rate`` (:func:`phy802.clause119.pcs_lanes`)."""
    return pcs_lanes(rate)


@lru_cache(maxsize=None)
def _maps(n_lanes: int, N: int = N):
    h = n_lanes // 2
    if N % h:
        raise ValueError(f"codeword length {N} is not a multiple of {h} (half the {n_lanes} PCS lanes)")
    K = N // h
    lane = np.empty((2, N), np.intp)
    slot = np.empty((2, N), np.intp)
    gather = np.empty((n_lanes, K), np.intp)  # gather[L, k] = X * 544 + t
    for k in range(K):
        for j in range(h):
            t = h * k + j
            a, b = (2 * j, 2 * j + 1) if k % 2 == 0 else (2 * j + 1, 2 * j)
            lane[0, t], slot[0, t] = a, k
            lane[1, t], slot[1, t] = b, k
            gather[a, k] = t
            gather[b, k] = N + t
    for a in (lane, slot, gather):
        a.setflags(write=False)
    return lane, slot, gather


def lane_of_symbol(rate: str = "400G", n: int = N) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]:
    """For each codeword symbol position t (0..n-1, FEC index = temporal order):
    ``(laneA[t], laneB[t], slotA[t], slotB[t])``: the PCS lane carrying ``cA[t]`` / ``cB[t]`` and
    its slot among that lane's 68 (400G) or 136 (200G) symbols of the pair (n = 544).  Read-only."""
    lane, slot, _ = _maps(n_lanes_of(rate), int(n))
    return lane[0], lane[1], slot[0], slot[1]


def pair_gather_index(rate: str = "400G", n: int = N) -> NDArray[np.intp]:
    """``[n_lanes, K]`` index into ``concat(cA, cB)`` of the symbol PCS lane L sends k-th."""
    return _maps(n_lanes_of(rate), int(n))[2]


def interleave_n(codewords: NDArray[np.uint16], rate: str = "400G") -> NDArray[np.uint16]:
    """:func:`interleave` for any codeword length n (``uint16[P, 2, n]``, n a multiple of
    ``n_lanes / 2``), numpy gather (the 544 path has its own kernel)."""
    cw = np.asarray(codewords)
    if cw.ndim != 3 or cw.shape[1] != 2:
        raise ValueError(f"codewords must have shape [pairs, 2, n], got {cw.shape}")
    n = cw.shape[2]
    g = pair_gather_index(rate, n)
    L, K = g.shape
    out = cw.reshape(cw.shape[0], 2 * n)[:, g]  # [P, L, K]
    return np.ascontiguousarray(out.transpose(1, 0, 2).reshape(L, -1), dtype=np.uint16)


def deinterleave_n(lanes: NDArray[np.uint16], rate: str, n: int) -> NDArray[np.uint16]:
    """Inverse of :func:`interleave_n`: ``uint16[n_lanes, P*K]`` -> ``uint16[P, 2, n]``."""
    g = pair_gather_index(rate, n)
    L, K = g.shape
    x = np.asarray(lanes)
    if x.ndim != 2 or x.shape[0] != L or x.shape[1] % K:
        raise ValueError(f"lanes must have shape [{L}, multiple of {K}], got {x.shape}")
    if x.dtype.kind not in "ui" or (x.size and (x.min() < 0 or x.max() > 1023)):
        raise ValueError("lane symbols must be integers 0..1023")
    P = x.shape[1] // K
    out = np.empty((P, 2 * n), np.uint16)
    out[:, g] = x.reshape(L, P, K).transpose(1, 0, 2)
    return out.reshape(P, 2, n)


def interleave(codewords: NDArray[np.uint16], rate: str = "400G") -> NDArray[np.uint16]:
    """``uint16[P, 2, 544]`` codeword pairs -> ``uint16[n_lanes, P * K]`` PCS lane symbols."""
    cw = np.asarray(codewords)
    if cw.ndim != 3 or cw.shape[1:] != (2, N):
        raise ValueError(f"codewords must have shape [pairs, 2, {N}], got {cw.shape}")
    g = pair_gather_index(rate)
    out = np.empty((g.shape[0], cw.shape[0] * g.shape[1]), np.uint16)
    # 4 symbols per 64-bit store (K = 68 or 136 is a multiple of 4, so rows stay 8-byte aligned)
    _k.lanes_from_pairs64(np.ascontiguousarray(cw, dtype=np.uint16).reshape(-1, 2 * N), g.shape[0] // 2,
                          out.view(np.uint64))
    return out


def deinterleave(lanes: NDArray[np.uint16], rate: str = "400G", *, _out: NDArray[np.uint16] | None = None
                 ) -> NDArray[np.uint16]:
    """Inverse of :func:`interleave`: ``uint16[n_lanes, P*K]`` (lanes in PCS-lane order, aligned
    to a pair boundary) -> ``uint16[P, 2, 544]`` (private ``_out``: a C-contiguous buffer of that
    shape to fill, e.g. the receiver's scratch)."""
    g = pair_gather_index(rate)
    L, K = g.shape
    x = np.asarray(lanes)
    if x.ndim != 2 or x.shape[0] != L or x.shape[1] % K:
        raise ValueError(f"lanes must have shape [{L}, multiple of {K}], got {x.shape}")
    out = np.empty((x.shape[1] // K, 2, N), np.uint16) if _out is None else _out
    if x.dtype.kind not in "ui" or (x.dtype.itemsize > 2 and x.size and (x.min() < 0 or x.max() > 0xFFFF)):
        raise ValueError("lane symbols must be integers 0..1023")
    if x.dtype != np.uint16 or x.strides[-1] != 2:
        x = np.ascontiguousarray(x, dtype=np.uint16)
    # rows contiguous suffice (e.g. a column slice of the received lanes); 4 symbols per word
    x64 = x.view(np.uint64) if x.size else None
    if x64 is not None and x64.flags.aligned:
        acc = _k.pairs_from_lanes64(x64, L // 2, out.reshape(-1, 2 * N))
    else:
        acc = _k.codewords_from_lanes(x, g, out.reshape(-1, 2 * N))
    if acc > 1023:
        raise ValueError("lane symbols must be 10-bit values (0..1023)")
    return out


def symbols_to_bits(lanes: NDArray[np.uint16]) -> NDArray[np.uint8]:
    """``uint16[..., n]`` 10-bit symbols -> ``uint8[..., 10 n]`` bits in sending order (symbol
    bit 0 first), e.g. the serial bit stream of each PCS lane for the PMA."""
    x = np.asarray(lanes)
    if x.dtype.kind not in "ui" or (x.size and x.max() > 1023):
        raise ValueError("symbols must be integers 0..1023")
    bits = (x[..., None].astype(np.uint16) >> np.arange(10, dtype=np.uint16)) & 1
    return bits.astype(np.uint8).reshape(*x.shape[:-1], 10 * x.shape[-1])


def bits_to_symbols(bits: NDArray[np.uint8]) -> NDArray[np.uint16]:
    """Inverse of :func:`symbols_to_bits` (the last axis must be a multiple of 10)."""
    b = np.asarray(bits)
    if b.shape[-1] % 10:
        raise ValueError(f"bit count {b.shape[-1]} is not a multiple of 10")
    b = b.reshape(*b.shape[:-1], b.shape[-1] // 10, 10).astype(np.uint16)
    return (b << np.arange(10, dtype=np.uint16)).sum(axis=-1, dtype=np.uint16)


def round_robin(tx_scrambled_am: NDArray[np.uint8]) -> NDArray[np.uint16]:
    """119.2.4.5 as a plain numpy reference: ``uint8[P, 10280]`` bits of each pair ->
    ``uint16[P, 2, 514]`` messages A (even 10-bit symbols) and B (odd).  The transmitter uses a
    fused Numba kernel; this is the readable form (and the tests' independent path)."""
    b = np.asarray(tx_scrambled_am)
    if b.ndim != 2 or b.shape[1] != PAIR_MESSAGE_BITS:
        raise ValueError(f"expected bits of shape [pairs, {PAIR_MESSAGE_BITS}], got {b.shape}")
    sym = bits_to_symbols(b)  # [P, 1028]
    return np.ascontiguousarray(sym.reshape(-1, KP4_K, 2).transpose(0, 2, 1))


def round_robin_inverse(msgs: NDArray[np.uint16]) -> NDArray[np.uint8]:
    """Inverse of :func:`round_robin`: ``uint16[P, 2, >=514]`` -> ``uint8[P, 10280]`` bits."""
    m = np.asarray(msgs)[:, :, :KP4_K]
    return symbols_to_bits(m.transpose(0, 2, 1).reshape(m.shape[0], 2 * KP4_K))
