"""Statistical checks of the composed link and the sweep against closed forms (fixed seeds, exact
95% Clopper-Pearson intervals from phy802.stats), and of the fast path against the bit-exact link.

Each test also checks its own power (enough events that the interval is narrow), so that it can fail.
Where one test makes several interval checks, each uses a Bonferroni-corrected confidence
(1 - 0.05 / checks) so that the whole test keeps a 5% false-alarm rate.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from phy802 import theory
from phy802.channel import Pam4Awgn
from phy802.link import FastLink, Link, LinkConfig
from phy802.sweep import SweepConfig, run_sweep


@pytest.mark.parametrize("mode, code", [("kp4", theory.KP4), ("kr4", theory.KR4), ("rs272", theory.RS272)])
def test_sweep_fer_matches_binomial(mode, code):
    # pre-FEC BERs where the binomial FER is 1e-3 .. 1e-1: measurable in seconds
    bers = tuple(theory.pre_fec_ber_for_fer(f, code) for f in (3e-3, 3e-2, 1.5e-1))
    cfg = SweepConfig(points=bers, code=(mode,), fec=("ieee",), target_errors=300, max_codewords=2_000_000, max_seconds=60, seed=7)
    res = run_sweep(cfg)
    conf = 1 - 0.05 / (2 * len(bers))  # Bonferroni over the 2 rates x points of this test
    for p in res.points:
        r, th = p.counters.rates(conf), p.theory()
        assert p.stop_reason == "target_errors"
        assert r["fer"].contains(th["fer"]), (p.x, r["fer"], th["fer"])
        assert r["post_fec_ber"].contains(th["post_fec_ber"]), (p.x, r["post_fec_ber"], th["post_fec_ber"])
        assert r["fer"].hi - r["fer"].lo < 0.4 * r["fer"].value  # power: a 20 % deviation would fail


def test_link_pre_fec_ber_matches_closed_form_at_five_snrs():
    # through the full bit-exact Clause 119 link (PCS, FEC, PMA, per-lane AWGN and back)
    link_cfg = LinkConfig(code="kp4", fec="ieee")
    snrs = (15.5, 16.0, 16.5, 17.0, 17.5)  # pre-FEC BER 2.9e-3 .. 3e-4 (lane lock needs a readable AM)
    conf = 1 - 0.05 / (2 * len(snrs))  # Bonferroni over BER and SER at 5 SNRs
    for k, snr in enumerate(snrs):
        res = Link(link_cfg, Pam4Awgn(snr)).run(1024, seed=100 + k, batch_pairs=256)
        r = res.counters.rates(conf)
        assert r["pre_fec_ber"].contains(theory.pam4_ber(snr)), (snr, r["pre_fec_ber"], theory.pam4_ber(snr))
        assert r["ser"].contains(theory.pam4_ser(snr))
        assert r["pre_fec_ber"].events > 2000  # interval within ~+-6 %


def _two_sample_p(a: int, n: int, b: int, m: int) -> float:
    return float(st.fisher_exact([[a, n - a], [b, m - b]])[1])


def _hist_p(h1: np.ndarray, h2: np.ndarray) -> float:
    """Chi-square homogeneity p-value of two histograms, tail bins merged to >= 5 expected."""
    tot = h1 + h2
    cut = max(1, int(np.flatnonzero(np.cumsum(tot[::-1]) >= 10)[0]))  # merge the sparse tail
    last = len(tot) - cut
    a = np.concatenate([h1[:last], [h1[last:].sum()]])
    b = np.concatenate([h2[:last], [h2[last:].sum()]])
    keep = (a + b) > 0
    return float(st.chi2_contingency(np.stack([a[keep], b[keep]]))[1])


@pytest.mark.parametrize("precoding, code", [(False, "kp4"), (True, "kp4"), (False, "rs272")])
def test_fast_path_agrees_with_bit_exact_link(precoding, code):
    # same channel, independent seeds: FER, post-FEC BER, the per-codeword symbol-error histogram
    # and the per-PCS-lane corrected-symbol counts must be the same process (rs272: its own PCS
    # framing on the bit-exact side)
    tcode = theory.rs_code(code)
    ber = theory.pre_fec_ber_for_fer(2e-2, tcode) / (1.6 if precoding else 1.0)
    cfg = LinkConfig(code=code, fec="ieee", precoding=precoding)
    ch = Pam4Awgn.from_ber(ber)
    scale = 2 if code == "rs272" else 1  # rs272 pairs are half as long
    a = Link(cfg, ch).run(3072 * scale, seed=21, batch_pairs=256 * scale).counters
    b = FastLink(cfg, ch).run(24576 * scale, seed=22).counters
    assert a.codeword_errors >= 50 and b.codeword_errors >= 400
    assert _two_sample_p(a.codeword_errors, a.codewords, b.codeword_errors, b.codewords) > 0.01
    assert _two_sample_p(a.bit_errors, a.line_bits, b.bit_errors, b.line_bits) > 0.01
    assert _hist_p(a.hist, b.hist) > 0.01
    assert float(st.chi2_contingency(np.stack([a.pcs_lane_corrected, b.pcs_lane_corrected]))[1]) > 0.01
    ra, rb = a.rates()["post_fec_ber"], b.rates()["post_fec_ber"]
    assert ra.lo <= rb.hi and rb.lo <= ra.hi  # overlapping intervals
    if not precoding:
        fer = theory.rs_codeword_error_ratio(theory.symbol_error_prob(ber), tcode)
        assert a.rates(0.975)["fer"].contains(fer) and b.rates(0.975)["fer"].contains(fer)


@pytest.mark.parametrize("precoding", [False, True])
def test_fast_path_agrees_with_bit_exact_link_on_dfe_bursts(precoding):
    # burst errors independent of the data: the fast path draws sent levels only where needed
    from phy802.channel import DfeBurst

    ch = DfeBurst.from_ser(4e-3, 0.5)
    cfg = LinkConfig(code="kp4", fec="ieee", precoding=precoding)
    a = Link(cfg, ch).run(2048, seed=31, batch_pairs=256).counters
    b = FastLink(cfg, ch).run(16384, seed=32).counters
    assert a.codeword_errors >= 15
    assert _two_sample_p(a.codeword_errors, a.codewords, b.codeword_errors, b.codewords) > 0.01
    assert _hist_p(a.hist, b.hist) > 0.01
    assert float(st.chi2_contingency(np.stack([a.pcs_lane_symbol_errors, b.pcs_lane_symbol_errors]))[1]) > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("mode, code", [("kp4", theory.KP4), ("kr4", theory.KR4), ("rs272", theory.RS272)])
def test_sweep_fer_matches_binomial_down_to_1e6(mode, code):
    # the low end of "measurable": FER 1e-4 .. 1e-6 (tens of millions of codewords, fast path)
    bers = tuple(theory.pre_fec_ber_for_fer(f, code) for f in (1e-4, 1e-5, 1e-6))
    cfg = SweepConfig(points=bers, code=(mode,), fec=("ieee",), target_errors=60, max_codewords=400_000_000, max_seconds=240, seed=8)
    res = run_sweep(cfg)
    conf = 1 - 0.05 / len(bers)
    for p in res.points:
        r, th = p.counters.rates(conf), p.theory()
        assert p.stop_reason == "target_errors", (p.x, p.stop_reason, p.counters.codewords)
        assert r["fer"].contains(th["fer"]), (p.x, r["fer"], th["fer"])
