"""A pipeline stage that carries the ``phy802`` group's link errors while its traffic runs on a stock group.

``torch.distributed.pipelining`` has no communication hook; its supported seam is the stage object
that a schedule drives (torch 2.13's ``stage.py`` / ``schedules.py``): a schedule asks the stage for
its receive ops (``get_fwd_recv_ops`` / ``get_bwd_recv_ops``) and issues them, waits for them, and
only then calls ``forward_one_chunk`` / ``backward_one_chunk``, which read the received activations
and activation gradients from the stage's receive buffers. :class:`ReplayStage`, a
``PipelineStage``, uses exactly those public methods: where the schedule takes a receive op it
reserves the message's delivery on the ``phy802`` group (:meth:`ReplayProcessGroup.recv_replayed`,
the reservation the group path makes when it issues that recv), and where the schedule computes on
the chunk it applies the flips, guard, counters and log to the received buffer; a send op is
shadowed as the group path shadows a send (the sender learns of a lost message at issue). Each
link's source, seed and cursor are the ``phy802`` group's; on each link the messages come in the
same order as in the group path (one direction carries only activations, the other only
activation gradients, both in microbatch order).

What differs from the group path: a ``PipelineStage`` that infers its shapes at the first step
sends small control messages (its warm-up vote, pickled metadata) over its group. In the group path
they cross the ``phy802`` group and advance each link's stream; here they stay on the stock group,
so the data messages start at other stream offsets and the same seed puts its flips elsewhere. The
payload, the message sizes and their order per link are the same.

A lost message fails the stage at its next chunk (or its next receive): a :class:`LinkFailure`
on the receiving and the sending stage, after the lost message's ops were issued (the peer needs
them). A stage that takes no part in the failed link (3+ stages: the stage two hops away) would
wait in the stock group's receive for a message its stopped neighbour never sends, until the stock
group's timeout, because a schedule waits on the receive Works itself (``_wait_batch_p2p``, a plain
``Work.wait()``) and gloo's ``abort()``/``shutdown()`` wake no pending receive (tried on torch
2.13: the receive ran to the group timeout). So on a CPU stage :class:`ReplayStage` issues the
receives itself where the schedule asks for them (the same ``dist.irecv`` that ``_batch_p2p`` issues
for a batch of receives) and hands the schedule none; it waits for them before computing on the
chunk, polling the ``phy802`` group's store (:meth:`ReplayProcessGroup.wait_carried`), so every
stage raises :class:`LinkFailure` within a poll of the first failure. The receives are posted no
later than the schedule would post them (1F1B's fused send+receive batches become the sends alone,
with the receive already posted), so no new wait-for cycle can form. A CUDA stage leaves the
receives to the schedule (NCCL's order on the stream is the schedule's, and a wait there does not
block the host): a stage two hops from the failed link still waits until the stock group's timeout
(NCCL's watchdog).
"""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

__all__ = ["ReplayStage"]


class ReplayStage(PipelineStage):
    """A ``PipelineStage`` on a stock ``group`` whose received activations and activation gradients
    carry the link errors of ``replay_group`` (a ``phy802`` group of the same ranks in the same order).

    Takes ``PipelineStage``'s arguments, plus ``replay_group``. A BER-0 ``phy802`` group leaves every
    tensor as the stock group delivered it (bit-identical training)."""

    def __init__(self, *args, replay_group: dist.ProcessGroup, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        name = getattr(replay_group, "getBackendName", None)
        if name is None or name() != "phy802":
            raise ValueError("phy802 pipeline stage: replay_group must be a phy802 group "
                             "(dist.new_group(backend='phy802'))")
        mine = dist.get_process_group_ranks(self.group or dist.distributed_c10d._get_default_group())
        theirs = dist.get_process_group_ranks(replay_group)
        if mine != theirs:
            raise ValueError(f"phy802 pipeline stage: the stage's group has ranks {mine}, the phy802 group "
                             f"{theirs}; they must be the same ranks in the same order")
        self._replay = replay_group
        self._received: dict[tuple[str, int], list[dist.Work]] = {}  # chunk -> its reserved receive sides
        self._sent: list[dist.Work] = []  # shadowed sends not yet checked for a loss
        # CPU (gloo): the stage issues its receives and waits on them polling the store (module docstring)
        self._own_recvs = self.device.type == "cpu"
        self._carried: dict[tuple[str, int], list[tuple[dist.Work, int]]] = {}  # chunk -> (stock recv, group peer)

    def _peer(self, global_rank: int) -> int:
        return dist.get_group_rank(self._replay, global_rank)

    def _reserve(self, key: tuple[str, int], ops: list[dist.P2POp]) -> list[dist.P2POp]:
        failed = self._replay.failed
        if failed is not None:  # in error before this receive: its peer may have stopped sending
            raise failed
        self._received[key] = [self._replay.recv_replayed([op.tensor], self._peer(op.peer)) for op in ops]
        if not self._own_recvs or not ops:
            return ops
        # as torch's _batch_p2p issues a batch of receives (schedules.py), one irecv each
        self._carried[key] = [(dist.irecv(op.tensor, group=op.group, tag=op.tag, group_src=op.group_peer),
                               op.group_peer) for op in ops]
        return []

    def _shadow(self, ops: list[dist.P2POp]) -> list[dist.P2POp]:
        self._sent += [self._replay.send_replayed([op.tensor], self._peer(op.peer)) for op in ops]
        return ops

    def _deliver(self, key: tuple[str, int]) -> None:
        """Before computing on chunk ``key``: raise a loss of an earlier send; apply the chunk's flips."""
        sent, self._sent = self._sent, []
        for w in sent:
            w.wait()
        for w, peer in self._carried.pop(key, []):  # the data lands before its flips are applied
            self._replay.wait_carried(w, peer)
        for w in self._received.pop(key, []):
            w.wait()

    def get_fwd_recv_ops(self, fwd_chunk_id: int) -> list[dist.P2POp]:
        return self._reserve(("fwd", fwd_chunk_id), super().get_fwd_recv_ops(fwd_chunk_id))

    def get_bwd_recv_ops(self, bwd_chunk_id: int) -> list[dist.P2POp]:
        return self._reserve(("bwd", bwd_chunk_id), super().get_bwd_recv_ops(bwd_chunk_id))

    def get_fwd_send_ops(self, fwd_chunk_id: int) -> list[dist.P2POp]:
        return self._shadow(super().get_fwd_send_ops(fwd_chunk_id))

    def get_bwd_send_ops(self, bwd_chunk_id: int) -> list[dist.P2POp]:
        return self._shadow(super().get_bwd_send_ops(bwd_chunk_id))

    def forward_one_chunk(self, fwd_chunk_id: int, *args, **kwargs):
        self._deliver(("fwd", fwd_chunk_id))
        return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)

    def backward_one_chunk(self, bwd_chunk_id: int, *args, **kwargs):
        self._deliver(("bwd", bwd_chunk_id))
        return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)
