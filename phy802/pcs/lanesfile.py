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

import re
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from phy802.runtime.output import atomic_open
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


_INT = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+")
_SYMBOLS = re.compile(r"[0-9]+(?:,[0-9]+)*")
_MAX_TEXT_SYMBOLS = 1 << 26  # per lane; larger captures belong in the .npz form


def _parse_config(text: str, where: str) -> dict:
    fields = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if not sep:
            raise LanesFileError(f"{where}: expected key=value, got {tok[:30]!r}")
        if k in fields:
            raise LanesFileError(f"{where}: duplicate field {k[:30]!r}")
        fields[k] = v
    if fields.get("kind") != "config":
        raise LanesFileError(f"{where}: expected a kind=config record")
    missing = [k for k in _KEYS if k not in fields]
    if missing:
        raise LanesFileError(f"{where}: config record lacks field(s) {', '.join(missing)}")
    unknown = [k for k in fields if k not in _KEYS and k != "kind"]
    if unknown:
        raise LanesFileError(f"{where}: config record has unknown field(s) {', '.join(repr(k[:30]) for k in unknown)}")
    if fields["rate"] not in ("400G", "200G"):
        raise LanesFileError(f"{where}: field rate={fields['rate'][:30]!r}: expected 400G or 200G")
    out = {"rate": fields["rate"]}
    for k in _KEYS[1:]:
        if not _INT.fullmatch(fields[k]):
            raise LanesFileError(f"{where}: field {k}={fields[k][:30]!r}: expected an integer (decimal or 0x hex)")
        # int(s, 0) refuses decimal with leading zeros ("099"): the pattern above admits it as decimal
        v = fields[k]
        out[k] = int(v[2:], 16) if v[:2] in ("0x", "0X") else int(v, 10)
    return out


def _check_lanes(lanes: np.ndarray, where: str) -> NDArray[np.uint16]:
    if lanes.ndim != 2:
        raise LanesFileError(f"{where}: array 'lanes' must be 2-D (rows x symbols), got shape {lanes.shape}")
    if lanes.dtype.kind not in "ui":
        raise LanesFileError(f"{where}: array 'lanes' must hold integers (10-bit symbols), got dtype {lanes.dtype}")
    if lanes.shape[0] == 0 or lanes.shape[1] == 0:
        raise LanesFileError(f"{where}: array 'lanes' is empty (shape {lanes.shape})")
    if lanes.size and (int(lanes.min()) < 0 or int(lanes.max()) > 1023):
        raise LanesFileError(f"{where}: array 'lanes' holds values outside 0..1023")
    return lanes.astype(np.uint16)


def read_lanes(path: str | Path) -> tuple[NDArray[np.uint16], dict]:
    """Read a lanes file: ``(lanes uint16[rows, n], config fields dict)`` (for ``PcsConfig(**d)``).

    Raises :class:`LanesFileError` naming the file (and line/field) for any malformed content,
    including a truncated or forged ``.npz`` and binary data in a text file.
    """
    path = Path(path)
    if path.suffix == ".npz":
        import zipfile

        try:
            with np.load(path, allow_pickle=False) as z:
                names = set(z.files)
                if not {"lanes", "config"} <= names or names - {"lanes", "config"}:
                    raise LanesFileError(f"{path}: expected arrays 'lanes' and 'config', found {sorted(names)}")
                lanes, cfg_arr = z["lanes"], z["config"]
        except LanesFileError:
            raise
        except (zipfile.BadZipFile, EOFError, ValueError, KeyError, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise LanesFileError(f"{path}: not a readable lanes .npz ({type(exc).__name__}: {exc})") from None
        if cfg_arr.shape != () or cfg_arr.dtype.kind != "U":
            raise LanesFileError(f"{path}: array 'config' must be a 0-d string, got {cfg_arr.dtype} {cfg_arr.shape}")
        return _check_lanes(lanes, f"{path}"), _parse_config(str(cfg_arr), f"{path}:config")
    cfg, rows = None, []
    with open(path, encoding="utf-8") as fh:
        lineno = 0
        try:
            for lineno, raw in enumerate(fh, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                where = f"{path}:{lineno}"
                if "\x00" in line:
                    raise LanesFileError(f"{where}: binary data (NUL byte): not a text lanes file")
                if line.startswith("kind=config"):
                    if cfg is not None:
                        raise LanesFileError(f"{where}: a second kind=config record")
                    cfg = _parse_config(line, where)
                    continue
                toks = line.split()
                if len(toks) != 3 or toks[0] != "kind=lane" or not toks[1].startswith("row=") \
                        or not toks[2].startswith("symbols="):
                    raise LanesFileError(f"{where}: expected 'kind=lane row=R symbols=S,S,...' or a kind=config record")
                if toks[1][4:] != str(len(rows)):
                    raise LanesFileError(f"{where}: field row={toks[1][4:30]!r}: expected row={len(rows)} (rows in order)")
                sym = toks[2][8:]
                if not _SYMBOLS.fullmatch(sym):
                    raise LanesFileError(f"{where}: field symbols: expected comma-separated decimal integers 0..1023")
                if sym.count(",") >= _MAX_TEXT_SYMBOLS:
                    raise LanesFileError(f"{where}: field symbols: more than {_MAX_TEXT_SYMBOLS} symbols; use the .npz form")
                row = np.array(sym.split(","), dtype=np.int64)
                if row.max() > 1023:
                    raise LanesFileError(f"{where}: field symbols: values must be 0..1023")
                if rows and row.size != rows[0].size:
                    raise LanesFileError(f"{where}: lane has {row.size} symbols, the first lane {rows[0].size}")
                rows.append(row)
        except UnicodeDecodeError as exc:
            raise LanesFileError(f"{path}:{lineno + 1}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if cfg is None:
        raise LanesFileError(f"{path}: no kind=config record")
    if not rows:
        raise LanesFileError(f"{path}: no kind=lane records")
    return np.array(rows, np.uint16), cfg
