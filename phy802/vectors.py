"""Known-answer files of every block: recognise, verify and regenerate them (CLI: ``phy802 vectors``).

Three text formats exist, each documented beside its files and parsed by its block's package:

* ``code: N K`` / ``message:`` / ``codeword:`` ... files: Reed-Solomon (:mod:`phy802.fec.vectors`);
* ``kind=...`` records of the PCS (:mod:`phy802.pcs.vectors`: 64b/66b, 257b, scrambler, AM groups,
  codeword pairs, PCS lanes, full transmit path);
* ``kind=...`` records of the PMA (:mod:`phy802.pma.vectors`: Gray map, precoder, PRBSxQ);
* ``inner: c177`` / ``message:`` / ``codeword:`` ... files: the 802.3dj Clause 177 inner code
  (:mod:`phy802.fec.inner`).

A file's family is recognised from its first record, so a user's own file (e.g. a hex dump from
hardware, rewritten in one of these formats) can live anywhere. A malformed file is reported with
file, line and reason, and the other files are still checked. Exit code 0 only when every file
passes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


__all__ = ["FileReport", "family_of", "verify_file", "verify_paths", "generate", "default_dir", "fec_hist_sources"]

_PCS_KINDS = {"codec66", "frames_tx", "transcode257", "scramble", "am_symbols", "am_group", "codeword_pair", "pair_lane"}
_PMA_KINDS = {"gray", "precode", "prbsq"}


@dataclass(frozen=True, slots=True)
class FileReport:
    """Outcome of one file: ``error`` is a parse/IO problem, ``failures`` are mismatching records."""

    path: str
    family: str
    n_records: int
    failures: tuple[str, ...]
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failures and self.n_records > 0

    def as_dict(self) -> dict:
        return {"path": self.path, "family": self.family, "records": self.n_records, "ok": self.ok,
                "failures": list(self.failures), "error": self.error, "seconds": round(self.seconds, 3)}


def default_dir() -> Path:
    """The repository's ``vectors/`` folder (next to the package in a source checkout)."""
    return Path(__file__).resolve().parent.parent / "vectors"


def family_of(path: str | Path) -> str:
    """``"fec"``, ``"pcs"`` or ``"pma"`` from the first record of ``path``; ValueError otherwise."""
    from phy802._kvrecords import _lines

    for lineno, raw in _lines(Path(path)):
        line = raw.split("#", 1)[0].strip() if raw.lstrip().startswith("#") else raw.strip()
        if not line:
            continue
        if line.startswith(("code:", "name:", "field:", "first_root:")):
            return "fec"
        if line.startswith("inner:"):
            return "c177"
        first = line.split(None, 1)[0]
        if first.startswith("kind="):
            kind = first[5:]
            if kind in _PCS_KINDS:
                return "pcs"
            if kind in _PMA_KINDS:
                return "pma"
            raise ValueError(f"{path}:{lineno}: unknown record kind={kind!r} "
                             f"(known: {', '.join(sorted(_PCS_KINDS | _PMA_KINDS))})")
        raise ValueError(f"{path}:{lineno}: not a phy802 vector file (expected 'code: N K', 'inner: c177' or 'kind=...', "
                         f"got {line[:40]!r})")
    raise ValueError(f"{path}: empty vector file (no records)")


#: the largest vector file read (bytes; the shipped ones are under 64 KB): a device or a stream that never
#: ends is refused up front, naming it, not read until memory runs out
MAX_VECTOR_FILE = 64 << 20


def _check_readable(path: str | Path) -> None:
    """A regular file of at most :data:`MAX_VECTOR_FILE` bytes; ValueError naming it otherwise."""
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: is not a regular file (a device, FIFO or socket); expected a vector file")
    if st.st_size > MAX_VECTOR_FILE:
        raise ValueError(f"{path}: {st.st_size} bytes, too large for a vector file (limit {MAX_VECTOR_FILE >> 20} MiB)")


