import numpy as np
import pytest

from phy802.channel import (
    DeadLane,
    DfeBurst,
    GilbertElliott,
    LaneChannels,
    Noiseless,
    Pam4Awgn,
    SymbolErrors,
    apply_symbol_errors,
    lane_fault,
    run_lengths,
    signs_to_values,
)
from phy802.theory import pam4_ser


def test_from_ber_round_trip():
    for ber in (1e-2, 2.4e-4, 1e-6, 1e-12):
        ch = Pam4Awgn.from_ber(ber)
        assert ch.ber == pytest.approx(ber, rel=1e-9)
        assert ch.ser == pytest.approx(float(pam4_ser(ch.snr_db)))


def test_transition_matrix_rows_and_symmetry():
    T = Pam4Awgn(12.0).transition
    assert np.allclose(T.sum(1), 1.0)
    assert np.allclose(T, T[::-1, ::-1])
    assert np.all(T > 0)


@pytest.mark.parametrize("method", ["events", "waveform"])
def test_outer_levels_err_inward_only_and_sparse_equals_dense(method):
    ch = Pam4Awgn(10.0)
    s = np.repeat(np.array([0, 3], np.uint8), 20000)
    err = ch.sample_symbol_errors(s, np.random.default_rng(1), method)
    assert err.count > 0
    assert np.all(err.deltas[s[err.positions] == 0] > 0)
    assert np.all(err.deltas[s[err.positions] == 3] < 0)
    assert np.all(err.deltas != 0) and np.all(np.diff(err.positions) > 0)
    assert np.array_equal(err.values.astype(int) - s[err.positions], err.deltas)
    rx = ch.apply(s, np.random.default_rng(1), method)
    assert np.array_equal(rx, apply_symbol_errors(s, err))


@pytest.mark.parametrize("method", ["events", "waveform"])
def test_seeded_reproducible_and_shape_kept(method):
    ch = Pam4Awgn.from_ber(1e-3)
    s = np.random.default_rng(0).integers(0, 4, (4, 5000)).astype(np.uint8)
    a = ch.apply(s, np.random.default_rng(7), method)
    b = ch.apply(s, np.random.default_rng(7), method)
    assert a.shape == s.shape and a.dtype == np.uint8 and np.array_equal(a, b)
    assert not np.array_equal(a, ch.apply(s, np.random.default_rng(8), method))


def test_high_snr_no_errors_and_iid_sampler():
    assert Pam4Awgn(60.0).sample_symbol_errors(np.zeros(10**6, np.uint8), np.random.default_rng(1)).count == 0
    ii = Pam4Awgn(8.0).sample_iid_errors(200000, np.random.default_rng(2))
    assert np.all(ii.sent != ii.received) and np.all(np.diff(ii.positions) > 0)
    inner = np.isin(ii.sent, [1, 2]).mean()
    assert 0.6 < inner < 0.73  # inner levels err about twice as often as outer ones: ~2/3


def test_bad_inputs():
    ch = Pam4Awgn(10.0)
    with pytest.raises(TypeError, match="Generator"):
        ch.apply(np.zeros(4, np.uint8), 1)
    with pytest.raises(ValueError, match="0..3"):
        ch.apply(np.array([0, 4]), np.random.default_rng(0))
    with pytest.raises(TypeError, match="integer"):
        ch.apply(np.array([0.5]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="method"):
        ch.apply(np.zeros(4, np.uint8), np.random.default_rng(0), "bogus")
    with pytest.raises(ValueError):
        Pam4Awgn.from_ber(0.6)
    with pytest.raises(ValueError):
        DfeBurst(1e-3, 1.0)
    with pytest.raises(ValueError):
        GilbertElliott(0.1, 0.1, 0.0, 1.5)


def test_dfe_bursts_alternate_and_are_separated():
    d = DfeBurst(2e-3, 0.7, alternate=True)
    ev = d.sample_events(200000, np.random.default_rng(3))
    assert ev.positions.size > 100
    gaps = np.diff(ev.positions)
    assert np.all(gaps >= 1)
    inside = gaps == 1
    assert np.all(ev.signs[1:][inside] == -ev.signs[:-1][inside])
    assert run_lengths(ev.positions).sum() == ev.positions.size


def test_dfe_from_ser_and_start_good():
    d = DfeBurst.from_ser(1e-3, 0.5)
    assert d.ser == pytest.approx(1e-3) and d.ber == pytest.approx(5e-4)
    good = DfeBurst(0.5, 0.5, start="good")
    for seed in range(20):
        ev = good.sample_events(10, np.random.default_rng(seed))
        assert 0 not in ev.positions.tolist()


def test_signs_reflect_at_edges():
    sent = np.array([0, 0, 3, 3, 1, 2], np.uint8)
    signs = np.array([-1, 1, 1, -1, -1, 1], np.int8)
    assert signs_to_values(sent, signs).tolist() == [1, 1, 2, 2, 0, 3]


def test_burst_channel_applies_one_level_errors():
    s = np.random.default_rng(4).integers(0, 4, 100000).astype(np.uint8)
    for ch in (DfeBurst(1e-3, 0.6), GilbertElliott(1e-3, 0.1, 1e-5, 0.2)):
        err = ch.sample_symbol_errors(s, np.random.default_rng(5))
        assert err.count > 0 and np.all(np.abs(err.deltas) == 1)
        assert np.array_equal(ch.apply(s, np.random.default_rng(5)), apply_symbol_errors(s, err))


def test_lane_fault_only_bad_lane_and_per_lane_streams_independent():
    s = np.random.default_rng(6).integers(0, 4, (8, 20000)).astype(np.uint8)
    bad = Pam4Awgn.from_ber(1e-2)
    lc = lane_fault(8, 5, bad)
    errs = lc.sample_symbol_errors(s, np.random.default_rng(9))
    assert [e.count > 0 for e in errs] == [i == 5 for i in range(8)]
    rx = lc.apply(s, np.random.default_rng(9))
    assert np.array_equal(rx[5], apply_symbol_errors(s[5], errs[5]))
    # a lane's errors do not depend on the other lanes' channels
    lc2 = LaneChannels([bad if i in (2, 5) else Noiseless() for i in range(8)])
    assert np.array_equal(lc2.apply(s, np.random.default_rng(9))[5], rx[5])
    with pytest.raises(ValueError, match=r"\[8, n\]"):
        lc.apply(s[:4], np.random.default_rng(0))
    with pytest.raises(ValueError, match="bad_lane"):
        lane_fault(4, 4, bad)


def test_dead_lane():
    s = np.zeros(1000, np.uint8)
    assert np.all(DeadLane("stuck", 2).apply(s, np.random.default_rng(0)) == 2)
    e = DeadLane().sample_symbol_errors(s, np.random.default_rng(0))
    assert 650 < e.count < 850 and isinstance(e, SymbolErrors)
