"""``phy802 advise``: a fabric's FEC histograms + its cluster + a workload -> keep FEC or not, link by link.

:mod:`.policy` decides each port's receive mode from its histogram fit, :mod:`.fabric` joins the
ports with the time model into scenarios and a verdict, :mod:`.replay` replays a series of
snapshots with SPEC D7's degradation monitor as the fallback trigger.
"""

from __future__ import annotations

from phy802.telemetry.fit import FEC_ACTIVE_FOR_CODE

from .fabric import SCENARIOS, TimeSide, evaluate, scenarios, verdict
from .policy import ADVISE_MODES, REFERENCE_MODE, AdviseConfig, LinkAdvice, LossSide, link_advice

__all__ = ["ADVISE_MODES", "REFERENCE_MODE", "AdviseConfig", "LinkAdvice", "LossSide", "link_advice", "SCENARIOS",
           "TimeSide", "evaluate", "scenarios", "verdict", "check_fec_config", "advise_links", "loss_side_from_results",
           "FEC_ACTIVE_FOR_CODE"]

#: target loss = the error-free run's last validation-curve point x (1 + TARGET_REL), as ``phy802 tradeoff``'s default
TARGET_REL = 0.01


def check_fec_config(tel, code: str) -> None:
    """ValueError naming file, port and field when a port reports an active FEC mode other than
    the cluster's ``code`` (ports that report none are taken as configured)."""
    ok = FEC_ACTIVE_FOR_CODE.get(code, ())
    for p in tel.ports:
        if p.fec_mode is not None and p.fec_mode.lower() not in ok:
            raise ValueError(f"{tel.source}: port {p.name}: field 'active' FEC mode {p.fec_mode!r} is not the "
                             f"cluster's --code {code} (expected {' or '.join(x.upper() for x in ok)}): its histogram "
                             "counts another decoder's corrections")


def advise_links(tel, fits: dict, cfg: AdviseConfig, loss: LossSide | None = None) -> list[LinkAdvice]:
    """Every port's :class:`LinkAdvice`, worst first (the :func:`phy802.telemetry.ports.rank_ports` order)."""
    from phy802.telemetry.ports import rank_ports

    return [link_advice(r, fits.get(r["port"]), cfg, loss) for r in rank_ports(tel, fits)]


def loss_side_from_results(folder: str, name: str | None = None, size_fit=None,
                           model: tuple[str, int] | None = None) -> LossSide:
    """The measured loss penalties of an ``experiment`` results folder: per error-delivering mode
    and BER the best guard's final validation loss minus the error-free run's (``bypass`` from a
    ``bypass`` run; ``unequal`` from its ``exponent_protection`` rows, as
    :mod:`protocol.cluster.tradeoff` reads them).  ``name``: what the source names the folder
    (default ``folder``).  ``size_fit`` (:class:`protocol.cluster.sizefit.SizeFit`) and ``model``
    (name, parameters): when the model has another parameter count than the results' model, each
    mode is judged by the tolerated BER predicted at its size instead (the guard with the highest
    lower 95% end, as the measured side takes the best guard); a fit that does not match the
    results is a ValueError naming both."""
    import math

    from protocol.cluster.tradeoff import curve_target, load_results, steps_to_target

    meta, rows = load_results(folder)
    fec = str(meta.get("fec", "bypass"))
    pars = sorted({r["parallel"] for r in rows})
    if len(pars) != 1:
        raise ValueError(f"{folder}: results of several parallelisms ({', '.join(pars)}): give one experiment's folder")
    base = [r for r in rows if float(r["ber"]) == 0.0]
    if not base:
        raise ValueError(f"{folder}: results have no error-free (ber 0) row for {pars[0]}: the reference is missing")
    ref = float(base[0]["final_val_loss"])
    target = curve_target(base[0], TARGET_REL)  # on the curve's scale, as steps_to_target compares it
    pts: dict = {}
    for r in rows:
        if float(r["ber"]) == 0.0:
            continue
        v = r["final_val_loss"]
        pen = math.inf if v is None or not math.isfinite(float(v)) else float(v) - ref
        kinds = [fec] + (["unequal"] if fec == "bypass" and r["guard"] == "exponent_protection" else [])
        for k in kinds:
            pts.setdefault(k, {}).setdefault(float(r["ber"]), []).append(
                (pen, f"{pars[0]}, guard {r['guard']}", steps_to_target(r["evals"], target)))
    points = {k: tuple((b, *min(v)) for b, v in sorted(d.items())) for k, d in pts.items()}
    from protocol.cluster.sizefit import results_n_params

    small = results_n_params(rows)
    source = (f"{name or folder} ({meta.get('model') or 'the experiment' + chr(39) + 's small model'}"
              + (f", {small:,} parameters)" if small is not None else ")"))
    base_steps = steps_to_target(base[0]["evals"], target)
    if size_fit is None or model is None:
        return LossSide(points, source, base_steps, target)
    size_fit.check_results(meta, rows, name or folder)
    if small is not None and model[1] == small:
        return LossSide(points, source + f"; the size fit {size_fit.path} is not used: {model[0]} is that size",
                        base_steps, target)
    recipe = str(rows[0].get("recipe", "default"))  # one recipe per results (load_results)
    guards = {fec: sorted({str(r["guard"]) for r in rows if float(r["ber"]) > 0})}
    if fec == "bypass":
        guards["unequal"] = [g for g in guards[fec] if g == "exponent_protection"]
    pred = {k: max((size_fit.predict(pars[0], recipe, g, model[0], model[1]) for g in gs), key=lambda p: p.lo95)
            for k, gs in guards.items() if gs}
    text = "; ".join(f"{k}: {p.text()}" for k, p in pred.items())
    return LossSide(points, f"{text} (instead of the penalty {source})", base_steps, target, predicted=pred)
