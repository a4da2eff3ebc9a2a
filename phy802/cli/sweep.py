"""``phy802 sweep``: BER/FER sweep over SNR or pre-FEC BER and FEC modes.

Prints one line per finished point on stderr (AFF3CT-style table, with a tqdm bar), writes
``sweep.csv`` and ``sweep.json`` (raw counts, mergeable) into ``--out`` and, with ``--plot``,
``ber_fer.png`` and ``latency.png`` (the latter needs :mod:`protocol.latency`; without it the plot
is skipped with a note).  ``--scheduler ADDRESS`` runs the points on a Dask cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from phy802.cli._common import CliError, add_force, add_json, add_seed, count_arg, emit, float_arg, int_arg, list_arg, probability
from phy802.runtime.progress import progress
from phy802.runtime.resources import check_budget
from phy802.cli._common import scheduler_address
from phy802.cli._hist import add_hist_arguments, hist_format, histogram_from_counts, print_histograms
from phy802.cli._vocab import add_code_fec
from phy802.cli import _inner_cli

__all__ = ["add_arguments", "run", "latency_function"]

EXAMPLE = """example:
  phy802 sweep --ber 1e-4,2e-4,3e-4 --code kp4 --fec ieee,bypass --target-errors 100 \\
      --max-codewords 1e6 --max-seconds 30 --seed 1 --out sweep_out/ --plot
  phy802 sweep --snr-db 15,15.5,16 --code kp4,kr4,rs272 --fec ieee --scheduler tcp://10.0.0.5:8786 --out dask_out/
  phy802 sweep --ber 1.5e-3 --code kp4 --fec ieee --shard-pairs 50000 --max-codewords 1e8 --workers 2 --out big/

