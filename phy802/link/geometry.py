"""Which line bit carries which codeword bit: the 119.2.4.7 interleave and the bit-mux, cached per configuration."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from phy802.clause119 import pcs_lanes
from phy802.pcs.distribution import pair_gather_index
from phy802.pcs.distribution import lane_of_symbol as _pcs_lane_of_symbol
from phy802.link.config import LinkConfig


@dataclass(frozen=True)
class LinkGeometry:
    """Where every codeword bit travels (read-only arrays).

    ``lane_of[X, t]`` / ``slot_of[X, t]``: PCS lane and slot (0..K-1 within a pair) of symbol ``t``
    of codeword X (0 = A, 1 = B); ``gather[L, k] = X n + t``: the symbol PCS lane L sends k-th;
    ``order[i, m]``: PCS lane at mux position m of physical lane i.  Physical lane bit
    ``q`` = bit ``q // r`` of PCS lane ``order[i, q % r]``; PCS lane bit ``u`` = bit ``u % 10`` of
    its symbol ``u // 10``; that symbol is slot ``(u // 10) % K`` of pair ``(u // 10) // K``.
    """

    n: int
    n_pcsl: int
    n_phys: int
    K: int
    lane_of: NDArray[np.intp]
    slot_of: NDArray[np.intp]
    gather: NDArray[np.intp]
    order: NDArray[np.int64]

    @property
    def r(self) -> int:
        return self.n_pcsl // self.n_phys

    @property
    def line_symbols_per_pair(self) -> int:
        """PAM4 symbols per physical lane and codeword pair."""
        return self.K * 5 * self.r


@functools.lru_cache(maxsize=None)
def _geometry(rate: str, n: int, n_phys: int, order: tuple) -> LinkGeometry:
    n_pcsl = pcs_lanes(rate)
    # the PCS package's own tables (119.2.4.7, generalised to n = 528 / 272)
    la, lb, sa, sb = _pcs_lane_of_symbol(rate, n)
    lane, slot, gather = np.stack([la, lb]), np.stack([sa, sb]), np.array(pair_gather_index(rate, n))
    g = LinkGeometry(n, n_pcsl, n_phys, n // (n_pcsl // 2), np.array(lane), np.array(slot), np.array(gather),
                     np.array(order, dtype=np.int64))
    for a in (g.lane_of, g.slot_of, g.gather, g.order):
        a.setflags(write=False)
    return g


def geometry(config: LinkConfig) -> LinkGeometry:
    """The :class:`LinkGeometry` of ``config``."""
    return _geometry(config.rate, config.rs.n, int(config.n_lanes), config.mux.order)
