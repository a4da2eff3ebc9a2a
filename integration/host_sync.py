"""Find host syncs without a GPU: the aten ops whose CUDA kernels read device data on the host.

``torch.cuda.set_sync_debug_mode("error")`` raises at a synchronizing CUDA call, but only on a
GPU. Which ops synchronize is a property of the op, not of the device, so a
``TorchDispatchMode`` that sees every aten op run on CPU tensors finds them before a GPU run
would: a scalar read (``_local_scalar_dense``: ``.item()``, ``float(t)``, ``bool(t)``), an output
whose size depends on the data (``nonzero``, ``argwhere``, ``masked_select``, an index or
index_put with a boolean/uint8 mask, which torch expands through ``nonzero``, ``unique``,
``repeat_interleave`` without ``output_size``), or an answer on the host (``equal``,
``is_nonzero``). ``.cpu()``, ``.numpy()`` and ``.tolist()`` do not dispatch on CPU tensors; callers
that need them caught trap those methods by name (:data:`HOST_METHODS`).

:func:`no_host_sync` is the one context for both: on a CUDA device it sets the sync debug mode to
``"error"``; on CPU it records the syncing ops in :class:`HostSyncDetector`.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HOST_METHODS", "HostSyncDetector", "no_host_sync"]

_aten = torch.ops.aten
_SYNC_OPS = frozenset({_aten._local_scalar_dense.default, _aten.nonzero.default, _aten.argwhere.default,
                       _aten.masked_select.default, _aten.is_nonzero.default, _aten.equal.default,
                       _aten.repeat_interleave.Tensor})
_MASKABLE = frozenset({_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default,
                       _aten._index_put_impl_.default})

#: tensor methods that copy to the host without a dispatched op on CPU tensors
HOST_METHODS = ("item", "cpu", "numpy", "tolist", "__float__", "__bool__", "__int__")


class HostSyncDetector(TorchDispatchMode):
    """Records (in :attr:`hits`) every aten op run under it that would sync the host on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if func in _SYNC_OPS or "unique" in name:
            self.hits.append(name)
        elif func in _MASKABLE and any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]):
            self.hits.append(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_sync(device: torch.device) -> Iterator[HostSyncDetector | None]:
    """On CUDA: ``set_sync_debug_mode("error")`` inside the block (a sync raises ``RuntimeError``),
    restored after; yields None. Elsewhere: yields a :class:`HostSyncDetector` active in the block
    (its ``hits`` list the syncing ops; nothing raises)."""
    if torch.device(device).type == "cuda":
        prev = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield None
        finally:
            torch.cuda.set_sync_debug_mode(prev)
    else:
        with HostSyncDetector() as det:
            yield det
