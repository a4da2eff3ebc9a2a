"""KP4 + Clause 177 concatenation at 800G/1.6T: exact and fast paths against the closed forms of
phy802.theory_inner (95% Clopper-Pearson intervals, fixed seeds), and the two paths against each
other for Chase-2 (semi-analytic law)."""

import numpy as np
import pytest

from phy802 import theory_inner as T
from phy802.channel import Pam4Awgn
from phy802.link.concat import ConcatConfig, ConcatLink
from phy802.stats import rate


def _law(snr, m=3):
    return T.inner_law_bsc(*T.awgn_position_probs(snr), m=m)


def test_bsc_block_failure_closed_form():
    p = 1e-3
    assert T.bsc_block_failure(p) == pytest.approx(1 - (1 - p) ** 68 - 68 * p * (1 - p) ** 67, rel=1e-9)
    law = T.inner_law_bsc(p)
    # every weight >= 2 pattern leaves the message wrong except those hitting parity bits only
    assert law.p_fail < T.bsc_block_failure(p)
    assert law.p_fail == pytest.approx(T.bsc_block_failure(p), rel=0.15)


def test_inner_law_against_decoder_monte_carlo():
    # the enumerated law vs the decoder kernel on PAM4 samples (hard, exact side)
    from phy802.fec import inner as I
    from phy802.theory import sigma_from_snr_db

    snr, N = 15.5, 600_000
    law = _law(snr)
    rng = np.random.default_rng(11)
    c = I.encode(rng.integers(0, 2, (N, 120), dtype=np.uint8))
    d = I.decode_soft(I.pam4_samples(c, float(sigma_from_snr_db(snr)), rng), 0)[0]
    e = (d[:, :120] != c[:, :120])
    ci = rate(int(e.any(1).sum()), N)
    assert ci.lo <= law.p_fail <= ci.hi
    # bit errors cluster in failed blocks: interval of the mean per block (normal, 95%)
    per = e.sum(1)
    mean, se = per.mean() / 120, per.std(ddof=1) / np.sqrt(N) / 120
    assert abs(law.ber_out - mean) <= 1.96 * se
    # wrong RS symbols of one codeword class per block, j = 1 and 2, pooled over the 4 classes; one
    # failed block hits several classes, so the interval is of the per-block mean (normal, 95%)
    rs = e.reshape(N, 12, 10).any(2)
    for j in (1, 2):
        z = np.stack([rs[:, x::4].sum(1) == j for x in range(4)], 1).mean(1)
        m, se = z.mean(), z.std(ddof=1) / np.sqrt(N)
        assert abs(law.q[:, j].mean() - m) <= 1.96 * se, (j, m, se, law.q[:, j].mean())


@pytest.mark.parametrize("path,n,seed", [("exact", 6000, 21), ("fast", 12000, 22)])
def test_hard_fer_800g_matches_generating_function(path, n, seed):
    snr = 15.0
    r = ConcatLink(ConcatConfig(rate="800G", inner_decoder="hard"), Pam4Awgn(snr_db=snr), path=path).run(n, seed)
    fer = r.rates()["fer"]
    want = T.concat_fer(_law(snr))
    assert fer.lo <= want <= fer.hi, (fer, want)
    blk = r.rates()["inner_block_failure"]
    assert blk.lo <= _law(snr).p_fail <= blk.hi


def test_hard_fer_1p6t_codeword_lane_rule():
    # one codeword per lane: 12 symbols of a codeword per inner block (m = 12)
    snr = 15.7
    cfg = ConcatConfig(rate="1.6T", inner_decoder="hard", lane_rule="codeword")
    assert cfg.symbols_per_block == 12 and ConcatConfig().symbols_per_block == 3
    r = ConcatLink(cfg, Pam4Awgn(snr_db=snr), path="fast").run(12000, 23)
    fer = r.rates()["fer"]
    want = T.concat_fer(_law(snr, m=12))
    assert fer.lo <= want <= fer.hi, (fer, want)
    # clustering matters: m = 12 gives a different FER than m = 3 at this point
    assert not fer.lo <= T.concat_fer(_law(snr, m=3)) <= fer.hi


@pytest.mark.parametrize("outer,snr", [("segmented", 15.0), ("end_to_end", 15.6)])
def test_two_hops_segmented_and_end_to_end(outer, snr):
    r = ConcatLink(ConcatConfig(inner_decoder="hard", hops=2, outer=outer), Pam4Awgn(snr_db=snr),
                   path="fast").run(8000, 24)
    fer = r.rates()["fer"]
    want = T.concat_fer(_law(snr), hops=2, outer=outer)
    assert fer.lo <= want <= fer.hi, (fer, want)
    one = T.concat_fer(_law(snr))
    assert want > (1.9 * one if outer == "segmented" else 5 * one)


