"""``phy802 tradeoff``: step time vs loss penalty per FEC mode and BER, and time-to-target-loss.

Joins an ``experiment`` results folder (``--results``; without it a small experiment is run
first, which needs torch) with the modelled step time (:mod:`protocol.cluster.tradeoff`,
:mod:`protocol.cluster.steptime`, :mod:`protocol.cluster.flat`).  The table goes to stdout as it is
made (then the summary; ``--json``: the JSON document only); ``tradeoff.csv``, ``tradeoff.json`` and
``pareto.png`` are written into ``--out``.  Every option is used or refused (:func:`_refuse_unused`,
:func:`model_from_args`, :func:`ranks_from_args`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys

from phy802.cli._common import CliError, add_json, add_seed, count_arg, emit, float_arg, int_arg, list_arg, probability
from phy802.runtime.jsonable import to_jsonable
from phy802.cli.collective import add_cluster_arguments, cluster_from_args, is_flat

__all__ = ["add_arguments", "fastest_groups", "run", "run_tradeoff"]


#: defaults of the options left None in the parser (so that a typed option can be told apart)
_DEFAULT_STEPS, _DEFAULT_BERS = 60, (1e-6, 1e-5)
_DEFAULT_TFLOPS, _DEFAULT_MFU, _DEFAULT_TRIALS, _DEFAULT_TARGET_REL = 989.0, 0.4, 200, 0.01


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
    add_scaling_argument(p, "the error-delivering rows (tolerated only at or below the interval's lower end)")
    p.add_argument("--out", default="phy802-tradeoff", help="output folder (default ./phy802-tradeoff)")
    p.add_argument("--modes", type=_modes, default=None,
                   help="CODE:FEC list (default kp4:ieee,kr4:ieee,rs272:ieee,kp4:llr,rs272:llr,kp4:detect_only,"
                        "kp4:correct_no_indication,kp4:bypass,kp4:unequal)")
    p.add_argument("--ranks", type=list_arg(int_arg(1, 10**7)), default=None,
                   help="cluster sizes, comma-separated (default: --nodes x GPUs per node when --nodes is given, "
                        "else 8,64,512; with --nodes each must equal it)")
    p.add_argument("--model", choices=list(MODEL_PRESETS), default=None,
                   help="model of the time side; " + "; ".join(_preset_help(k) for k in MODEL_PRESETS)
                        + " (default gpt2-124m; or none and --params, --layers, --d-model, --tokens-per-step)")
    p.add_argument("--params", type=count_arg(1, 10**14), default=None,
                   help="parameters of the model (default: --model's; with --model it must be the preset's, without it the "
                        "flags give a model of your own)")
    p.add_argument("--layers", type=int_arg(1, 100_000), default=None,
                   help="transformer layers (FSDP units, tensor-parallel and pipeline sizes; default: --model's)")
    p.add_argument("--d-model", type=int_arg(1, 10**7), default=None,
                   help="hidden size (activation messages of tp, moe, pp, decode; default: --model's)")
    p.add_argument("--seq-len", type=int_arg(1, 10**8), default=None,
                   help="sequence length, tokens (with --batch-size; default: --model's)")
    p.add_argument("--tokens-per-step", type=count_arg(1, 10**13), default=None,
                   help="global batch in tokens per optimizer step (default: --model's, as listed above)")
    p.add_argument("--batch-size", type=int_arg(1, 10**9), default=None,
                   help="global batch in sequences: tokens per step = this x the sequence length (instead of "
                        "--tokens-per-step; default: --model's tokens per step)")
    p.add_argument("--tflops", type=float_arg(0, 1e7, lo_open=True), default=None,
                   help="peak accelerator throughput, TFLOP/s (default 989: H100 SXM dense BF16)")
    p.add_argument("--mfu", type=float_arg(0, 1, lo_open=True), default=None,
                   help=f"model FLOPs utilisation (default {_DEFAULT_MFU})")
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
                   help="tensor-parallel GPUs of --workload tp / decode (default: the model's layout as listed "
                        "under --model, else a node's; more than a node's spans nodes)")
    p.add_argument("--trials", type=int_arg(0, 100_000), default=None,
                   help=f"loss-recovery trials per collective at BER > 0 (cluster model only; default {_DEFAULT_TRIALS})")
    p.add_argument("--pp-stages", type=int_arg(2, 4096), default=None,
                   help="pipeline stages of the time side (default: the experiment's world size)")
    p.add_argument("--target-loss", type=float_arg(0, None, lo_open=True), default=None,
                   help="target validation loss, on the validation curve's scale (default: the error-free run's last "
                        "curve point x (1 + --target-rel))")
    p.add_argument("--target-rel", type=float_arg(0, 10), default=None,
                   help=f"relative target margin (default {_DEFAULT_TARGET_REL}; not with --target-loss)")
    p.add_argument("--steps", type=int_arg(1, 100_000), default=None,
                   help="without --results only: training steps of the small experiment (default 60)")
    p.add_argument("--bers", type=list_arg(probability()), default=None,
                   help="without --results only: comma-separated BERs of the small experiment (default 1e-6,1e-5; "
                        "with --results the BERs are the results')")
    add_cluster_arguments(p, code=False)
    add_seed(p)
    add_json(p)


def add_scaling_argument(p, judges: str) -> None:
    """``--scaling FILE`` of ``tradeoff`` and ``advise``: the size fit as a larger model's loss side
    (:mod:`protocol.cluster.sizefit`); ``judges`` says what its prediction decides."""
    p.add_argument("--scaling", default=None, metavar="FILE",
                   help="a size fit ('phy802 experiment --sizes' scaling.json, or its folder): when --model has "
                        "another parameter count than the results' model, the tolerated BER predicted at its size "
                        f"(95%% interval, unchecked) judges {judges} instead of the small model's measured penalty; "
                        "its FEC, recipe, parallelism and guards must be the results' (default: none, the measured "
                        "penalty is carried over)")


def _preset_help(name: str) -> str:
    from protocol.cluster.sizefit import short_params
    from protocol.cluster.steptime import MODEL_PRESETS

    m = MODEL_PRESETS[name]
    tok = m["tokens_per_step"]
    return (f"{name} ({short_params(m['params'])} parameters, {m['n_layer']} x {m['d_model']}, "
            f"{tok / 2**20:g}M tokens per step, tp {m['tp']})")


#: the model flags of ``tradeoff`` and the preset field each sets
_MODEL_FLAGS = (("params", "params"), ("layers", "n_layer"), ("d_model", "d_model"), ("seq_len", "seq_len"))


def model_from_args(args: argparse.Namespace):
    """The time side's model: a preset name, or a dict (:func:`protocol.cluster.steptime.model_preset`)
    when a flag sets the batch or the model is given by its flags.  The shape of a preset (parameters,
    layers, hidden size, sequence length) is fixed: a flag that disagrees with it is refused naming
    both; the batch (``--tokens-per-step`` / ``--batch-size``) is a setting of the run, the preset's
    by default."""
    from protocol.cluster.steptime import model_preset

    given = {field: getattr(args, flag) for flag, field in _MODEL_FLAGS if getattr(args, flag) is not None}
    batch = args.tokens_per_step is not None or args.batch_size is not None
    if args.tokens_per_step is not None and args.batch_size is not None:
        raise CliError("--tokens-per-step and --batch-size both set the batch; give one")
    name = args.model or ("gpt2-124m" if not given else None)
    if name is not None:
        base = model_preset(name)
        for flag, field in _MODEL_FLAGS:
            v = getattr(args, flag)
            if v is not None and v != base[field]:
                raise CliError(f"--model {name} has {field.replace('n_layer', 'layers')} {base[field]:,}; "
                               f"--{flag.replace('_', '-')} {v:,} disagrees: drop one (or drop --model and give "
                               "the model by its flags)")
        if not batch:
            return name
    else:
        base = {}
    m = {**base, **given, "name": name or "custom"}
    if args.batch_size is not None:
        if "seq_len" not in m:
            raise CliError("--batch-size needs the sequence length: --seq-len (or --model)")
        m["tokens_per_step"] = args.batch_size * m["seq_len"]
    elif args.tokens_per_step is not None:
        m["tokens_per_step"] = args.tokens_per_step
    if name is None:
        missing = [flag for flag, k in (("--params", "params"), ("--layers", "n_layer"), ("--d-model", "d_model"),
                                        ("--tokens-per-step or --batch-size", "tokens_per_step")) if k not in m]
        if missing:
            raise CliError(f"a model given by its flags needs {', '.join(missing)} too (or --model PRESET)")
        m.setdefault("seq_len", 1)  # only --batch-size reads it
    try:
        return model_preset(m)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _model_name(model) -> str:
    if isinstance(model, str):
        return model
    return (f"{model['name']}: {model['params']:,} parameters, {model['n_layer']} x {model['d_model']}, "
            f"{model['tokens_per_step']:,} tokens per step")


def ranks_from_args(args: argparse.Namespace) -> tuple[int, ...]:
    """``--ranks``, or the one size ``--nodes`` gives; every size checked against ``--nodes`` (and
    the cluster) before any work: a size the flags contradict is refused naming both."""
    if args.ranks is None:
        if getattr(args, "nodes", None) is not None and not is_flat(args):
            return (cluster_from_args(args).ranks,)
        return (8, 64, 512)
    for n in args.ranks:
        cluster_from_args(args, ranks=n)
    return tuple(args.ranks)


def _small_experiment(args: argparse.Namespace, out: str) -> str:
    """Run a small DDP experiment (bypass, two guards) into ``out``; returns the folder."""
    steps = _DEFAULT_STEPS if args.steps is None else args.steps
    from phy802.cli.experiment import add_arguments as exp_args, sweep as exp_sweep, write_report

    p = argparse.ArgumentParser()
    exp_args(p)
    bers = ",".join(f"{b:g}" for b in (args.bers or _DEFAULT_BERS))
    a = p.parse_args(["--out", out, "--bers", bers, "--parallel", "ddp",
                      "--guards", "nan_to_zero_clamp,exponent_protection", "--steps", str(steps),
                      "--seed", str(args.seed), "--fec", "bypass", "--n-layer", "2", "--n-embd", "64",
                      "--eval-interval", str(max(1, steps // 6)), "--eval-iters", "4", "--timeout", "900"])
    print(f"[tradeoff] no --results: running a small experiment (2-rank DDP, {steps} steps, BER 0,{bers}, "
          f"bypass) into {out}", file=sys.stderr, flush=True)
    rows = exp_sweep(a, prog="phy802 tradeoff")
    write_report(rows, out, {k: v for k, v in vars(a).items() if k != "json"})
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf"
        return f"{v:.4g}"
    return str(v)


_SHOW = ("workload", "mode", "ber", "guard", "ranks", "step_ms", "exposed_ms", "phy_us", "resend_ms",
         "failure_rate", "loss_penalty", "steps_to_target", "time_to_target_s", "vs_ref")
#: shown too when the loss side is predicted (the verdict of each row against the predicted interval)
_SHOW_PREDICTED = _SHOW + ("tolerated",)


def run_tradeoff(args: argparse.Namespace, live: bool = True) -> dict:
    """The whole command as a function (also used by ``phy802 demo``); returns the JSON document."""
    from phy802.runtime.output import check_output_dir, output_set
    from protocol.cluster.steptime import read_commlog

    from phy802.cli._common import CliError
    from phy802.cli.collective import is_flat

    _refuse_unused(args)
    model = model_from_args(args)
    ranks = ranks_from_args(args)
    if args.algo in ("nvls", "nvls_tree") and is_flat(args):
        raise CliError(f"--algo {args.algo}: the flat-ethernet model knows ring and tree")
    log = read_commlog(args.comm_log) if args.comm_log else None
    if log is not None:
        mine = [r for r in log.records if int(r.get("rank", 0)) == 0]
        if not log.records or (log.parallel != "pp" and not mine):
            raise CliError(f"{args.comm_log}: the communication log has no records"
                           + (" of rank 0" if log.records else " (header only)")
                           + ": it would model zero communication")
    size_fit = _read_size_fit(args)
    out = args.out
    check_output_dir(out, "tradeoff")  # before any work: never over the user's files
    shown = getattr(args, "shown_out", None) or out  # where the set ends up (it is built beside it)
    with output_set(out, "tradeoff") as stage:
        results = args.results or _small_experiment(args, os.path.join(stage, "experiment"))
        doc = _tradeoff_into(args, str(stage), results, shown, live, log, model, ranks, size_fit)
    return doc


def _refuse_unused(args: argparse.Namespace) -> None:
    """Every option is used or refused: the pairs that cannot go together, named."""
    def typed(*names: str) -> list[str]:
        return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) is not None]

    if args.results and typed("steps", "bers"):
        raise CliError(f"{', '.join(typed('steps', 'bers'))} set the small experiment run without --results; with "
                       f"--results {args.results} the BERs and steps are the results' (drop them)")
    if args.measured_compute and not args.comm_log:
        raise CliError("--measured-compute needs --comm-log FILE (the measured step time is the log's)")
    if args.measured_compute and typed("tflops", "mfu"):
        raise CliError(f"--measured-compute takes the compute from the log: {', '.join(typed('tflops', 'mfu'))} "
                       "would be ignored (drop one)")
    if args.comm_log and args.workload:
        raise CliError("--workload and --comm-log do not go together (the log is the workload)")
    if args.comm_log and typed("model", "params", "layers", "d_model", "seq_len", "tokens_per_step", "batch_size"):
        raise CliError(f"--comm-log {args.comm_log} is the model of the time side (its header's parameters and "
                       f"tokens): {', '.join(typed('model', 'params', 'layers', 'd_model', 'seq_len', 'tokens_per_step', 'batch_size'))} "
                       "would be ignored (drop one)")
    if (args.workload or args.tp) and is_flat(args):
        raise CliError("--workload / --tp need the cluster model, not --cluster flat-ethernet")
    if args.tp and args.workload not in ("tp", "decode"):
        raise CliError("--tp needs --workload tp or decode")
    if args.workload == "decode" and typed("tflops", "mfu"):
        raise CliError(f"--workload decode is memory bound (reading the weights once per token): "
                       f"{', '.join(typed('tflops', 'mfu'))} would be ignored (drop it)")
    if args.trials is not None and is_flat(args):
        raise CliError("--trials: the flat-ethernet model has expected resends, no simulated trials (drop it)")
    if args.target_loss is not None and args.target_rel is not None:
        raise CliError("--target-loss and --target-rel both set the target; give one")


def _read_size_fit(args: argparse.Namespace):
    """``--scaling``'s :class:`~protocol.cluster.sizefit.SizeFit` (None without it), read and checked
    before any work; without ``--results`` it is checked against the small experiment's cells first."""
    if args.scaling is None:
        return None
    from protocol.cluster.sizefit import read_size_fit

    fit = read_size_fit(args.scaling)
    if not args.results:  # the small experiment: ddp, default recipe, bypass, its two guards (_small_experiment)
        fit.check_results({"fec": "bypass"}, [{"parallel": "ddp", "ber": 1e-6, "guard": g, "recipe": "default"}
                                              for g in ("nan_to_zero_clamp", "exponent_protection")],
                          "the small experiment run without --results")
    return fit


