"""Point-to-point traffic: send/recv, the per-direction inner communicators of a stream-ordered
inner (two ranks that both send first never wait on each other's send), and the optional queue that
issues sends/receives as one coalesced group (``ReplayConfig.batch_p2p="always"``)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from integration.agreement import _op
from integration.replay import LinkFailure
from integration.works import _DeferredWork, _wait_polled


class PointToPoint:
    """Point-to-point ops of :class:`integration.process_group.ReplayProcessGroup` (a mixin: the state is set in its ``__init__``)."""

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

    def _queue_p2p(self, t: torch.Tensor) -> bool:
        # an isend/irecv is issued when it is called ("auto"); a deferred send left a
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

    def _recv_class(self, t: torch.Tensor, src: int) -> str:
        """The traffic class of a message received from ``src``: activations when it travels the
        pipeline's forward direction (``ReplayConfig.forward_increasing``), else activation_grads."""
        fwd = (src < self._rank) == self.config.forward_increasing
        return self._classify("activations" if fwd else "activation_grads", t)

    @_op
    def recv(self, tensors, src: int, tag: int = 0):
        bufs = [self._stage_p2p(t) for t in tensors]
        pend = []
        for t, b in zip(tensors, bufs):
            c = self._recv_class(t, src)
            pend.append((t, b, c, self._reserve("recv", c, b, src)))

        def finish():
            for t, b, c, p in pend:
                self._receive(p, c, self._flat(b))
                self._unstage(t, b)

        return self._p2p("recv", bufs, src, tag, finish)

    # ------------------------------------------------------------------ traffic carried by another group
    @_op
    def recv_replayed(self, tensors, src: int) -> dist.Work:
        """The receive side of a message from rank ``src`` that another group (a stock NCCL/gloo group)
        carries into ``tensors``: its delivery is reserved now, as :meth:`recv` reserves it at issue
        (call this where that recv is issued, in the same order), and its flips, guard, counters and
        log are applied to ``tensors`` when the returned Work is waited on, after the data has landed.
        The Work raises :class:`LinkFailure` if the message was lost (the other group's recv must
        still be issued: its sender needs it). ``integration.pp_hooks`` uses it for pipeline stages."""
        pend = []
        for t in tensors:
            c = self._recv_class(t, src)
            pend.append((t, c, self._reserve("recv", c, t, src)))

        def finish() -> None:
            for t, c, p in pend:
                if p is not None:
                    b = self._stage(t)
                    self._receive(p, c, self._flat(b))
                    self._unstage(t, b)

        return _DeferredWork(None, finish, self._timeout_s, tensors, f"recv from rank {src}", ordered=True)

    def wait_carried(self, work: dist.Work, peer: int, kind: str = "recv") -> None:
        """Wait on ``work``, a send/recv with rank ``peer`` that another group (a stock gloo group) carries,
        bounded by this group's timeout, while this group's store is polled for a link failure, as this
        group's own send/recv waits are (:func:`_wait_polled`, :meth:`_p2p_poll`): raises
        :class:`LinkFailure` as soon as a link of the group failed (a stage two hops from the failed
        link waits on a stage that has stopped). For a gloo Work only: it blocks the host (on a
        stream-ordered inner such as NCCL the host never waits here, see ``integration.pp_hooks``)."""
        what = f"{kind} {'to' if kind == 'send' else 'from'} rank {peer}"
        _wait_polled(work, self._timeout_s, what, lambda w: self._p2p_poll(w, peer))

    @_op
    def send_replayed(self, tensors, dst: int) -> dist.Work:
        """The sending side of a message to ``dst`` that another group carries (:meth:`recv_replayed`):
        the sender learns at issue, as :meth:`send` does, whether the message will be lost; the returned
        Work raises :class:`LinkFailure` then, and nothing else (a sender's buffer is never modified)."""
        for t in tensors:
            self._shadow("send", t, dst)
        return _DeferredWork(None, None, self._timeout_s, tensors, f"send to rank {dst}", ordered=True)
