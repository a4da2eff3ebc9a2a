"""Issue 23: the CUDA receive path without host syncs, checked on CPU (``force_device_path``).

The device path keeps every sum and log value on the device until ``metrics``/``log`` is read;
here it runs on CPU tensors and must give exactly what the host (numpy/Numba) path gives, without
calling any of the tensor-to-host conversions that would sync a CUDA stream.
"""

from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

from integration._kernels import _SQ_BLOCK
from integration.process_group import ReplayProcessGroup
from integration.replay import ReplayConfig
from integration.sources import SourceConfig

_SYNCING = ("item", "cpu", "numpy", "tolist", "__float__", "__bool__", "__int__")


def _group(guard: str, dev_path: bool) -> ReplayProcessGroup:
    fake = torch._C._distributed_c10d.FakeProcessGroup._create_internal(0, 2)
    cfg = ReplayConfig(source=SourceConfig(ber=3e-4, seed=21, kind="independent", fec="bypass"), guard=guard,
                       classes=("gradients", "params"))
    g = ReplayProcessGroup(dist.HashStore(), 0, 2, timedelta(seconds=5), cfg, inner=fake)
    g.force_device_path = dev_path
    return g


def _run(g, dtype):
    gen = torch.Generator().manual_seed(4)
    outs = []
    for numel in (4096, 777, 1 << 14):
        t = (torch.randn(numel, generator=gen) * 3).to(dtype)
        g.allreduce([t]).wait()
        outs.append(t)
    return outs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize("guard", ["none", "nan_to_zero_clamp", "exponent_protection"])
def test_device_path_equals_host_path(dtype, guard):
    host, devp = _group(guard, False), _group(guard, True)
    a, b = _run(host, dtype), _run(devp, dtype)
    for u, v in zip(a, b):
        assert torch.equal(u.view(torch.uint8), v.view(torch.uint8))
    mh, md = host.metrics.to_dict(), devp.metrics.to_dict()
    assert mh["errors_injected"] == md["errors_injected"] and sum(mh["errors_injected"].values()) > 10
    for name in ("guard_elements", "nonfinite_events", "errors_protected", "frames_resent"):
        assert mh[name] == md[name], name
    # fp32: the host path sums squares in fp32 blocks of _SQ_BLOCK (sum_squares), the device path in
    # float64; for nonnegative terms recursive summation is within (block + 1) x 2^-24 (relative)
    rel_sig = (_SQ_BLOCK + 1) * 2.0 ** -24 if dtype == torch.float32 else 1e-9
    for name in ("signal_sq", "perturbation_sq"):
        for c in set(mh[name]) | set(md[name]):
            rel = rel_sig if name == "signal_sq" else 1e-9
            assert md[name].get(c, 0.0) == pytest.approx(mh[name].get(c, 0.0), rel=rel, nan_ok=True), (name, c)
    rh, rd = host.log.records(), devp.log.records()
    assert len(rh) == len(rd) > 10
    for x, y in zip(rh, rd):
        assert {k: x[k] for k in ("seq", "element", "bit", "msg_bit")} == {k: y[k] for k in ("seq", "element", "bit", "msg_bit")}
        assert np.allclose([x["old"], x["new"]], [y["old"], y["new"]], equal_nan=True)


def test_device_path_reads_nothing_back_until_metrics_are_read(monkeypatch):
    g = _group("nan_to_zero_clamp", True)
    _run(g, torch.float32)  # compile / warm up
    g.sync_device()
    calls = []

    def trap(name):
        orig = getattr(torch.Tensor, name)

        def f(self, *a, **k):
            calls.append(name)
            return orig(self, *a, **k)
        return f

    for name in _SYNCING:
        monkeypatch.setattr(torch.Tensor, name, trap(name))
    before = len(calls)
    _run(g, torch.float32)
    during = calls[before:]
    assert g._dev_log and g._dev_acc  # values wait on the device
    monkeypatch.undo()
    assert during == [], during  # no .item()/.cpu()/float(t)/bool(t) on the receive path
    assert g.metrics.total("errors_injected") > 0 and not g._dev_log  # one read fetches them all
