"""``phy802 advise``: your FEC histograms + your cluster (or its nccl-tests) + your workload -> keep FEC or not, link by link.

Joins ``fec tail`` (each port's fit), the time model of ``collective``/``tradeoff`` and, with
``--results``, the loss side measured by ``experiment`` (:mod:`protocol.advise`).  Several
snapshots (``--fec-hist t0 t1 t2 ...`` or a folder) also replay the policy over time with SPEC D7's
degradation monitor as the fallback trigger (:mod:`protocol.advise.replay`).
"""

from __future__ import annotations

import argparse
import math
import os

from phy802.cli._common import CliError, add_json, add_seed, emit, float_arg, int_arg, list_arg
from phy802.cli.collective import add_cluster_arguments, spec_from_args

__all__ = ["add_arguments", "answer", "run", "snapshot_paths"]

EPILOG = """\
examples:
  phy802 advise --fec-hist vectors/fec_hist/example_switch64_portstat_t1.out --since vectors/fec_hist/example_switch64_portstat_t0.out
  phy802 advise --fec-hist t0.out t1.out t2.out --nodes 128 --workload ddp,tp --plot replay.png
  phy802 advise --fec-hist now.json --nccl-tests tests/data/nccl/i152_a100_hdr_2n_allreduce.csv --json
"""


def _modes(text: str) -> tuple[str, ...]:
    from protocol.advise import ADVISE_MODES, REFERENCE_MODE

    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [m for m in out if m not in ADVISE_MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad)}: choose CODE/FEC from {', '.join(ADVISE_MODES)}")
    if REFERENCE_MODE not in out:
        raise argparse.ArgumentTypeError(f"{text!r} must include {REFERENCE_MODE} (the fallback every link can run)")
    return out


def _workloads(text: str) -> tuple[str, ...]:
    from protocol.cluster.workloads import WORKLOADS

    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [w for w in out if w not in WORKLOADS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(WORKLOADS)}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    from phy802.telemetry.fit import CODES, DEFAULT_GOF_LEVEL, DEFAULT_TARGET_FER, MODELS
    from phy802.telemetry.parsers import FORMATS
    from protocol.advise import ADVISE_MODES
    from protocol.cluster.steptime import MODEL_PRESETS

    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    g = p.add_argument_group("links (any format 'fec tail' reads)")
    g.add_argument("--fec-hist", nargs="+", required=True, metavar="FILE",
                   help="FEC histogram snapshot(s) of the fabric's ports (a whole switch at once); several, or a "
                        "folder of them (name order), are cumulative snapshots in time order: the advice fits the "
                        "latest interval (the links as they are now), and the policy set on the first interval is "
                        "replayed over every interval")
    g.add_argument("--since", default=None, metavar="OLD", help="an older snapshot: fit FILE - OLD (one --fec-hist; default none: FILE's counts since link-up)")
    g.add_argument("--format", dest="in_format", choices=("auto",) + tuple(FORMATS), default="auto",
                   help="input format (default: detected from the content)")
    g.add_argument("--code", choices=tuple(CODES), default="kp4",
                   help="the FEC code the ports run (default kp4); a port reporting another active FEC is refused")
    g.add_argument("--models", type=list_arg(str), default=MODELS, help=f"laws to fit (default {','.join(MODELS)})")
    g.add_argument("--bootstrap", type=int_arg(0, 10000), default=50,
                   help="dfe bootstrap replicates for its intervals (default 50; 0: dfe gets no interval and its "
                        "point value is used, which the verdict says; ge always has its likelihood-region "
                        "interval, binomial its profile)")
    g.add_argument("--gof-level", type=float_arg(0, 1, lo_open=True, hi_open=True), default=DEFAULT_GOF_LEVEL,
                   help=f"goodness-of-fit level below which a law is rejected (default {DEFAULT_GOF_LEVEL})")
    g.add_argument("--target-fer", type=float_arg(0, 1, lo_open=True, hi_open=True), default=DEFAULT_TARGET_FER,
                   help=f"codeword error ratio a link must stay under (default {DEFAULT_TARGET_FER:g})")
    g.add_argument("--workers", type=int_arg(1, 256), default=1, help="processes fitting ports (default 1)")
    g.add_argument("--modes", type=_modes, default=ADVISE_MODES,
                   help=f"candidate receive modes (default {','.join(ADVISE_MODES)})")
    w = p.add_argument_group("workload and loss side")
    w.add_argument("--workload", type=_workloads, default=("ddp", "tp"),
                   help="workloads, comma-separated (protocol/cluster/workloads.py; default ddp,tp)")
    w.add_argument("--model", choices=list(MODEL_PRESETS), default="gpt2-124m", help="model preset (default gpt2-124m)")
    w.add_argument("--tflops", type=float_arg(0, 1e7, lo_open=True), default=989.0,
                   help="peak accelerator TFLOP/s (default 989: H100 SXM dense BF16)")
    w.add_argument("--mfu", type=float_arg(0, 1, lo_open=True), default=0.4, help="model FLOPs utilisation (default 0.4)")
    w.add_argument("--results", default=None, metavar="DIR",
                   help="an 'phy802 experiment --out' folder: the measured loss penalty of bypass/unequal (default: "
                        "none, and the error-delivering modes are not considered)")
    w.add_argument("--min-gain", type=float_arg(0, 1, hi_open=True), default=1e-3,
                   help="step-time saving (fraction) below which the verdict keeps FEC (default 0.001)")
    w.add_argument("--max-loss-penalty", type=float_arg(0, 100), default=None,
                   help="validation-loss penalty tolerated from delivered errors (default 0.01; with --scaling the "
                        "size fit's epsilon is the bound, and another value is refused)")
    from phy802.cli.tradeoff import add_scaling_argument

    add_scaling_argument(w, "bypass/unequal, with --results (allowed only at or below the interval's lower end)")
    w.add_argument("--nccl-tests", default=None, metavar="FILE",
                   help="the cluster's own nccl-tests output (as 'collective --nccl-tests' reads it): its nodes set "
                        "the cluster, its measured/predicted ratios the time side's interval, its diagnosis the trust "
                        "(default none: the uncalibrated model, said in the output)")
    r = p.add_argument_group("replay over snapshots (SPEC D7 degradation monitor)")
    r.add_argument("--degrade-activate-ser", type=float_arg(0, 1, lo_open=True), default=None,
                   help="RS symbol error ratio over an interval that sets FEC_degraded_SER and reverts the link to "
                        "kp4/ieee (default: where RS(272) would miss --target-fer on independent errors)")
    r.add_argument("--degrade-deactivate-ser", type=float_arg(0, 1, lo_open=True), default=None,
                   help="SER below which the monitor clears and the link returns to its mode (default activate / 2)")
    r.add_argument("--plot", default=None, metavar="PNG", help="write the replay's links x time plot (three or more snapshots; default none)")
    add_cluster_arguments(p, code=False)
    add_seed(p)
    add_json(p)


