"""Is skipping FEC worth it?  The measured loss side joined with the modelled time side.

Inputs: an ``experiment`` results folder (``results.json``: rows with ``parallel``, ``ber``,
``guard``, ``evals`` [(step, val_loss), ...], ``final_val_loss``; ``meta`` with the run's
``fec``) and a time model (:mod:`protocol.cluster.steptime` over :mod:`protocol.cluster.flat`).

For each mode (code, FEC), BER, guard and cluster size:

* **loss side**: which measured curve the mode gets.  ``ieee``, ``llr`` and ``detect_only``
  deliver no errors (a bad frame is dropped and resent), so their curve is the error-free run's
  at every BER; ``correct_no_indication`` too when its post-FEC BER
  (:func:`phy802.theory.post_fec_ber`) is below :data:`CLEAN_POST_FEC_BER`.  ``bypass`` gets
  the measured rows of an experiment run with ``fec = bypass``; ``unequal`` the rows of an
  ``unequal`` run, or of a ``bypass`` run with guard ``exponent_protection`` (the receiver
  drops flips on sign/exponent bits: the same bits ``unequal`` delivers) [I].
* **time side**: the modelled step time (:func:`protocol.steptime.step_time`), resends at the
  BER included: ``step_ms`` the mean over the simulated trials that completed, ``step_p50_ms``,
  ``step_p99_ms``, ``step_p999_ms`` quantiles of the per-trial step time (compute + the
  communication not hidden in that trial), ``failure_rate`` the share of trials in which a queue
  pair failed (the flat model has no trials: its quantiles are its one value), of the named model size (``gpt2-124m`` by default, compute from
  ``--tflops`` x MFU) or of a recorded communication log.  The loss side is measured on the
  small model of the experiment: the join assumes its loss penalty carries over [I].
* **loss penalty** = final validation loss - the error-free run's, a measured difference of two
  training runs (``loss_penalty_ci95``: the results' 95% half-width of the paired difference over
  the model seeds, ``delta_val_loss_ci95``; NaN with one run: then a penalty of a few 1e-6, of
  either sign, is a run that delivered mantissa flips, not a measured cost); **steps to target**: the
  first step at which the measured validation curve reaches the target loss (linear
  interpolation between evaluations; default target: the error-free run's last curve point x 1.01,
  :func:`curve_target`: the curve's own scale, not the fixed set's final loss);
  **time to target** = steps to target x modelled step time.  ``vs_ref`` is the time to target
  over that of error-free KP4 ``ieee`` at the same cluster size (< 1: the mode wins).
* **predicted loss side** (``predicted``: the size fit of ``experiment --sizes`` evaluated at the
  time side's model, :mod:`protocol.cluster.sizefit`): for a larger model the small model's
  penalty is not carried over; each error-delivering row is judged against the predicted
  tolerated BER's 95% interval instead (``tolerated`` column: ``tolerated`` at or below its lower
  end, ``not tolerated`` above its upper end, ``uncertain`` between).  The prediction is a
  threshold, not a curve: a tolerated row gets the error-free run's steps to target (its penalty
  is bounded by the fit's epsilon, not measured) [I]; the others get no penalty, no steps and no
  time (NaN), so they never count as fastest.  ``loss_side`` says per row which was used.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from .flat import Cluster
from .sizefit import TOLERATED, PredictedThreshold
from .steptime import (DEFAULT_SIM, PARALLEL, CommLogData, SimSettings, compute_from_flops, model_preset, step_time,
                       synthetic_ddp_log, synthetic_fsdp_log, synthetic_pp_log)

__all__ = ["DEFAULT_MODES", "REFERENCE", "CLEAN_POST_FEC_BER", "TimeModel", "load_results", "steps_to_target",
           "curve_target", "unreached_target_note",
           "tradeoff_rows", "COLUMNS", "pareto_front", "plot_pareto", "parse_modes"]

DEFAULT_MODES: tuple[tuple[str, str], ...] = (
    ("kp4", "ieee"), ("kr4", "ieee"), ("rs272", "ieee"), ("kp4", "llr"), ("rs272", "llr"),
    ("kp4", "detect_only"), ("kp4", "correct_no_indication"), ("kp4", "bypass"), ("kp4", "unequal"),
)
REFERENCE = ("kp4", "ieee")
#: below this post-FEC BER, ``correct_no_indication`` is taken as error-free on the loss side
CLEAN_POST_FEC_BER = 1e-18
COLUMNS = ("parallel", "workload", "mode", "code", "fec", "ber", "guard", "ranks", "step_ms", "step_p50_ms",
           "step_p99_ms", "step_p999_ms", "failure_rate", "compute_ms", "exposed_ms", "phy_us", "resend_ms", "final_val_loss", "loss_penalty", "loss_penalty_ci95",
           "steps_to_target", "time_to_target_s", "vs_ref", "loss_side", "tolerated")


def parse_modes(text: str | Iterable[str]) -> list[tuple[str, str]]:
    """``"kp4:ieee,rs272:llr"`` (or a list of ``code:fec``) -> ``[("kp4", "ieee"), ...]``."""
    from .flat import CODE_NAMES, FEC_NAMES

    items = [x.strip() for x in (text.split(",") if isinstance(text, str) else text) if x.strip()]
    out = []
    for it in items:
        code, sep, fec = it.partition(":")
        if not sep or code not in CODE_NAMES or fec not in FEC_NAMES:
            raise ValueError(f"mode {it!r}: expected CODE:FEC with CODE in {', '.join(CODE_NAMES)} and FEC in "
                             f"{', '.join(FEC_NAMES)}")
        out.append((code, fec))
    if not out:
        raise ValueError("no modes given")
    return out


@dataclass(frozen=True)
class TimeModel:
    """Where step times come from: a named model size with a throughput, or a recorded log.

    ``log``: a communication log (its ``parallel`` rows use it; compute measured unless
    ``tflops`` is set; rows of another ``parallel`` are refused, never silently given the preset).
    Otherwise synthetic DDP / pipeline logs of ``model``; the pipeline has ``pp_stages`` stages and
    ``microbatches`` microbatches.  ``workload`` (:mod:`protocol.cluster.workloads`; a
    :class:`~protocol.cluster.topology.ClusterSpec` only) replaces the results' ``parallel`` on the
    time side: ``tp``, ``moe``, ``decode`` put collectives on the critical path.  ``algo``:
    all-reduce algorithm (flat: ``ring`` or ``tree``; cluster: None = NCCL's choice).  ``sim``: how
    each collective's loss recovery is simulated on a cluster at BER > 0 (trials and seed).
    """

    model: str = "gpt2-124m"
    tflops: float | None = 989.0  # H100 SXM dense BF16 peak [I]
    mfu: float = 0.4
    log: CommLogData | None = None
    pp_stages: int = 2
    microbatches: int = 4
    algo: str | None = None
    workload: str | None = None
    tp: int | None = None
    sim: SimSettings = DEFAULT_SIM

    def step(self, parallel: str, cluster):
        if self.log is not None and self.log.parallel != parallel:
            raise ValueError(f"the communication log is from parallel {self.log.parallel!r} but these rows are "
                             f"{parallel!r}: record the log with the same --parallel as the results")
        if self.workload is not None and self.log is None:
            from .topology import ClusterSpec
            from .workloads import WorkloadConfig, workload_step

            if not isinstance(cluster, ClusterSpec):
                raise ValueError(f"workload {self.workload!r} needs the cluster model (not --cluster flat-ethernet)")
            if self.tflops is None:
                raise ValueError(f"TimeModel: model preset {self.model!r} needs tflops")
            return workload_step(self.workload, self.model, cluster, tflops=self.tflops, mfu=self.mfu,
                                 cfg=WorkloadConfig(tp=self.tp, microbatches=self.microbatches), algo=self.algo,
                                 pp_stages=self.pp_stages, sim=self.sim)
        if self.log is not None and self.log.parallel == parallel:
            h = self.log.header
            comp = None
            if self.tflops is not None and h.get("params") and h.get("tokens_per_step"):
                comp = compute_from_flops(h["params"], h["tokens_per_step"], cluster.ranks, self.tflops, self.mfu)
            return step_time(self.log, cluster, compute_s=comp, algo=self.algo, sim=self.sim)
        pr = model_preset(self.model)
        if self.tflops is None:
            raise ValueError(f"TimeModel: model preset {self.model!r} needs tflops")
        comp = compute_from_flops(pr["params"], pr["tokens_per_step"], cluster.ranks, self.tflops, self.mfu)
        if parallel == "fsdp":
            return step_time(synthetic_fsdp_log(pr["params"], units=pr["n_layer"], world_size=cluster.ranks),
                             cluster, compute_s=comp, algo=self.algo, sim=self.sim)
        if parallel == "ddp":
            return step_time(synthetic_ddp_log(pr["params"], world_size=cluster.ranks), cluster, compute_s=comp,
                             algo=self.algo, sim=self.sim)
        p = self.pp_stages
        dp = max(1, cluster.ranks // p)
        act = pr["tokens_per_step"] // dp // self.microbatches * pr["d_model"] * pr["act_dtype_bytes"]
        log = synthetic_pp_log(pr["params"], stages=p, microbatches=self.microbatches, act_bytes=max(1, act))
        return step_time(log, cluster.with_(ranks=max(cluster.ranks, p)), compute_s=comp, algo=self.algo,
                         sim=self.sim)


def load_results(folder: str | os.PathLike) -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of an ``experiment`` results folder (or a ``results.json`` path)."""
    path = os.fspath(folder)
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    if not os.path.exists(path):
        from .sizefit import SCALING_FILE

        folder = os.path.dirname(path)
        sizes = sorted(d for d in os.listdir(folder) if d.startswith("size-")) if os.path.isdir(folder) else []
        if sizes and os.path.isfile(os.path.join(folder, SCALING_FILE)):
            raise ValueError(f"{folder}: an 'experiment --sizes' campaign folder ({SCALING_FILE}, {', '.join(sizes)}), "
                             f"not one experiment's results: give one size's folder, e.g. {os.path.join(folder, sizes[0])}, "
                             f"and the size fit as --scaling {os.path.join(folder, SCALING_FILE)}")
        raise ValueError(f"{path}: no such file (an 'phy802 experiment --out' folder holds results.json)")
    from phy802.runtime.inputs import read_json_file

    # bounded, UTF-8, strict and depth-limited, each failure naming the file
    doc = read_json_file(path, 1 << 28, what="phy802 experiment results.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError(f"{path}: expected an object with a 'rows' list (phy802 experiment results.json)")
    if not doc["rows"]:
        raise ValueError(f"{path}: field 'rows' is empty: no loss curve to join (phy802 experiment results.json)")
    for i, r in enumerate(doc["rows"]):
        if not isinstance(r, dict):
            raise ValueError(f"{path}: row {i} must be an object, got {type(r).__name__} {str(r)[:40]}")
        for k in ("parallel", "ber", "guard", "evals", "final_val_loss"):
            if k not in r:
                raise ValueError(f"{path}: row {i} has no field {k!r}")
        if r["parallel"] not in PARALLEL:
            raise ValueError(f"{path}: row {i}: parallel must be one of {', '.join(PARALLEL)}, got {r['parallel']!r}")
        if not isinstance(r["evals"], list) or not all(isinstance(e, (list, tuple)) and len(e) == 2 for e in r["evals"]):
            raise ValueError(f"{path}: row {i}: evals must be a list of [step, val_loss] pairs")
        if not _is_num(r["ber"]) or not 0 <= r["ber"] < 0.5:
            raise ValueError(f"{path}: row {i}: field 'ber' must be a number in [0, 0.5), got {r['ber']!r}")
        if not (r["final_val_loss"] is None or _is_num(r["final_val_loss"])):
            raise ValueError(f"{path}: row {i}: field 'final_val_loss' must be a number (or null: the run died), "
                             f"got {r['final_val_loss']!r}")
        for j, (st, v) in enumerate(r["evals"]):
            if not _is_num(st) or st < 0 or not (v is None or _is_num(v)):
                raise ValueError(f"{path}: row {i}: evals[{j}] must be [step >= 0, val_loss (a number or null)], "
                                 f"got {[st, v]!r}")
    recipes = sorted({str(r.get("recipe", "default")) for r in doc["rows"]})
    if len(recipes) > 1:  # one error-free reference per join: rows of two recipes would mix their shadows
        raise ValueError(f"{path}: rows of several training recipes ({', '.join(recipes)}); the join takes one "
                         f"(run 'phy802 experiment' with one --recipes)")
    return dict(doc.get("meta") or {}), doc["rows"]


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def curve_target(shadow: dict, target_rel: float) -> float:
    """The default target loss: the error-free run's last validation-curve point x (1 + ``target_rel``).

    The curve (``evals``) is measured on random validation batches, ``final_val_loss`` on the fixed
    validation set (integration/train.py ``_Evaluator``): two measurements whose levels differ by more
    than 1% on a short run. A target from the final loss, compared with the curve, left even the
    error-free curve short of it (steps to target inf); from the curve's own last point the error-free
    run reaches its target by its last evaluation."""
    last = [_num(v) for _, v in shadow["evals"] if math.isfinite(_num(v))]
    return (last[-1] if last else _num(shadow["final_val_loss"])) * (1 + target_rel)


def unreached_target_note(shadow: dict, target: float) -> str:
    """Why the error-free run has no steps to ``target`` (``""`` when it reaches it): every mode's
    time to target is then inf, which alone would say nothing."""
    if math.isfinite(steps_to_target(shadow["evals"], target)):
        return ""
    pts = [_num(v) for _, v in shadow["evals"] if math.isfinite(_num(v))]
    low = f"its lowest validation-curve point is {min(pts):.4g}" if pts else "its validation curve has no finite point"
    return (f"the error-free run never reaches the target loss {target:.4g} ({low}): every steps/time to target "
            "is inf; give a higher --target-loss, or train longer")


def steps_to_target(evals: list, target: float) -> float:
    """First step at which the validation curve reaches ``target`` (linear interpolation); inf if never."""
    pts = [(float(s), _num(v)) for s, v in evals]
    prev = None
    for s, v in pts:
        if not math.isfinite(v):
            return math.inf  # a curve that went NaN does not come back in these runs
        if v <= target:
            if prev is None or prev[1] == v:
                return s
            s0, v0 = prev
            return s0 + (s - s0) * (v0 - target) / (v0 - v)
        prev = (s, v)
    return math.inf


def _clean(code: str, fec: str, ber: float) -> bool:
    if ber == 0 or fec in ("ieee", "llr", "detect_only"):
        return True
    if fec == "correct_no_indication" and code != "none":
        from phy802 import theory

        from .flat import _rs_code

        return float(theory.post_fec_ber(ber, _rs_code(code))) < CLEAN_POST_FEC_BER
    return False


def _measured(rows: list[dict], meta_fec: str, parallel: str, fec: str, ber: float) -> list[dict]:
    mine = [r for r in rows if r["parallel"] == parallel and float(r["ber"]) == ber and ber > 0]
    if fec == meta_fec:
        return mine
    if fec == "unequal" and meta_fec == "bypass":
        return [r for r in mine if r["guard"] == "exponent_protection"]
    return []


def tradeoff_rows(meta: dict, rows: list[dict], *, modes=DEFAULT_MODES, ranks=(8, 64, 512),
                  cluster: Cluster = Cluster(), time_model: TimeModel = TimeModel(),
                  target_loss: float | None = None, target_rel: float = 0.01,
                  on_row: Callable[[dict], None] | None = None, skipped: list | None = None,
                  predicted: Mapping[tuple[str, str], PredictedThreshold] | None = None) -> list[dict]:
    """The joined table (module docstring); ``on_row`` is called with each row as it is made.

    ``skipped`` (a list) receives ``(parallel, mode, ber)`` of the combinations the results have
    no loss curve for (e.g. ``unequal`` without an ``exponent_protection`` run).  ``predicted``:
    per ``(parallel, guard)`` the threshold predicted for the time side's model; given, it judges
    every error-delivering row instead of the measured penalty (module docstring; a row whose
    ``(parallel, guard)`` it lacks is a ValueError)."""
    meta_fec = str(meta.get("fec", "bypass"))
    out: list[dict] = []
    for par in sorted({r["parallel"] for r in rows}, key=PARALLEL.index):
        base = [r for r in rows if r["parallel"] == par and float(r["ber"]) == 0.0]
        if not base:
            raise ValueError(f"results have no error-free (ber 0) row for {par}: the reference is missing")
        shadow = base[0]
        shadow_loss = _num(shadow["final_val_loss"])
        target = target_loss if target_loss is not None else curve_target(shadow, target_rel)
        bers = sorted({float(r["ber"]) for r in rows if r["parallel"] == par})
        for n in ranks:
            ref_time = None
            for code, fec in modes:
                for ber in bers:
                    clean = _clean(code, fec, ber)
                    if clean:
                        loss_rows = [dict(shadow, guard="-")]
                    else:
                        loss_rows = _measured(rows, meta_fec, par, fec, ber)
                    if not loss_rows:
                        if skipped is not None and (par, f"{code}/{fec}", ber) not in skipped:
                            skipped.append((par, f"{code}/{fec}", ber))
                        continue
                    st = time_model.step(par, cluster.with_(ranks=n, code=code, fec=fec, ber=ber))
                    for lr in loss_rows:
                        final = _num(lr["final_val_loss"])
                        penalty, ci = final - shadow_loss, 0.0 if clean else _num(lr.get("delta_val_loss_ci95"))
                        s2t = steps_to_target(lr["evals"], target)
                        side, tol = ("error-free", None) if clean else ("measured", None)
                        if predicted is not None:
                            if clean:
                                tol = TOLERATED
                            else:
                                pt = predicted.get((par, str(lr["guard"])))
                                if pt is None:
                                    raise ValueError(f"no predicted threshold for {par} guard {lr['guard']}")
                                side, tol = "predicted", pt.verdict(ber)
                                final = penalty = ci = math.nan  # the small model's: not this size's
                                s2t = steps_to_target(shadow["evals"], target) if tol == TOLERATED else math.nan
                        t2t = s2t * st.step_s if math.isfinite(s2t) else (math.nan if math.isnan(s2t) else math.inf)
                        row = {"parallel": par, "workload": time_model.workload or par, "mode": f"{code}/{fec}",
                               "code": code, "fec": fec, "ber": ber,
                               "guard": lr["guard"], "ranks": n, "step_ms": 1e3 * st.step_s,
                               **{f"step_{q}_ms": 1e3 * (v if not math.isnan(v) else st.step_s)
                                  for q, v in (("p50", st.p50_s), ("p99", st.p99_s), ("p999", st.p999_s))},
                               "failure_rate": st.failure_rate,
                               "compute_ms": 1e3 * st.compute_s, "exposed_ms": 1e3 * st.exposed_s,
                               "phy_us": 1e6 * st.phy_s, "resend_ms": 1e3 * st.resend_s,
                               "final_val_loss": final, "loss_penalty": penalty,
                               # a measured difference of two training runs, not a residue (a guard that
                               # delivers mantissa flips moves the final loss by ~1e-6 either way): shown
                               # with the results' interval (0 where the mode is the error-free run)
                               "loss_penalty_ci95": ci,
                               "steps_to_target": s2t, "time_to_target_s": t2t, "target_loss": target,
                               "loss_side": side, "tolerated": tol}
                        if (code, fec) == REFERENCE and ber == 0.0:
                            ref_time = t2t
                        out.append(row)
            for row in out:
                if row["parallel"] == par and row["ranks"] == n:
                    ok = ref_time is not None and math.isfinite(ref_time) and ref_time > 0
                    row["vs_ref"] = row["time_to_target_s"] / ref_time if ok else float("nan")
                    if on_row is not None:
                        on_row(row)
    return out


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated in (x, y), both lower-is-better (finite points only)."""
    idx = [i for i, (x, y) in enumerate(points) if math.isfinite(x) and math.isfinite(y)]
    front = []
    for i in idx:
        xi, yi = points[i]
        if not any((points[j][0] <= xi and points[j][1] <= yi) and (points[j] != points[i]) for j in idx):
            front.append(i)
    return sorted(front, key=lambda i: points[i])



def plot_pareto(rows: list[dict], path: str | os.PathLike, clip_rel: float = 0.10, loss_side: str | None = None) -> None:
    """Loss penalty and step time per setting, one panel per cluster size; PNG written atomically
    (:func:`phy802.plots.plot_pareto`: steps slower than the reference by more than ``clip_rel``
    sit at the panel's edge with their value written; ``loss_side``: the predicted loss side's
    sentence, said under the title)."""
    from phy802.plots import plot_pareto as _plot

    _plot(rows, path, reference="/".join(REFERENCE), clip_pct=100.0 * clip_rel, loss_side=loss_side)