Rates: pre-FEC BER (line bits, after the RX precoder), SER (PAM4 symbols), FER (codewords whose
delivered message is wrong), post-FEC BER (message bits at the decoder output); each with a 95%
Clopper-Pearson interval (post-FEC BER: cluster-aware, see phy802.link.LinkCounters.rates).
Merge two runs with:  phy802 sweep --merge a/sweep.json b/sweep.json --out merged/
"""



# the files a sweep output set may hold (an --out folder holding anything else is refused)
OUT_FILES = ("sweep.csv", "sweep.json", "ber_fer.png", "latency.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EXAMPLE
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ber", type=list_arg(probability(hi=0.375), max_len=MAX_POINTS), metavar="BER[,BER...]",
                   help="channel points as pre-FEC BER of PAM4 AWGN, each in (0, 0.375) (0.375 = PAM4 Gray at zero SNR), comma list (no default)")
    g.add_argument("--snr-db", type=list_arg(float_arg(-20.0, 80.0), max_len=MAX_POINTS), metavar="DB[,DB...]",
                   help="channel points as SNR in dB (Es/sigma^2), comma list (no default)")
    g.add_argument("--merge", nargs="+", metavar="JSON", help="merge sweep.json files (or their folders) of earlier runs of the same configuration with "
                        "distinct seeds, instead of simulating (default: simulate)")
    add_code_fec(p, multi=True, code_default=("kp4",), fec_default=("ieee", "bypass"))
    p.add_argument("--rate", default="400G", choices=("400G", "200G", "800G", "1.6T"),
                   help="400G (default) or 200G; 800G / 1.6T: Clause 177 inner code + KP4, hard and Chase-2 side by "
                        "side (phy802.link.concat)")
    _inner_cli.add_sweep_args(p)
    p.add_argument("--lanes", type=int_arg(1, 64), default=None, help="physical lanes (default 8 at 400G, 4 at 200G)")
    p.add_argument("--precoding", action="store_true", help="1/(1+D) mod 4 precoder on every lane")
    p.add_argument("--burst-pb", type=probability(zero_ok=True), default=None, metavar="PB",
                   help="1-tap DFE burst model with propagation probability PB in [0, 1) instead of AWGN "
                        "(same SER as the point; default: AWGN)")
    p.add_argument("--sim", choices=("fast", "link"), default="fast",
                   help="fast: codeword-level error-pattern simulator (default); link: bit-exact composed link")
    p.add_argument("--target-errors", type=int_arg(0, 10**9), default=100, help="stop a point at this many codeword errors (default 100; 0 = never)")
    p.add_argument("--max-codewords", type=count_arg(2, 10**15), default=10**6, help="stop a point after this many codewords (default 1e6)")
    p.add_argument("--max-seconds", type=float_arg(0.0, 1e7), default=30.0, help="stop a point after this many seconds (default 30; 0 = never)")
    p.add_argument("--batch", type=int_arg(1, 1 << 24), default=None, help="largest batch in codeword pairs (default: ~20000 line errors per lane per batch for fast, 256 for link)")
    p.add_argument("--workers", type=int_arg(1, 4096), default=None, help="local worker processes (default: all cores; 1 = in this process)")
    p.add_argument("--shard-pairs", type=int_arg(1, 1 << 30), default=None, metavar="PAIRS",
                   help="split each point into shards of PAIRS codeword pairs that run in parallel (own seeds, "
                        "global stop rule on the shards in order: same result for any --workers); default: "
                        "one task per point")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None, type=scheduler_address,
                   help="Dask scheduler address (e.g. tcp://host:8786): run the points on that cluster "
                        "(default: local processes)")
    p.add_argument("--scheduler-timeout", type=float_arg(0.0, 3600.0, lo_open=True), default=10.0, metavar="S",
                   help="seconds to wait for the Dask scheduler (default 10)")
    add_seed(p)
    p.add_argument("--out", type=Path, default=None, help="output folder for sweep.csv / sweep.json / plots, written as a whole; an existing folder "
                        "must be empty or an earlier sweep's (default: none, print only)")
    p.add_argument("--plot", action="store_true", help="write ber_fer.png and latency.png into --out")
    p.add_argument("--no-progress", action="store_true", help="no live table / progress bar on stderr")
    add_force(p, "sweeps estimated to run over a day")
    add_json(p)
    add_hist_arguments(p)


MAX_POINTS = 1000


def _check_budget(args) -> None:
    """Refuse sweeps estimated to run over a day: each point stops at --max-seconds or at
    --max-codewords (fast simulator ~5 M codewords/s, bit-exact link ~0.1 M/s on one core)."""
    if args.scheduler_timeout != 10.0 and not args.scheduler:
        raise CliError("--scheduler-timeout only makes sense with --scheduler")
    n_points = len(args.ber or args.snr_db) * max(1, len(args.code) * len(args.fec))
    per_point = args.max_codewords / (5e6 if args.sim == "fast" else 1e5)
    if args.max_seconds:
        per_point = min(per_point, args.max_seconds)
    workers = 1 if args.scheduler else (args.workers or os.cpu_count() or 1)
    check_budget(f"sweep of {n_points} points", seconds=n_points * per_point / workers, max_seconds=86400.0,
                 force=args.force, hint="lower --max-codewords / --max-seconds or use fewer points")


def latency_function(rate: str):
    """``mode -> added latency (ns)`` from :mod:`protocol.latency`, or ``None`` when absent."""
    try:
        from protocol.latency import added_latency
    except ImportError:
        return None

    from phy802.sweep import split_label

    def f(mode: str) -> float:
        code, fec = split_label(mode)
        return float(added_latency(fec, rate, code=code).total_ns)

    return f


def _executor(args):
    if args.scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise ValueError("--scheduler needs the 'distributed' package (pip install phy802[dask])") from None
        try:
            client = Client(args.scheduler, timeout=f"{args.scheduler_timeout}s")
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"--scheduler {args.scheduler}: cannot connect ({exc})") from None
        return client.get_executor(), client
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers <= 0:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return (None, None) if workers == 1 else ("process", None)


def _interrupted(args, res) -> None:
    """Ctrl-C / SIGTERM during the run: exit 130/143 with one line.  The finished
    points are written only into a new (absent or empty) ``--out``; an earlier result there is left
    exactly as it was."""
    from phy802.runtime.interrupts import Interrupted, interrupt_requested
    import signal

    sig = interrupt_requested() or signal.SIGINT
    what = "interrupted" if sig == signal.SIGINT else f"terminated by signal {sig}"
    n = len(res.points)
    if args.out is not None and n and (not os.path.exists(args.out) or (os.path.isdir(args.out)
                                                                          and not os.listdir(args.out))):
        from phy802.runtime.output import output_set

        with output_set(args.out, "sweep") as tmp:
            res.write_csv(tmp / "sweep.csv")
            res.write_json(tmp / "sweep.json")
        raise Interrupted(f"{what}; {n} finished point(s) written to {args.out} (marked interrupted)")
    kept = f"; {args.out} left as it was" if args.out is not None else ""
    raise Interrupted(f"{what}; {n} finished point(s) not written{kept}")


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def run(args: argparse.Namespace) -> int:
    from phy802.sweep import SweepResult

    if _inner_cli.check_inner(args):
        return _inner_cli.run_sweep(args)
    hfmt = hist_format(args)
    show = not args.no_progress
    if args.plot and args.out is None:
        raise CliError("--plot needs --out (the folder the plots go to)")
    if args.out is not None:  # refuse a foreign folder (or one holding an input) before any work
        from phy802.runtime.output import check_output_dir

        check_output_dir(args.out, "sweep")
    res = SweepResult.merge_files(args.merge) if args.merge else _simulate(args, show)
    for n in _write_out(args, res):
        print(f"phy802 sweep: {n}", file=sys.stderr)

    hists = [(p, histogram_from_counts(p.counters.hist, (p.counters.n - p.counters.k) // 2, args.bins,
                                       f"phy802 sweep {p.mode} {p.axis}={p.x:g}")) for p in res.points]
    if hfmt:  # one reply / device per point, named by its mode and x
        print_histograms(hfmt, [(f"{p.mode}:{p.axis}={p.x:g}", h, {"mode": p.mode, p.axis: p.x}) for p, h in hists],
                         single=False)
        return 0

    # on a terminal the live table (stderr) is already on screen: printing it again on stdout showed
    # it twice; a stdout that is a file or a pipe still gets the whole table
    on_screen = show and not args.merge and _isatty(sys.stderr) and _isatty(sys.stdout)
    obj = res.to_json_obj()
    obj["fec_histograms"] = [{"mode": p.mode, p.axis: p.x, **h.as_dict()} for p, h in hists]
    emit(args, obj, lambda: _sweep_text(args, res, hists, on_screen))
    return 0


def _simulate(args: argparse.Namespace, show: bool):
    """Run the sweep the options describe (refused up front when too long), its table live on stderr
    when ``show``; an interrupted sweep ends the command (:func:`_interrupted`)."""
    from phy802.sweep import SweepConfig, format_header, format_row, run_sweep

    if not args.ber and not args.snr_db:
        raise ValueError("give channel points with --ber or --snr-db (or --merge files)")
    if args.max_codewords < 2:
        raise ValueError(f"--max-codewords must be >= 2, got {args.max_codewords:g}")
    _check_budget(args)
    cfg = SweepConfig(
        points=tuple(args.ber or args.snr_db), axis="ber" if args.ber else "snr",
        code=tuple(args.code), fec=tuple(args.fec),
        rate=args.rate, n_lanes=args.lanes, precoding=args.precoding, burst_pb=args.burst_pb, simulator=args.sim,
        target_errors=args.target_errors or None, max_codewords=int(args.max_codewords),
        max_seconds=args.max_seconds or None, batch_pairs=args.batch, seed=args.seed,
        shard_pairs=args.shard_pairs,
    )
    ex, client = _executor(args)
    bar = progress(total=len(cfg.modes) * len(cfg.points), desc="points", enable=show)
    if show:
        bar.write(format_header(), file=sys.stderr)

    def on_point(p):
        if show:
            bar.write(format_row(p), file=sys.stderr)
            bar.update(1)

    def on_shard(task, prefix, n):
        if show:
            bar.set_postfix_str(f"{task.mode} {task.x:g}: {prefix}/{n} shards", refresh=True)

    try:
        res = run_sweep(cfg, executor=ex, workers=args.workers, callback=on_point, on_shard=on_shard)
    finally:
        bar.close()
        if client is not None:
            client.close()
    if res.interrupted:
        _interrupted(args, res)
    return res


def _write_out(args: argparse.Namespace, res) -> list[str]:
    """Write the output set into ``--out`` (CSV, JSON, with ``--plot`` the plots); returns notes for stderr."""
    from phy802.plots import plot_ber_fer, plot_latency

    notes = []
    if args.out is not None:
        from phy802.runtime.output import output_set

        # the whole set is built in a temporary sibling folder and swapped in: a killed run never
        # leaves a folder mixing two runs, and a folder holding other files is never touched
        with output_set(args.out, "sweep") as tmp:
            res.write_csv(tmp / "sweep.csv")
            res.write_json(tmp / "sweep.json")
            if args.plot:
                plot_ber_fer(res, tmp / "ber_fer.png")
                lat = latency_function(res.config.rate)
                if lat is None:
                    notes.append("latency plot skipped: protocol.latency is not available")
                else:
                    plot_latency(res, lat, tmp / "latency.png")
    elif args.plot:
        notes.append("--plot needs --out")
    return notes


def _sweep_text(args: argparse.Namespace, res, hists: list, on_screen: bool) -> str:
    """The table printed on stdout (unless already on screen), then each point's codeword histogram."""
    from phy802.sweep import format_header, format_row

    lines = [] if on_screen else [format_header()] + [format_row(p) for p in res.points]
    lines.append("# FEC codeword histograms (codewords by pre-FEC symbol errors; last: > t):")
    for p, h in hists:
        cells = " ".join(f"{b.label()}:{b.count}" for b in h.bins) + f" >{h.t}:{h.uncorrectable}"
        lines.append(f"#   {p.mode:<8} {p.axis}={p.x:<10g} {cells}")
    if args.out is not None:
        lines.append(f"# wrote {args.out / 'sweep.csv'} and {args.out / 'sweep.json'}")
    return "\n".join(lines)
