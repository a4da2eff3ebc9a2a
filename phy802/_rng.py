"""Seed handling: every random process takes an explicit seed or ``numpy.random.Generator``."""

from __future__ import annotations

import numpy as np

__all__ = ["SeedLike", "as_generator", "spawn"]

SeedLike = "int | np.random.SeedSequence | np.random.Generator | None"


def as_generator(seed: int | np.random.SeedSequence | np.random.Generator | None) -> np.random.Generator:
    """Return a ``Generator`` for ``seed``; a ``Generator`` passes through unchanged.

    ``None`` is refused on purpose: reproducibility needs an explicit seed.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise ValueError("an explicit seed (int, SeedSequence or numpy Generator) is required")
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError(f"seed must be an int, SeedSequence or Generator, not {type(seed).__name__}")
    if isinstance(seed, (int, np.integer)):
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        return np.random.default_rng(int(seed))
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    raise TypeError(f"seed must be an int, SeedSequence or Generator, not {type(seed).__name__}")


def spawn(seed: int | np.random.SeedSequence, n: int) -> list[np.random.Generator]:
    """``n`` independent child generators from one master seed (one per block / lane / worker)."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(int(seed))
    return [np.random.default_rng(child) for child in ss.spawn(n)]
