"""Known-answer vector files for the RS codec (``vectors/rs/*.txt``): format, reader, checker, writer.

Format (plain text, UTF-8, one item per line; described for users in ``vectors/rs/README.md``)::

    # comment lines start with '#'; blank lines are ignored
    code: 544 514            # n k (required, first non-comment line)
    name: KP4                # optional label
    field: x^10 + x^3 + 1    # optional; if present must be exactly this polynomial
    first_root: 0            # optional; if present must be 0 (roots alpha^0..alpha^(2t-1))
    message: m_0 m_1 ... m_(k-1)          # encode vector: decimal symbols, first in time first,
    codeword: c_0 c_1 ... c_(n-1)         #   followed immediately by its codeword
    received: r_0 ... r_(n-1)             # decode vector: a received word,
    decoded: d_0 ... d_(n-1)              #   the decoder's output word,
    n_corrected: 3                        #   and symbols corrected (-1 = uncorrectable)

Symbol ``i`` of a line is the coefficient of ``x^(len-1-i)`` (index 0 first in time); codewords are
systematic with the parity last. A reader error names the file, the line and the field.
"""

from __future__ import annotations

import re

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .rs import RSCode, decode, encode

__all__ = [
    "EncodeVector",
    "DecodeVector",
    "KatFile",
    "read_kat",
    "parse_kat",
    "check_kat",
    "format_kat",
    "write_kat",
    "generate_kat",
    "FIELD_POLY_TEXT",
    "STANDARD_FILES",
    "regenerate",
]

FIELD_POLY_TEXT = "x^10 + x^3 + 1"


@dataclass(frozen=True, eq=False)
class EncodeVector:
    """A message and its codeword; ``line`` is the 1-based line of ``message:`` (0 if generated)."""

    message: np.ndarray
    codeword: np.ndarray
    line: int = 0


@dataclass(frozen=True, eq=False)
class DecodeVector:
    """A received word, the expected decoder output and symbol count (-1 = uncorrectable)."""

    received: np.ndarray
    decoded: np.ndarray
    n_corrected: int
    line: int = 0


@dataclass(frozen=True, eq=False)
class KatFile:
    """Contents of one known-answer file."""

    code: RSCode
    encode: tuple[EncodeVector, ...] = ()
    decode: tuple[DecodeVector, ...] = ()
    source: str = "<string>"
    comments: tuple[str, ...] = field(default=(), compare=False)


def _symbols(text: str, expected: int, where: str, key: str) -> np.ndarray:
    toks = text.split()
    if len(toks) != expected:
        raise ValueError(f"{where}: '{key}' needs {expected} symbols, got {len(toks)}")
    out = np.empty(expected, dtype=np.uint16)
    for j, tok in enumerate(toks):
        if not (tok.isascii() and tok.isdigit()):  # no sign, '_' or non-ASCII digits
            raise ValueError(f"{where}: '{key}' field {j + 1}: {tok[:20]!r} is not a decimal number")
        v = int(tok, 10)
        if not 0 <= v < 1024:
            raise ValueError(f"{where}: '{key}' field {j + 1}: symbol {v} is outside 0..1023")
        out[j] = v
    return out


