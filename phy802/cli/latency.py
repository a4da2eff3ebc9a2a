"""``phy802 latency``: added receive latency per code x receive mode and rate (protocol layer model)."""

from __future__ import annotations

import argparse

from phy802.cli._common import add_json, emit, float_arg, int_arg
from phy802.cli._vocab import code_list, fec_list

from protocol.framing import RATES
from protocol.latency import ALL_RATES, CODE_NAMES, INNER_RATES, LatencyConfig, latency_table
from protocol.modes import MODE_NAMES

__all__ = ["add_arguments", "run"]


_D = LatencyConfig()
_CODES = tuple(c for c in CODE_NAMES if c != "none")

EXAMPLE = """examples:
  phy802 latency                              # every code x mode at 400G and 200G
  phy802 latency --rate 400G --code rs272 --fec ieee,llr --json
  phy802 latency --clock-ghz 2 --llr-fiber-m 100
  phy802 latency --rate 800G,1.6T --code kp4   # 802.3dj: X=4 KP4 interleave + Clause 177 inner FEC
  phy802 latency --rate 800G --paths --hops 3 --snr-db 15.5   # path options: latency and FER side by side

Added latency = accumulation (the codeword pair at the code's line rate) + decoder pipeline
cycles (+ the inner FEC part at 800G/1.6T: 'inner ns', included in 'added ns'); 'retry ns' is the
link round trip a failed frame costs with --fec llr.  Model, sources
and [I] assumptions: protocol/latency.py.
"""


def _rates(text: str) -> tuple[str, ...]:
    vals = tuple(x.strip().upper() for x in str(text).split(","))
    bad = [v for v in vals if v not in ALL_RATES]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"unknown rate {bad[0] if bad else text!r}; choose from {', '.join(ALL_RATES)}")
    return vals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXAMPLE
    parser.add_argument("--rate", type=_rates, default=tuple(RATES), metavar="RATE[,RATE...]",
                        help=f"rate(s), comma list: {', '.join(ALL_RATES)} (default {','.join(RATES)})")
    parser.add_argument("--code", type=code_list, default=_CODES, metavar="CODE[,CODE...]",
                        help=f"RS code(s): kp4, kr4, rs272, none; comma list (default {','.join(_CODES)})")
    parser.add_argument("--fec", type=fec_list, default=MODE_NAMES, metavar="MODE[,MODE...]",
                        help=f"receive mode(s), comma list (default all: {','.join(MODE_NAMES)})")
    parser.add_argument("--clock-ghz", type=float_arg(0.0, 1000.0, lo_open=True), default=_D.clock_ghz,
                        help=f"decoder clock in GHz (default {_D.clock_ghz})")
    parser.add_argument("--solver-cycles", type=int_arg(1, 10**6), default=_D.solver_cycles,
                        help=f"key-equation solver cycles for t=15, scaled by t/15 (default {_D.solver_cycles})")
    parser.add_argument("--llr-fiber-m", type=float_arg(0.0, 1e7), default=_D.llr_fiber_m,
                        help=f"link length in metres for the llr round trip (default {_D.llr_fiber_m:g} m)")
    parser.add_argument("--llr-phy-ns", type=float_arg(0.0, 1e9), default=_D.llr_phy_ns,
                        help=f"other PHY/MAC pipeline per direction of the llr round trip, ns (default {_D.llr_phy_ns:g})")
    parser.add_argument("--inner", choices=("c177", "none"), default=None,
                        help="inner FEC at 800G/1.6T: c177 (default there) or none (bypassed); "
                             "400G/200G have none (c177 with them exits 2)")
    parser.add_argument("--inner-decoder", choices=("hard", "chase"), default="chase",
                        help="inner decoder latency model: hard (2 cycles) or chase (Chase-2, 4 cycles; default)")
    parser.add_argument("--paths", action="store_true",
                        help="800G/1.6T: the path options (segmented, end_to_end, bypass_inner, bypass_outer) over "
                             "--hops hops: FEC latency of the path and FER at --snr-db (closed form)")
    parser.add_argument("--hops", type=int_arg(1, 16), default=1, help="--paths: optical hops (default 1)")
    parser.add_argument("--snr-db", type=float_arg(-20.0, 80.0), default=None,
                        help="--paths: line SNR in dB (Es/sigma^2) for the FER column (default: no FER)")
    add_json(parser)


