"""The wrapper's fast paths equal the reference paths.

BufferedLink vs ``protocol.delivery.deliver``; the flip kernel vs the torch (device) path.
"""

import numpy as np
import pytest
import torch

from integration.sources import BufferedLink, SourceConfig, make_link_source
from integration.replay import corrupt_received
from protocol.delivery import deliver

_FIELDS = ("frames", "frames_resent", "frames_lost", "protected_removed", "stream_bits", "line_bits", "retransmit_ns")


def _compare(cfg: SourceConfig, sizes, fmt: str, prefetch: int) -> dict:
    ref = make_link_source(cfg, 1, 0)
    fast = BufferedLink(make_link_source(cfg, 1, 0), cfg.fec, rate=cfg.rate, prefetch_bits=prefetch, code=cfg.code)
    seen = dict(resent=0, lost=0, flips=0, protected=0)
    for s in sizes:
        d, e = deliver(int(s), ref, cfg.fec, rate=cfg.rate, float_format=fmt, code=cfg.code), fast.deliver(int(s), fmt)
        for k in _FIELDS:
            assert getattr(d, k) == getattr(e, k), (k, int(s))
        assert np.array_equal(d.payload_flips, e.payload_flips), int(s)
        assert np.array_equal(d.lost_ranges, e.lost_ranges), int(s)
        seen["resent"] += d.frames_resent
        seen["lost"] += d.frames_lost
        seen["flips"] += d.payload_flips.size
        seen["protected"] += d.protected_removed
    assert fast.cursor == ref.cursor
    seen["redone"] = fast.redone
    seen["predicted"] = fast.predicted
    return seen


@pytest.mark.parametrize("fec", ["bypass", "unequal", "ieee", "detect_only", "correct_no_indication", "llr"])
@pytest.mark.parametrize("kind", ["generator", "independent"])
def test_buffered_link_equals_deliver(fec, kind):
    sizes = list(np.random.default_rng(0).integers(1, 200_000, 25)) + [4, 1 << 20, 3, 100]
    # a small read-ahead forces buffer refills inside a message (the kernel's "read further" path)
    seen = _compare(SourceConfig(ber=2e-3, seed=3, fec=fec, kind=kind), sizes, "bfloat16", prefetch=1 << 16)
    assert seen["redone"] > 0  # a message's resends ran past the read-ahead and it was redone
    assert seen["resent"] > 0  # resends and (at this BER) lost frames are exercised
    if kind == "independent" or fec in ("bypass", "unequal", "detect_only"):
        assert seen["lost"] > 0
    if fec in ("bypass", "unequal", "correct_no_indication"):
        assert seen["flips"] > 0
    if fec == "unequal":
        assert seen["protected"] > 0
    seen = _compare(SourceConfig(ber=1e-5, seed=5, fec=fec, kind=kind), [1 << 20, 2_224_128] * 3, "float32",
                    prefetch=1 << 25)
    if fec in ("bypass", "unequal"):
        assert seen["flips"] > 0 and seen["resent"] > 0
    # DDP's two buckets: from the third message on, each is the one predicted at the end of the previous call
    assert seen["predicted"] == 3


@pytest.mark.parametrize("fec", ["unequal", "ieee"])
def test_buffered_link_prediction_changes_no_delivery(fec):
    # repeats, wrong guesses (a size that followed another only once), a float format the
    # prediction was not made for, and a read-ahead so small that predictions find the buffer short
    a, b, c = 3000, 70_000, 150_000
    sizes = [a, b, a, b, a, c, a, b, b, b, c, c, a, b] * 3
    for fmt, prefetch in (("float32", 1 << 16), ("bfloat16", 1 << 22)):
        seen = _compare(SourceConfig(ber=2e-3, seed=11, fec=fec, kind="generator"), sizes, fmt, prefetch=prefetch)
        assert 0 < seen["predicted"] < len(sizes) - 1 and seen["resent"] > 0
    ref = make_link_source(SourceConfig(ber=2e-3, seed=11, fec=fec), 1, 0)
    fast = BufferedLink(make_link_source(SourceConfig(ber=2e-3, seed=11, fec=fec), 1, 0), fec)
    for i, s in enumerate(sizes):
        fmt = "float32" if i % 3 else "float16"
        d, e = deliver(s, ref, fec, float_format=fmt), fast.deliver(s, fmt)
        assert np.array_equal(d.payload_flips, e.payload_flips) and d.stream_bits == e.stream_bits, i


def test_buffered_link_supports_only_cut_invariant_sources():
    assert BufferedLink.supports(make_link_source(SourceConfig(ber=1e-5, kind="generator"), 0, 1))
    assert BufferedLink.supports(make_link_source(SourceConfig(ber=1e-5, kind="independent"), 0, 1))
    assert not BufferedLink.supports(make_link_source(SourceConfig(ber=0.0, kind="independent"), 0, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("protect", [False, True])
def test_flip_kernel_matches_torch_path(dtype, protect):
    rng = np.random.default_rng(7)
    x = torch.randn(257, dtype=dtype)
    nbits = x.numel() * x.element_size() * 8
    # several flips in one byte and one element, sign/exponent bits, and offsets beyond the payload
    offs = np.unique(np.concatenate([rng.integers(0, nbits + 300, 400), [0, 1, 2, 7, nbits - 1, nbits]]))
    a, b = x.clone(), x.clone()
    ra = corrupt_received(a, offs, protect_sign_exponent=protect)
    rb = corrupt_received(b, offs, protect_sign_exponent=protect, _force_torch_path=True)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)) and not torch.equal(a, x)
    assert ra[5] == rb[5] and (ra[5] > 0) == protect
    for u, v in zip(ra[:5], rb[:5]):
        assert np.asarray(u).dtype == np.asarray(v).dtype
        assert np.array_equal(u, v, equal_nan=True) if np.asarray(u).dtype.kind == "f" else np.array_equal(u, v)


@pytest.mark.parametrize("code", ["rs272", "none"])
def test_buffered_link_equals_deliver_for_other_codes(code):
    cfg = SourceConfig(ber=3e-3 if code == "rs272" else 2e-4, seed=4, fec="llr" if code == "rs272" else "bypass",
                       kind="generator", code=code)
    seen = _compare(cfg, [1 << 16, 3000, 1 << 20] * 2, "float32", prefetch=1 << 22)
    assert seen["resent"] > 0

