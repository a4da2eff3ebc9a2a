"""``phy802 tradeoff``: step time vs loss penalty per FEC mode and BER, and time-to-target-loss.

Joins an ``experiment`` results folder (``--results``; without it a small experiment is run
first, which needs torch) with the modelled step time (:mod:`protocol.cluster.tradeoff`,
:mod:`protocol.cluster.steptime`, :mod:`protocol.cluster.flat`).  The table goes to stderr as it is
made; ``tradeoff.csv``, ``tradeoff.json`` and ``pareto.png`` are written into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys

from phy802.cli._common import add_json, add_seed, emit, float_arg, int_arg, list_arg, probability, to_jsonable
from phy802.cli.collective import add_cluster_arguments, cluster_from_args

__all__ = ["add_arguments", "fastest_groups", "run", "run_tradeoff"]


def _modes(text: str):
    from protocol.cluster.tradeoff import parse_modes

    try:
        return parse_modes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--modes: {exc}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from protocol.cluster.steptime import MODEL_PRESETS

    p.add_argument("--results", default=None,
                   help="an 'phy802 experiment --out' folder (results.json); default: run a small experiment "
                        "into OUT/experiment first (needs torch)")
    p.add_argument("--out", default="phy802-tradeoff", help="output folder (default ./phy802-tradeoff)")
    p.add_argument("--modes", type=_modes, default=None,
                   help="CODE:FEC list (default kp4:ieee,kr4:ieee,rs272:ieee,kp4:llr,rs272:llr,kp4:detect_only,"
                        "kp4:correct_no_indication,kp4:bypass,kp4:unequal)")
    p.add_argument("--ranks", type=list_arg(int_arg(1, 10**7)), default=(8, 64, 512),
                   help="cluster sizes, comma-separated (default 8,64,512)")
    p.add_argument("--model", choices=list(MODEL_PRESETS), default="gpt2-124m",
                   help="model size of the time side: gpt2-124m (GPT-2 small as published, 124M parameters) or "
                        "gpt2-small (the training preset: the same model, vocabulary padded to 50304, 124.5M); 0.5M tokens per step "
                        "(default gpt2-124m)")
    p.add_argument("--tflops", type=float_arg(0, 1e7, lo_open=True), default=989.0,
                   help="peak accelerator throughput, TFLOP/s (default 989: H100 SXM dense BF16)")
    p.add_argument("--mfu", type=float_arg(0, 1, lo_open=True), default=0.4, help="model FLOPs utilisation (default 0.4)")
    p.add_argument("--measured-compute", action="store_true",
                   help="with --comm-log: use the log's measured step time as compute (default: --tflops x --mfu)")
    p.add_argument("--comm-log", default=None, metavar="FILE",
                   help="a communication log ('phy802 train --comm-log') to replay instead of the --model preset "
                        "(default: none)")
    p.add_argument("--algo", choices=("ring", "tree", "nvls", "nvls_tree"), default=None,
                   help="force the all-reduce algorithm of the time side (default: NCCL's choice per size; "
                        "--cluster flat-ethernet: ring)")
    p.add_argument("--workload", choices=("ddp", "fsdp", "tp", "moe", "pp", "decode"), default=None,
                   help="time side of another workload on the same loss curves (protocol/cluster/workloads.py): "
                        "tp (Megatron tensor-parallel all-reduces), moe (expert all-to-all), pp, decode (per token); "
                        "default: the results' own parallelism")
    p.add_argument("--tp", type=int_arg(1, 4096), default=None,
                   help="tensor-parallel GPUs of --workload tp / decode (default: a node's; more spans nodes)")
    p.add_argument("--trials", type=int_arg(0, 100_000), default=200,
                   help="loss-recovery trials per collective at BER > 0 (cluster model; default 200)")
    p.add_argument("--pp-stages", type=int_arg(2, 4096), default=None,
                   help="pipeline stages of the time side (default: the experiment's world size)")
    p.add_argument("--target-loss", type=float_arg(0, None, lo_open=True), default=None,
                   help="target validation loss (default: the error-free final loss x (1 + --target-rel))")
    p.add_argument("--target-rel", type=float_arg(0, 10), default=0.01, help="relative target margin (default 0.01)")
    p.add_argument("--steps", type=int_arg(1, 100_000), default=60, help="without --results: training steps (default 60)")
    p.add_argument("--bers", type=list_arg(probability()), default=(1e-6, 1e-5),
                   help="without --results: comma-separated BERs of the small experiment (default 1e-6,1e-5)")
    add_cluster_arguments(p, code=False)
    add_seed(p)
    add_json(p)


def _small_experiment(args: argparse.Namespace, out: str) -> str:
    """Run a small DDP experiment (bypass, two guards) into ``out``; returns the folder."""
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    from phy802.cli.experiment import add_arguments as exp_args, sweep as exp_sweep, write_report

    p = argparse.ArgumentParser()
    exp_args(p)
    bers = ",".join(f"{b:g}" for b in args.bers)
    a = p.parse_args(["--out", out, "--bers", bers, "--parallel", "ddp",
                      "--guards", "nan_to_zero_clamp,exponent_protection", "--steps", str(args.steps),
                      "--seed", str(args.seed), "--fec", "bypass", "--n-layer", "2", "--n-embd", "64",
                      "--eval-interval", str(max(1, args.steps // 6)), "--eval-iters", "4", "--timeout", "900"])
    print(f"[tradeoff] no --results: running a small experiment (2-rank DDP, {args.steps} steps, BER 0,{bers}, "
          f"bypass) into {out}", file=sys.stderr, flush=True)
    rows = exp_sweep(a)
    write_report(rows, out, {k: v for k, v in vars(a).items() if k != "json"})
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf"
        return f"{v:.4g}"
    return str(v)


_SHOW = ("parallel", "mode", "ber", "guard", "ranks", "step_ms", "exposed_ms", "phy_us", "resend_ms",
         "failure_rate", "loss_penalty", "steps_to_target", "time_to_target_s", "vs_ref")


def run_tradeoff(args: argparse.Namespace, live: bool = True) -> dict:
    """The whole command as a function (also used by ``phy802 demo``); returns the JSON document."""
    from phy802._output import check_output_dir, output_set
    from protocol.cluster.steptime import read_commlog

    from phy802.cli._common import CliError
    from phy802.cli.collective import is_flat

    if not (args.tflops > 0 and 0 < args.mfu <= 1):
        raise ValueError(f"--tflops must be > 0 and --mfu in (0, 1], got {args.tflops}, {args.mfu}")
    if args.measured_compute and not args.comm_log:
        raise CliError("--measured-compute needs --comm-log FILE (the measured step time is the log's)")
    if args.comm_log and args.workload:
        raise CliError("--workload and --comm-log do not go together (the log is the workload)")
    if (args.workload or args.tp) and is_flat(args):
        raise CliError("--workload / --tp need the cluster model, not --cluster flat-ethernet")
    if args.tp and args.workload not in ("tp", "decode"):
        raise CliError("--tp needs --workload tp or decode")
    if args.algo in ("nvls", "nvls_tree") and is_flat(args):
        raise CliError(f"--algo {args.algo}: the flat-ethernet model knows ring and tree")
    log = read_commlog(args.comm_log) if args.comm_log else None
    if log is not None:
        mine = [r for r in log.records if int(r.get("rank", 0)) == 0]
        if not log.records or (log.parallel != "pp" and not mine):
            raise CliError(f"{args.comm_log}: the communication log has no records"
                           + (" of rank 0" if log.records else " (header only)")
                           + ": it would model zero communication")
    out = args.out
    check_output_dir(out, "tradeoff")  # before any work: never over the user's files (issue 28)
    shown = getattr(args, "shown_out", None) or out  # where the set ends up (it is built beside it)
    with output_set(out, "tradeoff") as stage:
        results = args.results or _small_experiment(args, os.path.join(stage, "experiment"))
        doc = _tradeoff_into(args, str(stage), results, shown, live, log)
    return doc


def _tradeoff_into(args, out: str, results: str, shown: str, live: bool, log) -> dict:
    """The tradeoff written into ``out`` (the set being built); ``shown`` is where it ends up."""
    from phy802._io import atomic_write_text
    from protocol.cluster.tradeoff import COLUMNS, DEFAULT_MODES, TimeModel, load_results, plot_pareto, tradeoff_rows

    from phy802.cli._common import CliError
    from phy802.cli.collective import is_flat
    from protocol.cluster import steptime as _st

    shown_results = args.results or os.path.join(shown, "experiment")
    meta, rows = load_results(results)
    if log is not None:
        pars = sorted({r["parallel"] for r in rows})
        if log.parallel not in pars or len(pars) > 1:
            raise CliError(f"{args.comm_log}: the log was recorded with parallel {log.parallel!r}, the results in "
                           f"{results} are {', '.join(pars)}: a log must come from the same parallelism as the results "
                           "(it would otherwise be ignored)")
    stages = args.pp_stages or int(meta.get("world_size", 2))
    _st.SIM_TRIALS, _st.SIM_SEED = int(args.trials), int(args.seed)
    tm = TimeModel(model=args.model, tflops=None if (log is not None and args.measured_compute) else args.tflops,
                   mfu=args.mfu, log=log, pp_stages=max(2, stages), microbatches=int(meta.get("microbatches", 4)),
                   algo=args.algo, workload=args.workload, tp=args.tp)
    modes = args.modes or list(DEFAULT_MODES)

    if live:
        print("  ".join(f"{c:>12}" if i > 1 else f"{c:<24}" if i == 1 else f"{c:<8}" for i, c in enumerate(_SHOW)),
              file=sys.stderr, flush=True)

    def show(r: dict) -> None:
        if live:
            print("  ".join(f"{_fmt(r[c]):>12}" if i > 1 else f"{r[c]:<24}" if i == 1 else f"{r[c]:<8}"
                            for i, c in enumerate(_SHOW)), file=sys.stderr, flush=True)

    skipped: list = []
    table = tradeoff_rows(meta, rows, modes=modes, ranks=tuple(args.ranks), cluster=cluster_from_args(args),
                          time_model=tm, target_loss=args.target_loss, target_rel=args.target_rel, on_row=show,
                          skipped=skipped)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    for r in table:
        w.writerow([_fmt(r[c]) for c in COLUMNS])
    atomic_write_text(os.path.join(out, "tradeoff.csv"), buf.getvalue())
    doc = {"results": os.path.abspath(shown_results), "out": os.path.abspath(shown),
           "model": f"comm-log {args.comm_log}" if log is not None else args.model, "algo": args.algo or "nccl",
           "workload": args.workload, "trials": args.trials,
           "time_side": (_describe(cluster_from_args(args)) if not is_flat(args)
                         else "flat-ethernet (protocol/cluster/flat.py)"),
           "tflops": tm.tflops, "mfu": args.mfu, "comm_log": args.comm_log, "cluster": to_jsonable(cluster_from_args(args)),
           "rows": [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                    for r in table],
           "not_measured": [{"parallel": p, "mode": m, "ber": b} for p, m, b in skipped],
           "results_fec": str(meta.get("fec", "bypass")),
           "phy_us_meaning": PHY_US_MEANING}
    doc["fastest"] = fastest_groups(doc["rows"])
    doc["fastest_rule"] = (f"lowest vs_ref per parallel, ranks and BER; settings whose vs_ref is equal at "
                           f"{TIE_DECIMALS} decimals are a tie (tie: true) and all listed")
    atomic_write_text(os.path.join(out, "tradeoff.json"), json.dumps(to_jsonable(doc), indent=1))
    plot_pareto(table, os.path.join(out, "pareto.png"))
    return doc


def _describe(c) -> str:
    """The cluster of the time side; its node count follows each row's ranks."""
    text = c.describe().rsplit(", links", 1)[0]
    return text.replace(f"{c.nodes} nodes x ", "ranks / " + str(c.gpus_per_node) + " nodes x ", 1)


