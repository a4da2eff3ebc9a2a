"""The ``key=value`` record format shared by the PCS and PMA known-answer files.

Plain UTF-8 text: ``#`` lines are comments (each file's header states inputs, conventions and
origin), blank lines are ignored, every other line is one record of whitespace-separated
``key=value`` fields with a ``kind``. Each block's ``vectors`` module owns its kinds and checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["VectorError", "VectorRecord", "VerifyResult", "read_records", "verify_records", "verify_dir"]


class VectorError(ValueError):
    """A malformed vector file; the message starts with ``file:line:``."""


@dataclass(frozen=True, slots=True)
class VectorRecord:
    path: str
    line: int
    fields: dict = field(hash=False)

    @property
    def kind(self) -> str:
        return self.fields["kind"]

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class VerifyResult:
    path: str
    n_records: int
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures and self.n_records > 0


def _lines(path: Path):
    """``(line number, line)`` of a UTF-8 text file; binary/non-UTF-8 content is a VectorError."""
    with open(path, encoding="utf-8") as fh:
        lineno = 0
        try:
            for lineno, raw in enumerate(fh, 1):
                if "\x00" in raw:
                    raise VectorError(f"{path}:{lineno}: binary data (NUL byte): not a text vector file")
                yield lineno, raw
        except UnicodeDecodeError as exc:
            raise VectorError(f"{path}:{lineno + 1}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_records(path: str | Path, required: Mapping[str, tuple[str, ...]],
                 optional: Mapping[str, tuple[str, ...]] | None = None) -> list[VectorRecord]:
    """Parse ``path``; ``required`` maps each allowed kind to its mandatory fields, ``optional`` to
    the fields it may also carry. Any other field is an error (a misspelt key must not pass).

    Raises :class:`VectorError` (``file:line: ...``) or ``OSError``.
    """
    path = Path(path)
    optional = optional or {}
    records = []
    for lineno, raw in _lines(path):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = {}
        for tok in line.split():
            key, sep, value = tok.partition("=")
            if not sep or not key:
                raise VectorError(f"{path}:{lineno}: expected key=value, got {tok[:30]!r}")
            if key in fields:
                raise VectorError(f"{path}:{lineno}: duplicate field {key!r}")
            fields[key] = value
        kind = fields.get("kind")
        if kind not in required:
            raise VectorError(f"{path}:{lineno}: field kind={kind!r}: expected one of {', '.join(required)}")
        missing = [k for k in required[kind] if k not in fields]
        if missing:
            raise VectorError(f"{path}:{lineno}: kind={kind} record lacks field(s) {', '.join(missing)}")
        known = {"kind", *required[kind], *optional.get(kind, ())}
        unknown = [k for k in fields if k not in known]
        if unknown:
            raise VectorError(f"{path}:{lineno}: kind={kind} record has unknown field(s) "
                              f"{', '.join(repr(k[:30]) for k in unknown)} (known: {', '.join(sorted(known))})")
        records.append(VectorRecord(str(path), lineno, fields))
    return records


def verify_records(path: str | Path, records: list[VectorRecord],
                   check: Callable[[VectorRecord], str | None]) -> VerifyResult:
    """Run ``check`` on every record; its non-``None`` answers are the failures."""
    return VerifyResult(str(path), len(records), tuple(msg for msg in map(check, records) if msg))


def verify_dir(directory: str | Path, verify_file: Callable[[Path], VerifyResult]) -> list[VerifyResult]:
    """``verify_file`` for every ``*.txt`` in ``directory`` (sorted by name)."""
    files = sorted(Path(directory).glob("*.txt"))
    if not files:
        raise VectorError(f"{directory}: no *.txt vector files")
    return [verify_file(f) for f in files]
