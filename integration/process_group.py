"""A Python ``ProcessGroup`` that wraps a real backend and replays link bit errors on receive.

One-line change for a user::

    import integration.process_group as pgw
    pgw.register(ReplayConfig(source=SourceConfig(ber=1e-5, seed=1)))
    group = dist.new_group(backend="phy802")            # instead of the default group
    model = DDP(model, process_group=group)              # or PipelineStage(..., group=group)

The configuration travels in the environment variable ``PHY802_REPLAY`` (JSON), so processes
started by torchrun or on other nodes get it by setting that variable. The inner backend is gloo
on CPU; with ``PHY802_INNER=nccl`` it is NCCL for CUDA tensors (the same code path; flips are
applied on the device with index ops and only the touched elements are read back for the log).

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
deliver the payload flips. Resent and lost frames are counted; [?] a lost frame (all resends
failed) is delivered unmodified: the wrapper does not fail the operation, as a transport would.
For the live generator and independent flips the same delivery runs as one Numba pass per
message over a read-ahead of the link's errors (:class:`integration.sources.BufferedLink`, equal
to ``deliver`` by test); trace sources go through ``deliver`` itself.

Traffic classes: allreduce and reduce_scatter -> ``gradients``; broadcast and allgather ->
``params``; all_to_all -> ``activations``; recv from a lower rank -> ``activations``, from a
higher rank -> ``activation_grads``; non-float tensors and one-element floats (flags, votes,
pipelining's warm-up exchange) -> ``control`` (non-float tensors are never modified). Use
:meth:`ReplayProcessGroup.traffic` to override the class of the operations issued inside a block.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from datetime import timedelta
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from integration.commlog import CommLog, instrument
from integration.replay import (
    Metrics,
    InjectionLog,
    ReplayConfig,
    TRAFFIC_CLASSES,
    _WORD,
    _corrupt_cpu,
    apply_guard,
    corrupt_received,
    is_float,
)
from integration.sources import BufferedLink, ErrorSource, NoErrors, make_link_source
from protocol.delivery import deliver
from protocol.modes import get_mode

__all__ = ["BACKEND_NAME", "ENV_VAR", "INNER_ENV_VAR", "ReplayProcessGroup", "register", "configure", "UnsupportedOperation"]

BACKEND_NAME = "phy802"
ENV_VAR = "PHY802_REPLAY"
INNER_ENV_VAR = "PHY802_INNER"  # "gloo" (default) or "nccl"
_FORMAT = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}
_RING_TAG = 0x50_38  # tags of the ring hops, apart from user point-to-point traffic (tag 0)


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


def _creator(store, rank: int, size: int, timeout: timedelta):
    inner = None
    if os.environ.get(INNER_ENV_VAR, "gloo") == "nccl":
        # GPUs: the same wrapper over NCCL (not exercised by the CPU test suite)
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        inner = dist.ProcessGroupNCCL(store, rank, size, opts)
    return ReplayProcessGroup(store, rank, size, timeout, _config_from_env(), inner=inner)


def register(config: ReplayConfig | None = None) -> None:
    """Register the ``phy802`` backend (idempotent) and optionally :func:`configure` it."""
    if config is not None:
        configure(config)
    if BACKEND_NAME not in dist.Backend.backend_list:
        devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
        dist.Backend.register_backend(BACKEND_NAME, _creator, devices=devices)


class _DeferredWork(dist.Work):
    """A Work whose ``wait()`` waits on the inner Work and then runs ``finish`` once."""

    def __init__(self, inner: dist.Work, finish) -> None:
        super().__init__()
        self._inner = inner
        self._finish = finish
        self._done = False
        self._lock = threading.Lock()

    def wait(self, timeout: timedelta | None = None) -> bool:  # noqa: ARG002
        self._inner.wait()
        with self._lock:
            if not self._done:
                self._done = True
                self._finish()
        return True

    def is_completed(self) -> bool:
        return self._done


def _done_work(result: Any) -> dist.Work:
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


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
        The real backend (default: gloo on the same store).
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta, config: ReplayConfig,
                 inner: dist.ProcessGroup | None = None) -> None:
        super().__init__(rank, size)
        self._inner = inner if inner is not None else dist.ProcessGroupGloo(store, rank, size, timeout)
        self.config = config
        self.log = InjectionLog(config.log_limit)
        self.metrics = Metrics()
        self.commlog = CommLog(rank, size)  # every issued op: integration/commlog.py
        self._rank, self._size = rank, size
        self._sources: dict[tuple[int, int], ErrorSource] = {}
        self._lock = threading.RLock()  # issue order + counters (gloo completes on its own threads)
        self._ring_lock = threading.Lock()
        self._seq = 0
        self._override: str | None = None
        self._enabled = True
        self._selected = frozenset(config.classes)
        self._fec = get_mode(config.source.fec)
        self._cost_cache: dict[int, tuple[int, int]] = {}
        self._links: dict[tuple[int, int], BufferedLink | None] = {}

    # ------------------------------------------------------------------ public helpers
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    @property
    def inner(self) -> dist.ProcessGroup:
        return self._inner

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

    def _deliver(self, src: int, source: ErrorSource, octets: int, dtype: torch.dtype):
        """``protocol.delivery.deliver`` of one message over link ``src -> rank`` (same result).

        Sources whose offsets do not depend on how the stream is cut (live generator, independent
        flips) go through a :class:`BufferedLink` (read-ahead + one Numba pass per message); others
        (traces) through ``deliver`` itself.
        """
        fmt = _FORMAT.get(dtype, "float32")
        key = (src, self._rank)
        link = self._links.get(key, False)
        if link is False:
            link = self._links[key] = (BufferedLink(source, self._fec, rate=self.config.source.rate)
                                       if BufferedLink.supports(source) else None)
        if link is not None:
            return link.deliver(octets, fmt)
        return deliver(octets, source, self._fec, rate=self.config.source.rate, float_format=fmt)

    # ------------------------------------------------------------------ core: reserve and apply
    def _classify(self, default: str, t: torch.Tensor) -> str:
        if not is_float(t) or t.numel() <= 1:
            return "control"
        return self._override or default

    def _reserve(self, op: str, cls: str, t: torch.Tensor, src: int, hop: int = 0) -> tuple | None:
        """Send the message over link ``src -> rank`` (``protocol.delivery``); return a pending corruption.

        The delivery model cuts the message into RoCEv2 frames, takes their stream bits from the
        link's source, drops and resends frames whose headers (or, in non-tolerant modes, any
        checked bit) were hit, removes protected flips in ``unequal`` mode, and returns the
        payload bits delivered flipped.
        """
        if not self._enabled or src == self._rank:
            return None
        octets = t.numel() * t.element_size()
        with self._lock:
            seq = self._seq
            self._seq += 1
            source = self.link_source(src, self._rank)
            m = self.metrics
            m.add("messages", cls, 1)
            m.add("payload_bits", cls, 8 * octets)
            if isinstance(source, NoErrors):  # error-free link: only the bit accounting
                sb, lb = self._clean_cost(octets)
                source.take(sb)
                m.add("stream_bits", cls, sb)
                m.add("line_bits", cls, lb)
                self.log.add_message(seq, op, cls, src, self._rank, hop, 8 * octets, sb, 0)
                return None
            d = self._deliver(src, source, octets, t.dtype)
            flips = d.payload_flips
            m.add("stream_bits", cls, d.stream_bits)
            m.add("line_bits", cls, d.line_bits)
            if d.frames_resent:
                m.add("frames_resent", cls, d.frames_resent)
            if d.frames_lost:
                m.add("frames_lost", cls, d.frames_lost)
            if d.protected_removed:
                m.add("errors_protected", cls, d.protected_removed)
            self.log.add_message(seq, op, cls, src, self._rank, hop, 8 * octets, d.stream_bits, len(flips))
            if len(flips) == 0:
                return None
            if cls not in self._selected or not is_float(t):
                m.add("errors_unselected", cls, len(flips))
                return None
        return (seq, op, cls, src, hop, flips)

    def _clean_cost(self, octets: int) -> tuple[int, int]:
        """``(stream_bits, line_bits)`` of an error-free message (cached per size)."""
        c = self._cost_cache.get(octets)
        if c is None:
            from protocol.framing import line_bits_of_stream, stream_bits

            sb = stream_bits(8 * octets) if octets else 0
            c = self._cost_cache[octets] = (sb, line_bits_of_stream(sb, self.config.source.rate))
        return c

    def _apply(self, pending: tuple | None, t: torch.Tensor, elem_base: int = 0) -> None:
        """Apply a reserved corruption to the received tensor ``t`` (contiguous view), then the guard."""
        guard = self.config.guard
        seq, op, cls, src, hop, flips = pending
        if t.device.type == "cpu" and t.dtype in _WORD:  # one Numba pass, non-finite check included
            elem, bit, old, new, idx, n_prot, nonfinite = _corrupt_cpu(
                t.detach().view(-1).numpy(), t.dtype, flips, guard == "exponent_protection")
        else:
            elem, bit, old, new, idx, n_prot = corrupt_received(
                t, flips, protect_sign_exponent=(guard == "exponent_protection"))
            nonfinite = bool(len(new)) and not bool(np.isfinite(new).all())
        n_guard = apply_guard(t, self.config.clamp_for(cls)) if guard == "nan_to_zero_clamp" else 0
        with self._lock:
            m = self.metrics
            m.add("errors_injected", cls, len(idx))
            if n_prot:
                m.add("errors_protected", cls, n_prot)
            if nonfinite:
                m.add("nonfinite_events", cls, 1)
            if n_guard:
                m.add("guard_elements", cls, n_guard)
            self.log.add(seq=seq, op=op, cls=cls, src=src, dst=self._rank, hop=hop, element=elem + elem_base,
                         bit=bit, old=old, new=new, msg_bit=flips[idx])

    # the guard also runs on error-free messages: a receiver cannot know which ones are clean
    def _receive(self, pending: tuple | None, cls: str, t: torch.Tensor, elem_base: int = 0) -> None:
        if pending is not None:
            self._apply(pending, t, elem_base)
        elif (self.config.guard == "nan_to_zero_clamp" and self._enabled and is_float(t)
              and cls in self._selected and t.numel() > 1):
            n = apply_guard(t, self.config.clamp_for(cls))
            if n:
                with self._lock:
                    self.metrics.add("guard_elements", cls, n)

    def _flat(self, t: torch.Tensor) -> torch.Tensor:
        if not t.is_contiguous():
            raise ValueError(f"{BACKEND_NAME}: tensors must be contiguous (got strides {t.stride()})")
        return t.detach().view(-1)

    # ------------------------------------------------------------------ allreduce
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        if len(tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: allreduce of {len(tensors)} tensors per rank is not supported")
        t = tensors[0]
        cls = self._classify("gradients", t)
        if self.config.mode == "ring" and is_float(t) and self._size > 1:
            self._ring_allreduce(t, opts.reduceOp, cls)
            return _done_work(tensors)
        pending = self._reserve("allreduce", cls, t, (self._rank + 1) % self._size)
        work = self._inner.allreduce(tensors, opts)
        if pending is None and self.config.guard != "nan_to_zero_clamp":
            return work

        def finish(fut):
            fut.value()  # re-raise an inner failure
            self._receive(pending, cls, self._flat(t))
            return tensors

        return _create_work_from_future(work.get_future().then(finish))

    def _ring_allreduce(self, t: torch.Tensor, op, cls: str) -> None:
        reduce = _REDUCE.get(op if not hasattr(op, "op") else op.op)
        if reduce is None:
            raise UnsupportedOperation(f"{BACKEND_NAME}: ring allreduce supports SUM/PRODUCT/MIN/MAX, not {op}")
        flat = self._flat(t)
        chunks = gloo_ring_chunks(flat.numel(), flat.element_size(), self._size)
        with self._ring_lock:
            self._ring_reduce_scatter(flat, chunks, reduce, cls, op="allreduce")
            self._ring_all_gather(flat, chunks, cls, op="allreduce")

    def _ring_hop(self, send_t: torch.Tensor, recv_t: torch.Tensor, tag: int) -> None:
        # data flows from rank r+1 to rank r, as in gloo's ring (gloo/allreduce.cc)
        down, up = (self._rank - 1) % self._size, (self._rank + 1) % self._size
        sw = self._inner.send([send_t], down, tag) if send_t.numel() else None
        rw = self._inner.recv([recv_t], up, tag) if recv_t.numel() else None
        if rw is not None:
            rw.wait()
        if sw is not None:
            sw.wait()

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
            self._ring_hop(flat[chunks[si][0]:chunks[si][1]], dst, _RING_TAG + 1)
            if b > a:
                self._receive(pending, cls, dst, elem_base=a)

    # ------------------------------------------------------------------ broadcast
    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        root = int(opts.rootRank)
        pend = [(t, self._classify("params", t)) for t in tensors]
        pend = [(t, c, self._reserve("broadcast", c, t, root)) for t, c in pend]
        work = self._inner.broadcast(tensors, opts)
        if self._rank == root:
            return work
        work.wait()
        for t, c, p in pend:
            self._receive(p, c, self._flat(t))
        return _done_work(tensors)

    # ------------------------------------------------------------------ allgather
    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: allgather of several tensors per rank is not supported")
        outs = output_tensors[0]
        if len(outs) != self._size:
            raise ValueError(f"{BACKEND_NAME}: allgather needs {self._size} output tensors, got {len(outs)}")
        pend = []
        for j, o in enumerate(outs):
            c = self._classify("params", o)
            pend.append((o, c, self._reserve("allgather", c, o, j)))
        work = self._inner.allgather(output_tensors, input_tensors, opts)
        work.wait()
        for j, (o, c, p) in enumerate(pend):
            if j != self._rank:  # this rank's own chunk did not cross a link
                self._receive(p, c, self._flat(o))
        return _done_work(output_tensors)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        opts = opts if opts is not None else dist.AllgatherOptions()
        n = self._size
        if output.numel() != n * input.numel():
            raise ValueError(f"{BACKEND_NAME}: all_gather_single output has {output.numel()} elements, "
                             f"expected {n} x {input.numel()}")
        cls = self._classify("params", output)
        flat = self._flat(output)
        k = input.numel()
        chunks = [(j * k, (j + 1) * k) for j in range(n)]
        if self.config.mode == "ring" and is_float(output) and n > 1:
            with self._ring_lock:
                a, b = chunks[self._rank]
                flat[a:b].copy_(input.detach().reshape(-1))
                self._ring_all_gather(flat, chunks, cls, op="all_gather_single")
            return _done_work([output])
        pend = [self._reserve("all_gather_single", cls, flat[a:b], j) for j, (a, b) in enumerate(chunks)]
        work = self._inner._allgather_base(output, input, opts)
        work.wait()
        for j, (a, b) in enumerate(chunks):
            if j != self._rank:
                self._receive(pend[j], cls, flat[a:b], elem_base=a)
        return _done_work([output])

    _allgather_base = all_gather_single

    # ------------------------------------------------------------------ reduce_scatter
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        if len(output_tensors) != 1:
            raise UnsupportedOperation(f"{BACKEND_NAME}: reduce_scatter of several tensors per rank is not supported")
        t = output_tensors[0]
        cls = self._classify("gradients", t)
        pending = self._reserve("reduce_scatter", cls, t, (self._rank + 1) % self._size)
        work = self._inner.reduce_scatter(output_tensors, input_tensors, opts)
        work.wait()
        self._receive(pending, cls, self._flat(t))
        return _done_work(output_tensors)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        n = self._size
        if input.numel() != n * output.numel():
            raise ValueError(f"{BACKEND_NAME}: reduce_scatter_single input has {input.numel()} elements, "
                             f"expected {n} x {output.numel()}")
        cls = self._classify("gradients", output)
        if self.config.mode == "ring" and is_float(output) and n > 1:
            reduce = _REDUCE.get(opts.reduceOp if not hasattr(opts.reduceOp, "op") else opts.reduceOp.op)
            if reduce is None:
                raise UnsupportedOperation(f"{BACKEND_NAME}: ring reduce_scatter supports SUM/PRODUCT/MIN/MAX")
            k = output.numel()
            work_buf = input.detach().reshape(-1).clone()  # never modify the caller's input
            chunks = [(j * k, (j + 1) * k) for j in range(n)]
            with self._ring_lock:
                self._ring_reduce_scatter(work_buf, chunks, reduce, cls, op="reduce_scatter_single")
            a, b = chunks[self._rank]
            output.detach().view(-1).copy_(work_buf[a:b])
            return _done_work([output])
        pending = self._reserve("reduce_scatter_single", cls, output, (self._rank + 1) % n)
        work = self._inner._reduce_scatter_base(output, input, opts)
        work.wait()
        self._receive(pending, cls, self._flat(output))
        return _done_work([output])

    _reduce_scatter_base = reduce_scatter_single

    # ------------------------------------------------------------------ all_to_all
    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        pend = []
        for j, o in enumerate(output_tensors):
            c = self._classify("activations", o)
            pend.append((o, c, self._reserve("alltoall", c, o, j)))
        work = self._inner.alltoall(output_tensors, input_tensors, opts)
        work.wait()
        for j, (o, c, p) in enumerate(pend):
            if j != self._rank:
                self._receive(p, c, self._flat(o))
        return _done_work(output_tensors)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        opts = opts if opts is not None else dist.AllToAllOptions()
        n = self._size
        flat = self._flat(output)
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
        work = self._inner.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        work.wait()
        for j, (a, b) in enumerate(ranges):
            if j != self._rank and b > a:
                self._receive(pend[j], cls, flat[a:b], elem_base=a)
        return _done_work([output])

    alltoall_base = all_to_all_single

    # ------------------------------------------------------------------ barrier, send, recv
    def barrier(self, opts=None):
        return self._inner.barrier(opts) if opts is not None else self._inner.barrier()

    def send(self, tensors, dst: int, tag: int = 0):
        return self._inner.send(tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        fwd = (src < self._rank) == self.config.forward_increasing
        pend = []
        for t in tensors:
            c = self._classify("activations" if fwd else "activation_grads", t)
            pend.append((t, c, self._reserve("recv", c, t, src)))
        work = self._inner.recv(tensors, src, tag)

        def finish():
            for t, c, p in pend:
                self._receive(p, c, self._flat(t))

        return _DeferredWork(work, finish)

    # ------------------------------------------------------------------ everything else: clear error
    def _unsupported(self, name: str):
        raise UnsupportedOperation(
            f"{BACKEND_NAME}: '{name}' is not supported by the replay wrapper (supported: allreduce, broadcast, "
            "allgather, all_gather_single, reduce_scatter, reduce_scatter_single, alltoall, all_to_all_single, "
            "barrier, send, recv); use a plain gloo/NCCL group for it")

    def reduce(self, *a, **k):
        self._unsupported("reduce")

    def gather(self, *a, **k):
        self._unsupported("gather")

    def scatter(self, *a, **k):
        self._unsupported("scatter")

    def recv_anysource(self, *a, **k):
        self._unsupported("recv_anysource")

    def monitored_barrier(self, *a, **k):
        self._unsupported("monitored_barrier")

    def allreduce_coalesced(self, *a, **k):
        self._unsupported("allreduce_coalesced")

    def allgather_coalesced(self, *a, **k):
        self._unsupported("allgather_coalesced")

    def allgather_into_tensor_coalesced(self, *a, **k):
        self._unsupported("allgather_into_tensor_coalesced")

    def all_gather_single_coalesced(self, *a, **k):
        self._unsupported("all_gather_single_coalesced")

    def reduce_scatter_tensor_coalesced(self, *a, **k):
        self._unsupported("reduce_scatter_tensor_coalesced")

    def reduce_scatter_single_coalesced(self, *a, **k):
        self._unsupported("reduce_scatter_single_coalesced")


instrument(ReplayProcessGroup)  # record each op in self.commlog (integration/commlog.py)
