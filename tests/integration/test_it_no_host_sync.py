"""The device (CUDA) path of every op issues no op that syncs the host, checked on CPU.

``torch.cuda.set_sync_debug_mode("error")`` needs a GPU. What it catches can be seen without one:
an op syncs the host when its CUDA kernel must read device data on the host before it returns --
a scalar read (``aten._local_scalar_dense``: ``.item()``, ``float(t)``, ``bool(t)``), or an output
whose size depends on the data (``nonzero``, ``masked_select``, an index or index_put with a
boolean/uint8 mask, which torch expands through ``nonzero``; ``unique``; ``repeat_interleave``
without ``output_size``), or a host answer (``equal``, ``is_nonzero``). A ``TorchDispatchMode``
sees every aten op the wrapper runs on the tensors (``integration.host_sync.HostSyncDetector``),
so running the device path (``force_device_path``) on CPU tensors under it finds such ops before a
GPU run would. The tensor-to-host methods that do not dispatch on CPU tensors (``.cpu()``,
``.numpy()``, ``.tolist()``) are trapped by name as in ``test_it_device_path.py``.

Each op below goes through the wrapper over torch's fake process group (one process playing rank 0
of 2; the fake group completes at once and moves no data), with flips at 3e-4 on every class.
"""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from _it_helpers import trap_host_methods

from integration.host_sync import HostSyncDetector
from integration.process_group import ReplayProcessGroup
from integration.replay import ReplayConfig
from integration.sources import SourceConfig


def test_the_detector_sees_what_syncs_and_passes_what_does_not():
    x = torch.randn(64)
    idx = torch.arange(0, 64, 3)
    with HostSyncDetector() as m:
        _ = x[idx] * 2, torch.isfinite(x).all(), torch.where(x > 0, x, 0.0)
    assert m.hits == []
    for fn in (lambda: x[x > 0], lambda: torch.nonzero(x), lambda: x.sum().item(), lambda: bool(x.any()),
               lambda: torch.unique(x), lambda: torch.equal(x, x)):
        with HostSyncDetector() as m:
            fn()
        assert m.hits, fn


def _group(mode: str, guard: str) -> ReplayProcessGroup:
    cfg = ReplayConfig(source=SourceConfig(ber=3e-4, seed=21, kind="independent", fec="bypass"), guard=guard,
                       mode=mode, classes=("gradients", "params", "activations", "activation_grads"))
    g = ReplayProcessGroup.standalone(cfg, timeout=timedelta(seconds=5))
    g.force_device_path = True
    return g


def _ops(g: ReplayProcessGroup, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(5)

    def r(n: int) -> torch.Tensor:
        return (torch.randn(n, generator=gen) * 2).to(dtype)

    n = 2048
    if g.config.mode == "endpoint" or dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        # (ring mode reduces in torch, which has no float8 arithmetic: refused, tested below)
        g.allreduce([r(n)]).wait()
        g.reduce_scatter_single(r(n), r(2 * n)).wait()
    g.broadcast([r(n)], dist.BroadcastOptions()).wait()
    g.allgather([[r(n), r(n)]], [r(n)]).wait()
    g.all_gather_single(r(2 * n), r(n)).wait()
    g.alltoall([r(n), r(n)], [r(n), r(n)]).wait()
    g.send([r(n)], 1, 0).wait()
    g.recv([r(n)], 1, 0).wait()


@pytest.mark.parametrize("mode", ["endpoint", "ring"])
@pytest.mark.parametrize("guard", ["none", "nan_to_zero_clamp", "exponent_protection"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.float8_e5m2])
def test_device_path_of_every_op_issues_no_host_sync(mode, guard, dtype, monkeypatch):
    g = _group(mode, guard)
    _ops(g, dtype)  # warm-up (Numba, caches): its syncs are not under test
    g.sync_device()
    before = g.metrics.total("errors_injected")
    calls = trap_host_methods(monkeypatch)
    with HostSyncDetector() as m:
        _ops(g, dtype)
    monkeypatch.undo()
    assert m.hits == [], sorted(set(m.hits))
    assert calls == [], calls
    assert g.metrics.total("errors_injected") > before  # flips were applied on the device path


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_ring_reduction_of_float8_is_refused_by_name(dtype):
    from integration.process_group import UnsupportedOperation

    g = _group("ring", "none")
    for call in (lambda: g.allreduce([torch.zeros(64).to(dtype)]),
                 lambda: g.reduce_scatter_single(torch.zeros(32).to(dtype), torch.zeros(64).to(dtype))):
        with pytest.raises(UnsupportedOperation, match="float8.*endpoint mode"):
            call()
