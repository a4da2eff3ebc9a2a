import numpy as np
import pytest

from phy802.fec import gf1024 as gf


def test_tables_are_inverse_and_periodic():
    a = np.arange(1, 1024)
    assert np.array_equal(gf.EXP[gf.LOG[a]], a)
    assert np.array_equal(np.sort(gf.EXP[:1023]), a)  # alpha is primitive: all nonzero symbols once
    assert np.array_equal(gf.EXP[1023:4092], np.tile(gf.EXP[:1023], 3))
    assert np.all(gf.EXP[gf.LOG_ZERO :] == 0)
    assert gf.LOG[0] == gf.LOG_ZERO
    with pytest.raises(ValueError):
        gf.EXP[0] = 1  # read-only module constants


def test_alpha_satisfies_the_field_polynomial():
    # alpha^10 = alpha^3 + 1  (p(x) = x^10 + x^3 + 1, 91.5.2.7)
    assert gf.EXP[10] == (1 << 3) | 1
    assert all(gf.EXP[i] == 1 << i for i in range(10))


def test_mul_matches_galois():
    import galois
    GF = galois.GF(2**10, irreducible_poly="x^10 + x^3 + 1")
    rng = np.random.default_rng(1)
    a = rng.integers(0, 1024, 5000)
    b = rng.integers(0, 1024, 5000)
    a[:3] = 0
    b[3:6] = 0
    assert np.array_equal(gf.gf_mul(a, b), np.asarray(GF(a) * GF(b)))
    nz = b != 0
    assert np.array_equal(gf.gf_div(a[nz], b[nz]), np.asarray(GF(a[nz]) / GF(b[nz])))
    assert np.array_equal(gf.gf_inv(b[nz]), np.asarray(GF(b[nz]) ** -1))


def test_poly_helpers():
    g = gf.poly_mul([1, 1], [1, 2])  # (x + 1)(x + alpha)
    assert list(g) == [1, 3, 2]
    assert list(gf.poly_eval(g, [1, 2, 3])) == [0, 0, int(gf.gf_mul(gf.gf_mul(3 ^ 1, 3 ^ 2), 1))]
    assert list(gf.poly_mod([1, 0, 0], g)) == list(gf.poly_mod([3, 2], g))
    with pytest.raises(ZeroDivisionError):
        gf.gf_inv([0])
    with pytest.raises(ValueError):
        gf.gf_mul([1024], [1])
