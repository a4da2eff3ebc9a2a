"""Coverage of the clustered intervals at 800G/1.6T (KP4 + Clause 177 inner code): the
``kp4_input_ber`` interval of ``ConcatCounters.rates()`` (over inner blocks) and the trace's
``post_fec.ber_ci95`` (over 12-codeword spans of the payload stream).

Each test counts, over R independent fixed-seed runs, how many 95% intervals hold the true rate
(the closed form where one is exact, else the rate pooled over all runs) and applies the exact
two-sided binomial test of coverage = 0.95 at 5% (``scipy.stats.binomtest``): the new interval
must not be rejected, and the old bit-level Clopper-Pearson interval on the same runs must be (so
the test can fail).  The two-sided test cannot reject an interval for being too wide with R = 40
(40 of 40 has p = 0.27): the Bonferroni product intervals are conservative by design.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from phy802 import theory_inner as T
from phy802.channel import Pam4Awgn
from phy802.link.concat import ConcatConfig, ConcatCounters, ConcatLink, clustered_rate
from phy802.stats import clopper_pearson, rate
from protocol.trace import TraceReader
from protocol.trace.inner import UNIT_STREAM_BITS, generate_inner_trace, payload_ber_ci95


def _binom_ok(hit: int, runs: int) -> bool:
    return binomtest(hit, runs, 0.95).pvalue >= 0.05


def _kp4_input_coverage(cfg: ConcatConfig, snr: float, n: int, runs: int, seed0: int, truth: float | None = None):
    link = ConcatLink(cfg, Pam4Awgn(snr_db=snr), path="fast")
    cs = [link.run(n, seed0 + s).counters for s in range(runs)]
    if truth is None:
        truth = sum(c.inner_output_bit_errors for c in cs) / sum(c.inner_message_bits for c in cs)
    new = sum(c.rates()["kp4_input_ber"].contains(truth) for c in cs)
    old = sum(rate(c.inner_output_bit_errors, c.inner_message_bits).contains(truth) for c in cs)
    return cs, new, old


def test_kp4_input_ber_interval_covers_the_closed_form():
    # 800G, hard decoding at 15 dB: a failed inner block delivers ~2.1 wrong bits, so the bit-level
    # interval is ~1.5x too narrow (28 of 40 runs held the closed form when this test was written,
    # p = 4e-7); the interval over blocks held it in 40 of 40.  Truth: the exact BSC-enumeration law
    # of the hard decoder (independent of the runs).
    snr = 15.0
    truth = T.inner_law_bsc(*T.awgn_position_probs(snr), m=3).ber_out
    cs, new, old = _kp4_input_coverage(ConcatConfig(rate="800G", inner_decoder="hard"), snr, 120, 40, 1000, truth)
    assert all(c.inner_failed >= 300 for c in cs)  # enough clusters per run for the mean's normal interval
    per = sum(c.inner_output_bit_errors for c in cs) / sum(c.inner_failed for c in cs)
    assert per > 2.0  # the errors do cluster
    assert _binom_ok(new, 40), f"{new}/40 clustered kp4_input_ber intervals hold the closed form {truth:.4g}"
    assert not _binom_ok(old, 40), f"the bit-level interval held it in {old}/40: the test has no power"


def test_kp4_input_sum_of_squares_is_per_block():
    # the counter is the sum over inner blocks (PAM4 symbols without the inner code) of the wrong
    # bits squared: between b^2 / k (Cauchy-Schwarz) and (bits per unit) x b, on both paths
    for path, n in (("fast", 1200), ("exact", 60)):
        c = ConcatLink(ConcatConfig(rate="800G", inner_decoder="hard"), Pam4Awgn(snr_db=15.0), path=path).run(n, 4).counters
        b, k, sq = c.inner_output_bit_errors, c.inner_failed, c.inner_output_bit_errors_sq
        assert k >= 20 and b ** 2 / k <= sq <= 120 * b and sq > b, (path, b, k, sq)
        c = ConcatLink(ConcatConfig(rate="800G", inner="none"), Pam4Awgn(snr_db=17.0), path=path).run(n, 4).counters
        b, k, sq = c.inner_output_bit_errors, c.line_symbol_errors, c.inner_output_bit_errors_sq
        # a PAM4 symbol error is 1 wrong bit of the Gray pair, or 2 (sq counts those as 4)
        assert k >= 20 and b == c.line_bit_errors and sq - b == 2 * (b - k), (path, b, k, sq)
    # fewer than 2 failed blocks: the mean is bounded by [0, 120] only; no block: [0, 1]
    r = ConcatCounters(inner_blocks=1000, inner_message_bits=120_000).rates()["kp4_input_ber"]
    assert r.lo == 0 and r.hi == pytest.approx(1 - 0.0125 ** (1 / 1000), rel=1e-6)
    assert ConcatCounters().rates()["kp4_input_ber"].hi == 1.0
    with pytest.raises(ValueError, match="bad_units"):
        clustered_rate(500, 10_000, 100, 2, 500, 120)  # 500 wrong bits cannot sit in 2 blocks of 120


def _trace_coverage(tmp_path, cfg: ConcatConfig, snr: float, n: int, runs: int, seed0: int):
    ch = Pam4Awgn(snr_db=snr)
    metas = [generate_inner_trace(tmp_path / f"{s}.trace", cfg, ch, n_codewords=n, seed=seed0 + s)["post_fec"]
             for s in range(runs)]
    truth = sum(m["bit_errors"] for m in metas) / sum(m["bits"] for m in metas)
    new = sum(m["ber_ci95"][0] <= truth <= m["ber_ci95"][1] for m in metas)
    old = sum(lo <= truth <= hi for m in metas for lo, hi in [clopper_pearson(m["bit_errors"], m["bits"])])
    return metas, new, old


def test_trace_payload_ber_interval_covers_the_pooled_ber(tmp_path):
    # 800G, hard decoding at 15 dB, 40 traces of 600 codewords (50 spans of 12 codewords each): a
    # failed codeword delivers ~17 wrong message bits, ~50 payload flips after the descrambler, so
    # Clopper-Pearson on the flips is far too narrow (5 of 40 held the pooled BER when this test
    # was written); the interval over spans held it in 40 of 40.
    metas, new, old = _trace_coverage(tmp_path, ConcatConfig(rate="800G", inner_decoder="hard"), 15.0, 600, 40, 2000)
    assert all(m["bit_errors"] >= 500 for m in metas)
    assert _binom_ok(new, 40), f"{new}/40 trace post_fec.ber_ci95 hold the pooled payload BER"
    assert not _binom_ok(old, 40), f"the bit-level interval held it in {old}/40: the test has no power"


def test_trace_payload_interval_is_over_spans_of_the_flips_read_back(tmp_path):
    # the metadata's interval is the one computed from the trace's own flips, counted per span as
    # read back from the file (several chunks: batch_groups=30)
    cfg = ConcatConfig(rate="800G", inner_decoder="hard")
    meta = generate_inner_trace(tmp_path / "t.trace", cfg, Pam4Awgn(snr_db=15.0), n_codewords=1200, seed=5,
                                batch_groups=30)
    with TraceReader(tmp_path / "t.trace") as r:
        assert r.n_chunks > 1
        off = np.concatenate([c.offsets for c in r.iter_chunks()])
    cnt = np.unique(off // UNIT_STREAM_BITS, return_counts=True)[1].astype(np.int64)
    post = meta["post_fec"]
    assert off.size == post["bit_errors"] and post["bits"] % UNIT_STREAM_BITS == 0
    assert 0 < cnt.size < post["bits"] // UNIT_STREAM_BITS  # some spans clean, some not
    assert post["ber_ci95"] == payload_ber_ci95(off.size, post["bits"], int(cnt.size), int((cnt * cnt).sum()))
    lo, hi = clopper_pearson(off.size, post["bits"])
    assert post["ber_ci95"][0] < lo and post["ber_ci95"][1] > hi  # wider than the bit-level one


@pytest.mark.slow
@pytest.mark.parametrize("cfg, snr, n, truth", [  # held 60/60 (new) vs 48, 38 and 46 of 60 (bit-level) when written
    (ConcatConfig(rate="1.6T", inner_decoder="hard"), 15.0, 120, "law"),
    (ConcatConfig(rate="800G", inner_decoder="chase"), 14.6, 240, None),
    (ConcatConfig(rate="800G", inner_decoder="hard", hops=2, outer="end_to_end"), 15.5, 120, None),
])
def test_kp4_input_ber_interval_coverage_other_links(cfg, snr, n, truth):
    t = T.inner_law_bsc(*T.awgn_position_probs(snr), m=cfg.symbols_per_block).ber_out if truth == "law" else None
    cs, new, old = _kp4_input_coverage(cfg, snr, n, 60, 3000, t)
    assert all(c.inner_failed >= 100 for c in cs)
    assert _binom_ok(new, 60), f"{new}/60 clustered kp4_input_ber intervals hold the truth"
    assert not _binom_ok(old, 60), f"the bit-level interval held it in {old}/60"


@pytest.mark.slow
def test_trace_payload_ber_interval_coverage_at_1p6t_two_hops(tmp_path):
    # 1.6T, two hops with KP4 decoded at the far end only: held 58 of 60 (new) vs 10 of 60 when written
    cfg = ConcatConfig(rate="1.6T", inner_decoder="hard", hops=2, outer="end_to_end")
    metas, new, old = _trace_coverage(tmp_path, cfg, 15.5, 1200, 60, 4000)
    assert all(m["bit_errors"] >= 300 for m in metas)
    assert _binom_ok(new, 60), f"{new}/60 trace post_fec.ber_ci95 hold the pooled payload BER"
    assert not _binom_ok(old, 60), f"the bit-level interval held it in {old}/60"
