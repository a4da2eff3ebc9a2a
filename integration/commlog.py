"""Communication log of the ``phy802`` ProcessGroup: per step, each op, bytes, dtype, traffic class, peers.

Every :class:`integration.process_group.ReplayProcessGroup` carries a :class:`CommLog` as
``group.commlog``; its operations are recorded when they are issued (:func:`instrument` wraps
the group's op methods, so the group itself needs three lines).  The training loop marks step
boundaries with ``group.commlog.mark_step(step)``, which also measures the wall time of the
previous step.  From Python::

    group = dist.new_group(backend="phy802")
    for step in range(steps):
        group.commlog.mark_step(step)
        ...                                  # forward, backward (DDP buckets), optimizer
    group.commlog.save("comm.jsonl", parallel="ddp", params=n_params, tokens_per_step=tokens)

``phy802 train --comm-log FILE`` (``TrainConfig.comm_log``) makes every rank's log gathered and
rank 0 write ``FILE`` (:func:`save_gathered`).  The file format (JSON lines, readable without torch) and the replay
through the collective time model are in :mod:`protocol.cluster.steptime`.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any, Iterable

import torch

__all__ = ["CommLog", "instrument", "save_gathered"]

class CommLog:
    """Records of the operations one rank issued (dicts, see :mod:`protocol.cluster.steptime`)."""

    def __init__(self, rank: int, world_size: int, limit: int = 2_000_000) -> None:
        self.rank, self.world_size, self.limit = int(rank), int(world_size), int(limit)
        self.enabled = True
        self.step = 0
        self.dropped = 0
        self._records: list[dict] = []
        self._step_s: list[float] = []
        self._t0: float | None = None
        self._lock = threading.Lock()
        # (op, default class, dtype, numel, the group's class override) -> (bytes, dtype name, class) of a
        # one-tensor collective: DDP's buckets and FSDP2's flat buffers repeat every step, so an op costs
        # one look-up here instead of a classification and a size sum (bounded: sizes that never repeat)
        self._kinds: dict[tuple, tuple[int, str, str]] = {}

    def mark_step(self, step: int | None = None) -> None:
        """Start step ``step`` (default: the next); the previous step's wall time is recorded."""
        now = time.perf_counter()
        with self._lock:
            if self._t0 is not None:
                self._step_s.append(now - self._t0)
            self._t0 = now
            self.step = self.step + 1 if step is None else int(step)

    def record(self, op: str, nbytes: int, dtype: str, cls: str, peers: Any) -> None:
        if not self.enabled:
            return
        with self._lock:
            if len(self._records) >= self.limit:
                self.dropped += 1
                return
            # a tuple per op (made into a dict when read): this runs once per op, on the issuing thread
            self._records.append((self.step, op, nbytes, dtype, cls, peers))

    def record_op(self, group, op: str, default: str | None, ts, peers: Any) -> None:
        """Record op ``op`` of ``group`` on tensors ``ts`` (its bytes, dtype and traffic class, see
        :func:`instrument`). The class of a one-tensor collective is memoised on its dtype, size and the
        group's class override (``group._override``): ``group._classify(default, t)`` depends on those
        alone (as :class:`integration.process_group.ReplayProcessGroup`'s does)."""
        if default is not None and len(ts) == 1:
            t = ts[0]
            key = (op, default, t.dtype, t.numel(), getattr(group, "_override", None))
            kind = self._kinds.get(key)
            if kind is None:
                kind = _kind(group, op, default, list(ts), peers)
                if len(self._kinds) < 4096:
                    self._kinds[key] = kind
        else:
            ts = list(ts)
            kind = _kind(group, op, default, ts, peers)
        with self._lock:  # record()'s body: one call less per op
            if len(self._records) >= self.limit:
                self.dropped += 1
                return
            self._records.append((self.step, op, kind[0], kind[1], kind[2], peers))

    def records(self) -> list[dict]:
        with self._lock:
            recs = list(self._records)
        return [{"rank": self.rank, "step": step, "op": op, "bytes": int(nbytes), "dtype": dtype, "cls": cls,
                 "peers": peers} for step, op, nbytes, dtype, cls, peers in recs]

    def step_times(self) -> list[float]:
        """Wall time of each completed step, seconds (step ``k`` ends at the ``mark_step`` of ``k + 1``)."""
        with self._lock:
            return list(self._step_s)

    def header(self, **meta: Any) -> dict:
        h = {"world_size": self.world_size, "rank": self.rank, "dropped": self.dropped, **meta}
        h.setdefault("timing", {"step_s": self.step_times()})
        return h

    def save(self, path: str | os.PathLike, **meta: Any) -> None:
        """Write this rank's log to ``path`` (atomically; :func:`protocol.cluster.steptime.write_commlog`)."""
        from protocol.cluster.steptime import write_commlog

        write_commlog(path, self.header(**meta), self.records())


