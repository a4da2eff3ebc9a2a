"""The 800G/1.6T + Clause 177 inner-code faces of ``phy802 link``, ``sweep`` and ``theory``:
option sets and runners, hooked into those commands with a few lines each."""

from __future__ import annotations

import argparse
import sys
import time

from phy802.cli._common import CliError, count_arg, emit, float_arg, int_arg, list_arg, probability

__all__ = ["INNER_RATES", "add_link_args", "add_sweep_args", "add_trace_args", "check_inner", "run_link", "run_sweep",
           "run_trace", "add_theory_parser", "run_theory"]

INNER_RATES = ("800G", "1.6T")
DECODERS = ("hard", "chase")


def check_inner(args) -> bool:
    """True when the inner-code path applies (``--inner c177`` or an 800G/1.6T rate); exit 2 for
    ``--inner c177`` with a rate that has no inner code."""
    inner = getattr(args, "inner", None)
    if inner == "c177" and args.rate not in INNER_RATES:
        raise CliError(f"--inner c177: rate {args.rate} has no inner code (Clause 177 is for the 200G-per-lane "
                       f"rates {', '.join(INNER_RATES)}; use --rate 800G or 1.6T)")
    return args.rate in INNER_RATES


def _common(p: argparse.ArgumentParser, multi: bool) -> None:
    p.add_argument("--inner", choices=("c177", "none"), default=None,
                   help="inner FEC on the 200G lanes: c177 (Clause 177 (128,120), default at 800G/1.6T) or none; "
                        "only with --rate 800G or 1.6T")
    if multi:
        p.add_argument("--inner-decoder", type=list_arg(lambda s: _choice(s, DECODERS)), default=DECODERS,
                       metavar="DEC[,DEC]", help="inner decoders side by side: hard, chase (default hard,chase)")
    else:
        p.add_argument("--inner-decoder", choices=DECODERS, default="chase",
                       help="inner decoder: hard (single-error correction) or chase (Chase-2; default)")
    p.add_argument("--lrp", type=int_arg(0, 6), default=2,
                   help="Chase-2 least reliable positions, 2^LRP test patterns (default 2)")
    p.add_argument("--hops", type=int_arg(1, 16), default=1, help="optical hops on the path (default 1)")
    p.add_argument("--outer", choices=("segmented", "end_to_end"), default="segmented",
                   help="KP4 terminated per hop (segmented, default) or only at the far end (end_to_end)")
    p.add_argument("--erasure", action="store_true",
                   help="erasure-aided KP4: RS symbols of blocks the inner decoder flags are erased, 2e + v <= 30 "
                        "(decision model; one hop or segmented; default off)")
    p.add_argument("--lane-rule", choices=("interleaved", "codeword"), default="interleaved",
                   help="800G/1.6T lane layout ([?] in the notes): interleaved (default: every lane carries all "
                        "4 codewords) or codeword (stream symbol s -> lane s mod L)")


def _choice(s: str, choices) -> str:
    s = s.strip()
    if s not in choices:
        raise argparse.ArgumentTypeError(f"invalid choice {s!r} (choose from {', '.join(choices)})")
    return s


def add_link_args(p: argparse.ArgumentParser) -> None:
    _common(p, multi=False)
    p.add_argument("--path", choices=("exact", "fast"), default="exact",
                   help="800G/1.6T: exact (every bit, default) or fast (data-free error-pattern path)")
    p.add_argument("--codewords", type=count_arg(1, 10**12), default=None,
                   help="800G/1.6T: KP4 codewords to send (default: 2 x --pairs)")


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    _common(p, multi=True)


def add_trace_args(p: argparse.ArgumentParser) -> None:
    """``trace generate`` at 800G/1.6T: the link's inner-code options and ``--path``."""
    _common(p, multi=False)
    p.add_argument("--path", choices=("exact", "fast"), default="fast",
                   help="800G/1.6T: fast (data-free error-pattern path, default) or exact (every bit); the trace "
                        "equals 'phy802 link --rate R --inner c177 --path P --codewords N' on the same seed")


