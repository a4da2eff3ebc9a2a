"""How the tolerated BER moves with model size: a log-log fit over the char models trained here,
and its prediction for a larger model (GPT-2 124M) -- unchecked until a GPU run measures it.

Method, stated once:

* Each size gives one point ``(log10 parameters, log10 threshold)`` from its tolerance-table row
  (:func:`integration.tolerance.tolerance_table`): the centre is the interpolated threshold when
  there is one, else the middle (in log10) of its grid bracket; its standard deviation is half
  the log10 width of the 95% interval over seeds divided by 1.96 when both ends lie inside the
  grid, else that of a uniform spread over the grid bracket (log10 width / sqrt 12). A threshold
  below or above the grid gives no point (it is said, and the fit is not made).
* The fit is weighted least squares ``log10 T = a + b log10 N`` with these standard deviations
  taken as known: its covariance is ``(X^T W X)^-1``. ``chi2`` over ``dof = points - 2`` says
  whether a power law fits within them; when ``chi2 / dof > 1`` the covariance is scaled by it
  (the Birge ratio), so that scatter the stated errors do not explain widens the prediction.
* A prediction at ``N`` is ``a + b log10 N`` with its standard deviation from the covariance; its
  95% interval is +/- 1.96 of them. It extrapolates far beyond the sizes measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["SizePoint", "ScalingFit", "size_point", "fit_scaling", "UNCHECKED", "scaling_doc", "scaling_md", "plot_scaling",
           "write_scaling"]

#: said beside every prediction
UNCHECKED = ("a prediction, unchecked: no model of that size has been measured here; "
             "benchmarks/paper_run.py measures GPT-2 124M on a GPU")


@dataclass(frozen=True)
class SizePoint:
    """One model size's threshold: ``log10`` of it, its standard deviation (decades) and how it was read."""

    n_params: int
    log10_ber: float
    sigma: float
    how: str


def size_point(n_params: int, row: dict) -> SizePoint | str:
    """The fit's point of one tolerance-table row, or a sentence saying why it has none."""
    if row["status"] != "bracketed":
        return (f"{n_params:,} parameters: threshold {row['threshold']} is {row['status']} "
                f"(widen --bers so that it is bracketed)")
    lp, lf = math.log10(row["passes"]), math.log10(row["fails"])
    if row.get("interp") is not None:
        centre, how = math.log10(row["interp"]), "interpolated"
    else:
        centre, how = (lp + lf) / 2, "middle of the grid bracket"
    lo, hi = row.get("lower"), row.get("upper")
    if row.get("interval_known") and lo is not None and hi is not None:
        sigma, how = (math.log10(hi) - math.log10(lo)) / 2 / 1.96, how + "; sd from the 95% interval"
    else:
        sigma, how = (lf - lp) / math.sqrt(12), how + "; sd of the grid bracket (no interval inside the grid)"
    return SizePoint(int(n_params), centre, sigma, how)


@dataclass(frozen=True)
class ScalingFit:
    """``log10 T = intercept + slope * log10 N`` and its covariance (see the module's method)."""

    points: tuple[SizePoint, ...]
    intercept: float
    slope: float
    cov: tuple[tuple[float, float], tuple[float, float]]
    chi2: float
    dof: int
    #: the covariance was scaled by chi2/dof (the points scatter more than their errors say)
    scaled: bool

    @property
    def slope_sd(self) -> float:
        return math.sqrt(self.cov[1][1])

    def predict(self, n_params: float) -> tuple[float, float]:
        """``log10`` of the predicted threshold at ``n_params`` and its standard deviation (decades)."""
        x = math.log10(n_params)
        c = np.asarray(self.cov)
        v = np.array([1.0, x])
        return self.intercept + self.slope * x, float(math.sqrt(max(float(v @ c @ v), 0.0)))

    @property
    def fits(self) -> str:
        """One sentence on whether a power law fits the points within their errors."""
        if self.dof == 0:
            return "two points: the line passes through both, nothing checks that a power law fits"
        from scipy.stats import chi2 as chi2_dist

        p = float(chi2_dist.sf(self.chi2, self.dof))
        verdict = "fits within the errors" if p >= 0.05 else "does NOT fit within the errors"
        return (f"chi2 {self.chi2:.3g} on {self.dof} dof (p = {p:.2g}): a power law {verdict}"
                + ("; covariance scaled by chi2/dof" if self.scaled else ""))