def save_gathered(path: str | os.PathLike, parts: Iterable[dict], **meta: Any) -> None:
    """Write the logs of all ranks (``{"records": [...], "step_s": [...]}`` per rank) as one file."""
    from protocol.cluster.steptime import write_commlog

    parts = list(parts)
    recs = [r for p in parts for r in p.get("records", [])]
    step_s = parts[0].get("step_s", []) if parts else []
    write_commlog(path, {"world_size": len(parts), "timing": {"step_s": step_s}, **meta}, recs)


# ---------------------------------------------------------------- recording the group's operations

def _dtype_entry(dt) -> tuple[str, int]:
    """(name without "torch.", element size in bytes) of a torch dtype."""
    return str(dt).replace("torch.", ""), int(dt.itemsize)


# every dtype torch names, worked out once: read once per op
_DTYPES = {dt: _dtype_entry(dt) for dt in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}}


def _dtype_info(dt) -> tuple[str, int]:
    info = _DTYPES.get(dt)
    return info if info is not None else _dtype_entry(dt)


def _dtype(t) -> str:
    return _dtype_info(t.dtype)[0]


def _nbytes(ts) -> int:
    return int(sum(t.numel() * _dtype_info(t.dtype)[1] for t in ts))


def _spec():
    """method name -> (op, default class, f(self, args, kwargs) -> (tensors, peers))."""
    def first(a):
        return a[0]

    return {
        "allreduce": ("allreduce", "gradients", lambda s, a, k: (a[0], "all")),
        "broadcast": ("broadcast", "params",
                      lambda s, a, k: (first(a), [int(getattr(a[1] if len(a) > 1 else k.get("opts"), "rootRank", 0))])),
        "allgather": ("allgather", "params", lambda s, a, k: (list(a[0][0]), "all")),
        "all_gather_single": ("allgather", "params", lambda s, a, k: ([a[0]], "all")),
        "_allgather_base": ("allgather", "params", lambda s, a, k: ([a[0]], "all")),
        "reduce_scatter": ("reduce_scatter", "gradients", lambda s, a, k: (list(a[1][0]), "all")),
        "reduce_scatter_single": ("reduce_scatter", "gradients", lambda s, a, k: ([a[1]], "all")),
        "_reduce_scatter_base": ("reduce_scatter", "gradients", lambda s, a, k: ([a[1]], "all")),
        "alltoall": ("alltoall", "activations", lambda s, a, k: (list(a[0]), "all")),
        "all_to_all_single": ("alltoall", "activations", lambda s, a, k: ([a[0]], "all")),
        "alltoall_base": ("alltoall", "activations", lambda s, a, k: ([a[0]], "all")),
        "send": ("send", None, lambda s, a, k: (first(a), [int(a[1])])),
        "recv": ("recv", None, lambda s, a, k: (first(a), [int(a[1])])),
        "barrier": ("barrier", "control", lambda s, a, k: ([], "all")),
    }


def _classify(group, op: str, default: str | None, ts: list, peer) -> str:
    if default is None:  # point to point: the direction decides, as the group's recv does
        fwd_flag = getattr(getattr(group, "config", None), "forward_increasing", True)
        other = peer[0]
        forward = (other > group.rank()) == fwd_flag if op == "send" else (other < group.rank()) == fwd_flag
        default = "activations" if forward else "activation_grads"
    if not ts:
        return "control"
    cls = getattr(group, "_classify", None)
    if cls is not None:
        return cls(default, ts[0])
    return default


def _kind(group, op: str, default: str | None, ts: list, peers) -> tuple[int, str, str]:
    """(bytes, dtype name, traffic class) of an op on tensors ``ts``."""
    return _nbytes(ts), _dtype(ts[0]) if ts else "none", _classify(group, op, default, ts, peers)


def instrument(group_cls: type) -> type:
    """Wrap ``group_cls``'s op methods so that each call is recorded in ``self.commlog`` first."""
    for name, (op, default, extract) in _spec().items():
        orig = getattr(group_cls, name, None)  # inherited too (send/recv come from integration.p2p)
        if orig is None or getattr(orig, "_phy802_commlog", False):
            continue

        def wrapped(self, *a, __orig=orig, __op=op, __default=default, __extract=extract, **k):
            log = getattr(self, "commlog", None)
            if log is not None and log.enabled:
                ts, peers = __extract(self, a, k)
                log.record_op(self, __op, __default, ts, peers)
            return __orig(self, *a, **k)

        functools.update_wrapper(wrapped, orig)
        wrapped._phy802_commlog = True
        setattr(group_cls, name, wrapped)
    return group_cls
