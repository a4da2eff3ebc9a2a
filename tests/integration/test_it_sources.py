"""Error sources: seeded, cut-invariant, per-link independent, at the configured rate."""

import numpy as np
import pytest

from phy802.stats import clopper_pearson
from integration.sources import (
    IndependentBitErrors,
    NoErrors,
    SourceConfig,
    error_free,
    make_link_source,
)


def test_independent_is_cut_invariant_and_sorted():
    a = IndependentBitErrors(1e-3, 7)
    b = IndependentBitErrors(1e-3, 7)
    cuts = np.random.default_rng(1).integers(0, 5000, size=400)
    got = []
    pos = 0
    for c in cuts:
        o = a.take(int(c))
        assert np.all(np.diff(o) > 0) and (len(o) == 0 or (o[0] >= 0 and o[-1] < c))
        got.append(o + pos)
        pos += int(c)
    ref = b.take(pos)
    assert np.array_equal(np.concatenate(got), ref)


def test_independent_rate_within_clopper_pearson():
    n = 20_000_000
    k = len(IndependentBitErrors(1e-4, 3).take(n))
    lo, hi = clopper_pearson(k, n, 0.999)
    assert lo <= 1e-4 <= hi


def test_ber_zero_and_bad_input():
    assert len(NoErrors().take(10**9)) == 0
    with pytest.raises(ValueError, match="ber"):
        IndependentBitErrors(1.5, 1)
    with pytest.raises(ValueError, match="n_bits"):
        IndependentBitErrors(1e-3, 1).take(-1)
    with pytest.raises(ValueError, match="kind"):
        SourceConfig(ber=1e-3, kind="nope")


def test_error_free_is_exactly_when_make_link_source_gives_no_errors():
    for kind in ("generator", "independent"):
        assert error_free(SourceConfig(ber=0.0, kind=kind))
        assert isinstance(make_link_source(SourceConfig(ber=0.0, kind=kind), 0, 1), NoErrors)
        assert not error_free(SourceConfig(ber=1e-9, kind=kind))
        assert not isinstance(make_link_source(SourceConfig(ber=1e-9, kind=kind), 0, 1), NoErrors)


def test_links_are_seeded_by_seed_src_dst():
    cfg = SourceConfig(ber=1e-3, seed=5, kind="independent")
    x01 = make_link_source(cfg, 0, 1).take(100_000)
    assert np.array_equal(x01, make_link_source(cfg, 0, 1).take(100_000))
    assert not np.array_equal(x01, make_link_source(cfg, 1, 0).take(100_000))
    assert not np.array_equal(x01, make_link_source(SourceConfig(ber=1e-3, seed=6, kind="independent"), 0, 1).take(100_000))


def test_generator_source_cut_invariant():
    cfg = SourceConfig(ber=1e-4, seed=2, kind="generator")
    a, b = make_link_source(cfg, 0, 1), make_link_source(cfg, 0, 1)
    parts = [a.take(3000) + 3000 * i for i in range(400)]
    assert np.array_equal(np.concatenate(parts), b.take(1_200_000))


def test_source_kind_is_explicit_and_every_kind_says_which_ber():
    """'auto' chose the generator or independent flips by whether an import worked, so the same
    --ber meant different things (6,252 vs 2,092 flips per 25 MiB at 1e-5)."""
    from integration.sources import BER_MEANING, SOURCE_KINDS, ber_meaning, resolved_kind

    with pytest.raises(ValueError, match="auto"):
        SourceConfig(ber=1e-5, kind="auto")
    assert "auto" not in SOURCE_KINDS and SourceConfig().kind == "generator"
    assert resolved_kind(SourceConfig(kind="independent")) == "independent"
    assert ber_meaning("generator") == "pre-FEC line BER" and ber_meaning("independent") == "payload-stream BER"
    assert set(BER_MEANING) == set(SOURCE_KINDS)
