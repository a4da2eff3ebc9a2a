"""Per-link receive mode from a port's FEC histogram fit (``phy802 advise``, per-port table).

A port's fit (:func:`phy802.telemetry.fit.fit_histogram`: best law by AIC among the laws that pass their
goodness-of-fit test, pre-FEC BER and FER with 95% intervals, margin to the target FER) decides
which receive modes the link can run.  Every decision uses the upper end of the pre-FEC BER
interval with the fitted error shape held (the law's error probability scaled, as the margin is),
so a link is given a faster mode only where the counts support it:

* ``kp4/ieee`` (the 802.3bs default) is always allowed: it is the fallback of SPEC D7.
* a correcting mode of another code (``rs272/ieee``: the shorter RS(272,258), t = 7, the
  low-latency FEC) when the fitted law's codeword error ratio under that code, at the BER's upper
  end, is at most the target FER (:func:`phy802.telemetry.fit.model_pmf`: the same per-symbol law on a
  codeword of the other length) [I: a link retrained to the other code keeps its error shape];
* ``kp4/llr`` (SPEC D8) on a port whose KP4 FER is above the target: its uncorrectable frames are
  resent by the link in a round trip instead of the transport's timeout; the port is also listed
  for repair;
* the error-delivering modes (``bypass``, ``unequal``) only when (1) a frame's headers are lost no
  more often than the target FER (:func:`protocol.cluster.flat.frame_loss_probability`, independent
  bit errors at the BER's upper end) and (2) the loss side (:class:`LossSide`) measured a loss
  penalty at or below the tolerance at a BER at least the link's upper BER; without a loss side they
  are not considered.

Of the allowed modes the one with the least receive latency (:func:`protocol.cluster.flat.phy_latency_ns`)
is chosen.  A port with no law that fits (``unknown``), FEC off or no codewords keeps ``kp4/ieee``:
its margin is not known, so the FEC stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ADVISE_MODES", "REFERENCE_MODE", "AdviseConfig", "LossSide", "LinkAdvice", "link_advice",
           "mode_latency_ns", "mode_delivers_errors"]

#: the receive modes ``advise`` considers, as ``code/fec`` (the issue's ieee, rs272/LL-FEC, llr, bypass, unequal)
ADVISE_MODES: tuple[str, ...] = ("kp4/ieee", "rs272/ieee", "kp4/llr", "kp4/unequal", "kp4/bypass")
REFERENCE_MODE = "kp4/ieee"


@dataclass(frozen=True)
class AdviseConfig:
    """What ``advise`` decides with: ``target_fer`` (codeword error ratio a link must stay under),
    ``modes`` (candidates, ``code/fec``), ``max_loss_penalty`` (validation-loss penalty tolerated
    from delivered errors), ``payload_octets`` (RoCEv2 payload of a frame, for header losses),
    ``rate`` (line rate for latencies), ``min_gain`` (the step-time saving, as a fraction, below
    which the verdict is to keep FEC: a gain inside the time model's own error is no reason to
    change a fabric)."""

    target_fer: float = 1e-13
    modes: tuple[str, ...] = ADVISE_MODES
    max_loss_penalty: float = 0.01
    payload_octets: int = 4096
    rate: str = "400G"
    min_gain: float = 1e-3

    def __post_init__(self) -> None:
        if not 0 < self.target_fer < 1:
            raise ValueError(f"target_fer must be in (0, 1), got {self.target_fer}")
        if REFERENCE_MODE not in self.modes:
            raise ValueError(f"modes must include {REFERENCE_MODE} (the fallback), got {', '.join(self.modes)}")
        for m in self.modes:
            if m not in ADVISE_MODES:
                raise ValueError(f"mode {m!r}: choose from {', '.join(ADVISE_MODES)}")
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"min_gain must be in [0, 1), got {self.min_gain}")
        if self.max_loss_penalty < 0:
            raise ValueError(f"max_loss_penalty must be >= 0, got {self.max_loss_penalty}")


@dataclass(frozen=True)
class LossSide:
    """Measured loss side of an ``experiment`` results folder: ``points[fec]`` is a tuple of
    ``(ber, penalty, guard, steps_to_target)`` (the best guard per BER) of an error-delivering mode;
    ``base_steps``: the error-free run's steps to the target loss; ``source`` says where (the model
    it was measured on).  ``predicted[fec]``: for a larger model, the tolerated BER the size fit
    predicts at its size (:class:`protocol.cluster.sizefit.PredictedThreshold`); where set, it judges
    that mode instead of ``points`` (a threshold, not a penalty: tolerated only at or below its 95%
    interval's lower end, and then counted as the error-free run's steps [I])."""

    points: dict = field(default_factory=dict)
    source: str = ""
    base_steps: float | None = None
    target_loss: float | None = None
    predicted: dict = field(default_factory=dict)

    def _at(self, fec: str, ber: float):
        pts = sorted(p for p in self.points.get(fec, ()) if p[0] >= ber)
        return pts[0] if pts else None

    def penalty(self, fec: str, ber: float) -> tuple[float, float, str] | None:
        """``(penalty, measured_ber, guard)`` at the smallest measured BER >= ``ber`` (penalty taken
        as non-decreasing in BER [I]); None when no measurement covers ``ber``."""
        p = self._at(fec, ber)
        return None if p is None else (float(p[1]), float(p[0]), str(p[2]))

    def steps(self, fec: str, ber: float) -> float | None:
        """Steps to the target loss measured at the smallest BER >= ``ber`` (inf: never reached); with a
        prediction: the error-free run's where the BER is tolerated, None where it is not judged so."""
        if fec in self.predicted:
            from protocol.cluster.sizefit import TOLERATED

            return self.base_steps if self.predicted[fec].verdict(ber) == TOLERATED else None
        p = self._at(fec, ber)
        return None if p is None or len(p) < 4 else float(p[3])


