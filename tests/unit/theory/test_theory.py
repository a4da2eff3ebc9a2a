import math
import time

import numpy as np
import pytest
from scipy import integrate, stats

from phy802 import theory as th
from phy802.pma.pam4 import _HD


def _transition_by_quadrature(snr_db):
    sigma = float(th.sigma_from_snr_db(snr_db))
    a = [-3, -1, 1, 3]
    edges = [-np.inf, -2, 0, 2, np.inf]
    T = np.zeros((4, 4))
    for s in range(4):
        for r in range(4):
            lo, hi = edges[r], edges[r + 1]
            T[s, r] = integrate.quad(lambda y: stats.norm.pdf(y, a[s], sigma), lo, hi, epsabs=0, epsrel=1e-10)[0]
    return T


@pytest.mark.parametrize("snr_db", [6.0, 12.0, 18.0])
def test_pam4_closed_forms_against_quadrature(snr_db):
    T = _transition_by_quadrature(snr_db)
    Tc = th.pam4_transition_matrix(snr_db)
    big = T > 1e-200
    assert np.allclose(Tc[big], T[big], rtol=1e-6, atol=0)
    ser = np.mean(1 - np.diag(T))
    ber = np.mean((T * _HD).sum(1)) / 2
    assert th.pam4_ser(snr_db) == pytest.approx(ser, rel=1e-7)
    assert th.pam4_ber(snr_db) == pytest.approx(ber, rel=1e-7)


def test_snr_definition():
    # SNR = 5 / sigma^2: at 10*log10(5) dB sigma = 1
    assert th.sigma_from_snr_db(10 * math.log10(5)) == pytest.approx(1.0)
    assert th.pam4_ser(10 * math.log10(5)) == pytest.approx(1.5 * stats.norm.sf(1.0))


@pytest.mark.parametrize("ber", [0.1, 1e-3, 2.4e-4, 1e-8, 1e-15, 1e-100])
def test_snr_for_ber_inverse(ber):
    snr = th.snr_db_for_ber(ber)
    if ber > 1e-300:
        assert th._log_pam4(snr, "ber") == pytest.approx(math.log(ber), abs=1e-9)
    assert th.pam4_ser(th.snr_db_for_ser(1e-5)) == pytest.approx(1e-5, rel=1e-9)


def test_inverse_rejects_out_of_range():
    with pytest.raises(ValueError):
        th.snr_db_for_ber(0.0)
    with pytest.raises(ValueError):
        th.snr_db_for_ber(0.6)


def test_symbol_error_prob():
    assert th.symbol_error_prob(2.4e-4) == pytest.approx(1 - (1 - 2.4e-4) ** 10, rel=1e-12)
    assert th.bit_error_prob(th.symbol_error_prob(3e-5)) == pytest.approx(3e-5, rel=1e-12)


def _tail_exact(p, n, t):
    # independent oracle: log-domain sum with math.comb
    terms = [math.lgamma(n + 1) - math.lgamma(w + 1) - math.lgamma(n - w + 1) + w * math.log(p)
             + (n - w) * math.log1p(-p) for w in range(t + 1, n + 1)]
    m = max(terms)
    return math.exp(m) * sum(math.exp(x - m) for x in terms)


@pytest.mark.parametrize("code", [th.KP4, th.KR4])
@pytest.mark.parametrize("p", [1e-1, 1e-2, 2.4e-3, 1e-4, 1e-6])
def test_rs_fer_binomial_tail(code, p):
    got = th.rs_codeword_error_ratio(p, code)
    assert got == pytest.approx(_tail_exact(p, code.n, code.t), rel=1e-9)
    if got > 1e-250:
        assert got == pytest.approx(stats.binom.sf(code.t, code.n, p), rel=1e-6)


