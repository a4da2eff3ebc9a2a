"""Channel models against closed forms and exact DPs (fixed seeds, real confidence bounds).

Clopper-Pearson intervals come from phy802.stats; goodness-of-fit tests use chi-square at
alpha = 0.01 with bins pooled to an expected count >= 5.
"""

import numpy as np
import pytest
from scipy import stats

from phy802 import theory as th
from phy802.channel import DfeBurst, GilbertElliott, Pam4Awgn, run_lengths
from phy802.pma import precode, precode_decode
from phy802.pma.pam4 import symbol_bit_errors
from phy802.stats import clopper_pearson

N_SYMBOLS = 4_000_000
# pre-FEC BER targets spanning 1e-2 .. 1e-4 (5 SNRs)
SNRS = [th.snr_db_for_ber(b) for b in (1e-2, 3e-3, 1e-3, 3e-4, 1e-4)]


def _data(seed, n=N_SYMBOLS):
    return np.random.default_rng(seed).integers(0, 4, n).astype(np.uint8)


def _pooled_chisquare(observed, expected, min_expected=5.0):
    """Chi-square GOF with adjacent bins pooled until each has expected >= min_expected."""
    obs, exp = [], []
    o_acc = e_acc = 0.0
    for o, e in zip(observed, expected):
        o_acc += o
        e_acc += e
        if e_acc >= min_expected:
            obs.append(o_acc)
            exp.append(e_acc)
            o_acc = e_acc = 0.0
    if e_acc > 0:
        obs[-1] += o_acc
        exp[-1] += e_acc
    obs, exp = np.array(obs), np.array(exp)
    exp *= obs.sum() / exp.sum()
    return stats.chisquare(obs, exp).pvalue, len(obs)


@pytest.mark.parametrize("method", ["events", "waveform"])
@pytest.mark.parametrize("snr_db", SNRS, ids=lambda x: f"{x:.2f}dB")
def test_awgn_pre_fec_ber_within_clopper_pearson(method, snr_db):
    """Measured Gray BER vs the closed form at 5 SNRs x 2 paths. The 10 intervals are Bonferroni
    corrected (99.5% each) so that the family has 95% coverage: with ten 95% intervals one miss
    would be expected every other seed."""
    s = _data(1)
    ch = Pam4Awgn(snr_db)
    err = ch.sample_symbol_errors(s, np.random.default_rng(int(snr_db * 1000)), method)
    bit_errors = int(symbol_bit_errors(s[err.positions], err.values).sum())
    lo, hi = clopper_pearson(bit_errors, 2 * s.size, 1 - 0.05 / (2 * len(SNRS)))
    assert bit_errors >= 500
    assert lo <= float(th.pam4_ber(snr_db)) <= hi


def _transition_counts(sent, err):
    c = np.zeros((4, 4), np.int64)
    np.add.at(c, (sent[err.positions], err.values), 1)
    return c


@pytest.mark.parametrize("snr_db", [6.0, 14.0])
def test_events_and_waveform_agree_and_match_transition_law(snr_db):
    s = _data(2, 2_000_000)
    ch = Pam4Awgn(snr_db)
    T = ch.transition
    n_sent = np.bincount(s, minlength=4)
    tables = []
    for method, seed in (("events", 21), ("waveform", 22)):
        c = _transition_counts(s, ch.sample_symbol_errors(s, np.random.default_rng(seed), method))
        # goodness of fit of every (sent, received != sent) cell and the correct decisions
        exp = T * n_sent[:, None]
        off = ~np.eye(4, dtype=bool)
        obs_cells = np.concatenate([c[off], [n_sent.sum() - c[off].sum()]])
        exp_cells = np.concatenate([exp[off], [n_sent.sum() - exp[off].sum()]])
        order = np.argsort(exp_cells)  # pool the rarest cells (2- and 3-level jumps) together
        p, nbins = _pooled_chisquare(obs_cells[order], exp_cells[order])
        assert nbins >= 4 and p > 0.01, method
        tables.append(c[off])
    # two-sample test: the error counts per (sent, received) cell of the two paths
    tab = np.array(tables)
    tab = tab[:, tab.sum(0) >= 10]
    assert tab.shape[1] >= 6
    assert stats.chi2_contingency(tab).pvalue > 0.01


