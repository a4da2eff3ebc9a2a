"""``phy802 fec``: encode or decode RS codewords from text files, for link engineers.

Input: one message (encode) or received word (decode) per line, whitespace-separated symbols
(decimal, or hex with ``--format hex``); blank lines and ``#`` comments are skipped. Output uses the
same format, so a decode output can be fed back in. Decode appends ``# <status> <n>`` to each line
and prints the counters summary to stderr (or includes it in ``--json``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Iterable

import numpy as np

from phy802.cli._common import (add_seed, bounded_lines, choice_list, int_arg, json_document, probability, stdin_text,
                                token_lines)
from phy802.fec.counters import FecCounters
from phy802.runtime.inputs import check_stream_input
from phy802.fec.rs import CODES, RSCode, decode, encode
from phy802.cli import _fec_inner

__all__ = ["add_arguments", "run", "parse_symbol_lines", "format_symbols"]

_CODES = dict(CODES)  # kp4, kr4, rs272


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{encode,decode,tail}")
    for action, text in (
        ("encode", "messages (k symbols per line) -> codewords (n symbols per line)"),
        ("decode", "received words (n symbols per line) -> decoded words, status and counters"),
    ):
        p = sub.add_parser(action, help=text, description=text)
        p.add_argument("file", nargs="?", default="-", metavar="FILE", help="input file ('-' = stdin, default)")
        p.add_argument("--code", choices=sorted(_CODES) + ["c177"], default="kp4",
                       help="kp4 = RS(544,514) t=15, kr4 = RS(528,514) t=7, rs272 = RS(272,258) t=7 "
                            "(low-latency RS(272,257+1), pad included), c177 = the 802.3dj (128,120) "
                            "inner code, lines of 0/1 bits (default kp4)")
        p.add_argument("--n", type=int_arg(2, 1023), help="custom code length in symbols, 2..1023 "
                       "(with --k; overrides --code; default: from --code)")
        p.add_argument("--k", type=int_arg(1, 1022), help="custom message length in symbols, < --n "
                       "(with --n; default: from --code)")
        p.add_argument("--format", choices=("dec", "hex"), default="dec", help="symbol notation (default dec)")
        p.add_argument("--json", action="store_true", help="print a JSON object on stdout instead of text")
        p.add_argument("--out", metavar="PATH", help="write the output to PATH (atomically; default: stdout)")
        p.add_argument("--force", action="store_true", help="let --out overwrite a file phy802 did not write, or write "
                       "through a link / into a device (default: refuse)")
        if action == "decode":
            p.add_argument("--mode", choices=("correct", "detect"), default="correct",
                           help="correct errors (default) or only detect them (syndrome check)")
        _fec_inner.add_arguments(p, action)
    _add_tail(sub)


TAIL_EPILOG = """Input (detected from the content, or --format): ethtool --json --include-statistics --show-fec
DEV (a list of devices, statistics.hist[] of bin_low/bin_high/total/lanes) and its text form
(fec_symbols_err_N: N), the kernel's YNL form (stats.hist[] of bin-low/bin-high/bin-val), SONiC
'show interfaces counters fec-histogram' (BIN0..BIN15) and 'portstat -fh' (one row per port), or
CSV rows 'bin,count' / 'bin_low,bin_high,count' (a row 'uncorrectable,N' gives that count).
Counters are cumulative since link-up: --since OLD fits NEW - OLD and refuses a counter reset.
Several ports (a switch) give a table ranked by margin, worst first; --ifname picks one port.
Models: binomial (independent symbol errors), dfe (1-tap DFE error propagation), ge (Gilbert-Elliott).
A law must pass its G2 goodness-of-fit test at --gof-level: when none does (or FEC is off on the port),
the output says so first and withholds the FER and margin, and the port ranks 'unknown'.
Intervals (95%): profile likelihood (binomial), parametric bootstrap (dfe), likelihood region (ge). Margin: how far the
pre-FEC BER may grow (error shape held) before FER reaches --target-fer (default 1e-13). Beside the
models: SONiC's predicted FLR (log-linear fit of bins 1..15 extrapolated to 16..20) and the observed
FLR = CER x (1 + X x 8)/8 (X = --interleave).
examples:
  phy802 fec tail vectors/fec_hist/example_kp4_dfe.json
  phy802 fec tail vectors/fec_hist/example_kp4_ethtool.json --ifname eth0 --out FIT.json
  phy802 fec tail vectors/fec_hist/example_switch64_portstat_t1.out --since vectors/fec_hist/example_switch64_portstat_t0.out
