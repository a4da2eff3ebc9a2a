"""Reusable internal work buffers of the PCS transmitter and receiver."""

from __future__ import annotations

import numpy as np

__all__ = ["Scratch"]


class Scratch:
    """Named buffers kept between calls, so repeated calls do not page-fault fresh memory in.

    Only for internal arrays: nothing returned to a caller may point into them (hence one
    transmitter / receiver instance per thread).
    """

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """An uninitialised array of exactly ``shape`` and ``dtype`` (reused when they match)."""
        a = self._bufs.get(name)
        if a is None or a.shape != shape or a.dtype != dtype:
            a = self._bufs[name] = np.empty(shape, dtype)
        return a