def snapshot_paths(items: list[str]) -> list[str]:
    """The snapshot files of ``--fec-hist``: files as given, a folder's regular files in name order."""
    out: list[str] = []
    for it in items:
        if os.path.isdir(it):
            names = sorted(n for n in os.listdir(it) if not n.startswith(".") and os.path.isfile(os.path.join(it, n)))
            if not names:
                raise CliError(f"--fec-hist {it}: the folder holds no snapshot files")
            out += [os.path.join(it, n) for n in names]
        else:
            out.append(it)
    return out


def _time_side(args, spec_over: dict):
    from protocol.advise import TimeSide

    notes: tuple = ()
    untrusted = ""
    ratio = None
    source = f"--cluster {args.cluster}" + (f", --calibration {args.calibration}" if args.calibration else "")
    over = dict(spec_over)
    if args.nccl_tests:
        from protocol.cluster.ncclfile import compare, diagnose, read_nccl_tests

        run_ = read_nccl_tests(args.nccl_tests)
        if run_.nodes is not None and args.nodes is not None and run_.nodes != args.nodes:
            raise CliError(f"{args.nccl_tests}: field 'nodes': the run has {run_.nodes} nodes ({run_.ranks} ranks), "
                           f"the cluster --nodes {args.nodes}: an nccl-tests run of another cluster size")
        for k in ("nodes", "gpus_per_node", "gpu"):
            if getattr(run_, k) is not None and getattr(args, k) is None:
                over[k] = getattr(run_, k)
        c0 = spec_from_args(args, **over)
        if run_.ranks is not None and run_.ranks != c0.ranks:
            raise CliError(f"{args.nccl_tests}: field 'ranks': the run has {run_.ranks} ranks, the cluster {c0.ranks} "
                           f"(--nodes {c0.nodes} x --gpus-per-node {c0.gpus_per_node})")
        rows = compare(run_, c0)
        notes = tuple(diagnose(run_, rows, c0))
        rs = [r["ratio"] for r in rows if r["bytes"] >= 8192] or [r["ratio"] for r in rows]
        ratio = (min(rs), max(rs))
        bad = [n for n in notes if n.startswith(("UNDERPERFORMING", "BELOW EXPECTED"))]
        if bad:
            untrusted = f"nccl-tests {args.nccl_tests} flagged: {bad[0].split(':')[0]}"
        source = f"nccl-tests {args.nccl_tests} (measured/predicted {ratio[0]:.2f}..{ratio[1]:.2f}) on {source}"
    c = spec_from_args(args, **over)
    return TimeSide(c, model=args.model, tflops=args.tflops, mfu=args.mfu, workloads=args.workload,
                    ratio_range=ratio, notes=notes, untrusted=untrusted, source=source)