"""

#: the files the examples above name (a test checks that each exists)
TAIL_EXAMPLE_FILES = ("vectors/fec_hist/example_kp4_dfe.json", "vectors/fec_hist/example_kp4_ethtool.json",
                      "vectors/fec_hist/example_switch64_portstat_t1.out",
                      "vectors/fec_hist/example_switch64_portstat_t0.out")
#: refuse a job estimated above this many CPU seconds (lower --bootstrap or pick a port)
TAIL_MAX_CPU_S = 600.0
#: refuse per-lane counts for more lanes than this (a Clause 119 PHY has 16 PCS lanes, 8 physical)
TAIL_MAX_LANES = 64


def _add_tail(sub) -> None:
    from phy802.telemetry.parsers import FORMATS

    p = sub.add_parser("tail", help="fit channel models to FEC bin histograms (ethtool, SONiC, CSV) and extrapolate FER",
                       description="Fit channel models to FEC codeword histograms and extrapolate their tail.",
                       epilog=TAIL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="telemetry file (ethtool JSON/text, YNL, SONiC, CSV; '-' = stdin)")
    p.add_argument("--since", metavar="OLD", help="an older snapshot of the same ports: fit FILE - OLD "
                   "(refused when a counter went down: reset or wrap) (default: none, fit FILE as it is)")
    p.add_argument("--format", dest="in_format", choices=("auto",) + FORMATS, default="auto",
                   help="input format (default auto: detected from the content)")
    p.add_argument("--ifname", metavar="NAME", help="fit only this device/port (default: every port in the file)")
    p.add_argument("--code", choices=("kp4", "kr4", "rs272"), default=None,
                   help="RS code of the link: kp4 = RS(544,514) t=15, kr4 = RS(528,514) t=7, "
                        "rs272 = RS(272,258) t=7 (default: rs272 when every port that reports its active FEC "
                        "reports LLRS, said first; else kp4). A port whose active FEC is not the code fitted "
                        "(LLRS under kp4/kr4, RS under rs272, BaseR under any) is withheld and ranked unknown")
    p.add_argument("--models", type=choice_list(("binomial", "dfe", "ge")), default=("binomial", "dfe", "ge"),
                   help="comma-separated models to fit: binomial, dfe, ge (default binomial,dfe,ge)")
    p.add_argument("--target-fer", type=probability(), default=1e-13,
                   help="codeword error ratio the margin is measured to, in (0, 1) (default 1e-13)")
    p.add_argument("--gof-level", type=probability(), default=0.01,
                   help="a law whose goodness-of-fit G2 p-value is below this level is rejected; when no law "
                        "passes, the port's FER and margin are withheld and it ranks as unknown, in (0, 1) "
                        "(default 0.01)")
    p.add_argument("--bootstrap", type=int_arg(0, 100000), default=200,
                   help="parametric bootstrap replicates for the dfe intervals (binomial and ge intervals come from "
                        "their likelihood), 0..100000; a job estimated "
                        f"above {TAIL_MAX_CPU_S:.0f} s of CPU is refused up front (default 200; 0 = none)")
    p.add_argument("--interleave", type=int_arg(1, 16), default=2,
                   help="codewords interleaved per frame, X in SONiC's FLR = CER x (1 + 8X)/8: 2 at 200G/400G, "
                        "4 at 800G/1.6T (default 2)")
    add_seed(p)
    p.add_argument("--out", metavar="FIT.json", help="write the fit (JSON; several ports: the table and every "
                   "fit) to this file, atomically (default: none, print only)")
    p.add_argument("--force", action="store_true", help="let --out overwrite a file phy802 did not write, or write "
                   "through a link / into a device (default: refuse)")
    p.add_argument("--json", action="store_true", help="print the fit (or the table) as JSON on stdout")
    p.add_argument("--csv", action="store_true", help="print the ports table as CSV on stdout")
    p.add_argument("--workers", type=int_arg(1, 256), default=1,
                   help="processes fitting ports in parallel (several ports only; same result for any value) (default 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr for several ports")


class _TailProgress:
    """Ports done, shown by the project's progress display (phy802.runtime.progress.progress: a bar on a terminal,
    else a line at most every 10 s and one summary line). Picklable: the display is made on first use,
    in the process that fits (a worker under --bootstrap)."""

    def __init__(self, total: int) -> None:
        self.total, self._bar = total, None

    def __call__(self, port: str) -> None:
        if self._bar is None:
            from phy802.runtime.progress import progress

            self._bar = progress(total=self.total, desc="phy802 fec tail: ports", unit="port")
        self._bar.set_postfix_str(port)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _run_tail(args: argparse.Namespace) -> int:
    from phy802.telemetry.fit import CODES, estimate_cpu_seconds
    from phy802.telemetry.ports import fit_ports, ports_csv, ports_text, rank_ports
    from phy802.telemetry.parsers import TelemetryError, difference, for_code, read_telemetry

    if args.out is not None:
        from phy802.runtime.output import check_output_file

        check_output_file(args.out)  # before the fit, not after it
    models = tuple(args.models)
    fmt = None if args.in_format == "auto" else args.in_format
    tel = read_telemetry(args.file, fmt=fmt)  # bins checked against the code once it is chosen
    code_name, code_note = _tail_code(args.code, tel.pick(args.ifname) if args.ifname else tel)
    code = CODES[code_name]
    try:
        tel = for_code(tel, code.t, code.n)
        if args.since:
            tel = difference(tel, for_code(read_telemetry(args.since, fmt=fmt), code.t, code.n))
    except TelemetryError as exc:
        if not code_note:
            raise
        raise TelemetryError(f"{exc} ({code_note})") from None
    if args.ifname:
        tel = tel.pick(args.ifname)
    est = 0.0
    for p in tel.ports:
        if (p.hist.n_lanes or 0) > TAIL_MAX_LANES:
            raise ValueError(f"{p.hist.source}: {p.hist.n_lanes} lanes of per-lane counts; at most {TAIL_MAX_LANES} "
                             "are fitted (a 400G PHY has 16 PCS lanes)")
        est += estimate_cpu_seconds(p.hist, models, args.bootstrap)
    if est / max(1, min(args.workers, len(tel.ports))) > TAIL_MAX_CPU_S:
        raise ValueError(f"{tel.source}: estimated {est:.0f} s of CPU ({len(tel.ports)} port(s), --bootstrap "
                         f"{args.bootstrap}, models {','.join(models)}), above the {TAIL_MAX_CPU_S:.0f} s limit: lower "
                         "--bootstrap or pick a port with --ifname")
    many = len(tel.ports) > 1
    with_data = [p for p in tel.ports if p.hist.bins and p.hist.total > 0]
    if not with_data:  # one port or a whole switch alike: nothing to fit is an error, not an empty table
        between = " between the snapshots" if args.since else ""
        raise ValueError(f"{tel.ports[0].hist.source if not many else tel.source}: no codewords counted{between}"
                         + (f" on any of the {len(tel.ports)} ports" if many else ""))
    prog = _TailProgress(len(with_data)) if many and not args.no_progress else None
    kw = dict(workers=args.workers, progress=prog, models=models, target_fer=args.target_fer,
              bootstrap=args.bootstrap, seed=args.seed, interleave=args.interleave, gof_level=args.gof_level)
    if args.bootstrap and not (args.workers > 1 and many):
        # the bootstrap is seconds inside one compiled call, where Ctrl-C cannot land: fitted in a
        # worker process that an interrupt terminates at once (fit_ports' own pool does it for --workers)
        from phy802.runtime.workers import run_in_worker

        fits = run_in_worker(fit_ports, tel, code, **kw)
    else:
        fits = fit_ports(tel, code, **kw)
    info = {"input": str(args.file), "input_format": tel.fmt, "since": args.since, "code_chosen": code_note or None}
    if not many and not args.csv:
        fit = fits[tel.ports[0].name]
        doc = json_document({**fit.as_dict(), **info, "port": tel.ports[0].name})
        text = fit.format_text()
    else:
        rows = rank_ports(tel, fits)
        doc = json_document({"format": "phy802.fec_tail_ports", "version": 1, **info, "code": code_name,
                             "target_fer": args.target_fer, "gof_level": args.gof_level,
                             "unknown_ports": [r["port"] for r in rows if r["status"] == "unknown"], "ports": rows,
                             "fits": {k: (None if v is None else v.as_dict()) for k, v in fits.items()}})
        text = ports_text(rows, args.target_fer, tel.fmt)
    payload = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if args.out:
        from phy802.runtime.output import atomic_write_text

        atomic_write_text(args.out, payload)
    if args.json:
        sys.stdout.write(payload)
    elif args.csv:
        if code_note:  # the CSV is a table only; the choice is said where a person reads it
            sys.stderr.write(f"phy802 fec tail: note: {code_note}\n")
        sys.stdout.write(ports_csv(rank_ports(tel, fits)))
    else:
        sys.stdout.write((f"note: {code_note}\n" if code_note else "") + text + "\n")
        if args.out:
            sys.stdout.write(f"wrote {args.out}\n")
    return 0


def _tail_code(given: str | None, tel) -> tuple[str, str]:
    """``(code, note)``: ``given`` (``--code``) as it is, else rs272 when every port of ``tel`` that reports its
    active FEC reports LLRS (the low-latency RS(272,257+1)), said in ``note``; else kp4 (``RS`` does not say
    kp4 from kr4, and a port that reports no mode is taken as the IEEE 400G default). A port whose mode is
    still not the code is withheld by :func:`phy802.telemetry.ports.fit_ports`."""
    from phy802.telemetry.fit import code_for_active_fec

    if given is not None:
        return given, ""
    modes = [p.fec_mode for p in tel.ports if p.fec_mode is not None]
    if modes and all(code_for_active_fec(m) == "rs272" for m in modes):
        return "rs272", (f"fitted as --code rs272, RS(272,258) t=7: the active FEC of {'the port' if len(modes) == 1 else f'all {len(modes)} ports'} "
                         "is LLRS (give --code to fit another code)")
    return "kp4", ""


def _code(args: argparse.Namespace) -> RSCode:
    if args.n is None and args.k is None:
        return _CODES[args.code]
    if args.n is None or args.k is None:
        raise ValueError("--n and --k must be given together")
    if not args.k < args.n or (args.n - args.k) % 2:
        raise ValueError(f"--n {args.n} --k {args.k}: need k < n and n - k even (t = (n - k) / 2)")
    return RSCode(args.n, args.k)


_DEC_TOKEN = re.compile(r"[0-9]+\Z")
_HEX_TOKEN = re.compile(r"(?:0[xX])?[0-9a-fA-F]+\Z")
#: a line of ``xxd``'s default dump: the offset, a colon, the bytes in hex groups, two spaces, the ASCII column
_XXD_LINE = re.compile(r"[ \t]*([0-9a-fA-F]{4,16}):[ \t]+(.*?)(?:  .*)?\Z")
#: a line of ``xxd -p`` (plain): hex digits only, an even number of them
_XXD_PLAIN = re.compile(r"(?:[0-9a-fA-F]{2}){4,}\Z")
#: the first line of ``xxd -i`` (a C array of the bytes): ``unsigned char NAME[] = {``
_XXD_C_HEAD = re.compile(r"[ \t]*(?:static[ \t]+)?(?:const[ \t]+)?unsigned[ \t]+char[ \t]+(\w+)\[\][ \t]*=[ \t]*\{[ \t]*\Z")
#: its last line, ``unsigned int NAME_len = N;`` (the byte count, checked)
_XXD_C_LEN = re.compile(r"[ \t]*(?:static[ \t]+)?(?:const[ \t]+)?unsigned[ \t]+int[ \t]+(\w+)_len[ \t]*=[ \t]*([0-9]+);[ \t]*\Z")
#: bits per RS symbol (GF(2^10))
SYMBOL_BITS = 10


def _tokens(toks: list[str]) -> list[str]:
    """Whitespace tokens split at commas too (``0x0c0, 0x1ff,`` as C arrays and many dumps print them)."""
    return [x for tok in toks for x in tok.split(",") if x]


def _packed_words(data: bytes, length: int, name: str) -> np.ndarray:
    """Words of ``length`` 10-bit symbols packed MSB first, back to back, in ``data`` (a hex dump of a
    bit stream); up to 7 zero bits pad the last byte."""
    bits = np.unpackbits(np.frombuffer(data, np.uint8))
    per = length * SYMBOL_BITS
    n = bits.size // per
    rest = bits[n * per:]
    if n == 0 or rest.size >= 8 or rest.any():
        raise ValueError(f"{name}: a hex dump of {len(data)} bytes ({bits.size} bits) is not a whole number of "
                         f"{length}-symbol words of {SYMBOL_BITS}-bit symbols packed MSB first ({per} bits each, "
                         "the last byte padded with zero bits)")
    w = bits[: n * per].reshape(n * length, SYMBOL_BITS).astype(np.uint16)
    return (w << np.arange(SYMBOL_BITS - 1, -1, -1, dtype=np.uint16)).sum(axis=1, dtype=np.uint16).reshape(n, length)


def _dump_bytes(first: tuple[int, str], rest: Iterable[tuple[int, str]], name: str, plain: bool) -> bytes:
    """The bytes of an ``xxd`` dump (offsets checked: a line missing from a paste is an error, not a
    shifted word) or of ``xxd -p``."""
    out = bytearray()
    for lineno, raw in [first, *rest]:
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if plain:
            hexpart = line.strip()
            if not _XXD_PLAIN.match(hexpart) and not re.fullmatch(r"(?:[0-9a-fA-F]{2})+", hexpart):
                raise ValueError(f"{name}:{lineno}: not a line of 'xxd -p' (an even number of hex digits): {line[:40]!r}")
        else:
            m = _XXD_LINE.match(line)
            if not m:
                raise ValueError(f"{name}:{lineno}: not a line of an xxd dump ('OFFSET: hex bytes  ascii'): {line[:40]!r}")
            if int(m.group(1), 16) != len(out):
                raise ValueError(f"{name}:{lineno}: xxd offset {m.group(1)} but {len(out)} bytes came before it "
                                 "(a line missing or repeated in the paste)")
            hexpart = m.group(2).replace(" ", "")
            if not re.fullmatch(r"(?:[0-9a-fA-F]{2})*", hexpart):
                raise ValueError(f"{name}:{lineno}: xxd bytes {m.group(2)[:40]!r} are not hex digit pairs")
        out += bytes.fromhex(hexpart)
    return bytes(out)


def _c_array_bytes(rest: Iterable[tuple[int, str]], name: str, array: str) -> bytes:
    """The bytes of an ``xxd -i`` dump after its ``unsigned char NAME[] = {`` line: ``0xNN,`` tokens up to
    ``};``, then the optional ``unsigned int NAME_len = N;`` whose N must match (a cut paste is an error)."""
    out = bytearray()
    closed = False
    for lineno, raw in rest:
        line = raw.strip()
        if not line:
            continue
        if closed:
            m = _XXD_C_LEN.match(line)
            if not m or m.group(1) != array:
                raise ValueError(f"{name}:{lineno}: after the xxd -i array only 'unsigned int {array}_len = N;' "
                                 f"may follow, got {line[:40]!r}")
            if int(m.group(2)) != len(out):
                raise ValueError(f"{name}:{lineno}: {array}_len is {m.group(2)} but the array holds {len(out)} bytes "
                                 "(a line missing or repeated in the paste)")
            continue
        body, closed = (line[:-2], True) if line.endswith("};") else (line, False)
        for tok in (t.strip() for t in body.split(",")):
            if not tok:
                continue
            if not re.fullmatch(r"0[xX][0-9a-fA-F]{2}", tok):
                raise ValueError(f"{name}:{lineno}: {tok[:20]!r} is not a byte of an xxd -i array (0xNN)")
            out.append(int(tok, 16))
    if not closed:
        raise ValueError(f"{name}: the xxd -i array '{array}' is not closed by '}};' (a cut paste)")
    return bytes(out)


def parse_symbol_lines(stream: Iterable[str], length: int, name: str, fmt: str = "dec") -> tuple[np.ndarray, list[int]]:
    """Read one word of ``length`` symbols per non-blank line; returns (uint16[N, length], line numbers).

    Tokens are plain ASCII digits: decimal ``0``..``1023``, or hex ``0``..``3ff`` with or without a
    ``0x`` prefix, separated by spaces, tabs or commas; signs, ``_`` separators and non-ASCII digits
    are rejected. In hex, a byte dump as ``xxd`` prints it (``OFFSET: 0c01 2f3a ...  ascii``, offsets
    checked), ``xxd -p`` (plain hex lines) or ``xxd -i`` (a C array of ``0xNN`` bytes, its ``_len``
    checked) is read as a bit stream of 10-bit symbols packed MSB first, words back to back (line numbers are then those where each word starts in the stream's
    order: 1, 2, ...). A decimal token that reads as hex suggests ``--format hex``. Raises ValueError
    naming ``name``, the line and the field of the first bad token; a file with no words, a binary or
    non-UTF-8 file is an error too.
    """
    if fmt not in ("dec", "hex"):
        raise ValueError(f"format must be 'dec' or 'hex', got {fmt!r}")
    pattern, base, kind = (_HEX_TOKEN, 16, "hex") if fmt == "hex" else (_DEC_TOKEN, 10, "decimal")
    rows: list[list[int]] = []
    lines: list[int] = []
    raw_line = [""]

    def keep(src):  # token_lines drops comments and splits; an xxd line is read from the raw text
        for raw in src:
            raw_line[0] = raw
            yield raw

    it = iter(token_lines(keep(stream), name, f"{kind} symbols"))
    for lineno, toks in it:
        c_array = _XXD_C_HEAD.match(raw_line[0].rstrip("\r\n")) if not rows else None
        if fmt == "hex" and c_array:
            data = _c_array_bytes(((ln, raw_line[0]) for ln, _ in it), name, c_array.group(1))
            words = _packed_words(data, length, name)
            return words, list(range(1, len(words) + 1))
        if fmt == "hex" and not rows and (_XXD_LINE.match(raw_line[0].rstrip("\r\n")) and toks[0].endswith(":")
                                          or (len(toks) == 1 and length > 1 and _XXD_PLAIN.match(toks[0]))):
            plain = not toks[0].endswith(":")
            data = _dump_bytes((lineno, raw_line[0]), ((ln, raw_line[0]) for ln, _ in it), name, plain)
            words = _packed_words(data, length, name)
            return words, list(range(1, len(words) + 1))
        toks = _tokens(toks)
        xxd = fmt == "dec" and (_XXD_LINE.match(raw_line[0].rstrip("\r\n")) and toks[0].endswith(":") or c_array)
        hint = " (the input looks like hex symbols or an xxd dump: give --format hex)"
        if len(toks) != length:
            if fmt == "hex" and all(re.fullmatch(r"0[xX][0-9a-fA-F]{2}", t) for t in toks):
                hint = (" (bytes as 'xxd -i < FILE' prints them? Give 'xxd -i FILE', whose 'unsigned char NAME[] = {' "
                        "line says they are packed bytes)")
                xxd = True
            raise ValueError(f"{name}:{lineno}: expected {length} symbols, got {len(toks)}" + (hint if xxd else ""))
        row = []
        for j, tok in enumerate(toks, start=1):
            if not pattern.match(tok):
                shown = hint if fmt == "dec" and (xxd or _HEX_TOKEN.match(tok)) else ""
                raise ValueError(f"{name}:{lineno}: field {j}: {tok[:20]!r} is not a {kind} number{shown}")
            v = int(tok[2:] if fmt == "hex" and tok[:2] in ("0x", "0X") else tok, base)
            if not 0 <= v < 1024:
                raise ValueError(f"{name}:{lineno}: field {j}: symbol {tok[:20]} = {v} is outside 0..1023")
            row.append(v)
        rows.append(row)
        lines.append(lineno)
    if not rows:
        raise ValueError(f"{name}: no words (the input is empty or holds only comments/blank lines)")
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
    if args.action == "tail":
        return _run_tail(args)
    if args.code == "c177":
        return _fec_inner.run(args)
    if getattr(args, "soft", False):
        raise ValueError("--soft applies to --code c177 only")
    code = _code(args)
    length = code.k if args.action == "encode" else code.n
    if args.out is not None:
        from phy802.runtime.output import check_output_file

        check_output_file(args.out)  # a device/FIFO/link, the input itself, a file phy802 did not write
    if args.file == "-":
        words, lines = parse_symbol_lines(bounded_lines(stdin_text(), "<stdin>"), length, "<stdin>", args.format)
    else:
        check_stream_input(args.file, what=f"{'message' if args.action == 'encode' else 'codeword'} file")
        with open(args.file, encoding="utf-8") as fh:
            words, lines = parse_symbol_lines(bounded_lines(fh, args.file), length, args.file, args.format)

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

    if args.json:
        obj["timing"] = {}  # no wall-clock fields; the key is there as in every --json output
    payload = _dump_json(obj) if args.json else text
    if args.out:
        from phy802.runtime.output import atomic_write_text

        atomic_write_text(args.out, payload)
    else:
        sys.stdout.write(payload)
    if counters is not None and not args.json:
        d = counters.as_dict()
        print(f"phy802 fec decode: {code}: {d['codewords']} words, {d['corrected_codewords']} corrected "
              f"({d['corrected_symbols']} symbols), {d['uncorrected_codewords']} "
              f"{'with errors detected' if args.mode == 'detect' else 'uncorrectable'}", file=sys.stderr)
    return 0
