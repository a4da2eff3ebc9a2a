"""The size fit of ``phy802 experiment --sizes`` (``scaling.json``) as the loss side of a larger model.

The char models trained here measure a loss penalty per BER; the size fit
(:mod:`integration.scaling`) turns their tolerated BERs into a line ``log10 T = a + b log10 N``
with a covariance, and predicts the tolerated BER ``T`` of a model of ``N`` parameters with a 95%
interval.  That prediction is a *threshold*, not a penalty curve: it says which BERs the larger
model tolerates (validation-loss penalty under the fit's ``epsilon``), not by how much it is hurt.
So a BER is judged against the interval, never given a made-up penalty:

* ``tolerated``: BER <= the interval's lower end (the threshold is above it at 95%);
* ``not tolerated``: BER > the interval's upper end;
* ``uncertain``: in between (the fit cannot say).

The prediction is unchecked (no model of that size has been measured here) and usually an
extrapolation: :attr:`PredictedThreshold.decades` says by how many decades of parameters.

This module reads the file (strictly, every failure naming it and the field) and checks it against
the ``experiment`` results it is joined with (FEC, recipe, parallelism, guard, BER kind); it imports
nothing from :mod:`integration` (the file is the interface).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Z95", "TOLERATED", "UNCERTAIN", "NOT_TOLERATED", "PredictedThreshold", "SizeFit", "read_size_fit",
           "results_n_params", "measured_text", "SCALING_FILE", "scaling_beside"]

#: the size fit's file name in an ``experiment --sizes`` campaign folder (beside its ``size-*`` folders)
SCALING_FILE = "scaling.json"

#: the two-sided 95% normal quantile the fit's intervals use (integration/scaling.py)
Z95 = 1.96
TOLERATED, UNCERTAIN, NOT_TOLERATED = "tolerated", "uncertain", "not tolerated"


def short_params(n: float) -> str:
    """A parameter count as people write it: 124M, 8.03B (below a million: 818,176)."""
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n:,.0f}"


@dataclass(frozen=True)
class PredictedThreshold:
    """The tolerated BER predicted for ``model`` (``n_params``) by one fit of a size sweep
    (``parallel``, ``recipe``, ``guard``): ``log10`` centre and standard deviation (decades),
    ``epsilon`` (nats) the penalty bound it is a threshold for, ``fit_range`` the smallest and largest
    parameter counts measured, ``source`` the file."""

    parallel: str
    recipe: str
    guard: str
    ber_is: str
    model: str
    n_params: int
    log10_ber: float
    log10_sd: float
    epsilon: float
    fit_range: tuple[int, int]
    source: str

    @property
    def ber(self) -> float:
        return 10 ** self.log10_ber

    @property
    def lo95(self) -> float:
        return 10 ** (self.log10_ber - Z95 * self.log10_sd)

    @property
    def hi95(self) -> float:
        return 10 ** (self.log10_ber + Z95 * self.log10_sd)

    @property
    def decades(self) -> float:
        """Decades of parameters beyond the measured sizes (0 inside them)."""
        lo, hi = self.fit_range
        n = float(self.n_params)
        return math.log10(n / hi) if n > hi else math.log10(lo / n) if n < lo else 0.0

    def verdict(self, ber: float) -> str:
        """:data:`TOLERATED`, :data:`UNCERTAIN` or :data:`NOT_TOLERATED` for a BER (module docstring)."""
        if ber <= self.lo95:
            return TOLERATED
        return NOT_TOLERATED if ber > self.hi95 else UNCERTAIN

    def text(self) -> str:
        """``predicted for 124M from the size fit, unchecked, 95% interval [a, b]`` with its cell and range."""
        lo, hi = self.fit_range
        ext = (f"; extrapolates {self.decades:.2g} decades {'beyond' if self.n_params > hi else 'below'} the sizes "
               f"measured ({lo:,}-{hi:,} parameters)" if self.decades > 0 else
               f"; inside the sizes measured ({lo:,}-{hi:,} parameters)")
        return (f"predicted for {short_params(self.n_params)} ({self.model}) from the size fit {self.source}, unchecked, "
                f"{self.parallel} recipe {self.recipe} guard {self.guard}: tolerated BER {self.ber:.2g}, 95% interval "
                f"[{self.lo95:.2g}, {self.hi95:.2g}] ({self.ber_is}; penalty under {self.epsilon:g} nats){ext}")

    def as_dict(self) -> dict:
        return {"parallel": self.parallel, "recipe": self.recipe, "guard": self.guard, "ber_is": self.ber_is,
                "model": self.model, "n_params": self.n_params, "ber": self.ber, "ber_lo95": self.lo95,
                "ber_hi95": self.hi95, "log10_sd": self.log10_sd, "epsilon": self.epsilon,
                "fit_range": list(self.fit_range), "extrapolates_decades": self.decades, "unchecked": True,
                "text": self.text()}


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class SizeFit:
    """A ``scaling.json`` as read: its ``epsilon``, the sweep's options (``meta``), its target (the
    model it predicted) and ``fits`` (the file's groups, validated)."""

    path: str
    epsilon: float
    meta: dict
    target: dict
    fits: tuple[dict, ...]

    def _group(self, parallel: str, recipe: str, guard: str) -> dict:
        g = next((f for f in self.fits if (f["parallel"], f["recipe"], f["guard"]) == (parallel, recipe, guard)), None)
        if g is None:
            have = ", ".join(f"{f['parallel']}/{f['recipe']}/{f['guard']}" for f in self.fits) or "none"
            raise ValueError(f"{self.path}: no size fit for parallel {parallel}, recipe {recipe}, guard {guard} "
                             f"(the file fits {have}): run 'phy802 experiment --sizes' with that parallelism, "
                             "recipe and guard")
        if g.get("fit") is None:
            raise ValueError(f"{self.path}: the size fit of {parallel} recipe {recipe} guard {guard} was not made: "
                             f"{g.get('why_no_fit') or 'no reason recorded'}")
        return g

    def predict(self, parallel: str, recipe: str, guard: str, model: str, n_params: int) -> PredictedThreshold:
        """The threshold predicted at ``n_params`` (ValueError naming the file when the cell has no fit,
        or when the file has no covariance and ``n_params`` is not the model it predicted)."""
        g = self._group(parallel, recipe, guard)
        f = g["fit"]
        ns = [int(p["n_params"]) for p in g["points"] if "log10_ber" in p]
        if "cov" in f:
            x = math.log10(n_params)
            (c00, c01), (c10, c11) = f["cov"]
            y = f["intercept"] + f["slope"] * x
            sd = math.sqrt(max(c00 + (c01 + c10) * x + c11 * x * x, 0.0))
        elif g.get("prediction") and int(g["prediction"]["n_params"]) == int(n_params):
            y, sd = math.log10(g["prediction"]["ber"]), float(g["prediction"]["log10_sd"])
        else:
            raise ValueError(f"{self.path}: the fit of {parallel}/{recipe}/{guard} has no field 'cov' (written by an "
                             f"older phy802): it predicts only its target, {self.target.get('n_params')} parameters, "
                             f"not {n_params:,}; run the same 'phy802 experiment --sizes' command on its folder again "
                             "(it resumes every run and refits)")
        return PredictedThreshold(parallel=parallel, recipe=recipe, guard=guard, ber_is=str(g.get("ber_is", "")),
                                  model=model, n_params=int(n_params), log10_ber=float(y), log10_sd=float(sd),
                                  epsilon=self.epsilon, fit_range=(min(ns), max(ns)), source=self.path)

    def check_results(self, meta: dict, rows: Sequence[dict], results: str) -> None:
        """ValueError naming both files when the results were not made under the sweep's conditions:
        another FEC, a recipe, parallelism or guard the file has no fit for, another BER kind."""
        fec_s, fec_r = str(self.meta.get("fec", "bypass")), str(meta.get("fec", "bypass"))
        if fec_s != fec_r:
            raise ValueError(f"{self.path}: the size sweep ran --fec {fec_s}, the results in {results} --fec {fec_r}: "
                             "a threshold of one does not price the other")
        for r in rows:
            if float(r["ber"]) <= 0:
                continue
            par, recipe, guard = r["parallel"], str(r.get("recipe", "default")), str(r["guard"])
            g = self._group(par, recipe, guard)
            kind = r.get("ber_is")
            if kind and g.get("ber_is") and kind not in str(g["ber_is"]).split("/"):
                raise ValueError(f"{self.path}: the fit of {par}/{recipe}/{guard} is in {g['ber_is']} BER, the results "
                                 f"in {results} give {kind} BER: the same number is another error rate")


def scaling_beside(results: str | os.PathLike) -> str | None:
    """The ``scaling.json`` of the ``experiment --sizes`` campaign a results folder (or its
    ``results.json``) belongs to: in the folder itself (the campaign folder) or in its parent (a
    ``size-*`` folder); None when there is none. Found, not read: the caller decides to use it."""
    p = os.fspath(results)
    folder = p if os.path.isdir(p) else os.path.dirname(p) or "."
    for d in (folder, os.path.normpath(os.path.join(folder, os.pardir))):
        f = os.path.join(d, SCALING_FILE)
        if os.path.isfile(f):
            return f
    return None


def read_size_fit(path: str | os.PathLike) -> SizeFit:
    """Read and check a ``scaling.json`` (``phy802 experiment --sizes``); ValueError naming the file and field."""
    from phy802.runtime.inputs import read_json_file

    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, SCALING_FILE)
    doc = read_json_file(p, 1 << 26, what="phy802 experiment --sizes scaling.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("fits"), list):
        raise ValueError(f"{p}: expected an object with a 'fits' list (phy802 experiment --sizes scaling.json)")
    eps = doc.get("epsilon")
    if not (_num(eps) and eps > 0):
        raise ValueError(f"{p}: field 'epsilon' must be a number > 0, got {eps!r}")
    if not doc["fits"]:
        raise ValueError(f"{p}: field 'fits' is empty: no size was measured (the sweep did not finish)")
    for i, g in enumerate(doc["fits"]):
        if not isinstance(g, dict) or not all(isinstance(g.get(k), str) for k in ("parallel", "recipe", "guard")):
            raise ValueError(f"{p}: fits[{i}] must be an object with string fields parallel, recipe, guard")
        if not isinstance(g.get("points"), list) or not all(isinstance(e, dict) and _num(e.get("n_params"))
                                                           and e["n_params"] >= 1 for e in g["points"]):
            raise ValueError(f"{p}: fits[{i}].points must be a list of objects with n_params >= 1")
        f = g.get("fit")
        if f is None:
            continue
        if not isinstance(f, dict) or not all(_num(f.get(k)) for k in ("intercept", "slope")):
            raise ValueError(f"{p}: fits[{i}].fit must have numbers intercept and slope")
        if "cov" in f:
            c = f["cov"]
            ok = (isinstance(c, list) and len(c) == 2 and all(isinstance(r, list) and len(r) == 2 and all(_num(v) for v in r)
                                                              for r in c))
            if not ok or c[0][0] < 0 or c[1][1] < 0:
                raise ValueError(f"{p}: fits[{i}].fit.cov must be a 2x2 covariance of numbers, got {c!r}")
        if sum("log10_ber" in e for e in g["points"]) < 2:
            raise ValueError(f"{p}: fits[{i}] has a fit but fewer than two fitted points")
        pred = g.get("prediction")
        if pred is not None and not (isinstance(pred, dict) and _num(pred.get("ber")) and _num(pred.get("log10_sd"))
                                     and _num(pred.get("n_params"))):
            raise ValueError(f"{p}: fits[{i}].prediction must have numbers ber, log10_sd and n_params")
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    target = doc.get("target") if isinstance(doc.get("target"), dict) else {}
    return SizeFit(path=p, epsilon=float(eps), meta=meta, target=target, fits=tuple(doc["fits"]))


def results_n_params(rows: Sequence[dict]) -> int | None:
    """The parameter count of the model an ``experiment`` measured (its rows' ``n_params``, else their
    runs' in ``seeds_detail``; None: not recorded, or not one count)."""
    ns = {int(r["n_params"]) for r in rows if _num(r.get("n_params"))}
    ns |= {int(s["n_params"]) for r in rows for s in (r.get("seeds_detail") or ())
           if isinstance(s, dict) and _num(s.get("n_params"))}
    return ns.pop() if len(ns) == 1 else None


def measured_text(n_params: int | None) -> str:
    """What a measured loss side is, said the same way everywhere."""
    return (f"measured on the {n_params:,}-parameter model of the results" if n_params is not None else
            "measured on the results' model (its parameter count is not recorded in the results)")
