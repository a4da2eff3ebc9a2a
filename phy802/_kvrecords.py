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


def read_records(path: str | Path, required: Mapping[str, tuple[str, ...]]) -> list[VectorRecord]:
    """Parse ``path``; ``required`` maps each allowed kind to its mandatory fields.

    Raises :class:`VectorError` (``file:line: ...``) or ``OSError``.
    """
    path = Path(path)
    records = []
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
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