def test_chase_exact_and_fast_agree_with_semi_analytic_law():
    snr = 14.4
    cfg = ConcatConfig(inner_decoder="chase", n_lrp=2)
    ex = ConcatLink(cfg, Pam4Awgn(snr_db=snr), path="exact").run(3000, 25)
    fa = ConcatLink(cfg, Pam4Awgn(snr_db=snr), path="fast").run(6000, 26)
    law = T.inner_law_monte_carlo(snr, 500_000, seed=27, n_lrp=2)
    want = T.concat_fer(law)
    # the law is itself measured (500k blocks: ~0.5% on q, ~3% on this FER); allow 3 of its SEs
    tol = 0.10
    for r in (ex, fa):
        fer = r.rates()["fer"]
        assert fer.lo <= want * (1 + tol) and want * (1 - tol) <= fer.hi, (fer, want)
        blk = r.rates()["inner_block_failure"]
        assert blk.lo <= law.p_fail * 1.02 and law.p_fail * 0.98 <= blk.hi, (blk, law.p_fail)
    # soft beats hard at the same SNR
    assert law.p_fail < 0.5 * _law(snr).p_fail


def test_same_seed_same_counts_and_bad_config():
    cfg = ConcatConfig(inner_decoder="hard")
    a = ConcatLink(cfg, Pam4Awgn(snr_db=15.0), path="fast").run(1200, 3).counters.as_dict()
    b = ConcatLink(cfg, Pam4Awgn(snr_db=15.0), path="fast").run(1200, 3).counters.as_dict()
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    with pytest.raises(ValueError, match="800G, 1.6T"):
        ConcatConfig(rate="400G")
    with pytest.raises(TypeError, match="Pam4Awgn"):
        ConcatLink(cfg, None)


def test_no_inner_code_is_kp4_alone():
    from phy802 import theory

    snr = 17.5
    r = ConcatLink(ConcatConfig(inner="none"), Pam4Awgn(snr_db=snr), path="exact").run(1200, 4)
    ber = r.rates()["line_ber"]
    want = float(theory.pam4_ber(snr))
    assert ber.lo <= want <= ber.hi


def test_erasure_aided_kp4_matches_layout_closed_form():
    # erasing every flagged inner block (its 3 symbols of each codeword) costs more than the errors
    # it removes: 2e + v <= 30 fails more often than plain KP4 at the same point
    snr = 15.5
    law = _law(snr)
    lay = T.layout_pieces(4, 4, "interleaved")
    want = T.concat_fer(law, erasure=True, layout=lay)
    for path, n in (("exact", 3000), ("fast", 6000)):
        r = ConcatLink(ConcatConfig(inner_decoder="hard", erasure=True), Pam4Awgn(snr_db=snr), path=path).run(n, 7)
        fer = r.rates()["fer"]
        assert fer.lo <= want <= fer.hi, (path, fer, want)
    assert want > 100 * T.concat_fer(law, layout=lay)
    # the exact layout and the 181-blocks approximation agree without erasures
    assert T.concat_fer(law, layout=lay) == pytest.approx(T.concat_fer(law), rel=0.02)
    with pytest.raises(ValueError, match="erasure needs"):
        ConcatConfig(erasure=True, hops=2, outer="end_to_end")


def test_post_fec_ber_interval_is_over_codewords_not_bits():
    # a failed KP4 codeword delivers ~17 wrong bits at once: an interval over bits (Clopper-Pearson
    # on post_fec_bit_errors / message_bits) is ~4x too narrow.  30 fixed-seed runs of 1200
    # codewords at 15 dB, hard: the pooled BER (all runs) must lie inside nearly every run's
    # interval (95% intervals: >= 26 of 30); the old bit-level interval held it in 12
    from phy802.link.concat import ConcatCounters

    link = ConcatLink(ConcatConfig(rate="800G", inner_decoder="hard"), Pam4Awgn(snr_db=15.0), path="fast")
    runs = [link.run(1200, s).counters for s in range(30)]
    p = sum(c.post_fec_bit_errors for c in runs) / sum(c.message_bits for c in runs)
    assert sum(c.rates()["post_fec_ber"].contains(p) for c in runs) >= 26
    assert sum(rate(c.post_fec_bit_errors, c.message_bits).contains(p) for c in runs) <= 20
    for c in runs[:3]:  # the sum of squares per codeword: b^2 / k <= sq <= 5140 b (Cauchy-Schwarz, bounded)
        assert c.post_fec_bit_errors ** 2 / c.codeword_errors <= c.post_fec_bit_errors_sq <= 5140 * c.post_fec_bit_errors
    ex = ConcatLink(ConcatConfig(rate="800G", inner_decoder="hard"), Pam4Awgn(snr_db=14.6), path="exact").run(600, 2).counters
    assert ex.codeword_errors >= 2
    assert ex.post_fec_bit_errors ** 2 / ex.codeword_errors <= ex.post_fec_bit_errors_sq <= 5140 * ex.post_fec_bit_errors
    # no error: the upper end is the FER's (a wrong codeword may hold up to 5140 wrong bits)
    r = ConcatCounters(codewords=1000, message_bits=5140 * 1000).rates()["post_fec_ber"]
    assert r.lo == 0 and r.hi == pytest.approx(1 - 0.0125 ** (1 / 1000), rel=1e-6)
