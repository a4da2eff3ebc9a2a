"""FEC counters as a PHY exposes them (Clause 45 registers 1.202-1.205 / 3.802-3.805, 91.6, 119.3).

Corrected symbols are also charged to a position group, e.g. the PCS lane that carried each
symbol (119.2.4.7 makes the lane of every codeword position deterministic). Which group a
position belongs to is the caller's mapping, so the same class serves Cl.91 FEC lanes (4) and
Cl.119 PCS lanes (8 or 16).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FecCounters"]


@dataclass
class FecCounters:
    """Mutable accumulator of decoder statistics (the one stateful object of :mod:`phy802.fec`).

    Attributes
    ----------
    codewords : words decoded.
    corrected_codewords : words with 1..t symbols corrected (words received error-free are not counted,
        as in the PHY registers).
    uncorrected_codewords : words reported uncorrectable (``n_corrected == -1``; in detect mode:
        words with a nonzero syndrome).
    corrected_symbols : total symbols changed by the decoder.
    corrected_symbols_per_group : int64[n_groups], corrected symbols by the group of their position;
        grows when a larger group index is seen.
    """

    codewords: int = 0
    corrected_codewords: int = 0
    uncorrected_codewords: int = 0
    corrected_symbols: int = 0
    corrected_symbols_per_group: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def with_groups(cls, n_groups: int) -> "FecCounters":
        """Counters with ``n_groups`` per-group slots preallocated (e.g. 16 PCS lanes)."""
        if n_groups < 0:
            raise ValueError(f"n_groups must be >= 0, got {n_groups}")
        return cls(corrected_symbols_per_group=np.zeros(int(n_groups), dtype=np.int64))

    def _grow(self, size: int) -> None:
        if size > self.corrected_symbols_per_group.shape[0]:
            grown = np.zeros(size, dtype=np.int64)
            grown[: self.corrected_symbols_per_group.shape[0]] = self.corrected_symbols_per_group
            self.corrected_symbols_per_group = grown

    def update(self, received, decoded, n_corrected, group_of_position=None) -> "FecCounters":
        """Add one batch of decoder results.

        Parameters
        ----------
        received, decoded : arrays [..., n] (before / after :func:`phy802.fec.decode`).
        n_corrected : int array [...] as returned by ``decode``.
        group_of_position : int array [n] mapping each codeword position to its group (>= 0);
            ``None`` charges every position to group 0.

        Returns ``self`` (for chaining).
        """
        rx = np.asarray(received)
        dx = np.asarray(decoded)
        nc = np.asarray(n_corrected)
        if rx.shape != dx.shape:
            raise ValueError(f"received and decoded shapes differ: {rx.shape} vs {dx.shape}")
        if rx.ndim == 0 or nc.shape != rx.shape[:-1]:
            raise ValueError(f"n_corrected shape {nc.shape} must equal the words' leading shape {rx.shape[:-1]}")
        n = rx.shape[-1]
        if group_of_position is None:
            groups = np.zeros(n, dtype=np.int64)
        else:
            groups = np.asarray(group_of_position)
            if groups.dtype.kind not in "iu" or groups.shape != (n,):
                raise ValueError(f"group_of_position must be an int array of shape ({n},), got {groups.dtype} {groups.shape}")
            if n and groups.min() < 0:
                raise ValueError("group_of_position must be >= 0")
            groups = groups.astype(np.int64)
        nc = nc.reshape(-1)
        fixed = nc > 0
        self.codewords += int(nc.size)
        self.corrected_codewords += int(np.count_nonzero(fixed))
        self.uncorrected_codewords += int(np.count_nonzero(nc < 0))
        self.corrected_symbols += int(nc[fixed].sum(dtype=np.int64))
        self._grow(int(groups.max()) + 1 if n else 0)
        if np.any(fixed):
            diff = rx.reshape(-1, n)[fixed] != dx.reshape(-1, n)[fixed]
            per_pos = diff.sum(axis=0, dtype=np.int64)
            if int(per_pos.sum()) != int(nc[fixed].sum(dtype=np.int64)):
                raise ValueError("decoded words differ from received ones in more symbols than n_corrected says")
            self.corrected_symbols_per_group += np.bincount(
                groups, weights=per_pos, minlength=self.corrected_symbols_per_group.shape[0]
            ).astype(np.int64)
        return self

    def merge(self, other: "FecCounters") -> "FecCounters":
        """Add ``other``'s counts into ``self`` (e.g. per-worker counters); returns ``self``."""
        if not isinstance(other, FecCounters):
            raise TypeError(f"can only merge FecCounters, got {type(other).__name__}")
        self.codewords += other.codewords
        self.corrected_codewords += other.corrected_codewords
        self.uncorrected_codewords += other.uncorrected_codewords
        self.corrected_symbols += other.corrected_symbols
        self._grow(other.corrected_symbols_per_group.shape[0])
        self.corrected_symbols_per_group[: other.corrected_symbols_per_group.shape[0]] += (
            other.corrected_symbols_per_group
        )
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FecCounters):
            return NotImplemented
        a, b = self.as_dict(), other.as_dict()
        # per-group arrays of different lengths are equal when the extra groups are zero
        ga, gb = a.pop("corrected_symbols_per_group"), b.pop("corrected_symbols_per_group")
        m = max(len(ga), len(gb))
        return a == b and ga + [0] * (m - len(ga)) == gb + [0] * (m - len(gb))

    __hash__ = None  # mutable

    def as_dict(self) -> dict:
        """Plain-Python snapshot (JSON-ready)."""
        return {
            "codewords": self.codewords,
            "corrected_codewords": self.corrected_codewords,
            "uncorrected_codewords": self.uncorrected_codewords,
            "corrected_symbols": self.corrected_symbols,
            "corrected_symbols_per_group": [int(v) for v in self.corrected_symbols_per_group],
        }
