"""BER x parallelism x guard sweeps over seeds, what link errors do to training, and their report.

For each parallelism and model seed (``seeds``: initial weights and data order), one error-free
run (the wrapper at BER 0, bit-identical to the plain backend, see the tests) is the *shadow*;
every run with errors of that model seed, one per link seed (``link_seeds``: the link errors),
uses the same data order and initial weights. ``delta_val_loss`` is the *paired* difference, run
minus its own shadow, on the fixed validation set. Each cell (parallelism, BER, guard) is the mean
over all (model seed, link seed) pairs with a 95% Student-t interval over the model seeds' means
(the model seeds are the independent units; with one model seed, over the link seeds; ``nan``
with one run). ``link_sd`` is the spread that the link seed alone causes: the pooled
within-model-seed standard deviation of ``delta_val_loss``; the shadow row's interval on
``final_val_loss`` is the model seeds' spread. Two noise measures, which are different things:

* ``injected_noise``: what the link put into the received float payload,
  ``||delivered - clean|| / ||clean||`` over every received message of the corrupted classes
  (after the receive guard), summed over the run and all ranks (the wrapper knows each flip's
  old and new value). ``injected_noise_step`` is the median over steps of the same ratio per
  step on rank 0 (per-step perturbation of the gradients/activations feeding the update).
  ``inf`` means a flip delivered an Inf/NaN that nothing removed.
* ``weight_dist_shadow``: ``||w - w_shadow|| / ||w_shadow||`` of the final weights. This is
  *not* injected noise: it also counts the training the run did differently afterwards, and for
  a run that never learned it is the distance from the initial weights to the trained shadow.
* ``noise_bound_ratio``: ``||w - w_shadow||`` over the study's bound ``lr x sqrt(grad_elements_hit)``
  (:func:`integration.train.noise_bound`; ``grad_elements_hit``: gradient elements hit by
  delivered flips, all ranks). Near or under 1: the errors acted as bounded noise, as the study
  argues; well above: they did more (momentum tails, frozen elements, a diverging trajectory).
  NaN where no bound applies (SGD, no gradient element hit).

The tolerance table (:mod:`integration.tolerance`): per parallelism, recipe and guard, the largest
BER whose penalty (``delta_val_loss``) stays under epsilon, bracketed by the grid, with its interval
from the cells' 95% bounds, the kind of BER the grid is and the payload BER delivered there.

Outputs (:func:`write_report`): ``table.csv``, ``table.md`` (the cells, then the tolerance table),
``results.json`` (rows with loss curves and per-class metrics, per-seed rows under ``seeds_detail``;
the tolerance table under ``tolerance``), ``loss_<parallel>[_<recipe>].png``, ``tolerance.png``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from integration.replay import GUARDS
from integration.tolerance import EPSILON, tolerance_table
from integration.train import TrainConfig, failed_when, run_many, with_recipe

__all__ = ["ExperimentSpec", "run_experiment", "aggregate", "write_report", "table_md", "plot_losses", "COLUMNS", "SETTING_COLUMNS",
           "MARKER", "OutputExists", "ForeignRuns", "campaign_runs", "run_name", "tolerance_md", "plot_tolerance"]

#: numeric columns aggregated over seeds (mean and 95% interval)
_NUMERIC = ("final_val_loss", "delta_val_loss", "link_sd", "val_loss_replica_sd", "injected_noise", "injected_noise_step", "weight_dist_shadow",
            "grad_elements_hit", "noise_bound_ratio", "replica_divergence", "flips", "ber_delivered", "frozen_weights", "nonfinite_events", "nonfinite_steps", "overflow_steps", "skipped_steps",
            "frames_lost", "frames_resent", "op_failures", "step_ms")
#: ``ber_is``: which BER the number is (pre-FEC line BER or payload-stream BER)
#: ``recipe``: the training recipe of the row's runs (``integration.train.RECIPES``; ``paper`` is inferred);
#: ``optimizer`` and ``comm_dtype``: the optimizer and the gradient all-reduce precision its runs used
#: (set by the recipe or the options: ``--optimizer``, ``--comm-dtype``)
SETTING_COLUMNS = ("recipe", "optimizer", "comm_dtype")
COLUMNS = ("parallel", "ber", "ber_is", "guard", "seeds") + _NUMERIC + ("failed_runs",) + SETTING_COLUMNS
_FRAME_COLS = ("frames_lost", "frames_resent", "op_failures")


def _ber_is(kind) -> str:
    from integration.sources import BER_MEANING

    return BER_MEANING.get(kind, str(kind))


#: written into every output folder this module creates; lists the files it wrote
MARKER = ".phy802-output"  # phy802.runtime.output.SET_MARKER: one signed marker for every output folder


class OutputExists(ValueError):
    """``--out`` names something this program did not create (refused unless forced)."""


@dataclass(frozen=True)
class ExperimentSpec:
    """What to sweep. ``base`` is a configuration (any BER/guard/seed) giving everything else."""

    base: TrainConfig
    bers: tuple[float, ...] = (1e-7, 1e-6, 1e-5)
    parallel: tuple[str, ...] = ("ddp", "pp")
    guards: tuple[str, ...] = GUARDS
    seeds: tuple[int, ...] = (1,)
    #: link seeds per model seed; ``None``: the model seed is also the link seed (one run per cell and seed)
    link_seeds: tuple[int, ...] | None = None
    extra_classes_fsdp: tuple[str, ...] = field(default=("params",))
    #: training recipes (:data:`integration.train.RECIPES`), each applied to ``base`` by
    #: :func:`integration.train.with_recipe` with its own error-free shadow; ``None``: ``base`` as it is
    recipes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.bers or any(not (0 < b < 1) for b in self.bers):
            raise ValueError(f"ExperimentSpec.bers must be non-empty values in (0, 1), got {self.bers!r}")
        if not self.seeds or any(int(s) < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"ExperimentSpec.seeds must be distinct integers >= 0, got {self.seeds!r}")
        if self.link_seeds is not None and (not self.link_seeds or any(int(s) < 0 for s in self.link_seeds)
                                            or len(set(self.link_seeds)) != len(self.link_seeds)):
            raise ValueError(f"ExperimentSpec.link_seeds must be distinct integers >= 0, got {self.link_seeds!r}")
        if self.recipes is not None:
            from integration.train import RECIPES

            bad_r = [r for r in self.recipes if r not in RECIPES]
            if bad_r or not self.recipes or len(set(self.recipes)) != len(self.recipes):
                raise ValueError(f"ExperimentSpec.recipes must be distinct names from {tuple(RECIPES)}, "
                                 f"got {self.recipes!r}")
        bad = [g for g in self.guards if g not in GUARDS]
        if bad or not self.guards:
            raise ValueError(f"ExperimentSpec.guards: unknown guard {bad[0] if bad else self.guards!r}")
        for par in self.parallel:  # every run's configuration is valid before the first run starts
            for recipe in self.recipe_names():
                for ber in (0.0, *self.bers):
                    for seed in self.seeds:
                        for link in self.links(seed):
                            self.config(par, ber, self.guards[0], seed, link, recipe)

    def n_runs(self) -> int:
        """Training runs of the whole sweep (each (parallelism, recipe, model seed): a shadow and every cell's link seeds)."""
        return sum(len(_keys(self, seed)) for seed in self.seeds) * len(self.parallel) * len(self.recipe_names())

    def recipe_names(self) -> tuple[str, ...]:
        """The recipes swept (``base``'s own when ``recipes`` is None)."""
        return (self.base.recipe,) if self.recipes is None else tuple(self.recipes)

    def links(self, seed: int) -> tuple[int, ...]:
        """The link seeds run with model seed ``seed``."""
        return (seed,) if self.link_seeds is None else tuple(self.link_seeds)

    def config(self, parallel: str, ber: float, guard: str, seed: int, link_seed: int | None = None,
               recipe: str | None = None) -> TrainConfig:
        """One run of the sweep (BER 0 is the error-free shadow: no trace is replayed); ``recipe``
        (default: the first of :meth:`recipe_names`) applied to ``base``."""
        recipe = self.recipe_names()[0] if recipe is None else recipe
        b = self.base if self.recipes is None else with_recipe(self.base, recipe)
        src = b.replay.source
        kind, trace = (src.kind, src.trace) if ber > 0 else ("independent", None)
        classes = b.replay.classes
        if parallel == "fsdp":
            classes = tuple(dict.fromkeys(classes + self.extra_classes_fsdp))
        lseed = seed if link_seed is None else link_seed
        replay = replace(b.replay, source=replace(src, ber=ber, seed=lseed, kind=kind, trace=trace), guard=guard,
                         classes=classes)
        return replace(b, parallel=parallel, seed=seed, replay=replay, wrapper=True)


def _row(par: str, ber: float, guard: str, seed: int, r: dict, shadow: dict, shadow_w, w,
         link_seed: int | None = None) -> dict:
    m = r["metrics"]
    dist = float((w - shadow_w).norm()) if w.shape == shadow_w.shape else math.nan
    return {
        "parallel": par, "ber": ber, "guard": guard if ber > 0 else "-", "seed": seed,
        "link_seed": link_seed if ber > 0 else None,
        "final_val_loss": r["final_val_loss"],
        "delta_val_loss": r["final_val_loss"] - shadow["final_val_loss"],
        "val_loss_replica_sd": r.get("val_loss_replica_sd", 0.0),
        "val_loss_replicas": r.get("val_loss_replicas"),
        "val_tokens": r.get("val_tokens"),
        "n_params": r.get("n_params"),
        "injected_noise": r.get("injected_noise", 0.0) if ber > 0 else 0.0,
        "injected_noise_step": r.get("injected_noise_step_median", 0.0) if ber > 0 else 0.0,
        "weight_dist_shadow": dist / float(shadow_w.norm()) if float(shadow_w.norm()) > 0 else math.nan,
        # the distance against the study's bound lr x sqrt(gradient elements hit) (integration.train.noise_bound):
        # <~ 1 the errors acted as bounded noise; NaN where no bound applies (SGD, no element hit)
        **({"grad_elements_hit": r["grad_elements_hit"], "noise_bound": _nan_none(r["noise_bound"]),
            "noise_bound_ratio": dist / r["noise_bound"] if r["noise_bound"] else math.nan}
           if "grad_elements_hit" in r else {}),
        "replica_divergence": r["final_divergence"],
        "flips": int(sum(m.get("errors_injected", {}).values())),
        # the payload BER the run delivered (measured) and the weights an Inf/NaN AdamW state froze
        **({"ber_delivered": r["ber_delivered"]["value"]} if "ber_delivered" in r else {}),
        **({"frozen_weights": _nan_none(r["frozen_weights"])} if "frozen_weights" in r else {}),
        "frames_lost": int(sum(m.get("frames_lost", {}).values())),
        "frames_resent": int(sum(m.get("frames_resent", {}).values())),
        "op_failures": int(sum(m.get("op_failures", {}).values())),
        "nonfinite_events": int(sum(m.get("nonfinite_events", {}).values())),
        "nonfinite_steps": r["nonfinite_steps"],
        "overflow_steps": r["overflow_steps"],
        "skipped_steps": r["skipped_steps"],
        "step_ms": r["step_time_ms"],
        "first_nonfinite_loss_step": r.get("first_nonfinite_loss_step"),
        "evals": r["evals"],
        "train_loss": r["train_loss"],
        "metrics": m,
        "source_kind": r.get("source_kind"),
        "recipe": r.get("config", {}).get("recipe", "default"),
        "optimizer": r.get("config", {}).get("optimizer", "adamw"),
        "comm_dtype": r.get("config", {}).get("comm_dtype", "fp32"),
        # the job stopped (data not delivered): its losses are NaN because it did not finish, not because it diverged
        "failed": bool(r.get("failed")), "failed_step": r.get("failed_step"), "failure": r.get("failure"),
    }


def _nan_none(v):
    """``v``, NaN for ``None`` (a value that does not apply, e.g. SGD's bound: the table's mean takes NaN)."""
    return math.nan if v is None else v


class ForeignRuns(ValueError):
    """A run folder holds a finished run that is not one of this campaign's (another campaign's)."""


def _keys(spec: ExperimentSpec, seed: int) -> list[tuple[float, str, int | None]]:
    """The runs of one (parallelism, model seed): the error-free shadow first, then every cell and link seed."""
    return [(0.0, "none", None)] + [(b, g, ls) for b in spec.bers for g in spec.guards for ls in spec.links(seed)]


def run_name(par: str, seed: int, ber: float, guard: str, link_seed: int | None, recipe: str = "default") -> str:
    """The folder name of one run in a campaign's run folder (:func:`run_experiment` ``runs_dir``); the
    recipe is named unless it is ``default``."""
    return (f"{par}-" + (f"{recipe}-" if recipe != "default" else "") + f"seed{seed}-ber{ber:g}-{guard}"
            + (f"-link{link_seed}" if link_seed is not None else ""))


def _config_doc(cfg: TrainConfig) -> Any:
    """A configuration as its ``result.json`` holds it (a JSON round trip: tuples become lists)."""
    return json.loads(json.dumps(cfg.to_dict()))


def campaign_runs(spec: ExperimentSpec, runs_dir: str) -> tuple[dict[str, TrainConfig], set[str]]:
    """Every run of ``spec`` by its folder name, and those already finished in ``runs_dir``.

    A finished run (``<name>/result.json``) that is not one of ``spec``'s -- a name this campaign does
    not have, or the same name with another configuration -- raises :class:`ForeignRuns` naming
    its file: the folder holds another campaign's runs, which this one would mix into its table.
    """
    want = {run_name(par, seed, b, g, ls, rec): spec.config(par, b, g, seed, ls, rec)
            for par in spec.parallel for rec in spec.recipe_names() for seed in spec.seeds
            for b, g, ls in _keys(spec, seed)}
    done: set[str] = set()
    if not os.path.isdir(runs_dir):
        return want, done
    for name in sorted(os.listdir(runs_dir)):
        path = os.path.join(runs_dir, name, "result.json")
        if not os.path.isfile(path):
            continue  # a run interrupted before it finished: run again
        try:
            with open(path, encoding="utf-8") as fh:
                stored = json.load(fh).get("config")
        except (OSError, ValueError, AttributeError) as exc:
            raise ForeignRuns(f"{path}: not a finished run of phy802 experiment ({exc})") from None
        if name not in want or stored != _config_doc(want[name]):
            raise ForeignRuns(f"{path}: a run of another campaign (its configuration is not one of this sweep's); "
                              f"resume with the options that made it, remove {runs_dir} to start a new campaign "
                              f"there, or choose another --out")
        done.add(name)
    return want, done


def _keep(src_dir: str, dst_dir: str) -> None:
    """Copy a finished run's ``params.pt`` then ``result.json`` into ``dst_dir``, each atomically (a
    ``result.json`` there means the run is whole)."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in ("params.pt", "result.json"):
        tmp = os.path.join(dst_dir, f".{name}.tmp")
        shutil.copyfile(os.path.join(src_dir, name), tmp)
        os.replace(tmp, os.path.join(dst_dir, name))


def run_experiment(spec: ExperimentSpec, *, timeout_s: float = 3600.0,
                   say: Callable[[str], None] | None = None,
                   on_run: Callable[[str, int, float, str], None] | None = None,
                   runs_dir: str | None = None) -> list[dict]:
    """Run the sweep; returns one aggregated row per cell (each shadow first per parallelism).

    Runs of one (parallelism, seed) share a set of processes (:func:`run_many`); its temporary
    folder is removed on every exit path. Each recipe has its own shadow (its optimizer and clipping
    train differently without errors too). ``on_run(parallel, seed, ber, guard)`` is called as each
    run finishes (progress display). ``runs_dir``: every run is kept there as it finishes
    (``<run_name>/result.json``, ``params.pt``) and a run already there is not run again, so an
    interrupted campaign resumes where it stopped (:func:`campaign_runs` refuses another's runs).
    """
    import torch

    per_seed: list[dict] = []
    from phy802.runtime.tempfiles import remove_temp, track_temp_dir

    done_before: set[str] = campaign_runs(spec, runs_dir)[1] if runs_dir is not None else set()
    work = track_temp_dir("phy802-exp-")  # also removed at exit if an interrupt hits this cleanup
    try:
        for par, recipe, seed in [(p, r, s) for p in spec.parallel for r in spec.recipe_names() for s in spec.seeds]:
            keys = _keys(spec, seed)
            names = [run_name(par, seed, *k, recipe) for k in keys]
            todo = [i for i, n in enumerate(names) if n not in done_before]
            cfgs = [spec.config(par, keys[i][0], keys[i][1], seed, keys[i][2], recipe) for i in todo]
            if say:
                say(f"{par} recipe {recipe} seed {seed}: {len(keys)} runs (error-free shadow + {len(keys) - 1}), "
                    f"{len(keys) - len(todo)} kept from before")
            root = os.path.join(work, f"{par}-{recipe}-{seed}")

            def done(j: int, par=par, seed=seed, keys=keys, todo=todo, names=names, root=root) -> None:
                if runs_dir is not None:
                    _keep(os.path.join(root, f"run{j}"), os.path.join(runs_dir, names[todo[j]]))
                if on_run is not None:
                    on_run(par, seed, *keys[todo[j]][:2])

            fresh = dict(zip(todo, run_many(cfgs, timeout_s=timeout_s, out_dir=root, on_done=done)))
            results = []
            for i, n in enumerate(names):
                if i in fresh:
                    results.append(fresh[i])
                    continue
                d = os.path.join(runs_dir, n)  # type: ignore[arg-type]
                with open(os.path.join(d, "result.json"), encoding="utf-8") as fh:
                    results.append({**json.load(fh), "out_dir": d})
            shadow = results[0]
            shadow_w = torch.load(os.path.join(shadow["out_dir"], "params.pt"))
            for (ber, guard, ls), r in zip(keys, results):
                w = torch.load(os.path.join(r["out_dir"], "params.pt"))
                per_seed.append(_row(par, ber, guard, seed, r, shadow, shadow_w, w, ls))
    finally:
        remove_temp(work)
    return aggregate(per_seed)


def _interval(vals: list[float]) -> tuple[float, float]:
    """Mean and 95% Student-t half-width (``nan`` for fewer than two values; ``inf``/``nan`` propagate)."""
    a = np.asarray(vals, dtype=float)
    if len(a) == 0:
        return math.nan, math.nan
    with np.errstate(all="ignore"):
        mean = float(np.mean(a))
        if len(a) < 2 or not np.isfinite(a).all():
            return mean, math.nan
        from scipy.stats import t

        return mean, float(t.ppf(0.975, len(a) - 1) * np.std(a, ddof=1) / math.sqrt(len(a)))


def _clustered(rs: list[dict], c: str) -> tuple[float, float]:
    """Mean over all runs and the 95% half-width over the model seeds' means (one model seed: over its runs)."""
    by: dict[Any, list[float]] = {}
    for r in rs:
        by.setdefault(r["seed"], []).append(float(r[c]))
    allv = [v for vs in by.values() for v in vs]
    with np.errstate(all="ignore"):
        mean = float(np.mean(allv)) if allv else math.nan
    if len(by) > 1:
        return mean, _interval([float(np.mean(v)) for v in by.values()])[1]
    return mean, _interval(allv)[1]


def _link_sd(rs: list[dict]) -> float:
    """Pooled within-model-seed standard deviation of ``delta_val_loss`` (the link seed's own spread)."""
    by: dict[Any, list[float]] = {}
    for r in rs:
        by.setdefault(r["seed"], []).append(float(r["delta_val_loss"]))
    ss = sum(float(np.sum((np.array(v) - np.mean(v)) ** 2)) for v in by.values() if len(v) > 1)
    dof = sum(len(v) - 1 for v in by.values())
    return math.sqrt(ss / dof) if dof > 0 and math.isfinite(ss) else math.nan


def _padded(curves: list[list[float]]) -> np.ndarray:
    """Curves of unequal length as one array, NaN past each curve's end."""
    out = np.full((len(curves), max((len(c) for c in curves), default=0)), np.nan)
    for i, c in enumerate(curves):
        out[i, :len(c)] = c
    return out


def aggregate(per_seed: list[dict]) -> list[dict]:
    """One row per (parallel, recipe, ber, guard): mean and ``<col>_ci95`` half-width (see :func:`_clustered`).

    ``evals`` is the seed-mean validation curve; ``died`` lists ``(seed, step)`` of runs whose
    training loss went non-finite; ``failed`` lists ``(seed, link seed, step, cause)`` of runs that
    failed their job (data not delivered); the per-seed rows are kept under ``seeds_detail``.
    """
    cells: dict[tuple, list[dict]] = {}
    for r in per_seed:
        cells.setdefault((r["parallel"], r.get("recipe", "default"), r["ber"], r["guard"]), []).append(r)
    out = []
    for (par, _recipe, ber, guard), rs in cells.items():
        n_models = len({r["seed"] for r in rs})
        row: dict[str, Any] = {"parallel": par, "ber": ber, "guard": guard, "seeds": n_models,
                               "link_seeds": len({r.get("link_seed") for r in rs}) if ber > 0 else 0, "runs": len(rs)}
        for c in _NUMERIC:
            if c == "link_sd":
                row[c], row[c + "_ci95"] = (_link_sd(rs) if ber > 0 else math.nan), math.nan
                continue
            if c in _FRAME_COLS:  # rows written before frame counters existed: 0
                row[c], row[c + "_ci95"] = _clustered([{**r, c: r.get(c, 0)} for r in rs], c)
                continue
            row[c], row[c + "_ci95"] = _clustered([r for r in rs if c in r], c) if any(c in r for r in rs) \
                else (math.nan, math.nan)
        # a run that failed its job stopped early: its curves are shorter, NaN past their end
        steps = [st for st, _ in max((r["evals"] for r in rs), key=len)]
        with np.errstate(all="ignore"):
            curve = np.mean(_padded([[float(v) for _, v in r["evals"]] for r in rs]), axis=0)
            train = np.mean(_padded([[float(v) for v in r["train_loss"]] for r in rs]), axis=0)
        row["evals"] = [[st, float(v)] for st, v in zip(steps, curve)]
        row["train_loss"] = [float(v) for v in train]
        # a run died when its final validation loss is not finite (a skipped NaN step is not a death);
        # the step is where its training loss first went non-finite (None: not seen in training)
        row["died"] = [[r["seed"], r["first_nonfinite_loss_step"]] for r in rs
                       if not math.isfinite(r["final_val_loss"]) and not r.get("failed")]
        # runs that failed their job (frames not delivered): [seed, link seed, step, cause]
        row["failed"] = [[r["seed"], r.get("link_seed"), r.get("failed_step"), r.get("failure")]
                         for r in rs if r.get("failed")]
        row["failed_runs"] = len(row["failed"])
        row["metrics"] = rs[0]["metrics"] if len(rs) == 1 else None
        row["source_kind"] = rs[0]["source_kind"]
        row["recipe"] = rs[0].get("recipe", "default")
        row["optimizer"] = rs[0].get("optimizer", "adamw")  # one recipe: one optimizer, one comm dtype per cell
        row["comm_dtype"] = rs[0].get("comm_dtype", "fp32")
        row["n_params"] = rs[0].get("n_params")  # the model's size: what a size fit's prediction is compared with
        row["ber_is"] = "error-free" if ber == 0 else _ber_is(rs[0]["source_kind"])
        row["seeds_detail"] = [{k: v for k, v in r.items() if k not in ("train_loss",)} for r in rs]
        out.append(row)
    return out


def _fmt(v, hw=None) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        s = f"{v:.4g}"
        if hw is not None and math.isfinite(hw):
            s += f" ± {hw:.2g}"
        return s
    return str(v)


def _cell(r: dict, c: str) -> str:
    if c == "seeds" and r.get("link_seeds", 0) > 1:
        return f"{r['seeds']} x {r['link_seeds']} link"
    if c == "final_val_loss" and r.get("failed"):
        failed = r["failed"]
        if r.get("runs", r["seeds"]) == 1:
            return "FAILED " + (f"(step {failed[0][2]})" if failed[0][2] is not None else "(set-up)")
        return f"FAILED in {len(failed)}/{r.get('runs', r['seeds'])} runs"
    if c == "final_val_loss" and r.get("died"):
        died = r["died"]
        if r["seeds"] == 1:
            return f"NaN (step {died[0][1]})" if died[0][1] is not None else "NaN"
        if r.get("runs", r["seeds"]) != r["seeds"]:
            return f"NaN in {len(died)}/{r['runs']} runs"
        return f"NaN in {len(died)}/{r['seeds']} seeds"
    return _fmt(r[c], r.get(c + "_ci95"))


def table_md(rows: list[dict]) -> str:
    """The result table in Markdown (``mean ± 95% half-width`` where there are several seeds)."""
    out = io.StringIO()
    out.write("| " + " | ".join(COLUMNS) + " |\n")
    out.write("|" + "---|" * len(COLUMNS) + "\n")
    for r in rows:
        out.write("| " + " | ".join(_cell(r, c) for c in COLUMNS) + " |\n")
    return out.getvalue()


def tolerance_md(table: list[dict]) -> str:
    """The tolerance table in Markdown, with the method in one paragraph under it."""
    if not table:
        return ""
    eps = table[0]["epsilon"]
    out = io.StringIO()
    out.write(f"Tolerated BER: the largest BER whose validation-loss penalty stays under epsilon = {eps:g} nats\n\n")
    cols = ("parallel", "recipe", "guard", "BER given [kind]", "threshold (grid)", "95% interval",
            "interpolated", "delivered payload BER at threshold (measured)", "note")
    out.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
    for t in table:
        notes = []
        if t["fails_by"]:
            notes.append(f"fails at {t['fails']:g}: {t['fails_by']}")
        if t["recipe"] == "paper":
            notes.append("recipe inferred, not quoted")
        elif t["recipe"] == "bounded":
            notes.append("the paper recipe's conditions with our bounded AdamW")
        if t["passes_again"]:
            notes.append("passes again at " + ", ".join(f"{b:g}" for b in t["passes_again"]) + " (not counted)")
        if not t["interval_known"]:
            notes.append("one run per cell: no interval")
        interp = "-" if t["interp"] is None else f"{t['interp']:.2g}" + (
            f" ({t['interp_lower']:.2g} .. {t['interp_upper']:.2g})"
            if t["interp_lower"] is not None and t["interp_upper"] is not None else "")
        dlv = "-" if t["delivered_passes"] is None else f"{t['delivered_passes']:.3g}"
        recipe = t["recipe"] + (f" ({t.get('optimizer', 'adamw')}, comm {t.get('comm_dtype', 'fp32')})"
                                if (t.get("optimizer", "adamw"), t.get("comm_dtype", "fp32")) != ("adamw", "fp32") else "")
        out.write(f"| {t['parallel']} | {recipe} | {t['guard']} | {t['ber_is']} | {t['threshold']} | "
                  f"{t['interval'] or '-'} | {interp} | {dlv} | {'; '.join(notes)} |\n")
    out.write("\nthreshold: [largest BER passing with every smaller one, first BER failing), by the cells' mean "
              "penalty; 95% interval: the same rule on the penalties' upper bounds (lower end) and lower bounds "
              "(upper end), over model and link seeds; bracketed by the grid BERs. interpolated: log10-linear "
              "between the two bracketing BERs, not measured.\n")
    return out.getvalue()


def plot_tolerance(rows: list[dict], table: list[dict], path: str, meta: dict | None = None) -> None:
    """Penalty vs BER, one panel per (parallelism, guard), one line per recipe (95% bars); epsilon
    dashed, each recipe's threshold marked (triangle at the largest tolerated grid BER, its interval
    shaded). Non-finite penalties (runs that died or failed) are drawn at the top edge as ``x``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pars = list(dict.fromkeys(t["parallel"] for t in table))
    guards = [g for g in GUARDS if any(t["guard"] == g for t in table)]
    recipes = list(dict.fromkeys(t["recipe"] for t in table))
    colors = {r: f"C{i}" for i, r in enumerate(recipes)}
    eps = table[0]["epsilon"]
    finite = [c["penalty"] + (c["ci95"] if math.isfinite(c["ci95"]) else 0) for t in table for c in t["cells"]
              if math.isfinite(c["penalty"])]
    top = max([eps * 10, *finite]) * 1.5
    fig, axes = plt.subplots(len(pars), len(guards), figsize=(max(4.4 * len(guards), 6.4), 3.4 * len(pars) + 0.6),
                             squeeze=False, sharey=True)
    for i, par in enumerate(pars):
        for j, guard in enumerate(guards):
            ax = axes[i][j]
            ax.axhline(eps, color="black", ls="--", lw=1, label=f"epsilon {eps:g}")
            for t in [t for t in table if t["parallel"] == par and t["guard"] == guard]:
                col = colors[t["recipe"]]
                b = [c["ber"] for c in t["cells"]]
                y = [c["penalty"] if math.isfinite(c["penalty"]) else math.nan for c in t["cells"]]
                e = [c["ci95"] if math.isfinite(c["ci95"]) else 0.0 for c in t["cells"]]
                ax.errorbar(b, y, yerr=e, color=col, marker="o", ms=4, capsize=3,
                            label=f"{t['recipe']} [{t['ber_is']}]: threshold {t['threshold']}")
                dead = [c["ber"] for c in t["cells"] if not math.isfinite(c["penalty"])]
                if dead:
                    ax.plot(dead, [top / 2.5] * len(dead), "x", color=col, ms=9, mew=2)
                if t["passes"] is not None:
                    ax.plot([t["passes"]], [eps], marker="v", ms=11, color=col, mec="black")
                if t["interval_known"]:
                    lo = t["lower"] if t["lower"] is not None else min(b) / 3
                    hi = t["upper"] if t["upper"] is not None else max(b) * 3
                    ax.axvspan(lo, hi, color=col, alpha=0.08)
            ax.set_xscale("log")
            ax.set_yscale("symlog", linthresh=eps)
            ax.set_ylim(-eps, top)
            ax.set_title(f"{par.upper()}  guard: {guard}", fontsize=10)
            ax.set_xlabel("BER given (its kind: legend)")
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7, loc="upper left")
        axes[i][0].set_ylabel("validation-loss penalty (nats)")
    fig.suptitle("validation-loss penalty vs BER (mean, 95% bars over model seeds)\ntriangle: largest tolerated "
                 "grid BER; band: its 95% interval; x: runs died or failed"
                 + ("\nrecipe paper: our inference of the study's conditions, not quoted" if "paper" in recipes else ""),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_losses(rows: list[dict], par: str, path: str, meta: dict | None = None, recipe: str | None = None) -> None:
    """Validation loss per guard panel (none -> clamp -> skip -> protection), one line per BER;
    ``recipe``: only that recipe's rows (named in the title).

    ``meta`` (the run's options: ``fec``, ``code``, ``source``, ``world_size``) names in the title
    which FEC mode delivered the errors and where they came from.

    A run whose loss went non-finite is drawn up to its last finite point and marked with an
    ``x`` at the step it died (the seed-mean curve stops where any seed died).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r["parallel"] == par and (recipe is None or r.get("recipe", "default") == recipe)]
    guards = [g for g in GUARDS if any(r["guard"] == g for r in mine)] or ["-"]
    base = [r for r in mine if r["ber"] == 0.0]
    fig, axes = plt.subplots(1, len(guards), figsize=(4.2 * len(guards), 3.6), sharey=True, squeeze=False)
    for ax, guard in zip(axes[0], guards):
        for r in base:
            s, v = zip(*r["evals"])
            ax.plot(s, v, color="black", lw=2, label="error-free")
        for r in [r for r in mine if r["guard"] == guard]:
            s, v = zip(*r["evals"])
            v = [x if math.isfinite(x) else float("nan") for x in v]
            label = f"BER {r['ber']:g}"
            (line,) = ax.plot(s, v, marker="o", ms=3, label=label)
            for seed, step in r.get("died") or []:
                fin = [(a, b) for a, b in zip(s, v) if math.isfinite(b) and (step is None or a <= step)]
                if fin:
                    at = step if step is not None else fin[-1][0]
                    ax.plot([at], [fin[-1][1]], marker="x", ms=10, mew=2.5, color=line.get_color(),
                            label=f"BER {r['ber']:g}: NaN at step {at}" + (f" (seed {seed})" if r["seeds"] > 1 else ""))
            for seed, _link, step, _why in r.get("failed") or []:
                fin = [(a, b) for a, b in zip(s, v) if math.isfinite(b)]
                if fin:
                    ax.plot([fin[-1][0]], [fin[-1][1]], marker="s", ms=8, mfc="none", mew=2, color=line.get_color(),
                            label=f"BER {r['ber']:g}: FAILED {failed_when(step)}" + (f" (seed {seed})" if r["seeds"] > 1 else ""))
        ax.set_title(f"{par.upper()}  guard: {guard}" + (f"  recipe: {recipe}" if recipe else ""))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation loss")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    if meta:
        code = f"{meta['code']}/" if meta.get("code") and meta.get("code") != "kp4" else "kp4/"
        ws = f"{meta['world_size']} ranks, " if meta.get("world_size") else ""
        source = "trace" if meta.get("source") == "auto" and meta.get("trace") else str(meta.get("source"))
        src = {"trace": "errors replayed from a trace; BER = pre-FEC line BER",
               "generator": "errors from the protocol's live generator; BER = pre-FEC line BER",
               "independent": "independent bit flips; BER = stream BER",
               "auto": "errors from the protocol's live generator; BER = pre-FEC line BER"}.get(
            source, f"errors from {source}")
        fig.suptitle(f"{par.upper()}, {ws}validation loss; link FEC mode {code}{meta.get('fec', '?')}, {src}",
                     fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def check_out(out: str, force: bool = False) -> None:
    """Refuse an ``out`` that this program may not write (the rule of :mod:`phy802.runtime.output`): a
    non-folder, a link, or a folder of files phy802 did not write there (unless ``force``, which
    adds the output files and deletes nothing)."""
    from phy802.runtime.output import OutputRefused, check_output_dir

    try:
        check_output_dir(out, "experiment", force=force)
    except OutputRefused as exc:
        raise OutputExists(f"--out {out}: {exc.strerror}") from None


def write_report(rows: list[dict], out: str, meta: dict, *, force: bool = False,
                 epsilon: float = EPSILON) -> list[str]:
    """Write the output set into ``out`` through :func:`phy802.runtime.output.output_set`; returns the
    file names. ``epsilon``: the penalty bound of the tolerance table.  The set is built in a temporary sibling folder and takes the place of an earlier
    one of this module; files the user added there are kept, and nothing phy802 did not write is
    deleted or replaced (see :func:`check_out`)."""
    from phy802.runtime.jsonable import to_jsonable
    from phy802.runtime.output import output_set

    check_out(out, force)
    names = ["table.csv", "table.md", "results.json"]
    tol = tolerance_table(rows, epsilon)
    with output_set(out, "experiment", force=force) as stage_p:
        stage = str(stage_p)
        with open(os.path.join(stage, "table.csv"), "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(list(COLUMNS) + [c + "_ci95" for c in _NUMERIC])
            for r in rows:
                w.writerow([_fmt(r[c]) for c in COLUMNS] + [_fmt(r.get(c + "_ci95", math.nan)) for c in _NUMERIC])
        with open(os.path.join(stage, "table.md"), "w", encoding="utf-8") as fh:
            fh.write(table_md(rows) + ("\n" + tolerance_md(tol) if tol else ""))
        with open(os.path.join(stage, "results.json"), "w", encoding="utf-8") as fh:
            json.dump(to_jsonable({"meta": meta, "rows": rows, "tolerance": tol}), fh)
        if tol:
            plot_tolerance(rows, tol, os.path.join(stage, "tolerance.png"), meta)
            names.append("tolerance.png")
        recipes = list(dict.fromkeys(r.get("recipe", "default") for r in rows))
        for par in sorted({r["parallel"] for r in rows}):
            for recipe in recipes if len(recipes) > 1 else [None]:  # one recipe: loss_<par>.png as before
                _plot_name = f"loss_{par}.png" if recipe is None else f"loss_{par}_{recipe}.png"
                plot_losses(rows, par, os.path.join(stage, _plot_name), meta, recipe)
                names.append(_plot_name)
        mode_f = 0o666 & ~_umask()
        for n in names:
            os.chmod(os.path.join(stage, n), mode_f)
    return names