def fit_scaling(points: Sequence[SizePoint]) -> ScalingFit:
    """Weighted least squares of log10 threshold on log10 parameters (ValueError: fewer than two
    distinct sizes, or a non-positive standard deviation)."""
    pts = tuple(sorted(points, key=lambda p: p.n_params))
    if len({p.n_params for p in pts}) < 2 or len({p.n_params for p in pts}) != len(pts):
        raise ValueError(f"a fit needs at least two distinct model sizes, got {[p.n_params for p in pts]}")
    if any(not (math.isfinite(p.sigma) and p.sigma > 0) for p in pts):
        raise ValueError(f"every point needs a standard deviation > 0, got {[p.sigma for p in pts]}")
    x = np.log10([p.n_params for p in pts])
    y = np.array([p.log10_ber for p in pts])
    w = 1.0 / np.array([p.sigma for p in pts]) ** 2
    X = np.column_stack([np.ones_like(x), x])
    cov = np.linalg.inv(X.T @ (X * w[:, None]))
    a, b = cov @ (X.T @ (w * y))
    chi2 = float(np.sum(w * (y - a - b * x) ** 2))
    dof = len(pts) - 2
    scaled = dof > 0 and chi2 / dof > 1
    if scaled:
        cov = cov * (chi2 / dof)
    return ScalingFit(points=pts, intercept=float(a), slope=float(b),
                      cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
                      chi2=chi2, dof=dof, scaled=bool(scaled))


def scaling_doc(sizes: Sequence[dict], epsilon: float, target: tuple[str, int]) -> dict:
    """The size sweep's result: per (parallelism, recipe, guard), each size's point (or why it has
    none), the fit and its prediction for ``target`` (model name, parameters). ``sizes``: one dict
    per size with ``size``, ``n_params`` and ``tolerance`` (its tolerance-table rows)."""
    groups = list(dict.fromkeys((t["parallel"], t["recipe"], t["guard"]) for s in sizes for t in s["tolerance"]))
    fits = []
    for key in groups:
        pts, why, entries, kinds = [], [], [], set()
        for s in sizes:
            row = next((t for t in s["tolerance"] if (t["parallel"], t["recipe"], t["guard"]) == key), None)
            if row is None:
                why.append(f"size {s['size']}: no cell of this parallelism, recipe and guard")
                continue
            kinds.add(row["ber_is"])
            p = size_point(s["n_params"], row)
            entry = {"size": s["size"], "n_params": s["n_params"], "threshold": row["threshold"],
                     "interval": row["interval"], "delivered_passes": row["delivered_passes"]}
            if isinstance(p, str):
                why.append(p)
            else:
                pts.append(p)
                entry.update(log10_ber=p.log10_ber, sigma=p.sigma, how=p.how)
            entries.append(entry)
        fit = pred = None
        if not why and len(pts) >= 2:
            f = fit_scaling(pts)
            y, sd = f.predict(target[1])
            # cov: what a prediction at another size needs (protocol/cluster/sizefit.py reads it)
            fit = {"slope": f.slope, "slope_sd": f.slope_sd, "intercept": f.intercept, "cov": [list(r) for r in f.cov],
                   "chi2": f.chi2, "dof": f.dof, "scaled": f.scaled, "fits": f.fits}
            pred = {"model": target[0], "n_params": target[1], "ber": 10 ** y, "log10_sd": sd,
                    "ber_lo95": 10 ** (y - 1.96 * sd), "ber_hi95": 10 ** (y + 1.96 * sd), "note": UNCHECKED}
        elif not why:
            why.append("fewer than two sizes with a bracketed threshold")
        fits.append({"parallel": key[0], "recipe": key[1], "guard": key[2], "ber_is": "/".join(sorted(kinds)),
                     "points": entries, "fit": fit, "prediction": pred, "why_no_fit": "; ".join(why) or None})
    return {"epsilon": float(epsilon), "target": {"model": target[0], "n_params": target[1]},
            "sizes": list(sizes), "fits": fits}


def scaling_md(doc: dict) -> str:
    """The size sweep in Markdown: each size's threshold, the fit, the prediction (said unchecked)."""
    lines = [f"Tolerated BER vs model size (penalty under epsilon = {doc['epsilon']:g} nats); fit: log10 T = a + "
             f"b log10 N, weighted least squares (integration/scaling.py)", ""]
    t = doc["target"]
    for g in doc["fits"]:
        lines.append(f"{g['parallel']} recipe {g['recipe']} guard {g['guard']} (BER given: {g['ber_is']}"
                     + ("; recipe inferred, not quoted" if g["recipe"] == "paper" else "") + ")")
        lines.append("")
        lines.append("| size | parameters | threshold (grid) | 95% interval | point (log10) +/- sd | read as |")
        lines.append("|---|---|---|---|---|---|")
        for e in g["points"]:
            pt = f"{e['log10_ber']:.2f} +/- {e['sigma']:.2f}" if "log10_ber" in e else "-"
            lines.append(f"| {e['size']} | {e['n_params']:,} | {e['threshold']} | {e['interval'] or '-'} | {pt} | "
                         f"{e.get('how', 'no point')} |")
        lines.append("")
        if g["fit"] is None:
            lines.append(f"no fit: {g['why_no_fit']}")
        else:
            f, p = g["fit"], g["prediction"]
            lines.append(f"slope b = {f['slope']:.3g} +/- {f['slope_sd']:.2g} (decades of BER per decade of "
                         f"parameters); {f['fits']}")
            lines.append(f"{p['model']} ({p['n_params']:,} parameters): threshold {p['ber']:.2g}, 95% interval "
                         f"[{p['ber_lo95']:.2g}, {p['ber_hi95']:.2g}] -- {p['note']}")
        lines.append("")
    if not doc["fits"]:
        lines.append(f"no size measured yet (prediction target: {t['model']}, {t['n_params']:,} parameters)")
    return "\n".join(lines) + "\n"