def parse_kat(text: str, source: str = "<string>") -> KatFile:
    """Parse the text of a known-answer file (see the module docstring); raises ValueError."""
    code: RSCode | None = None
    enc: list[EncodeVector] = []
    dec: list[DecodeVector] = []
    comments: list[str] = []
    pending: dict[str, tuple[int, object]] = {}
    expect: str | None = None  # key that must come next
    pending_line = 0

    def need_code(where: str) -> RSCode:
        if code is None:
            raise ValueError(f"{where}: 'code: N K' must come before any vector")
        return code

    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        where = f"{source}:{lineno}"
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            comments.append(line[1:].strip())
            continue
        line = line.split("#", 1)[0].strip()
        if ":" not in line:
            raise ValueError(f"{where}: expected 'key: value', got {raw.strip()[:40]!r}")
        key, value = (s.strip() for s in line.split(":", 1))
        if expect is not None and key != expect:
            raise ValueError(f"{where}: expected '{expect}:' after line {pending_line}, got '{key}:'")
        if key == "code":
            if code is not None:
                raise ValueError(f"{where}: 'code' given twice")
            parts = value.split()
            try:
                n, k = (int(p) for p in parts)
            except ValueError:
                raise ValueError(f"{where}: 'code' needs two integers 'N K', got {value!r}") from None
            try:
                code = RSCode(n, k)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        elif key == "name":
            c = need_code(where)
            code = RSCode(c.n, c.k, value)
        elif key == "field":
            if " ".join(value.split()) != FIELD_POLY_TEXT:
                raise ValueError(f"{where}: field polynomial must be {FIELD_POLY_TEXT!r}, got {value!r}")
        elif key == "first_root":
            if value != "0":
                raise ValueError(f"{where}: only first_root 0 (roots alpha^0..alpha^(2t-1)) is supported, got {value!r}")
        elif key == "message":
            c = need_code(where)
            pending = {"message": (lineno, _symbols(value, c.k, where, key))}
            pending_line = lineno
            expect = "codeword"
        elif key == "codeword":
            c = need_code(where)
            if "message" not in pending:
                raise ValueError(f"{where}: 'codeword' without a preceding 'message'")
            line0, msg = pending["message"]
            enc.append(EncodeVector(msg, _symbols(value, c.n, where, key), line0))
            pending, expect = {}, None
        elif key == "received":
            c = need_code(where)
            pending = {"received": (lineno, _symbols(value, c.n, where, key))}
            pending_line = lineno
            expect = "decoded"
        elif key == "decoded":
            c = need_code(where)
            if "received" not in pending:
                raise ValueError(f"{where}: 'decoded' without a preceding 'received'")
            pending["decoded"] = (lineno, _symbols(value, c.n, where, key))
            expect = "n_corrected"
        elif key == "n_corrected":
            c = need_code(where)
            if "decoded" not in pending:
                raise ValueError(f"{where}: 'n_corrected' without preceding 'received'/'decoded'")
            if not re.fullmatch(r"-?[0-9]+", value):
                raise ValueError(f"{where}: 'n_corrected' must be an integer, got {value[:20]!r}")
            nc = int(value)
            if not -1 <= nc <= c.t:
                raise ValueError(f"{where}: 'n_corrected' must be in -1..{c.t}, got {nc}")
            line0, rx = pending["received"]
            dec.append(DecodeVector(rx, pending["decoded"][1], nc, line0))
            pending, expect = {}, None
        else:
            raise ValueError(f"{where}: unknown key {key!r}")
    if expect is not None:
        raise ValueError(f"{source}:{len(lines)}: file ends before '{expect}:' (vector started at line {pending_line})")
    if code is None:
        raise ValueError(f"{source}: no 'code: N K' line")
    return KatFile(code, tuple(enc), tuple(dec), source, tuple(comments))


def read_kat(path: str | os.PathLike) -> KatFile:
    """Read a known-answer file; ValueError names the file, line and field of any problem."""
    p = Path(path)
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "\x00" in text:
        raise ValueError(f"{p}: binary data (NUL byte): not a known-answer text file")
    return parse_kat(text, str(p))


