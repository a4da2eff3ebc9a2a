import numpy as np
import pytest

from phy802.fec import KR4, FecCounters, decode, encode

from fec_helpers import add_errors


def test_counters_charge_each_corrected_symbol_to_its_group(rng):
    cw = encode(KR4, rng.integers(0, 1024, size=(30, KR4.k)))
    recv = cw.copy()
    recv[0, [0, 1, 4]] ^= 7  # 3 errors: groups 0, 1, 0 (4 groups, position mod 4 as Cl.91 FEC lanes)
    recv[1, 527] ^= 1  # 1 error: group 3
    recv[2:4], _ = add_errors(rng, cw[2:4], KR4.t + 3)  # uncorrectable (P(miscorrect) ~ 1e-6)
    dec, nc = decode(KR4, recv)
    lanes = np.arange(KR4.n) % 4
    c = FecCounters.with_groups(4).update(recv, dec, nc, lanes)
    assert c.as_dict() == {
        "codewords": 30,
        "corrected_codewords": 2,
        "uncorrected_codewords": 2,
        "corrected_symbols": 4,
        "corrected_symbols_per_group": [2, 1, 0, 1],
    }
    assert FecCounters.with_groups(8).update(recv, dec, nc, lanes) == c  # extra zero groups do not matter
    d = FecCounters().update(recv, dec, nc)  # no mapping: everything in group 0
    assert d.corrected_symbols_per_group.tolist() == [4]
    d.merge(c)
    assert d.codewords == 60 and d.corrected_symbols == 8
    assert d.corrected_symbols_per_group.tolist() == [6, 1, 0, 1]


def test_counters_reject_inconsistent_input():
    c = FecCounters()
    w = np.zeros((2, 10), np.uint16)
    with pytest.raises(ValueError, match="n_corrected shape"):
        c.update(w, w, np.zeros(3, np.int16))
    with pytest.raises(ValueError, match="group_of_position"):
        c.update(w, w, np.zeros(2, np.int16), np.zeros(9, np.int64))
    d = w.copy()
    d[0, :3] = 1
    with pytest.raises(ValueError, match="more symbols"):
        c.update(w, d, np.array([1, 0], np.int16))
    with pytest.raises(TypeError):
        c.merge({"codewords": 1})
