"""``phy802 experiment``: sweep BER x parallelism x guard x recipe over seeds; table, JSON, loss plots
and the tolerance table (the largest BER whose penalty stays under ``--epsilon``, drawn in
``tolerance.png``); ``--sizes``: the same sweep per model size and the fit of the tolerated BER
against the parameter count, with its unchecked GPT-2 124M prediction.

Every finished run is kept in ``OUT/runs/`` as it ends; the same command on the same folder
resumes an interrupted campaign (a folder holding runs of other options is refused, exit 2).

A thin layer over :mod:`integration.experiment` (the sweep, the statistics over seeds, the
report and its safe writing). ``--out`` is never a folder of someone else's files: a non-empty
folder that this command did not write is refused unless ``--force`` (which only adds/replaces
the output set's own file names in it).
"""

from __future__ import annotations

import argparse
import sys

from phy802.cli._common import MAX_SEED, add_json, add_seed, choice_list, emit, int_arg, list_arg, probability

__all__ = ["add_arguments", "run", "sweep", "write_report", "spec_from_args"]


#: comma lists through the project's one set of validators (phy802.cli._common)
_floats = list_arg(probability())
_seeds = list_arg(int_arg(0, MAX_SEED))


def add_arguments(p: argparse.ArgumentParser) -> None:
    from integration.replay import GUARDS
    from integration.train import PARALLEL
    from phy802.cli.train import add_model_arguments, pos_float, pos_int

    p.add_argument("--out", required=True,
                   help="output folder: created, or updated if an earlier 'phy802 experiment' wrote it; a "
                        "non-empty folder of other files is refused unless --force; every finished run is kept "
                        "in OUT/runs/ as it ends, so an interrupted campaign resumes with the same command (a "
                        "runs/ of other options is refused naming its file)")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty --out that this command did not create: only the output files "
                        "(table.csv, table.md, results.json, loss_*.png, tolerance.png, .phy802-experiment) are added or "
                        "replaced, nothing else is touched; also runs a sweep estimated over an hour or over the "
                        "free memory (default off)")
    p.add_argument("--bers", type=_floats, default=[1e-7, 1e-6, 1e-5],
                   help="comma-separated BERs with errors (the error-free run is added; default 1e-7,1e-6,1e-5)")
    p.add_argument("--parallel", type=choice_list(PARALLEL), default=["ddp", "pp"],
                   help=f"comma-separated, from {','.join(PARALLEL)} (default ddp,pp)")
    p.add_argument("--guards", type=choice_list(GUARDS), default=list(GUARDS), help=f"default {','.join(GUARDS)}")
    p.add_argument("--steps", type=pos_int, default=300, help="training steps per run (default 300)")
    p.add_argument("--seeds", type=_seeds, default=None,
                   help="comma-separated model seeds (initial weights, data order); each gets its own error-free "
                        "shadow, and every cell is the mean of the paired differences with a 95%% interval over "
                        "the model seeds (default: the one --seed)")
    p.add_argument("--link-seeds", type=_seeds, default=None,
                   help="comma-separated link seeds (the errors), each run with every model seed; the cell's "
                        "link_sd is their own spread (default: the link seed is the model seed)")
    from integration.tolerance import EPSILON

    p.add_argument("--epsilon", type=pos_float, default=EPSILON,
                   help=f"the tolerance table's penalty bound: a BER is tolerated while the mean validation-loss "
                        f"penalty (run minus its error-free shadow, nats) stays under it (default {EPSILON:g})")
    p.add_argument("--sizes", type=list_arg(_size, min_len=2), default=None, metavar="LxE[,LxE...]",
                   help="model sizes, LAYERSxWIDTH each (e.g. 4x64,4x128,4x256: about 0.2, 0.8 and 3.2 M parameters "
                        "of the char model): the whole sweep runs for each into OUT/size-LxE/, then the tolerated "
                        "BER of every parallelism x recipe x guard is fitted against the parameter count (log-log, "
                        "with its uncertainty) and predicted for GPT-2 124M, unchecked (OUT/scaling.md, "
                        "scaling.json, scaling.png); not with --n-layer/--n-embd (default: one size)")
    p.add_argument("--no-progress", action="store_true", help="no progress display on stderr (default: shown)")
    add_model_arguments(p, recipes=True, ber_option="--bers")
    add_seed(p)
    add_json(p)