def _named_params(model, log) -> tuple[str, int | None]:
    """The time side's model: its name and parameter count (a log's header; None: not recorded)."""
    from protocol.cluster.steptime import model_preset

    if log is not None:
        n = log.header.get("params")
        return "the communication log's model", (int(n) if isinstance(n, int) and n > 0 else None)
    m = model_preset(model)
    return (model if isinstance(model, str) else m.get("name", "custom")), int(m["params"])


def loss_side(size_fit, meta: dict, rows: list[dict], results: str, model, log) -> tuple[dict, dict | None]:
    """Which loss side the join uses, as a document (``kind`` measured / predicted, ``text``, the
    thresholds), and the thresholds per (parallel, guard) when it is the size fit's prediction.
    The prediction is used only when the time side's model has another parameter count than the
    results' model; a size fit that does not match the results is refused (ValueError naming both)."""
    from protocol.cluster.sizefit import measured_text, results_n_params, scaling_beside

    small = results_n_params(rows)
    name, n = _named_params(model, log)
    doc = {"kind": "measured", "text": measured_text(small), "n_params_measured": small, "model": name,
           "n_params_model": n, "scaling": None, "thresholds": []}
    if size_fit is None:
        if n is not None and small is not None and n != small:
            doc["text"] += f", carried over to {name} ({n:,} parameters) as it is [I]"
            beside = scaling_beside(results)
            if beside is not None:  # explicit is safer (the fit must match the results); said, not read
                doc["scaling_hint"] = (f"{beside} is the size fit of this experiment's sizes: --scaling {beside} "
                                       f"predicts the tolerated BER at {name}'s size instead of carrying the small "
                                       "model's penalty over")
        return doc, None
    size_fit.check_results(meta, rows, results)
    if n is None:
        raise ValueError(f"--scaling {size_fit.path}: the time side's model has no parameter count (the "
                         "communication log's header has no 'params'): nothing to predict at")
    doc["scaling"] = size_fit.path
    if small is not None and n == small:
        doc["text"] += f" (the size fit {size_fit.path} is not used: {name} has the same parameter count)"
        return doc, None
    keys = sorted({(r["parallel"], str(r["guard"])) for r in rows if float(r["ber"]) > 0})
    recipe = str(rows[0].get("recipe", "default"))  # one recipe per results (load_results)
    pred = {(par, g): size_fit.predict(par, recipe, g, name, n) for par, g in keys}
    ths = [p.as_dict() for p in pred.values()]
    doc.update(kind="predicted", thresholds=ths, extrapolates_decades=max(t["extrapolates_decades"] for t in ths),
               text="; ".join(t["text"] for t in ths)
               + f" (instead of the penalty {measured_text(small)})")
    return doc, pred


