"""The Works the replay group returns: one over a future that raises what it holds
(:class:`_ReplayWork`), one over an inner Work without a future (:class:`_DeferredWork`), one for an
op whose data was lost (:class:`_FailedWork`), and the options that make an inner op asynchronous
(:func:`_async_opts`)."""

from __future__ import annotations

import atexit
import threading
import weakref
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from integration.registration import BACKEND_NAME
from integration.replay import LinkFailure

_POLL_S = 0.05  # while blocked in wait(), how often a rank looks for a peer's link failure

_WAIT_THREAD = "phy802-p2p-wait"  # the helper thread of _wait_polled (found by name at process end)


def _seconds(timeout) -> float | None:
    """A ``wait(timeout)`` argument in seconds (None: not given; torch passes 0 for "no timeout")."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return s if s > 0 else None


class _Completion:
    """The callable a replay Work chains on a future: ``fn(owner, f)``, ``owner`` held weakly.

    gloo runs a future's callbacks on its own worker thread, and that thread drops the callback
    after the chained future is complete (c10's ``Future::markCompleted``): torch's
    ``PythonFunctionGuard`` takes the GIL for it, which can be long after the waiting caller went on.
    Two ways this killed a process at exit:

    - the callback held the group's last reference: the group and its inner gloo backend were
      destroyed on that worker thread, whose destructor joins that very thread
      (``std::system_error: Resource deadlock avoided``, abort);
    - the caller destroyed the group (and its gloo backend) while holding the GIL, and
      ``~ProcessGroupGloo`` joined a worker still waiting for the GIL to drop a callback (a hang).

    So the owner is held weakly (``fn`` gets it as an argument, for the call only), and every
    callback that has run is counted until it is dropped: :func:`drain_completions`, called by the
    group's ``shutdown``/``abort`` and at exit, waits for the count to reach zero with the GIL
    released."""

    __slots__ = ("_fn", "_ref", "_ran")

    def __init__(self, fn: Callable[[Any, Any], Any], owner: Any = None) -> None:
        self._ran = False
        if owner is not None and any(getattr(c, "cell_contents", None) is owner
                                    for c in (getattr(fn, "__closure__", None) or ())):
            what = getattr(fn, "__qualname__", fn)
            raise TypeError(f"{BACKEND_NAME}: internal: the completion callback {what!r} closes over its group")
        self._fn = fn
        self._ref = weakref.ref(owner) if owner is not None else None

    def __call__(self, f):
        if not self._ran:
            self._ran = True
            _RAN_NOT_DROPPED.add(1)
        fn, ref = self._fn, self._ref
        # a raised exception keeps this frame in its traceback (held by the chained future): without
        # this object in it, the count still drops when the worker thread drops the callback
        del self
        if ref is None:
            return fn(f)
        owner = ref()
        if owner is None:  # nobody can wait on this op any more: its group was destroyed
            raise RuntimeError(f"{BACKEND_NAME}: the group was destroyed before its operation completed")
        return fn(owner, f)

    def __del__(self) -> None:
        if self._ran:
            _RAN_NOT_DROPPED.add(-1)


class _Counter:
    """A thread-safe count (callbacks that have run and are not yet dropped, on any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, k: int) -> None:
        with self._lock:
            self.value += k


# process-wide, as the threads that drop the callbacks are: one count for every group in the process
_RAN_NOT_DROPPED = _Counter()


def drain_completions(limit_s: float = 10.0) -> bool:
    """Wait, with the GIL released, until every completion callback that has run has been dropped by
    the thread that ran it (at most ``limit_s``); True when none is left. See :class:`_Completion`."""
    import time as _time

    end = _time.monotonic() + limit_s
    while _RAN_NOT_DROPPED.value > 0:
        if _time.monotonic() >= end:
            return False
        _time.sleep(0.0005)  # sleeping releases the GIL: the worker thread waiting for it can drop its callback
    return True


atexit.register(drain_completions)  # a group never shut down is destroyed in the interpreter's final clean-up


def first_value(f):
    """A completion returning the chained future's first tensor (a DDP hook's bucket)."""
    return f.value()[0]


def then_completion(fut, fn: Callable[..., Any], owner: Any = None):
    """``fut.then`` through a :class:`_Completion`: ``fn(owner, f)`` with ``owner`` held weakly (or
    ``fn(f)`` with no owner). Every callback the replay group chains on a future goes through here."""
    return fut.then(_Completion(fn, owner))


class _ReplayWork(dist.Work):
    """A Work over a ``torch.futures.Future``: ``wait`` raises what the future holds.

    (``_create_work_from_future`` reports success even when its future holds an exception,
    which hid dead peers and wrapper failures.) ``wait(timeout)`` waits at most ``timeout``
    (default: the group's timeout) and raises :class:`TimeoutError` past it.
    """

    def __init__(self, fut: torch.futures.Future, timeout_s: float, what: str, poll=None) -> None:
        super().__init__()
        self._fut = fut
        self._timeout_s = float(timeout_s)
        self._what = what
        self._poll = poll  # called every _POLL_S while blocked: raises a peer's LinkFailure

    def wait(self, timeout: timedelta | None = None) -> bool:
        limit = _seconds(timeout) or self._timeout_s
        if not self._fut.done():  # the event only when blocking (most Works are done by wait())
            import time as _time

            event = threading.Event()
            self._fut.add_done_callback(lambda _f: event.set())  # runs at once if done meanwhile
            end = _time.monotonic() + limit
            while not event.wait(min(_POLL_S, max(end - _time.monotonic(), 0.0))):
                if self._poll is not None:
                    self._poll(self._what)
                if _time.monotonic() >= end:
                    if self._poll is not None:
                        self._poll(self._what)
                    raise TimeoutError(f"{BACKEND_NAME}: {self._what} did not complete within {limit:g} s")
        # Future.wait(): re-raises the inner backend's or the wrapper's exception; for a CUDA
        # future (devices=[...]) it makes the current stream wait for the op's events, not the host
        try:
            self._fut.wait()
        except Exception:
            if self._poll is not None:
                # torch re-raises a callback's LinkFailure as a RuntimeError: a group in error
                # raises its LinkFailure itself instead (the RuntimeError is its __context__)
                self._poll(self._what)
            raise
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:  # noqa: BLE001 - the answer to the question asked
            return False
        return True

    def exception(self):
        if not self._fut.done():
            return None
        try:
            self._fut.value()
        except Exception as exc:  # noqa: BLE001 - returned, not swallowed
            return exc
        return None


def _wait_polled(inner, limit_s: float, what: str, poll) -> None:
    """``inner.wait`` bounded by ``limit_s``, while ``poll(what)`` runs every ``_POLL_S`` on the caller's thread.

    For inner Works that have no future and complete only in ``wait`` (gloo send/recv): the
    blocking wait runs on a daemon helper thread, so the caller can stop waiting as soon as the
    group's store says that a link failed (``poll`` raises :class:`LinkFailure`). Without this, a
    pipeline stage waiting on a stage that had stopped after a lost frame (3+ stages: the stage
    two hops away from the failed link) waited for the whole group timeout. The helper thread
    stays blocked in the inner wait until it ends (the peer's data or gloo's timeout); it is a
    daemon, so it holds no process at exit.
    """
    if poll is None:
        if inner.wait(timedelta(seconds=limit_s)) is False:
            raise TimeoutError(f"{BACKEND_NAME}: {what} did not complete within {limit_s:g} s")
        return
    import time as _time

    box: list = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append(("ok", inner.wait(timedelta(seconds=limit_s))))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller below
            box.append(("err", exc))
        done.set()

    threading.Thread(target=run, daemon=True, name=_WAIT_THREAD).start()
    end = _time.monotonic() + limit_s
    while not done.wait(_POLL_S):
        poll(what)  # raises if this or another rank of the group lost a frame
        if _time.monotonic() >= end + 5 * _POLL_S:  # the inner wait should have timed out by now
            raise TimeoutError(f"{BACKEND_NAME}: {what} did not complete within {limit_s:g} s")
    kind, val = box[0]
    if kind == "err":
        raise val
    if val is False:
        raise TimeoutError(f"{BACKEND_NAME}: {what} did not complete within {limit_s:g} s")


def end_process_if_waits_stuck(code: int) -> None:
    """End this process with ``code`` now (``os._exit``, after flushing stdout/stderr) if a helper
    thread of :func:`_wait_polled` is still blocked in a gloo send/recv that no peer will complete
    (its waiter raised :class:`LinkFailure` and the run stopped). Gloo has no way to cancel it
    (``abort()``/``shutdown()`` wake no pending receive, torch 2.13), and the interpreter's normal
    teardown with a thread inside gloo's wait calls ``std::terminate`` (SIGABRT, "terminate called
    without an active exception"). Call it last, once the process's results are written."""
    if any(t.name == _WAIT_THREAD and t.is_alive() for t in threading.enumerate()):
        import os
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class _DeferredWork(dist.Work):
    """A Work whose ``wait()`` waits on the inner Work (bounded by the group timeout), then runs ``finish`` once.

    For inner Works without a future (gloo send/recv/reduce_scatter). ``get_future()`` starts a
    helper thread that waits and completes the future (with the result or the exception). A
    failure of ``wait`` or ``finish`` is raised to every later ``wait`` as well.
    """

    def __init__(self, inner, finish, timeout_s: float, result: Any, what: str, before=None, poll=None,
                 ordered: bool = False, on_error=None) -> None:
        super().__init__()
        # a stream-ordered inner (NCCL): its wait() without a timeout orders the current stream and
        # does not block the host; on_error looks a peer's lost frame up when it fails
        self._ordered, self._on_error = ordered, on_error
        self._poll = poll  # a peer's link failure ends the wait at once (_wait_polled)
        self._inner = inner
        self._finish = finish
        self._before = before  # e.g. flush the queued p2p batch this op belongs to
        self._timeout_s = float(timeout_s)
        self._result = result
        self._what = what
        self._done = False
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._fut: torch.futures.Future | None = None

    def wait(self, timeout: timedelta | None = None) -> bool:
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._done:
                return True
            try:
                if self._before is not None:
                    self._before()
                inner = self._inner() if callable(self._inner) else self._inner
                limit = _seconds(timeout) or self._timeout_s
                if inner is not None and self._ordered:
                    try:
                        inner.wait()
                    except Exception:
                        if self._on_error is not None:
                            self._on_error()
                        raise
                elif inner is not None:
                    _wait_polled(inner, limit, self._what, self._poll)
                if self._finish is not None:
                    self._finish()
            except BaseException as exc:
                self._error = exc
                raise
            self._done = True
        return True

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._fut is not None:
                return self._fut
            # stream order (NCCL): waiting costs the host nothing, so the future is completed at
            # once, with the devices of its tensors; otherwise a helper thread waits and completes it
            self._fut = torch.futures.Future(devices=_cuda_devices(self._result)) if self._ordered else \
                torch.futures.Future()
        if self._ordered:
            self._complete(self._fut)
        else:
            threading.Thread(target=self._complete, args=(self._fut,), daemon=True, name="phy802-work").start()
        return self._fut

    def _complete(self, fut: torch.futures.Future) -> None:
        try:
            self.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the future's waiter
            fut.set_exception(exc)
        else:
            fut.set_result(self._result)

    def is_completed(self) -> bool:
        return self._done or self._error is not None

    def is_success(self) -> bool:
        return self._done and self._error is None

    def exception(self):
        return self._error


class _FailedWork(dist.Work):
    """The Work of an operation whose data was lost: waits for the inner Work, then raises ``exc``.

    The inner operation was issued (the peers need it); what this rank received is not delivered.
    ``get_future()`` holds the exception once the inner operation has completed.
    """

    def __init__(self, inner, exc: LinkFailure, timeout_s: float, ordered: bool = False) -> None:
        super().__init__()
        self._inner, self._exc, self._timeout_s = inner, exc, float(timeout_s)
        self._ordered = ordered  # NCCL's Work: wait() without a timeout (a timeout is a host sync)

    def wait(self, timeout: timedelta | None = None) -> bool:
        try:
            if self._inner is not None and self._ordered and not isinstance(self._inner, (_ReplayWork, _DeferredWork)):
                self._inner.wait()
            elif self._inner is not None:
                self._inner.wait(timeout if timeout is not None else timedelta(seconds=self._timeout_s))
        except Exception:  # noqa: BLE001 - the link failure is the error to report
            pass
        raise self._exc

    def get_future(self) -> torch.futures.Future:
        exc = self._exc

        def fail(_f):
            raise exc

        try:
            return then_completion(self._inner.get_future(), fail)
        except Exception:  # noqa: BLE001 - inner Work without a future (gloo send/recv)
            fut = torch.futures.Future()
            fut.set_exception(exc)
            return fut

    def is_completed(self) -> bool:
        try:
            return self._inner is None or bool(self._inner.is_completed())
        except Exception:  # noqa: BLE001
            return True

    def is_success(self) -> bool:
        return False

    def exception(self):
        return self._exc


def _cuda_devices(result: Any) -> list[torch.device]:
    ts = result if isinstance(result, (list, tuple)) else [result]
    flat = [u for t in ts for u in (t if isinstance(t, (list, tuple)) else [t])]
    return sorted({t.device for t in flat if isinstance(t, torch.Tensor) and t.device.type == "cuda"},
                  key=lambda d: d.index or 0)


def _done_work(result: Any, timeout_s: float = 0.0) -> dist.Work:
    devs = _cuda_devices(result)
    # a Future holding CUDA tensors must know their devices: it records an event on the current
    # stream at set_result, and wait() makes the waiter's stream wait for it (no host sync)
    fut = torch.futures.Future(devices=devs) if devs else torch.futures.Future()
    fut.set_result(result)
    return _ReplayWork(fut, timeout_s or 1.0, "completed operation")


def _async_opts(opts, kind):
    """``opts`` (a new ``kind()`` if None) with ``asyncOp`` True: a copy if the caller asked for a synchronous op.

    c10d's ``dist.all_reduce(t)`` (and the other collectives without ``async_op=True``) set
    ``opts.asyncOp = False`` (torch/distributed/distributed_c10d.py), and ``ProcessGroupNCCL`` then
    returns no Work (``return asyncOp ? work : nullptr``, ProcessGroupNCCL.cpp). The wrapper needs the
    inner Work to order its receive side after the op, so the inner op is always asynchronous; the
    wrapper's own Work serves the caller's ``wait()`` either way."""
    if opts is None:
        return kind()
    if getattr(opts, "asyncOp", True):
        return opts
    o = type(opts)()
    for name in dir(opts):
        if not name.startswith("_") and name != "asyncOp":
            try:
                setattr(o, name, getattr(opts, name))
            except (AttributeError, TypeError):  # methods and read-only properties
                pass
    o.asyncOp = True
    return o
