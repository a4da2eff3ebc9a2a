"""``phy802 pma``: PRBSxQ test patterns, Gray map/demap and the precoder from the command line.

Examples::

    phy802 pma prbs --pattern prbs9q --count 511
    phy802 pma map 0001111000          # bits A,B,... -> symbols
    phy802 pma demap 01230 --json
    phy802 pma precode 0123 --initial 0
    phy802 pma decode 0112 --initial 0
"""

from __future__ import annotations

import argparse

import numpy as np

from phy802.cli._common import add_force, add_json, count_arg, emit, int_arg
from phy802.runtime.resources import check_budget

__all__ = ["add_arguments", "run"]

MAX_COUNT = 10**12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    text = "print the first COUNT symbols of a PRBSxQ pattern (120.5.11.2)"
    p = sub.add_parser("prbs", help=text, description=text)
    p.add_argument("--pattern", default="prbs9q", type=str.lower, metavar="PATTERN",
                   help="prbs9q | prbs13q | prbs31q (default prbs9q)")
    p.add_argument("--count", type=count_arg(0, MAX_COUNT), default=511,
                   help="number of PAM4 symbols, e.g. 511 or 1e6 (default 511)")
    p.add_argument("--state", default=None, help="LFSR seed S0..S(N-1) as 0/1 digits (default: the standard's seed: prbs9q all ones, "
                        "prbs13q 0000010101011, prbs31q all ones)")
    p.add_argument("--bits", action="store_true", help="print the PRBS bits instead of the symbols (default symbols)")
    add_force(p, "output larger than the free memory")
    add_json(p)
    for name, text in (
        ("map", "Gray map bits (A first) to PAM4 symbols (120.5.7.1)"),
        ("demap", "Gray demap PAM4 symbols to bits"),
        ("precode", "1/(1+D) mod 4 precoder (120.5.7.2)"),
        ("decode", "inverse of the precoder"),
    ):
        q = sub.add_parser(name, help=text, description=text)
        q.add_argument("digits", help="the input as a digit string (bits 0/1 or symbols 0..3)")
        if name in ("precode", "decode"):
            q.add_argument("--initial", type=int_arg(0, 3), default=0, help="initial state P(-1), 0..3 (default 0)")
        add_json(q)


def _digits(text: str, maxdigit: int, what: str) -> np.ndarray:
    if not text or any(c not in "0123"[: maxdigit + 1] for c in text):
        raise ValueError(f"{what} must be a string of digits 0..{maxdigit}, got {text[:30]!r}")
    return np.frombuffer(text.encode(), dtype=np.uint8) - ord("0")


def run(args: argparse.Namespace) -> int:
    from phy802.pma import gray_demap, gray_map, precode, precode_decode
    from phy802.pma.prbs import PATTERNS, prbs_bits, prbsq

    if args.action == "prbs":
        if args.count < 0:
            raise ValueError(f"--count must be >= 0, got {args.count}")
        # bits + symbols arrays, a Python int per digit in tolist(), the output string (text or JSON)
        check_budget(f"pma prbs --count {args.count}", memory_bytes=args.count * 64.0, force=args.force,
                     hint="ask for fewer symbols")
        pat = PATTERNS.get(args.pattern.lower())
        if pat is None:
            raise ValueError(f"--pattern {args.pattern!r}: choose from {', '.join(PATTERNS)}")
        seed = args.state if args.state is not None else pat.seed
        try:
            out = prbs_bits(pat, 2 * args.count, seed) if args.bits else prbsq(pat, args.count, seed)
        except ValueError as exc:  # the library names the seed, the user typed --state
            raise ValueError(f"--state {args.state!r}: {exc}") from None
        obj = {"pattern": pat.name, "polynomial": pat.polynomial, "seed": seed, "inverted": pat.invert,
               "count": args.count,
               "bits" if args.bits else "symbols": "".join(map(str, out.tolist()))}
        emit(args, obj, lambda: obj["bits" if args.bits else "symbols"])
        return 0
    if args.action == "map":
        bits = _digits(args.digits, 1, "bits")
        if bits.size % 2:
            raise ValueError(f"bits must have an even length, got {bits.size}")
        out = gray_map(bits)
    elif args.action == "demap":
        out = gray_demap(_digits(args.digits, 3, "symbols"))
    elif args.action == "precode":
        out = precode(_digits(args.digits, 3, "symbols"), args.initial)
    else:
        out = precode_decode(_digits(args.digits, 3, "symbols"), args.initial)
    text = "".join(map(str, out.tolist()))
    emit(args, {"action": args.action, "input": args.digits, "output": text}, text)
    return 0
