"""``phy802 fec``: encode or decode RS codewords from text files, for link engineers.

Input: one message (encode) or received word (decode) per line, whitespace-separated symbols
(decimal, or hex with ``--format hex``); blank lines and ``#`` comments are skipped. Output uses the
same format, so a decode output can be fed back in. Decode appends ``# <status> <n>`` to each line
and prints the counters summary to stderr (or includes it in ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

import numpy as np

from phy802.fec.counters import FecCounters
from phy802.fec.rs import CODES, RSCode, decode, encode

__all__ = ["add_arguments", "run", "parse_symbol_lines", "format_symbols"]

_CODES = dict(CODES)  # kp4, kr4, rs272


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{encode,decode}")
    for action, text in (
        ("encode", "messages (k symbols per line) -> codewords (n symbols per line)"),
        ("decode", "received words (n symbols per line) -> decoded words, status and counters"),
    ):
        p = sub.add_parser(action, help=text, description=text)
        p.add_argument("file", nargs="?", default="-", metavar="FILE", help="input file ('-' = stdin, default)")
        p.add_argument("--code", choices=sorted(_CODES), default="kp4",
                       help="kp4 = RS(544,514) t=15, kr4 = RS(528,514) t=7, rs272 = RS(272,258) t=7 "
                            "(low-latency RS(272,257+1), pad included) (default kp4)")
        p.add_argument("--n", type=int, help="custom code length (with --k; overrides --code)")
        p.add_argument("--k", type=int, help="custom message length (with --n)")
        p.add_argument("--format", choices=("dec", "hex"), default="dec", help="symbol notation (default dec)")
        p.add_argument("--json", action="store_true", help="print a JSON object on stdout instead of text")
        p.add_argument("--out", metavar="PATH", help="write the output to PATH (atomically) instead of stdout")
        if action == "decode":
            p.add_argument("--mode", choices=("correct", "detect"), default="correct",
                           help="correct errors (default) or only detect them (syndrome check)")


def _code(args: argparse.Namespace) -> RSCode:
    if args.n is None and args.k is None:
        return _CODES[args.code]
    if args.n is None or args.k is None:
        raise ValueError("--n and --k must be given together")
    return RSCode(args.n, args.k)


def parse_symbol_lines(stream: TextIO, length: int, name: str, fmt: str = "dec") -> tuple[np.ndarray, list[int]]:
    """Read one word of ``length`` symbols per non-blank line; returns (uint16[N, length], line numbers).

    Raises ValueError naming ``name``, the line and the field of the first bad token.
    """
    base = 16 if fmt == "hex" else 10
    rows: list[list[int]] = []
    lines: list[int] = []
    for lineno, raw in enumerate(stream, start=1):
        text = raw.split("#", 1)[0]
        toks = text.split()
        if not toks:
            continue
        if len(toks) != length:
            raise ValueError(f"{name}:{lineno}: expected {length} symbols, got {len(toks)}")
        row = []
        for j, tok in enumerate(toks, start=1):
            try:
                v = int(tok, base)
            except ValueError:
                kind = "hex" if base == 16 else "decimal"
                raise ValueError(f"{name}:{lineno}: field {j}: {tok!r} is not a {kind} number") from None
            if not 0 <= v < 1024:
                raise ValueError(f"{name}:{lineno}: field {j}: symbol {tok} = {v} is outside 0..1023")
            row.append(v)
        rows.append(row)
        lines.append(lineno)
    arr = np.array(rows, dtype=np.uint16).reshape(len(rows), length)
    return arr, lines


def format_symbols(word: np.ndarray, fmt: str = "dec") -> str:
    """One word as a line of symbols (hex: three digits, no prefix)."""
    if fmt == "hex":
        return " ".join(f"{int(v):03x}" for v in word)
    return " ".join(str(int(v)) for v in word)


def _status(nc: int, mode: str) -> str:
    if nc < 0:
        return "detected" if mode == "detect" else "uncorrectable"
    return "ok" if nc == 0 else "corrected"


def _code_info(code: RSCode) -> dict:
    return {"name": code.name, "n": code.n, "k": code.k, "t": code.t}


def _dump_json(obj: dict) -> str:
    """JSON with one compact line per word (a 544-symbol list per line, not 544 lines)."""
    parts = []
    for key, val in obj.items():
        if key == "words" and val:
            inner = ",\n".join("    " + json.dumps(w) for w in val)
            parts.append(f'  "words": [\n{inner}\n  ]')
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(val)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def run(args: argparse.Namespace) -> int:
    code = _code(args)
    length = code.k if args.action == "encode" else code.n
    if args.file == "-":
        words, lines = parse_symbol_lines(sys.stdin, length, "<stdin>", args.format)
    else:
        with open(args.file, encoding="utf-8") as fh:
            words, lines = parse_symbol_lines(fh, length, args.file, args.format)

    counters = None
    if args.action == "encode":
        out = encode(code, words)
        if args.json:
            obj = {"code": _code_info(code),
                   "words": [{"line": ln, "message": m.tolist(), "codeword": c.tolist()}
                             for ln, m, c in zip(lines, words, out)]}
        else:
            text = "".join(format_symbols(c, args.format) + "\n" for c in out)
    else:
        out, nc = decode(code, words, mode=args.mode)
        counters = FecCounters().update(words, out, nc)
        if args.json:
            obj = {"code": _code_info(code), "mode": args.mode,
                   "words": [{"line": ln, "status": _status(int(c), args.mode), "n_corrected": int(c),
                              "decoded": w.tolist(),
                              "positions": np.flatnonzero(w != r).tolist()}
                             for ln, w, r, c in zip(lines, out, words, nc)],
                   "counters": counters.as_dict()}
        else:
            text = "".join(f"{format_symbols(w, args.format)}  # {_status(int(c), args.mode)} {int(c)}\n"
                           for w, c in zip(out, nc))

    payload = _dump_json(obj) if args.json else text
    if args.out:
        from phy802._io import atomic_write_text

        atomic_write_text(args.out, payload)
    else:
        sys.stdout.write(payload)
    if counters is not None and not args.json:
        d = counters.as_dict()
        print(f"phy802 fec decode: {code}: {d['codewords']} words, {d['corrected_codewords']} corrected "
              f"({d['corrected_symbols']} symbols), {d['uncorrected_codewords']} "
              f"{'with errors detected' if args.mode == 'detect' else 'uncorrectable'}", file=sys.stderr)
    return 0
