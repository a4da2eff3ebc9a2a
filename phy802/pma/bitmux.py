"""Bit-multiplexing of PCS lanes onto physical (PMA/PMD) lanes (IEEE 802.3 120.5.2).

400GBASE-R: 16 PCS lanes onto 8 lanes (2:1) or 4 lanes (4:1); 200GBASE-R: 8 onto 4 (2:1).
Which PCS lanes share a physical lane, and their interleave order, is implementation specific
(the receiver recovers PCS lanes from the alignment markers), so it is a parameter here.
Default ([?] our choice): physical lane ``i`` carries PCS lanes ``r*i, r*i+1, ..., r*i+r-1``
in that order, ``r = n_pcsl / n_lanes``.

Physical lane ``i`` bit ``q`` comes from PCS lane ``order[i][q % r]``, bit ``q // r``; the PAM4
symbol at lane position ``j`` is made of lane bits ``2j`` (A) and ``2j+1`` (B), so with a 2:1 mux
its A and B bits come from two different PCS lanes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BitMux", "lane_bit_to_pcsl"]


@dataclass(frozen=True, slots=True)
class BitMux:
    """Bit-mux of ``n_pcsl`` PCS lanes onto ``n_lanes`` physical lanes.

    Parameters
    ----------
    n_pcsl : number of PCS lanes (16 for 400G, 8 for 200G)
    n_lanes : number of physical lanes (8 or 4 for 400G, 4 for 200G)
    order : optional ``order[i]`` = the PCS lanes interleaved on lane ``i``, first bit first;
        every PCS lane exactly once. Default: consecutive groups (see module docstring).
    """

    n_pcsl: int = 16
    n_lanes: int = 8
    order: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.n_pcsl <= 0 or self.n_lanes <= 0 or self.n_pcsl % self.n_lanes:
            raise ValueError(f"n_pcsl ({self.n_pcsl}) must be a positive multiple of n_lanes ({self.n_lanes})")
        r = self.ratio
        if r % 2 and r != 1:
            raise ValueError(f"mux ratio {r} must be 1 or even")
        if self.order is None:
            object.__setattr__(self, "order", tuple(tuple(range(r * i, r * i + r)) for i in range(self.n_lanes)))
        else:
            order = tuple(tuple(int(x) for x in grp) for grp in self.order)
            object.__setattr__(self, "order", order)
            if len(order) != self.n_lanes or any(len(g) != r for g in order):
                raise ValueError(f"order must have {self.n_lanes} groups of {r} PCS lanes, got {self.order!r}")
            flat = sorted(x for g in order for x in g)
            if flat != list(range(self.n_pcsl)):
                raise ValueError(f"order must use every PCS lane 0..{self.n_pcsl - 1} exactly once, got {self.order!r}")

    @property
    def ratio(self) -> int:
        return self.n_pcsl // self.n_lanes

    @property
    def order_array(self) -> np.ndarray:
        """``[n_lanes, ratio]`` int64 array of PCS lane indices."""
        return np.array(self.order, dtype=np.int64)

    def mux(self, pcsl_bits: np.ndarray) -> np.ndarray:
        """PCS lane bits ``[n_pcsl, n]`` to physical lane bits ``[n_lanes, ratio * n]``."""
        b = np.asarray(pcsl_bits)
        if b.ndim != 2 or b.shape[0] != self.n_pcsl:
            raise ValueError(f"pcsl_bits must have shape [{self.n_pcsl}, n], got {b.shape}")
        # [lanes, ratio, n] -> interleave along the last axis
        return np.ascontiguousarray(b[self.order_array].transpose(0, 2, 1)).reshape(self.n_lanes, -1)

    def demux(self, lane_bits: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`mux`: ``[n_lanes, ratio * n]`` to ``[n_pcsl, n]``."""
        b = np.asarray(lane_bits)
        if b.ndim != 2 or b.shape[0] != self.n_lanes or b.shape[1] % self.ratio:
            raise ValueError(f"lane_bits must have shape [{self.n_lanes}, multiple of {self.ratio}], got {b.shape}")
        out = np.empty((self.n_pcsl, b.shape[1] // self.ratio), dtype=b.dtype)
        out[self.order_array.reshape(-1)] = b.reshape(self.n_lanes, -1, self.ratio).transpose(0, 2, 1).reshape(
            self.n_pcsl, -1
        )
        return out


def lane_bit_to_pcsl(mux: BitMux, lane: int | np.ndarray, bit: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map physical-lane bit positions to ``(pcs_lane, pcs_lane_bit)`` without building dense arrays.

    Used to carry a sparse error pattern (positions on a physical lane) back to the PCS lanes.
    """
    lane = np.asarray(lane, dtype=np.int64)
    bit = np.asarray(bit, dtype=np.int64)
    if np.any(lane < 0) or np.any(lane >= mux.n_lanes) or np.any(bit < 0):
        raise ValueError("lane must be in [0, n_lanes) and bit >= 0")
    r = mux.ratio
    return mux.order_array[lane, bit % r], bit // r