def check_kat(kat: KatFile) -> list[str]:
    """Replay every vector through :func:`encode` / :func:`decode`; returns mismatch descriptions."""
    problems: list[str] = []
    code = kat.code
    if kat.encode:
        msgs = np.stack([v.message for v in kat.encode])
        got = encode(code, msgs)
        for v, g in zip(kat.encode, got):
            if not np.array_equal(g, v.codeword):
                bad = np.flatnonzero(g != v.codeword)
                problems.append(
                    f"{kat.source}:{v.line}: encode mismatch at {len(bad)} symbols, first index {bad[0]} "
                    f"(the file has {int(v.codeword[bad[0]])}, phy802 computes {int(g[bad[0]])})"
                )
    if kat.decode:
        rx = np.stack([v.received for v in kat.decode])
        got, nc = decode(code, rx)
        for v, g, c in zip(kat.decode, got, nc):
            if int(c) != v.n_corrected:
                problems.append(f"{kat.source}:{v.line}: n_corrected: the file has {v.n_corrected}, phy802 computes {int(c)}")
            elif not np.array_equal(g, v.decoded):
                bad = np.flatnonzero(g != v.decoded)
                problems.append(f"{kat.source}:{v.line}: decoded word differs at {len(bad)} symbols, first index {bad[0]}")
    return problems


def format_kat(kat: KatFile, header: str = "") -> str:
    """Text of a known-answer file; ``header`` lines are written as comments first."""
    out = [f"# {h}" if h else "#" for h in header.splitlines()]
    code = kat.code
    out += [f"code: {code.n} {code.k}"]
    if code.name:
        out.append(f"name: {code.name}")
    out += [f"field: {FIELD_POLY_TEXT}", "first_root: 0", ""]

    def sym(a: np.ndarray) -> str:
        return " ".join(str(int(x)) for x in a)

    for v in kat.encode:
        out += [f"message: {sym(v.message)}", f"codeword: {sym(v.codeword)}", ""]
    for v in kat.decode:
        out += [f"received: {sym(v.received)}", f"decoded: {sym(v.decoded)}", f"n_corrected: {v.n_corrected}", ""]
    return "\n".join(out)


def write_kat(path: str | os.PathLike, kat: KatFile, header: str = "") -> None:
    """Write :func:`format_kat` atomically."""
    from phy802.runtime.output import atomic_write_text

    atomic_write_text(path, format_kat(kat, header))