def _config(args, decoder: str):
    from phy802.link.concat import ConcatConfig

    fec = args.fec if isinstance(args.fec, str) else args.fec[0]
    if fec not in ("ieee", "bypass"):
        raise CliError(f"--fec {fec}: at {args.rate} the outer modes modelled are ieee and bypass")
    code = args.code if isinstance(args.code, str) else args.code[0]
    if code != "kp4":
        raise CliError(f"--code {code}: 802.3dj keeps RS(544,514) (kp4) as the outer code at {args.rate}")
    return ConcatConfig(rate=args.rate, inner=args.inner or "c177", inner_decoder=decoder, n_lrp=args.lrp, fec=fec,
                        lane_rule=args.lane_rule, hops=args.hops, outer=args.outer, erasure=args.erasure)


def _channel(args, x=None, axis=None):
    from phy802.channel import Pam4Awgn

    if axis == "ber" or (axis is None and getattr(args, "ber", None) is not None):
        return Pam4Awgn.from_ber(x if x is not None else args.ber)
    if axis == "snr" or (axis is None and getattr(args, "snr_db", None) is not None):
        return Pam4Awgn(snr_db=x if x is not None else args.snr_db)
    raise CliError(f"--rate {args.rate}: give the line noise with --ber or --snr-db (the inner decoder reads "
                   f"PAM4 AWGN samples)")


def _theory(cfg, snr_db: float, seed: int) -> dict:
    from phy802 import theory_inner as T

    if cfg.inner == "none":
        from phy802 import theory

        ber = float(theory.pam4_ber(snr_db))
        fer1 = float(theory.rs_codeword_error_ratio(theory.symbol_error_prob(ber)))
        fer = -__import__("math").expm1(cfg.hops * __import__("math").log1p(-min(fer1, 1 - 1e-16)))
        return {"fer": fer, "kind": "binomial (KP4 alone)"}
    if cfg.inner_decoder == "hard":
        law = T.inner_law_bsc(*T.awgn_position_probs(snr_db), m=cfg.symbols_per_block)
        kind = "closed form (BSC enumeration + generating function on the exact layout)"
    else:
        law = T.inner_law_monte_carlo(snr_db, 200_000, seed, n_lrp=cfg.n_lrp, m=cfg.symbols_per_block)
        kind = "semi-analytic (Chase-2 block law from 200000 blocks + generating function on the exact layout)"
    lay = T.layout_pieces(cfg.interleave, cfg.n_lanes, cfg.lane_rule)
    fer = (T.concat_fer(law, hops=cfg.hops, outer=cfg.outer, erasure=cfg.erasure, layout=lay)
           if cfg.fec == "ieee" else None)
    return {"fer": fer, "inner_block_failure": law.p_fail, "kp4_input_ber": law.ber_out, "kind": kind}


