"""The fabric's answer: per-link advice joined with the time model into three scenarios and a verdict.

Scenarios (each an assignment ``{port: mode}``):

* ``fec_everywhere``: ``kp4/ieee`` on every link;
* ``fabric_wide``: the best single mode that every port allows (a port that could not be judged
  allows only ``kp4/ieee`` and ``kp4/llr``), best = least modelled mean step time, then least
  failure probability;
* ``per_link``: each port's own mode (:func:`protocol.advise.policy.link_advice`).

Time side (model, :class:`protocol.cluster.tradeoff.TimeModel` on a
:class:`protocol.cluster.topology.ClusterSpec`): for each mode a scenario uses, the step time with
that mode on every link at the highest upper-95% pre-FEC BER among the ports running it (a DFE law
sets the cluster's ``burst_pb``); the scenario's step is the slowest of them, because a
synchronous collective waits for its slowest hop and every collective crosses links of each kind
[I: the ports stand for all of the fabric's links], and its failure probability is
``1 - prod(1 - failure_rate)``.  Where nccl-tests was given, the communication part carries the
measured/predicted ratio range as its interval (the time model's calibration error).
Loss side: modes that deliver no errors have no loss penalty (by construction); error-delivering
modes take the measured penalty of :class:`protocol.advise.policy.LossSide` (the small model it was
measured on is named), or, for a larger model, only its verdict against the size fit's predicted
threshold (a mode is in use only where tolerated: its penalty is under the fit's epsilon, not a
number; NaN in ``loss_penalty``, ``source`` says predicted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .policy import REFERENCE_MODE, AdviseConfig, LinkAdvice, LossSide, mode_delivers_errors, mode_latency_ns

__all__ = ["TimeSide", "scenarios", "evaluate", "verdict", "SCENARIOS"]

SCENARIOS: tuple[str, ...] = ("fec_everywhere", "fabric_wide", "per_link")
_ALWAYS = (REFERENCE_MODE, "kp4/llr")  # modes that keep the KP4 decoder: allowed on a port not judged


@dataclass(frozen=True)
class TimeSide:
    """The cluster and workload the step times come from, and what the cluster's own measurement
    said: ``ratio_range`` (measured / predicted collective time over the nccl-tests sizes, or None),
    ``notes`` (nccl-tests diagnosis), ``untrusted`` (a note that the time side should not be
    believed, e.g. the run was flagged underperforming)."""

    cluster: object
    model: str = "gpt2-124m"
    tflops: float = 989.0
    mfu: float = 0.4
    workloads: tuple[str, ...] = ("ddp", "tp")
    ratio_range: tuple[float, float] | None = None
    notes: tuple[str, ...] = ()
    untrusted: str = ""
    source: str = "cluster flags"


def _allowed(link: LinkAdvice, mode: str) -> bool:
    if mode in _ALWAYS:
        return True
    return bool(link.checks.get(mode, {}).get("allowed")) and not link.repair


def scenarios(links: list[LinkAdvice], cfg: AdviseConfig) -> dict[str, dict[str, str]]:
    """``{scenario: {port: mode}}``; ``fabric_wide`` lists each feasible single mode as
    ``fabric_wide:<mode>`` too (the best one is picked by :func:`evaluate`)."""
    out = {"fec_everywhere": {x.port: REFERENCE_MODE for x in links},
           "per_link": {x.port: x.mode for x in links}}
    for m in cfg.modes:
        if all(_allowed(x, m) for x in links):
            out[f"fabric_wide:{m}"] = {x.port: m for x in links}
    return out


def _ber_hi(link: LinkAdvice) -> float:
    b = link.pre_fec_ber
    if not b:
        return 0.0
    v = b.get("hi") if b.get("hi") is not None else b.get("value")
    return float(v or 0.0)


def _burst_pb(link: LinkAdvice, fits: dict) -> float | None:
    f = fits.get(link.port)
    if f is None or f.best != "dfe":
        return None
    return float(f.fits["dfe"].params["pb"])


def _step(ts: TimeSide, workload: str, mode: str, ber: float, burst_pb: float | None, cache: dict):
    key = (workload, mode, ber, burst_pb)
    if key not in cache:
        from protocol.cluster.tradeoff import TimeModel

        code, _, fec = mode.partition("/")
        tm = TimeModel(model=ts.model, tflops=ts.tflops, mfu=ts.mfu, workload=workload)
        c = ts.cluster.with_(code=code, fec=fec, ber=min(ber, 0.49), burst_pb=burst_pb)
        cache[key] = tm.step(workload if workload in ("ddp", "fsdp", "pp") else "ddp", c)
    return cache[key]


def evaluate(links: list[LinkAdvice], fits: dict, cfg: AdviseConfig, ts: TimeSide, loss: LossSide | None,
             cache: dict | None = None) -> list[dict]:
    """One row per (workload, scenario): step time mean and tails (model; interval from the
    nccl-tests ratio range when given), failure probability (model), loss penalty (0 where no
    errors are delivered, else measured), the modes used; ``fabric_wide`` is the best feasible single mode."""
    cache = {} if cache is None else cache
    sc = scenarios(links, cfg)
    rows = []
    for wl in ts.workloads:
        cand = []
        for name, assign in sc.items():
            parts = []
            for mode in sorted(set(assign.values())):
                on = [x for x in links if assign[x.port] == mode]
                worst = max(on, key=_ber_hi)
                parts.append((mode, _step(ts, wl, mode, _ber_hi(worst), _burst_pb(worst, fits), cache), len(on)))
            slow = max(parts, key=lambda p: (p[1].step_s if math.isfinite(p[1].step_s) else math.inf))
            st = slow[1]
            fail = 1.0 - math.prod(1.0 - p[1].failure_rate for p in parts)
            pens, predicted = [], False
            for mode, _, _n in parts:
                predicted |= bool(loss and mode_delivers_errors(mode) and mode.partition("/")[2] in loss.predicted)
                if mode_delivers_errors(mode):
                    for x in links:
                        if assign[x.port] == mode:
                            pen = (loss.penalty(mode.partition("/")[2], _ber_hi(x))
                                   if loss and mode.partition("/")[2] not in loss.predicted else None)
                            pens.append(math.nan if pen is None else pen[0])
            penalty = max(pens) if pens else 0.0
            steps = None  # steps to the target loss: the error-free curve, or the worst measured curve in use
            if loss is not None and loss.base_steps is not None:
                steps = loss.base_steps
                for mode, _, _n in parts:
                    if mode_delivers_errors(mode):
                        for x in links:
                            if assign[x.port] == mode:
                                s_ = loss.steps(mode.partition("/")[2], _ber_hi(x))
                                steps = max(steps, math.nan if s_ is None else s_)
            r = {"workload": wl, "scenario": name.split(":")[0], "modes": {p[0]: p[2] for p in parts},
                 "slowest_mode": slow[0], "step_ms": 1e3 * st.step_s,
                 "step_p50_ms": 1e3 * (st.p50_s if not math.isnan(st.p50_s) else st.step_s),
                 "step_p99_ms": 1e3 * (st.p99_s if not math.isnan(st.p99_s) else st.step_s),
                 "step_p999_ms": 1e3 * (st.p999_s if not math.isnan(st.p999_s) else st.step_s),
                 "compute_ms": 1e3 * st.compute_s, "exposed_ms": 1e3 * st.exposed_s, "phy_us": 1e6 * st.phy_s,
                 "failure_probability": fail, "loss_penalty": penalty,
                 "loss_source": ("none delivered (mode keeps errors out)" if not pens else
                                 (loss.source if loss else "not measured")),
                 "source": {"step": "model", "failure_probability": "model",
                            "loss_penalty": "model (no errors delivered)" if not pens else
                            "predicted (tolerated by the size fit's threshold, unchecked)" if predicted else "measured"}}
            if ts.ratio_range is not None and math.isfinite(st.step_s):
                lo, hi = ts.ratio_range
                r["step_interval_ms"] = [1e3 * (st.compute_s + st.exposed_s * lo), 1e3 * (st.compute_s + st.exposed_s * hi)]
            if steps is not None:
                r["steps_to_target"] = steps
                r["time_to_target_s"] = steps * st.step_s
                if "step_interval_ms" in r:
                    r["time_to_target_interval_s"] = [steps * v / 1e3 for v in r["step_interval_ms"]]
                r["source"]["time_to_target"] = ("error-free steps (small model; the predicted threshold tolerates the "
                                                 "BER) x model step time" if predicted else
                                                 "measured steps (small model) x model step time")
            cand.append((name, r))
        keep = [r for n, r in cand if not n.startswith("fabric_wide:")]
        fw = [r for n, r in cand if n.startswith("fabric_wide:")]
        best = min(fw, key=lambda r: (r["step_ms"] if math.isfinite(r["step_ms"]) else math.inf,
                                      r["failure_probability"], mode_latency_ns(r["slowest_mode"], cfg.rate)))
        best["fabric_mode"] = best["slowest_mode"]
        rows += [keep[0], best, keep[1]]
        for r in rows[-3:]:
            r["vs_fec_everywhere"] = r["step_ms"] / keep[0]["step_ms"] if keep[0]["step_ms"] > 0 else math.nan
    return rows


@dataclass(frozen=True)
class Verdict:
    """The one-sentence answer and what it rests on."""

    sentence: str
    action: str
    depends_on: tuple[str, ...]
    caveats: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {"sentence": self.sentence, "action": self.action, "depends_on": list(self.depends_on),
                "caveats": list(self.caveats)}


def _eps(loss: LossSide | None) -> float:
    """The penalty bound of a predicted loss side's thresholds (the size fit's epsilon)."""
    return next(iter(loss.predicted.values())).epsilon if loss and loss.predicted else math.nan


def _pct(x: float) -> str:
    return f"{100 * x:.2g}%"


def _gain_iv(d: dict, scen: str) -> str:
    """`` [a, b]``: the saving of ``scen`` over FEC everywhere at the two ends of the nccl-tests
    ratio range (both steps' communication scaled alike), or ``""`` without nccl-tests."""
    a, b = d["fec_everywhere"].get("step_interval_ms"), d[scen].get("step_interval_ms")
    if not a or not b:
        return ""
    g = sorted(1 - y / x for x, y in zip(a, b) if x > 0)
    return f" [{_pct(g[0])}, {_pct(g[-1])}]" if g else ""


def verdict(links: list[LinkAdvice], rows: list[dict], cfg: AdviseConfig, ts: TimeSide,
            loss: LossSide | None) -> Verdict:
    """The verdict in one sentence (keep FEC / run the per-link policy / one fabric-wide mode), each
    number marked model or measured, with the caveats an untrustworthy input brings."""
    n = len(links)
    unknown = [x.port for x in links if x.status in ("unknown", "no data")]
    repair = [x.port for x in links if x.repair]
    faster = [x for x in links if x.mode not in _ALWAYS]
    # the workload where the answer matters most: the largest saving of the per-link policy
    by_wl: dict = {}
    for r in rows:
        by_wl.setdefault(r["workload"], {})[r["scenario"]] = r
    gains = {wl: 1 - d["per_link"]["step_ms"] / d["fec_everywhere"]["step_ms"] for wl, d in by_wl.items()}
    fw_gains = {wl: 1 - d["fabric_wide"]["step_ms"] / d["fec_everywhere"]["step_ms"] for wl, d in by_wl.items()}
    wl = max(gains, key=lambda k: gains[k])
    d = by_wl[wl]
    g, gf = gains[wl], fw_gains[wl]
    pen = d["per_link"]["loss_penalty"]
    pen_src = d["per_link"]["source"]["loss_penalty"]
    pen_txt = ("no loss penalty (no mode delivers errors) [model]" if pen_src.startswith("model")
               else f"a loss penalty under {_eps(loss):g} nats [{loss.source if loss else '?'}]"
               if pen_src.startswith("predicted")
               else f"a loss penalty of {pen:+.2g} [measured on {loss.source if loss else '?'}]")
    caveats = []
    if unknown:
        caveats.append(f"{len(unknown)} port(s) could not be judged (no law fits or no codewords: {', '.join(unknown[:4])}"
                       f"{', ...' if len(unknown) > 4 else ''}) and keep FEC")
    if repair:
        caveats.append(f"{len(repair)} port(s) miss the target FER under KP4 and need repair ({', '.join(repair[:4])}"
                       f"{', ...' if len(repair) > 4 else ''})")
    no_iv = [x.port for x in links if x.pre_fec_ber and x.status not in ("unknown", "no data")
             and x.pre_fec_ber.get("hi") is None]
    if no_iv:
        caveats.append(f"{len(no_iv)} port(s) judged on a point value, their fit has no interval "
                       "(dfe with --bootstrap 0)")
    if ts.untrusted:
        caveats.append(ts.untrusted)
    if ts.ratio_range is None:
        caveats.append("time side is the uncalibrated model (no --nccl-tests)")
    if any(r["loss_penalty"] != r["loss_penalty"] and not r["source"]["loss_penalty"].startswith("predicted")
           for r in rows):  # NaN: a delivering mode without its measurement
        caveats.append("a loss penalty was not measured for a mode in use")
    if not faster or g <= cfg.min_gain:
        action = "keep_fec"
        s = (f"keep FEC: the fastest receive {'mode this link allows saves' if n == 1 else f'modes these {n} links allow save'} "
             f"{_pct(max(g, 0.0))}{_gain_iv(d, 'per_link') if faster else ''} of a "
             f"{d['fec_everywhere']['step_ms']:.4g} ms {wl} step [model]"
             + (f" ({len(faster)} of {n} links could run a faster mode; changing pays from "
                f"{_pct(cfg.min_gain)})" if faster else
                " (no link passes the checks for a faster mode)"))
    elif g > gf + 1e-9:
        action = "per_link"
        kinds = {}
        for x in faster:
            kinds[x.mode] = kinds.get(x.mode, 0) + 1
        s = (f"shorten or skip FEC on {len(faster)} of {n} links ({', '.join(f'{m} on {k}' for m, k in kinds.items())}): "
             f"saves {_pct(g)}{_gain_iv(d, 'per_link')} of the {wl} step time [model] at {pen_txt}; the best "
             "fabric-wide mode "
             f"({d['fabric_wide']['fabric_mode']}) saves {_pct(max(gf, 0.0))}")
    else:
        action = "fabric_wide"
        s = (f"run {d['fabric_wide']['fabric_mode']} on all {n} links: saves {_pct(gf)}{_gain_iv(d, 'fabric_wide')} of "
             f"the {wl} step time [model] "
             f"at {pen_txt}")
    if ts.untrusted:
        s += "; but the time side is not trusted (" + ts.untrusted + ")"
    elif unknown:
        s += f"; {len(unknown)} port(s) could not be judged"
    dep = []
    e = d["fec_everywhere"]
    dep.append(f"the {wl} step's exposed communication: {e['exposed_ms']:.3g} of {e['step_ms']:.4g} ms [model]; "
               f"FEC latency on the critical path {e['phy_us']:.3g} us [model]")
    near = []
    for x in links:
        c = x.checks.get("rs272/ieee")
        if c and c.get("fer_at_ber_hi"):
            near.append((abs(math.log10(max(c["fer_at_ber_hi"], 1e-300) / cfg.target_fer)), x.port, c["fer_at_ber_hi"]))
    if near:
        _, p, f = min(near)
        dep.append(f"port {p}'s fit: its RS(272) FER {f:.2g} at the upper BER is the nearest to the target "
                   f"{cfg.target_fer:.0e} [model]")
    if any(mode_delivers_errors(m) for m in d["per_link"]["modes"]):
        dep.append(f"the loss side, {loss.source} [prediction, unchecked]" if loss and loss.predicted else
                   f"the loss side, measured on {loss.source if loss else '?'} and carried to this workload [I]")
    return Verdict(s, action, tuple(dep), tuple(caveats))