def _tradeoff_into(args, out: str, results: str, shown: str, live: bool, log, model, ranks, size_fit=None) -> dict:
    """The tradeoff written into ``out`` (the set being built); ``shown`` is where it ends up."""
    from phy802.runtime.output import atomic_write_text
    from protocol.cluster.tradeoff import (COLUMNS, DEFAULT_MODES, TimeModel, load_results, plot_pareto, tradeoff_rows,
                                           unreached_target_note)

    from phy802.cli._common import CliError
    from phy802.cli.collective import is_flat
    from protocol.cluster.steptime import SimSettings

    shown_results = args.results or os.path.join(shown, "experiment")
    meta, rows = load_results(results)
    if log is not None:
        pars = sorted({r["parallel"] for r in rows})
        if log.parallel not in pars or len(pars) > 1:
            raise CliError(f"{args.comm_log}: the log was recorded with parallel {log.parallel!r}, the results in "
                           f"{results} are {', '.join(pars)}: a log must come from the same parallelism as the results "
                           "(it would otherwise be ignored)")
    if args.pp_stages is not None and "pp" not in {r["parallel"] for r in rows} and args.workload != "pp":
        raise CliError(f"--pp-stages {args.pp_stages}: the results in {results} have no pp rows and --workload is "
                       "not pp; nothing would use it")
    stages = args.pp_stages or int(meta.get("world_size", 2))
    trials = _DEFAULT_TRIALS if args.trials is None else args.trials
    mfu = _DEFAULT_MFU if args.mfu is None else args.mfu
    tflops = _DEFAULT_TFLOPS if args.tflops is None else args.tflops
    tm = TimeModel(model=model, tflops=None if (log is not None and args.measured_compute) else tflops,
                   mfu=mfu, log=log, pp_stages=max(2, stages), microbatches=int(meta.get("microbatches", 4)),
                   algo=args.algo, workload=args.workload, tp=args.tp, sim=SimSettings(int(trials), int(args.seed)))
    modes = args.modes or list(DEFAULT_MODES)
    side, predicted = loss_side(size_fit, meta, rows, results, model, log)
    cols = _SHOW if predicted is None else _SHOW_PREDICTED

    if live:  # the results table, on stdout as its rows are made (the summary follows it)
        print("  ".join(f"{c:>12}" if i > 1 else f"{c:<24}" if i == 1 else f"{c:<8}" for i, c in enumerate(cols)),
              flush=True)

    def show(r: dict) -> None:
        if live:
            print("  ".join(f"{_fmt(r[c]):>12}" if i > 1 else f"{r[c]:<24}" if i == 1 else f"{r[c]:<8}"
                            for i, c in enumerate(cols)), flush=True)

    skipped: list = []
    table = tradeoff_rows(meta, rows, modes=modes, ranks=ranks, cluster=cluster_from_args(args),
                          time_model=tm, target_loss=args.target_loss,
                          target_rel=_DEFAULT_TARGET_REL if args.target_rel is None else args.target_rel, on_row=show,
                          skipped=skipped, predicted=predicted)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    for r in table:
        w.writerow([_fmt(r[c]) for c in COLUMNS])
    atomic_write_text(os.path.join(out, "tradeoff.csv"), buf.getvalue())
    doc = {"results": os.path.abspath(shown_results), "out": os.path.abspath(shown),
           "model": f"comm-log {args.comm_log}" if log is not None else _model_name(model),
           "algo": args.algo or "nccl", "workload": args.workload, "trials": trials, "ranks": list(ranks),
           "time_side": (_describe(cluster_from_args(args)) if not is_flat(args)
                         else "flat-ethernet (protocol/cluster/flat.py)"),
           "tflops": tm.tflops, "mfu": mfu, "comm_log": args.comm_log, "cluster": to_jsonable(cluster_from_args(args)),
           "rows": [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                    for r in table],
           "not_measured": [{"parallel": p, "mode": m, "ber": b} for p, m, b in skipped],
           "results_fec": str(meta.get("fec", "bypass")),
            "loss_side": side,
            "phy_us_meaning": PHY_US_MEANING, "loss_penalty_meaning": LOSS_PENALTY_MEANING}
    # why every time to target is inf, when it is (a bare inf column says nothing)
    targets = {r["parallel"]: r["target_loss"] for r in table}
    doc["notes"] = [f"{par}: {note}" for par, tgt in targets.items()
                    if (note := unreached_target_note(next(r for r in rows if r["parallel"] == par
                                                            and float(r["ber"]) == 0.0), tgt))]
    doc["fastest"] = fastest_groups(doc["rows"])
    doc["fastest_rule"] = (f"lowest vs_ref per parallel, ranks and BER; settings whose vs_ref is equal at "
                           f"{TIE_DECIMALS} decimals are a tie (tie: true) and all listed")
    atomic_write_text(os.path.join(out, "tradeoff.json"), json.dumps(to_jsonable(doc), indent=1))
    plot_pareto(table, os.path.join(out, "pareto.png"), loss_side=side["text"] if predicted is not None else None)
    return doc