def run_link(args) -> int:
    from phy802.link.concat import ConcatLink

    for flag, given in (("--precoding", args.precoding), ("--fault-lane", args.fault_lane is not None),
                        ("--lane-order", args.lane_order is not None), ("--lanes", args.lanes is not None),
                        ("--level", args.level is not None)):
        if given:
            raise CliError(f"{flag} does not apply at {args.rate} (the 800G/1.6T model is codeword level)")
    from phy802.cli._hist import hist_format, histogram_from_counts, print_histograms
    from phy802.fec.rs import CODES as RS_CODES

    hfmt = hist_format(args)  # --format json/ynl/ethtool-json are honoured here as at 400G
    cfg = _config(args, args.inner_decoder)
    ch = _channel(args)
    n = int(args.codewords or 2 * args.pairs)
    res = ConcatLink(cfg, ch, path=args.path).run(n, args.seed)
    c, rates = res.counters, res.rates()
    if hfmt:  # the KP4 codeword histogram (symbol errors at the KP4 decoder's input)
        fh = histogram_from_counts(c.hist, RS_CODES["kp4"].t, args.bins, "phy802 link")
        print_histograms(hfmt, [("phy802-link", fh, {})])
        return 0
    th = _theory(cfg, float(ch.snr_db), args.seed)
    out = {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "path": args.path, "seed": args.seed,
           "snr_db": float(ch.snr_db), "counters": c.as_dict(), "rates": {k: v.as_dict() for k, v in rates.items()},
           "theory": th}

    def text() -> str:
        lines = [f"{cfg.rate} ({cfg.n_lanes} x 200G) kp4/{cfg.fec} + inner {cfg.inner}"
                 + (f" ({cfg.inner_decoder}{', 2^%d patterns' % cfg.n_lrp if cfg.inner_decoder == 'chase' else ''})"
                    if cfg.inner == "c177" else "")
                 + f", X={cfg.interleave}, lanes {cfg.lane_rule}, hops {cfg.hops} ({cfg.outer}), path {args.path}, "
                 f"SNR {ch.snr_db:.3f} dB: {c.codewords} codewords ({c.seconds:.2f} s)",
                 f"inner blocks {c.inner_blocks}: corrected {c.inner_corrected}, uncorrectable {c.inner_uncorrectable}, "
                 f"message wrong after decoding {c.inner_failed}",
                 f"KP4: codeword errors {c.codeword_errors}, flagged {c.uncorrected_codewords}", ""]
        for k, v in rates.items():
            lines.append(f"{k:<20} {v.value:.3e}  95% CI [{v.lo:.3e}, {v.hi:.3e}]  ({v.events}/{v.trials})")
        if th.get("fer") is not None:
            lines.append(f"{'fer (theory)':<20} {th['fer']:.3e}  {th['kind']}")
        return "\n".join(lines)

    emit(args, out, text)
    return 0


#: fastest the concatenated link runs on one core (KP4 codewords/s): only to skip the timing run
#: where even this says "over an hour" or "clearly quick" (measured ~2e3-2e4/s fast, ~1e3/s exact)
_TRACE_BOUND_CW_S = {"fast": 2e5, "exact": 2e4}


def _trace_cost(args, cfg, ch, n_cw: int) -> None:
    """Refuse a trace over an hour, the free disk or the memory up front (as the 400G path): time
    and bytes per codeword from a short measured run of the same generator on this machine."""
    from phy802.runtime.tempfiles import scratch_dir
    from phy802.runtime.resources import calibrated_seconds, check_budget, check_disk
    from protocol.trace.inner import generate_inner_trace

    what = f"trace generate --rate {args.rate} --bits {args.bits:.3g}"
    measured: dict = {}

    def small(n: int) -> None:
        with scratch_dir("phy802-calibrate-") as d:
            m = generate_inner_trace(d / "c.trace", cfg, ch, n_codewords=max(12, n), seed=args.seed,
                                     path_kind=args.path)
        measured["bytes_per_cw"] = m["encoded_bytes"] / max(1, m["codewords"]["total"])

    if not args.force:
        secs = calibrated_seconds(n_cw, small, 3000 if args.path == "fast" else 300,
                                  assumed_rate=_TRACE_BOUND_CW_S[args.path])
        check_budget(what, seconds=secs, force=args.force,
                     hint=f"use fewer --bits (measured here: ~{n_cw / max(secs, 1e-9):.3g} codewords/s)")
    # disk: measured bytes per codeword (x2 margin), else ~4 bytes x 3 flips per line error
    per_cw = 2 * measured["bytes_per_cw"] if "bytes_per_cw" in measured else 12.0 * ch.ber * 5440 * cfg.hops
    check_disk(args.out, n_cw * per_cw + (1 << 20), what, force=args.force, hint="use fewer --bits")
    # memory: one batch of the link; fast path ~64 bytes per line error, exact path ~40 bytes per
    # line bit (dense bits, samples and decoder buffers)
    batch_cw = min(4 * (30000 if args.path == "fast" else 300), n_cw)
    line_bits = batch_cw * 5440 * (128 / 120) * cfg.hops
    held = line_bits * (64.0 * ch.ber if args.path == "fast" else 40.0)
    check_budget(what, memory_bytes=held, force=args.force, hint="use fewer --bits")


