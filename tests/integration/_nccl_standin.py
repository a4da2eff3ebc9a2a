"""A CPU stand-in for ``ProcessGroupNCCL`` with NCCL's observable behaviour (test support, not product code).

The CPU build of torch has no ``ProcessGroupNCCL``. gloo, which the wrapper uses on CPU, completes a
Work's future when the data has landed, never blocks a send on its receiver and has no stream: a
wrapper written against gloo's behaviour can pass every CPU test and fail on its first GPU run.
:class:`NcclStandIn` moves data with gloo underneath but shows NCCL's contract, as read in torch
2.13's ``torch/distributed/distributed_c10d.py`` and ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``
(``collective()``, ``pointToPoint()``, ``WorkNCCL::wait`` / ``synchronizeStream``, ``getNcclReduceOp``):

* **A synchronous op returns no Work.** An op whose options say ``asyncOp=False`` (what
  ``dist.all_reduce(t)`` and the other collectives set without ``async_op=True``) runs in stream
  order and returns ``None`` (``ProcessGroupNCCL::collective``: ``return asyncOp ? work : nullptr``;
  c10d's Python accepts ``None``: "the backend has sync'ed at CPP level").
* **Futures are done at enqueue, data lands later.** Each rank has one "stream" (a thread that runs
  the rank's ops in issue order); an op's future is complete when it is enqueued, so ``then``
  callbacks run at once on the caller's thread, before the data is there and before any peer has
  issued the op (NCCL marks the future complete at enqueue; its completion says nothing about peers).
* **``wait()`` orders, ``wait(timeout)`` syncs the host.** ``WorkNCCL::wait()`` makes the current
  stream wait for the op's end event; the host does not block. On CPU the caller's thread plays the
  current stream, so ``wait()`` blocks it until the data has landed (counted in :attr:`stream_waits`,
  not as a host sync). ``wait(timeout)`` polls on the host until the GPU has finished: recorded in
  :attr:`host_syncs`.
* **A send completes only when its peer has posted the recv.** Point-to-point ops run in stream
  order; a send blocks its stream until the receiver's stream has reached the matching recv (NCCL
  matches in order and has no tags). Two ranks that both send first on one stream wait for each
  other: the stand-in reports the wait-for cycle as :class:`StandInDeadlock` after ``timeout``
  (never a hang), and the op's ``wait`` raises it.
* **Coalescing.** Between ``_start_coalescing()`` and ``_end_coalescing()`` nothing runs; the ops
  are issued as one group when it ends and their outputs land only then (receives are posted first,
  so a group's mixed sends and receives cannot deadlock). A ``wait()`` on an op of a group that has
  not ended orders nothing (the op's end event does not exist yet): counted in
  :attr:`early_waits`.
* **Reductions NCCL refuses are refused.** ``getNcclReduceOp`` knows SUM, PRODUCT, MIN, MAX, AVG and
  PREMUL_SUM; BAND/BOR/BXOR raise ``ValueError("Cannot use ReduceOp.<op> with NCCL")``.
* **Bindings.** Every call is checked against the signature of the same method of the installed
  torch's ``torch._C._distributed_c10d.Backend`` binding (``ProcessGroupNCCL``'s base class),
  parsed from the pybind11 docstring; the NCCL-only ``_group_start``/``_group_end``/``_shutdown``
  take no argument (torch/csrc/distributed/c10d/init.cpp).

What it cannot show: real CUDA streams and events (a callback's device work, ordered after the op
on a GPU, runs here before the data lands), and float8 reductions (gloo has no float8 type; NCCL
>= 2.24 moves float8 natively: the stand-in moves float8 as bytes and refuses float8 reductions
with :class:`StandInLimit`).

Register it under a backend name and select it with ``ReplayConfig.inner_backends``
(:func:`register_standin`). Spawned training ranks load it as a backend plugin
(``TrainConfig.backend_plugins``, ``phy802 train --backend-plugin _nccl_standin:register_strict``
with this folder on ``sys.path``): :func:`register_strict` registers ``nccl_standin_strict``, where
a host sync, or a wait on an op of a coalescing group that has not ended, raises
:class:`StandInHostSync` at once, so that a run which finishes had none (and no deadlock: that
raises anyway).
"""

from __future__ import annotations

import queue
import re
import threading
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

_C = torch._C._distributed_c10d  # the options types (not all are re-exported by torch.distributed)

__all__ = ["STANDIN_NAME", "STRICT_NAME", "NcclStandIn", "StandInDeadlock", "StandInHostSync", "StandInLimit",
           "backend_signatures", "check_call", "register_standin", "register_strict"]

