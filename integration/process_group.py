"""A Python ``ProcessGroup`` that wraps a real backend and replays link bit errors on receive.

One-line change for a user::

    import integration.process_group as pgw
    pgw.register(ReplayConfig(source=SourceConfig(ber=1e-5, seed=1)))
    group = dist.new_group(backend="phy802")            # instead of the default group
    model = DDP(model, process_group=group)              # or PipelineStage(..., group=group)

The configuration travels in the environment variable ``PHY802_REPLAY`` (JSON), so processes
started by torchrun or on other nodes get it by setting that variable. The inner backends are
named per device type by ``ReplayConfig.inner_backends`` (default gloo for CPU tensors, NCCL for
CUDA tensors; :mod:`integration.inner`), made and registered on the group when it is made, for
every device type this machine has.

NCCL's contract (``ProcessGroupNCCL.cpp``; every inner but gloo is held to it,
:func:`integration.inner.stream_ordered`): an op with ``asyncOp=False`` returns no Work, so the
wrapper issues every inner op asynchronously; a future is done at enqueue, before the data has
landed and before any peer has issued the op, so nothing is read or applied in a completion
callback: the wrapper waits on the inner Work without a timeout (the current stream waits, the host
does not) and applies flips, guard and norms as device ops on the current stream after it; sums
and log values stay on the device until ``metrics``/``log`` is read
(:meth:`ReplayProcessGroup._apply_device`); CUDA results are held in ``Future(devices=...)``. A
send may wait for its receiver's recv on one stream, so point-to-point traffic goes over two more
inner communicators, one per direction (lower to higher rank, and back): two ranks that both send
first (1F1B's mixed batches, which ``batch_isend_irecv`` does not coalesce for a Python group)
never wait on each other's send. Inside a coalescing block the inner's outputs land only when the
block ends, so the receive side of each op runs then. CUDA graph capture is refused (a captured
step would replay one step's flip positions forever). Ops not modelled elsewhere:
``reduce`` (the root's result over link ``root+1 -> root``), ``gather`` (chunk ``j`` over
``j -> root``), ``scatter`` (``root -> rank``). torch's ``Backend`` cannot be subclassed in
Python (2.13: "No constructor defined"), so the per-device backends registered on the group are
the inner ones (for ``_get_backend`` and capability queries); every op still reaches this
class. :func:`ddp_comm_hook` applies the same link errors to a DDP built on a stock group.

Links. Each directed link ``src -> dst`` has its own error source, held by the destination rank
and seeded from ``(seed, src, dst)``. Offsets are reserved when an operation is *issued* (a
deterministic order on every rank) and applied when it completes, so a run is reproducible even
though gloo completes futures on its own threads.

* endpoint mode: the inner backend runs the collective; each rank then corrupts what it received:
  allreduce / reduce_scatter results over link ``(rank+1) % N -> rank``; broadcast over
  ``root -> rank``; allgather / all_to_all chunk ``j`` over ``j -> rank``.
* ring mode: allreduce, reduce_scatter_single and all_gather_single run as ring reduce-scatter /
  all-gather hops over the inner send/recv, laid out, directed and summed as gloo's ring (data
  flows from rank ``r+1`` to rank ``r``); hop ``h`` on link ``rank+1 -> rank`` gets that link's
  next errors. The other collectives keep endpoint semantics. At zero errors the ring allreduce
  and all-gather are bit-identical to gloo; the ring reduce_scatter_single sums in ring order,
  which for N >= 3 rounds differently from gloo's (non-ring) reduce_scatter.
* send/recv: corrupted by the receiver after the inner recv completes (link ``src -> dst``).

Delivery (``protocol.delivery``): each message is cut into RoCEv2 frames whose stream bits are
taken from the link's source; a frame whose headers are hit, that overlaps an error-block mark,
or (non-tolerant FEC modes: ``ieee``, ``detect_only``) has any checked bit hit is dropped and
resent over fresh stream bits; ``unequal`` removes flips on sign/exponent bits; tolerant modes
deliver the payload flips. Resent and lost frames are counted. A frame lost after
``retry_cnt + 1`` sends (``NCCL_IB_RETRY_CNT``, :class:`integration.replay.ReplayConfig`) fails its
operation: the Work raises :class:`LinkFailure` on the receiving rank, the group is then in error
(every later operation on that rank raises at issue, as a queue pair in the error state) and the
failure is written to the group's store, where the other ranks find it while they wait for the
failed rank: the key is written before the failed op's inner part is issued, and every rank
looks it up when an op completes, so all ranks fail the same collective (the key says which: the
collectives of a group are counted alike on every rank, and a look-up at collective ``k`` fails it
only for a loss at ``k`` or before, as a rank that ran ahead may already have written the key for
``k + 1``; and within ~50 ms while
blocked in ``wait``, a send/recv wait included: :func:`_wait_polled`; a rank whose own frames
were lost waits for its send/recv to finish or its peer to stop (:meth:`ReplayProcessGroup.mark_stopped`,
written by ``shutdown`` / ``abort``), and gloo's reduce_scatter, which has no future and
runs on every rank, is waited on as is). A group in error still issues every op to the inner backend, so no
peer is left with an unmatched op. Control messages (flags, shapes) fail like data. Nothing lost
is ever delivered as if it had arrived.
For the live generator and independent flips the same delivery runs as one Numba pass per
message over a read-ahead of the link's errors (:class:`integration.sources.BufferedLink`, equal
to ``deliver`` by test); trace sources go through ``deliver`` itself.

Traffic classes: allreduce and reduce_scatter -> ``gradients``; broadcast and allgather ->
``params``; all_to_all -> ``activations``; recv from a lower rank -> ``activations``, from a
higher rank -> ``activation_grads``; non-float tensors and one-element floats (flags, votes,
pipelining's warm-up exchange) -> ``control`` (non-float tensors are never modified), except
uint8 in ``all_gather_single`` (FSDP2's mixed-dtype parameter all-gather) -> ``params``.
float8_e4m3fn / float8_e5m2 are float payload like the others. Use
:meth:`ReplayProcessGroup.traffic` to override the class of the operations issued inside a block.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from datetime import timedelta
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d

from integration._kernels import receive_flips, sum_squares
from integration.commlog import CommLog, instrument
from integration.inner import backend_type, check_inner_backends, make_inner, served_devices, stream_ordered
from integration.replay import (
    _FLOAT8,
    _SIGN_EXP_BITS,
    LinkFailure,
    Metrics,
    InjectionLog,
    ReplayConfig,
    TRAFFIC_CLASSES,
    _WORD,
    corrupt_received,
    guard_flipped,
    guard_values,
    is_corruptible,
    is_float,
)
from integration.sources import BufferedLink, ErrorSource, NoErrors, error_free, make_link_source
from protocol.delivery import deliver
from protocol.modes import get_mode

__all__ = ["BACKEND_NAME", "ENV_VAR", "INNER_ENV_VAR", "ReplayProcessGroup", "register", "configure", "UnsupportedOperation",
           "LinkFailure", "ddp_comm_hook", "NOT_REGISTERED_HINT"]

BACKEND_NAME = "phy802"
ENV_VAR = "PHY802_REPLAY"
# legacy switches, read once where a group is made (_creator), as if in ReplayConfig.inner_backends:
INNER_ENV_VAR = "PHY802_INNER"  # "nccl": the inner backend of CUDA tensors is NCCL (the default anyway)
CUDA_INNER_ENV_VAR = "PHY802_CUDA_INNER"  # "gloo": CUDA tensors over gloo (ranks sharing one GPU)
_FORMAT = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}
_RING_TAG = 0x50_38  # tags of the ring hops, apart from user point-to-point traffic (tag 0)
_FAILED_KEY = "phy802_qp_error"  # in the group's (prefixed) store: set by a rank whose link lost a frame
# beside it, per rank, written just before it: "<collective index> <message>" of that rank's first loss
_FAILED_AT_KEY = "phy802_qp_error/{rank}"
_P2P_OPS = ("send", "recv")  # not counted as collectives: their order differs from rank to rank
_IN_BAND_OPS = (dist.ReduceOp.SUM, dist.ReduceOp.AVG)  # reductions that carry a NaN to every rank
_POLL_S = 0.05  # while blocked in wait(), how often a rank looks for a peer's link failure
_STOPPED_KEY = "phy802/stopped/{rank}"  # in the group's store: rank takes part in no further op (shutdown/abort)


class UnsupportedOperation(NotImplementedError):
    """A collective the replay wrapper does not model (raised on every rank, so nothing hangs)."""


def configure(config: ReplayConfig) -> None:
    """Put ``config`` in the environment (``PHY802_REPLAY``) for groups created afterwards."""
    os.environ[ENV_VAR] = json.dumps(config.to_dict())


def _config_from_env() -> ReplayConfig:
    raw = os.environ.get(ENV_VAR)
    if not raw:
        return ReplayConfig()
    try:
        return ReplayConfig.from_dict(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"environment variable {ENV_VAR}: bad replay configuration: {exc}") from exc


def _config_for_group() -> ReplayConfig:
    """The configuration of a group made now: ``PHY802_REPLAY``, with the legacy inner-backend switches applied."""
    import dataclasses

    config = _config_from_env()
    if os.environ.get(CUDA_INNER_ENV_VAR) == "gloo":  # ranks sharing one GPU: NCCL refuses duplicate devices
        config = dataclasses.replace(config, inner_backends={**config.inner_backends, "cuda": "gloo"})
    elif os.environ.get(INNER_ENV_VAR) == "nccl":
        config = dataclasses.replace(config, inner_backends={**config.inner_backends, "cuda": "nccl"})
    return config


def _creator(store, rank: int, size: int, timeout: timedelta):
    if not _REGISTERED and ENV_VAR not in os.environ:
        raise RuntimeError(NOT_REGISTERED_HINT)
    return ReplayProcessGroup(store, rank, size, timeout, _config_for_group())


#: what a group made without :func:`register` (and without ``PHY802_REPLAY``) says
NOT_REGISTERED_HINT = (f"{BACKEND_NAME}: the replay backend was not configured: call "
                       "integration.process_group.register(ReplayConfig(...)) on every rank before "
                       f"dist.new_group(backend={BACKEND_NAME!r}) (or set {ENV_VAR} for processes started elsewhere)")
_REGISTERED: list = []  # non-empty once register() ran in this process


def ddp_comm_hook(group, bucket):  # no annotations: DDP accepts only none or Future[Tensor] objects
    """A DDP communication hook (torch's ``register_comm_hook`` style, as its PowerSGD/allreduce hooks)
    that averages each gradient bucket through the ``phy802`` group ``group``.

    For a DDP built on a plain (e.g. NCCL) group, so that torch sees a stock ProcessGroup:
    ``ddp.register_comm_hook(phy802_group, ddp_comm_hook)``; the bucket all-reduces then carry
    the same link errors as with ``DDP(model, process_group=phy802_group)``.
    """
    buf = bucket.buffer()
    buf.div_(group.size())
    return group.allreduce([buf]).get_future().then(lambda f: f.value()[0])


def register(config: ReplayConfig | None = None) -> None:
    """Register the ``phy802`` backend and optionally :func:`configure` it.

    The inner backends of the configuration are checked first (:func:`integration.inner.check_inner_backends`:
    ``ValueError`` naming the value, before any rank blocks). The backend is registered for every
    device type the configuration serves on this machine (importing this module registers it for
    ``cpu`` only, so that a group made without ``register`` gets :data:`NOT_REGISTERED_HINT` instead
    of torch's "Unknown backend type").
    """
    if config is not None:
        check_inner_backends(config.inner_backends)
        configure(config)
    devices = served_devices(_config_for_group().inner_backends)
    _REGISTERED.append(True)
    _register_devices(devices)


def _register_devices(devices: list[str]) -> None:
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, _creator, devices=devices)
        return
    known = dist.Backend.backend_capability.setdefault(BACKEND_NAME, [])
    for d in devices:  # a later configuration that serves more device types (torch keeps the first list)
        if d not in known:
            known.append(d)


def _seconds(timeout) -> float | None:
    """A ``wait(timeout)`` argument in seconds (None: not given; torch passes 0 for "no timeout")."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    return s if s > 0 else None


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

    threading.Thread(target=run, daemon=True, name="phy802-p2p-wait").start()
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
        if self._ordered and self._fut is None:
            # stream order: waiting costs the host nothing on NCCL, so the future is done at once
            # (holding the exception if the op failed), with the devices of its tensors
            fut = torch.futures.Future(devices=_cuda_devices(self._result))
            try:
                self.wait()
            except BaseException as exc:  # noqa: BLE001 - handed to the future's waiter
                fut.set_exception(exc)
            else:
                fut.set_result(self._result)
            self._fut = fut
        with self._lock:
            if self._fut is None:
                self._fut = torch.futures.Future()

                def run(fut=self._fut):
                    try:
                        self.wait()
                    except BaseException as exc:  # noqa: BLE001 - handed to the future's waiter
                        fut.set_exception(exc)
                    else:
                        fut.set_result(self._result)

                threading.Thread(target=run, daemon=True, name="phy802-work").start()
            return self._fut

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
            return self._inner.get_future().then(fail)
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


def _op(fn):
    """Decorate a public op: refuse it while the group is in error; fail it if its data was lost.

    Delivery is decided when an op is issued (:meth:`ReplayProcessGroup._reserve`, on the
    caller's thread), so the loss of a frame is known before the op returns: the op still runs
    on the inner backend (the peers take part in it), and its Work raises :class:`LinkFailure`.
    A group in error keeps issuing every op to the inner backend (so no peer is left with an
    unmatched op, which would hang it, or abort its process at exit) and fails each one.
    Nested ops (coalesced forms) report to the outermost one. Each outermost collective gets the
    next index of the group (``tl.coll``): every rank issues a group's collectives in the same order
    (c10d requires it), so the index names the same collective on every rank, and a failure found
    in the store applies from the index at which it was lost (:meth:`ReplayProcessGroup._peer_loss`).
    A send/recv has no index (``None``): its peers issue other ops than it, so any failure applies.
    """
    import functools

    p2p = fn.__name__ in _P2P_OPS

    @functools.wraps(fn)
    def wrapped(self, *a, **k):
        tl = self._tl
        depth = getattr(tl, "depth", 0)
        if depth == 0:
            if self._cuda and torch.cuda.is_current_stream_capturing():
                # a captured step replays the same kernels with the same arguments: the flip positions
                # drawn on the host for this step would be replayed at every step
                raise UnsupportedOperation(
                    f"{BACKEND_NAME}: {fn.__name__} during CUDA graph capture is refused: a captured step replays "
                    "the flip positions drawn for it at every replay; run the communication outside the graph "
                    "(e.g. torch.compile without mode='reduce-overhead', or no CUDA graphs)")
            tl.loss = None
            if p2p:
                tl.coll = None
            else:  # one issuing thread at a time per group (the order must be the same on every rank)
                tl.coll = self._colls
                self._colls += 1
        tl.depth = depth + 1
        try:
            work = fn(self, *a, **k)
        except BaseException:
            if depth == 0 and tl.loss is not None:
                self._fail(None, tl.loss)
                tl.loss = None
            raise
        finally:
            tl.depth = depth
        if depth:
            return work
        if tl.loss is not None:
            loss, tl.loss = tl.loss, None
            work = self._fail(work, loss)
        elif self._failed is not None:  # in error: the op ran (the peers need it), this rank gets nothing
            work = _FailedWork(work, self._refuse(fn.__name__), self._timeout_s, self._any_ordered)
        if self._block_works is not None and work is not None:
            # torch's _coalescing_manager keeps only the block's Work (_end_coalescing): it waits for these
            self._block_works.append(work)
        return work

    return wrapped


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


GLOO_MAX_SEGMENT_BYTES = 1 << 20  # gloo's AllreduceOptions default maximum segment size


def gloo_ring_chunks(n: int, elem_bytes: int, parts: int,
                     max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> list[tuple[int, int]]:
    """Per-rank ``(start, stop)`` element ranges of a ring allreduce, laid out as gloo's ring does.

    gloo cuts the buffer into ``numSegments`` (a multiple of ``parts``, at least ``2 parts``)
    segments of equal rounded size; rank ``c`` ends up owning segments ``[c spr, (c+1) spr)``.
    Using the same ranges (and gloo's direction and summation order) makes the ring mode
    bit-identical to gloo at zero errors. The last ranges may be short or empty.
    """
    total = n * elem_bytes
    if total == 0:
        return [(0, 0)] * parts
    max_seg = elem_bytes * max(1, max_segment_bytes // elem_bytes)
    nseg = max(-(-total // max_seg), 2 * parts)
    nseg = -(-nseg // parts) * parts
    spr = nseg // parts
    seg_bytes = -(-(-(-total // nseg)) // elem_bytes) * elem_bytes
    seg = seg_bytes // elem_bytes
    return [(min(c * spr * seg, n), min((c + 1) * spr * seg, n)) for c in range(parts)]


_REDUCE = {
    dist.ReduceOp.SUM: torch.Tensor.add_,
    dist.ReduceOp.PRODUCT: torch.Tensor.mul_,
    dist.ReduceOp.MIN: lambda a, b: torch.minimum(a, b, out=a),
    dist.ReduceOp.MAX: lambda a, b: torch.maximum(a, b, out=a),
}


class ReplayProcessGroup(dist.ProcessGroup):
    """``ProcessGroup`` that forwards to an inner backend and corrupts received float bytes.

    Parameters
    ----------
    store, rank, size, timeout
        As handed to a backend creator by ``torch.distributed``.
    config : ReplayConfig
        Error sources, mode, traffic classes and guard.
    inner : ProcessGroup, optional
        The real backend for every tensor (default: gloo for CPU tensors and, on a machine with
        CUDA and NCCL, an NCCL group on the same store for CUDA tensors).

    Every failure reaches the caller: an exception of the inner backend or of the wrapper is
    raised by the returned Work's ``wait()`` (and held by its future), and ``wait`` never waits
    longer than the group timeout. Non-contiguous tensors are staged through a contiguous copy
    in every op and mode; element indices in the log are then row-major logical indices.
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta, config: ReplayConfig,
                 inner: dist.ProcessGroup | None = None) -> None:
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        self._timeout_s = max(float(timeout.total_seconds()), 1e-3)
        self._forced_inner = inner
        self._cuda = torch.cuda.is_available()  # graph capture is looked for only where CUDA exists
        self.config = config
        # per device type: the inner backend; per stream-ordered inner: one more communicator per
        # p2p direction (see the module docstring); backends made once per name
        self._inner_by_dev: dict[str, Any] = {}
        self._names: dict[int, str] = {}  # id(inner) -> backend name
        self._p2p_pair: dict[int, tuple] = {}  # id(inner) -> (lower->higher, higher->lower) communicators
        if inner is not None:
            name = inner.getBackendName() if hasattr(inner, "getBackendName") else inner.name()
            self._names[id(inner)] = str(name).lower()
        else:
            check_inner_backends(config.inner_backends)
            made: dict[str, Any] = {}
            for dev in served_devices(config.inner_backends):
                name = config.inner_backends[dev]
                b = made.get(name)
                if b is None:
                    # gloo on the group's store itself (as before); any other inner on its own prefix
                    b = made[name] = make_inner(name, store if name == "gloo" else dist.PrefixStore(
                        f"phy802-{name}", store), rank, size, timeout)
                    self._names[id(b)] = name
                    if stream_ordered(name):
                        self._p2p_pair[id(b)] = tuple(
                            make_inner(name, dist.PrefixStore(f"phy802-{name}-p2p{k}", store), rank, size, timeout)
                            for k in ("up", "down"))
                        for q in self._p2p_pair[id(b)]:
                            self._names[id(q)] = name
                self._inner_by_dev[dev] = b
        self._gloo = inner if inner is not None else self._inner_by_dev["cpu"]  # the CPU inner (barrier, inner)
        # whether any inner is stream-ordered (a failed op's inner Work is then waited on without a timeout)
        self._any_ordered = any(stream_ordered(n) for n in self._names.values())
        self._log = InjectionLog(config.log_limit)
        self._metrics = Metrics()
        # device path (CUDA): sums kept as device scalars and log values as device tensors, read
        # to the host in one transfer when `metrics` / `log` is read (once per step), never per op
        self._dev_acc: dict[tuple[str, str], torch.Tensor] = {}
        self._dev_log: list[tuple] = []
        self._dev_streams: set = set()  # CUDA streams the device path's pending values were made on
        self.force_device_path = False  # tests: CPU tensors take the device path
        self._coalescing_inner = None  # a stream-ordered inner whose coalescing block is open
        self._coalesced: list = []  # (what, receive) of the ops issued in that block: run when it ends
        self._block_works: list | None = None  # Works of the ops issued in an open coalescing block
        # per-device backends, so that torch's lookups (_get_backend, FSDP2's allocator, the
        # coalescing manager) find one: the inner ones. torch 2.13's Backend has no Python
        # constructor ("No constructor defined"), so a Python backend cannot be registered; every
        # op still reaches this class's Python methods (checked for DDP's C++ reducer and
        # _broadcast_coalesced), the registered inner backends only answer capability queries
        # every device type served, now: new_group(...) after init_process_group(device_id=cuda:k)
        # asks the group for its CUDA backend (_get_backend) before any op
        for dev, b in self._inner_by_dev.items():
            self._register_inner(torch.device(dev), b, self._names[id(b)])
        if inner is not None:
            self._register_inner(torch.device("cpu"), inner, None)
        self.commlog = CommLog(rank, size)  # every issued op: integration/commlog.py
        self._rank, self._size = rank, size
        self._sources: dict[tuple[int, int], ErrorSource] = {}
        self._lock = threading.RLock()  # issue order + counters (gloo completes on its own threads)
        self._ring_lock = threading.Lock()
        self._p2p_lock = threading.RLock()
        self._p2p_queue: list = []
        self._seq = 0
        self._override: str | None = None
        self._enabled = True
        self._selected = frozenset(config.classes)
        # read once: an attribute chain per message costs on a CPU gone cold between buckets
        self._measure = bool(config.measure_noise)
        self._clamps: dict[str, float] = {}  # cls -> the kernel's clamp (filled by _clamp_of on first use)
        self._protect = config.guard == "exponent_protection"
        self._fec = get_mode(config.source.fec)
        self._cost_cache: dict[int, tuple[int, int]] = {}
        self._links: dict[tuple[int, int], BufferedLink | None] = {}
        self._retx = config.retransmit()  # NCCL_IB_RETRY_CNT + 1 sends per frame
        self._error_free = error_free(config.source)  # no link of the group can lose a frame
        self._failed: LinkFailure | None = None  # set once a frame is lost: the group is in error
        # from which collective index on (ops issued before it may still complete on other threads and
        # are judged by the store; None: every op, e.g. a failure set from outside)
        self._failed_at: int | None = None
        self._colls = 0  # collectives issued so far (outermost ops except send/recv): the next one's index
        self._loss_at: int | None = None  # collective index of this rank's first lost frame (in the store too)
        self._tl = threading.local()  # per issuing thread: op nesting depth and the op's lost frames

    @classmethod
    def standalone(cls, config: ReplayConfig, rank: int = 0, size: int = 2, timeout: timedelta = timedelta(seconds=60),
                   store=None) -> "ReplayProcessGroup":
        """A group in this process alone, over torch's fake backend (``FakeProcessGroup``: every op
        completes at once and moves no data): this process plays rank ``rank`` of ``size``, and what
        a tensor comes back with is the link's errors alone.

        For what one message gets without starting a job (tests, ``benchmarks/bench_receive.py``,
        ``benchmarks/gpu_check.py``'s sync check): the delivery model, flips, guard, counters and
        log are the wrapper's own. Peers' losses are looked up in ``store`` (default a fresh
        ``HashStore``), which no peer writes."""
        if not 0 <= rank < size:
            raise ValueError(f"{BACKEND_NAME}: standalone rank must be in 0..{size - 1}, got {rank}")
        fake = _c10d.FakeProcessGroup._create_internal(rank, size)
        return cls(store if store is not None else dist.HashStore(), rank, size, timeout, config, inner=fake)

    # ------------------------------------------------------------------ link failure (lost frames)
    def _shadow(self, op: str, t: torch.Tensor, dst: int) -> None:
        """The fate of a message this rank *sends* to ``dst``: the same delivery its receiver runs.

        Link ``rank -> dst``'s source is rebuilt here from the same seed (:func:`make_link_source`)
        and fed the same messages in the same order as the receiver's (the wrapper's model fixes
        who receives what in every op), so the sender knows, at issue, that its message will be
        lost, and fails the op too. Only losses matter here: nothing is counted or applied.

        Called only where the sender's op can complete before its receiver has issued the op:
        ``send``, the root of ``broadcast`` and ``scatter``, the non-roots of ``reduce`` and
        ``gather``, and each ring hop. In the symmetric endpoint collectives (allreduce, allgather,
        all_gather_single, reduce_scatter(_single), alltoall, all_to_all_single) a rank's op
        completes only after every peer issued its part, and a receiver that lost a frame writes
        the store key before it issues (:meth:`_note_loss`), so the look-up at completion
        (:meth:`_check_peer`) fails the sender at the same collective; a shadow there would redraw
        the link's whole error stream on the sending rank for nothing (it was about a fifth of the
        wrapper's own CPU time per DDP step, issue 23).
        """
        if not self._enabled or dst == self._rank:
            return
        with self._lock:
            source = self.link_source(self._rank, dst)
            if isinstance(source, NoErrors):
                return
            d = self._deliver(self._rank, source, t.numel() * t.element_size(), t.dtype, dst=dst)
            if d.frames_lost:
                self._note_loss(op, "sent", self._rank, d, dst=dst)

    def _note_loss(self, op: str, cls: str, src: int, d, dst: int | None = None) -> None:
        """Record that the op being issued lost ``d.frames_lost`` frames on link ``src -> dst`` (default: this rank)."""
        tl = self._tl
        prev = getattr(tl, "loss", None)
        dst = self._rank if dst is None else dst
        if self._loss_at is None:
            # before the op's inner part is issued: a peer can complete this op only after this
            # rank issued it, and then finds the key (every rank fails the same collective). With
            # the op's collective index (a send/recv: the next collective's): a peer may still be
            # completing an earlier collective, and a look-up there must not fail it (this rank
            # completed that one, so it fails only this one: the peers would stop one op apart and
            # one would wait for the other's part of this op until the group timeout)
            at = getattr(tl, "coll", None)
            self._loss_at = at = self._colls if at is None else at  # this process's completions see it first
            msg = f"rank {self._rank}: {op} lost {int(d.frames_lost)} frame(s) on link {src} -> {dst}"
            try:
                self._store.set(_FAILED_AT_KEY.format(rank=self._rank), f"{at} {msg}")
                self._store.set(_FAILED_KEY, msg)  # after: whoever sees this one finds the index
                # TCPStore's set (torchrun's store) returns without the server's reply; a check on the
                # same connection is answered only after the server has applied the sets before it,
                # so the keys are there before this rank issues the op (and a peer completes it)
                self._store.check([_FAILED_KEY])
            except Exception:  # noqa: BLE001 - a store that refuses does not hide the failure here
                pass
        received = dst == self._rank
        if prev is None or (received and not prev[6]):  # report a loss of received data first
            tl.loss = [op, cls, src, int(d.frames_lost), int(d.frames_resent), dst, received]
        else:
            prev[3] += int(d.frames_lost)
            prev[4] += int(d.frames_resent)

    def _fail(self, work, loss) -> dist.Work:
        """The group goes to error; returns the failing Work (control messages too: flags fail like data)."""
        op, cls, src, lost, resent, dst, received = loss
        c = self.config
        side = "" if received else " (sent by this rank)"
        msg = (f"{BACKEND_NAME}: {op} ({cls}) lost {lost} frame(s) on link {src} -> {dst}{side} after "
               f"NCCL_IB_RETRY_CNT={c.retry_cnt} retries each ({c.retry_cnt + 1} sends; local ACK timeout "
               f"4.096 us x 2^NCCL_IB_TIMEOUT={c.ib_timeout} = {c.rto_s:.3g} s): the queue pair is in error, "
               "the data was not delivered")
        exc = LinkFailure(msg, link=(src, dst), op=op, frames_lost=lost, frames_resent=resent, rank=self._rank)
        with self._lock:
            if received:  # counted where the data was lost (each link at its destination)
                self._metrics.add("op_failures", cls, 1)
            if self._failed is None:
                self._failed = exc
                # this rank's first failure: the op of its first loss (_note_loss)
                self._failed_at = self._loss_at if self._loss_at is not None else self._colls
        if work is None:
            return work
        return _FailedWork(work, exc, self._timeout_s, self._any_ordered)

    def _refuse(self, name: str, why: str | None = None) -> LinkFailure:
        """A :class:`LinkFailure` carrying the group's failure (link, op, frames); ``why`` replaces the
        default message's reason."""
        f = self._failed
        msg = why or f"{name} refused on rank {self._rank}: the group is in error"
        return LinkFailure(f"{BACKEND_NAME}: {msg} ({f})",
                           link=f.link, op=f.op, frames_lost=f.frames_lost, frames_resent=f.frames_resent, rank=f.rank)

    def _in_error(self, at: int | None) -> bool:
        """Whether this rank's error state fails the op with collective index ``at`` (None: a send/recv).
        A collective issued before the failed one and completing later (on gloo's thread, e.g. an
        earlier DDP bucket) is not in error: the store decides it, as on the other ranks."""
        return self._failed is not None and (at is None or self._failed_at is None or at >= self._failed_at)

    def _peer_loss(self, at: int | None) -> str | None:
        """Another rank's lost frame that fails the op with collective index ``at`` (None: a send/recv,
        any loss of the group): its message, else None. Called once the group's key was found, so the
        look-ups per rank are paid only after a loss. Every loss at ``at`` or before is there once
        collective ``at`` has completed (each was written before its rank issued ``at``)."""
        if at is None:
            return self._store.get(_FAILED_KEY).decode(errors="replace")
        found = None
        for r in range(self._size):
            key = _FAILED_AT_KEY.format(rank=r)
            if r == self._rank or not self._store.check([key]):
                continue
            i, _, msg = self._store.get(key).decode(errors="replace").partition(" ")
            if int(i) <= at and (found is None or int(i) < found[0]):
                found = (int(i), msg)
        return None if found is None else found[1]

    def _peer_poll(self, what: str, at: int | None = None) -> None:
        """While blocked: raise :class:`LinkFailure` if this or another rank of the group lost a frame
        that fails the op with collective index ``at`` (None: a send/recv, any loss)."""
        if not self._in_error(at):
            if getattr(self._tl, "loss", None) is not None:
                return  # this op's own loss (in flight on this thread): reported by _op
            own = self._loss_at
            if own is not None and (at is None or own <= at):
                # this rank's own loss, noted by the issuing thread, which fails the op through _op
                # once the op is issued; a completion on gloo's thread may run before that and took
                # this rank's key for a peer's (the report lost the link and the retry count)
                return
            try:
                if not self._store.check([_FAILED_KEY]):
                    return
                msg = self._peer_loss(at)
            except Exception:  # noqa: BLE001 - a store gone away: the wait's own timeout decides
                return
            if msg is None:
                return  # lost in a later collective: this one completes (the peer issued it first)
            with self._lock:
                if self._failed is None:
                    self._failed = LinkFailure(f"{BACKEND_NAME}: rank {self._rank} stopped waiting for {what}: a link "
                                               f"of the group failed ({msg})", op=what, rank=self._rank)
                    self._failed_at = self._colls if at is None else at
                elif at is not None and self._failed_at is not None and at < self._failed_at:
                    self._failed_at = at  # an earlier collective, completed late, failed too: in error from it
        raise self._refuse(what)

    def _p2p_poll(self, what: str, peer: int | None = None) -> None:
        """:meth:`_peer_poll` for a blocked send/recv wait with ``peer`` (:func:`_wait_polled`), except while
        this rank's own lost frames put it in error: its peer still takes part in the op and needs this
        rank's part moved (a failed sender that stopped waiting could exit before its data left, and the
        receiver would get a connection error instead of :class:`LinkFailure`), so the wait goes on,
        unless the peer has stopped (its marker in the store, :meth:`mark_stopped`): it takes part in no
        further op, so nothing more will move. One store look-up per poll, only in this state.
        """
        f = self._failed
        if f is not None and f.link is not None and f.rank == self._rank:
            # this rank's own loss (LinkFailure with a link): keep waiting for the inner op
            if peer is None:
                return
            try:
                stopped = self._store.check([_STOPPED_KEY.format(rank=peer)])
            except Exception:  # noqa: BLE001 - a store gone away: the wait's own timeout decides (as _peer_poll)
                return
            if stopped:
                raise self._refuse(what, f"rank {self._rank} stopped waiting for {what}: rank {peer} stopped "
                                         "(takes part in no further op of the group) while this rank was in error")
            return
        self._peer_poll(what)

    def _check_peer(self, what: str = "", at: int | None = None) -> None:
        """When an op completes: raise if another rank of the group has failed (one store lookup).

        A collective completes only after every rank issued it, and a rank that loses a frame
        writes the store key before it issues the op's inner part, so every rank fails the same
        collective (the training loop then stops all ranks at the same op). ``at``: the op's
        collective index (None: a send/recv): a loss found in the store fails it only if it was lost
        at ``at`` or before (:meth:`_peer_loss`).
        """
        if not self._in_error(at):
            if getattr(self._tl, "loss", None) is not None:
                return  # this op's own loss: the op fails through _op, with its own message
            try:
                hit = self._store.check([_FAILED_KEY])
            except Exception:  # noqa: BLE001 - a store gone away: nothing to learn from it
                return
            if not hit:
                return
        self._peer_poll(what, at)

    @staticmethod
    def _signals_in_band(buf: torch.Tensor, op) -> bool:
        """Whether a lost frame can travel in ``buf`` itself: a CPU float SUM/AVG all-reduce, where a
        rank that lost data adds NaN to element 0 and NaN survives the sum on every rank."""
        return (buf.is_cpu and buf.is_floating_point() and buf.numel() >= 1
                and getattr(op, "op", op) in _IN_BAND_OPS)

    def _check_peer_after(self, what: str, summed: torch.Tensor | None, vals: np.ndarray | None = None,
                          at: int | None = None) -> None:
        """:meth:`_check_peer` when an op completes, skipped after an in-band all-reduce
        (:meth:`_signals_in_band`) whose element 0 came out finite: no rank added the NaN that a
        lost frame puts there, so no rank of the group lost a frame in this op (otherwise each op is a
        call to the store's server; a non-finite element 0, lost frame or not, still looks it up).
        ``vals``: ``summed``'s elements as a flat numpy view, when the caller has one (element 0
        read without a tensor index: on a CPU cold from the step's other work, each torch call
        costs microseconds). ``at``: the op's collective index (:meth:`_check_peer`)."""
        # `_failed is None` first: the usual case skips the call on this per-op path
        if summed is not None and (self._failed is None or not self._in_error(at)) and math.isfinite(
                vals[0] if vals is not None else float(summed.detach().view(-1)[0])):
            return
        self._check_peer(what, at)

    @property
    def metrics(self) -> Metrics:
        """Per-rank counters (:class:`integration.replay.Metrics`); reading them syncs device sums (one transfer)."""
        if self._dev_acc or self._dev_log:
            self.sync_device()
        return self._metrics

    @property
    def log(self) -> InjectionLog:
        """The injection log; reading it syncs the device path's pending values (one transfer)."""
        if self._dev_log or self._dev_acc:
            self.sync_device()
        return self._log

    def sync_device(self) -> None:
        """Bring the device path's accumulated sums and log values to the host (one stacked transfer)."""
        with self._lock:
            acc, self._dev_acc = self._dev_acc, {}
            logs, self._dev_log = self._dev_log, []
        if self._dev_streams:  # values made on other streams: the reading stream waits for them
            cur = torch.cuda.current_stream()
            for other in self._dev_streams:
                if other != cur:
                    cur.wait_stream(other)
        if acc:
            keys = list(acc)
            vals = torch.stack([acc[k].double() for k in keys]).cpu().numpy()
            for (name, cls), v in zip(keys, vals):
                v = float(v)
                if name in ("perturbation_sq", "signal_sq"):
                    if v or name == "signal_sq":
                        self._metrics.add(name, cls, v if math.isfinite(v) or name == "perturbation_sq" else 0.0)
                elif v:
                    self._metrics.add(name, cls, int(round(v)))
        if logs:
            both = torch.cat([torch.stack([b, a]) for *_, b, a in logs], dim=1).cpu().numpy()
            j = 0
            for seq, op, cls, src, hop, elem, bit, msg_bit, inv, b, a in logs:
                m = b.numel()
                old, new = both[0, j:j + m][inv], both[1, j:j + m][inv]
                j += m
                self._log.add(seq=seq, op=op, cls=cls, src=src, dst=self._rank, hop=hop, element=elem, bit=bit,
                              old=old, new=new, msg_bit=msg_bit)

    def _dadd(self, name: str, cls: str, v: torch.Tensor) -> None:
        key = (name, cls)
        cur = self._dev_acc.get(key)
        if cur is not None and v.is_cuda:
            self._cross_stream(cur)
        self._dev_acc[key] = v if cur is None else cur + v

    def _cross_stream(self, t: torch.Tensor) -> None:
        """Before the current stream reads ``t`` (made on another stream: an op issued on FSDP2's or a
        user's stream): the current stream waits for the streams the device path used, and ``t``'s
        memory is not reused before the current stream is done with it (the caching allocator frees a
        block for its allocation stream only)."""
        cur = torch.cuda.current_stream(t.device)
        for other in self._dev_streams:
            if other != cur:
                cur.wait_stream(other)
                t.record_stream(cur)
        self._dev_streams.add(cur)

    def summary(self) -> str:
        """One line saying what this rank's group did: messages received and their payload, flips
        injected per traffic class, frames resent and lost, guard actions, the inner backends."""
        m = self.metrics
        flips = {c: v for c, v in sorted(m.errors_injected.items()) if v}
        inners = ", ".join(f"{d}: {self._names.get(id(b), '?')}" for d, b in sorted(self._inner_by_dev.items()))
        src = self.config.source
        ber = f"trace {src.trace}" if getattr(src, "trace", None) else f"BER {src.ber:g}"
        return (f"{BACKEND_NAME} rank {self._rank}/{self._size} ({ber}, FEC {src.fec}, {self.config.mode} mode, "
                f"guard {self.config.guard}; inner {inners or self._names.get(id(self._gloo), '?')}): "
                f"{m.total('messages')} messages received, {m.total('payload_bits') / 8e6:.3f} MB payload, "
                f"{m.total('errors_injected')} flips injected"
                + (" (" + ", ".join(f"{c} {v}" for c, v in flips.items()) + ")" if flips else "")
                + f", {m.total('frames_resent')} frames resent, {m.total('frames_lost')} lost, "
                f"{m.total('guard_elements')} elements guarded" + (f"; FAILED: {self._failed}" if self._failed else ""))

    def _print_summary(self) -> None:
        if self.config.summary and not getattr(self, "_summarized", False):
            self._summarized = True
            import sys

            try:
                print(self.summary(), file=sys.stderr, flush=True)
            except Exception:  # noqa: BLE001 - a summary must not fail a shutdown
                pass

    @property
    def failed(self) -> LinkFailure | None:
        """The link failure that put this group in error on this rank (``None`` while healthy)."""
        return self._failed

    # ------------------------------------------------------------------ public helpers
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    def _set_group_name(self, name: str) -> None:
        self._phy802_group_name = name
        super()._set_group_name(name)

    @property
    def group_name(self) -> str:
        """The name ``new_group`` gave this group (``DeviceMesh.from_group`` / FSDP2 read it)."""
        try:
            return self._phy802_group_name
        except AttributeError:
            raise RuntimeError(f"{BACKEND_NAME}: ProcessGroup name not set (create the group with dist.new_group)") from None

    @property
    def inner(self) -> dist.ProcessGroup:
        """The inner backend of CPU tensors (gloo unless one was given)."""
        return self._gloo

    def _inner_for(self, t: torch.Tensor):
        """The inner backend of ``t``'s device type (``ReplayConfig.inner_backends``), unless one inner was given."""
        if self._forced_inner is not None:
            return self._forced_inner
        b = self._inner_by_dev.get(t.device.type)
        if b is None:
            raise UnsupportedOperation(
                f"{BACKEND_NAME}: tensors on {t.device} have no inner backend (ReplayConfig.inner_backends serves "
                f"{', '.join(sorted(self._inner_by_dev))} on this machine)")
        return b

    def _ordered(self, inner) -> bool:
        """Whether ``inner`` is held to NCCL's contract (:func:`integration.inner.stream_ordered`)."""
        return stream_ordered(self._names.get(id(inner), ""))

    def _p2p_inner(self, t: torch.Tensor, peer: int, kind: str):
        """The inner of a send/recv with ``peer``: for a stream-ordered inner, the communicator of the
        message's direction (lower to higher rank, or back), so that the two directions of a pair never
        share a stream; gloo, whose sends do not wait for the receiver, carries both itself."""
        inner = self._inner_for(t)
        pair = self._p2p_pair.get(id(inner))
        if pair is None:
            return inner
        src, dst = (self._rank, peer) if kind == "send" else (peer, self._rank)
        return pair[0] if src < dst else pair[1]

    def _register_inner(self, device: torch.device, backend, name: str | None) -> None:
        if not isinstance(backend, _c10d.Backend):  # e.g. a stand-in written in Python
            return
        try:
            kind = backend_type(name) if name else dist.ProcessGroup.BackendType.GLOO
            self._register_backend(device, kind, backend)
        except Exception:  # noqa: BLE001 - capability lookups then fail as before; ops are unaffected
            pass

    # ------------------------------------------------------------------ lifecycle, coalescing manager
    def _inners(self) -> list:
        out: list = []
        for b in ([self._gloo] + list(self._inner_by_dev.values())
                  + [q for pair in self._p2p_pair.values() for q in pair]):
            if all(b is not o for o in out):
                out.append(b)
        return out

    def mark_stopped(self) -> None:
        """Tell the group's store that this rank takes part in no further op of this group: a peer in
        error by its own lost frames stops waiting on a send/recv with this rank (:meth:`_p2p_poll`).
        Called by :meth:`shutdown` and :meth:`abort`, and by ``phy802 train`` as soon as a run stops
        after a :class:`LinkFailure` (before it gathers the counters over the default group)."""
        try:
            self._store.set(_STOPPED_KEY.format(rank=self._rank), "1")
        except Exception:  # noqa: BLE001 - a store already gone: nobody is left to tell
            pass

    def shutdown(self) -> None:
        """Mark this rank stopped in the group's store, print :meth:`summary` (``ReplayConfig.summary``),
        then shut down every inner backend."""
        self.mark_stopped()
        self._print_summary()
        for b in self._inners():
            fn = getattr(b, "shutdown", None) or getattr(b, "_shutdown", None)
            if fn is not None:
                fn()

    def abort(self) -> None:
        """Mark this rank stopped in the group's store, print :meth:`summary` (``ReplayConfig.summary``),
        then abort every inner backend (NCCL aborts its communicators; gloo's abort is a no-op in 2.13)."""
        self.mark_stopped()
        self._print_summary()
        for b in self._inners():
            fn = getattr(b, "abort", None)
            if fn is not None:
                fn()

    def _start_coalescing(self, device: torch.device) -> None:  # ProcessGroup's binding: (self, device_type)
        """Start a coalesced block (torch's ``_coalescing_manager``): on a stream-ordered inner, one inner
        group (one NCCL group), whose outputs land when it ends: each op's receive side waits for
        :meth:`_end_coalescing`. Ring mode runs its hops at once (each hop needs the one before)."""
        self._flush_p2p()
        dev = torch.device(device)
        inner = self._forced_inner if self._forced_inner is not None else self._inner_by_dev.get(dev.type)
        self._coalesced = []
        self._block_works = []
        if (inner is not None and self._ordered(inner) and getattr(inner, "supports_coalescing", False)
                and self.config.mode == "endpoint"):
            inner._start_coalescing()  # Backend's binding: no device
            self._coalescing_inner = inner
        else:
            self._coalescing_inner = None

    def _end_coalescing(self, device: torch.device) -> dist.Work:  # noqa: ARG002 - torch's signature
        inner, self._coalescing_inner = self._coalescing_inner, None
        pending, self._coalesced = self._coalesced, []
        works, self._block_works = self._block_works or [], None
        if inner is not None:
            work = inner._end_coalescing()
            if work is not None:
                work.wait()  # the current stream waits for the group (no host block on NCCL)
            for _what, receive in pending:
                receive()
        for w in works:  # each op's own Work: its receive side, and its failure if it had one
            w.wait()
        return self._done([])

    @contextlib.contextmanager
    def traffic(self, cls: str) -> Iterator[None]:
        """Treat operations issued inside the block as traffic class ``cls``."""
        if cls not in TRAFFIC_CLASSES:
            raise ValueError(f"unknown traffic class {cls!r} (choose from {TRAFFIC_CLASSES})")
        prev, self._override = self._override, cls
        try:
            yield
        finally:
            self._override = prev

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Issue operations inside the block without errors (cursors do not advance)."""
        prev, self._enabled = self._enabled, False
        try:
            yield
        finally:
            self._enabled = prev

    def link_source(self, src: int, dst: int) -> ErrorSource:
        """The error source of link ``src -> dst`` (read ahead by the wrapper: do not take from it)."""
        key = (int(src), int(dst))
        s = self._sources.get(key)
        if s is None:
            s = self._sources[key] = make_link_source(self.config.source, src, dst)
        return s

    def _deliver(self, src: int, source: ErrorSource, octets: int, dtype: torch.dtype, dst: int | None = None):
        """``protocol.delivery.deliver`` of one message over link ``src -> rank`` (same result).

        Sources whose offsets do not depend on how the stream is cut (live generator, independent
        flips) go through a :class:`BufferedLink` (read-ahead + one Numba pass per message); others
        (traces) through ``deliver`` itself.
        """
        fmt = _FORMAT.get(dtype, "float32")
        key = (src, self._rank if dst is None else dst)
        link = self._links.get(key, False)
        if link is False:
            link = self._links[key] = (BufferedLink(source, self._fec, rate=self.config.source.rate,
                                                    code=self.config.source.code, retransmit=self._retx)
                                       if BufferedLink.supports(source) else None)
        if link is not None:
            return link.deliver(octets, fmt)
        return deliver(octets, source, self._fec, rate=self.config.source.rate, float_format=fmt,
                       code=self.config.source.code, retransmit=self._retx)

    # ------------------------------------------------------------------ core: reserve and apply
    def _classify(self, default: str, t: torch.Tensor, op: str = "") -> str:
        if not is_corruptible(t, op) or t.numel() <= 1:
            return "control"
        return self._override or default

    def _reserve(self, op: str, cls: str, t: torch.Tensor, src: int, hop: int = 0) -> tuple | None:
        """Send the message over link ``src -> rank`` (``protocol.delivery``); return a pending corruption.

        The delivery model cuts the message into RoCEv2 frames, takes their stream bits from the
        link's source, drops and resends frames whose headers (or, in non-tolerant modes, any
        checked bit) were hit, removes protected flips in ``unequal`` mode, and returns the
        payload bits delivered flipped. ``None`` when nothing is to be done on receive; a pending
        corruption with no flips still measures the message's norm (``signal_sq``).
        """
        if not self._enabled or src == self._rank:
            return None
        octets = t.numel() * t.element_size()
        with self._lock:
            seq = self._seq
            self._seq += 1
            source = self.link_source(src, self._rank)
            m = self._metrics
            if isinstance(source, NoErrors):  # error-free link: only the bit accounting
                sb, lb = self._clean_cost(octets)
                source.take(sb)
                m.add_message(cls, 8 * octets, sb, lb)
                self._log.add_message(seq, op, cls, src, self._rank, hop, 8 * octets, sb, 0)
                return None
            d = self._deliver(src, source, octets, t.dtype)
            flips = d.payload_flips
            m.add_message(cls, 8 * octets, d.stream_bits, d.line_bits)
            if d.frames_resent:
                m.add("frames_resent", cls, d.frames_resent)
            if d.frames_lost:
                m.add("frames_lost", cls, d.frames_lost)
                self._note_loss(op, cls, src, d)
            if d.protected_removed:
                m.add("errors_protected", cls, d.protected_removed)
            self._log.add_message(seq, op, cls, src, self._rank, hop, 8 * octets, d.stream_bits, len(flips))
            if cls not in self._selected or not is_corruptible(t, op):
                if len(flips):
                    m.add("errors_unselected", cls, len(flips))
                return None
        return (seq, op, cls, src, hop, flips)

    def _clean_cost(self, octets: int) -> tuple[int, int]:
        """``(stream_bits, line_bits)`` of an error-free message (cached per size)."""
        c = self._cost_cache.get(octets)
        if c is None:
            from protocol.framing import line_bits_of_stream, stream_bits

            sb = stream_bits(8 * octets) if octets else 0
            c = self._cost_cache[octets] = (sb, line_bits_of_stream(sb, self.config.source.rate, self.config.source.code))
        return c

    def _apply(self, pending: tuple, t: torch.Tensor, elem_base: int = 0, vals: np.ndarray | None = None) -> None:
        """Apply a reserved corruption to the received contiguous flat tensor ``t``, then the guard.

        The guard (``nan_to_zero_clamp``) acts on the flipped elements only; nothing the link did
        not touch is changed. ``vals``: ``t``'s elements as a flat numpy view (:meth:`_host_view`),
        when the caller has one.
        """
        if self.force_device_path or (vals is None and t.device.type == "cuda"):
            return self._apply_device(pending, t, elem_base)
        if vals is not None or t.dtype in _WORD:  # fp32 / fp64 on the CPU: norm, flips, guard and changes in one Numba pass
            return self._apply_cpu_fused(pending, t, elem_base, vals)
        guard = self.config.guard
        seq, op, cls, src, hop, flips = pending
        x = t.detach()
        if self.config.measure_noise:
            xn = x if x.dtype in _FORMAT else x.float()  # float8 / uint8: no promotion in vector_norm
            sig = float(torch.linalg.vector_norm(xn, dtype=torch.float32 if xn.element_size() < 4 else None)) ** 2
        else:
            sig = math.nan  # not measured: nothing added (math.isfinite is False)
        if len(flips) == 0:
            if math.isfinite(sig):
                with self._lock:
                    self._metrics.add("signal_sq", cls, sig)
            return
        elem, bit, old, new, idx, n_prot = corrupt_received(
            t, flips, protect_sign_exponent=(guard == "exponent_protection"))
        nonfinite = bool(len(new)) and not bool(np.isfinite(new).all())
        n_guard, n_skip, pert = 0, 0, 0.0
        if len(elem):
            # elements are non-decreasing (delivered flips are sorted): runs instead of np.unique
            brk = np.flatnonzero(elem[1:] != elem[:-1]) + 1
            first = np.concatenate((np.zeros(1, np.int64), brk))
            eu = elem[first]
            if guard == "nan_to_zero_clamp" and is_float(t):  # float8 too, at its bound (clamp_bound)
                n_guard, final = guard_flipped(t, eu, self.config.clamp_for(cls))
            else:
                if guard in ("nan_to_zero_clamp", "exponent_protection") and not is_float(t):
                    n_skip = len(eu)  # FSDP2's uint8 all-gather: no float layout, delivered as flipped
                final = new[np.concatenate((brk, [len(elem)])) - 1]  # value after the element's last flip
            if self.config.measure_noise:
                with np.errstate(all="ignore"):
                    o = old[first]
                    dv = np.where(np.isfinite(o), final - o, 0.0)  # a clean Inf/NaN is not the link's doing
                    pert = float(np.sum(dv * dv)) if np.isfinite(final[np.isfinite(o)]).all() else math.inf
        self._account(seq, op, cls, src, hop, elem, bit, old, new, flips[idx], elem_base,
                      sig, pert, n_prot, nonfinite, n_guard, n_skip)

    def _apply_cpu_fused(self, pending: tuple, t: torch.Tensor, elem_base: int, vals: np.ndarray | None = None) -> None:
        """:meth:`_apply` for a CPU fp32/fp64 tensor: one Numba call (:func:`integration._kernels.receive_flips`).

        Same results as the general path (tested): the clean message's squared norm
        (:func:`integration._kernels.sum_squares`, fp32 blocks summed in float64), the flips, the
        guard on the flipped elements, the sum of squared changes of the flipped elements (float64,
        element order). One kernel call and one scratch allocation per message: on this CPU every
        call into torch or numpy costs microseconds, and the receive path runs once per bucket.
        """
        seq, op, cls, src, hop, flips = pending  # flips: int64, as every delivery gives them
        measure = self._measure
        if vals is None:
            vals = self._host_view(t)
        k = len(flips)
        if k == 0:
            if measure:
                sig = sum_squares(vals)
                if math.isfinite(sig):
                    with self._lock:
                        self._metrics.add("signal_sq", cls, sig)
            return
        lo, hi = _SIGN_EXP_BITS[t.dtype] if self._protect else (1, 0)
        clamp = self._clamps.get(cls)
        if clamp is None:
            clamp = self._clamp_of(cls)
        block = np.empty((5, k), np.int64)  # filled as an InjectionLog block, kept by the log
        wide = vals.itemsize == 8
        n, n_prot, n_bad, n_guard, sig, pert = receive_flips(
            vals, vals.view(np.uint64 if wide else np.uint32), flips, 64 if wide else 32, lo, hi,
            clamp, measure, block, elem_base)
        with self._lock:
            self._metrics.add_received(cls, n, sig, pert, n_prot, n_bad > 0, n_guard)
            self._log.add_block(seq, op, cls, src, self._rank, hop, block, n)

    def _clamp_of(self, cls: str) -> float:
        """The receive clamp of class ``cls`` for the kernel (-1: no ``nan_to_zero_clamp``), kept in ``_clamps``."""
        c = self._clamps[cls] = float(self.config.clamp_for(cls)) if self.config.guard == "nan_to_zero_clamp" else -1.0
        return c

    def _account(self, seq, op, cls, src, hop, elem, bit, old, new, msg_bit, elem_base, sig, pert, n_prot,
                 nonfinite, n_guard, n_skip=0) -> None:
        """Counters and log of one received message's applied flips (one lock, one pass)."""
        with self._lock:
            self._metrics.add_received(cls, len(elem), sig, pert, n_prot, nonfinite, n_guard, n_skip)
            self._log.add(seq=seq, op=op, cls=cls, src=src, dst=self._rank, hop=hop,
                          element=elem + elem_base if elem_base else elem,
                          bit=bit, old=old, new=new, msg_bit=msg_bit)

    def _apply_device(self, pending: tuple, t: torch.Tensor, elem_base: int = 0) -> None:
        """:meth:`_apply` without a host sync: device ops on the current stream, sums and log values on the device.

        The flip positions are host data (the delivery model ran at issue); they travel to the
        device through pinned memory without blocking. Nothing is read back here: signal/perturbation
        sums, non-finite events and guard counts are device scalars, and the log's old/new values
        device tensors, until :meth:`sync_device` (reading ``metrics`` or ``log``) fetches them all
        at once. Same results as :meth:`_apply` (tested on CPU with ``force_device_path``).
        """
        guard = self.config.guard
        seq, op, cls, src, hop, flips = pending
        x = t.detach().view(-1)
        dev = x.device
        measure = self.config.measure_noise
        if measure:
            xn = x if x.dtype in _FORMAT else x.float()
            # fp32/fp64 accumulate in float64, as the host path's sum_squares (the fp32 norm is ~1e-5 off)
            acc = torch.float64 if x.dtype in _WORD else (torch.float32 if xn.element_size() < 4 else None)
            sig = torch.linalg.vector_norm(xn, dtype=acc).double() ** 2
            with self._lock:  # a non-finite clean message adds nothing (as the host path)
                self._dadd("signal_sq", cls, torch.where(torch.isfinite(sig), sig, torch.zeros_like(sig)))
        if len(flips) == 0:
            return
        offsets = np.asarray(flips, dtype=np.int64)
        isz = t.element_size()
        nbits = 8 * x.numel() * isz
        idx = np.flatnonzero((offsets >= 0) & (offsets < nbits))
        offs = offsets[idx]
        elem, bit = offs // (8 * isz), offs % (8 * isz)
        n_prot = 0
        if guard == "exponent_protection" and len(offs) and t.dtype != torch.uint8:
            from integration.replay import protected_bit_range

            lo, hi = protected_bit_range(t.dtype)
            keep = (bit < lo) | (bit > hi)
            n_prot = int(len(offs) - keep.sum())
            offs, elem, bit, idx = offs[keep], elem[keep], bit[keep], idx[keep]
        if len(offs) == 0:
            if n_prot:
                with self._lock:
                    self._metrics.add("errors_protected", cls, n_prot)
            return
        byte, first_b = np.unique(offs >> 3, return_index=True)
        masks = np.bitwise_or.reduceat((np.uint8(1) << (offs & 7).astype(np.uint8)), first_b)
        e_u, inv = np.unique(elem, return_inverse=True)

        def h2d(a: np.ndarray) -> torch.Tensor:
            h = torch.from_numpy(np.ascontiguousarray(a))
            return h.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else h

        eidx, bidx, mk = h2d(e_u), h2d(byte), h2d(masks)
        u8 = x.view(torch.uint8)
        before = x[eidx].double()
        u8.index_put_((bidx,), u8[bidx] ^ mk)
        after = x[eidx].double()
        final = after
        if guard == "nan_to_zero_clamp" and is_float(t):  # float8 too, at its bound (clamp_bound)
            bad, nv = guard_values(x, eidx, self.config.clamp_for(cls))
            final = nv.double()
            with self._lock:
                self._dadd("guard_elements", cls, bad.sum().double())
        elif guard in ("nan_to_zero_clamp", "exponent_protection") and not is_float(t):
            with self._lock:  # FSDP2's uint8 all-gather: no float layout, delivered as flipped
                self._metrics.add("guard_skipped", cls, len(e_u))
        fin_b = torch.isfinite(before)
        dv = torch.where(fin_b, final - before, torch.zeros_like(before))  # a clean Inf/NaN is not the link's
        pert = (dv * dv).sum()
        # every element finite before is finite after, without a boolean-mask index (final[fin_b]):
        # a mask index sizes its result from the data, which reads the device on the host (a sync)
        pert = torch.where((torch.isfinite(final) | ~fin_b).all(), pert, torch.full_like(pert, math.inf))
        if x.is_cuda:
            self._dev_streams.add(torch.cuda.current_stream(x.device))
        with self._lock:
            m = self._metrics
            m.add("errors_injected", cls, len(idx))
            if n_prot:
                m.add("errors_protected", cls, n_prot)
            if measure:
                self._dadd("perturbation_sq", cls, pert)
            self._dadd("nonfinite_events", cls, (~torch.isfinite(after)).any().double())
            self._dev_log.append((seq, op, cls, src, hop, elem + elem_base, bit, offsets[idx], inv, before, after))

    def _receive(self, pending: tuple | None, cls: str, t: torch.Tensor, elem_base: int = 0,  # noqa: ARG002
                 vals: np.ndarray | None = None) -> None:
        if pending is not None:
            if vals is not None and not self.force_device_path:  # CPU fp32/fp64 seen through numpy
                self._apply_cpu_fused(pending, t, elem_base, vals)
            else:
                self._apply(pending, t, elem_base, vals)

    @staticmethod
    def _host_view(t: torch.Tensor) -> np.ndarray:
        """A CPU fp32/fp64 tensor's elements as a flat numpy view (no copy)."""
        return (t.detach() if t.requires_grad else t).numpy().reshape(-1)

    @staticmethod
    def _flat(t: torch.Tensor) -> torch.Tensor:
        if not t.is_contiguous():  # internal: callers stage non-contiguous tensors first
            raise ValueError(f"{BACKEND_NAME}: internal error: a non-contiguous tensor reached the receive path")
        return t.detach().view(-1)

    @staticmethod
    def _stage(t: torch.Tensor) -> torch.Tensor:
        """``t`` itself if contiguous, else a contiguous copy (the bytes a transport would carry)."""
        return t if t.is_contiguous() else t.detach().contiguous()

    @staticmethod
    def _unstage(t: torch.Tensor, buf: torch.Tensor) -> None:
        if buf is not t:
            t.detach().copy_(buf)

    def _wait(self, work, what: str, t: torch.Tensor | None = None) -> None:
        """Wait for an inner Work as its backend requires; raise if it failed or timed out.
        Called inside the op being issued: its collective index is this thread's ``tl.coll``.

        A stream-ordered inner (NCCL): ``wait()`` without a timeout (the current stream waits; a
        timeout would poll on the host until the GPU finishes) and no store look-up: completion says
        nothing about the peers, and a look-up per op would be a store round trip per op. A peer's
        lost frame is looked up when an inner op fails (:meth:`_inner_failed`) or at
        :meth:`check_failures`. gloo: bounded by the group timeout, polling the store while
        blocked, and one look-up at completion (every peer has issued the op by then)."""
        if work is None:  # an inner that ran the op in stream order and returned no Work (asyncOp=False)
            return
        at = getattr(self._tl, "coll", None)
        inner = self._inner_for(t) if t is not None else self._gloo
        if self._ordered(inner):
            try:
                work.wait()
            except Exception:
                self._inner_failed(what, at)
                raise
            return
        try:
            fut = work.get_future()
        except Exception:  # noqa: BLE001 - gloo send/recv/reduce_scatter Works have no future
            fut = None
        if fut is not None:
            _ReplayWork(fut, self._timeout_s, what, poll=lambda w: self._peer_poll(w, at)).wait()
        elif work.wait(self._timeout) is False:
            raise TimeoutError(f"{BACKEND_NAME}: {what} did not complete within {self._timeout_s:g} s")
        self._check_peer(what, at)

    def _inner_failed(self, what: str, at: int | None) -> None:
        """An inner op failed (a peer stopped, a timeout): if the store holds a peer's lost frame that
        fails this op, raise that :class:`LinkFailure` instead (one look-up, on the failure path only)."""
        try:
            self._peer_poll(what, at)
        except LinkFailure:
            raise
        except Exception:  # noqa: BLE001 - the inner failure is the error to report
            return

    def check_failures(self) -> None:
        """Raise :class:`LinkFailure` if this or another rank of the group lost a frame (one store look-up).

        On a stream-ordered inner (NCCL) an op's completion says nothing about the peers, so a peer's
        loss is not looked up per op; call this where the ranks agree to look (``phy802 train`` does
        at the end of each step), or let a later op that cannot complete fail."""
        if self._failed is not None:
            raise self._refuse("check_failures")
        self._peer_poll("check_failures", self._colls)

    def _finish(self, work, what: str, ref: torch.Tensor | None, receive, result: Any) -> dist.Work:
        """Carry an issued op to its receive side: wait for the inner Work (:meth:`_wait`), run
        ``receive`` (flips, guard, unstaging), return a done Work holding ``result``.

        The one path of every op from issue to receive. Inside a coalescing block on a stream-ordered
        inner the outputs land only when the block ends, so ``receive`` runs in :meth:`_end_coalescing`
        (applied earlier, the flips would be overwritten, or, on an in-place all-reduce, be summed in
        as part of this rank's input)."""
        inner = self._inner_for(ref) if ref is not None else self._gloo
        if self._coalescing_inner is not None and inner is self._coalescing_inner:
            if receive is not None:
                self._coalesced.append((what, receive))
            return self._done(result)
        self._wait(work, what, ref)
        if receive is not None:
            receive()
        return self._done(result)

    def _done(self, result: Any) -> dist.Work:
        return _done_work(result, self._timeout_s)

    # ------------------------------------------------------------------ allreduce
    @_op
    def allreduce(self, tensors, opts=None):
        self._flush_p2p()
        opts = _async_opts(opts, dist.AllreduceOptions)
        if len(tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: allreduce of {len(tensors)} tensors per rank is not supported")
        t = tensors[0]
        buf = self._stage(t)
        cls = self._classify("gradients", t)
        if self.config.mode == "ring" and is_float(t) and self._size > 1:
            self._ring_allreduce(buf, opts.reduceOp, cls)
            self._unstage(t, buf)
            return self._done(tensors)
        pending = self._reserve("allreduce", cls, buf, (self._rank + 1) % self._size)
        inner = self._inner_for(buf)
        if self._ordered(inner):  # NCCL's contract: nothing in a completion callback (module docstring)
            work = inner.allreduce([buf], opts)
            if pending is None and buf is t and work is not None and self._coalescing_inner is None:
                return work  # the inner Work as any backend returns it (a group in error still fails it: _op)

            def receive() -> None:
                self._receive(pending, cls, self._flat(buf))
                self._unstage(t, buf)

            return self._finish(work, "allreduce", buf, receive, tensors)
        # gloo: its future completes when the sum has landed on every rank
        in_band = not self.force_device_path and self._signals_in_band(buf, opts.reduceOp)
        # a CPU fp32/fp64 result is read through one numpy view (element 0, then the flips)
        host = in_band and buf.dtype in _WORD
        if in_band and (self._failed is not None or self._tl.loss is not None):
            # this rank's data is lost (or the group is in error): its part of the sum carries NaN
            # in element 0, so every peer sees a non-finite element 0 and looks the failure up
            buf.detach().view(-1)[0] = math.nan
        work = inner.allreduce([buf], opts)
        # the completion runs on gloo's thread and wait() on the caller's, after this op: both look
        # the store up for this collective's index, taken now
        at = self._tl.coll
        poll = lambda w: self._peer_poll(w, at)  # noqa: E731
        if pending is None and buf is t:
            # an error-free group (every link of every rank: one config, as _shadow assumes) loses no
            # frame, so nothing is looked up at completion
            if self._error_free:
                return work

            def done(fut):
                fut.value()
                self._check_peer_after("allreduce", buf if in_band else None, self._host_view(buf) if host else None,
                                       at)
                return tensors

            return _ReplayWork(work.get_future().then(done), self._timeout_s, "allreduce", poll=poll)

        def finish(fut):
            fut.value()  # re-raise an inner failure (into the chained future: wait() raises it)
            vals = self._host_view(buf) if host else None
            self._check_peer_after("allreduce", buf if in_band else None, vals, at)
            self._receive(pending, cls, buf if host else self._flat(buf), vals=vals)
            self._unstage(t, buf)
            return tensors

        return _ReplayWork(work.get_future().then(finish), self._timeout_s, "allreduce", poll=poll)

    def _ring_reduce_op(self, op, what: str, dtype: torch.dtype):
        """``(in-place reduce, divide by world size after)`` of a ReduceOp (AVG = SUM, then divide)."""
        # torch 2.13 has no float8 arithmetic kernels on CPU ("add_stub not implemented for
        # 'Float8_e4m3fn'", seen here); CUDA's add dispatches over the same type list [I]
        if dtype in _FLOAT8:
            raise UnsupportedOperation(f"{BACKEND_NAME}: ring {what} cannot reduce {dtype} tensors (torch has no "
                                       "float8 arithmetic); endpoint mode leaves the reduction to the inner backend")
        key = op if not hasattr(op, "op") else op.op
        if key == dist.ReduceOp.AVG:
            return torch.Tensor.add_, True
        reduce = _REDUCE.get(key)
        if reduce is None:
            raise UnsupportedOperation(f"{BACKEND_NAME}: ring {what} supports SUM/AVG/PRODUCT/MIN/MAX, not {op}")
        return reduce, False

    def _ring_allreduce(self, t: torch.Tensor, op, cls: str) -> None:
        reduce, avg = self._ring_reduce_op(op, "allreduce", t.dtype)
        flat = self._flat(t)
        chunks = gloo_ring_chunks(flat.numel(), flat.element_size(), self._size)
        with self._ring_lock:
            self._ring_reduce_scatter(flat, chunks, reduce, cls, op="allreduce")
            if avg:
                a, b = chunks[self._rank]
                flat[a:b].div_(self._size)
            self._ring_all_gather(flat, chunks, cls, op="allreduce")

    def _ring_hop(self, send_t: torch.Tensor, recv_t: torch.Tensor, tag: int) -> None:
        # data flows from rank r+1 to rank r, as in gloo's ring (gloo/allreduce.cc); on NCCL the
        # pair is one coalesced group (batched p2p), so paired send/recv cannot deadlock
        down, up = (self._rank - 1) % self._size, (self._rank + 1) % self._size
        inner = self._inner_for(recv_t if recv_t.numel() else send_t)
        if getattr(inner, "supports_coalescing", False) and self._ordered(inner):
            # c10d::Backend::startCoalescing / endCoalescing take no device (torch 2.13's binding
            # ``Backend._start_coalescing(self) -> None``; the device argument belongs to
            # ``ProcessGroup._start_coalescing(device)``, which looks a backend up by device)
            inner._start_coalescing()
            try:
                if send_t.numel():
                    inner.send([send_t], down, tag)
                if recv_t.numel():
                    inner.recv([recv_t], up, tag)
            finally:
                work = inner._end_coalescing()
            self._wait(work, "ring hop", recv_t if recv_t.numel() else send_t)
            return
        # gloo moves CUDA tensors in its collectives but not in send/recv: over gloo (ranks sharing
        # one GPU, PHY802_CUDA_INNER=gloo) a hop goes through host copies
        host = self._host_staged(recv_t if recv_t.numel() else send_t, inner)
        s = send_t.detach().to("cpu", copy=True) if host and send_t.numel() else send_t
        r = torch.empty(recv_t.shape, dtype=recv_t.dtype) if host and recv_t.numel() else recv_t
        sw = inner.send([s], down, tag) if send_t.numel() else None
        rw = inner.recv([r], up, tag) if recv_t.numel() else None
        self._wait(rw, f"ring hop recv from rank {up}")
        self._wait(sw, f"ring hop send to rank {down}")
        if r is not recv_t:
            recv_t.copy_(r)

    def _ring_reduce_scatter(self, flat, chunks, reduce, cls: str, op: str) -> None:
        """Ring reduce-scatter in place on ``flat``: afterwards rank r holds chunk r fully reduced.

        Hop ``s``: send chunk ``r+1+s`` to rank ``r-1``, receive chunk ``r+2+s`` from rank
        ``r+1`` and reduce it into the local copy (local + received, gloo's order).
        """
        r, n = self._rank, self._size
        up = (r + 1) % n
        for s in range(n - 1):
            si, ri = (r + 1 + s) % n, (r + 2 + s) % n
            a, b = chunks[ri]
            tmp = torch.empty(b - a, dtype=flat.dtype, device=flat.device)
            pending = self._reserve(op, cls, tmp, up, hop=s) if b > a else None
            if chunks[si][1] > chunks[si][0]:
                self._shadow(op, flat[chunks[si][0]:chunks[si][1]], (r - 1) % n)
            self._ring_hop(flat[chunks[si][0]:chunks[si][1]], tmp, _RING_TAG)
            if b > a:
                self._receive(pending, cls, tmp, elem_base=a)
                reduce(flat[a:b], tmp)

    def _ring_all_gather(self, flat, chunks, cls: str, op: str) -> None:
        """Ring all-gather in place: hop ``s`` sends chunk ``r+s`` down, receives chunk ``r+1+s`` from ``r+1``.

        What a rank receives it also forwards, so an error reaches every rank downstream of it.
        """
        r, n = self._rank, self._size
        up = (r + 1) % n
        for s in range(n - 1):
            si, ri = (r + s) % n, (r + 1 + s) % n
            a, b = chunks[ri]
            dst = flat[a:b]
            pending = self._reserve(op, cls, dst, up, hop=n - 1 + s) if b > a else None
            if chunks[si][1] > chunks[si][0]:
                self._shadow(op, flat[chunks[si][0]:chunks[si][1]], (r - 1) % n)
            self._ring_hop(flat[chunks[si][0]:chunks[si][1]], dst, _RING_TAG + 1)
            if b > a:
                self._receive(pending, cls, dst, elem_base=a)

    # ------------------------------------------------------------------ broadcast
    @_op
    def broadcast(self, tensors, opts=None):
        self._flush_p2p()
        opts = _async_opts(opts, dist.BroadcastOptions)
        root = int(opts.rootRank)
        bufs = [self._stage(t) for t in tensors]
        pend = [(b, self._classify("params", t)) for t, b in zip(tensors, bufs)]
        pend = [(b, c, self._reserve("broadcast", c, b, root)) for b, c in pend]
        if self._rank == root:
            for b in bufs:
                for d in range(self._size):
                    self._shadow("broadcast", b, d)
        work = self._inner_for(bufs[0]).broadcast(bufs, opts)
        if (self._rank == root and all(b is t for b, t in zip(bufs, tensors)) and work is not None
                and self._coalescing_inner is None):
            return work

        def receive() -> None:
            for t, (b, c, p) in zip(tensors, pend):
                if self._rank != root:
                    self._receive(p, c, self._flat(b))
                self._unstage(t, b)

        return self._finish(work, "broadcast", bufs[0], receive, tensors)

    # ------------------------------------------------------------------ allgather
    @_op
    def allgather(self, output_tensors, input_tensors, opts=None):
        self._flush_p2p()
        opts = _async_opts(opts, _c10d.AllgatherOptions)
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: allgather of several tensors per rank is not supported")
        outs = output_tensors[0]
        if len(outs) != self._size:
            raise ValueError(f"{BACKEND_NAME}: allgather needs {self._size} output tensors, got {len(outs)}")
        bufs = [self._stage(o) for o in outs]
        inp = self._stage(input_tensors[0])
        pend = []
        for j, (o, b) in enumerate(zip(outs, bufs)):
            c = self._classify("params", o)
            pend.append((b, c, self._reserve("allgather", c, b, j)))
        work = self._inner_for(inp).allgather([bufs], [inp], opts)

        def receive() -> None:
            for j, (o, (b, c, p)) in enumerate(zip(outs, pend)):
                if j != self._rank:  # this rank's own chunk did not cross a link
                    self._receive(p, c, self._flat(b))
                self._unstage(o, b)

        return self._finish(work, "allgather", inp, receive, output_tensors)

    @_op
    def all_gather_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        self._flush_p2p()
        opts = _async_opts(opts, _c10d.AllgatherOptions)
        n = self._size
        if output.numel() != n * input.numel():
            raise ValueError(f"{BACKEND_NAME}: all_gather_single output has {output.numel()} elements, "
                             f"expected {n} x {input.numel()}")
        cls = self._classify("params", output, "all_gather_single")
        obuf = self._stage(output)
        flat = self._flat(obuf)
        k = input.numel()
        chunks = [(j * k, (j + 1) * k) for j in range(n)]
        if self.config.mode == "ring" and is_float(output) and n > 1:
            with self._ring_lock:
                a, b = chunks[self._rank]
                flat[a:b].copy_(input.detach().reshape(-1))
                self._ring_all_gather(flat, chunks, cls, op="all_gather_single")
            self._unstage(output, obuf)
            return self._done([output])
        pend = [self._reserve("all_gather_single", cls, flat[a:b], j) for j, (a, b) in enumerate(chunks)]
        work = self._inner_for(obuf)._allgather_base(obuf, self._stage(input), opts)

        def receive() -> None:
            for j, (a, b) in enumerate(chunks):
                if j != self._rank:
                    self._receive(pend[j], cls, flat[a:b], elem_base=a)
            self._unstage(output, obuf)

        return self._finish(work, "all_gather_single", obuf, receive, [output])

    _allgather_base = all_gather_single

    # ------------------------------------------------------------------ reduce_scatter
    @_op
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        self._flush_p2p()
        opts = _async_opts(opts, dist.ReduceScatterOptions)
        if len(output_tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: reduce_scatter of several tensors per rank is not supported")
        t = output_tensors[0]
        buf = self._stage(t)
        ins = [[self._stage(x) for x in input_tensors[0]]]
        cls = self._classify("gradients", t)
        pending = self._reserve("reduce_scatter", cls, buf, (self._rank + 1) % self._size)
        work = self._inner_for(buf).reduce_scatter([buf], ins, opts)

        def receive() -> None:
            self._receive(pending, cls, self._flat(buf))
            self._unstage(t, buf)

        return self._finish(work, "reduce_scatter", buf, receive, output_tensors)

    @_op
    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        self._flush_p2p()
        opts = _async_opts(opts, dist.ReduceScatterOptions)
        n = self._size
        if input.numel() != n * output.numel():
            raise ValueError(f"{BACKEND_NAME}: reduce_scatter_single input has {input.numel()} elements, "
                             f"expected {n} x {output.numel()}")
        cls = self._classify("gradients", output)
        obuf = self._stage(output)
        if self.config.mode == "ring" and is_float(output) and n > 1:
            reduce, avg = self._ring_reduce_op(opts.reduceOp, "reduce_scatter", output.dtype)
            k = output.numel()
            work_buf = input.detach().reshape(-1).clone()  # never modify the caller's input
            chunks = [(j * k, (j + 1) * k) for j in range(n)]
            with self._ring_lock:
                self._ring_reduce_scatter(work_buf, chunks, reduce, cls, op="reduce_scatter_single")
            a, b = chunks[self._rank]
            if avg:
                work_buf[a:b].div_(n)
            output.detach().view(output.shape).copy_(work_buf[a:b].view(output.shape))
            return self._done([output])
        pending = self._reserve("reduce_scatter_single", cls, obuf, (self._rank + 1) % n)
        work = self._inner_for(obuf)._reduce_scatter_base(obuf, self._stage(input), opts)

        def receive() -> None:
            self._receive(pending, cls, self._flat(obuf))
            self._unstage(output, obuf)

        return self._finish(work, "reduce_scatter_single", obuf, receive, [output])

    _reduce_scatter_base = reduce_scatter_single

    # ------------------------------------------------------------------ all_to_all
    @_op
    def alltoall(self, output_tensors, input_tensors, opts=None):
        self._flush_p2p()
        opts = _async_opts(opts, dist.AllToAllOptions)
        bufs = [self._stage(o) for o in output_tensors]
        pend = []
        for j, (o, b) in enumerate(zip(output_tensors, bufs)):
            c = self._classify("activations", o)
            pend.append((b, c, self._reserve("alltoall", c, b, j)))
        work = self._inner_for(bufs[0]).alltoall(bufs, [self._stage(x) for x in input_tensors], opts)

        def receive() -> None:
            for j, (o, (b, c, p)) in enumerate(zip(output_tensors, pend)):
                if j != self._rank:
                    self._receive(p, c, self._flat(b))
                self._unstage(o, b)

        return self._finish(work, "alltoall", bufs[0], receive, output_tensors)

    @_op
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        self._flush_p2p()
        opts = _async_opts(opts, dist.AllToAllOptions)
        n = self._size
        obuf = self._stage(output)
        flat = self._flat(obuf)
        rows = output.shape[0] if output.dim() else 1
        per_row = output.numel() // max(rows, 1)
        splits = list(output_split_sizes) if output_split_sizes else [rows // n] * n
        cls = self._classify("activations", output)
        ranges, s = [], 0
        for j in range(n):
            e = s + splits[j] * per_row
            ranges.append((s, e))
            s = e
        pend = [self._reserve("all_to_all_single", cls, flat[a:b], j) for j, (a, b) in enumerate(ranges)]
        work = self._inner_for(obuf).alltoall_base(obuf, self._stage(input), output_split_sizes, input_split_sizes, opts)

        def receive() -> None:
            for j, (a, b) in enumerate(ranges):
                if j != self._rank and b > a:
                    self._receive(pend[j], cls, flat[a:b], elem_base=a)
            self._unstage(output, obuf)

        return self._finish(work, "all_to_all_single", obuf, receive, [output])

    alltoall_base = all_to_all_single

    # ------------------------------------------------------------------ barrier, send, recv
    @_op
    def barrier(self, opts=None):
        self._flush_p2p()
        work = self._gloo.barrier(_async_opts(opts, dist.BarrierOptions))
        return self._finish(work, "barrier", None, None, [])

    def _queue_p2p(self, t: torch.Tensor) -> bool:
        # issue 23: an isend/irecv is issued when it is called ("auto"); a deferred send left a
        # pipeline stage idle and deadlocked an isend followed by a barrier on another group.
        # "always" keeps the old queue (issued as one coalesced group at the first wait) for tests.
        return self.config.batch_p2p == "always"

    def _flush_p2p(self) -> None:
        """Issue the queued sends/receives as one batch (one NCCL group where the backend coalesces)."""
        if not self._p2p_queue:  # the usual case (batch_p2p "auto"), without taking the lock per op
            return
        with self._p2p_lock:
            queue, self._p2p_queue = self._p2p_queue, []
            if not queue:
                return
            inner = queue[0][1]
            coalesce = getattr(inner, "supports_coalescing", False) and self._ordered(inner)
            if coalesce:
                inner._start_coalescing()  # Backend binding: no device argument (see _ring_hop)
            works = []
            try:
                for kind, inn, tensors, peer, tag, holder in queue:
                    w = inn.send(tensors, peer, tag) if kind == "send" else inn.recv(tensors, peer, tag)
                    works.append((holder, w))
            finally:
                group_work = inner._end_coalescing() if coalesce else None
            if coalesce:
                for holder, _ in works:
                    holder.append(group_work)
            else:
                for holder, w in works:
                    holder.append(w)

    def _p2p(self, kind: str, tensors, peer: int, tag: int, finish) -> dist.Work:
        what = f"{kind} {'to' if kind == 'send' else 'from'} rank {peer}"
        queued = self._queue_p2p(tensors[0])
        # queued ops go out as one coalesced group on the main inner; one op alone on its direction's
        inner = self._inner_for(tensors[0]) if queued else self._p2p_inner(tensors[0], peer, kind)
        if self._ordered(inner) and not queued:
            # NCCL's contract: no store look-up per op (completion says nothing about the peer), the
            # inner Work waited on without a timeout (the stream waits); the receive side after it
            self._flush_p2p()
            w = inner.send(tensors, peer, tag) if kind == "send" else inner.recv(tensors, peer, tag)
            return _DeferredWork(w, finish, self._timeout_s, tensors, what, ordered=True,
                                 on_error=lambda: self._inner_failed(what, None))
        try:  # a send may complete before its receiver failed: look for a failure at issue too
            self._check_peer(what)
        except LinkFailure:
            pass  # in error now: the op is still issued (its peer needs it) and fails (see _op)
        user_finish = finish

        def finish():
            self._check_peer(what)
            if user_finish is not None:
                user_finish()

        def poll(what: str) -> None:
            self._p2p_poll(what, peer)

        if not queued:
            self._flush_p2p()
            w = inner.send(tensors, peer, tag) if kind == "send" else inner.recv(tensors, peer, tag)
            return _DeferredWork(w, finish, self._timeout_s, tensors, what, poll=poll)
        holder: list = []
        with self._p2p_lock:
            self._p2p_queue.append((kind, inner, tensors, peer, tag, holder))
        ordered = self._ordered(inner)
        return _DeferredWork(lambda: holder[0], finish, self._timeout_s, tensors, what, before=self._flush_p2p,
                             poll=None if ordered else poll, ordered=ordered)

    def _host_staged(self, t: torch.Tensor, inner) -> bool:
        """Whether a send/recv of ``t`` over ``inner`` goes through a host copy: a CUDA tensor bound
        for gloo (ranks sharing one GPU), since gloo's send/recv read host pointers (its collectives
        take CUDA tensors, its send/recv do not). Not yet run on a GPU; tests force it on CPU."""
        return t.device.type == "cuda" and self._names.get(id(inner)) == "gloo"

    def _stage_p2p(self, t: torch.Tensor) -> torch.Tensor:
        """:meth:`_stage`, through a host copy where :meth:`_host_staged` says so."""
        if self._host_staged(t, self._inner_for(t)):
            return t.detach().to("cpu", copy=True)
        return self._stage(t)

    @_op
    def send(self, tensors, dst: int, tag: int = 0):
        bufs = [self._stage_p2p(t) for t in tensors]
        for b in bufs:
            self._shadow("send", b, dst)
        return self._p2p("send", bufs, dst, tag, None)

    @_op
    def recv(self, tensors, src: int, tag: int = 0):
        fwd = (src < self._rank) == self.config.forward_increasing
        bufs = [self._stage_p2p(t) for t in tensors]
        pend = []
        for t, b in zip(tensors, bufs):
            c = self._classify("activations" if fwd else "activation_grads", t)
            pend.append((t, b, c, self._reserve("recv", c, b, src)))

        def finish():
            for t, b, c, p in pend:
                self._receive(p, c, self._flat(b))
                self._unstage(t, b)

        return self._p2p("recv", bufs, src, tag, finish)

    # ------------------------------------------------------------------ everything else: clear error
    def _unsupported(self, name: str):
        raise UnsupportedOperation(
            f"{BACKEND_NAME}: '{name}' is not supported by the replay wrapper (supported: allreduce, broadcast, "
            "allgather, all_gather_single, reduce_scatter, reduce_scatter_single, alltoall, all_to_all_single, "
            "reduce, gather, scatter, their coalesced forms, barrier, send, recv); use a plain gloo/NCCL group for it")

    @_op
    def reduce(self, tensors, opts=None):
        """Endpoint reduce: the root's result is corrupted over link ``root + 1 -> root`` (as allreduce)."""
        self._flush_p2p()
        opts = _async_opts(opts, _c10d.ReduceOptions)
        if len(tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: reduce of several tensors per rank is not supported")
        t, root, n = tensors[0], int(opts.rootRank), self._size
        buf = self._stage(t)
        cls = self._classify("gradients", t)
        pending = self._reserve("reduce", cls, buf, (root + 1) % n) if self._rank == root else None
        if self._rank == (root + 1) % n:
            self._shadow("reduce", buf, root)
        work = self._inner_for(buf).reduce([buf], opts)

        def receive() -> None:
            if self._rank == root:
                self._receive(pending, cls, self._flat(buf))
            self._unstage(t, buf)

        return self._finish(work, "reduce", buf, receive, tensors)

    @_op
    def gather(self, output_tensors, input_tensors, opts=None):
        """Endpoint gather: the root's chunk ``j`` is corrupted over link ``j -> root``."""
        self._flush_p2p()
        opts = _async_opts(opts, _c10d.GatherOptions)
        root = int(opts.rootRank)
        inp = self._stage(input_tensors[0])
        outs = output_tensors[0] if output_tensors else []
        bufs = [self._stage(o) for o in outs]
        pend = [(b, self._classify("params", o)) for o, b in zip(outs, bufs)]
        pend = [(b, c, self._reserve("gather", c, b, j)) for j, (b, c) in enumerate(pend)]
        if self._rank != root:
            self._shadow("gather", inp, root)
        work = self._inner_for(inp).gather([bufs] if output_tensors else [], [inp], opts)

        def receive() -> None:
            for j, (o, (b, c, p)) in enumerate(zip(outs, pend)):
                if j != self._rank:
                    self._receive(p, c, self._flat(b))
                self._unstage(o, b)

        return self._finish(work, "gather", inp, receive, output_tensors)

    @_op
    def scatter(self, output_tensors, input_tensors, opts=None):
        """Endpoint scatter: what a rank receives is corrupted over link ``root -> rank``."""
        self._flush_p2p()
        opts = _async_opts(opts, _c10d.ScatterOptions)
        root = int(opts.rootRank)
        t = output_tensors[0]
        buf = self._stage(t)
        cls = self._classify("params", t)
        pending = self._reserve("scatter", cls, buf, root)
        ins = [self._stage(x) for x in input_tensors[0]] if input_tensors else []
        if self._rank == root:
            for d, x in enumerate(ins):
                self._shadow("scatter", x, d)
        work = self._inner_for(buf).scatter([buf], [ins] if input_tensors else [], opts)

        def receive() -> None:
            if self._rank != root:
                self._receive(pending, cls, self._flat(buf))
            self._unstage(t, buf)

        return self._finish(work, "scatter", buf, receive, output_tensors)

    def recv_anysource(self, *a, **k):
        self._unsupported("recv_anysource")

    def monitored_barrier(self, *a, **k):
        self._unsupported("monitored_barrier")

    @_op
    def allreduce_coalesced(self, tensors, opts=None):
        """One wrapper allreduce per tensor, in order (torch's ``_coalescing_manager`` fast path)."""
        o = dist.AllreduceOptions()
        if opts is not None:
            o.reduceOp = opts.reduceOp
        for t in tensors:
            self.allreduce([t], o).wait()
        return self._done(tensors)

    def allgather_coalesced(self, *a, **k):
        self._unsupported("allgather_coalesced")

    # coalesced tensor forms (DTensor redistribution, FSDP2 on some paths): one op per pair, in order
    @_op
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self.all_gather_single(o, i, opts)
        return self._done(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    @_op
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self.reduce_scatter_single(o, i, opts)
        return self._done(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced


instrument(ReplayProcessGroup)  # record each op in self.commlog (integration/commlog.py)
# registered for CPU at import, so that a group made before register() says what to do
# (NOT_REGISTERED_HINT) instead of torch's "Unknown backend type phy802"
_register_devices(["cpu"])