def plot_scaling(doc: dict, path: str) -> None:
    """Threshold vs parameters (log-log), one panel per (parallelism, recipe, guard): each size's grid
    bracket (bar) and point (+/- 1.96 sd), the fit with its 95% band out to the target, and the
    target's prediction as a hollow marker, labelled unchecked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gs = doc["fits"]
    fig, axes = plt.subplots(1, len(gs), figsize=(max(5.0 * len(gs), 7.5), 4.4), squeeze=False)
    t = doc["target"]
    for ax, g in zip(axes[0], gs):
        for e, s in zip(g["points"], doc["sizes"]):
            row = next(r for r in s["tolerance"] if (r["parallel"], r["recipe"], r["guard"]) == (g["parallel"], g["recipe"], g["guard"]))
            lo = row["passes"] if row["passes"] is not None else row["fails"] / 10
            hi = row["fails"] if row["fails"] is not None else row["passes"] * 10
            ax.plot([e["n_params"]] * 2, [lo, hi], color="0.6", lw=6, alpha=0.5, solid_capstyle="butt")
            if "log10_ber" in e:
                y, sd = e["log10_ber"], e["sigma"]
                ax.errorbar([e["n_params"]], [10 ** y], yerr=[[10 ** y - 10 ** (y - 1.96 * sd)],
                                                               [10 ** (y + 1.96 * sd) - 10 ** y]],
                            fmt="o", color="C0", capsize=3)
        if g["fit"] is not None:
            f, p = g["fit"], g["prediction"]
            xs = np.logspace(math.log10(min(e["n_params"] for e in g["points"])), math.log10(t["n_params"]), 60)
            ys = f["intercept"] + f["slope"] * np.log10(xs)
            ax.plot(xs, 10 ** ys, color="C1", label=f"fit: slope {f['slope']:.2g} +/- {f['slope_sd']:.1g}")
            ax.errorbar([p["n_params"]], [p["ber"]], yerr=[[p["ber"] - p["ber_lo95"]], [p["ber_hi95"] - p["ber"]]],
                        fmt="o", mfc="white", color="C3", capsize=4,
                        label=f"{p['model']}: predicted {p['ber']:.1g}, unchecked")
        else:
            ax.text(0.03, 0.05, "no fit: " + (g["why_no_fit"] or "")[:80], transform=ax.transAxes, fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel(f"tolerated BER [{g['ber_is']}]")
        ax.set_title(f"{g['parallel'].upper()} recipe {g['recipe']} guard {g['guard']}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"tolerated BER (penalty < {doc['epsilon']:g} nats) vs model size; grey: grid bracket; "
                 f"bars: 95%\nthe {t['model']} point is an extrapolation, unchecked until measured on a GPU",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_scaling(out: str, doc: dict, meta: dict, *, force: bool = False) -> list[str]:
    """Write ``scaling.json``, ``scaling.md`` and (with a measured size) ``scaling.png`` as the output
    set of ``out`` (:func:`phy802.runtime.output.output_set`; each size's campaign folder inside is kept)."""
    import json
    import os

    from phy802.runtime.jsonable import to_jsonable
    from phy802.runtime.output import output_set

    names = ["scaling.json", "scaling.md"]
    with output_set(out, "experiment", force=force) as stage_p:
        stage = str(stage_p)
        with open(os.path.join(stage, "scaling.json"), "w", encoding="utf-8") as fh:
            json.dump(to_jsonable({"meta": meta, **doc}), fh)
        with open(os.path.join(stage, "scaling.md"), "w", encoding="utf-8") as fh:
            fh.write(scaling_md(doc))
        if doc["fits"]:
            plot_scaling(doc, os.path.join(stage, "scaling.png"))
            names.append("scaling.png")
    return names
