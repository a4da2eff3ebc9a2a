"""The CUDA receive path without host syncs, checked on CPU (``force_device_path``).

The device path keeps every sum and log value on the device until ``metrics``/``log`` is read;
here it runs on CPU tensors and must give exactly what the host (numpy/Numba) path gives, without
calling any of the tensor-to-host conversions that would sync a CUDA stream.
"""

from datetime import timedelta

import numpy as np
import pytest
import torch

from _it_helpers import trap_host_methods

from integration._kernels import _SQ_BLOCK
from integration.process_group import ReplayProcessGroup
from integration.replay import ReplayConfig
from integration.sources import SourceConfig

def _group(guard: str, dev_path: bool, log_limit: int = 200_000) -> ReplayProcessGroup:
    cfg = ReplayConfig(source=SourceConfig(ber=3e-4, seed=21, kind="independent", fec="bypass"), guard=guard,
                       classes=("gradients", "params"), log_limit=log_limit)
    g = ReplayProcessGroup.standalone(cfg, timeout=timedelta(seconds=5))
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
    calls = trap_host_methods(monkeypatch)
    _run(g, torch.float32)
    during = list(calls)
    assert g._dev_log and g._dev_acc  # values wait on the device
    monkeypatch.undo()
    assert during == [], during  # no .item()/.cpu()/float(t)/bool(t) on the receive path
    assert g.metrics.total("errors_injected") > 0 and not g._dev_log  # one read fetches them all


@pytest.mark.parametrize("guard", ["none", "nan_to_zero_clamp", "exponent_protection"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_receive_writes_the_log_block_as_the_torch_path(guard, dtype):
    # the CPU kernel fills the log's block itself (element + elem_base, msg_bit, old/new); the torch
    # (device) path builds its log from index ops: same records, counters, bytes, and the same cut
    # at the log's limit (700 of ~1000 flips kept, the rest counted as dropped)
    rng = np.random.default_rng(3)
    groups = [_group(guard, False, log_limit=700), _group(guard, True, log_limit=700)]
    outs, clean = [], []
    for g in groups:
        ts = []
        for seq, (numel, base) in enumerate(((9000, 0), (7000, 123_456), (20_000, 5))):
            t = torch.from_numpy(rng.standard_normal(numel) * 4).to(dtype) if not outs else clean[seq].clone()
            flips = np.sort(np.random.default_rng(seq).choice(numel * 8 * t.element_size(), 300 + 50 * seq,
                                                                replace=False)).astype(np.int64)
            if not outs:
                clean.append(t.clone())
            g._apply((seq, "allreduce", "gradients", 1, 0, flips), t, base)
            ts.append(t)
        outs.append(ts)
    (host, dev), (a, b) = groups, outs
    assert all(torch.equal(u.view(torch.uint8), v.view(torch.uint8)) for u, v in zip(a, b))
    mh, md = host.metrics.to_dict(), dev.metrics.to_dict()
    for name in ("errors_injected", "errors_protected", "nonfinite_events", "guard_elements"):
        assert mh[name] == md[name], name
    assert host.log.dropped == dev.log.dropped > 0 and len(host.log) == len(dev.log) == 700
    rh, rd = host.log.records(), dev.log.records()
    assert [r["element"] for r in rh if r["seq"] == 1][0] >= 123_456
    for x, y in zip(rh, rd):
        assert {k: x[k] for k in ("seq", "element", "bit", "msg_bit")} == {k: y[k] for k in ("seq", "element", "bit", "msg_bit")}
        assert np.allclose([x["old"], x["new"]], [y["old"], y["new"]], equal_nan=True)
    oh, od = host.log.offsets_by_message(), dev.log.offsets_by_message()
    assert oh.keys() == od.keys() and all(np.array_equal(oh[k], od[k]) for k in oh)
