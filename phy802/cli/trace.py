"""``phy802 trace``: generate and inspect payload error traces.

Examples::

    phy802 trace generate --rate 400G --fec bypass --ber 1e-5 --bits 1e10 --seed 1 --out t.trace
    phy802 trace generate --code rs272 --fec ieee --ber 1e-4 --bits 1e9 --out ll.trace
    phy802 trace generate --ber 1e-4 --bits 1e12 --workers 2 --out big.trace      # shards on 2 processes
    phy802 trace generate --rate 800G --inner c177 --snr-db 15 --bits 1e8 --out dj.trace   # 802.3dj inner code + KP4
    phy802 trace info t.trace --check --json
"""

from __future__ import annotations

import argparse

from phy802.cli._common import CliError, add_force, add_json, add_seed, count_arg, emit, float_arg, int_arg, probability, scheduler_address
from phy802.runtime.resources import calibrated_seconds, check_budget, check_disk
from phy802.cli._inner_cli import INNER_RATES, add_trace_args as add_inner_trace_args
from phy802.cli._hist import add_hist_arguments, hist_format, histogram_from_counts, print_histograms
from phy802.cli._vocab import add_code_fec

from protocol.framing import RATES

__all__ = ["add_arguments", "run"]


def _ci_text(d: dict, lo: float, hi: float) -> str:
    """``95% CI lo..hi over <unit>``: a trace's interval is over independent bits or, where errors
    come in bursts, over the unit its metadata names (``ci_unit``)."""
    unit = d.get("ci_unit")
    over = "bits" if not unit else unit.split(" (")[0] + "s"
    return f"95% CI {lo:.3g}..{hi:.3g} over {over}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    g = sub.add_parser("generate", help="simulate a link and write its payload error trace")
    g.add_argument("--rate", default="400G", choices=[*RATES, *INNER_RATES],
                   help="line rate (default 400G); 800G / 1.6T: the 802.3dj inner code concatenated with KP4 "
                        "(--inner, --snr-db; docs/800g.md)")
    add_code_fec(g)  # --code kp4|rs272|none (kr4 has no Cl.119 framing here), --fec MODE
    g.add_argument("--ber", type=probability(hi=0.5), default=None,
                   help="pre-FEC line BER, independent bit errors (bursts with --burst-pb), in (0, 0.5) (0.5 = a coin flip per bit; "
                        "default 1e-5); at 800G/1.6T the PAM4 AWGN line BER (this or --snr-db)")
    g.add_argument("--snr-db", type=float_arg(-20.0, 80.0), default=None,
                   help="800G/1.6T: PAM4 AWGN SNR in dB (Es/sigma^2; this or --ber; default: none)")
    add_inner_trace_args(g)
    g.add_argument("--burst-pb", type=probability(zero_ok=True), default=None,
                   help="bursts along each PCS lane with B->B probability PB (DFE error propagation); "
                        "default: independent errors")
    g.add_argument("--lane-weights", default=None,
                   help="per-PCS-lane BER weights: 'pam4_gray' (Gray PAM4 MSB/LSB asymmetry) or a comma list "
                        "(normalised to mean 1); default: all lanes equal")
    g.add_argument("--from-fit", metavar="FIT.json", default=None,
                   help="take the channel (pre-FEC BER, burst pb) from a 'phy802 fec tail --out' fit "
                        "(its best model unless --fit-model); overrides --ber/--burst-pb (default: none)")
    g.add_argument("--fit-model", choices=("binomial", "dfe"), default=None,
                   help="which fitted model --from-fit uses (default: the fit's best by AIC; a fit whose best "
                        "is ge, which the generator cannot draw, or where no law passes the goodness-of-fit "
                        "test is refused unless this names one)")
    g.add_argument("--bits", type=count_arg(1, 10**31), default=10**9,
                   help="line bits to simulate, e.g. 1e10 (default 1e9)")
    g.add_argument("--generator", default="fast", choices=["fast", "bitexact"],
                   help="fast event sampler (default) or the slow bit-exact reference link")
    g.add_argument("--chunk-pairs", type=int_arg(1, 1 << 30), default=None,
                   help="codeword pairs per stored chunk (default: auto)")
    g.add_argument("--shard-pairs", type=int_arg(1, 1 << 40), default=None,
                   help="codeword pairs per shard, each with its own seed (default: 16 chunks); the trace depends on "
                        "the seed, --chunk-pairs and --shard-pairs, never on --workers/--scheduler")
    g.add_argument("--workers", type=int_arg(1, 4096), default=1,
                   help="local worker processes generating shards in parallel (default 1: this process, with "
                        "encoding and writing in a background thread)")
    g.add_argument("--scheduler", metavar="ADDRESS", default=None, type=scheduler_address,
                   help="Dask scheduler address (e.g. tcp://host:8786): generate the shards on that cluster "
                        "(default: none, local)")
    g.add_argument("--out", required=True, help="output trace file (format v2, named *.trace; *.npz is refused: it is not a zip)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_force(g, "traces estimated to exceed the free disk or memory or to take over an hour")
    add_seed(g)
    add_json(g)
    i = sub.add_parser("info", help="print a trace's metadata and measured error rates")
    i.add_argument("path", help="trace file")
    i.add_argument("--check", action="store_true",
                   help="read and validate every chunk (CRC and content); exit 1 if any is unreadable")
    add_json(i)
    add_hist_arguments(i)


def _weights(text: str | None):
    if text is None or text == "pam4_gray":
        return text
    from phy802.cli._common import float_arg, list_arg
    import argparse as _ap

    try:
        w = list_arg(float_arg(0.0, 1e6), max_len=64, unique=False)(text)
    except _ap.ArgumentTypeError as exc:
        raise CliError(f"--lane-weights must be 'pam4_gray' or comma-separated finite numbers >= 0 ({exc})") from None
    if not any(w):
        raise CliError(f"--lane-weights {text!r}: at least one lane needs a weight > 0")
    return w


def _check_size(args) -> None:
    """Refuse traces that would not fit on the disk or in memory, or take over an hour:
    at most ~4 bytes per stored flip (format v2, ~1.5 with descrambler triples); the flip rate is
    the pre-FEC BER for the modes that pass errors through and (x100 margin) the closed-form
    post-FEC BER for the correcting modes on independent errors.  In memory: one chunk, or with
    workers one shard per worker plus those waiting to be written (:func:`protocol.trace.shard_layout`)."""
    from phy802 import theory
    from protocol.framing import PAIR_LINE_BITS
    from protocol.trace import shard_layout

    fec = str(getattr(args, "fec", "bypass"))
    code = str(getattr(args, "code", "kp4"))
    correcting = (fec in ("ieee", "correct_no_indication", "llr") and code in ("kp4", "rs272")
                  and args.burst_pb is None)
    rate = args.ber
    if correcting:
        rate = min(args.ber, 100 * float(theory.post_fec_ber(args.ber, theory.rs_code(code))) + 1e-18)
    nbytes = args.bits * rate * 4.0 + (1 << 20)  # format v2: ~1.5 bytes per flip, <= ~4 without triples
    check_disk(args.out, nbytes, f"trace generate --bits {args.bits:.3g}", force=args.force,
               hint="use fewer --bits")
    step, shard = shard_layout(args.ber, args.generator, args.chunk_pairs, args.shard_pairs)  # sizes checked by argparse
    sharded = args.workers > 1 or args.scheduler is not None
    held_pairs = shard * (args.workers + 2) if sharded else 2 * step
    held = min(held_pairs * PAIR_LINE_BITS, args.bits) * rate * 4.0 * 2  # records + the generator's arrays
    check_budget(f"trace generate --bits {args.bits:.3g}", memory_bytes=held, force=args.force,
                 hint="use a smaller --shard-pairs / --chunk-pairs" if sharded else "use a smaller --chunk-pairs")
    if args.force:
        return
    # time: from a short measured run of the same generator on this machine (the
    # constant 1e9 bits/s of the bit-exact generator was 20x optimistic); the bound below is only
    # used to skip the measurement where even it says "too long" or "clearly quick"
    bound = 2e9 if args.generator == "bitexact" else (2e11 if code == "rs272" else 8e11)  # line bits/s
    n_workers = 1 if args.scheduler is not None else max(1, int(args.workers))
    secs = calibrated_seconds(args.bits, lambda n: _calibration_run(args, n),
                              int(2e6 if args.generator == "bitexact" else 2e8),
                              assumed_rate=bound * n_workers)
    check_budget(f"trace generate --bits {args.bits:.3g}", seconds=secs, force=args.force,
                 hint=f"use fewer --bits (measured here: ~{args.bits / max(secs, 1e-9):.3g} line bits/s)")


def _calibration_run(args, line_bits: int) -> None:
    """``line_bits`` of the requested trace, generated into a scratch folder (timing only);
    the estimate divides by the workers, as the shards run in parallel."""
    from phy802.runtime.tempfiles import scratch_dir
    from protocol.trace import generate_trace

    n_workers = 1 if args.scheduler is not None else max(1, int(args.workers))
    with scratch_dir("phy802-calibrate-") as d:
        generate_trace(d / "c.trace", rate=args.rate, fec=args.fec, code=args.code, ber=args.ber,
                       burst_pb=args.burst_pb, line_bits=max(1, line_bits // n_workers), seed=args.seed,
                       generator=args.generator, progress=False)


def _code_t(meta: dict, path) -> int | None:
    """The correction power t of the trace's own code (an RS(272) trace, t = 7,
    was counted with KP4's t = 15); ``None`` for a trace without FEC (code none)."""
    import re

    from phy802.fec.rs import CODES

    code = meta.get("code", "kp4")  # traces from before the code field are KP4
    m = re.search(r"t=(\d+)", code)
    if m:
        return int(m.group(1))
    if code in CODES:
        return int(CODES[code].t)
    if code == "none":
        return None
    raise ValueError(f"{path}: trace meta field 'code' is {code!r:.40}, not a code phy802 knows "
                     f"({', '.join(CODES)}, none)")


def _summary(meta: dict) -> str:
    pre, post, cw = meta.get("pre_fec", {}), meta.get("post_fec", {}), meta.get("codewords", {})
    lines = [
        f"trace      {meta.get('format')} v{meta.get('version')} (phy802 {meta.get('project_version')})",
        f"link       {meta.get('rate')} {meta.get('n_lanes')} {'physical' if 'inner' in meta else 'PCS'} lanes, "
        f"code={meta.get('code', 'kp4')}, "
        f"fec={meta.get('fec')}, "
        f"channel={meta.get('channel', {}).get('model')} ber={meta.get('channel', {}).get('ber')}"
        + (f" pb={meta['channel']['pb']}" if "pb" in meta.get("channel", {}) else ""),
        f"generator  {meta.get('generator')} seed={meta.get('seed')}",
        f"simulated  {meta.get('line_bits', 0):.4g} line bits = {meta.get('pairs')} codeword pairs; "
        f"{meta.get('stream_bits', 0):.4g} payload-stream bits in {meta.get('n_chunks')} chunks",
    ]
    if pre:
        lo, hi = pre.get("ber_ci95", [float("nan")] * 2)
        lines.append(f"pre-FEC    {pre['bit_errors']} bit errors, BER {pre['ber']:.4g} ({_ci_text(pre, lo, hi)})")
    if post:
        lo, hi = post.get("ber_ci95", [float("nan")] * 2)
        dec = post.get("decoder_output")
        if dec:
            dlo, dhi = dec.get("ber_ci95", [float("nan")] * 2)
            lines.append(f"post-FEC   BER at the decoder output {dec['ber']:.4g} ({_ci_text(dec, dlo, dhi)}; "
                         f"{dec['bit_errors']} bit errors, before the descrambler)")
        lines.append(f"payload    BER after the descrambler {post['ber']:.4g} ({_ci_text(post, lo, hi)}; "
                     f"{post['bit_errors']} payload flips); {post.get('marked_bits', 0)} bits in error blocks")
    if cw:
        lines.append(f"codewords  {cw['total']} total, {cw['with_errors']} with errors, {cw['corrected']} corrected, "
                     f"{cw['uncorrectable']} uncorrectable, {cw['miscorrected']} miscorrected, "
                     f"{cw['undetected']} undetected, {cw['marked_pairs']} pairs marked")
    inner = meta.get("inner")
    if isinstance(inner, dict):
        lines.append(f"inner      {inner.get('code')} ({inner.get('decoder')}, {inner.get('n_lrp')} LRP), "
                     f"X={inner.get('interleave')}, lanes {inner.get('lane_rule')}, hops {inner.get('hops')} "
                     f"({inner.get('outer')}), path {inner.get('path')}")
        r = inner.get("rates", {})
        for k in ("inner_block_failure", "kp4_input_ber", "fer"):
            v = r.get(k)
            if isinstance(v, dict):
                lines.append(f"  {k:<20} {v.get('value', float('nan')):.3e}  95% CI [{v.get('lo', float('nan')):.3e}, "
                             f"{v.get('hi', float('nan')):.3e}]")
        th = inner.get("theory", {})
        if isinstance(th, dict) and th.get("fer") is not None:
            lines.append(f"  {'fer (theory)':<20} {th['fer']:.3e}  {th.get('kind', '')}")
    if "lane_bit_errors" in meta:
        lines.append(f"per lane   {meta['lane_bit_errors']}")
    if "wall_s" in meta:
        rate = meta.get("line_bits", 0) / meta["wall_s"] / 1e9 if meta["wall_s"] > 0 else float("nan")
        lines.append(f"wall       {meta['wall_s']:.2f} s ({rate:.3g} Gb/s of line simulated, incl. writing)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    return _generate(args) if args.action == "generate" else _info(args)


def _generate(args: argparse.Namespace) -> int:
    """``trace generate``: the options checked, then the trace written (800G / 1.6T by the inner-code path)."""
    from protocol.trace import TRACE_SUFFIX, generate_trace

    from phy802.cli._inner_cli import check_inner, run_trace as run_inner_trace

    if check_inner(args):  # 800G / 1.6T: the concatenated link's own generator
        if str(args.out).lower().endswith(".npz"):
            raise ValueError(f"--out {args.out}: traces are written in format 2, which is not an .npz (zip) file; "
                             f"name it {str(args.out)[:-4]}{TRACE_SUFFIX}")
        return run_inner_trace(args, _summary)
    if args.snr_db is not None:
        raise CliError(f"--snr-db applies at 800G/1.6T (PAM4 AWGN + inner code); at {args.rate} give --ber")
    if args.ber is None:
        args.ber = 1e-5
    if str(args.out).lower().endswith(".npz"):
        # a version-2 trace is not a zip: a .npz name would send numpy.load and unzip astray
        raise ValueError(f"--out {args.out}: traces are written in format 2, which is not an .npz (zip) file; "
                         f"name it {str(args.out)[:-4]}{TRACE_SUFFIX} (version-1 .npz traces are still read)")
    from_fit = _channel_from_fit(args)
    from phy802.runtime.output import check_output_file

    check_output_file(args.out)  # before any work (the writer checks again when it opens)
    weights = _weights(args.lane_weights)
    _check_size(args)
    meta = generate_trace(
        args.out,
        rate=args.rate,
        fec=args.fec,
        code=args.code,
        ber=args.ber,
        burst_pb=args.burst_pb,
        lane_weights=weights,
        line_bits=args.bits,
        seed=args.seed,
        generator=args.generator,
        chunk_pairs=args.chunk_pairs,
        shard_pairs=args.shard_pairs,
        workers=args.workers,
        scheduler=args.scheduler,
        progress=not args.no_progress,
    )
    if from_fit is not None:
        meta = {**meta, "from_fit": from_fit}
    emit(args, {"path": str(args.out), **meta},
         lambda: f"wrote {args.out}\n" + ("" if from_fit is None else
                                            f"channel from {from_fit['path']}: {from_fit['model']} fit, "
                                            f"ber={from_fit['ber']:.4g} burst_pb={from_fit['burst_pb']}"
                                            + (f" ({from_fit['note']})" if from_fit.get("note") else "") + "\n")
         + _summary(meta))
    return 0


def _channel_from_fit(args: argparse.Namespace) -> dict | None:
    """With ``--from-fit``: the channel (BER, burst) of the fitted model, set on ``args``, and where it
    came from; else None (``--fit-model`` alone refused)."""
    from_fit = None
    if args.from_fit is not None:
        from phy802.telemetry.fit import generator_channel, read_fit

        from_fit = generator_channel(read_fit(args.from_fit), args.fit_model, str(args.from_fit))
        args.ber, args.burst_pb = from_fit["ber"], from_fit["burst_pb"]
        from_fit["path"] = str(args.from_fit)
    elif args.fit_model is not None:
        raise ValueError("--fit-model needs --from-fit FIT.json")
    return from_fit


def _info(args: argparse.Namespace) -> int:
    """``trace info``: the trace's metadata (``--check``: every chunk verified), its FEC histogram."""
    import sys

    from protocol.trace import TraceError, TraceReader

    hfmt = hist_format(args)
    check = None
    with TraceReader(args.path) as r:
        meta = dict(r.meta)
        if args.check:
            try:
                check = {"ok": True, **r.check()}
            except TraceError as exc:
                check = {"ok": False, "error": str(exc)}
    if check is not None and not check["ok"]:
        print(f"phy802 trace info: check failed: {check['error']}", file=sys.stderr)
        return 1
    counts = meta.get("codewords", {}).get("symbol_error_hist")
    fh = None
    t = _code_t(meta, args.path)
    if counts and t is not None:  # the trace's last count collects every weight >= its index (all > t)
        fh = histogram_from_counts(counts, t, args.bins, str(args.path))
    if hfmt:
        if fh is None:
            raise ValueError(f"{args.path}: field 'codewords.symbol_error_hist' is missing (no histogram in this trace)")
        print_histograms(hfmt, [("phy802-trace", fh, {})])
        return 0
    obj = {"path": str(args.path), **meta}
    if fh is not None:
        obj["fec_histogram"] = fh.as_dict()
    if check is not None:
        obj["check"] = check
    emit(args, obj, lambda: _summary(meta)
         + ("" if check is None else f"\ncheck      ok: {check['chunks']} chunks, {check['flips']} flips, "
                                     f"{check['marks']} marks valid")
         + ("" if fh is None else "\nFEC codeword histogram (pre-FEC symbol errors per codeword):\n" + fh.format_text()))
    return 0