def _path_rows(args, cfg) -> list[dict]:
    """Path options x rate: FEC latency over the path and the concatenated FER (theory)."""
    import math

    from protocol.latency import path_latency
    from protocol.modes import PATH_OPTIONS

    law = None
    if args.snr_db is not None:
        from phy802 import theory, theory_inner as T

        if args.inner_decoder == "hard":
            law = T.inner_law_bsc(*T.awgn_position_probs(args.snr_db))
        else:
            law = T.inner_law_monte_carlo(args.snr_db, 200_000, 1, n_lrp=2)
        line_fer = float(theory.rs_codeword_error_ratio(theory.symbol_error_prob(float(theory.pam4_ber(args.snr_db)))))
    rows = []
    for rate in args.rate:
        for opt in PATH_OPTIONS.values():
            ns = path_latency(opt.mode, rate, args.hops, opt.outer, cfg, inner=opt.inner,
                              inner_decoder=args.inner_decoder)
            fer = None
            if law is not None:
                if opt.inner == "none":
                    fer = -math.expm1(args.hops * math.log1p(-min(line_fer, 1 - 1e-16)))
                elif opt.mode == "bypass":  # no outer decoding: any wrong symbol is a codeword error
                    p0 = float(T.codeword_error_pgf(law)[0])
                    fer = -math.expm1(args.hops * math.log(p0)) if p0 > 0 else 1.0
                else:
                    fer = T.concat_fer(law, hops=args.hops, outer=opt.outer)
            rows.append({"rate": rate, "option": opt.name, "inner": opt.inner, "mode": opt.mode, "outer": opt.outer,
                         "hops": args.hops, "path_fec_ns": ns, "fer": fer, "description": opt.description})
    return rows


def run(args: argparse.Namespace) -> int:
    cfg = LatencyConfig(clock_ghz=args.clock_ghz, solver_cycles=args.solver_cycles, llr_fiber_m=args.llr_fiber_m,
                        llr_phy_ns=args.llr_phy_ns)
    if args.inner == "c177":
        bad = [r for r in args.rate if r not in INNER_RATES]
        if bad:
            raise ValueError(f"--inner c177: rate {bad[0]} has no inner code (Clause 177 is for "
                             f"{', '.join(INNER_RATES)})")
    codes = tuple(args.code)
    if all(r in INNER_RATES for r in args.rate) and not any(c in ("kp4", "none") for c in codes):
        raise ValueError(f"--code {','.join(codes)}: at {','.join(args.rate)} the outer code is kp4 (802.3dj); "
                         f"use --code kp4 or none")
    if args.paths:
        bad = [r for r in args.rate if r not in INNER_RATES]
        if bad:
            raise ValueError(f"--paths: rate {bad[0]} has no inner code (path options are for {', '.join(INNER_RATES)})")
        prow = _path_rows(args, cfg)

        def ptext() -> str:
            out = [f"{'rate':<6} {'option':<13} {'inner':<5} {'mode':<7} {'outer':<11} {'hops':>4} {'path FEC ns':>11} "
                   f"{'FER':>10}"]
            for r in prow:
                fer = f"{r['fer']:.3e}" if r["fer"] is not None else "-"
                out.append(f"{r['rate']:<6} {r['option']:<13} {r['inner']:<5} {r['mode']:<7} {r['outer']:<11} "
                           f"{r['hops']:>4} {r['path_fec_ns']:>11.2f} {fer:>10}")
            out.append(f"FER: closed form at SNR {args.snr_db} dB per hop ({args.inner_decoder} inner decoding; "
                       f"phy802/theory_inner.py)" if args.snr_db is not None else "FER: give --snr-db")
            return "\n".join(out)

        emit(args, {"config": cfg, "snr_db": args.snr_db, "paths": prow}, ptext)
        return 0
    rows = latency_table(tuple(args.rate), tuple(args.fec), cfg, codes=codes, inner=args.inner,
                         inner_decoder=args.inner_decoder)

    def text() -> str:
        dj = any(r.rate in INNER_RATES for r in rows)
        out = [f"{'rate':<6} {'code':<6} {'mode':<23} {'accum ns':>9} {'decoder ns':>11} "
               + (f"{'inner':<5} {'inner ns':>8} " if dj else "")
               + f"{'added ns':>9} {'mean ns':>8} {'retry ns':>9}"]
        for r in rows:
            retry = f"{r.retry_ns:>9.1f}" if r.retry_ns else f"{'-':>9}"
            inner = f"{r.inner:<5} {r.inner_ns:>8.2f} " if dj else ""
            out.append(f"{r.rate:<6} {r.code:<6} {r.mode:<23} {r.accumulation_ns:>9.2f} {r.decoder_ns:>11.2f} "
                       f"{inner}{r.total_ns:>9.2f} {r.mean_total_ns:>8.2f} {retry}")
        out.append(f"decoder clock {cfg.clock_ghz} GHz; cycles for KP4: syndrome {cfg.syndrome_cycles}, solver "
                   f"{cfg.solver_cycles}, Chien/Forney {cfg.chien_forney_cycles} (scaled by t and n for other codes; "
                   f"see protocol/latency.py for sources and [I] assumptions)")
        return "\n".join(out)

    obj = {"config": cfg, "rows": [dict(rate=r.rate, code=r.code, mode=r.mode, accumulation_ns=r.accumulation_ns,
                                        decoder_ns=r.decoder_ns, total_ns=r.total_ns,
                                        mean_total_ns=r.mean_total_ns, retry_ns=r.retry_ns, inner=r.inner,
                                        inner_ns=r.inner_ns) for r in rows]}
    emit(args, obj, text)
    return 0