def mode_latency_ns(mode: str, rate: str = "400G") -> float:
    """Receive-side added latency of ``code/fec`` (:func:`protocol.cluster.flat.phy_latency_ns`)."""
    from protocol.cluster.flat import phy_latency_ns

    code, _, fec = mode.partition("/")
    return float(phy_latency_ns(code, fec, rate))


def mode_delivers_errors(mode: str) -> bool:
    """True for the modes whose receiver hands payload bit errors to the application."""
    from protocol.modes import get_mode

    return bool(get_mode(mode.partition("/")[2]).tolerant)


@dataclass(frozen=True)
class LinkAdvice:
    """One port's row: fit summary, chosen mode and why, and per-mode checks (all model values
    from the fitted law except ``codewords``, which is counted)."""

    port: str
    status: str
    codewords: int
    law: str | None
    pre_fec_ber: dict | None
    fer: dict | None
    margin: dict | None
    mode: str
    why: str
    checks: dict
    repair: bool
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"port": self.port, "status": self.status, "codewords": self.codewords, "law": self.law,
                "pre_fec_ber": self.pre_fec_ber, "fer": self.fer, "margin": self.margin, "mode": self.mode,
                "why": self.why, "checks": self.checks, "repair": self.repair, "notes": list(self.notes)}


def _fer_under(fit, code: str, scale: float) -> float | None:
    """The best law's codeword error ratio under ``code`` with its error probability x ``scale``."""
    from phy802.telemetry.fit import CODES, model_pmf, scaled_params

    m = fit.best
    p = fit.fits[m].params
    q = p if scale == 1.0 else scaled_params(m, p, scale)
    if q is None:
        return None
    return float(model_pmf(m, q, CODES[code]).fer)


