"""``phy802 latency``: added receive latency per FEC mode and rate (protocol layer model)."""

from __future__ import annotations

import argparse

from phy802.cli._common import add_json, emit

from protocol.framing import RATES
from protocol.latency import LatencyConfig, latency_table
from protocol.modes import MODE_NAMES

__all__ = ["add_arguments", "run"]


_D = LatencyConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", choices=list(RATES), action="append",
                        help="rate(s) to show (repeatable; default: all)")
    parser.add_argument("--clock-ghz", type=float, default=_D.clock_ghz,
                        help=f"decoder clock in GHz (default {_D.clock_ghz})")
    parser.add_argument("--solver-cycles", type=int, default=_D.solver_cycles,
                        help=f"key-equation solver cycles (default {_D.solver_cycles})")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    cfg = LatencyConfig(clock_ghz=args.clock_ghz, solver_cycles=args.solver_cycles)
    rates = tuple(args.rate) if args.rate else tuple(RATES)
    rows = latency_table(rates, MODE_NAMES, cfg)

    def text() -> str:
        out = [f"{'rate':<6} {'mode':<23} {'accum ns':>9} {'decoder ns':>11} {'added ns':>9} {'mean ns':>8}"]
        for r in rows:
            out.append(f"{r.rate:<6} {r.mode:<23} {r.accumulation_ns:>9.2f} {r.decoder_ns:>11.2f} "
                       f"{r.total_ns:>9.2f} {r.mean_total_ns:>8.2f}")
        out.append(f"decoder clock {cfg.clock_ghz} GHz; cycles: syndrome {cfg.syndrome_cycles}, solver {cfg.solver_cycles}, "
                   f"Chien/Forney {cfg.chien_forney_cycles} (see protocol/latency.py for sources and [I] assumptions)")
        return "\n".join(out)

    obj = {"config": cfg, "rows": [dict(rate=r.rate, mode=r.mode, accumulation_ns=r.accumulation_ns,
                                        decoder_ns=r.decoder_ns, total_ns=r.total_ns,
                                        mean_total_ns=r.mean_total_ns) for r in rows]}
    emit(args, obj, text)
    return 0
