"""RS codec against the galois oracle and the coefficients in the shared 802.3bs notes (section 4.1)."""

import numpy as np
import pytest

from phy802.fec import CODES, KP4, KR4, RS272, RSCode, code_by_name, decode, encode, is_codeword, syndromes

from fec_helpers import add_errors, galois_rs

# g(x) of RS(544,514), high -> low (ieee802_3bs_notes.md 4.1; identical to two independent MATLAB
# transcriptions of the standard's table).
KP4_GENERATOR = [1, 575, 552, 187, 230, 552, 1, 108, 565, 282, 249, 593, 132, 94, 720, 495,
                 385, 942, 503, 883, 361, 788, 610, 193, 392, 127, 185, 158, 128, 834, 523]

# Shortened codes exercising both LFSR kernels (2t <= 32: scalar words; 2t > 32: array version)
# and odd message lengths (k mod 4 = 1, 2, 3 hits the virtual-zero alignment of the first step).
ALL = [KP4, KR4, RS272, RSCode(300, 200, "t50"), RSCode(37, 3, "k3"), RSCode(1023, 1021, "full")]


def test_code_vocabulary():
    assert CODES == {"kp4": KP4, "kr4": KR4, "rs272": RS272}
    assert code_by_name("RS272") is RS272 and (RS272.n, RS272.k, RS272.t, RS272.nparity) == (272, 258, 7, 14)
    # same field and generator form as KP4 with 2t = 14 roots: g(x) is KR4's
    assert np.array_equal(RS272.generator_poly, KR4.generator_poly)
    with pytest.raises(ValueError, match="no FEC sublayer"):
        code_by_name("none")
    with pytest.raises(ValueError, match="unknown RS code"):
        code_by_name("kp5")


def test_kp4_generator_matches_the_notes():
    assert KP4.generator_poly.tolist() == KP4_GENERATOR
    assert KP4.t == 15 and KR4.t == 7


@pytest.mark.parametrize("code", [KP4, KR4, RS272, RSCode(300, 200)], ids=str)
def test_generator_matches_galois(code):
    assert code.generator_poly.tolist() == np.asarray(galois_rs(code.nparity).generator_poly.coeffs).tolist()


@pytest.mark.parametrize("code", ALL, ids=str)
def test_parity_matches_galois(code, rng):
    msgs = rng.integers(0, 1024, size=(40, code.k))
    msgs[0] = 0
    msgs[1] = 1023
    rs = galois_rs(code.nparity)
    ours = encode(code, msgs)
    ref = np.asarray(rs.encode(rs.field(msgs)))
    assert ours.dtype == np.uint16 and ours.shape == (40, code.n)
    assert np.array_equal(ours, ref)
    assert np.all(is_codeword(code, ours))


def test_known_answer_message_of_the_notes():
    # ieee802_3bs_notes.md 4.1: m[i] = (19 + 73 i) mod 1024, m[0] = coefficient of x^543.
    msg = (19 + 73 * np.arange(514)) % 1024
    cw = encode(KP4, msg)
    rs = galois_rs(30)
    assert np.array_equal(cw, np.asarray(rs.encode(rs.field(msg))))
    assert np.array_equal(cw[:514], msg)
    assert not np.any(syndromes(KP4, cw))


@pytest.mark.parametrize("code", [KP4, KR4, RS272, RSCode(300, 200)], ids=str)
def test_syndromes_match_polynomial_evaluation(code, rng):
    import galois
    GF = galois_rs(code.nparity).field
    words = rng.integers(0, 1024, size=(5, code.n))
    ours = syndromes(code, words)
    roots = GF(2) ** np.arange(code.nparity)
    for w, s in zip(words, ours):
        assert np.array_equal(s, np.asarray(galois.Poly(GF(w)).__call__(roots)))


