"""PCS lanes files: the on-disk form of ``uint16[n_lanes, n_symbols]`` lanes plus the PCS settings
needed to receive them (used by ``phy802 pcs tx`` / ``phy802 pcs rx``).

Text form (``*.txt``; key=value records like the vector files)::

    # comments
    kind=config rate=400G am_spacing=163840 scrambler_seed=0x24E6959D0FA5DBD prbs9_seed=0x1FF am_status=0
    kind=lane row=0 symbols=666,402,...      # one record per input row, 10-bit symbols in time order

Binary form (``*.npz``): arrays ``lanes`` (uint16) and ``config`` (a 0-d string array holding the
config record's text).  Errors name the file and line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from phy802._io import atomic_open
from phy802.pcs.config import PcsConfig

__all__ = ["write_lanes", "read_lanes", "LanesFileError"]

_KEYS = ("rate", "am_spacing", "scrambler_seed", "prbs9_seed", "am_status")


class LanesFileError(ValueError):
    """A malformed lanes file; the message starts with ``file:line:``."""


def _config_record(cfg: PcsConfig) -> str:
    return (f"kind=config rate={cfg.rate} am_spacing={cfg.spacing} scrambler_seed=0x{cfg.scrambler_seed:015X} "
            f"prbs9_seed=0x{cfg.prbs9_seed:03X} am_status={cfg.am_status}")


def write_lanes(path: str | Path, lanes: NDArray[np.uint16], config: PcsConfig, comment: str = "") -> None:
    """Write lanes (atomically) as text or ``.npz`` depending on the suffix."""
    lanes = np.asarray(lanes)
    if lanes.ndim != 2 or lanes.dtype.kind not in "ui" or (lanes.size and lanes.max() > 1023):
        raise ValueError("lanes must be a 2-D array of 10-bit symbols")
    path = Path(path)
    if path.suffix == ".npz":
        with atomic_open(path, "wb") as fh:
            np.savez_compressed(fh, lanes=lanes.astype(np.uint16), config=np.array(_config_record(config)))
        return
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write("# phy802 PCS lanes file (Clause 119): one 'kind=lane' record per input row; symbols are\n"
                 "# 10-bit values in time order, each sent bit 0 first.  The config record gives the PCS settings.\n")
        for line in comment.splitlines():
            fh.write(f"# {line}\n")
        fh.write(_config_record(config) + "\n")
        for r, row in enumerate(lanes):
            fh.write(f"kind=lane row={r} symbols=" + ",".join(map(str, row.tolist())) + "\n")


def _parse_config(text: str, where: str) -> dict:
    fields = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if not sep:
            raise LanesFileError(f"{where}: expected key=value, got {tok[:30]!r}")
        fields[k] = v
    if fields.get("kind") != "config":
        raise LanesFileError(f"{where}: expected a kind=config record")
    missing = [k for k in _KEYS if k not in fields]
    if missing:
        raise LanesFileError(f"{where}: config record lacks field(s) {', '.join(missing)}")
    out = {"rate": fields["rate"]}
    for k in _KEYS[1:]:
        try:
            out[k] = int(fields[k], 0)
        except ValueError:
            raise LanesFileError(f"{where}: field {k}={fields[k]!r}: expected an integer") from None
    return out


def read_lanes(path: str | Path) -> tuple[NDArray[np.uint16], dict]:
    """Read a lanes file: ``(lanes uint16[rows, n], config fields dict)`` (for ``PcsConfig(**d)``)."""
    path = Path(path)
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                lanes, cfg = z["lanes"], str(z["config"])
        except KeyError as exc:
            raise LanesFileError(f"{path}: missing array {exc}") from None
        return lanes.astype(np.uint16), _parse_config(cfg, f"{path}:config")
    cfg, rows = None, []
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{lineno}"
            if line.startswith("kind=config"):
                cfg = _parse_config(line, where)
                continue
            if not line.startswith("kind=lane "):
                raise LanesFileError(f"{where}: expected a kind=config or kind=lane record")
            sym = line.rpartition("symbols=")[2]
            try:
                row = np.array([int(x) for x in sym.split(",")], np.int64) if sym else np.zeros(0, np.int64)
            except ValueError:
                raise LanesFileError(f"{where}: field symbols: expected comma-separated integers") from None
            if row.size and (row.min() < 0 or row.max() > 1023):
                raise LanesFileError(f"{where}: field symbols: values must be 0..1023")
            if rows and row.size != rows[0].size:
                raise LanesFileError(f"{where}: lane has {row.size} symbols, the first lane {rows[0].size}")
            rows.append(row)
    if cfg is None:
        raise LanesFileError(f"{path}: no kind=config record")
    if not rows:
        raise LanesFileError(f"{path}: no kind=lane records")
    return np.array(rows, np.uint16), cfg
