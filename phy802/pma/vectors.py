"""Known-answer vector files of the PMA (``vectors/pma/*.txt``): format, parser and checker.

Format (plain text, UTF-8): lines starting with ``#`` are comments (the header says where the
values come from); blank lines are ignored; every other line is one record of whitespace-separated
``key=value`` fields. Symbol and bit strings are written as digit strings (``0123...``). Kinds:

* ``kind=gray bits=AB symbol=S``: one row of the 120.5.7.1 Gray table.
* ``kind=precode initial=I input=G... output=P...``: 120.5.7.2 precoder (and its inverse).
* ``kind=prbsq pattern=NAME seed=S0..S(N-1) count=C symbols=...``: the first C symbols of a PRBSxQ.

:func:`verify_file` checks every record against this package and returns the failures; parse
errors raise :class:`VectorError` naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from phy802._kvrecords import VectorError, VectorRecord, VerifyResult, read_records, verify_records
from phy802._kvrecords import verify_dir as _verify_dir
from phy802.pma.pam4 import gray_demap, gray_map
from phy802.pma.precoder import precode, precode_decode
from phy802.pma.prbs import PATTERNS, prbsq

__all__ = ["VectorError", "VectorRecord", "VerifyResult", "read_vectors", "check_record", "verify_file", "verify_dir",
           "write_vectors"]

_REQUIRED = {
    "gray": ("bits", "symbol"),
    "precode": ("initial", "input", "output"),
    "prbsq": ("pattern", "seed", "count", "symbols"),
}





def _digits(rec: VectorRecord, key: str, maxdigit: int) -> np.ndarray:
    s = rec.fields[key]
    if not s or any(c not in "0123"[: maxdigit + 1] for c in s):
        raise VectorError(f"{rec.where()}: field {key}={s[:20]!r}: expected digits 0..{maxdigit}")
    return np.frombuffer(s.encode(), dtype=np.uint8) - ord("0")


def _int(rec: VectorRecord, key: str) -> int:
    try:
        return int(rec.fields[key])
    except ValueError:
        raise VectorError(f"{rec.where()}: field {key}={rec.fields[key]!r}: expected an integer") from None


def read_vectors(path: str | Path) -> list[VectorRecord]:
    """Parse a vector file into records; raises :class:`VectorError` (``file:line: ...``) or ``OSError``."""
    return read_records(path, _REQUIRED)


def check_record(rec: VectorRecord) -> str | None:
    """``None`` if the record matches this implementation, else a ``file:line: ...`` message."""
    if rec.kind == "gray":
        bits = _digits(rec, "bits", 1)
        sym = _digits(rec, "symbol", 3)
        if bits.size != 2 or sym.size != 1:
            raise VectorError(f"{rec.where()}: gray record needs bits=AB and one symbol digit")
        got = int(gray_map(bits)[0])
        back = gray_demap(sym)
        if got != int(sym[0]) or not np.array_equal(back, bits):
            return f"{rec.where()}: gray {rec.fields['bits']} -> the file has {sym[0]}, phy802 computes {got}"
        return None
    if rec.kind == "precode":
        init = _int(rec, "initial")
        if not 0 <= init <= 3:
            raise VectorError(f"{rec.where()}: field initial={init}: expected 0..3")
        g, p = _digits(rec, "input", 3), _digits(rec, "output", 3)
        if g.size != p.size:
            raise VectorError(f"{rec.where()}: input and output lengths differ ({g.size} vs {p.size})")
        got = precode(g, init)
        if not np.array_equal(got, p):
            j = int(np.argmax(got != p))
            return f"{rec.where()}: precode differs first at symbol {j}: the file has {p[j]}, phy802 computes {got[j]}"
        if not np.array_equal(precode_decode(p, init), g):
            return f"{rec.where()}: precoder decode does not invert the output"
        return None
    if rec.kind == "prbsq":
        name = rec.fields["pattern"]
        if name not in PATTERNS:
            raise VectorError(f"{rec.where()}: field pattern={name!r}: expected one of {', '.join(PATTERNS)}")
        count = _int(rec, "count")
        sym = _digits(rec, "symbols", 3)
        if sym.size != count:
            raise VectorError(f"{rec.where()}: count={count} but {sym.size} symbols given")
        try:
            got = prbsq(name, count, rec.fields["seed"])
        except ValueError as exc:
            raise VectorError(f"{rec.where()}: field seed: {exc}") from None
        if not np.array_equal(got, sym):
            j = int(np.argmax(got != sym))
            return f"{rec.where()}: {name} differs first at symbol {j}: the file has {sym[j]}, phy802 computes {got[j]}"
        return None
    raise VectorError(f"{rec.where()}: unknown kind {rec.kind!r}")  # pragma: no cover


def verify_file(path: str | Path) -> VerifyResult:
    """Check every record of one file; parse errors raise :class:`VectorError`."""
    return verify_records(path, read_vectors(path), check_record)


def verify_dir(directory: str | Path) -> list[VerifyResult]:
    """:func:`verify_file` for every ``*.txt`` in ``directory`` (sorted by name)."""
    return _verify_dir(directory, verify_file)


_PRECODE_CASES = (
    (0, "0123000331221032"),
    (1, "0000111122223333"),
    (2, "32103210"),
    (3, "1"),
)


def write_vectors(directory: str | Path) -> list[Path]:
    """Regenerate ``gray_map.txt``, ``precoder.txt`` and ``prbs{9,13,31}q.txt`` from this package (atomically).

    The checked-in ``prbs9q.txt`` is the sequence printed in the standard; a regenerated copy equals it
    exactly when the emulator is right (the vector tests check that), so regeneration loses nothing.
    """
    from phy802.runtime.output import atomic_write_text

    out = Path(directory)
    made = "Regenerated by `phy802 vectors generate` from phy802.pma (format: phy802/pma/vectors.py)."
    files = {
        "gray_map.txt": (
            ["PAM4 Gray map, IEEE 802.3 120.5.7.1; bit A is first in time; symbols are level indices 0..3.", made],
            [f"kind=gray bits={a}{b} symbol={int(gray_map(np.array([a, b], np.uint8))[0])}"
             for a, b in ((0, 0), (0, 1), (1, 1), (1, 0))],
        ),
        "precoder.txt": (
            ["1/(1+D) mod 4 precoder, IEEE 802.3 120.5.7.2: P(j) = (G(j) - P(j-1)) mod 4, P(-1) = initial.", made],
            [f"kind=precode initial={i} input={g} output="
             + "".join(map(str, precode(np.frombuffer(g.encode(), np.uint8) - 48, i))) for i, g in _PRECODE_CASES],
        ),
    }
    for name in ("prbs9q", "prbs13q", "prbs31q"):
        deg = PATTERNS[name].degree
        count = 511 if name == "prbs9q" else 1000
        seeds = ("1" * deg,) if name == "prbs9q" else tuple(dict.fromkeys(
            (PATTERNS[name].seed, "1" * deg, "1" + "0" * (deg - 1), "0" * (deg - 1) + "1")))
        files[f"{name}.txt"] = (
            [f"{name.upper()} test pattern, IEEE 802.3 120.5.11.2: {PATTERNS[name].polynomial}, seed S0..S{deg - 1}"
             " as written; bit pairs {A, B} Gray mapped.", made],
            [f"kind=prbsq pattern={name} seed={seed} count={count} symbols="
             + "".join(map(str, prbsq(name, count, seed))) for seed in seeds],
        )
    written = []
    for name, (header, lines) in files.items():
        path = out / name
        atomic_write_text(path, "".join(f"# {h}\n" for h in header) + "".join(f"{ln}\n" for ln in lines))
        written.append(path)
    return written
