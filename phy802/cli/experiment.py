"""``phy802 experiment``: sweep BER x {DDP, PP} x guard and report what link errors do to training.

For each parallelism one error-free run (the wrapper at BER 0, bit-identical to plain gloo, see
the tests) is the *shadow*: every run with errors uses the same seed, data order and initial
weights, so the difference of its final weights from the shadow's is the weight noise the link
injected. Outputs, written into ``--out`` (staged in a temporary folder, then renamed):

* ``table.csv`` / ``table.md``: final validation loss and its change vs the error-free run,
  relative weight-noise norm ``||w - w_shadow|| / ||w_shadow||``, replica divergence (DDP), flips
  injected, non-finite events and steps, skipped / overflowed steps, step time;
* ``results.json``: everything, including loss curves and per-class metrics;
* ``loss_<parallel>.png``: validation-loss curves, one panel per guard, one line per BER.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import tempfile

from phy802.cli._common import add_json, add_seed, emit, to_jsonable

__all__ = ["add_arguments", "run", "sweep", "write_report"]


def _floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--bers: not a comma-separated list of numbers: {text!r}") from None
    if not vals or any(not (0 < v < 1) for v in vals):
        raise argparse.ArgumentTypeError(f"--bers: values must lie in (0, 1), got {text!r}")
    return vals


def _names(allowed):
    def parse(text: str) -> list[str]:
        out = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in out if x not in allowed]
        if bad or not out:
            raise argparse.ArgumentTypeError(f"unknown value {bad[0] if bad else text!r} (choose from {', '.join(allowed)})")
        return out

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from phy802.cli.train import add_model_arguments
    from integration.replay import GUARDS

    p.add_argument("--out", required=True, help="output folder (replaced atomically)")
    p.add_argument("--bers", type=_floats, default=[1e-7, 1e-6, 1e-5],
                   help="comma-separated BERs with errors (the error-free run is added; default 1e-7,1e-6,1e-5)")
    p.add_argument("--parallel", type=_names(("ddp", "pp")), default=["ddp", "pp"], help="ddp,pp (default both)")
    p.add_argument("--guards", type=_names(GUARDS), default=list(GUARDS), help=f"default {','.join(GUARDS)}")
    p.add_argument("--steps", type=int, default=300, help="training steps per run (default 300)")
    p.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    add_model_arguments(p)
    add_seed(p)
    add_json(p)


def sweep(args: argparse.Namespace) -> list[dict]:
    """Run the sweep; returns one row dict per run (the error-free shadow first per parallelism)."""
    import torch

    from phy802.cli.train import config_from_args
    from integration.train import run_many

    from phy802._output import progress

    rows: list[dict] = []
    work = tempfile.mkdtemp(prefix="phy802-exp-")
    n_runs = len(args.parallel) * (1 + len(args.bers) * len(args.guards))
    bar = progress(total=n_runs, desc="experiment: training runs", unit="run", delay=0,
                   enable=not getattr(args, "no_progress", False))
    for par in args.parallel:
        cfgs = [config_from_args(args, parallel=par, ber=0.0, guard="none", steps=args.steps)]
        keys = [(0.0, "none")]
        for ber in args.bers:
            for guard in args.guards:
                cfgs.append(config_from_args(args, parallel=par, ber=ber, guard=guard, steps=args.steps))
                keys.append((ber, guard))
        def done(i: int, par=par, keys=list(keys)) -> None:
            ber, guard = keys[i]
            bar.set_postfix_str(f"last: {par} ber {ber:g} guard {guard}")
            bar.update(1)

        try:
            results = run_many(cfgs, timeout_s=args.timeout, out_dir=os.path.join(work, par), on_done=done)
        except BaseException:
            bar.close()
            raise
        shadow = torch.load(os.path.join(results[0]["out_dir"], "params.pt"))
        base_loss = results[0]["final_val_loss"]
        for (ber, guard), r in zip(keys, results):
            w = torch.load(os.path.join(r["out_dir"], "params.pt"))
            noise = float((w - shadow).norm() / shadow.norm())
            m = r["metrics"]
            rows.append({
                "parallel": par, "ber": ber, "guard": guard if ber > 0 else "-",
                "final_val_loss": r["final_val_loss"],
                "delta_val_loss": r["final_val_loss"] - base_loss,
                "weight_noise": noise,
                "replica_divergence": r["final_divergence"],
                "flips": int(sum(m.get("errors_injected", {}).values())),
                "nonfinite_events": int(sum(m.get("nonfinite_events", {}).values())),
                "nonfinite_steps": r["nonfinite_steps"],
                "overflow_steps": r["overflow_steps"],
                "skipped_steps": r["skipped_steps"],
                "step_ms": r["step_time_ms"],
                "evals": r["evals"],
                "train_loss": r["train_loss"],
                "metrics": m,
                "source_kind": r.get("source_kind"),
            })
    bar.close()
    shutil.rmtree(work, ignore_errors=True)
    return rows


_COLS = ("parallel", "ber", "guard", "final_val_loss", "delta_val_loss", "weight_noise", "replica_divergence",
         "flips", "nonfinite_events", "nonfinite_steps", "overflow_steps", "skipped_steps", "step_ms")


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.4g}"
    return str(v)


def _table_md(rows: list[dict]) -> str:
    out = io.StringIO()
    out.write("| " + " | ".join(_COLS) + " |\n")
    out.write("|" + "---|" * len(_COLS) + "\n")
    for r in rows:
        out.write("| " + " | ".join(_fmt(r[c]) for c in _COLS) + " |\n")
    return out.getvalue()


def _plot(rows: list[dict], par: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r["parallel"] == par]
    guards = sorted({r["guard"] for r in mine if r["guard"] != "-"}) or ["-"]
    base = [r for r in mine if r["ber"] == 0.0]
    fig, axes = plt.subplots(1, len(guards), figsize=(4.2 * len(guards), 3.6), sharey=True, squeeze=False)
    for ax, guard in zip(axes[0], guards):
        for r in base:
            s, v = zip(*r["evals"])
            ax.plot(s, v, color="black", lw=2, label="error-free")
        for r in [r for r in mine if r["guard"] == guard]:
            s, v = zip(*r["evals"])
            label = f"BER {r['ber']:g}"
            bad = [st for st, x in zip(s, v) if not math.isfinite(x)]
            if bad:
                label += f" (NaN from step {bad[0]})"
            ax.plot(s, [x if math.isfinite(x) else float("nan") for x in v], marker="o", ms=3, label=label)
        ax.set_title(f"{par.upper()}  guard: {guard}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation loss")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(rows: list[dict], out: str, meta: dict) -> None:
    """Write table, JSON and plots into a temporary sibling of ``out``, then swap it in."""
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", dir=parent)
    try:
        with open(os.path.join(stage, "table.csv"), "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(_COLS)
            for r in rows:
                w.writerow([_fmt(r[c]) for c in _COLS])
        with open(os.path.join(stage, "table.md"), "w", encoding="utf-8") as fh:
            fh.write(_table_md(rows))
        with open(os.path.join(stage, "results.json"), "w", encoding="utf-8") as fh:
            json.dump(to_jsonable({"meta": meta, "rows": rows}), fh)
        for par in sorted({r["parallel"] for r in rows}):
            _plot(rows, par, os.path.join(stage, f"loss_{par}.png"))
        old = None
        if os.path.exists(out):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old.", dir=parent)
            os.replace(out, os.path.join(old, "x"))
        os.replace(stage, out)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def run(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    rows = sweep(args)
    meta = {k: v for k, v in vars(args).items() if k not in ("json",)}
    write_report(rows, args.out, meta)
    brief = [{c: r[c] for c in _COLS} for r in rows]
    emit(args, {"out": args.out, "rows": brief},
         lambda: _table_md(brief) + f"\nwritten to {args.out}/ (table.csv, table.md, results.json, loss_*.png)")
    return 0