def run_trace(args, summary) -> int:
    """``phy802 trace generate --rate 800G|1.6T [--inner c177|none]``: the error trace of the
    concatenated link (``protocol.trace.inner``), equal on the same seed to ``phy802 link``'s run."""
    from phy802.runtime.output import check_output_file
    from protocol.trace.inner import codewords_for_line_bits, generate_inner_trace

    for flag, given in (("--burst-pb", args.burst_pb is not None), ("--lane-weights", args.lane_weights is not None),
                        ("--from-fit", args.from_fit is not None), ("--fit-model", args.fit_model is not None),
                        ("--generator bitexact", args.generator != "fast"),
                        ("--chunk-pairs", args.chunk_pairs is not None), ("--shard-pairs", args.shard_pairs is not None),
                        ("--workers", args.workers != 1), ("--scheduler", args.scheduler is not None)):
        if given:
            raise CliError(f"{flag} does not apply at {args.rate} (the 800G/1.6T trace comes from the concatenated "
                           f"link model, PAM4 AWGN, one process; --path exact is its bit-exact path)")
    if args.ber is not None and args.snr_db is not None:
        raise CliError("give the line noise with --ber or --snr-db, not both")
    cfg = _config(args, args.inner_decoder)
    try:
        ch = _channel(args)
    except CliError:  # neither --ber nor --snr-db: its own message, no '--ber None' before it
        raise
    except ValueError as exc:
        raise CliError(f"--ber {args.ber}: {exc}") from None
    check_output_file(args.out)
    n_cw = codewords_for_line_bits(args.bits, cfg.inner)
    _trace_cost(args, cfg, ch, n_cw)
    th = _theory(cfg, float(ch.snr_db), args.seed)
    meta = generate_inner_trace(args.out, cfg, ch, n_codewords=n_cw, seed=args.seed, path_kind=args.path,
                                progress=not args.no_progress, theory=th)
    emit(args, {"path": str(args.out), **meta}, lambda: f"wrote {args.out}\n" + summary(meta))
    return 0


def run_sweep(args) -> int:
    """``phy802 sweep --rate 800G|1.6T [--inner c177]``: hard and Chase-2 side by side per point,
    each with its closed-form / semi-analytic FER (fast data-free path)."""
    from phy802.cli._hist import hist_format, histogram_from_counts, print_histograms
    from phy802.fec.rs import CODES as RS_CODES

    hfmt = hist_format(args)
    if args.merge:
        raise CliError("--merge is not available for the 800G/1.6T inner-code sweep")
    if not args.ber and not args.snr_db:
        raise CliError("give channel points with --ber or --snr-db")
    if args.out is not None:
        from phy802.runtime.output import check_output_dir

        check_output_dir(args.out, "sweep")
    header = (f"{'point':>10} {'decoder':<6} {'line BER':>9} {'inner blk fail':>14} {'KP4-in BER':>10} "
              f"{'FER':>9} {'FER 95% CI':>21} {'FER theory':>10} {'cw':>9} {'s':>6}")
    rows = _inner_sweep_rows(args, header)
    obj = {"rate": args.rate, "points": rows}
    if hfmt:  # one reply / device per point and decoder, as at 400G
        print_histograms(hfmt, [(f"{r['decoder']}:{r['axis']}={r['x']:g}",
                                 histogram_from_counts(r["counters"]["hist"], RS_CODES["kp4"].t, args.bins,
                                                       f"phy802 sweep {r['decoder']} {r['axis']}={r['x']:g}"),
                                 {"decoder": r["decoder"], r["axis"]: r["x"]}) for r in rows], single=False)
        return 0
    if args.out is not None:
        _write_inner_sweep(args.out, rows, obj)
    emit(args, obj, lambda: _inner_sweep_text(args, header, rows))
    return 0