def _read(paths: list[str], args, code):
    from phy802.telemetry.parsers import difference, read_telemetry
    from protocol.advise import check_fec_config

    fmt = None if args.in_format == "auto" else args.in_format
    snaps = []
    for pth in paths:
        tel = read_telemetry(pth, fmt=fmt, t=code.t, n=code.n)
        if not tel.ports:
            raise CliError(f"{pth}: no ports in the file (an empty switch)")
        check_fec_config(tel, args.code)
        snaps.append(tel)
    if args.since:
        if len(paths) > 1:
            raise CliError("--since goes with one --fec-hist snapshot (several are differenced in order)")
        old = read_telemetry(args.since, fmt=fmt, t=code.t, n=code.n)
        check_fec_config(old, args.code)
        snaps = [old] + snaps
    intervals = [difference(b, a) for a, b in zip(snaps, snaps[1:])]  # refuses counters that went down
    now = snaps[0] if len(snaps) == 1 else intervals[-1]  # the links as they are now: the latest interval
    return snaps, intervals, now


def _fmt_iv(d) -> str:
    from phy802.telemetry.fit import fmt_interval

    if not d:
        return "-"
    return fmt_interval(d["value"], d.get("lo"), d.get("hi"))


def _loss_side(args: argparse.Namespace, name):
    """The loss side of ``--results`` (measured), or with ``--scaling`` the size fit's prediction at
    ``--model``'s parameter count when it is not the results' model's."""
    from protocol.advise import loss_side_from_results
    from protocol.cluster.sizefit import read_size_fit
    from protocol.cluster.steptime import model_preset

    fit = read_size_fit(args.scaling) if args.scaling else None
    return loss_side_from_results(args.results, name=name(args.results), size_fit=fit,
                                  model=(args.model, int(model_preset(args.model)["params"])))


def _check_args(args: argparse.Namespace) -> None:
    """Refuse what advise cannot answer before any file is read."""
    from phy802.telemetry.fit import MODELS

    if args.scaling and not args.results:
        raise CliError(f"--scaling {args.scaling} needs --results DIR: the size fit replaces the loss side of an "
                       "experiment, checked against it")
    dashes = [f for f, used in (("--fec-hist", "-" in args.fec_hist), ("--since", args.since == "-"),
                                ("--nccl-tests", args.nccl_tests == "-")) if used]
    if len(dashes) > 1:  # standard input can be read once
        raise CliError(f"{' and '.join(dashes)} are both '-': standard input can feed only one of them; give a file")
    if args.cluster == "flat-ethernet":
        raise CliError("--cluster flat-ethernet: advise needs the cluster model (workloads); choose another --cluster")
    for m in args.models:
        if m not in MODELS:
            raise CliError(f"--models: {m!r}: choose from {', '.join(MODELS)}")
    if args.plot:
        from phy802.runtime.output import check_output_file

        check_output_file(args.plot)


def _check_fit_budget(args: argparse.Namespace, whole, intervals: list) -> None:
    """Refuse a fabric whose fits would take over 600 s of CPU per worker, with the estimate."""
    from phy802.telemetry.fit import estimate_cpu_seconds

    with_data = [p for p in whole.ports if p.hist.bins and p.hist.total > 0]
    if not with_data:
        raise CliError(f"{whole.source}: no codewords counted on any of the {len(whole.ports)} ports")
    est = sum(estimate_cpu_seconds(p.hist, tuple(args.models), args.bootstrap) for p in whole.ports)
    est *= 2 if len(intervals) > 1 else 1  # the replay fits the first interval too
    if est / args.workers > 600:
        raise CliError(f"{whole.source}: estimated {est:.0f} s of CPU to fit {len(whole.ports)} ports (above 600 s): "
                       "lower --bootstrap or use --workers")


