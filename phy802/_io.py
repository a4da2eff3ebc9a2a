"""Atomic file writes and output sets.

* :func:`atomic_open` / :func:`atomic_write_text` / :func:`atomic_write_bytes`: a temporary file in
  the target folder, fsync, then ``os.replace``; on any exit path other than success (an exception,
  Ctrl-C, SIGTERM via :class:`Terminated`, interpreter exit) the temporary file is removed.
* :func:`output_set`: a folder of outputs built in a temporary sibling folder and swapped in as a
  whole, so a killed run never leaves a folder mixing two runs; it refuses to replace a folder
  holding files it did not write.
* :func:`scratch_dir`: a temporary working folder removed on every exit path.

Files and folders get the permissions a plain ``open()`` / ``mkdir()`` would (umask respected).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterable, Iterator

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_bytes", "output_set", "scratch_dir",
           "Terminated", "OutputExistsError", "SET_MARKER"]

SET_MARKER = ".phy802-output"


class Terminated(KeyboardInterrupt):
    """Raised by the CLI's SIGTERM handler, so cleanup runs as for Ctrl-C."""


class OutputExistsError(FileExistsError):
    """An output location holds data phy802 did not write; it is never replaced."""


# ------------------------------------------------------------------ temporaries removed at exit

_LIVE: dict[str, int] = {}  # path -> pid of the process that created it
_LIVE_LOCK = threading.Lock()


def _track(path: str) -> None:
    with _LIVE_LOCK:
        _LIVE[path] = os.getpid()


def _untrack(path: str) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(path, None)


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


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary file next to ``path``; on clean exit it replaces ``path`` atomically.

    A crash, exception, Ctrl-C or SIGTERM leaves any previous ``path`` untouched and removes the
    temporary file.  The file's ``name`` is the temporary path (other processes may write into it,
    e.g. :func:`protocol.trace.generate_trace`'s workers).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports modes 'w' and 'wb', not {mode!r}")
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "is a folder, expected a file path", str(target))
    _mkdirs(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    _track(tmp)
    try:
        os.close(fd)  # reopened by name, so that ``fh.name`` is the path
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the file the permissions a plain open() would (0666 & ~umask).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
        _untrack(tmp)
    except BaseException:
        _remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)


# ------------------------------------------------------------------ output sets

def _foreign_entries(target: Path, names: frozenset[str] | None) -> list[str]:
    """Entries of the folder ``target`` that no phy802 output set wrote."""
    ours: set[str] = {SET_MARKER}
    marker = target / SET_MARKER
    if marker.is_file():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            ours.update(ln.strip() for ln in marker.read_text(encoding="utf-8").splitlines() if ln.strip())
    if names is not None:
        ours.update(names)
    return sorted(e for e in os.listdir(target) if e not in ours)


def check_output_dir(path: str | os.PathLike, names: Iterable[str] | None = None) -> None:
    """Raise :class:`OutputExistsError` unless ``path`` is absent, an empty folder, or a folder whose
    every entry was written by an earlier phy802 output set (or is in ``names``)."""
    target = Path(path)
    if not target.exists() and not target.is_symlink():
        return
    if not target.is_dir() or target.is_symlink():
        raise OutputExistsError(17, "exists and is not a folder; phy802 will not replace it", str(target))
    foreign = _foreign_entries(target, None if names is None else frozenset(names))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" (+{len(foreign) - 5} more)" if len(foreign) > 5 else "")
        raise OutputExistsError(
            17, f"folder holds files phy802 did not write ({shown}); choose a new or empty folder", str(target))


@contextlib.contextmanager
def output_set(path: str | os.PathLike, names: Iterable[str] | None = None) -> Iterator[Path]:
    """Build a folder of outputs atomically: yields a temporary sibling folder to write into; on
    success it takes the place of ``path`` as a whole, on any failure it is removed.

    ``path`` may be absent, an empty folder, or a folder written by an earlier output set (its
    entries listed in its ``.phy802-output`` marker, or in ``names``); anything else raises
    :class:`OutputExistsError` before any work and is never touched.
    """
    target = Path(path)
    allowed = None if names is None else frozenset(names)
    check_output_dir(target, allowed)
    parent = target.parent
    _mkdirs(parent)
    tmp = tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=parent)
    _track(tmp)
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield Path(tmp)
        entries = sorted(e for e in os.listdir(tmp) if e != SET_MARKER)
        with open(os.path.join(tmp, SET_MARKER), "w", encoding="utf-8") as fh:
            fh.write("".join(f"{e}\n" for e in entries))
        os.chmod(os.path.join(tmp, SET_MARKER), 0o666 & ~_umask())
        check_output_dir(target, allowed)  # again: something may have appeared meanwhile
        if target.exists() and any(os.scandir(target)):
            old = tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".old", dir=parent)
            _track(old)
            os.rename(target, os.path.join(old, "set"))
            os.rename(tmp, target)
            _untrack(tmp)
            _remove(old)
        else:
            os.replace(tmp, target)  # absent, or an empty folder: one atomic rename
            _untrack(tmp)
    except BaseException:
        _remove(tmp)
        raise


@contextlib.contextmanager
def scratch_dir(prefix: str = "phy802-", dir: str | os.PathLike | None = None) -> Iterator[Path]:
    """A temporary working folder (in ``dir``, default the system's), removed on every exit path
    (and at interpreter exit)."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir=dir)
    _track(tmp)
    try:
        yield Path(tmp)
    finally:
        _remove(tmp)
