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

Modules. This one holds the group (construction, inner backends, coalescing, the collectives and
:meth:`ReplayProcessGroup._finish`, the one path of an op from issue to receive); its parts, one job
each: :mod:`integration.registration` (the backend's name, configuration and creator),
:mod:`integration.inner` (inner backends by name), :mod:`integration.works` (the Works returned),
:mod:`integration.agreement` (cross-rank failure agreement), :mod:`integration.ring` (ring
algorithms), :mod:`integration.receive` (delivery, flips, guard, counters, log), :mod:`integration.p2p`
(send/recv and their queue). Every public name is importable from here as before.

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
failed rank: the key is written before the failed op's inner part is issued, and over gloo every
rank looks it up when an op completes, so all ranks fail the same collective (over a
stream-ordered inner such as NCCL, whose completion says nothing about the peers, only when an
inner op fails or at :meth:`ReplayProcessGroup.check_failures`: no store call per op) (the key says which: the
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
import math
import threading
from datetime import timedelta
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d

from integration.commlog import CommLog, instrument
from integration.inner import backend_type, check_inner_backends, make_inner, served_devices, stream_ordered
from integration.replay import (
    LinkFailure,
    Metrics,
    InjectionLog,
    ReplayConfig,
    TRAFFIC_CLASSES,
    _WORD,
    is_float,
)
from integration.sources import BufferedLink, ErrorSource, error_free
from protocol.modes import get_mode

# the group's parts, one job each (names re-exported here: the public imports stay as they were)
from integration.agreement import (  # noqa: F401
    _FAILED_AT_KEY,
    _FAILED_KEY,
    _IN_BAND_OPS,
    _P2P_OPS,
    _STOPPED_KEY,
    FailureAgreement,
    _op,
)
from integration.p2p import PointToPoint
from integration.receive import _FORMAT, ReceivePath  # noqa: F401
from integration.registration import (  # noqa: F401
    BACKEND_NAME,
    ENV_VAR,
    NOT_REGISTERED_HINT,
    UnsupportedOperation,
    configure,
    register,
)
from integration.ring import _RING_TAG, _REDUCE, GLOO_MAX_SEGMENT_BYTES, RingOps, gloo_ring_chunks  # noqa: F401
from integration.works import (  # noqa: F401
    _POLL_S,
    _async_opts,
    _cuda_devices,
    _DeferredWork,
    _done_work,
    _FailedWork,
    _ReplayWork,
    _seconds,
    drain_completions,
    first_value,
    then_completion,
    _wait_polled,
)

__all__ = ["BACKEND_NAME", "ENV_VAR", "ReplayProcessGroup", "register", "configure", "UnsupportedOperation",
           "LinkFailure", "ddp_comm_hook", "NOT_REGISTERED_HINT"]















def ddp_comm_hook(group, bucket):  # no annotations: DDP accepts only none or Future[Tensor] objects
    """A DDP communication hook (torch's ``register_comm_hook`` style, as its PowerSGD/allreduce hooks)
    that averages each gradient bucket through the ``phy802`` group ``group``.

    For a DDP built on a plain (e.g. NCCL) group, so that torch sees a stock ProcessGroup:
    ``ddp.register_comm_hook(phy802_group, ddp_comm_hook)``; the bucket all-reduces then carry
    the same link errors as with ``DDP(model, process_group=phy802_group)``.
    """
    buf = bucket.buffer()
    buf.div_(group.size())
    return then_completion(group.allreduce([buf]).get_future(), first_value)






























class ReplayProcessGroup(FailureAgreement, ReceivePath, RingOps, PointToPoint, dist.ProcessGroup):
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
        self._make_inners(store, rank, size, timeout, inner)
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
        self._allreduce_kinds: dict[tuple, tuple] = {}  # allreduce: (class, inner, ordered, in_band) per kind
        self._rx: dict[int, tuple] = {}  # src -> (link src -> rank's source, its BufferedLink or None)
        self._retx = config.retransmit()  # NCCL_IB_RETRY_CNT + 1 sends per frame
        self._error_free = error_free(config.source)  # no link of the group can lose a frame
        self._failed: LinkFailure | None = None  # set once a frame is lost: the group is in error
        # from which collective index on (ops issued before it may still complete on other threads and
        # are judged by the store; None: every op, e.g. a failure set from outside)
        self._failed_at: int | None = None
        self._colls = 0  # collectives issued so far (outermost ops except send/recv): the next one's index
        self._loss_at: int | None = None  # collective index of this rank's first lost frame (in the store too)
        self._tl = threading.local()  # per issuing thread: op nesting depth and the op's lost frames

    def _make_inners(self, store, rank: int, size: int, timeout: timedelta, inner) -> None:
        """The inner backend per device type served (``ReplayConfig.inner_backends``, each made once per
        name), and for a stream-ordered one a communicator per p2p direction; or the one ``inner`` given."""
        config = self.config
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
                with self._lock:  # counters are also updated from the inner backend's completion threads
                    line = self.summary()
            except Exception as e:  # noqa: BLE001 - a summary must not fail a shutdown, but its failure is said
                line = f"{BACKEND_NAME} rank {self._rank}/{self._size}: summary failed: {type(e).__name__}: {e}"
            # one write of the whole line: sys.stderr is write-through, so print()'s separate write of
            # the newline let another rank's line land between (seen: "...guardedphy802 rank 0/2 ...");
            # a write below PIPE_BUF bytes is atomic on a pipe
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


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


    def shutdown(self) -> None:
        """Mark this rank stopped in the group's store, print :meth:`summary` (``ReplayConfig.summary``),
        let gloo's threads drop the completion callbacks they ran (:func:`drain_completions`), then
        shut down every inner backend."""
        self.mark_stopped()
        self._print_summary()
        drain_completions()
        for b in self._inners():
            fn = getattr(b, "shutdown", None) or getattr(b, "_shutdown", None)
            if fn is not None:
                fn()

    def abort(self) -> None:
        """Mark this rank stopped in the group's store, print :meth:`summary` (``ReplayConfig.summary``),
        then abort every inner backend (NCCL aborts its communicators; gloo's abort is a no-op in 2.13)."""
        self.mark_stopped()
        self._print_summary()
        drain_completions()
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



    # ------------------------------------------------------------------ core: reserve and apply













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
        if self._p2p_queue:  # queued sends/receives first (the usual case: none, and no call per bucket)
            self._flush_p2p()
        opts = _async_opts(opts, dist.AllreduceOptions)
        if len(tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: allreduce of {len(tensors)} tensors per rank is not supported")
        t = tensors[0]
        buf = self._stage(t)
        # what decides the op's class, inner backend and in-band signal, each worked out once per kind
        # of all-reduce: DDP's buckets repeat every step, and on a CPU cold from the backward pass each
        # small call costs microseconds
        red = opts.reduceOp
        key = (t.dtype, t.numel(), t.device.type, self._override, getattr(red, "op", red), self.force_device_path)
        kind = self._allreduce_kinds.get(key)
        cls = kind[0] if kind is not None else self._classify("gradients", t)
        if self.config.mode == "ring" and is_float(t) and self._size > 1:
            self._ring_allreduce(buf, opts.reduceOp, cls)
            self._unstage(t, buf)
            return self._done(tensors)
        pending = self._reserve("allreduce", cls, buf, (self._rank + 1) % self._size)
        if kind is None:
            inner = self._inner_for(buf)
            kind = (cls, inner, self._ordered(inner),
                    not self.force_device_path and self._signals_in_band(buf, opts.reduceOp))
            if len(self._allreduce_kinds) < 4096:  # bounded: sizes that never repeat
                self._allreduce_kinds[key] = kind
        _, inner, ordered, in_band = kind
        if ordered:  # NCCL's contract: nothing in a completion callback (module docstring)
            work = inner.allreduce([buf], opts)
            if pending is None and buf is t and work is not None and self._coalescing_inner is None:
                return work  # the inner Work as any backend returns it (a group in error still fails it: _op)

            def receive() -> None:
                self._receive(pending, cls, self._flat(buf))
                self._unstage(t, buf)

            return self._finish(work, "allreduce", buf, receive, tensors)
        # gloo: its future completes when the sum has landed on every rank; in_band: a lost frame is
        # signalled in the sum itself (_signals_in_band)
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

            # the completion callbacks get the group as an argument, never in their closure
            # (works._Completion: gloo's thread may drop a callback after everyone else dropped the group)
            def done(group, fut):
                fut.value()
                group._check_peer_after("allreduce", buf if in_band else None,
                                        group._host_view(buf) if host else None, at)
                return tensors

            return _ReplayWork(then_completion(work.get_future(), done, self), self._timeout_s, "allreduce",
                               poll=poll)

        def finish(group, fut):
            fut.value()  # re-raise an inner failure (into the chained future: wait() raises it)
            vals = group._host_view(buf) if host else None
            group._check_peer_after("allreduce", buf if in_band else None, vals, at)
            group._receive(pending, cls, buf if host else group._flat(buf), vals=vals)
            if buf is not t:
                group._unstage(t, buf)
            return tensors

        return _ReplayWork(then_completion(work.get_future(), finish, self), self._timeout_s, "allreduce",
                           poll=poll)






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