def test_kp4_reference_values_from_notes():
    # performance_notes.md: at pre-FEC BER 2.4e-4, KP4 FER ~8.2e-13, post-FEC BER ~2.4e-15
    fer = th.rs_codeword_error_ratio(th.symbol_error_prob(2.4e-4))
    assert 8.0e-13 < fer < 8.3e-13
    assert 2.3e-15 < th.post_fec_ber(2.4e-4) < 2.5e-15
    b = th.pre_fec_ber_for_fer(1e-13)
    assert th.rs_codeword_error_ratio(th.symbol_error_prob(b)) == pytest.approx(1e-13, rel=1e-8)
    assert th.KP4.t == 15 and th.KR4.t == 7


def test_markov_pmf_iid_is_binomial():
    p = 3e-4
    pmf = th.markov_symbol_error_pmf(th.ErrorChain.iid(p), 10, 544)
    ps = th.symbol_error_prob(p)
    ref = stats.binom.pmf(np.arange(545), 544, ps)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    ok = ref > 1e-280
    assert np.allclose(pmf[ok], ref[ok], rtol=1e-8, atol=0)


def test_markov_pmf_brute_force_small_dfe():
    chain = th.ErrorChain.dfe(0.2, 0.6)
    n_sym, m = 3, 2
    pmf = th.markov_symbol_error_pmf(chain, m, n_sym)
    ref = np.zeros(n_sym + 1)
    P, pi = chain.P, chain.initial
    for code in range(2 ** (n_sym * m)):
        x = [(code >> i) & 1 for i in range(n_sym * m)]  # states; error iff state B
        pr = pi[x[0]] * np.prod([P[x[i], x[i + 1]] for i in range(len(x) - 1)])
        w = sum(any(x[s * m:(s + 1) * m]) for s in range(n_sym))
        ref[w] += pr
    assert np.allclose(pmf, ref, rtol=1e-12)


def test_dfe_chain_stationary_rate():
    c = th.ErrorChain.dfe(1e-3, 0.5)
    assert c.error_rate == pytest.approx(1e-3 / (1e-3 + 0.5))
    with pytest.raises(ValueError):
        th.ErrorChain(np.array([[0.5, 0.4], [0.5, 0.5]]), np.array([0, 1]))


def test_rare_event_matches_binomial_at_kp4_2p4e4_within_10pct_under_a_minute():
    t0 = time.perf_counter()
    exact = th.rs_codeword_error_ratio(th.symbol_error_prob(2.4e-4))
    res = th.rare_event_fer(th.ErrorChain.iid(2.4e-4), th.KP4, units_per_symbol=10, samples_per_k=2000, seed=11)
    elapsed = time.perf_counter() - t0
    assert elapsed < 60
    assert res.rel_err < 0.03  # the estimator itself resolves 10%
    assert abs(res.fer - exact) < 4 * res.std_err  # and agrees with the binomial within its own error
    assert abs(res.fer / exact - 1) < 0.10
    assert res.truncation < 1e-6 * exact
    # P(K = k) of the forward recursion is the binomial pmf
    assert np.allclose(res.p_k, stats.binom.pmf(res.ks, 5440, 2.4e-4), rtol=1e-8)


def test_rare_event_pam4_units_binomial():
    p = 4.8e-4  # PAM4 symbol errors, one bit each: pre-FEC BER 2.4e-4
    exact = th.rs_codeword_error_ratio(th.symbol_error_prob(p, 5))
    res = th.rare_event_fer(th.ErrorChain.iid(p), th.KP4, units_per_symbol=5, seed=12)
    assert abs(res.fer - exact) < 4 * res.std_err and res.rel_err < 0.03


