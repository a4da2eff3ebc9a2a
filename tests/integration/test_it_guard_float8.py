"""The receive clamp (``nan_to_zero_clamp``) on float8 payloads, FSDP2's uint8 all-gather
(no float layout: delivered as flipped and counted in ``guard_skipped``), and ``measure_noise``.

One process plays rank 0 of two over torch's fake process group (its collectives leave the
buffers as they are), so what a rank receives is exactly what it had, plus the link's flips.
"""

from datetime import timedelta

import math

import numpy as np
import pytest
import torch

from integration.process_group import ReplayProcessGroup
from integration.replay import ReplayConfig, clamp_bound
from integration.sources import SourceConfig

_F8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _group(guard: str, dev_path: bool = False, ber: float = 3e-4, **kw) -> ReplayProcessGroup:
    cfg = ReplayConfig(source=SourceConfig(ber=ber, seed=5, kind="independent", fec="bypass"), guard=guard,
                       classes=("gradients", "params"), **kw)
    g = ReplayProcessGroup.standalone(cfg, timeout=timedelta(seconds=5))
    g.force_device_path = dev_path
    return g


def _oracle_bound(dtype, c: float) -> float:
    """Largest finite value of ``dtype`` <= c, from all 256 bit patterns."""
    vals = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
    ok = torch.isfinite(vals) & (vals <= c)
    return float(vals[ok].max())


@pytest.mark.parametrize("dtype", _F8)
@pytest.mark.parametrize("c", [1.0, 100.0, 0.3, 1e9, math.inf])
def test_clamp_bound_is_the_largest_float8_value_not_above_the_clamp(dtype, c):
    assert clamp_bound(dtype, c) == _oracle_bound(dtype, c)


def test_clamp_bound_known_answers():
    assert clamp_bound(torch.float8_e4m3fn, 100.0) == 96.0  # nearest rounding would give 104 > 100
    assert clamp_bound(torch.float8_e4m3fn, math.inf) == 448.0
    assert clamp_bound(torch.float8_e5m2, math.inf) == 57344.0
    assert clamp_bound(torch.float32, 100.0) == 100.0


def _receive_float(g, dtype, cls):
    """What rank 0 receives of a float8 message of class ``cls`` (the fake group's delivery + the link)."""
    gen = torch.Generator().manual_seed(3)
    t = (torch.randn(1 << 15, generator=gen) * 30).to(dtype)
    if cls == "gradients":
        g.allreduce([t]).wait()
        return t
    out = [torch.zeros_like(t), torch.zeros_like(t)]
    g.allgather([out], [t]).wait()  # chunk 1 arrives over link 1 -> 0
    return out[1]


@pytest.mark.parametrize("dtype", _F8)
@pytest.mark.parametrize("dev_path", [False, True])
@pytest.mark.parametrize("cls_op", [("gradients", 1.0), ("params", 100.0)])
def test_float8_flipped_elements_are_guarded_and_nothing_else_changes(dtype, dev_path, cls_op):
    cls, clamp = cls_op
    g = _group("nan_to_zero_clamp", dev_path)
    t = _receive_float(g, dtype, cls)
    clean = _receive_float(_group("nan_to_zero_clamp", dev_path, ber=0.0), dtype, cls)
    flipped = np.unique([r["element"] for r in g.log.records()])
    assert len(flipped) > 20
    b = clamp_bound(dtype, clamp)
    v = t.float()
    assert bool(torch.isfinite(v[flipped]).all()) and float(v[flipped].abs().max()) <= b
    keep = np.setdiff1d(np.arange(t.numel()), flipped)
    assert torch.equal(t.view(torch.uint8)[keep], clean.view(torch.uint8)[keep])  # untouched: bit-identical
    m = g.metrics
    assert m.total("guard_elements") > 0 and m.total("guard_skipped") == 0
    # a flipped element is either as flipped (the log's new value, finite and in range) or guarded
    new = {}
    for r in g.log.records():
        new[r["element"]] = r["new"]  # the value after the element's last flip
    changed = sum(1 for e in flipped if not (math.isfinite(new[e]) and abs(new[e]) <= b and float(v[e]) == new[e]))
    assert changed == m.total("guard_elements")


def _gather_u8(g):
    gen = torch.Generator().manual_seed(8)
    inp = torch.randint(0, 256, (1 << 14,), generator=gen, dtype=torch.int32).to(torch.uint8)
    out = torch.zeros(2 << 14, dtype=torch.uint8)
    g.all_gather_single(out, inp).wait()
    return out


@pytest.mark.parametrize("dev_path", [False, True])
@pytest.mark.parametrize("guard", ["nan_to_zero_clamp", "exponent_protection"])
def test_fsdp2_uint8_all_gather_is_delivered_as_flipped_and_counted_unguarded(dev_path, guard):
    g = _group(guard, dev_path)
    out = _gather_u8(g)
    clean = _gather_u8(_group(guard, dev_path, ber=0.0))
    recs = g.log.records()
    assert len(recs) > 20 and {r["cls"] for r in recs} == {"params"}
    # exactly the logged flips, nothing guarded or protected (the bytes have no single float layout)
    diff = int(np.unpackbits((out ^ clean).numpy()).sum())
    assert diff == len(recs) == g.metrics.total("errors_injected")
    assert g.metrics.total("guard_skipped") == len({r["element"] for r in recs})
    assert g.metrics.total("guard_elements") == 0 and g.metrics.total("errors_protected") == 0


def test_uint8_list_allgather_stays_control_and_is_never_modified():
    g = _group("nan_to_zero_clamp")
    out = [torch.full((4096,), 7, dtype=torch.uint8) for _ in range(2)]
    g.allgather([out], [torch.full((4096,), 7, dtype=torch.uint8)]).wait()
    assert all(bool((o == 7).all()) for o in out)
    assert g.metrics.total("errors_injected") == 0 and g.metrics.total("guard_skipped") == 0


@pytest.mark.parametrize("dev_path", [False, True])
def test_measure_noise_off_gives_the_same_flips_and_no_noise_counters(dev_path):
    from integration.replay import Metrics

    runs = []
    for measure in (True, False):
        g = _group("nan_to_zero_clamp", dev_path, ber=3e-4, measure_noise=measure)
        gen = torch.Generator().manual_seed(1)
        ts = [torch.randn(n, generator=gen) for n in (4096, 1 << 14)]
        for t in ts:
            g.allreduce([t]).wait()
        runs.append((ts, g.metrics.to_dict(), g.log.records()))
    (a, ma, ra), (b, mb, rb) = runs
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(ra) == len(rb) > 5
    key = ("seq", "element", "bit", "msg_bit")
    assert [[r[k] for k in key] for r in ra] == [[r[k] for k in key] for r in rb]
    assert np.allclose([[r["old"], r["new"]] for r in ra], [[r["old"], r["new"]] for r in rb], equal_nan=True)
    assert ma["guard_elements"] == mb["guard_elements"] and ma["errors_injected"] == mb["errors_injected"]
    assert sum(ma["signal_sq"].values()) > 0 and mb["signal_sq"] == {} and mb["perturbation_sq"] == {}
    assert math.isnan(Metrics.injected_noise(mb)) and Metrics.injected_noise(ma) > 0


def test_measure_noise_must_be_a_bool():
    with pytest.raises(ValueError, match="measure_noise"):
        ReplayConfig(measure_noise="no")