#: decimals of ``vs_ref`` at which two settings count as a tie (the precision the summary prints,
#: the same rule as the demo report's opening, :func:`phy802.cli._narrative.fastest`)
TIE_DECIMALS = 3

#: what ``phy_us`` is: printed under the table and stored in ``tradeoff.json`` (issue 27)
PHY_US_MEANING = ("phy_us (model): the FEC receive latency summed over every sequential link hop of one "
                  "step's collectives; only exposed_ms (what backward does not hide) adds to step_ms")


def fastest_groups(rows: list[dict], decimals: int = TIE_DECIMALS) -> list[dict]:
    """Per (parallel, ranks, BER): every setting with the lowest ``vs_ref`` at ``decimals`` decimals.

    A tie is listed whole (``tie`` true, all tied settings in ``settings``, in row order) instead of
    one winner picked by row order; settings that never reach the target (``vs_ref`` None / inf)
    are left out, and a group where none reaches it is left out."""
    from phy802.cli._narrative import fastest

    groups: dict = {}
    for r in rows:
        v = r.get("vs_ref")
        if isinstance(v, (int, float)) and math.isfinite(v):
            groups.setdefault((r["parallel"], r["ranks"], r["ber"]), []).append(r)
    out = []
    for (par, n, ber), at in sorted(groups.items()):
        tied = fastest(at, decimals)
        out.append({"parallel": par, "ranks": n, "ber": ber, "vs_ref": round(tied[0]["vs_ref"], decimals),
                    "tie": len(tied) > 1,
                    "settings": [{"mode": r["mode"], "guard": r["guard"], "vs_ref": r["vs_ref"],
                                  "time_to_target_s": r["time_to_target_s"]} for r in tied]})
    return out


