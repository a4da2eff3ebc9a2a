"""``phy802 advise``: a fabric's FEC histograms + its cluster + a workload -> keep FEC or not, link by link.

:mod:`.policy` decides each port's receive mode from its histogram fit, :mod:`.fabric` joins the
ports with the time model into scenarios and a verdict, :mod:`.replay` replays a series of
snapshots with SPEC D7's degradation monitor as the fallback trigger.
"""

from __future__ import annotations

from .fabric import SCENARIOS, TimeSide, evaluate, scenarios, verdict
from .policy import ADVISE_MODES, REFERENCE_MODE, AdviseConfig, LinkAdvice, LossSide, link_advice

__all__ = ["ADVISE_MODES", "REFERENCE_MODE", "AdviseConfig", "LinkAdvice", "LossSide", "link_advice", "SCENARIOS",
           "TimeSide", "evaluate", "scenarios", "verdict", "check_fec_config", "advise_links", "loss_side_from_results",
           "FEC_ACTIVE_FOR_CODE"]

#: target loss = the error-free run's final loss x (1 + TARGET_REL), as ``phy802 tradeoff``'s default
TARGET_REL = 0.01

#: ethtool's active FEC encodings that run each code (``ethtool --show-fec``: ``RS`` = Clause 91/108/119
#: RS(528/544), ``LLRS`` = the low-latency RS(272)); any other (``None``, ``Off``, ``BaseR``) is another config
FEC_ACTIVE_FOR_CODE = {"kp4": ("rs",), "kr4": ("rs",), "rs272": ("llrs",)}


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


def loss_side_from_results(folder: str, name: str | None = None) -> LossSide:
    """The measured loss penalties of an ``experiment`` results folder: per error-delivering mode
    and BER the best guard's final validation loss minus the error-free run's (``bypass`` from a
    ``bypass`` run; ``unequal`` from its ``exponent_protection`` rows, as
    :mod:`protocol.cluster.tradeoff` reads them).  ``name``: what the source names the folder
    (default ``folder``)."""
    import math

    from protocol.cluster.tradeoff import load_results, steps_to_target

    meta, rows = load_results(folder)
    fec = str(meta.get("fec", "bypass"))
    pars = sorted({r["parallel"] for r in rows})
    if len(pars) != 1:
        raise ValueError(f"{folder}: results of several parallelisms ({', '.join(pars)}): give one experiment's folder")
    base = [r for r in rows if float(r["ber"]) == 0.0]
    if not base:
        raise ValueError(f"{folder}: results have no error-free (ber 0) row for {pars[0]}: the reference is missing")
    ref = float(base[0]["final_val_loss"])
    target = ref * (1 + TARGET_REL)
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
    model = meta.get("model") or "the experiment's small model"
    return LossSide(points, f"{name or folder} ({model})", steps_to_target(base[0]["evals"], target), target)