@pytest.mark.parametrize("alternate", [True, False])
def test_markov_pmf_precoded_brute_force(alternate):
    chain = th.ErrorChain.dfe(0.3, 0.5, alternate=alternate)
    n_sym, m = 3, 2
    n = n_sym * m
    pmf = th.markov_symbol_error_pmf(chain, m, n_sym, precoded=True)
    ref = np.zeros(n_sym + 1)
    P, pi = chain.P, chain.initial
    for code in range(2**n):
        x = [(code >> i) & 1 for i in range(n)]
        pr = pi[x[0]] * np.prod([P[x[i], x[i + 1]] for i in range(n - 1)])
        errs = [i for i in range(n) if x[i]]
        for sc in range(2 ** len(errs)):
            e = [0] * n
            for b, i in enumerate(errs):
                e[i] = 1 if (sc >> b) & 1 else -1
            if alternate and any(x[i] and x[i - 1] and e[i] != -e[i - 1] for i in range(1, n)):
                continue  # inside a run the sign alternates; only the first sign of a run is free
            runs = sum(1 for i in range(n) if x[i] and (i == 0 or not x[i - 1]))
            w_sign = 0.5**runs if alternate else 0.5 ** len(errs)
            d = [(e[i] + (e[i - 1] if i else 0)) % 4 for i in range(n)]
            w = sum(any(d[s * m:(s + 1) * m]) for s in range(n_sym))
            ref[w] += pr * w_sign
    assert np.allclose(pmf, ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("precoded", [False, True])
def test_rare_event_matches_exact_dp_for_dfe(precoded):
    chain = th.ErrorChain.dfe(2e-3, 0.3, alternate=True)
    exact = th.markov_codeword_error_ratio(chain, th.KP4, 5, precoded=precoded)
    res = th.rare_event_fer(chain, th.KP4, units_per_symbol=5, samples_per_k=1000, precoded=precoded, seed=13)
    assert res.reliable
    assert abs(res.fer - exact) < 4 * res.std_err and res.rel_err < 0.05


def test_rare_event_flags_unreliable_bursty_case():
    chain = th.ErrorChain.dfe(4e-4, 0.6)
    res = th.rare_event_fer(chain, th.KP4, units_per_symbol=5, samples_per_k=300, seed=1)
    assert not res.reliable


def test_rare_event_bad_args():
    with pytest.raises(ValueError):
        th.rare_event_fer(th.ErrorChain.iid(1e-4), units_per_symbol=0, seed=0)


def test_theory_cli(capsys):
    import json

    from phy802.cli import main

    assert main(["theory", "rs", "--ber", "2.4e-4", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["fer"] == pytest.approx(th.rs_codeword_error_ratio(th.symbol_error_prob(2.4e-4)))
    assert main(["theory", "pam4", "--snr-db", "16"]) == 0
    assert "0.001791" in capsys.readouterr().out
    assert main(["theory", "burst", "--pe", "1e-4", "--pb", "0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["fer"] > 0
    assert main(["theory", "rare", "--ber", "2.4e-4", "--samples-per-k", "500", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert abs(obj["ratio"] - 1) < 0.1
    with pytest.raises(SystemExit) as e:  # rejected by the option's type: a usage error, exit 2
        main(["theory", "rs", "--ber", "0.7"])
    assert e.value.code == 2
    # rs272 (t = 7, n = 272) and comma lists
    assert main(["theory", "rs", "--ber", "1e-4,2.4e-4", "--code", "rs272", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["code"] == "rs272" and len(obj["rows"]) == 2
    ps = th.symbol_error_prob(2.4e-4)
    assert obj["rows"][1]["fer"] == pytest.approx(stats.binom.sf(7, 272, ps), rel=1e-9)
    for argv in (["theory", "rs", "--ber", "1e-4", "--code", "none"], ["theory", "rs", "--ber", "1e-4", "2e-4"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    capsys.readouterr()


def test_rs272_closed_forms():
    assert th.rs_code("rs272") is th.RS272 and (th.RS272.n, th.RS272.k, th.RS272.t) == (272, 258, 7)
    for p in (1e-4, 1e-3, 1e-2):
        assert th.rs_codeword_error_ratio(p, th.RS272) == pytest.approx(stats.binom.sf(7, 272, p), rel=1e-9)
    # half the codeword, same t as KR4: at one symbol error probability FER(rs272) < FER(kr4)
    assert th.rs_codeword_error_ratio(1e-3, th.RS272) < th.rs_codeword_error_ratio(1e-3, th.KR4)
    # but a post-FEC BER of 1e-13 needs a cleaner line than KP4 (t = 15 over 544)
    assert th.pre_fec_ber_for_fer(1e-10, th.RS272) < th.pre_fec_ber_for_fer(1e-10, th.KP4)
    with pytest.raises(ValueError, match="unknown RS code"):
        th.rs_code("none")