def verify_file(path: str | Path) -> FileReport:
    """Check one file against the emulator; never raises for a bad file (the report says why)."""
    t0 = time.perf_counter()
    family = "?"
    try:
        _check_readable(path)
        family = family_of(path)
        if family == "fec":
            from phy802.fec.vectors import check_kat, read_kat

            kat = read_kat(path)
            n = len(kat.encode) + len(kat.decode)
            failures = tuple(check_kat(kat))
        elif family == "c177":
            from phy802.fec import inner

            recs = inner.parse_kat(Path(path).read_text(encoding="utf-8"), str(path))
            n, failures = len(recs), tuple(inner.check_kat(recs))
        else:
            mod = __import__(f"phy802.{family}.vectors", fromlist=["verify_file"])
            res = mod.verify_file(path)
            n, failures = res.n_records, tuple(res.failures)
        error = None if n else f"{path}: no records"
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        n, failures, error = 0, (), str(exc)
    return FileReport(str(path), family, n, failures, error, time.perf_counter() - t0)


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*.txt") if "_gen" not in f.parts)
            if not found:
                raise ValueError(f"{p}: folder holds no *.txt vector files")
            out.extend(found)
        else:  # a file named on the command line: missing, a link loop, a device or too big is bad input
            try:
                _check_readable(p)
            except FileNotFoundError:
                raise ValueError(f"{p}: no such file or folder") from None
            except OSError as exc:  # ELOOP (a symbolic link loop), EACCES, ...: say which
                raise ValueError(f"{p}: {exc.strerror or exc}") from None
            out.append(p)
    return out


def verify_paths(paths: Iterable[str | Path]) -> list[FileReport]:
    """:func:`verify_file` for every file, and every ``*.txt`` under every folder, in ``paths``."""
    return [verify_file(f) for f in _expand(paths)]


def generate_steps() -> int:
    """How many progress steps :func:`generate` reports (one per RS file, one for PCS, one for PMA,
    one per simulated FEC histogram in ``fec_hist/``)."""
    from phy802.fec.vectors import STANDARD_FILES

    return len(STANDARD_FILES) + 4 + len(fec_hist_sources())  # + the telemetry shapes' generator


SIMULATED_PREFIX = "phy802, SIMULATED (not a measurement): "


def fec_hist_sources() -> list[Path]:
    """The example FEC histograms of ``vectors/fec_hist/`` whose ``generated_by`` names the
    ``phy802 sweep`` command that made them."""
    import json

    out = []
    for f in sorted((default_dir() / "fec_hist").glob("*.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and str(doc.get("generated_by", "")).startswith(SIMULATED_PREFIX + "phy802 sweep "):
            out.append(f)
    return out


def generate(out: str | Path, on_step=None) -> list[Path]:
    """Regenerate every generated vector file under ``out`` (``rs/``, ``pcs/``, ``pma/``), atomically
    (the simulated FEC histograms of ``fec_hist/`` are re-made by ``phy802 vectors generate``, which
    re-runs the ``phy802 sweep`` command each names: :func:`fec_hist_sources`).

    Files transcribed from the standard (PRBS9Q, Gray map) are copied from the source tree.
    ``on_step(name)``, if given, is called after each of the :func:`generate_steps` steps (each RS
    file takes seconds: it is cross-checked against galois).
    """
    from phy802.fec.vectors import regenerate
    from phy802.pcs.vectors import write_vectors
    from phy802.pma.vectors import write_vectors as write_pma

    step = on_step if on_step is not None else (lambda name: None)
    out = Path(out)
    written = list(regenerate(out / "rs", on_file=lambda p: step(f"rs/{p.name}")))
    written += list(write_vectors(out / "pcs"))
    step("pcs/")
    written += list(write_pma(out / "pma"))
    step("pma/")
    from phy802.fec.inner import write_kat as write_c177

    written.append(write_c177(out / "c177"))
    step("c177/")
    return written