def _inner_sweep_rows(args, header: str) -> list[dict]:
    """One row per point and decoder (hard, Chase-2), measured on the concatenated link beside its
    closed form, each shown live on stderr under ``header``; Ctrl-C keeps the rows finished."""
    from phy802.link.concat import ConcatLink

    path = "exact" if args.sim == "link" else "fast"
    axis = "ber" if args.ber else "snr"
    decoders = tuple(args.inner_decoder) if (args.inner or "c177") == "c177" else ("hard",)
    rows: list[dict] = []
    show = not args.no_progress
    if show:
        print(header, file=sys.stderr)
    try:
        for x in (args.ber or args.snr_db):
            ch = _channel(args, x, axis)
            for dec in decoders:
                cfg = _config(args, dec)
                t0 = time.perf_counter()
                res = ConcatLink(cfg, ch, path=path).run(int(args.max_codewords), args.seed,
                                                         target_errors=args.target_errors or None,
                                                         max_seconds=args.max_seconds or None)
                r = res.rates()
                th = _theory(cfg, float(ch.snr_db), args.seed)
                row = {"axis": axis, "x": float(x), "snr_db": float(ch.snr_db), "label": cfg.label, "decoder": dec,
                       "path": path, "counters": res.counters.as_dict(),
                       "rates": {k: v.as_dict() for k, v in r.items()}, "theory": th,
                       "seconds": time.perf_counter() - t0}
                rows.append(row)
                if show:
                    f = r["fer"]
                    tf = th.get("fer")
                    print(f"{x:>10g} {dec if cfg.inner == 'c177' else 'none':<6} {r['line_ber'].value:>9.2e} "
                          f"{r['inner_block_failure'].value:>14.3e} {r['kp4_input_ber'].value:>10.2e} {f.value:>9.2e} "
                          f"[{f.lo:.2e},{f.hi:.2e}] {(f'{tf:.2e}' if tf is not None else '-'):>10} "
                          f"{res.counters.codewords:>9} {row['seconds']:>6.1f}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"phy802 sweep: interrupted; {len(rows)} finished points kept", file=sys.stderr)
    return rows


def _write_inner_sweep(out, rows: list[dict], obj: dict) -> None:
    """The output set ``sweep.csv`` (one line per row) and ``sweep.json`` (``obj``) into ``out``."""
    import csv
    import io
    import json

    from phy802.runtime.output import output_set
    from phy802.runtime.jsonable import to_jsonable

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["axis", "x", "snr_db", "label", "decoder", "line_ber", "inner_block_failure", "kp4_input_ber",
                "fer", "fer_lo", "fer_hi", "fer_theory", "codewords", "codeword_errors"])
    for r in rows:
        w.writerow([r["axis"], r["x"], r["snr_db"], r["label"], r["decoder"], r["rates"]["line_ber"]["value"],
                    r["rates"]["inner_block_failure"]["value"], r["rates"]["kp4_input_ber"]["value"],
                    r["rates"]["fer"]["value"], r["rates"]["fer"]["lo"], r["rates"]["fer"]["hi"],
                    r["theory"].get("fer"), r["counters"]["codewords"], r["counters"]["codeword_errors"]])
    with output_set(out, "sweep") as tmp:
        (tmp / "sweep.csv").write_text(buf.getvalue())
        (tmp / "sweep.json").write_text(json.dumps(to_jsonable(obj), indent=1, allow_nan=False) + "\n")


def _inner_sweep_text(args, header: str, rows: list[dict]) -> str:
    """The table printed on stdout: ``header`` and one line per row."""
    out = [header]
    for r in rows:
        f = r["rates"]["fer"]
        tf = r["theory"].get("fer")
        out.append(f"{r['x']:>10g} {r['decoder']:<6} {r['rates']['line_ber']['value']:>9.2e} "
                   f"{r['rates']['inner_block_failure']['value']:>14.3e} {r['rates']['kp4_input_ber']['value']:>10.2e} "
                   f"{f['value']:>9.2e} [{f['lo']:.2e},{f['hi']:.2e}] {(f'{tf:.2e}' if tf is not None else '-'):>10} "
                   f"{r['counters']['codewords']:>9} {r['seconds']:>6.1f}")
    if args.out is not None:
        out.append(f"# wrote {args.out / 'sweep.csv'} and {args.out / 'sweep.json'}")
    return "\n".join(out)


