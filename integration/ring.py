"""Ring mode: reduce-scatter and all-gather hops over the inner send/recv, laid out, directed and
summed as gloo's ring (``gloo/allreduce.cc``), so that at zero errors the result is bit-identical."""

from __future__ import annotations

import torch
import torch.distributed as dist

from integration.registration import BACKEND_NAME, UnsupportedOperation
from integration.replay import _FLOAT8

_RING_TAG = 0x50_38  # tags of the ring hops, apart from user point-to-point traffic (tag 0)


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


class RingOps:
    """The ring algorithms of :class:`integration.process_group.ReplayProcessGroup` (a mixin: the state is set in its ``__init__``)."""

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
        # one GPU: ReplayConfig.inner_backends["cuda"] = "gloo") a hop goes through host copies
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
