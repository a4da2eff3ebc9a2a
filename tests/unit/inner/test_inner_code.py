"""Clause 177 inner code: encoder against the draft's worked example, an independent galois GF(2)
oracle and the known-answer file; hard and Chase-2 decoders against their plain-numpy twins and
against the code's structure (d = 4)."""

from pathlib import Path

import numpy as np
import pytest

from phy802.fec import inner as I

VEC = Path(__file__).resolve().parents[3] / "vectors" / "c177" / "c177.txt"


def test_draft_worked_example():
    # tv1_tp4 -> tv1_parity of the public D0.1 implementation (vectors/c177/README.md)
    cw = I.encode(I.TV1_MESSAGE)
    assert cw[120:].tolist() == [0, 1, 0, 1, 0, 0, 0, 1]
    assert np.array_equal(cw[:120], I.TV1_MESSAGE)


def test_encoder_matches_galois_oracle():
    galois = pytest.importorskip("galois")
    GF2 = galois.GF(2)
    rng = np.random.default_rng(177)
    m = rng.integers(0, 2, (500, 120), dtype=np.uint8)
    # independent: generator of the 120-bit code built as a GF(2) matrix [I_120 | X G], X = pair-XOR
    X = np.zeros((120, 60), np.uint8)
    X[np.arange(0, 120, 2), np.arange(60)] = 1
    X[np.arange(1, 120, 2), np.arange(60)] = 1
    Gfull = GF2(np.concatenate([np.eye(120, dtype=np.uint8), (GF2(X) @ GF2(I.G177)).view(np.ndarray)], axis=1))
    want = (GF2(m) @ Gfull).view(np.ndarray).astype(np.uint8)
    assert np.array_equal(I.encode(m), want)
    assert np.array_equal(I.encode_numpy(m), want)
    assert np.all(I.syndromes(want) == 0)


def test_shapes_and_bad_input():
    m = np.zeros((2, 3, 120), np.uint8)
    assert I.encode(m).shape == (2, 3, 128)
    with pytest.raises(ValueError, match="length 120"):
        I.encode(np.zeros(119, np.uint8))
    with pytest.raises(ValueError, match=r"bits 0/1; found 2 at index \(0, 5\)"):
        bad = np.zeros((1, 120), np.int64)
        bad[0, 5] = 2
        I.encode(bad)
    with pytest.raises(ValueError, match="n_lrp"):
        I.decode_soft(np.zeros(64), n_lrp=7)


def test_code_structure_distance_four():
    # every single error in the 68-position code is corrected, every double one detected
    cols = I._COLS
    assert len(set(cols.tolist())) == 68 and all(bin(int(c)).count("1") % 2 for c in cols)
    rng = np.random.default_rng(3)
    c = I.encode(rng.integers(0, 2, (128, 120), dtype=np.uint8))
    for bit in range(128):
        w = c.copy()
        w[:, bit] ^= 1
        d, st, pos = I.decode_hard(w)
        assert np.all(st == 1)
        want = bit // 2 if bit < 120 else 60 + bit - 120
        assert np.all(pos == want)
        if bit >= 120 or bit % 2 == 1:  # parity bit, or a B bit: undone exactly
            assert np.array_equal(d, c)
    w = c.copy()
    w[:, [3, 40]] ^= 1  # two message symbols
    assert np.all(I.decode_hard(w)[1] == 2)
    # a flipped A and B of one symbol (jump by 2 levels) leaves m_xor unchanged: undetectable there
    w = c.copy()
    w[:, [10, 11]] ^= 1
    assert np.all(I.decode_hard(w)[1] == 0)


def test_hard_decoder_numpy_twin():
    rng = np.random.default_rng(5)
    c = I.encode(rng.integers(0, 2, (3000, 120), dtype=np.uint8))
    w = c ^ (rng.random(c.shape) < 0.01).astype(np.uint8)
    for a, b in zip(I.decode_hard(w), I.decode_hard_numpy(w)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("n_lrp", [0, 1, 2, 3])
def test_soft_decoder_numpy_twin(n_lrp):
    rng = np.random.default_rng(10 + n_lrp)
    c = I.encode(rng.integers(0, 2, (4000, 120), dtype=np.uint8))
    y = I.pam4_samples(c, 0.42, rng)
    for a, b in zip(I.decode_soft(y, n_lrp), I.decode_soft_numpy(y, n_lrp)):
        assert np.array_equal(a, b)


def test_soft_single_symbol_errors_always_corrected():
    # any single symbol pushed across its nearest threshold is restored (hard and Chase)
    rng = np.random.default_rng(8)
    N = 5000
    c = I.encode(rng.integers(0, 2, (N, 120), dtype=np.uint8))
    y = I.pam4_samples(c, 0.05, rng)
    k = rng.integers(0, 64, N)
    r = np.arange(N)
    v = y[r, k]
    outer = np.abs(v) > 2
    step = np.where(outer, -np.sign(v), np.where(rng.random(N) < 0.5, 1.0, -1.0)) * 1.3
    y[r, k] = v + step
    for n_lrp in (0, 2):
        d, st, _ = I.decode_soft(y, n_lrp)
        assert np.array_equal(d, c) and np.all(st == 1)


def test_chase_beats_hard_and_more_patterns_help():
    rng = np.random.default_rng(9)
    c = I.encode(rng.integers(0, 2, (20000, 120), dtype=np.uint8))
    y = I.pam4_samples(c, 0.40, rng)
    err = [int((I.decode_soft(y, L)[0] != c).any(1).sum()) for L in (0, 2, 4)]
    assert err[0] > 1.5 * err[1] > 1.5 * err[2] / 1.5 and err[1] > err[2]


def test_known_answer_file():
    recs = I.parse_kat(VEC.read_text(), str(VEC))
    assert len(recs) == 16 and I.check_kat(recs) == []
    assert "".join(map(str, recs[0]["message"])) == "".join(map(str, I.TV1_MESSAGE))
    # the checker fails on a wrong codeword (the test can fail)
    bad = dict(recs[5])
    bad["codeword"] = bad["codeword"].copy()
    bad["codeword"][127] ^= 1
    assert I.check_kat([bad]) != []
    assert I.generate_kat(seed=177) == VEC.read_text()


def test_kat_parser_names_line():
    with pytest.raises(ValueError, match=r"x\.txt:2: codeword must be 128 bits"):
        I.parse_kat("message: " + "0" * 120 + "\ncodeword: 0101\n", "x.txt")