STANDIN_NAME = "nccl_standin"
STRICT_NAME = "nccl_standin_strict"

# NCCL-only bindings (ProcessGroupNCCL in torch/csrc/distributed/c10d/init.cpp): name -> parameter names
_NCCL_ONLY = {"_group_start": (), "_group_end": (), "_shutdown": ()}
_SIG = re.compile(r"^(?:\d+\. )?(\w+)\((.*)\) -> .*$")
# ProcessGroupNCCL.cpp, ncclOp / getNcclReduceOp: the reductions NCCL has
_NCCL_REDUCE_OPS = {dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
                    dist.ReduceOp.AVG, dist.ReduceOp.PREMUL_SUM}
_F8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


class StandInDeadlock(RuntimeError):
    """A send waited ``timeout`` for its receiver to post the matching recv (a wait-for cycle on the streams)."""


class StandInHostSync(RuntimeError):
    """A strict stand-in's Work (:func:`register_strict`) waited on with a timeout (the host polls the GPU),
    or inside a coalescing group that has not ended."""


class StandInLimit(NotImplementedError):
    """Something NCCL does that the stand-in cannot (float8 reductions: gloo has no float8 type)."""


def _split_params(text: str) -> list[tuple[str, bool]]:
    """``[(name, has_default)]`` of a pybind11 parameter list (``self`` dropped)."""
    out, depth, cur = [], 0, ""
    for ch in text + ",":
        if ch in "[(<{":
            depth += 1
        elif ch in "])>}":
            depth -= 1
        if ch == "," and depth == 0:
            part, cur = cur.strip(), ""
            if part:
                name = part.split(":")[0].split("=")[0].strip()
                if name != "self":
                    out.append((name, "=" in part))
            continue
        cur += ch
    return out


def backend_signatures(cls: type | None = None) -> dict[str, list[list[tuple[str, bool]]]]:
    """Each method of torch's ``Backend`` binding -> its overloads' parameters, from the installed torch."""
    cls = cls if cls is not None else torch._C._distributed_c10d.Backend
    sigs: dict[str, list[list[tuple[str, bool]]]] = {}
    for name in dir(cls):
        if name.startswith("__"):
            continue
        doc = getattr(getattr(cls, name), "__doc__", None) or ""
        for line in doc.splitlines():
            m = _SIG.match(line.strip())
            if m and m.group(1) == name:
                sigs.setdefault(name, []).append(_split_params(m.group(2)))
    return sigs


_SIGS: list = []


def check_call(name: str, args: tuple, kwargs: dict) -> None:
    """Raise ``TypeError`` unless some overload of ``Backend.<name>`` (or an NCCL-only binding) takes the call."""
    if not _SIGS:
        _SIGS.append(backend_signatures())
    overloads = _SIGS[0].get(name)
    if overloads is None:
        if name not in _NCCL_ONLY:
            raise TypeError(f"ProcessGroupNCCL has no method {name!r} (not in torch {torch.__version__}'s Backend binding)")
        overloads = [[(p, False) for p in _NCCL_ONLY[name]]]
    for params in overloads:
        names = [p for p, _ in params]
        if len(args) > len(params):
            continue
        given = set(names[:len(args)])
        if any(k not in names or k in given for k in kwargs):
            continue
        given |= set(kwargs)
        if all(p in given or has_default for p, has_default in params):
            return
    shown = " | ".join("(" + ", ".join(p + ("=..." if d else "") for p, d in ps) + ")" for ps in overloads)
    raise TypeError(f"{name}(): incompatible arguments: {len(args)} positional, keywords {sorted(kwargs)}; "
                    f"the binding takes {shown}")


def _bytes_view(x):
    """float8 tensors as their uint8 bytes (gloo has no float8 type)."""
    if isinstance(x, torch.Tensor):
        return x.view(torch.uint8) if x.dtype in _F8 else x
    if isinstance(x, (list, tuple)):
        return type(x)(_bytes_view(v) for v in x)
    return x