def test_dfe_burst_length_histogram_is_geometric():
    d = DfeBurst(1e-3, 0.6, start="good")
    ev = d.sample_events(20_000_000, np.random.default_rng(3))
    L = run_lengths(ev.positions)
    if ev.positions.size and ev.positions[-1] == 20_000_000 - 1:
        L = L[:-1]  # a burst cut by the end of the stream is not a full burst
    assert L.size > 5000
    lmax = L.max()
    observed = np.bincount(L, minlength=lmax + 1)[1:]
    ls = np.arange(1, lmax + 1)
    expected = d.burst_length_pmf(ls) * L.size
    expected[-1] += L.size * d.pb**lmax  # tail mass beyond lmax
    p, nbins = _pooled_chisquare(observed, expected)
    assert nbins >= 8 and p > 0.01
    # burst starts: every symbol drawn from state G starts a burst with probability pe
    trials = 20_000_000 - 1 - ev.positions.size - L.size
    lo, hi = clopper_pearson(int(L.size), int(trials))
    assert lo <= d.pe <= hi


def test_gilbert_elliott_with_certain_errors_is_the_dfe_model():
    pe, pb = 1e-3, 0.5
    a = run_lengths(DfeBurst(pe, pb).sample_events(5_000_000, np.random.default_rng(4)).positions)
    b = run_lengths(GilbertElliott(pe, 1 - pb, 0.0, 1.0).sample_events(5_000_000, np.random.default_rng(5)).positions)
    top = 6
    tab = np.array([np.bincount(np.minimum(x, top), minlength=top + 1)[1:] for x in (a, b)])
    assert stats.chi2_contingency(tab).pvalue > 0.01


def _codeword_symbol_errors(bad_units, n_cw, units_per_symbol=5, n_sym=544):
    """Wrong RS symbols per codeword from a [n_cw, n_units] boolean array."""
    return bad_units.reshape(n_cw, n_sym, units_per_symbol).any(axis=2).sum(axis=1)


def test_gilbert_elliott_codeword_error_distribution_matches_dp():
    ge = GilbertElliott(p_gb=2e-4, p_bg=0.02, e_g=2e-4, e_b=0.05)
    n_cw, n_units = 20000, 2720
    ev = ge.sample_events(n_cw * n_units, np.random.default_rng(6))
    bad = np.zeros(n_cw * n_units, bool)
    bad[ev.positions] = True
    w = _codeword_symbol_errors(bad, n_cw)
    pmf = th.markov_symbol_error_pmf(ge.chain, 5, 544)
    obs = np.bincount(w, minlength=545)
    p, nbins = _pooled_chisquare(obs, pmf * n_cw)
    assert nbins >= 5 and p > 0.01


@pytest.mark.parametrize("precoded", [False, True])
def test_dfe_codeword_error_ratio_matches_exact_dp(precoded):
    d = DfeBurst(2e-3, 0.3, alternate=True)
    n_cw, n_units = 10000, 2720
    rng = np.random.default_rng(7 + precoded)
    g = rng.integers(0, 4, (n_cw, n_units)).astype(np.uint8)
    line = precode(g, 0) if precoded else g
    rx = d.apply(line, rng)
    data = precode_decode(rx, 0) if precoded else rx  # each codeword row starts from state 0
    w = _codeword_symbol_errors(data != g, n_cw)
    fails = int((w > 15).sum())
    exact = th.markov_codeword_error_ratio(d.chain, th.KP4, 5, precoded=precoded)
    lo, hi = clopper_pearson(fails, n_cw)
    assert fails >= 5 and lo <= exact <= hi
    # and the whole distribution of wrong symbols per codeword
    pmf = th.markov_symbol_error_pmf(d.chain, 5, 544, precoded=precoded)
    p, nbins = _pooled_chisquare(np.bincount(w, minlength=545), pmf * n_cw)
    assert nbins >= 8 and p > 0.01


@pytest.mark.parametrize("ber", [3e-3, 1e-3, 5e-4])
def test_rare_event_and_binomial_agree_over_a_range(ber):
    exact = th.rs_codeword_error_ratio(th.symbol_error_prob(ber))
    res = th.rare_event_fer(th.ErrorChain.iid(ber), th.KP4, units_per_symbol=10, samples_per_k=4000, seed=31)
    assert res.reliable and abs(res.fer - exact) < 4 * res.std_err