def _replay(args: argparse.Namespace, intervals: list, code, fit_kw: dict, cfg, ts, loss) -> dict | None:
    """The policy as it would have been set at the start (the first interval's fits), played forward
    over the snapshots' intervals; ``None`` with one interval and no ``--plot``."""
    from phy802.telemetry.ports import fit_ports
    from protocol.advise import advise_links

    if not (len(intervals) > 1 or args.plot):
        return None
    from protocol.advise.replay import MonitorConfig, replay_policy

    if len(intervals) < 2 and args.plot:
        raise CliError("--plot needs at least three snapshots (two intervals) to replay")
    mon = MonitorConfig.default(cfg.target_fer, args.degrade_activate_ser, args.degrade_deactivate_ser)
    first = intervals[0]
    if not any(p.hist.bins and p.hist.total > 0 for p in first.ports):
        raise CliError(f"{first.source}: no codewords counted in the first interval on any port")
    f0 = fit_ports(first, code, **fit_kw)
    replay = replay_policy(intervals, advise_links(first, f0, cfg, loss), mon, cfg, ts, f0)
    if args.plot:
        from protocol.advise.replay import plot_replay

        plot_replay(replay, args.plot)
    return replay


def answer(args: argparse.Namespace, shown: dict[str, str] | None = None) -> tuple[dict, str]:
    """``phy802 advise``'s whole answer for parsed ``args``: the JSON document (the verdict under
    ``verdict``) and the text the command prints.  ``phy802 demo`` calls this on the files it wrote, so
    its report opens with the very sentence the command gives.  ``shown`` maps an input path as read
    to the name the answer gives it (the demo builds its folder beside ``--out``)."""
    from phy802.telemetry.fit import CODES
    from phy802.telemetry.ports import fit_ports
    from protocol.advise import AdviseConfig, advise_links, evaluate, verdict

    _check_args(args)
    code = CODES[args.code]
    paths = snapshot_paths(args.fec_hist)
    _snaps, intervals, whole = _read(paths, args, code)
    _check_fit_budget(args, whole, intervals)

    def name(path: str) -> str:
        return (shown or {}).get(path, path)

    loss = _loss_side(args, name) if args.results else None
    ts = _time_side(args, {"code": args.code})
    max_pen = 0.01 if args.max_loss_penalty is None else args.max_loss_penalty
    if loss is not None and loss.predicted:
        eps = next(iter(loss.predicted.values())).epsilon
        if args.max_loss_penalty is not None and args.max_loss_penalty != eps:
            raise CliError(f"--max-loss-penalty {args.max_loss_penalty:g}: the size fit {args.scaling} is a threshold "
                           f"for a penalty under {eps:g} nats (its --epsilon); drop --max-loss-penalty or refit with "
                           f"--epsilon {args.max_loss_penalty:g}")
        max_pen = eps
    cfg = AdviseConfig(target_fer=args.target_fer, modes=args.modes, max_loss_penalty=max_pen,
                       rate=ts.cluster.rate, min_gain=args.min_gain)  # the links' rate: the cluster's
    fit_kw = dict(workers=args.workers, models=tuple(args.models), target_fer=args.target_fer,
                  bootstrap=args.bootstrap, seed=args.seed, gof_level=args.gof_level)
    fits = fit_ports(whole, code, **fit_kw)
    links = advise_links(whole, fits, cfg, loss)
    rows = evaluate(links, fits, cfg, ts, loss)
    v = verdict(links, rows, cfg, ts, loss)
    replay = _replay(args, intervals, code, fit_kw, cfg, ts, loss)
    missing = []
    if loss is None:
        missing.append("loss side (--results): bypass/unequal not considered; time to target loss not computed")
    elif loss.base_steps is None or not math.isfinite(loss.base_steps):
        missing.append(f"{name(args.results)}: the error-free curve never reaches the target loss: no time to target")
    if not args.nccl_tests:
        missing.append("nccl-tests (--nccl-tests): the time side is the uncalibrated model")
    doc = {"verdict": {**v.as_dict(), "ports": [{"port": x.port, "mode": x.mode} for x in links]},
           "ports": [x.as_dict() for x in links],
           "repair": [x.port for x in links if x.repair],
           "workloads": rows,
           "inputs": {"fec_hist": [name(p_) for p_ in paths], "since": args.since, "code": args.code,
                      "time_side": ts.source,
                      "cluster": ts.cluster.to_dict(), "nccl_tests_notes": list(ts.notes),
                      "loss_side": loss.source if loss else None,
                      "loss_side_kind": None if loss is None else "predicted" if loss.predicted else "measured",
                      "loss_thresholds": {k: p.as_dict() for k, p in loss.predicted.items()} if loss else {},
                      "target_fer": cfg.target_fer,
                      "max_loss_penalty": cfg.max_loss_penalty, "missing": missing},
           "replay": replay}
    return doc, _answer_text(doc, v, links, ts, args.model, name(whole.source))


