"""The replay group's inner backends: chosen by name per device type, checked, made and registered.

:class:`integration.replay.ReplayConfig` names, for each device type, a backend registered with
``torch.distributed`` (``inner_backends``, default ``{"cpu": "gloo", "cuda": "nccl"}``). This module
checks such a mapping before any rank blocks (:func:`check_inner_backends`), makes one backend per
name (:func:`make_inner`, as ``torch.distributed``'s ``_new_process_group_helper`` makes them in
torch 2.13's ``distributed_c10d.py``: gloo and NCCL by their classes, any other name through the
creator it was registered with) and says which device types a machine serves
(:func:`served_devices`).

Completion semantics. gloo completes a Work (and its future) when the data has landed. Every other
backend is treated as NCCL behaves (``ProcessGroupNCCL.cpp``): its future may be done when the op is
enqueued, ``wait()`` orders the current stream after the op without blocking the host, and a send
may block its stream until the receiver posts the matching recv (:func:`stream_ordered`).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["check_inner_backends", "make_inner", "served_devices", "stream_ordered", "backend_type"]

#: backends whose Works complete when the data has landed (the wrapper may read results in a callback)
_LANDED_AT_COMPLETION = frozenset({"gloo"})


def check_inner_backends(mapping: dict[str, str]) -> None:
    """Raise ``ValueError`` naming the value unless every name is registered with ``torch.distributed``
    and serves its device type (``dist.Backend.backend_capability``)."""
    registered = [b for b in dist.Backend.backend_list if b != "undefined"]
    for dev, name in mapping.items():
        if name not in registered:
            raise ValueError(f"ReplayConfig.inner_backends[{dev!r}] = {name!r}: no backend of that name is registered "
                             f"with torch.distributed (registered: {', '.join(registered)}; register one with "
                             "torch.distributed.Backend.register_backend)")
        devices = dist.Backend.backend_capability.get(name, [])
        if dev not in devices:
            raise ValueError(f"ReplayConfig.inner_backends[{dev!r}] = {name!r}: backend {name!r} does not serve device "
                             f"type {dev!r} (it serves: {', '.join(devices) or 'nothing'})")


def served_devices(mapping: dict[str, str]) -> list[str]:
    """The device types of ``mapping`` that this machine has (``cpu`` always; others by ``torch.<type>.is_available()``)."""
    out = []
    for dev in mapping:
        mod = getattr(torch, dev, None)
        if dev == "cpu" or (mod is not None and callable(getattr(mod, "is_available", None)) and mod.is_available()):
            out.append(dev)
    return out


def make_inner(name: str, store, rank: int, size: int, timeout: timedelta):
    """A backend ``name`` of ``size`` ranks on ``store`` (give each inner its own prefixed store)."""
    if name == "gloo":
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    if name == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("phy802: inner backend 'nccl' is not available in this torch build")
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, opts)
    plugin = dist.Backend._plugins.get(name.upper())
    if plugin is None:
        raise ValueError(f"phy802: inner backend {name!r} has no creator this wrapper can call (built-in backends "
                         "other than gloo and nccl are made by torch only)")
    if not plugin.extended_api:
        return plugin.creator_fn(store, rank, size, timeout)
    o = dist.distributed_c10d._DistributedBackendOptions()
    o.store, o.group_rank, o.group_size, o.timeout = store, rank, size, timeout
    o.group_id, o.global_ranks_in_group = f"phy802-inner-{name}", list(range(size))
    return plugin.creator_fn(o, None)


def stream_ordered(name: str) -> bool:
    """Whether backend ``name`` is handled as NCCL behaves (see the module docstring): every backend but gloo."""
    return name not in _LANDED_AT_COMPLETION


def backend_type(name: str):
    """``ProcessGroup.BackendType`` under which a backend ``name`` is registered on the group."""
    return dist.Backend.backend_type_map.get(name, dist.ProcessGroup.BackendType.CUSTOM)
