"""FSDP2 communication hooks that carry the ``phy802`` group's link errors.

For an FSDP2 model sharded over a stock group (e.g. NCCL, so that torch sees its own backend):
``install_fsdp_hooks(module, phy802_group)`` sets FSDP2's supported hooks
(``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``, torch 2.13's
``torch.distributed.fsdp._fully_shard._fsdp_api.AllGather`` / ``ReduceScatter`` interfaces) on
``module`` and on every FSDP module inside it, so that each parameter all-gather and gradient
reduce-scatter runs through the ``phy802`` group (``all_gather_into_tensor`` /
``reduce_scatter_tensor``): the same delivery model, flips, guards, counters and log as
``fully_shard(..., mesh=DeviceMesh.from_group(phy802_group))``, on the ``phy802`` group's inner
backend (NCCL for CUDA tensors). The FSDP group and the ``phy802`` group must hold the same ranks
in the same order (checked at each call).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

__all__ = ["ReplayAllGather", "ReplayReduceScatter", "install_fsdp_hooks"]


def _check_same_ranks(fsdp_group: dist.ProcessGroup, replay_group: dist.ProcessGroup, what: str) -> None:
    if fsdp_group is replay_group:
        return
    a = dist.get_process_group_ranks(fsdp_group)
    b = dist.get_process_group_ranks(replay_group)
    if a != b:
        raise ValueError(f"phy802 FSDP2 {what} hook: the FSDP group has ranks {a}, the phy802 group {b}; "
                         "they must be the same ranks in the same order")


class _ReplayComm:
    def __init__(self, group: dist.ProcessGroup) -> None:
        name = getattr(group, "getBackendName", None)
        if name is None or name() != "phy802":
            raise ValueError("phy802 FSDP2 hook: group must be a phy802 group (dist.new_group(backend='phy802'))")
        self.group = group

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A plain temporary buffer (FSDP2's default)."""
        return torch.empty(*size, dtype=dtype, device=device)


class ReplayAllGather(_ReplayComm, AllGather):
    """FSDP2's parameter all-gather through the ``phy802`` group (class ``params``; uint8 of mixed dtypes too)."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 async_op: bool = False):
        _check_same_ranks(group, self.group, "all-gather")
        return dist.all_gather_into_tensor(output_tensor, input_tensor, group=self.group, async_op=async_op)


class ReplayReduceScatter(_ReplayComm, ReduceScatter):
    """FSDP2's gradient reduce-scatter through the ``phy802`` group (class ``gradients``)."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op, async_op: bool = False):
        _check_same_ranks(group, self.group, "reduce-scatter")
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=self.group, async_op=async_op)


def install_fsdp_hooks(module: torch.nn.Module, group: dist.ProcessGroup, *, all_gather: bool = True,
                       reduce_scatter: bool = True) -> int:
    """Set the phy802 all-gather / reduce-scatter hooks on every FSDP2 module in ``module``; returns how many."""
    from torch.distributed.fsdp import FSDPModule

    ag, rs = ReplayAllGather(group), ReplayReduceScatter(group)
    n = 0
    for m in module.modules():
        if isinstance(m, FSDPModule):
            if all_gather:
                m.set_custom_all_gather(ag)
            if reduce_scatter:
                m.set_custom_reduce_scatter(rs)
            n += 1
    if n == 0:
        raise ValueError("install_fsdp_hooks: no FSDP2 module (fully_shard) in the given module")
    return n
