"""Worker processes that leave Ctrl-C to the parent: a process pool (:func:`worker_pool`), stopping it
at once on an interrupt (:func:`stop_pool`), and one call in a worker so that an interrupt is
handled while a compiled kernel runs (:func:`run_in_worker`); :class:`JobFailed`, what a job whose
worker processes died, raised or overran their deadline raises."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from phy802.runtime.interrupts import check_interrupt

__all__ = ["worker_pool", "stop_pool", "run_in_worker", "JobFailed"]


class JobFailed(RuntimeError):
    """A job ran and failed: a worker process died (killed, out of memory), raised, or passed the
    job's deadline. Not a bug of phy802 and not bad input: the command line exits 1 with this
    message on stderr (and, with ``--json``, a document saying so), whichever command ran the job."""


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