def _describe(c) -> str:
    """The cluster of the time side; its node count follows each row's ranks."""
    text = c.describe().rsplit(", links", 1)[0]
    return text.replace(f"{c.nodes} nodes x ", f"(ranks / {c.gpus_per_node}) nodes x ", 1)


#: decimals of ``vs_ref`` at which two settings count as a tie (the precision the summary prints,
#: the same rule as the demo report's opening, :func:`phy802.cli._narrative.fastest`)
TIE_DECIMALS = 3

#: what ``phy_us`` is: printed under the table and stored in ``tradeoff.json``
PHY_US_MEANING = ("phy_us (model): the FEC receive latency summed over every sequential link hop of one "
                  "step's collectives; only exposed_ms (what backward does not hide) adds to step_ms")

#: what ``loss_penalty`` is: a measured difference of two training runs, not a computed residue (a
#: one-seed penalty of -9.37e-7 was read as float noise; it is a run whose delivered mantissa flips
#: moved the weights); printed under the table, stored in ``tradeoff.json``, said in the demo's report
LOSS_PENALTY_MEANING = ("loss_penalty (measured): the final validation loss minus the error-free run's, a "
                        "difference of two training runs (0 for modes that deliver no errors); loss_penalty_ci95 "
                        "in tradeoff.csv/json is its 95% half-width over the model seeds, nan with one seed: then a "
                        "penalty of a few 1e-6 of either sign is run-to-run change from the delivered flips, not a "
                        "measured cost")


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
        out.append({"parallel": par, "workload": at[0].get("workload") or par, "ranks": n, "ber": ber, "vs_ref": round(tied[0]["vs_ref"], decimals),
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
    head = f"  {g.get('workload') or g['parallel']} x{g['ranks']:<5} BER {g['ber']:<7g} vs_ref {g['vs_ref']:.{TIE_DECIMALS}f}  {secs:<16}"
    if not g["tie"]:
        return f"{head} {name(g['settings'][0])}"
    return f"{head} tie of {len(g['settings'])}: " + ", ".join(name(s) for s in g["settings"])


def run(args: argparse.Namespace) -> int:
    doc = run_tradeoff(args, live=not args.json)

    def text() -> str:
        lines = [f"written to {doc['out']}/ (tradeoff.csv, tradeoff.json, pareto.png)",
                 f"time side: {doc['time_side']}" + (f", workload {doc['workload']}" if doc.get("workload") else ""),
                 PHY_US_MEANING, LOSS_PENALTY_MEANING,
                 f"fastest to the target loss (vs_ref = time to target / error-free KP4's; settings whose vs_ref "
                 f"is equal at {TIE_DECIMALS} decimals are a tie and all listed):"]
        lines += [_fastest_line(g) for g in doc["fastest"]]
        lines.append(f"loss side: {doc['loss_side']['text']}")
        if doc["loss_side"].get("scaling_hint"):
            lines.append(f"  hint: {doc['loss_side']['scaling_hint']}")
        lines += [f"note: {n}" for n in doc["notes"]]
        if doc["loss_side"]["kind"] == "predicted":
            lines.append("  only settings tolerated at the predicted interval's lower end count as fastest; "
                         "not judged tolerated (no time to target: the prediction is a threshold, not a curve):")
            seen = dict.fromkeys((r["parallel"], r["mode"], r["ber"], r["guard"], r["tolerated"]) for r in doc["rows"]
                                 if r["loss_side"] == "predicted" and r["tolerated"] != "tolerated")
            lines += [f"    {par} {mode} BER {ber:g} guard {g}: {t}" for par, mode, ber, g, t in seen] or ["    none"]
        if doc["not_measured"]:
            lines.append("no loss curve in the results for: " + ", ".join(
                f"{x['parallel']} {x['mode']} at BER {x['ber']:g}" for x in doc["not_measured"])
                + f" (the experiment ran fec={doc['results_fec']}; unequal needs an exponent_protection run)")
        return "\n".join(lines)

    emit(args, doc, text)
    return 0
