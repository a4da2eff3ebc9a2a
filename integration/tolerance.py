"""The BER a training run tolerates: the largest BER whose validation-loss penalty stays under epsilon.

The study behind this project states its result in this form ("BER < 1e-4 harmless for DDP, PP needs
< 1e-5"); :func:`threshold` computes it from the cells of a BER sweep, :func:`tolerance_table` for
every (parallelism, recipe, guard) of :func:`integration.experiment.aggregate`'s rows.

The method, stated once:

* A cell's *penalty* is its mean ``delta_val_loss`` (run minus its own error-free shadow, nats) with
  its 95% half-width over the model seeds (:mod:`integration.experiment`). A BER *passes* when the
  penalty is below ``epsilon``; a non-finite penalty (a run died or failed its job) fails.
* The threshold is the largest grid BER that passes with every smaller grid BER passing too: a
  failure below stops it (a pass above a failure is listed in ``passes_again``, not counted). It
  is *bracketed by the grid*: the true threshold lies between that BER and the next grid BER, the
  first that fails (``below grid``: the smallest BER fails; ``above grid``: every BER passes).
* The interval over model and link seeds: the same rule on the cells' 95% bounds. Its lower end
  uses the upper bound of each penalty (the largest BER that passes even so), its upper end the
  lower bound (the first BER that fails even so): the threshold lies in ``[lower, upper)``, each end
  a grid BER. With one run per cell there is no interval (``None``).
* ``interp``: where the penalty, linear in log10 BER between the two bracketing grid BERs, crosses
  epsilon -- an interpolation, not a measurement; ``None`` when the failing side is not finite or
  the threshold is not inside the grid. ``interp_lower`` / ``interp_upper``: the same on the bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["EPSILON", "Cell", "Bracket", "Threshold", "threshold", "tolerance_table"]

#: default penalty bound (nats of validation loss): a BER is tolerated while the run's validation loss
#: stays within this of its error-free shadow
EPSILON = 0.02


@dataclass(frozen=True)
class Cell:
    """One BER of a sweep: the mean penalty (nats), its 95% half-width (``nan``: unknown) and the
    payload BER the runs delivered (measured; ``nan``: not recorded)."""

    ber: float
    penalty: float
    ci95: float = math.nan
    ber_delivered: float = math.nan


@dataclass(frozen=True)
class Bracket:
    """The threshold between two grid BERs: ``passes`` (the largest that passes with all below it;
    ``None``: even the smallest fails) and ``fails`` (the next grid BER; ``None``: every BER passes)."""

    passes: float | None
    fails: float | None

    @property
    def status(self) -> str:
        if self.passes is None:
            return "below grid"
        return "above grid" if self.fails is None else "bracketed"

    def text(self) -> str:
        if self.passes is None:
            return f"< {self.fails:g}"
        if self.fails is None:
            return f">= {self.passes:g}"
        return f"[{self.passes:g}, {self.fails:g})"


@dataclass(frozen=True)
class Threshold:
    """The tolerated BER of one sweep (see the module's method)."""

    epsilon: float
    point: Bracket
    #: the interval's lower end (from the penalties' upper 95% bounds) and upper end (lower bounds)
    lower: Bracket | None
    upper: Bracket | None
    interp: float | None
    interp_lower: float | None
    interp_upper: float | None
    #: grid BERs that pass above the first failure (a non-monotone penalty); not counted
    passes_again: tuple[float, ...]
    #: the payload BER the runs delivered (measured) at ``point.passes`` and at ``point.fails``
    delivered_passes: float | None
    delivered_fails: float | None

    @property
    def interval(self) -> tuple[float | None, float | None] | None:
        """``[lo, hi)`` holding the threshold (``lo`` None: below the grid; ``hi`` None: above it)."""
        if self.lower is None or self.upper is None:
            return None
        return self.lower.passes, self.upper.fails


def _fails(value: float, epsilon: float) -> bool:
    return not (math.isfinite(value) and value < epsilon)


def _bracket(bers: Sequence[float], values: Sequence[float], epsilon: float) -> tuple[Bracket, int]:
    """The bracket of ``values`` (one per ascending BER) and the index of the first failure (len: none)."""
    first = next((i for i, v in enumerate(values) if _fails(v, epsilon)), len(values))
    return Bracket(bers[first - 1] if first > 0 else None, bers[first] if first < len(bers) else None), first


def _interp(bers: Sequence[float], values: Sequence[float], first: int, epsilon: float) -> float | None:
    """log10-linear crossing of ``epsilon`` between grid points ``first-1`` (passes) and ``first`` (fails)."""
    if first == 0 or first == len(bers) or not math.isfinite(values[first]):
        return None
    p0, p1 = values[first - 1], values[first]
    x0, x1 = math.log10(bers[first - 1]), math.log10(bers[first])
    frac = (epsilon - p0) / (p1 - p0)  # p0 < epsilon <= p1, so 0 < frac <= 1
    return 10 ** (x0 + frac * (x1 - x0))


def threshold(cells: Sequence[Cell], epsilon: float = EPSILON) -> Threshold:
    """The largest BER of ``cells`` whose penalty stays under ``epsilon``, bracketed by the grid, with
    its interval from the cells' 95% bounds (see the module's method). Raises ValueError on an empty
    grid, a repeated BER, a BER outside (0, 1) or a non-positive/non-finite ``epsilon``."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    cs = sorted(cells, key=lambda c: c.ber)
    bers = [c.ber for c in cs]
    if not cs or len(set(bers)) != len(bers) or any(not (0 < b < 1) for b in bers):
        raise ValueError(f"the cells' BERs must be distinct values in (0, 1), got {bers!r}")
    mean = [c.penalty for c in cs]
    point, first = _bracket(bers, mean, epsilon)
    again = tuple(b for b, v in zip(bers[first:], mean[first:]) if not _fails(v, epsilon))
    known = all(math.isfinite(c.ci95) for c in cs if math.isfinite(c.penalty))
    lower = upper = None
    interp_lo = interp_hi = None
    if known:
        hi_pen = [c.penalty + c.ci95 if math.isfinite(c.penalty) else math.inf for c in cs]
        lo_pen = [c.penalty - c.ci95 if math.isfinite(c.penalty) else math.inf for c in cs]
        lower, f_lo = _bracket(bers, hi_pen, epsilon)
        upper, f_hi = _bracket(bers, lo_pen, epsilon)
        interp_lo, interp_hi = _interp(bers, hi_pen, f_lo, epsilon), _interp(bers, lo_pen, f_hi, epsilon)
    delivered = {c.ber: c.ber_delivered for c in cs}
    return Threshold(epsilon=float(epsilon), point=point, lower=lower, upper=upper,
                     interp=_interp(bers, mean, first, epsilon), interp_lower=interp_lo, interp_upper=interp_hi,
                     passes_again=again,
                     delivered_passes=delivered.get(point.passes) if point.passes is not None else None,
                     delivered_fails=delivered.get(point.fails) if point.fails is not None else None)


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _why_fails(r: dict) -> str:
    """Why a cell fails: its runs failed their job (the link did not deliver), died (NaN), or the penalty."""
    n = int(r.get("runs", r.get("seeds", 1)))
    if r.get("failed"):
        return f"job failed in {len(r['failed'])}/{n} runs (frames lost: the link, not the model)"
    if r.get("died"):
        return f"validation loss NaN in {len(r['died'])}/{n} runs"
    return f"penalty {_num(r['delta_val_loss']):.3g}"


def tolerance_table(rows: Sequence[dict], epsilon: float = EPSILON) -> list[dict]:
    """One row per (parallelism, recipe, guard) of an experiment's aggregated rows: its
    :class:`Threshold` (as plain fields) and the kind of BER its grid is (``ber_is``). A cell whose
    runs died or failed has penalty ``inf`` (it fails)."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        if r["ber"] > 0:
            groups.setdefault((r["parallel"], r.get("recipe", "default"), r["guard"]), []).append(r)
    out = []
    for (par, recipe, guard), rs in groups.items():
        cells = [Cell(ber=float(r["ber"]),
                      penalty=math.inf if (r.get("died") or r.get("failed")) else _num(r["delta_val_loss"]),
                      ci95=_num(r.get("delta_val_loss_ci95")), ber_delivered=_num(r.get("ber_delivered")))
                 for r in rs]
        t = threshold(cells, epsilon)
        at = next((r for r in rs if r["ber"] == t.point.fails), None)
        out.append({
            "parallel": par, "recipe": recipe, "optimizer": rs[0].get("optimizer", "adamw"),
            "comm_dtype": rs[0].get("comm_dtype", "fp32"), "guard": guard, "ber_is": rs[0].get("ber_is"), "epsilon": t.epsilon,
            "runs_per_cell": min(int(r.get("runs", r.get("seeds", 1))) for r in rs),
            "status": t.point.status, "passes": t.point.passes, "fails": t.point.fails,
            "lower": t.lower.passes if t.lower else None, "upper": t.upper.fails if t.upper else None,
            "interval_known": t.interval is not None,
            "interp": t.interp, "interp_lower": t.interp_lower, "interp_upper": t.interp_upper,
            "passes_again": list(t.passes_again),
            "delivered_passes": t.delivered_passes, "delivered_fails": t.delivered_fails,
            "fails_by": _why_fails(at) if at is not None else None,
            "threshold": t.point.text(),
            "interval": (f"[{'<grid' if t.lower.passes is None else format(t.lower.passes, 'g')}, "
                         f"{'>grid' if t.upper.fails is None else format(t.upper.fails, 'g')})") if t.interval else None,
            "cells": [{"ber": c.ber, "penalty": c.penalty, "ci95": c.ci95, "ber_delivered": c.ber_delivered}
                      for c in sorted(cells, key=lambda c: c.ber)],
        })
    return out