def _flat_tensors(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


class _Item:
    """One op on a rank's stream: ``run`` executes it there; ``landed`` is set when its data is in place."""

    def __init__(self, name: str, run: Callable[[], None]) -> None:
        self.name, self.run = name, run
        self.landed = threading.Event()
        self.start: Callable[[], Any] | None = None  # p2p: issue without waiting (inside a group)
        self.enqueued = False
        self.error: BaseException | None = None


class StandInWork(dist.Work):
    """An NCCL Work: its future is done at enqueue; ``wait()`` orders, ``wait(timeout)`` is a host sync."""

    def __init__(self, standin: "NcclStandIn", item: _Item, result: Any) -> None:
        super().__init__()
        self._s, self._item = standin, item
        self._fut = torch.futures.Future()
        self._fut.set_result(result)  # complete at enqueue, as WorkNCCL's future

    def wait(self, timeout: timedelta | None = None) -> bool:
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else (float(timeout) if timeout else 0.0)
        if secs > 0:
            self._s.host_syncs.append(self._item.name)  # WorkNCCL::wait(timeout): the host polls the GPU
            if self._s.strict:
                raise StandInHostSync(f"nccl stand-in rank {self._s.rank()}: {self._item.name} waited on with a "
                                      f"timeout ({secs:g} s): a host sync on NCCL")
        if not self._item.enqueued:  # inside an open coalescing group: no end event to wait for yet
            self._s.early_waits.append(self._item.name)
            if self._s.strict:
                raise StandInHostSync(f"nccl stand-in rank {self._s.rank()}: {self._item.name} waited on inside "
                                      "a coalescing group that has not ended (the wait orders nothing)")
            return True
        self._s.stream_waits += 1
        self._s._land(self._item, secs or None)
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def is_completed(self) -> bool:
        return self._item.landed.is_set()

    def is_success(self) -> bool:
        return self._item.landed.is_set() and self._item.error is None

    def exception(self):
        return self._item.error


class NcclStandIn:
    """One rank's ``ProcessGroupNCCL`` stand-in over gloo (see the module docstring)."""

    supports_coalescing = True

    def __init__(self, store, rank: int, size: int, timeout: timedelta, strict: bool = False) -> None:
        self._rank, self._size = int(rank), int(size)
        self.strict = strict  # a host sync raises StandInHostSync (register_strict)
        self._timeout = timeout
        self._timeout_s = max(float(timeout.total_seconds()), 1e-3)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("standin-gloo", store), rank, size, timeout)
        self._store = dist.PrefixStore("standin-p2p", store)
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._broken: BaseException | None = None
        self._group: list | None = None
        self._sends: dict[int, int] = {}  # peer -> sends issued to it (NCCL matches p2p in order)
        self._recvs: dict[int, int] = {}
        self.calls: list[str] = []  # method names, in call order
        self.host_syncs: list[str] = []  # ops waited on with a timeout (WorkNCCL::wait(timeout) polls the host)
        self.stream_waits = 0  # wait() calls that ordered the caller after an op (no host sync on a GPU)
        self.early_waits: list[str] = []  # wait() on an op of a coalescing group that had not ended
        self.deadlocks: list[str] = []  # wait-for cycles seen (a send whose receiver never posted the recv)
        self._thread = threading.Thread(target=self._stream, daemon=True, name=f"nccl-standin-stream-{rank}")
        self._thread.start()

    # ------------------------------------------------------------------ the stream
    def _stream(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if self._broken is not None:  # NCCL: a communicator in error fails every later op
                item.error = self._broken
            else:
                try:
                    item.run()
                except BaseException as exc:  # noqa: BLE001 - held by the item, raised by its wait
                    item.error = self._broken = exc
            item.landed.set()

    def _enqueue(self, item: _Item) -> None:
        item.enqueued = True
        self._q.put(item)

    def _land(self, item: _Item, limit_s: float | None) -> None:
        limit = limit_s or self._timeout_s * 3  # the stream's own waits time out first
        if not item.landed.wait(limit):
            raise TimeoutError(f"nccl stand-in rank {self._rank}: {item.name} did not land within {limit:g} s")
        if item.error is not None:
            raise item.error

    def _issue(self, name: str, run: Callable[[], None], result: Any, opts=None):
        """Enqueue (or add to the open group); an ``asyncOp=False`` op returns ``None`` once in stream order."""
        item = _Item(name, run)
        if self._group is not None:
            self._group.append(item)
            return StandInWork(self, item, result)
        self._enqueue(item)
        if opts is not None and not getattr(opts, "asyncOp", True):
            # ProcessGroupNCCL::collective: the op runs on the current stream and no Work is returned;
            # on CPU the caller's thread is that stream, so it continues once the op has landed
            self._land(item, None)
            return None
        return StandInWork(self, item, result)

    def _gloo_run(self, fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            w = fn()
            if w is not None:
                w.wait(self._timeout)
        return run

    # ------------------------------------------------------------------ checks
    def _check(self, name: str, args: tuple, kwargs: dict) -> None:
        check_call(name, args, kwargs)
        self.calls.append(name)

    @staticmethod
    def _check_reduce(op, tensors) -> None:
        key = getattr(op, "op", op)
        if key not in _NCCL_REDUCE_OPS:
            raise ValueError(f"Cannot use ReduceOp.{str(key).split('.')[-1]} with NCCL")
        if any(t.dtype in _F8 for t in _flat_tensors(tensors)):
            raise StandInLimit("nccl stand-in: no float8 reduction (gloo underneath has no float8 type)")

    # ------------------------------------------------------------------ collectives
    def _one(self, name: str, args: tuple, kwargs: dict, kind, reduces: bool = False):
        """An op on one list of tensors: ``(tensors[, opts])`` (float8 moved as bytes unless it reduces)."""
        self._check(name, args, kwargs)
        tensors, opts = args[0], (args[1] if len(args) > 1 else kwargs.get("opts", kind()))
        view = self._view(opts, tensors, reduces)
        fn = getattr(self._gloo, name)
        return self._issue(name, self._gloo_run(lambda: fn(view(tensors), opts)), tensors, opts)

    def _two(self, name: str, args: tuple, kwargs: dict, kind, reduces: bool = False):
        """An op ``(outputs, inputs[, opts])`` (float8 moved as bytes unless it reduces)."""
        self._check(name, args, kwargs)
        outs, ins = args[0], args[1]
        opts = args[2] if len(args) > 2 else kwargs.get("opts", kind())
        view = self._view(opts, outs, reduces)
        fn = getattr(self._gloo, name)
        result = outs if isinstance(outs, list) else [outs]
        return self._issue(name, self._gloo_run(lambda: fn(view(outs), view(ins), opts)), result, opts)

    def _view(self, opts, tensors, reduces: bool):
        if reduces:
            self._check_reduce(opts.reduceOp, tensors)
            return lambda x: x
        return _bytes_view

    def allreduce(self, *args, **kwargs):
        return self._one("allreduce", args, kwargs, _C.AllreduceOptions, reduces=True)

    def broadcast(self, *args, **kwargs):
        return self._one("broadcast", args, kwargs, _C.BroadcastOptions)

    def reduce(self, *args, **kwargs):
        return self._one("reduce", args, kwargs, _C.ReduceOptions, reduces=True)

    def allgather(self, *args, **kwargs):
        return self._two("allgather", args, kwargs, _C.AllgatherOptions)

    def _allgather_base(self, *args, **kwargs):
        return self._two("_allgather_base", args, kwargs, _C.AllgatherOptions)

    def reduce_scatter(self, *args, **kwargs):
        return self._two("reduce_scatter", args, kwargs, _C.ReduceScatterOptions, reduces=True)

    def _reduce_scatter_base(self, *args, **kwargs):
        return self._two("_reduce_scatter_base", args, kwargs, _C.ReduceScatterOptions, reduces=True)

    def gather(self, *args, **kwargs):
        return self._two("gather", args, kwargs, _C.GatherOptions)

    def scatter(self, *args, **kwargs):
        return self._two("scatter", args, kwargs, _C.ScatterOptions)

    def alltoall(self, *args, **kwargs):
        return self._two("alltoall", args, kwargs, _C.AllToAllOptions)

    def alltoall_base(self, *args, **kwargs):
        self._check("alltoall_base", args, kwargs)
        out, inp, osz, isz = args[:4]
        opts = args[4] if len(args) > 4 else kwargs.get("opts", _C.AllToAllOptions())
        return self._issue("alltoall_base", self._gloo_run(
            lambda: self._gloo.alltoall_base(_bytes_view(out), _bytes_view(inp), osz, isz, opts)), [out], opts)

    def barrier(self, *args, **kwargs):
        self._check("barrier", args, kwargs)
        opts = args[0] if args else kwargs.get("opts", _C.BarrierOptions())
        return self._issue("barrier", self._gloo_run(lambda: self._gloo.barrier(opts)), [], opts)

    # ------------------------------------------------------------------ point to point
    def _key(self, src: int, dst: int, k: int) -> str:
        return f"posted/{src}->{dst}/{k}"

    def send(self, *args, **kwargs):
        self._check("send", args, kwargs)
        tensors, dst = args[0], int(args[1])
        k = self._sends[dst] = self._sends.get(dst, 0) + 1
        name = f"send #{k} to rank {dst}"
        work = self._issue(name, lambda: self._send_run(tensors, dst, k, name, wait=True), tensors)
        work._item.start = lambda: self._send_run(tensors, dst, k, name, wait=False)
        return work

    def recv(self, *args, **kwargs):
        self._check("recv", args, kwargs)
        tensors, src = args[0], int(args[1])
        k = self._recvs[src] = self._recvs.get(src, 0) + 1
        work = self._issue(f"recv #{k} from rank {src}", lambda: self._recv_run(tensors, src, k, wait=True), tensors)
        work._item.start = lambda: self._recv_run(tensors, src, k, wait=False)
        return work

    def _send_run(self, tensors, dst: int, k: int, name: str, wait: bool):
        # NCCL has no tags and matches in order; the send starts moving data only once the peer's
        # stream has reached the matching recv (a message above NCCL's buffering)
        self._store.set(f"blocked/{self._rank}", name)
        try:
            self._store.wait([self._key(self._rank, dst, k)], self._timeout)
        except Exception:  # noqa: BLE001 - the store's timeout: nobody posted the recv
            try:
                peer = self._store.get(f"blocked/{dst}").decode()
            except Exception:  # noqa: BLE001
                peer = "unknown"
            msg = (f"nccl stand-in: rank {self._rank}'s stream is blocked in {name}, and rank {dst} has not posted "
                   f"the matching recv within {self._timeout_s:g} s (rank {dst}'s stream is blocked in: {peer})")
            self.deadlocks.append(msg)
            raise StandInDeadlock(msg) from None
        self._store.set(f"blocked/{self._rank}", "-")
        w = self._gloo.send(_bytes_view(list(tensors)), dst, 0)
        if not wait:
            return w
        w.wait(self._timeout)
        return None

    def _recv_run(self, tensors, src: int, k: int, wait: bool):
        self._store.set(self._key(src, self._rank, k), "1")
        w = self._gloo.recv(_bytes_view(list(tensors)), src, 0)
        if not wait:
            return w
        w.wait(self._timeout)
        return None

    # ------------------------------------------------------------------ coalescing
    def _start_coalescing(self, *args, **kwargs) -> None:
        self._check("_start_coalescing", args, kwargs)
        if self._group is not None:
            raise RuntimeError("ProcessGroupNCCL: coalescing already started")
        self._group = []

    def _end_coalescing(self, *args, **kwargs):
        self._check("_end_coalescing", args, kwargs)
        items, self._group = self._group, None
        if items is None:
            raise RuntimeError("ProcessGroupNCCL: _end_coalescing without _start_coalescing")
        for it in items:
            it.enqueued = True

        def run() -> None:
            # one NCCL group: every receive is posted before any send waits for its peer
            p2p = [it for it in items if it.start is not None]
            works = [it.start() for it in sorted(p2p, key=lambda it: not it.name.startswith("recv"))]
            for it in items:
                if it.start is None:
                    it.run()
            for w in works:
                if w is not None:
                    w.wait(self._timeout)

        group = _Item("coalesced group", run)
        self._enqueue(group)

        def land_all() -> None:  # the group's outputs land together, at its end
            group.landed.wait()
            for it in items:
                it.error = group.error
                it.landed.set()

        threading.Thread(target=land_all, daemon=True, name="nccl-standin-group").start()
        return StandInWork(self, group, None)

    def _group_start(self, *args, **kwargs) -> None:
        check_call("_group_start", args, kwargs)
        self._start_coalescing()

    def _group_end(self, *args, **kwargs) -> None:
        check_call("_group_end", args, kwargs)
        self._end_coalescing()

    # ------------------------------------------------------------------ lifecycle
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "nccl"

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _shutdown(self, *args, **kwargs) -> None:
        check_call("_shutdown", args, kwargs)
        self.calls.append("_shutdown")
        self._stop()

    def abort(self) -> None:
        self.calls.append("abort")
        self._stop()

    def _stop(self) -> None:
        """End the stream thread and wait for it (bounded): a daemon thread still inside gloo while the
        process exits tears gloo down under it (a spawned rank then died with "terminate called")."""
        self._q.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(self._timeout_s)


def register_standin(name: str = STANDIN_NAME, strict: bool = False) -> str:
    """Register :class:`NcclStandIn` with torch as backend ``name`` (idempotent); returns ``name``.

    Select it for the replay wrapper with ``ReplayConfig(inner_backends={"cpu": name})``. ``strict``:
    a host sync raises :class:`StandInHostSync` instead of only being recorded."""
    if name not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            name, lambda store, rank, size, timeout: NcclStandIn(store, rank, size, timeout, strict=strict),
            devices=["cpu", "cuda"])
    return name


def register_strict() -> str:
    """Register the strict stand-in as :data:`STRICT_NAME` (a backend plugin for spawned training ranks)."""
    return register_standin(STRICT_NAME, strict=True)
