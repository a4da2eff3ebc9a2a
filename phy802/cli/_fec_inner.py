"""``phy802 fec encode|decode --code c177``: the Clause 177 (128,120) inner code on text files.

Input: one block per line, its bits ``0``/``1`` separated by spaces (or written as one run of
digits); blank lines and ``#`` comments are skipped.  ``encode`` reads 120-bit messages and writes
128-bit blocks; ``decode`` reads 128-bit blocks and writes the hard-decision decoded block with
``# <status> <position>`` (``--soft``: each line holds the 64 PAM4 samples of a block, levels
-3, -1, 1, 3, decoded by Chase-2).  Any other line is an error naming the file, line and value
(exit 2).  Output is atomic with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Iterable

import numpy as np

from phy802.cli._common import bounded_lines, stdin_text, token_lines
from phy802.fec import inner
from phy802.runtime.inputs import check_stream_input

__all__ = ["add_arguments", "run", "parse_bit_lines", "parse_sample_lines"]


def add_arguments(p: argparse.ArgumentParser, action: str) -> None:
    """The c177-only options of ``fec decode``."""
    if action == "decode":
        p.add_argument("--soft", action="store_true",
                       help="c177 only: lines hold 64 PAM4 samples (levels -3,-1,1,3); Chase-2 decoding")
        p.add_argument("--lrp", type=int, choices=range(0, 7), default=2, metavar="0..6",
                       help="c177 --soft: least reliable positions tried, 2^LRP test patterns (default 2)")


def parse_bit_lines(stream: Iterable[str], length: int, name: str) -> tuple[np.ndarray, list[int]]:
    """One block of ``length`` bits per non-blank line -> ``(uint8[N, length], line numbers)``;
    ValueError naming ``name``, the line and the bad value otherwise."""
    rows, nums = [], []
    for lineno, toks in token_lines(stream, name, "bits 0/1"):
        if len(toks) == 1 and len(toks[0]) > 1:
            toks = list(toks[0])  # one run of digits
        for j, tok in enumerate(toks, start=1):
            if tok not in ("0", "1"):
                raise ValueError(f"{name}:{lineno}: bit {j}: {tok[:20]!r} is not 0 or 1")
        if len(toks) != length:
            raise ValueError(f"{name}:{lineno}: expected {length} bits, got {len(toks)}")
        rows.append([int(t) for t in toks])
        nums.append(lineno)
    if not rows:
        raise ValueError(f"{name}: no blocks (the input is empty or holds only comments/blank lines)")
    return np.array(rows, np.uint8), nums


def parse_sample_lines(stream: Iterable[str], name: str) -> tuple[np.ndarray, list[int]]:
    """One block of 64 finite PAM4 samples per non-blank line -> ``(float64[N, 64], line numbers)``."""
    rows, nums = [], []
    for lineno, toks in token_lines(stream, name, "PAM4 samples"):
        if len(toks) != 64:
            raise ValueError(f"{name}:{lineno}: expected 64 samples, got {len(toks)}")
        row = []
        for j, tok in enumerate(toks, start=1):
            try:
                v = float(tok)
            except ValueError:
                v = math.nan
            if not math.isfinite(v) or not tok.isascii():
                raise ValueError(f"{name}:{lineno}: sample {j}: {tok[:20]!r} is not a finite number")
            row.append(v)
        rows.append(row)
        nums.append(lineno)
    if not rows:
        raise ValueError(f"{name}: no blocks (the input is empty or holds only comments/blank lines)")
    return np.array(rows, np.float64), nums


def _bits(a) -> str:
    return " ".join(str(int(v)) for v in a)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "n", None) is not None or getattr(args, "k", None) is not None:
        raise ValueError("--n/--k define a custom RS code; they do not apply to --code c177")
    soft = args.action == "decode" and getattr(args, "soft", False)
    if args.action == "decode" and getattr(args, "mode", "correct") != "correct":
        raise ValueError("--code c177 decodes with correction only (--mode detect is an RS option)")
    name = "<stdin>" if args.file == "-" else args.file

    def parse(fh):
        if soft:
            return parse_sample_lines(fh, name)
        return parse_bit_lines(fh, inner.K_BITS if args.action == "encode" else inner.N_BITS, name)

    # bounded_lines: a file without line breaks (/dev/zero, a binary dump) is refused naming it
    # instead of being read whole into one line (as the RS path of ``fec decode`` does)
    if args.file == "-":
        words, lines = parse(bounded_lines(stdin_text(name), name))
    else:
        check_stream_input(args.file, what=f"{'message' if args.action == 'encode' else 'codeword'} file")
        with open(args.file, encoding="utf-8") as fh:
            words, lines = parse(bounded_lines(fh, name))
    info = {"name": "c177", "n": inner.N_BITS, "k": inner.K_BITS, "construction": "802.3dj D0.1 Clause 177"}
    summary = None
    if args.action == "encode":
        out = inner.encode(words)
        obj = {"code": info, "words": [{"line": ln, "message": m.tolist(), "codeword": c.tolist()}
                                       for ln, m, c in zip(lines, words, out)]}
        text = "".join(_bits(c) + "\n" for c in out)
    else:
        if soft:
            out, st, extra = inner.decode_soft(words, n_lrp=args.lrp)
        else:
            out, st, extra = inner.decode_hard(words)
        key = "n_flips" if soft else "position"
        obj = {"code": info, "decoder": f"chase2 (2^{args.lrp} patterns)" if soft else "hard",
               "words": [{"line": ln, "status": inner.STATUS_NAMES[int(s)], key: int(e), "decoded": d.tolist()}
                         for ln, d, s, e in zip(lines, out, st, extra)]}
        counts = np.bincount(st.astype(np.int64), minlength=3)
        obj["counters"] = {"blocks": int(st.size), "corrected": int(counts[1]), "uncorrectable": int(counts[2])}
        text = "".join(f"{_bits(d)}  # {inner.STATUS_NAMES[int(s)]} {int(e)}\n" for d, s, e in zip(out, st, extra))
        summary = (f"phy802 fec decode: c177 ({obj['decoder']}): {st.size} blocks, {counts[1]} corrected, "
                   f"{counts[2]} uncorrectable")
    if args.json:
        obj["timing"] = {}
        payload = json.dumps(obj) + "\n"
    else:
        payload = text
    if args.out:
        from phy802.runtime.output import atomic_write_text

        atomic_write_text(args.out, payload)
    else:
        sys.stdout.write(payload)
    if summary and not args.json:
        print(summary, file=sys.stderr)
    return 0
