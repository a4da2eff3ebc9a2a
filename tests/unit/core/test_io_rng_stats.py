"""The shared helpers: atomic writes, seeds, confidence intervals."""

import os

import numpy as np
import pytest
from scipy import stats as st

from phy802.runtime.output import atomic_open, atomic_write_text
from phy802._rng import as_generator, spawn
from phy802.stats import clopper_pearson, rate, wilson


def test_atomic_write_replaces_and_keeps_old_file_on_crash(tmp_path):
    p = tmp_path / "sub" / "f.txt"
    atomic_write_text(p, "one")
    assert p.read_text() == "one"
    umask = os.umask(0)
    os.umask(umask)
    assert (p.stat().st_mode & 0o777) == (0o666 & ~umask)
    with pytest.raises(RuntimeError):
        with atomic_open(p) as fh:
            fh.write("two, half written")
            raise RuntimeError("crash")
    assert p.read_text() == "one"
    assert [q.name for q in p.parent.iterdir()] == ["f.txt"]  # no temp file left behind


def test_seeds_are_explicit_and_reproducible():
    with pytest.raises(ValueError):
        as_generator(None)
    with pytest.raises(TypeError):
        as_generator(1.5)
    g = np.random.default_rng(3)
    assert as_generator(g) is g
    assert as_generator(7).integers(1 << 30) == as_generator(7).integers(1 << 30)
    a, b = spawn(5, 2)
    assert a.integers(1 << 62) != b.integers(1 << 62)
    assert spawn(5, 2)[1].integers(1 << 62) == spawn(5, 2)[1].integers(1 << 62)


def test_clopper_pearson_matches_its_definition():
    for k, n in [(0, 10), (3, 10), (10, 10), (17, 12345)]:
        lo, hi = clopper_pearson(k, n)
        # P(X >= k | lo) = 2.5% and P(X <= k | hi) = 2.5% (exact tails), with the k=0 / k=n edge cases
        if k > 0:
            assert st.binom.sf(k - 1, n, lo) == pytest.approx(0.025, rel=1e-6)
        else:
            assert lo == 0.0
        if k < n:
            assert st.binom.cdf(k, n, hi) == pytest.approx(0.025, rel=1e-6)
        else:
            assert hi == 1.0
    # zero events in n trials: upper bound 1 - 0.025**(1/n) ~ 3.69/n
    assert clopper_pearson(0, 100000)[1] == pytest.approx(1 - 0.025 ** (1 / 100000))


def test_wilson_and_rate():
    lo, hi = wilson(50, 100)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * 0.05 / (1 + 1.96**2 / 100), rel=0.02)
    r = rate(5, 1000)
    assert r.value == 0.005 and r.contains(0.005) and not r.contains(0.05)
    with pytest.raises(ValueError):
        rate(5, 3)
