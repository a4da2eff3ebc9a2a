"""BufferedLink (read-ahead + one Numba pass per message) delivers exactly what protocol.delivery.deliver does."""

import numpy as np
import pytest

from integration.sources import BufferedLink, SourceConfig, make_link_source
from protocol.delivery import deliver

_FIELDS = ("frames", "frames_resent", "frames_lost", "protected_removed", "stream_bits", "line_bits", "retransmit_ns")


def _compare(cfg: SourceConfig, sizes, fmt: str, prefetch: int) -> dict:
    ref = make_link_source(cfg, 1, 0)
    fast = BufferedLink(make_link_source(cfg, 1, 0), cfg.fec, rate=cfg.rate, prefetch_bits=prefetch)
    seen = dict(resent=0, lost=0, flips=0, protected=0)
    for s in sizes:
        d, e = deliver(int(s), ref, cfg.fec, rate=cfg.rate, float_format=fmt), fast.deliver(int(s), fmt)
        for k in _FIELDS:
            assert getattr(d, k) == getattr(e, k), (k, int(s))
        assert np.array_equal(d.payload_flips, e.payload_flips), int(s)
        assert np.array_equal(d.lost_ranges, e.lost_ranges), int(s)
        seen["resent"] += d.frames_resent
        seen["lost"] += d.frames_lost
        seen["flips"] += d.payload_flips.size
        seen["protected"] += d.protected_removed
    assert fast.cursor == ref.cursor
    return seen


@pytest.mark.parametrize("fec", ["bypass", "unequal", "ieee", "detect_only", "correct_no_indication"])
@pytest.mark.parametrize("kind", ["generator", "independent"])
def test_buffered_link_equals_deliver(fec, kind):
    sizes = list(np.random.default_rng(0).integers(1, 200_000, 25)) + [4, 1 << 20, 3, 100]
    # a small read-ahead forces buffer refills inside a message (the kernel's "read further" path)
    seen = _compare(SourceConfig(ber=2e-3, seed=3, fec=fec, kind=kind), sizes, "bfloat16", prefetch=1 << 16)
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


def test_buffered_link_supports_only_cut_invariant_sources():
    assert BufferedLink.supports(make_link_source(SourceConfig(ber=1e-5, kind="generator"), 0, 1))
    assert BufferedLink.supports(make_link_source(SourceConfig(ber=1e-5, kind="independent"), 0, 1))
    assert not BufferedLink.supports(make_link_source(SourceConfig(ber=0.0, kind="independent"), 0, 1))
