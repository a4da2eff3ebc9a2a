import numpy as np
import pytest

from phy802.pma import gray_demap, gray_map, precode, precode_decode, precoded_errors_to_data_errors
from phy802.pma.pam4 import symbol_bit_errors


def test_gray_table_120_5_7_1():
    # {0,0}->0, {0,1}->1, {1,1}->2, {1,0}->3, first bit A
    assert gray_map(np.array([0, 0, 0, 1, 1, 1, 1, 0])).tolist() == [0, 1, 2, 3]
    assert gray_demap(np.array([0, 1, 2, 3])).tolist() == [0, 0, 0, 1, 1, 1, 1, 0]


def test_gray_is_2a_plus_a_xor_b_and_round_trips():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2, (5, 200), dtype=np.uint8)
    s = gray_map(bits)
    a, b = bits[:, 0::2], bits[:, 1::2]
    assert np.array_equal(s, 2 * a + (a ^ b))
    assert np.array_equal(gray_demap(s), bits)


def test_adjacent_levels_differ_in_one_bit():
    hd = symbol_bit_errors(np.array([0, 1, 2, 0, 1, 0]), np.array([1, 2, 3, 2, 3, 3]))
    assert hd.tolist() == [1, 1, 1, 2, 2, 1]


@pytest.mark.parametrize("bad", [np.array([0, 1, 2]), np.array([0, 2]), np.array([0.0, 1.0])])
def test_gray_map_rejects_bad_bits(bad):
    with pytest.raises((ValueError, TypeError)):
        gray_map(bad)


def test_gray_demap_rejects_out_of_range():
    with pytest.raises(ValueError, match="0..3"):
        gray_demap(np.array([0, 4]))


@pytest.mark.parametrize("init", [0, 1, 2, 3])
def test_precoder_definition_and_round_trip(init):
    rng = np.random.default_rng(init)
    g = rng.integers(0, 4, 300).astype(np.uint8)
    p = precode(g, init)
    prev = init
    for j in range(g.size):  # textbook loop, 120.5.7.2
        assert p[j] == (int(g[j]) - prev) % 4
        prev = int(p[j])
    assert np.array_equal(precode_decode(p, init), g)


def test_precoder_rows_and_per_row_initial_state():
    rng = np.random.default_rng(5)
    g = rng.integers(0, 4, (4, 50)).astype(np.uint8)
    init = np.array([0, 1, 2, 3])
    p = precode(g, init)
    for r in range(4):
        assert np.array_equal(p[r], precode(g[r], int(init[r])))
    assert np.array_equal(precode_decode(p, init), g)


def test_precoder_streams_across_calls():
    rng = np.random.default_rng(6)
    g = rng.integers(0, 4, 100).astype(np.uint8)
    p1 = precode(g[:37], 2)
    p2 = precode(g[37:], int(p1[-1]))
    assert np.array_equal(np.concatenate([p1, p2]), precode(g, 2))


def test_precoding_turns_one_symbol_error_into_two():
    rng = np.random.default_rng(7)
    g = rng.integers(0, 4, 200).astype(np.uint8)
    p = precode(g, 0)
    for j, delta in [(10, 1), (50, -1), (120, 2), (199, 1)]:
        rx = p.copy()
        rx[j] = (int(rx[j]) + delta) % 4
        bad = np.flatnonzero(precode_decode(rx, 0) != g)
        expect = [j, j + 1] if j + 1 < 200 else [j]
        assert bad.tolist() == expect
        # both with the same error magnitude (mod 4)
        dec = precode_decode(rx, 0)
        assert all((int(dec[k]) - int(g[k])) % 4 == delta % 4 for k in bad)


def test_alternating_burst_collapses_to_two_errors_and_sparse_helper_agrees():
    rng = np.random.default_rng(8)
    g = rng.integers(0, 4, 100).astype(np.uint8)
    p = precode(g, 0)
    pos = np.arange(20, 27)
    deltas = np.array([1, -1, 1, -1, 1, -1, 1])
    rx = p.copy()
    rx[pos] = (rx[pos].astype(int) + deltas) % 4
    dec = precode_decode(rx, 0)
    bad = np.flatnonzero(dec != g)
    assert bad.tolist() == [20, 27]
    spos, sd = precoded_errors_to_data_errors(pos, deltas, 100)
    assert spos.tolist() == bad.tolist()
    assert np.array_equal(sd, (dec[bad].astype(int) - g[bad]) % 4)
    # same-sign burst of length L gives L+1 errors
    spos, _ = precoded_errors_to_data_errors(pos, np.ones(7, int), 100)
    assert spos.tolist() == list(range(20, 28))


def test_sparse_precoder_helper_matches_dense_random():
    rng = np.random.default_rng(9)
    n = 500
    for _ in range(20):
        g = rng.integers(0, 4, n).astype(np.uint8)
        p = precode(g, 1)
        pos = np.sort(rng.choice(n, 40, replace=False))
        d = rng.integers(1, 4, 40)
        rx = p.copy()
        rx[pos] = (rx[pos].astype(int) + d) % 4
        dec = precode_decode(rx, 1)
        spos, sd = precoded_errors_to_data_errors(pos, d, n)
        bad = np.flatnonzero(dec != g)
        assert np.array_equal(spos, bad)
        assert np.array_equal(sd, (dec[bad].astype(int) - g[bad]) % 4)


def test_precoder_bad_initial_state():
    with pytest.raises(ValueError, match="initial_state"):
        precode(np.array([0, 1]), 4)


def test_bit_error_positions_match_dense_demap():
    from phy802.pma import bit_error_positions

    rng = np.random.default_rng(10)
    s = rng.integers(0, 4, 1000).astype(np.uint8)
    pos = np.sort(rng.choice(1000, 60, replace=False))
    r = s.copy()
    r[pos] = (r[pos] + rng.integers(1, 4, 60)) % 4
    got = bit_error_positions(pos, s[pos], r[pos])
    assert np.array_equal(got, np.flatnonzero(gray_demap(s) != gray_demap(r)))
