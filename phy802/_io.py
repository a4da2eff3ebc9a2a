"""Interrupts, worker pools and bounded input files; the names of the output modules, re-exported.

* interrupts as a flag: the CLI's signal handler records a signal (:func:`note_signal`); loops
  poll it (:func:`check_interrupt`) outside compiled kernels;
* worker pools whose workers leave Ctrl-C to the parent (:func:`worker_pool`, :func:`stop_pool`,
  :func:`run_in_worker`);
* bounded, strict reading of input files (:func:`read_input_bytes`, :func:`read_json_file`).

Atomic writes and output sets are defined in :mod:`phy802._output` (the output rule) and
temporary folders in :mod:`phy802._tempfiles`; their names import from here too.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable

# one definition each, in the module whose job it is; imported here so that older import paths work
from phy802._output import (SET_MARKER, OutputExistsError, atomic_open, atomic_write_bytes,
                            atomic_write_text, check_output_dir, output_set)
from phy802._tempfiles import remove_temp, scratch_dir, track_temp_dir

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_bytes", "output_set", "check_output_dir", "scratch_dir",
           "Terminated", "Interrupted", "OutputExistsError", "SET_MARKER", "interrupt_requested", "check_interrupt",
           "worker_pool", "stop_pool", "run_in_worker", "track_temp_dir", "remove_temp", "note_signal",
           "deferred_interrupts", "interrupts_deferred", "read_input_bytes", "read_json_file", "MAX_JSON_DEPTH"]


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
    between batches, outside compiled kernels."""
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
    kernel call: the worker is terminated and the interrupt re-raised here (the
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
    (``/dev/zero``, ...) and a larger file raise ``error`` naming the path."""
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