# RS(1023,923): t*(n-1) is beyond the biased-log Chien form, so it takes the modulo path.
@pytest.mark.parametrize("code", [KP4, KR4, RS272, RSCode(300, 200), RSCode(1023, 923)], ids=str)
def test_decode_matches_galois_up_to_t(code, rng):
    rs = galois_rs(code.nparity)
    per = 3 if code.t < 50 else 1
    msgs = rng.integers(0, 1024, size=((code.t + 1) * per, code.k))
    cw = encode(code, msgs)
    recv = np.empty_like(cw)
    n_err = np.repeat(np.arange(code.t + 1), per)
    for e in range(code.t + 1):
        sl = slice(e * per, (e + 1) * per)
        recv[sl], _ = add_errors(rng, cw[sl], e)
    dec, nc = decode(code, recv)
    assert np.array_equal(dec, cw)
    assert np.array_equal(nc, n_err)
    ref, ref_n = rs.decode(rs.field(recv), output="codeword", errors=True)
    assert np.array_equal(dec, np.asarray(ref))
    assert np.array_equal(nc, np.asarray(ref_n))


@pytest.mark.parametrize("code", [KP4, KR4, RS272], ids=str)
def test_beyond_t_is_reported_and_agrees_with_galois(code, rng):
    # Many words with t+1..t+5 errors: each result is a failure (-1, word unchanged) or, rarely, a
    # different codeword; for these codes a miscorrection has probability < 1e-5 per word.
    rs = galois_rs(code.nparity)
    total_mis = 0
    for extra in range(1, 6):
        msgs = rng.integers(0, 1024, size=(400, code.k))
        cw = encode(code, msgs)
        recv, _ = add_errors(rng, cw, code.t + extra)
        dec, nc = decode(code, recv)
        fail = nc < 0
        assert np.array_equal(dec[fail], recv[fail])
        assert np.all(is_codeword(code, dec[~fail]))
        assert not np.any(np.all(dec[~fail] == cw[~fail], axis=1))  # > t errors can never decode back
        total_mis += int(np.count_nonzero(~fail))
        # galois is slow to decode: compare the first few words only.
        ref, ref_n = rs.decode(rs.field(recv[:4]), output="codeword", errors=True)
        assert np.array_equal(np.asarray(ref_n) < 0, fail[:4])
    assert total_mis == 0  # P(any of 2000) < 2000 * 1e-5 = 0.02 for KR4, ~1e-13 for KP4


def test_designed_miscorrection_lands_on_the_other_codeword(rng):
    # r = c2 + (t errors) is at distance >= d - t = t + 1 from c1: the decoder must return c2.
    code = KR4
    c = encode(code, rng.integers(0, 1024, size=(2, code.k)))
    recv, _ = add_errors(rng, c[1:2], code.t)
    dec, nc = decode(code, recv)
    assert nc[0] == code.t and np.array_equal(dec[0], c[1])
    assert np.count_nonzero(recv[0] != c[0]) > code.t


@pytest.mark.slow
@pytest.mark.parametrize("code", [KP4, KR4, RS272], ids=str)
def test_decode_matches_galois_on_a_larger_mixed_batch(code, rng):
    # 0..t+5 errors, 12 words each, one galois call per error count (slow: galois decodes ~600 words/s).
    rs = galois_rs(code.nparity)
    for e in range(code.t + 6):
        cw = encode(code, rng.integers(0, 1024, size=(12, code.k)))
        recv, _ = add_errors(rng, cw, e)
        dec, nc = decode(code, recv)
        ref, ref_n = rs.decode(rs.field(recv), output="codeword", errors=True)
        ref, ref_n = np.asarray(ref), np.asarray(ref_n)
        assert np.array_equal(nc < 0, ref_n < 0)
        ok = nc >= 0
        assert np.array_equal(dec[ok], ref[ok]) and np.array_equal(nc[ok], ref_n[ok])
        if e <= code.t:
            assert np.array_equal(dec, cw) and np.all(nc == e)


@pytest.mark.slow
def test_many_words_beyond_t_never_yield_a_non_codeword(rng):
    # 200k KR4 words with 8..12 errors: every success must be a codeword at distance <= t.
    code = KR4
    for e in range(code.t + 1, code.t + 6):
        cw = encode(code, rng.integers(0, 1024, size=(40000, code.k)))
        recv, _ = add_errors(rng, cw, e)
        dec, nc = decode(code, recv)
        ok = nc >= 0
        assert np.all(is_codeword(code, dec[ok]))
        assert np.all(np.count_nonzero(dec[ok] != recv[ok], axis=1) == nc[ok])
        assert np.array_equal(dec[~ok], recv[~ok])
