"""Property tests (hypothesis) and API checks of the RS codec: arbitrary error patterns, detect mode,
sparse syndromes, input validation."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phy802.fec import (
    KP4,
    KR4,
    RSCode,
    decode,
    decode_syndromes,
    encode,
    error_pattern_outcome,
    is_codeword,
    syndromes,
    syndromes_sparse,
)

from fec_helpers import add_errors

CODES = [KP4, KR4, RSCode(12, 4, "tiny"), RSCode(300, 200, "t50"), RSCode(1023, 923, "long")]


@st.composite
def error_case(draw):
    code = draw(st.sampled_from(CODES))
    seed = draw(st.integers(0, 2**32 - 1))
    # Up to 3t errors so that failures and (for the tiny code) miscorrections both occur.
    n_err = draw(st.integers(0, min(code.n, 3 * code.t)))
    positions = draw(st.lists(st.integers(0, code.n - 1), min_size=n_err, max_size=n_err, unique=True))
    values = draw(st.lists(st.integers(1, 1023), min_size=n_err, max_size=n_err))
    return code, seed, np.array(positions, dtype=np.int64), np.array(values, dtype=np.uint16)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(error_case())
def test_decoder_never_returns_a_non_codeword(case):
    code, seed, pos, val = case
    msg = np.random.default_rng(seed).integers(0, 1024, code.k)
    cw = encode(code, msg)
    recv = cw.copy()
    recv[pos] ^= val
    dec, nc = decode(code, recv)
    assert dec.shape == recv.shape and nc.shape == ()
    if nc >= 0:
        assert is_codeword(code, dec)
        assert np.count_nonzero(dec != recv) == nc <= code.t
    else:
        assert nc == -1 and np.array_equal(dec, recv)
    if len(pos) <= code.t:
        assert nc == len(pos) and np.array_equal(dec, cw)
    # The sparse path sees exactly what the dense decoder does.
    assert np.array_equal(syndromes_sparse(code, pos, val), syndromes(code, recv))
    outcome = error_pattern_outcome(code, pos[None], val[None])[0]
    expected = 1 if nc < 0 else (0 if np.array_equal(dec, cw) else 2)
    assert outcome == expected


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(CODES), st.data())
def test_decoder_never_crashes_on_arbitrary_words(code, data):
    words = np.array(data.draw(st.lists(st.integers(0, 1023), min_size=code.n, max_size=code.n)), dtype=np.uint16)
    dec, nc = decode(code, words)
    assert -1 <= nc <= code.t
    if nc >= 0:
        assert is_codeword(code, dec)


def test_miscorrection_rate_of_a_t1_code(rng):
    # RS(4,2), t=1, d=3 (MDS) with 2 random symbol errors: the word is within distance 1 of another
    # codeword iff the error agrees with a weight-3 codeword on 2 of its 3 positions. There are
    # C(4,3)*1023 weight-3 codewords, each covering 3 of the C(4,2)*1023^2 weight-2 patterns, and no
    # pattern twice (else two codewords at distance <= 2): P = 3*4*1023 / (6*1023^2) = 2/1023.
    from phy802.stats import clopper_pearson

    code = RSCode(4, 2)
    n_words = 60000
    cw = encode(code, rng.integers(0, 1024, size=(n_words, code.k)))
    recv, _ = add_errors(rng, cw, 2)
    dec, nc = decode(code, recv)
    mis = nc >= 0
    assert np.all(nc[mis] == 1)
    assert np.all(is_codeword(code, dec[mis]))
    assert not np.any(np.all(dec[mis] == cw[mis], axis=1))
    assert np.array_equal(dec[~mis], recv[~mis])
    lo, hi = clopper_pearson(int(mis.sum()), n_words, 0.999)
    assert lo <= 2 / 1023 <= hi


def test_detect_mode(rng):
    cw = encode(KP4, rng.integers(0, 1024, size=(50, KP4.k)))
    recv, _ = add_errors(rng, cw, 1)
    recv[:10] = cw[:10]
    dec, nc = decode(KP4, recv, mode="detect")
    assert np.array_equal(dec, recv)
    assert np.array_equal(nc, np.where(np.arange(50) < 10, 0, -1))
    with pytest.raises(ValueError, match="mode"):
        decode(KP4, recv, mode="fix")


def test_batch_shapes_and_dtypes(rng):
    msgs = rng.integers(0, 1024, size=(2, 3, KR4.k)).astype(np.int64)
    cw = encode(KR4, msgs)
    assert cw.shape == (2, 3, KR4.n) and cw.dtype == np.uint16
    dec, nc = decode(KR4, cw)
    assert nc.shape == (2, 3) and nc.dtype == np.int16 and not nc.any()
    assert syndromes(KR4, cw).shape == (2, 3, 14)
    assert is_codeword(KR4, cw).shape == (2, 3)
    assert encode(KR4, np.zeros((0, KR4.k), np.uint16)).shape == (0, KR4.n)
    assert encode(KR4, list(range(KR4.k))).shape == (KR4.n,)


def test_sparse_helpers(rng):
    code = KP4
    pos = np.array([[0, 543, 7], [5, 5, 9]])
    val = np.array([[1, 1023, 0], [3, 3, 8]])  # zero values and repeated positions are allowed
    e = np.zeros((2, code.n), np.uint16)
    for r in range(2):
        for p, v in zip(pos[r], val[r]):
            e[r, p] ^= v
    assert np.array_equal(syndromes_sparse(code, pos, val), syndromes(code, e))
    p, v, c = decode_syndromes(code, syndromes(code, e))
    assert c.tolist() == [2, 1]
    assert sorted(p[0, :2].tolist()) == [0, 543] and p[1, 0] == 9 and v[1, 0] == 8
    assert np.all(p[0, 2:] == -1)
    assert error_pattern_outcome(code, pos, val).tolist() == [0, 0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: encode(KP4, np.zeros(513, np.uint16)), "length 514"),
        (lambda: decode(KP4, np.full(544, 1024)), "0..1023; found 1024 at index"),
        (lambda: decode(KP4, np.full(544, -1)), "found -1"),
        (lambda: decode(KP4, np.zeros(544, np.float64)), "integer array"),
        (lambda: syndromes(KR4, np.zeros((2, 544), np.uint16)), "length 528"),
        (lambda: syndromes_sparse(KR4, [528], [1]), "positions must be in 0..527"),
        (lambda: syndromes_sparse(KR4, [[1, 2]], [1, 2]), "same shape"),
        (lambda: decode_syndromes(KR4, np.zeros(30, np.uint16)), "length 14"),
        (lambda: RSCode(544, 515), "n - k even"),
        (lambda: RSCode(1024, 1000), "n <= 1023"),
        (lambda: RSCode(10, 10), "0 < k < n"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_code_type_checks():
    with pytest.raises(TypeError):
        encode("kp4", np.zeros(514, np.uint16))
    with pytest.raises(TypeError):
        RSCode(544.0, 514)
    assert str(KP4) == "KP4 RS(544,514) t=15"
    assert RSCode(544, 514) == KP4 and hash(RSCode(544, 514)) == hash(KP4) and KP4 != KR4


@pytest.mark.parametrize("code", [RSCode(1023, 1), RSCode(1022, 2), RSCode(3, 1), RSCode(1023, 1021)], ids=str)
def test_extreme_codes(code, rng):
    # t = 511 / 510 / 1 / 1: the array LFSR, the modulo Chien path and the tiny cases.
    cw = encode(code, rng.integers(0, 1024, size=(2, code.k)))
    assert np.all(is_codeword(code, cw))
    for e in (0, 1, code.t):
        recv, _ = add_errors(rng, cw, e)
        dec, nc = decode(code, recv)
        assert np.array_equal(dec, cw) and np.all(nc == e)
    recv, _ = add_errors(rng, cw, code.t + 1)
    dec, nc = decode(code, recv)
    assert np.all(is_codeword(code, dec[nc >= 0])) and np.array_equal(dec[nc < 0], recv[nc < 0])


def test_outcome_counts_weight_after_cancelling_duplicates(rng):
    code = KR4
    cw = encode(code, rng.integers(0, 1024, size=code.k))
    pos = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]])
    val = np.array([[9, 9, 9, 9, 9, 9, 9, 4, 4], [9, 9, 9, 9, 9, 9, 9, 9, 0]])  # weights 7 and 8
    out = error_pattern_outcome(code, pos, val)
    for r in range(2):
        recv = cw.copy()
        np.bitwise_xor.at(recv, pos[r], val[r].astype(np.uint16))
        dec, nc = decode(code, recv)
        assert out[r] == (1 if nc < 0 else (0 if np.array_equal(dec, cw) else 2))
    assert out[0] == 0


def test_range_errors_from_uint16_input_name_the_position():
    # uint16 input is range-checked inside the kernels; the message must still name the symbol.
    w = np.zeros((3, KP4.n), np.uint16)
    w[2, 17] = 1024
    with pytest.raises(ValueError, match=r"found 1024 at index \(2, 17\)"):
        decode(KP4, w)
    m = np.zeros((2, KP4.k), np.uint16)
    m[1, 513] = 65535
    with pytest.raises(ValueError, match=r"found 65535 at index \(1, 513\)"):
        encode(KP4, m)
    with pytest.raises(ValueError, match=r"found 2000 at index \(0,\)"):
        decode(KR4, np.full(KR4.n, 2000, np.int64))
