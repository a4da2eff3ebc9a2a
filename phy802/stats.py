"""Confidence intervals for error rates (counts of events in trials)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

__all__ = ["RateEstimate", "clopper_pearson", "wilson", "rate"]


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion ``k / n``.

    With ``k = 0`` the upper bound is ``1 - (alpha/2)**(1/n)`` (about 3.7/n at 95%).
    """
    _check(k, n, confidence)
    if n == 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    lo = 0.0 if k == 0 else float(_st.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(_st.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``k / n``."""
    _check(k, n, confidence)
    if n == 0:
        return 0.0, 1.0
    z = float(_st.norm.ppf(0.5 + confidence / 2))
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True)
class RateEstimate:
    """An event rate with its exact 95% interval; raw counts are kept for merging."""

    events: int
    trials: int
    lo: float
    hi: float

    @property
    def value(self) -> float:
        return self.events / self.trials if self.trials else float("nan")

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def as_dict(self) -> dict:
        return {"events": self.events, "trials": self.trials, "value": self.value, "lo": self.lo, "hi": self.hi}


def rate(events: int, trials: int, confidence: float = 0.95) -> RateEstimate:
    """Clopper-Pearson :class:`RateEstimate` for ``events`` in ``trials``."""
    lo, hi = clopper_pearson(int(events), int(trials), confidence)
    return RateEstimate(int(events), int(trials), lo, hi)


def _check(k: int, n: int, confidence: float) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
