"""Bit layout, exponent protection and the receive guard (no processes)."""

import math

import numpy as np
import pytest
import torch

from integration.replay import Metrics, ReplayConfig, apply_guard, corrupt_received


def test_fp32_bit_layout_known_answers():
    t = torch.tensor([1.0, 1.0, 1.0, 2.0])
    # elem 0 bit 31: sign; elem 1 bit 30: exponent MSB (1.0 -> inf); elem 2 bit 22: mantissa MSB
    # elem 3 bit 0: mantissa LSB
    offs = np.array([31, 32 + 30, 64 + 22, 96 + 0])
    elem, bit, old, new, idx, nprot = corrupt_received(t, offs)
    assert list(elem) == [0, 1, 2, 3] and list(bit) == [31, 30, 22, 0] and nprot == 0
    assert t[0].item() == -1.0 and math.isinf(t[1].item()) and t[2].item() == 1.5
    assert t[3].item() == np.nextafter(np.float32(2.0), np.float32(3.0))
    assert list(old) == [1.0, 1.0, 1.0, 2.0] and new[0] == -1.0 and math.isinf(new[1])


def test_bf16_and_fp16_layout():
    b = torch.tensor([1.0, 1.0], dtype=torch.bfloat16)
    corrupt_received(b, np.array([15, 16 + 6]))  # sign of elem 0; mantissa MSB of elem 1
    assert b.tolist() == [-1.0, 1.5]
    h = torch.tensor([1.0], dtype=torch.float16)
    corrupt_received(h, np.array([9]))  # fp16 mantissa MSB
    assert h.item() == 1.5


def test_exponent_protection_drops_sign_and_exponent_flips():
    t = torch.ones(2)
    offs = np.array([23, 31, 32 + 5])
    elem, bit, old, new, idx, nprot = corrupt_received(t, offs, protect_sign_exponent=True)
    assert nprot == 2 and list(idx) == [2] and t[0].item() == 1.0 and t[1].item() != 1.0


def test_offsets_outside_payload_and_int_dtype():
    t = torch.zeros(2)
    elem, *_ = corrupt_received(t, np.array([-1, 64, 100]))
    assert len(elem) == 0 and torch.equal(t, torch.zeros(2))
    with pytest.raises(TypeError, match="dtype"):
        corrupt_received(torch.zeros(2, dtype=torch.int64), np.array([0]))


def test_guard_zeroes_nonfinite_and_clamps():
    t = torch.tensor([float("nan"), float("inf"), -5.0, 0.5])
    assert apply_guard(t, 1.0) == 3
    assert t.tolist() == [0.0, 0.0, -1.0, 0.5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_guard_paths_agree_with_a_torch_reference(dtype):
    """The Numba pass (fp32/fp64 CPU) and the torch path (other dtypes) do the same thing."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(10_000, generator=g) * 2).to(dtype)
    x[::97] = float("inf")
    x[5::89] = float("-inf")
    x[7::101] = float("nan")
    ref = x.clone().double()
    bad = ~torch.isfinite(ref)
    changed = bad | (ref.abs() > 1.5)
    ref = torch.where(bad, torch.zeros_like(ref), ref.clamp(-1.5, 1.5)).to(dtype)
    y = x.clone()
    assert apply_guard(y, 1.5) == int(changed.sum())
    assert torch.equal(y, ref)
    z = x[::2]  # non-contiguous: the torch path
    zr = ref[::2].clone()
    assert apply_guard(z, 1.5) == int(changed[::2].sum()) and torch.equal(z, zr)


def test_config_validation():
    with pytest.raises(ValueError, match="guard"):
        ReplayConfig(guard="hope")
    with pytest.raises(ValueError, match="traffic class"):
        ReplayConfig(classes=("gradients", "weights"))
    cfg = ReplayConfig(guard="nan_to_zero_clamp")
    assert ReplayConfig.from_dict(cfg.to_dict()) == cfg


def test_device_path_matches_numpy_path():
    rng = np.random.default_rng(5)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(300).to(dtype)
        # several flips in one byte and one element, plus ones beyond the payload
        offs = np.unique(np.concatenate([rng.integers(0, x.numel() * x.element_size() * 8, 200), [0, 1, 2, 7]]))
        a, b = x.clone(), x.clone()
        ra = corrupt_received(a, offs)
        rb = corrupt_received(b, offs, _force_torch_path=True)
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        for u, v in zip(ra, rb):
            assert np.array_equal(np.asarray(u), np.asarray(v), equal_nan=True) if np.asarray(u).dtype.kind == "f" \
                else np.array_equal(u, v)


def test_metrics_add_message_counts_as_four_adds():
    a, b = Metrics(), Metrics()
    for cls, bits in (("gradients", 8192), ("gradients", 16), ("activations", 64)):
        a.add_message(cls, bits, bits + 100, bits + 200)
        for name, n in (("messages", 1), ("payload_bits", bits), ("stream_bits", bits + 100), ("line_bits", bits + 200)):
            b.add(name, cls, n)
    assert a.to_dict() == b.to_dict()
    assert a.messages == {"gradients": 2, "activations": 1} and a.line_bits["gradients"] == 8392 + 216
    assert all(type(v) is int for d in (a.payload_bits, a.stream_bits, a.line_bits) for v in d.values())


def test_injection_log_offsets_by_message_sorts_each_message_and_selects_by_seq():
    from integration.replay import InjectionLog

    log = InjectionLog()
    z = np.zeros(2)
    # message 7 arrives in two parts (two hops' blocks), out of order; message 9 in one
    log.add(seq=7, op="allreduce", cls="gradients", src=1, dst=0, hop=0, element=np.array([3, 1]),
            bit=np.array([0, 0]), old=z, new=z, msg_bit=np.array([96, 32]))
    log.add(seq=9, op="allreduce", cls="gradients", src=1, dst=0, hop=0, element=np.array([0]),
            bit=np.array([5]), old=z[:1], new=z[:1], msg_bit=np.array([5]))
    log.add(seq=7, op="allreduce", cls="gradients", src=1, dst=0, hop=1, element=np.array([2]),
            bit=np.array([1]), old=z[:1], new=z[:1], msg_bit=np.array([65]))
    every = log.offsets_by_message()
    assert sorted(every) == [7, 9]
    assert every[7].tolist() == [32, 65, 96] and every[9].tolist() == [5]
    some = log.offsets_by_message([9, 11])  # a message with no flips logged is simply absent
    assert list(some) == [9] and some[9].tolist() == [5]
    assert log.offsets_by_message(iter([7]))[7].tolist() == [32, 65, 96]  # any iterable, read once
