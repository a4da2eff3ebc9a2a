"""Cross-rank agreement on lost frames: every rank fails the same collective.

A rank whose link lost a frame writes the group's store key before it issues the op; the others
find it when an op completes (gloo: every peer has issued it by then), while blocked in a wait, when
an inner op fails, or at :meth:`FailureAgreement.check_failures` (a stream-ordered inner such as NCCL,
whose completion says nothing about the peers). :func:`_op` wraps each public op of the group."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

from integration.registration import BACKEND_NAME, UnsupportedOperation
from integration.replay import LinkFailure
from integration.sources import NoErrors
from integration.works import _FailedWork

_FAILED_KEY = "phy802_qp_error"  # in the group's (prefixed) store: set by a rank whose link lost a frame


# beside it, per rank, written just before it: "<collective index> <message>" of that rank's first loss
_FAILED_AT_KEY = "phy802_qp_error/{rank}"


_P2P_OPS = ("send", "recv", "send_replayed", "recv_replayed")  # not counted as collectives: their order differs from rank to rank


_IN_BAND_OPS = (dist.ReduceOp.SUM, dist.ReduceOp.AVG)  # reductions that carry a NaN to every rank


_STOPPED_KEY = "phy802/stopped/{rank}"  # in the group's store: rank takes part in no further op (shutdown/abort)


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


class FailureAgreement:
    """The cross-rank failure agreement of :class:`integration.process_group.ReplayProcessGroup` (a mixin: the state is set in its ``__init__``)."""

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
        wrapper's own CPU time per DDP step).
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

    def _peer_loss(self, at: int | None) -> tuple[int | None, str] | None:
        """Another rank's lost frame that fails the op with collective index ``at`` (None: a send/recv,
        any loss of the group): ``(collective index of the loss, or None for a send/recv's; message)``, else None. Called once the group's key was found, so the
        look-ups per rank are paid only after a loss. Every loss at ``at`` or before is there once
        collective ``at`` has completed (each was written before its rank issued ``at``)."""
        if at is None:
            return None, self._store.get(_FAILED_KEY).decode(errors="replace")
        found = None
        for r in range(self._size):
            key = _FAILED_AT_KEY.format(rank=r)
            if r == self._rank or not self._store.check([key]):
                continue
            i, _, msg = self._store.get(key).decode(errors="replace").partition(" ")
            if int(i) <= at and (found is None or int(i) < found[0]):
                found = (int(i), msg)
        return found

    def _peer_poll(self, what: str, at: int | None = None, from_loss: bool = False) -> None:
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
                found = self._peer_loss(at)
            except Exception:  # noqa: BLE001 - a store gone away: the wait's own timeout decides
                return
            if found is None:
                return  # lost in a later collective: this one completes (the peer issued it first)
            lost_at, msg = found
            if from_loss and lost_at is not None:
                at = lost_at  # found after the fact (check_failures): in error from the collective that lost it
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

    def _inner_failed(self, what: str, at: int | None) -> None:
        """An inner op failed (a peer stopped, a timeout): if the store holds a peer's lost frame that
        fails this op, raise that :class:`LinkFailure` instead (one look-up, on the failure path only)."""
        try:
            self._peer_poll(what, at, from_loss=True)
        except LinkFailure:
            raise
        except Exception:  # noqa: BLE001 - the inner failure is the error to report
            return

    def check_failures(self) -> None:
        """Raise :class:`LinkFailure` if this or another rank of the group lost a frame (one store look-up).

        On a stream-ordered inner (NCCL) an op's completion says nothing about the peers, so a peer's
        loss is not looked up per op; call this where the ranks agree to look (e.g. at the end of
        each step), or let a later op that cannot complete fail. The group is then in error from the
        first collective at which any rank lost a frame, on every rank (a rank that lost a frame of
        its own later learns here that a peer lost one earlier). Only the collectives this rank has
        issued count (``_colls - 1`` and before): a peer that runs ahead may already have noted a loss
        in the next one (its index is ``_colls``), which fails this rank in that op once it issues it;
        found here, this rank would stop one op early, and the peer would wait in that op for this
        rank's part until the group timeout (or its gloo pairs would meet the failed run's gather)."""
        try:
            found = self._peer_loss(self._colls - 1) if self._store.check([_FAILED_KEY]) else None
        except Exception:  # noqa: BLE001 - a store gone away: nothing to learn from it
            found = None
        if found is not None:
            lost_at, msg = found
            with self._lock:
                if self._failed is None:
                    self._failed = LinkFailure(f"{BACKEND_NAME}: rank {self._rank}: a link of the group failed ({msg})",
                                               op="check_failures", rank=self._rank)
                    self._failed_at = lost_at
                elif lost_at is not None and self._failed_at is not None and lost_at < self._failed_at:
                    self._failed_at = lost_at
        if self._failed is not None:
            raise self._refuse("check_failures")

    @property
    def failed(self) -> LinkFailure | None:
        """The link failure that put this group in error on this rank (``None`` while healthy)."""
        return self._failed

    def mark_stopped(self) -> None:
        """Tell the group's store that this rank takes part in no further op of this group: a peer in
        error by its own lost frames stops waiting on a send/recv with this rank (:meth:`_p2p_poll`).
        Called by :meth:`shutdown` and :meth:`abort`, and by ``phy802 train`` as soon as a run stops
        after a :class:`LinkFailure` (before it gathers the counters over the default group)."""
        try:
            self._store.set(_STOPPED_KEY.format(rank=self._rank), "1")
        except Exception:  # noqa: BLE001 - a store already gone: nobody is left to tell
            pass