def add_theory_parser(sub) -> None:
    p = sub.add_parser("inner", help="Clause 177 inner code + KP4 at 800G/1.6T: closed-form FER (hard) and "
                                     "semi-analytic (Chase-2)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--snr-db", type=list_arg(float_arg(-20.0, 80.0)), metavar="DB[,DB...]",
                   help="SNR values in dB (Es/sigma^2), comma list (no default; this or --ber)")
    g.add_argument("--ber", type=list_arg(probability(hi=0.375)), metavar="BER[,BER...]",
                   help="line (pre-inner) PAM4 BERs, comma list (no default; this or --snr-db)")
    p.add_argument("--decoder", type=list_arg(lambda s: _choice(s, DECODERS)), default=("hard",),
                   metavar="DEC[,DEC]", help="hard (closed form, default) and/or chase (semi-analytic: block law "
                                             "measured on --blocks blocks)")
    p.add_argument("--lrp", type=int_arg(0, 6), default=2, help="Chase-2 least reliable positions (default 2)")
    p.add_argument("--blocks", type=count_arg(1000, 10**9), default=200_000,
                   help="inner blocks for the Chase-2 law (default 200000)")
    p.add_argument("--hops", type=int_arg(1, 16), default=1, help="optical hops (default 1)")
    p.add_argument("--outer", choices=("segmented", "end_to_end"), default="segmented",
                   help="KP4 per hop (segmented, default) or once (end_to_end)")
    p.add_argument("--m", type=int, choices=(3, 12), default=3,
                   help="RS symbols of one codeword per inner block: 3 (interleaved lanes, default) or 12 "
                        "(one codeword per lane)")
    p.add_argument("--erasure", action="store_true",
                   help="also give the erasure-aided KP4 FER (flagged blocks erased, 2e + v <= 30; default off)")
    p.add_argument("--seed", type=int_arg(0, 2**63 - 1), default=1, help="seed of the Chase-2 law (default 1)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run_theory(args) -> int:
    from phy802 import theory
    from phy802 import theory_inner as T

    snrs = list(args.snr_db) if args.snr_db else [float(theory.snr_db_for_ber(b)) for b in args.ber]
    rows = []
    for snr in snrs:
        base = T.concat_point(snr, hops=args.hops, outer=args.outer, m=args.m)
        for dec in args.decoder:
            if dec == "hard":
                row = dict(base, decoder="hard")
            else:
                law = T.inner_law_monte_carlo(snr, int(args.blocks), args.seed, n_lrp=args.lrp, m=args.m)
                row = dict(base, decoder=f"chase{args.lrp}", inner_block_failure=law.p_fail, kp4_input_ber=law.ber_out,
                           kp4_input_ser=law.ser_rs, fer=T.concat_fer(law, hops=args.hops, outer=args.outer))
            if args.erasure:
                if dec == "hard":
                    law = T.inner_law_bsc(*T.awgn_position_probs(snr), m=args.m)
                row["fer_erasure"] = T.concat_fer(law, hops=args.hops, outer=args.outer, erasure=True)
            rows.append(row)

    def text() -> str:
        out = [f"{'SNR dB':>7} {'line BER':>9} {'decoder':<7} {'inner blk fail':>14} {'KP4-in BER':>10} "
               f"{'FER concat':>10} {'FER KP4 alone':>13}" + (f" {'FER erasure':>11}" if args.erasure else "")]
        for r in rows:
            out.append(f"{r['snr_db']:>7.2f} {r['line_ber']:>9.3e} {r['decoder']:<7} {r['inner_block_failure']:>14.3e} "
                       f"{r['kp4_input_ber']:>10.3e} {r['fer']:>10.3e} {r['fer_kp4_alone']:>13.3e}"
                       + (f" {r['fer_erasure']:>11.3e}" if args.erasure else ""))
        out.append(f"hops {args.hops} ({args.outer}), m = {args.m}; hard: exact BSC enumeration + generating "
                   f"function; chase: block law measured (seed {args.seed}); model: phy802/theory_inner.py")
        return "\n".join(out)

    emit(args, {"rows": rows, "hops": args.hops, "outer": args.outer, "m": args.m}, text)
    return 0
