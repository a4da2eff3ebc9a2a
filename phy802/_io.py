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
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_bytes", "output_set", "check_output_dir", "scratch_dir",
           "Terminated", "Interrupted", "OutputExistsError", "SET_MARKER", "interrupt_requested", "check_interrupt",
           "worker_pool", "stop_pool", "run_in_worker", "track_temp_dir"]

SET_MARKER = ".phy802-output"  # the same name as phy802._output.SET_MARKER


class Terminated(KeyboardInterrupt):
    """Raised by the CLI's SIGTERM/SIGHUP handler, so cleanup runs as for Ctrl-C."""


class Interrupted(KeyboardInterrupt):
    """An interrupt a command has already dealt with; ``message`` is the one line the CLI prints."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------ interrupts as a flag

_SIGNALS: list[int] = []  # signals received by this process (the CLI's handler appends)


def note_signal(signum: int) -> None:
    """Record that ``signum`` arrived (the CLI's handler calls it; loops poll :func:`interrupt_requested`)."""
    _SIGNALS.append(int(signum))


def interrupt_requested() -> int | None:
    """The first signal (SIGINT/SIGTERM/SIGHUP) received, or ``None``."""
    return _SIGNALS[0] if _SIGNALS else None


def check_interrupt() -> None:
    """Raise ``KeyboardInterrupt`` (SIGINT) or :class:`Terminated` if a signal arrived: called
    between batches, outside compiled kernels (issue 28 item 12)."""
    sig = interrupt_requested()
    if sig is None:
        return
    import signal as _signal

    if sig == _signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(f"terminated by signal {sig}")


_DEFERRED: list[bool] = []  # depth of :func:`deferred_interrupts` blocks in this process


@contextlib.contextmanager
def deferred_interrupts():
    """Within the block the CLI's handler only records a signal; the block's loop raises it with
    :func:`check_interrupt` at a point of its choosing.  An exception raised by the handler at an
    arbitrary bytecode could leave a lock held (the trace writer's queue: a deadlock in abort) or
    land mid-update of the generator's buffers."""
    _DEFERRED.append(True)
    try:
        yield
    finally:
        _DEFERRED.pop()


def interrupts_deferred() -> bool:
    """True inside :func:`deferred_interrupts` (the CLI's handler then records, not raises)."""
    return bool(_DEFERRED)


def _worker_init() -> None:  # pragma: no cover - runs in worker processes
    """Worker processes leave Ctrl-C to the parent (no worker tracebacks) and die quietly when it
    terminates them."""
    import signal as _signal

    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    for s in (_signal.SIGTERM, getattr(_signal, "SIGHUP", None)):
        if s is not None:
            _signal.signal(s, _signal.SIG_DFL)


def worker_pool(max_workers: int | None = None):
    """A ``ProcessPoolExecutor`` whose workers ignore Ctrl-C (the parent handles it) -- stop it
    with :func:`stop_pool` on an interrupt."""
    import concurrent.futures as cf

    return cf.ProcessPoolExecutor(max_workers=max_workers, initializer=_worker_init)


def stop_pool(ex) -> None:
    """Cancel what has not started and terminate the worker processes now (an interrupt): no
    worker keeps computing a point nobody will read."""
    procs = list(getattr(ex, "_processes", {}) .values())
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(5)


def run_in_worker(fn: Callable[..., Any], /, *args: Any, **kw: Any) -> Any:
    """``fn(*args, **kw)`` computed in one worker process while this process waits in Python, so
    that Ctrl-C / SIGTERM is handled at once even when ``fn`` spends seconds inside one compiled
    kernel call: the worker is terminated and the interrupt re-raised here (issue 28 item 2; the
    CLI's handler would otherwise wait for the kernel to return).  ``fn`` and its arguments must
    pickle; the result is the same as calling ``fn`` here (same arguments, same seed)."""
    import concurrent.futures as cf

    ex = worker_pool(1)
    try:
        fut = ex.submit(fn, *args, **kw)
        while not fut.done():
            cf.wait([fut], timeout=0.1)  # the signal handler raises here, in Python
            check_interrupt()
        return fut.result()
    except BaseException:
        stop_pool(ex)
        raise
    finally:
        ex.shutdown(wait=True)


class OutputExistsError(FileExistsError):
    """An output location holds data phy802 did not write; it is never replaced."""


# ------------------------------------------------------------------ temporaries removed at exit

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
    ``suffix``) stays within the file system's NAME_MAX (issue 28 item 16)."""
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


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, force: bool | None = None,
                inputs=None, **kwargs) -> Iterator[IO]:
    """Open a temporary file next to ``path``; on clean exit it replaces ``path`` atomically.

    What may be written follows the one rule of :mod:`phy802._output` (checked on open and again
    before the rename): a device, FIFO, socket or link is never replaced, an existing file only if
    phy802 wrote it (``force`` -- default: the command's ``--force`` -- overrides; see there), and
    the written file's provenance is recorded.  A crash, exception, Ctrl-C or SIGTERM leaves any
    previous ``path`` untouched and removes the temporary file.  The file's ``name`` is the
    temporary path (other processes may write into it, e.g. :func:`protocol.trace.generate_trace`'s
    workers).
    """
    from phy802 import _output

    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports modes 'w' and 'wb', not {mode!r}")
    where, direct = _output.resolve_output_file(path, force=force, inputs=inputs)
    if direct:  # --force on a device or FIFO: written into, never replaced
        with open(where, mode, **kwargs) as fh:
            yield fh
        return
    target = Path(where)
    _mkdirs(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=_short_prefix(target.name, ".tmp", target.parent), suffix=".tmp",
                               dir=target.parent)
    _track(tmp)
    try:
        os.close(fd)  # reopened by name, so that ``fh.name`` is the path
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the file the permissions a plain open() would (0666 & ~umask).
        os.chmod(tmp, 0o666 & ~_umask())
        again, direct = _output.resolve_output_file(target, force=force, inputs=inputs)  # a race
        if direct or Path(again) != target:
            raise _output.OutputRefused(target, "changed into something else while it was written; not replaced")
        os.replace(tmp, target)
        _untrack(tmp)
        if not _in_live_dir(target):
            _output._record_file(target)
    except BaseException:
        _remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, **kw) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (under the rule of :func:`atomic_open`)."""
    with atomic_open(path, "w", encoding="utf-8", **kw) as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, **kw) -> None:
    """Write ``data`` to ``path`` atomically (under the rule of :func:`atomic_open`)."""
    with atomic_open(path, "wb", **kw) as fh:
        fh.write(data)


# ------------------------------------------------------------------ output sets (the rule: phy802._output)

def check_output_dir(path: str | os.PathLike, kind: str = "output", **kw) -> None:
    """See :func:`phy802._output.check_output_dir`."""
    from phy802._output import check_output_dir as check

    check(path, kind, **kw)


def output_set(path: str | os.PathLike, kind: str = "output", **kw):
    """See :func:`phy802._output.output_set` (the one place output folders are built)."""
    from phy802._output import output_set as build

    return build(path, kind, **kw)


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


# ------------------------------------------------------------------ bounded input files

MAX_JSON_DEPTH = 64  # no phy802 JSON format nests deeper than a handful of levels


def _json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """False when brackets outside strings nest deeper than ``limit`` (cheap: regex-free scan of
    the bracket characters only)."""
    import re

    depth = 0
    # strings removed first (escapes included), so brackets inside them do not count
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', "", text):
        if ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def read_input_bytes(path: str | os.PathLike, limit: int, *, what: str = "file", error=ValueError) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; a FIFO, device, socket or folder
    (``/dev/zero``, ...) and a larger file raise ``error`` naming the path (issue 28 item 14)."""
    import stat as _stat

    p = os.fspath(path)
    st = os.stat(p)
    if _stat.S_ISDIR(st.st_mode):
        raise error(f"{p}: is a folder, expected a {what}")
    if not _stat.S_ISREG(st.st_mode):
        raise error(f"{p}: is not a regular file (a device, FIFO or socket); expected a {what}")
    if st.st_size > limit:
        raise error(f"{p}: {st.st_size} bytes is too large for a {what} (limit {limit})")
    with open(p, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise error(f"{p}: more than {limit} bytes, too large for a {what}")
    return data


def read_input_text(path: str | os.PathLike, limit: int, *, what: str = "file", error=ValueError) -> str:
    """:func:`read_input_bytes` decoded as strict UTF-8 (``error`` naming the file and byte otherwise)."""
    p = os.fspath(path)
    data = read_input_bytes(p, limit, what=what, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_json_file(path: str | os.PathLike, limit: int, *, what: str = "JSON file", error=ValueError):
    """Parse the JSON file ``path`` strictly: a regular file of at most ``limit`` bytes, UTF-8, no
    NaN/Infinity constants, nesting at most :data:`MAX_JSON_DEPTH` deep; else ``error`` naming it."""
    p = os.fspath(path)
    text = read_input_text(p, limit, what=what, error=error)
    if not _json_depth_ok(text):
        raise error(f"{p}: JSON nested deeper than {MAX_JSON_DEPTH} levels; not a {what}")

    def constant(c):
        raise error(f"{p}: non-JSON constant {c}")

    try:
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise error(f"{p}: not a {what} ({exc})") from None
    except RecursionError:
        raise error(f"{p}: JSON nested too deeply; not a {what}") from None
