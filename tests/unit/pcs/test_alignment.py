import numpy as np
import pytest

from phy802.pcs import PcsConfig, PcsTransmitter, idle_blocks
from phy802.pcs.alignment import (
    AM_400G_OCTETS, LockError, am_group_bits, am_mapping, am_symbols, am_table, check_am_table,
    lock_lanes, prbs9,
)
from phy802.pcs.distribution import interleave

LANE0 = [666, 402, 866, 406, 437, 630, 29, 452, 755, 905, 239, 50]


def test_am_table_invariants_and_lane0_symbols():
    check_am_table(AM_400G_OCTETS)
    t = np.frombuffer(b"".join(AM_400G_OCTETS), np.uint8).reshape(16, 15)
    assert (t[:, [0, 1, 2, 4, 5, 6]] == [0x9A, 0x4A, 0x26, 0x65, 0xB5, 0xD9]).all()
    assert (t[:, 12:15] == (~t[:, 8:11] & 0xFF)).all()
    assert (t[:, 11] == (~t[:, 7] & 0xFF)).all()
    s = am_symbols(AM_400G_OCTETS)
    assert s[0].tolist() == LANE0
    assert (s[:, 0] == 666).all() and (s[:, 1] == 402).all() and (s[:, 4] == 437).all()
    assert len({tuple(r) for r in s.tolist()}) == 16


@pytest.mark.parametrize("row,pos,what", [(5, 12, "UM3..5"), (3, 11, "UP2"), (0, 1, "common")])
def test_invariant_violations_raise(row, pos, what):
    rows = [bytearray(r) for r in AM_400G_OCTETS]
    rows[row][pos] ^= 0x10
    with pytest.raises(ValueError, match=what):
        check_am_table([bytes(r) for r in rows])
    with pytest.raises(ValueError, match="not distinct"):
        check_am_table([AM_400G_OCTETS[0]] * 2)


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_each_lane_starts_with_its_marker(rate):
    cfg = PcsConfig(rate=rate)
    L = cfg.n_lanes
    # put the AM field through distribution + interleave with arbitrary data after it
    field = am_group_bits(cfg.markers, 1)[0]
    bits = np.concatenate([field, np.random.default_rng(0).integers(0, 2, 10280 - field.size)]).astype(np.uint16)
    syms = (bits.reshape(1028, 10) << np.arange(10, dtype=np.uint16)).sum(axis=1).astype(np.uint16)
    cw = np.zeros((1, 2, 544), np.uint16)
    cw[0, 0, :514], cw[0, 1, :514] = syms[0::2], syms[1::2]
    lanes = interleave(cw, rate)
    assert (lanes[:, :12] == am_symbols(cfg.markers)).all()
    assert (cw[0, :, : L // 2] == 666).all() and (cw[0, :, L // 2: L] == 402).all()


def test_200g_table_choice_is_configurable():
    assert am_table("200G") == AM_400G_OCTETS[:8]
    assert am_table("200G", lanes_200g=range(8, 16)) == AM_400G_OCTETS[8:]
    with pytest.raises(ValueError, match="8 indices"):
        am_table("200G", lanes_200g=(0, 1))
    with pytest.raises(ValueError, match="needs 16"):
        am_table("400G", custom=AM_400G_OCTETS[:8])


def test_prbs9_period_and_pad_continuity():
    bits, st = prbs9(511 * 2)
    assert bits[:511].sum() == 256 and (bits[:511] == bits[511:]).all() and st == 0x1FF
    g = am_group_bits(AM_400G_OCTETS, 3, status=5)
    assert g.shape == (3, 2056)
    assert (g[:, :1920] == g[0, :1920]).all()
    pad, _ = prbs9(133 * 3)
    assert (g[:, 1920:2053].ravel() == pad).all()
    assert (g[:, 2053:] == [1, 0, 1]).all()


def test_am_group_against_independent_implementation():
    """Cross-check with a public third-party Clause 119 model (MIISHAT fixture
    experimental-cl119-400g-am-fec-v1: PRBS9 seed all ones, tx_am_sf = 000): its codeword symbols
    96..102 hold AM-group bits 1920..2055 (pad + status).  Only the values are used here."""
    cw = PcsTransmitter(PcsConfig()).transmit(idle_blocks(128)).codewords[0]
    assert cw[0, 96:103].tolist() == [511, 655, 656, 632, 337, 694, 547]
    assert cw[1, 96:102].tolist() == [752, 307, 732, 719, 226, 142]
    assert int(cw[1, 102]) & 0x3F == 832 & 0x3F  # bits 2050..2055; the rest is payload


def test_mapping_is_a_permutation():
    for L in (8, 16):
        m = am_mapping(L)
        assert sorted(m.tolist()) == list(range(120 * L))


def test_lock_errors():
    am = am_symbols(AM_400G_OCTETS)
    rng = np.random.default_rng(1)
    with pytest.raises(LockError, match="never locked"):
        lock_lanes(rng.integers(0, 1024, (16, 500)).astype(np.uint16), am, 68, 68)
    with pytest.raises(LockError, match="expected 16"):
        lock_lanes(np.zeros((4, 100), np.uint16), am, 68, 68)
    lanes = np.zeros((16, 136), np.uint16)
    lanes[:, :12] = am
    lanes[3, :12] = am[5]  # lane 5's marker twice, lane 3 missing
    with pytest.raises(LockError, match=r"\[5\].*missing lanes \[3\]"):
        lock_lanes(lanes, am, 68, 68)