def generate_kat(code: RSCode, seed: int, n_random: int = 3) -> KatFile:
    """Vectors produced by this codec: the notes' message (k = 514 only), all-zero, all-1023 and
    ``n_random`` random messages; decode vectors with 0, 1, t//2, t and t+3 errors (the last is
    uncorrectable unless it happens to land near another codeword) and one designed
    miscorrection (another codeword plus t errors)."""
    from phy802._rng import as_generator

    rng = as_generator(seed)
    msgs = []
    if code.k == 514:
        msgs.append((19 + 73 * np.arange(code.k)) % 1024)  # ieee802_3bs_notes.md 4.1
    msgs += [np.zeros(code.k, np.int64), np.full(code.k, 1023)]
    msgs += list(rng.integers(0, 1024, size=(n_random, code.k)))
    msgs_arr = np.stack(msgs).astype(np.uint16)
    cws = encode(code, msgs_arr)
    enc = tuple(EncodeVector(m, c) for m, c in zip(msgs_arr, cws))
    sent = encode(code, rng.integers(0, 1024, size=(6, code.k)))
    recv = sent.copy()
    for r, n_err in enumerate([0, 1, max(1, code.t // 2), code.t, code.t + 3]):
        pos = rng.choice(code.n, size=n_err, replace=False)
        recv[r, pos] ^= rng.integers(1, 1024, size=n_err).astype(np.uint16)
    pos = rng.choice(code.n, size=code.t, replace=False)
    recv[5] = sent[0]  # designed miscorrection: codeword sent[0] + t errors, received for sent[5]
    recv[5, pos] ^= rng.integers(1, 1024, size=code.t).astype(np.uint16)
    got, nc = decode(code, recv)
    dec = tuple(DecodeVector(r, g, int(c)) for r, g, c in zip(recv, got, nc))
    return KatFile(code, enc, dec)


#: file name -> (code, seed) of the files kept in ``vectors/rs/``
STANDARD_FILES = {"kp4.txt": ("KP4", 5440), "kr4.txt": ("KR4", 5280), "rs272.txt": ("RS272", 2720)}

_HEADER = """phy802 Reed-Solomon known-answer vectors ({code}), format described in vectors/rs/README.md.
Code: RS({n},{k}), t={t}, shortened from RS(1023,{kfull}); GF(2^10) with p(x) = x^10 + x^3 + 1, alpha = x.
Generator g(x) = prod_(j=0..{last}) (x - alpha^j) (first consecutive root 0).
Symbols: decimal, polynomial basis (bit i = coefficient of alpha^i); index 0 of a line is the
coefficient of x^(len-1), first in time; systematic, parity (2t symbols) last.
Origin: generated by phy802.fec (phy802 vectors generate, seed {seed}) and
cross-checked with galois 0.4.x (ReedSolomon(1023, {kfull}, field=GF(2^10, x^10+x^3+1), alpha=2, c=0))
at generation time{notes}.
Decode vectors: 0, 1, t/2, t and t+3 random symbol errors, then a designed miscorrection
(another codeword plus t errors: the decoder returns that other codeword)."""


def _galois_check(kat: KatFile) -> None:
    """Cross-check every vector with galois (encode, and decode where it succeeds); raises on mismatch."""
    import galois

    GF = galois.GF(2**10, irreducible_poly="x^10 + x^3 + 1")
    rs = galois.ReedSolomon(1023, 1023 - kat.code.nparity, field=GF, alpha=GF(2), c=0)
    msgs = np.stack([v.message for v in kat.encode])
    if not np.array_equal(np.asarray(rs.encode(GF(msgs))), np.stack([v.codeword for v in kat.encode])):
        raise AssertionError("galois disagrees with an encode vector")
    rx = np.stack([v.received for v in kat.decode])
    ref, ref_n = rs.decode(GF(rx), output="codeword", errors=True)
    ref, ref_n = np.asarray(ref), np.asarray(ref_n)
    for v, r, c in zip(kat.decode, ref, ref_n):
        if int(c) != v.n_corrected or (c >= 0 and not np.array_equal(r, v.decoded)):
            raise AssertionError("galois disagrees with a decode vector")


def regenerate(folder: str | os.PathLike, *, cross_check: bool = True, on_file=None) -> list[Path]:
    """Write the standard files into ``folder`` (atomically), after a galois cross-check.

    ``on_file(path)``, if given, is called after each file is written (progress display)."""
    from .rs import KP4, KR4, RS272

    codes = {"KP4": KP4, "KR4": KR4, "RS272": RS272}
    written = []
    for fname, (cname, seed) in STANDARD_FILES.items():
        code = codes[cname]
        kat = generate_kat(code, seed)
        if cross_check:
            _galois_check(kat)
        header = _HEADER.format(code=cname, n=code.n, k=code.k, t=code.t, kfull=1023 - code.nparity,
                                last=code.nparity - 1, seed=seed,
                                notes="; encode vectors include the notes' message m[i] = (19 + 73 i) mod 1024"
                                if code.k == 514 else "")
        path = Path(folder) / fname
        write_kat(path, kat, header)
        again = read_kat(path)
        same = (again.code == kat.code and len(again.encode) == len(kat.encode)
                and len(again.decode) == len(kat.decode)
                and all(np.array_equal(a.message, b.message) and np.array_equal(a.codeword, b.codeword)
                        for a, b in zip(again.encode, kat.encode))
                and all(np.array_equal(a.received, b.received) and np.array_equal(a.decoded, b.decoded)
                        and a.n_corrected == b.n_corrected for a, b in zip(again.decode, kat.decode)))
        if not same or check_kat(again):  # pragma: no cover - would be a writer/reader bug
            raise AssertionError(f"{path}: re-read vectors differ")
        written.append(path)
        if on_file is not None:
            on_file(path)
    return written
