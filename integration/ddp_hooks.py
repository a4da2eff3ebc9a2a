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

``comm_dtype`` (``--comm-dtype``) bf16 / fp16: the bucket travels in that precision, as torch's
``default_hooks.bf16_compress_hook`` / ``fp16_compress_hook`` send it (torch/distributed/algorithms/
ddp_comm_hooks/default_hooks.py ``_compress_hook``): the fp32 bucket cast to the 16-bit type,
divided by the world size there, summed, and copied back into the fp32 bucket. The flips then land
on 16-bit words. :func:`torch_compress_hook` is torch's own hook, for a run over a stock group (the
baseline the tests compare with).
"""

import torch  # no ``from __future__ import annotations``: DDP checks the hook's annotations as objects
import torch.distributed as dist

from integration.works import first_value, then_completion

__all__ = ["replay_allreduce_hook", "replay_bf16_hook", "replay_fp16_hook", "install_ddp_hook", "torch_compress_hook",
           "COMM_TORCH_DTYPES"]

#: ``--comm-dtype`` -> the dtype the gradient buckets travel in (None: the bucket's own, fp32)
COMM_TORCH_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def replay_allreduce_hook(group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket pre-divided by the world size, summed over the phy802 ``group``."""
    buf = bucket.buffer()
    buf.div_(group.size())
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    return then_completion(fut, first_value)  # dropped on gloo's thread: counted (works._Completion)


def _compressed(dtype: torch.dtype, group: dist.ProcessGroup, bucket: dist.GradBucket):
    # torch's _compress_hook: cast, divide by the world size in the narrow type (as torch does: the
    # fp16 sum of the pre-divided shares cannot overflow where the fp32 sum would not), all-reduce,
    # copy the sum back into the bucket's own fp32 buffer
    buf = bucket.buffer()
    narrow = buf.to(dtype).div_(group.size())
    fut = dist.all_reduce(narrow, group=group, async_op=True).get_future()
    return then_completion(fut, _CopyBack(buf))


class _CopyBack:
    """The completion of a compressed bucket: the reduced 16-bit values written into the fp32 bucket."""

    def __init__(self, buf: torch.Tensor) -> None:
        self.buf = buf

    def __call__(self, f):
        return self.buf.copy_(f.value()[0])


def replay_bf16_hook(group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket sent as bfloat16 over the phy802 ``group`` (``--comm-dtype bf16``)."""
    return _compressed(torch.bfloat16, group, bucket)


def replay_fp16_hook(group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the bucket sent as float16 over the phy802 ``group`` (``--comm-dtype fp16``)."""
    return _compressed(torch.float16, group, bucket)


_HOOKS = {"fp32": replay_allreduce_hook, "bf16": replay_bf16_hook, "fp16": replay_fp16_hook}


def torch_compress_hook(comm_dtype: str):
    """torch's own compression hook for ``comm_dtype`` (bf16 / fp16), for DDP over a stock group.

    fp16: ``default_hooks.fp16_compress_hook``. bf16: the function ``default_hooks.bf16_compress_hook``
    calls (``_compress_hook(torch.bfloat16, ...)``), under another name, because DDP refuses a hook
    *named* ``bf16_compress_hook`` unless NCCL >= 2.10 is present (torch/nn/parallel/distributed.py
    ``_check_comm_hook``), while gloo reduces bfloat16 on CPU."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if comm_dtype == "fp16":
        return default_hooks.fp16_compress_hook
    if comm_dtype != "bf16":
        raise ValueError(f"comm_dtype must be bf16 or fp16 for a compression hook, got {comm_dtype!r}")

    def torch_bf16_hook(state: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return default_hooks._compress_hook(torch.bfloat16, state, bucket)

    return torch_bf16_hook


def install_ddp_hook(model: torch.nn.parallel.DistributedDataParallel, group: dist.ProcessGroup,
                     comm_dtype: str = "fp32") -> None:
    """Register :func:`replay_allreduce_hook` (``comm_dtype`` fp32) or the bf16 / fp16 hook on
    ``model`` with the phy802 ``group`` as its state."""
    if comm_dtype not in _HOOKS:
        raise ValueError(f"phy802 DDP hook: comm_dtype must be one of {tuple(_HOOKS)}, got {comm_dtype!r}")
    name = getattr(group, "getBackendName", None)
    if name is None or name() != "phy802":
        raise ValueError("phy802 DDP hook: group must be a phy802 group (dist.new_group(backend='phy802'))")
    a = dist.get_process_group_ranks(model.process_group)
    b = dist.get_process_group_ranks(group)
    if a != b:
        raise ValueError(f"phy802 DDP hook: DDP's group has ranks {a}, the phy802 group {b}; they must be the same "
                         "ranks in the same order")
    model.register_comm_hook(group, _HOOKS[comm_dtype])
