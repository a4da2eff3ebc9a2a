"""A DDP communication hook that carries the ``phy802`` group's link errors.

For a model wrapped in ``DistributedDataParallel`` over a stock group (gloo; NCCL on GPUs, so
that DDP's construction, its parameter broadcast and its buffers stay on torch's own backend):
``install_ddp_hook(ddp_model, phy802_group)`` registers, through DDP's supported seam
``register_comm_hook`` (as torch's own ``default_hooks.allreduce_hook`` / fp16 / PowerSGD hooks
do), a hook that all-reduces each gradient bucket over the ``phy802`` group instead: the same
delivery model, flips, guards, counters and log as ``DDP(model, process_group=phy802_group)``
for the gradient traffic. Like torch's ``allreduce_hook``, the bucket is divided by the world
size first and summed, which is what DDP's built-in reduction computes (the tests check the
result bit-identical to plain DDP at BER 0). The phy802 group must hold the same ranks in the
same order as DDP's group (checked once, at installation).
"""

import torch  # no ``from __future__ import annotations``: DDP checks the hook's annotations as objects
import torch.distributed as dist

from integration.works import then_completion

__all__ = ["replay_allreduce_hook", "install_ddp_hook"]


def replay_allreduce_hook(group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket pre-divided by the world size, summed over the phy802 ``group``."""
    buf = bucket.buffer()
    buf.div_(group.size())
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    return then_completion(fut, _first_value)  # dropped on gloo's thread: counted (works._Completion)


def _first_value(f):
    return f.value()[0]


def install_ddp_hook(model: torch.nn.parallel.DistributedDataParallel, group: dist.ProcessGroup) -> None:
    """Register :func:`replay_allreduce_hook` on ``model`` with the phy802 ``group`` as its state."""
    name = getattr(group, "getBackendName", None)
    if name is None or name() != "phy802":
        raise ValueError("phy802 DDP hook: group must be a phy802 group (dist.new_group(backend='phy802'))")
    a = dist.get_process_group_ranks(model.process_group)
    b = dist.get_process_group_ranks(group)
    if a != b:
        raise ValueError(f"phy802 DDP hook: DDP's group has ranks {a}, the phy802 group {b}; they must be the same "
                         "ranks in the same order")
    model.register_comm_hook(group, replay_allreduce_hook)
