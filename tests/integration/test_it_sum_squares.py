"""``integration._kernels.sum_squares``: the signal norm of the injected-noise metric, against float64 sums."""

import numpy as np
import pytest

from integration._kernels import _SQ_BLOCK, sum_squares

# recursive summation of n nonnegative terms, each rounded once (the product): relative error
# <= (n + 1) u; here n is one block in the array's own precision, the block sums are float64
_BOUND32 = (_SQ_BLOCK + 1) * 2.0 ** -24


def _exact(x):
    return float(np.sum(np.asarray(x, np.float64) ** 2))


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 262144 + 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_squares_matches_float64(n, dtype):
    x = (np.random.default_rng(n).standard_normal(n) * 1e-3).astype(dtype)
    ex = _exact(x)
    got = sum_squares(x)
    bound = _BOUND32 if dtype == np.float32 else 1e-12
    assert got == pytest.approx(ex, rel=bound, abs=0.0 if n else 1e-300)


def test_blocks_that_overflow_or_underflow_in_fp32_are_summed_in_float64():
    big = np.array([1e20, 1.0, 3e-25] * 300, np.float32)  # 1e40 overflows fp32
    tiny = np.full(1000, 1e-25, np.float32)  # 1e-50 underflows fp32
    mixed = np.concatenate([np.zeros(300, np.float32), tiny, np.ones(5, np.float32)])
    for x in (big, tiny, mixed):
        assert sum_squares(x) == pytest.approx(_exact(x), rel=_BOUND32)


def test_non_finite_values_give_non_finite_sums():
    assert sum_squares(np.array([1.0, np.inf] * 300, np.float32)) == np.inf
    assert np.isnan(sum_squares(np.array([1.0, np.nan] * 300, np.float32)))
    assert sum_squares(np.array([np.inf, -np.inf, 2.0], np.float32)) == np.inf  # squares: no inf - inf