def _size(text: str) -> tuple[int, int]:
    """``LxE``: transformer blocks x model width."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and 0 < int(p) <= 65536 for p in parts):
        raise argparse.ArgumentTypeError(f"expected LAYERSxWIDTH such as 4x128, got {text!r}")
    return int(parts[0]), int(parts[1])


def spec_from_args(args: argparse.Namespace):
    """The :class:`~integration.experiment.ExperimentSpec` of the options."""
    from integration.experiment import ExperimentSpec
    from phy802.cli.train import check_args, config_from_args

    check_args(args)
    seeds = tuple(args.seeds) if args.seeds else (args.seed,)
    base = config_from_args(args, parallel=args.parallel[0], ber=0.0, guard="none", steps=args.steps, seed=seeds[0])
    if args.trace or args.source != base.replay.source.kind:  # BER 0 dropped the trace: keep it for the noisy runs
        from dataclasses import replace

        kind = args.source  # check_args resolved it (trace with --trace, else generator)
        base = replace(base, replay=replace(base.replay, source=replace(base.replay.source, kind=kind,
                                                                         trace=args.trace)))
    links = tuple(args.link_seeds) if args.link_seeds else ((args.link_seed,) if args.link_seed is not None else None)
    return ExperimentSpec(base=base, bers=tuple(args.bers), parallel=tuple(args.parallel), guards=tuple(args.guards),
                          seeds=seeds, link_seeds=links, recipes=tuple(args.recipes))


def sweep(args: argparse.Namespace, runs_dir: str | None = None, start=None, prog: str = "phy802 experiment") -> list[dict]:
    """Run the sweep of the options; one aggregated row per cell (library: ``run_experiment``).

    The estimate of what is left to run is said on stderr before the first run (and refused over
    the machine's memory or an hour, unless ``--force``); the progress display gives an ETA from
    the runs' own pace. ``runs_dir``: every finished run is kept there and a run already there is
    not run again (:func:`integration.experiment.campaign_runs`: another campaign's runs are refused).
    ``start()``, if given, is called once the sweep is accepted, before the first run. ``prog``: the
    command that runs the sweep, the prefix of its stderr lines.
    """
    import time

    from integration.experiment import campaign_runs, run_experiment

    from phy802.runtime.progress import progress

    from phy802.cli.train import check_cost

    spec = spec_from_args(args)
    n_runs = spec.n_runs()
    kept = len(campaign_runs(spec, runs_dir)[1]) if runs_dir is not None else 0
    todo = n_runs - kept
    est = check_cost(spec.base, getattr(args, "force", False), "this sweep", runs=max(todo, 1))
    print(f"{prog}: {n_runs} training runs" + (f", {kept} kept from before in {runs_dir} (resumed), {todo} to run"
                                                 if kept else "")
          + f"; estimated about {est['seconds'] * todo / 60:.3g} min ({est['seconds']:.3g} s per run, model estimate, "
            f"not measured)", file=sys.stderr)
    if start is not None:
        start()
    bar = progress(total=todo, desc="experiment: training runs", unit="run", delay=0,
                   enable=not getattr(args, "no_progress", False))
    t0, finished = time.monotonic(), [0]

    def done(par: str, seed: int, ber: float, guard: str) -> None:
        finished[0] += 1
        eta = (time.monotonic() - t0) / finished[0] * (todo - finished[0])  # measured pace of this sweep's runs
        bar.set_postfix_str(f"last: {par} seed {seed} ber {ber:g} guard {guard}; ETA {eta / 60:.3g} min")
        bar.update(1)

    try:
        return run_experiment(spec, timeout_s=args.timeout, on_run=done, runs_dir=runs_dir)
    finally:
        bar.close()


def write_report(rows: list[dict], out: str, meta: dict, force: bool = False, epsilon: float | None = None) -> list[str]:
    """:func:`integration.experiment.write_report` (kept here for the demo and tradeoff commands)."""
    from integration.experiment import write_report as _write
    from integration.tolerance import EPSILON

    return _write(rows, out, meta, force=force, epsilon=EPSILON if epsilon is None else epsilon)


def _table_md(rows: list[dict]) -> str:
    from integration.experiment import table_md

    return table_md(rows)


def _campaign(args: argparse.Namespace, prog: str = "phy802 experiment") -> list[dict] | int:
    """Run one campaign into ``args.out`` (its runs kept in ``runs/``) and write its report; the rows,
    or exit code 1 when the sweep failed (said on stderr, and as a JSON document with ``--json``)."""
    import os

    from integration.experiment import MARKER
    from integration.train import TrainingTimeout

    def start() -> None:
        """The output set exists before the first run (once every option has been accepted), so that
        the runs kept in it (``runs/``) are resumed into the same set: an interrupt loses no finished run."""
        if not os.path.exists(os.path.join(args.out, MARKER)):
            write_report([], args.out, {k: v for k, v in vars(args).items() if k != "json"}, force=args.force)

    runs_dir = os.path.join(args.out, "runs")
    try:
        rows = sweep(args, runs_dir=runs_dir, start=start, prog=prog)
    except KeyboardInterrupt as exc:  # Ctrl-C (or an Interrupted from below): say what is kept
        from phy802.runtime.interrupts import Interrupted

        if isinstance(exc, Interrupted) or not os.path.isdir(runs_dir):
            raise
        kept = sum(os.path.isfile(os.path.join(runs_dir, n, "result.json")) for n in os.listdir(runs_dir))
        raise Interrupted(f"interrupted; {kept} finished run(s) kept in {runs_dir}: the same command resumes "
                          f"there") from None
    except (TrainingTimeout, RuntimeError) as exc:  # a rank died or raised, or the deadline passed
        if getattr(args, "json", False):  # a JSON reader still gets a document that says the sweep failed
            emit(args, {"out": args.out, "failed": True, "failure": str(exc), "rows": []}, "")
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    meta = {k: v for k, v in vars(args).items() if k not in ("json",)}
    write_report(rows, args.out, meta, force=args.force, epsilon=args.epsilon)
    return rows


def _say_failed(rows: list[dict], prog: str = "phy802 experiment") -> bool:
    """Say every run that failed its job on stderr; whether there was one."""
    from integration.train import failed_when

    failed = [(r["parallel"], r["ber"], r["guard"], *f) for r in rows for f in r.get("failed", [])]
    for par, ber, guard, seed, link, step, why in failed:  # the report is written; the job is not done
        print(f"{prog}: run {par} BER {ber:g} guard {guard} seed {seed}"
              + (f" link seed {link}" if link is not None and link != seed else "")
              + f" failed {failed_when(step)}: {why}", file=sys.stderr)
    return bool(failed)


def run(args: argparse.Namespace) -> int:
    from integration.experiment import SETTING_COLUMNS, COLUMNS, check_out, table_md, tolerance_md
    from integration.tolerance import tolerance_table

    check_out(args.out, args.force)  # refuse before hours of training, not after
    if args.sizes:
        return run_sizes(args)
    rows = _campaign(args)
    if isinstance(rows, int):
        return rows
    tol = tolerance_table(rows, args.epsilon)
    brief = [{c: r[c] for c in COLUMNS if c != "step_ms"}
             | {c + "_ci95": r.get(c + "_ci95") for c in COLUMNS[4:] if c not in ("step_ms", "failed_runs", *SETTING_COLUMNS)} for r in rows]
    timing = {"step_ms": [[r["parallel"], r["ber"], r["guard"], r["step_ms"]] for r in rows]}
    failed = any(r.get("failed") for r in rows)
    emit(args, {"out": args.out, "rows": brief, "tolerance": tol, "failed": failed},
         lambda: table_md(rows) + "\n" + tolerance_md(tol)
         + f"\nwritten to {args.out}/ (table.csv, table.md, results.json, loss_*.png, tolerance.png; "
           f"every run in runs/)",
         timing=timing)
    return 1 if _say_failed(rows) else 0


def run_sizes(args: argparse.Namespace) -> int:
    """``--sizes``: one campaign per size (``OUT/size-LxE/``, each resumable), then the fit of the
    tolerated BER against the parameter count and its GPT-2 124M prediction (:mod:`integration.scaling`)."""
    import copy
    import os

    from integration.experiment import campaign_runs
    from integration.scaling import scaling_doc, scaling_md, write_scaling
    from integration.tolerance import tolerance_table
    from integration.train import TrainConfig, estimate, param_count

    from phy802.runtime.resources import check_budget

    for opt in ("n_layer", "n_embd"):
        if getattr(args, opt) is not None:
            raise ValueError(f"--sizes sets --{opt.replace('_', '-')} for each size; drop --{opt.replace('_', '-')} "
                             f"{getattr(args, opt)}")
    per: list[tuple[str, argparse.Namespace, int]] = []
    total_s, n_runs, n_kept = 0.0, 0, 0
    for layers, width in args.sizes:  # every size's options are accepted before the first run of any
        a = copy.copy(args)
        a.n_layer, a.n_embd, a.out = layers, width, os.path.join(args.out, f"size-{layers}x{width}")
        spec = spec_from_args(copy.copy(a))
        runs = spec.n_runs()
        kept = len(campaign_runs(spec, os.path.join(a.out, "runs"))[1])  # another campaign's runs: refused now
        total_s += estimate(spec.base)["seconds"] * (runs - kept)
        n_runs += runs
        n_kept += kept
        per.append((f"{layers}x{width}", a, param_count(spec.base)))
    check_budget("this size sweep", seconds=total_s, force=args.force,
                 hint=f"{n_runs} training runs over {len(per)} sizes")
    print(f"phy802 experiment: {len(per)} sizes, {n_runs} training runs in all"
          + (f", {n_kept} kept from before" if n_kept else "")
          + f"; estimated about {total_s / 60:.3g} min for the rest (model estimate, not measured)", file=sys.stderr)
    gpt2 = TrainConfig.preset("gpt2-small")
    target = ("gpt2-small", param_count(gpt2))
    meta = {k: v for k, v in vars(args).items() if k != "json"}
    write_scaling(args.out, scaling_doc([], args.epsilon, target), meta, force=args.force)  # resumes into this set
    sizes, failed = [], False
    for name, a, n_params in per:
        rows = _campaign(a, prog=f"phy802 experiment [size {name}]")
        if isinstance(rows, int):
            return rows
        failed |= _say_failed(rows, f"phy802 experiment [size {name}]")
        sizes.append({"size": name, "n_params": n_params, "out": a.out,
                      "tolerance": tolerance_table(rows, args.epsilon)})
    doc = scaling_doc(sizes, args.epsilon, target)
    write_scaling(args.out, doc, meta, force=args.force)
    emit(args, {"out": args.out, **doc, "failed": failed},
         lambda: scaling_md(doc) + f"\nwritten to {args.out}/ (scaling.md, scaling.json, scaling.png; each size's "
                                   f"campaign in size-LxE/)")
    return 1 if failed else 0
