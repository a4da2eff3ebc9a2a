"""Temporary files and folders that are removed on every exit path.

Each temporary path phy802 makes (an atomic write's temporary file, an output set being built, a
scratch folder) is tracked here and removed when its writer finishes, on an exception, and at
interpreter exit (:func:`atexit`), by the process that made it only (not a fork's parent).
Temporary names stay within the file system's NAME_MAX.  This module imports nothing of phy802:
:mod:`phy802.runtime.output` (the output rule, atomic writes) builds on its underscored helpers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Iterator

__all__ = ["track_temp_dir", "remove_temp", "scratch_dir"]

_LIVE: dict[str, int] = {}  # path -> pid of the process that created it
_LIVE_LOCK = threading.Lock()


_LIVE_DIRS: set[str] = set()  # real paths of folders phy802 is building (output sets, scratch)


def _track(path: str, folder: bool = False) -> None:
    with _LIVE_LOCK:
        _LIVE[path] = os.getpid()
        if folder:
            _LIVE_DIRS.add(os.path.realpath(path))


def _untrack(path: str) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(path, None)
        _LIVE_DIRS.discard(os.path.realpath(path))


def _in_live_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` lies inside a folder this process is building right now."""
    with _LIVE_LOCK:
        if not _LIVE_DIRS:
            return False
        live = [d for d in _LIVE_DIRS]
    real = os.path.realpath(os.path.dirname(os.path.abspath(os.fspath(path))))
    return any(real == d or real.startswith(d + os.sep) for d in live)


def _name_max(folder: str | os.PathLike) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def _short_prefix(name: str, suffix: str, folder: str | os.PathLike) -> str:
    """``.NAME.PID.`` cut so that the temporary name (plus mkstemp's 8 random characters and
    ``suffix``) stays within the file system's NAME_MAX."""
    tail = f".{os.getpid()}."
    room = _name_max(folder) - len(tail.encode()) - 1 - 8 - len(suffix.encode())
    cut = name
    while len(cut.encode("utf-8", "surrogateescape")) > room and cut:
        cut = cut[:-1]
    return f".{cut}{tail}"


def _mkdtemp(name: str, suffix: str, parent: str | os.PathLike) -> str:
    tmp = tempfile.mkdtemp(prefix=_short_prefix(name, suffix, parent), suffix=suffix, dir=parent)
    _track(tmp, folder=True)
    return tmp


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    _untrack(path)


@atexit.register
def _cleanup_at_exit() -> None:  # writers never closed (e.g. a generator abandoned by an exception)
    pid = os.getpid()
    with _LIVE_LOCK:
        paths = [p for p, owner in _LIVE.items() if owner == pid]  # not what a fork's parent made
    for p in paths:
        _remove(p)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _mkdirs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)  # mode 0o777 & ~umask


def track_temp_dir(prefix: str, dir: str | os.PathLike | None = None) -> str:
    """``tempfile.mkdtemp`` whose folder is also removed at interpreter exit (an interrupt in a
    caller's cleanup leaves nothing in ``$TMPDIR``); remove it with :func:`remove_temp`."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir=dir)
    _track(tmp, folder=True)
    return tmp


def remove_temp(path: str) -> None:
    """Remove a folder or file made by :func:`track_temp_dir` (or tracked otherwise)."""
    _remove(path)


@contextlib.contextmanager
def scratch_dir(prefix: str = "phy802-", dir: str | os.PathLike | None = None) -> Iterator[Path]:
    """A temporary working folder (in ``dir``, default the system's), removed on every exit path
    (and at interpreter exit)."""
    parent = dir if dir is not None else tempfile.gettempdir()
    short, limit = prefix, _name_max(parent) - 8  # mkdtemp adds 8 characters
    while len(short.encode("utf-8", "surrogateescape")) > limit and len(short) > 1:
        short = short[:-2] + short[-1]  # keep the prefix's last character (its separator)
    tmp = tempfile.mkdtemp(prefix=short, dir=dir)
    _track(tmp, folder=True)
    try:
        yield Path(tmp)
    finally:
        _remove(tmp)
