import numpy as np
import pytest

from phy802.pcs.distribution import deinterleave, interleave, lane_of_symbol, pair_gather_index


@pytest.mark.parametrize("rate,L,K", [("400G", 16, 68), ("200G", 8, 136)])
def test_lane_map_is_a_bijection(rate, L, K):
    la, lb, sa, sb = lane_of_symbol(rate)
    used = set(zip(la.tolist(), sa.tolist())) | set(zip(lb.tolist(), sb.tolist()))
    assert len(used) == 1088 and {l for l, _ in used} == set(range(L)) and {s for _, s in used} == set(range(K))
    assert (np.bincount(la, minlength=L) + np.bincount(lb, minlength=L) == K).all()


def test_checkerboard_400g():
    g = pair_gather_index("400G")
    # lane 0: A0, B8, A16, B24, ...; lane 1: B0, A8, B16, ...
    assert g[0, :4].tolist() == [0, 544 + 8, 16, 544 + 24]
    assert g[1, :4].tolist() == [544 + 0, 8, 544 + 16, 24]
    assert g[15, :2].tolist() == [544 + 7, 15]


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_round_trip(rate):
    cw = np.random.default_rng(0).integers(0, 1024, (5, 2, 544)).astype(np.uint16)
    lanes = interleave(cw, rate)
    assert (deinterleave(lanes, rate) == cw).all()
    with pytest.raises(ValueError, match="shape"):
        deinterleave(lanes[:, :-1], rate)
    with pytest.raises(ValueError, match="rate"):
        lane_of_symbol("100G")


def test_symbol_bit_conversion():
    from phy802.pcs import bits_to_symbols, symbols_to_bits

    s = np.random.default_rng(1).integers(0, 1024, (16, 50)).astype(np.uint16)
    b = symbols_to_bits(s)
    assert b.shape == (16, 500) and b[0, :10].tolist() == [(int(s[0, 0]) >> i) & 1 for i in range(10)]
    assert (bits_to_symbols(b) == s).all()
    assert symbols_to_bits(np.array([666]))[:10].tolist() == [0, 1, 0, 1, 1, 0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="multiple of 10"):
        bits_to_symbols(b[:, :-1])