def _fastest_line(g: dict) -> str:
    """One summary line of :func:`fastest_groups`: the winner, or every setting of a tie."""
    def name(s: dict) -> str:
        return s["mode"] + (f" guard {s['guard']}" if s["guard"] not in (None, "", "-") else "")

    ts = [s["time_to_target_s"] for s in g["settings"]]
    secs = f"{min(ts):.4g} s" if f"{min(ts):.4g}" == f"{max(ts):.4g}" else f"{min(ts):.4g}-{max(ts):.4g} s"
    head = f"  {g['parallel']} x{g['ranks']:<5} BER {g['ber']:<7g} vs_ref {g['vs_ref']:.{TIE_DECIMALS}f}  {secs:<16}"
    if not g["tie"]:
        return f"{head} {name(g['settings'][0])}"
    return f"{head} tie of {len(g['settings'])}: " + ", ".join(name(s) for s in g["settings"])


def run(args: argparse.Namespace) -> int:
    doc = run_tradeoff(args, live=not args.json)

    def text() -> str:
        lines = [f"written to {doc['out']}/ (tradeoff.csv, tradeoff.json, pareto.png)",
                 f"time side: {doc['time_side']}" + (f", workload {doc['workload']}" if doc.get("workload") else ""),
                 PHY_US_MEANING,
                 f"fastest to the target loss (vs_ref = time to target / error-free KP4's; settings whose vs_ref "
                 f"is equal at {TIE_DECIMALS} decimals are a tie and all listed):"]
        lines += [_fastest_line(g) for g in doc["fastest"]]
        if doc["not_measured"]:
            lines.append("no loss curve in the results for: " + ", ".join(
                f"{x['parallel']} {x['mode']} at BER {x['ber']:g}" for x in doc["not_measured"])
                + f" (the experiment ran fec={doc['results_fec']}; unequal needs an exponent_protection run)")
        return "\n".join(lines)

    emit(args, doc, text)
    return 0