def link_advice(row: dict, fit, cfg: AdviseConfig = AdviseConfig(), loss: LossSide | None = None) -> LinkAdvice:
    """The advice for one port from its :func:`phy802.telemetry.ports.rank_ports` ``row`` and its
    :class:`~phy802.telemetry.fit.TailFit` (None: no codewords).  Module docstring for the rules."""
    from protocol.cluster.flat import frame_loss_probability

    base = dict(port=row["port"], status=row["status"], codewords=int(row["codewords"] or 0), law=row["model"],
                pre_fec_ber=row["pre_fec_ber"], fer=row["fer"], margin=row["margin_factor"],
                notes=tuple(row.get("notes") or ()))
    if fit is None or fit.best is None or row["status"] in ("unknown", "no data"):
        why = ("no codewords counted: nothing to judge the link by" if row["status"] == "no data" else
               (row["notes"][0] if row.get("notes") else "no law fits the histogram") + " -> margin unknown, keep FEC")
        return LinkAdvice(mode=REFERENCE_MODE, why=why, checks={}, repair=False, **base)
    ber = row["pre_fec_ber"]
    has_iv = ber.get("hi") is not None
    ber_hi = float(ber["hi"] if has_iv else ber["value"])
    at = "(upper 95%)" if has_iv else "(point value: this fit has no interval)"
    scale = ber_hi / float(ber["value"]) if ber["value"] else 1.0
    lat = {m: mode_latency_ns(m, cfg.rate) for m in cfg.modes}
    checks: dict = {}
    allowed: list[str] = []
    fer = row["fer"] or {}
    # KP4: the fit's own FER interval (its upper end); another code: the law scaled to the upper BER
    kp4_fer = fer.get("hi") if fer.get("hi") is not None else fer.get("value")
    kp4_fer = None if kp4_fer is None else float(kp4_fer)
    for m in cfg.modes:
        code, _, fec = m.partition("/")
        if mode_delivers_errors(m):
            drop = float(frame_loss_probability(code, fec, min(ber_hi, 0.49), cfg.payload_octets, cfg.rate))
            ok_hdr = drop <= cfg.target_fer
            pt = loss.predicted.get(fec) if loss is not None else None
            pen = loss.penalty(fec, ber_hi) if loss is not None and pt is None else None
            ok_loss = pen is not None and pen[0] <= cfg.max_loss_penalty
            if pt is not None:  # a larger model: the size fit's threshold judges the BER, no penalty
                tol = pt.verdict(ber_hi)
                ok_loss = tol == "tolerated"
            if not ok_hdr:
                why = f"frame header loss {drop:.2g} per frame > target {cfg.target_fer:.0e} (model)"
            elif pt is not None:
                why = (f"BER {ber_hi:.2g} {tol} by the tolerated BER predicted for {pt.model} (guard {pt.guard}): "
                       f"{pt.ber:.2g}, 95% interval [{pt.lo95:.2g}, {pt.hi95:.2g}] (size fit, unchecked)"
                       + (f", header loss {drop:.2g}" if ok_loss else ""))
            elif pen is None:
                why = ("no loss side given (--results): delivered errors not priced" if loss is None else
                       f"loss penalty not measured at BER >= {ber_hi:.2g}")
            elif not ok_loss:
                why = (f"measured loss penalty {pen[0]:+.3g} at BER {pen[1]:.2g} ({pen[2]}) > tolerance "
                       f"{cfg.max_loss_penalty:g}")
            else:
                why = f"measured loss penalty {pen[0]:+.3g} at BER {pen[1]:.2g} ({pen[2]}), header loss {drop:.2g}"
            checks[m] = {"allowed": ok_hdr and ok_loss, "header_loss": drop,
                         "loss_penalty": None if pen is None else pen[0], "why": why,
                         **({"tolerated": tol} if pt is not None else {})}
            if ok_hdr and ok_loss:
                allowed.append(m)
            continue
        f = kp4_fer if code == "kp4" else _fer_under(fit, code, scale)
        ok = f is not None and f <= cfg.target_fer
        if fec == "llr":  # link-level retry: the port's KP4 frames that fail are replayed by the link
            ok = True
        checks[m] = {"allowed": ok, "fer_at_ber_hi": f,
                     "why": (f"FER {f:.2g} at BER {ber_hi:.3g} {at} {'<=' if f is not None and f <= cfg.target_fer else '>'} "
                             f"target {cfg.target_fer:.0e} (model, {fit.best})" if f is not None else
                             "the law leaves its range when scaled to the BER's upper end")}
        if ok:
            allowed.append(m)
    below = kp4_fer is None or kp4_fer > cfg.target_fer
    if below:
        mode = "kp4/llr" if "kp4/llr" in cfg.modes else REFERENCE_MODE
        why = (f"KP4 FER {kp4_fer:.2g} above the target {cfg.target_fer:.0e}: repair (optics/cabling); "
               + ("link-level retry resends its uncorrectable frames in a link round trip" if mode == "kp4/llr"
                  else "keep FEC") if kp4_fer is not None else "KP4 FER beyond the law's range: repair")
        return LinkAdvice(mode=mode, why=why, checks=checks, repair=True, **base)
    allowed = [m for m in allowed if m != "kp4/llr"] or [REFERENCE_MODE]
    mode = min(allowed, key=lambda m: (lat[m], cfg.modes.index(m)))
    if mode == REFERENCE_MODE:
        why = "; ".join(f"{m}: {c['why']}" for m, c in checks.items() if not c["allowed"] and lat[m] < lat[mode])
        why = "no faster mode passes" + (f" ({why})" if why else "")
    else:
        why = f"fastest allowed ({lat[mode]:.1f} ns vs {lat[REFERENCE_MODE]:.1f} ns): {checks[mode]['why']}"
    return LinkAdvice(mode=mode, why=why, checks=checks, repair=False, **base)