def _answer_text(doc: dict, v, links: list, ts, model: str, source: str) -> str:
    """The command's text: the verdict first, then the per-port and per-workload tables, the replay
    and what is missing (the same numbers as ``doc``)."""
    cfg_fer = doc["inputs"]["target_fer"]
    out = [f"VERDICT: {v.sentence}"]
    out += [f"  caveat: {c}" for c in v.caveats]
    out += [f"  depends most on: {d}" for d in v.depends_on]
    out.append("")
    out.append(f"per port ({len(links)}; fits of {source}; target FER {cfg_fer:.0e}; all model "
               "values from the fitted law except codewords, which are counted):")
    out.append(f"{'port':<14} {'status':<12} {'law':<9} {'pre-FEC BER [95%]':<34} {'FER [95%]':<30} "
               f"{'margin x':<10} {'mode':<12} why")
    for x in links:
        mg = "-" if not x.margin or x.margin.get("value") is None else f"{x.margin['value']:.3g}"
        out.append(f"{x.port:<14} {x.status:<12} {x.law or '-':<9} {_fmt_iv(x.pre_fec_ber):<34} {_fmt_iv(x.fer):<30} "
                   f"{mg:<10} {x.mode:<12} {x.why}")
    rep = doc["repair"]
    out.append("repair (worst first): " + (", ".join(rep) if rep else "none"))
    out.append("")
    out.append(f"per workload ({ts.cluster.ranks} GPUs, {ts.cluster.describe().split(',')[0]}; {ts.source}; "
               f"{model}):")
    out.append(f"{'workload':<9} {'scenario':<15} {'modes':<44} {'step ms':>10} {'p99 ms':>10} {'p99.9 ms':>10} "
               f"{'vs FEC':>8} {'P(fail)':>9} {'loss pen':>9}  sources")
    for r in doc["workloads"]:
        modes = ", ".join(f"{m} x{k}" for m, k in r["modes"].items())
        iv = (f" (nccl-tests interval [{r['step_interval_ms'][0]:.4g}, {r['step_interval_ms'][1]:.4g}])"
              if "step_interval_ms" in r else "")
        lp = "n/a" if r["loss_penalty"] != r["loss_penalty"] else f"{r['loss_penalty']:+.3g}"
        tt = ""
        if "time_to_target_s" in r:
            ti = r.get("time_to_target_interval_s")
            tt = (f"; time to target loss {r['time_to_target_s']:.4g} s"
                  + (f" [{ti[0]:.4g}, {ti[1]:.4g}]" if ti else "") + f" ({r['source']['time_to_target']})")
        out.append(f"{r['workload']:<9} {r['scenario']:<15} {modes:<44} {r['step_ms']:>10.5g} "
                   f"{r['step_p99_ms']:>10.5g} {r['step_p999_ms']:>10.5g} {r['vs_fec_everywhere']:>8.5f} "
                   f"{r['failure_probability']:>9.2g} {lp:>9}  step, P(fail): model{iv}; loss: "
                   f"{r['source']['loss_penalty']}{tt}")
    if doc["inputs"]["loss_side"]:
        out.append(f"loss side ({doc['inputs']['loss_side_kind']}): {doc['inputs']['loss_side']}")
    if ts.notes:
        out.append("nccl-tests: " + " | ".join(ts.notes))
    if doc["replay"] is not None:
        from protocol.advise.replay import replay_text

        out.append("")
        out.append(replay_text(doc["replay"]))
    if doc["inputs"]["missing"]:
        out.append("")
        out += [f"missing: {m}" for m in doc["inputs"]["missing"]]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    doc, text = answer(args)
    emit(args, doc, text)
    return 0
