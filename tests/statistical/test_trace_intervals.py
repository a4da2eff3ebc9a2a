"""Coverage of the clustered post-FEC intervals of 400G/200G traces (``phy802 trace generate``):
``post_fec.ber_ci95`` (payload flips) and ``post_fec.decoder_output.ber_ci95`` (decoder-output
message bits), both over codeword pairs (``protocol.trace.config.CI_UNIT``), not bits.

As in ``test_concat_intervals.py``: over R independent fixed-seed traces, count the 95% intervals
that hold the BER pooled over all R and apply the exact two-sided binomial test of coverage = 0.95
at 5% (``scipy.stats.binomtest``): the stored interval must not be rejected, and the old
bit-level Clopper-Pearson interval on the same traces must be (so the test can fail).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from phy802.link.concat import clustered_rate
from phy802.stats import clopper_pearson
from protocol.framing import PAIR_LINE_BITS, get_rate, pair_of_data_block
from protocol.trace import TraceReader, generate_trace


def _binom_ok(hit: int, runs: int) -> bool:
    return binomtest(hit, runs, 0.95).pvalue >= 0.05


def _coverage(tmp_path, runs: int, pairs: int, seed0: int, **kw):
    metas = [generate_trace(tmp_path / f"{s}.trace", line_bits=pairs * PAIR_LINE_BITS, seed=seed0 + s, workers=1, **kw)
             for s in range(runs)]
    out = {}
    for key, get in (("payload", lambda m: m["post_fec"]), ("decoder", lambda m: m["post_fec"]["decoder_output"]),
                     ("pre_fec", lambda m: m["pre_fec"])):
        ms = [get(m) for m in metas]
        truth = sum(m["bit_errors"] for m in ms) / sum(m["bits"] for m in ms)
        new = sum(m["ber_ci95"][0] <= truth <= m["ber_ci95"][1] for m in ms)
        old = sum(lo <= truth <= hi for m in ms for lo, hi in [clopper_pearson(m["bit_errors"], m["bits"])])
        out[key] = (ms, new, old)
    return metas, out


def test_400g_ieee_post_fec_intervals_cover_the_pooled_ber(tmp_path):
    # 40 traces of 600 pairs (1200 KP4 codewords) at pre-FEC BER 2e-3: ~90 codewords per trace
    # fail, each delivering ~18 wrong message bits (~53 payload flips).  When this test was
    # written the pair intervals held the pooled BER in 40/40 (payload) and 40/40 (decoder
    # output); the bit-level ones in 5/40 and 9/40 (p ~ 1e-40, 1e-32).
    metas, cov = _coverage(tmp_path, 40, 600, 100, rate="400G", fec="ieee", ber=2e-3)
    assert all(m["codewords"]["uncorrectable"] >= 50 for m in metas)  # enough clusters for the mean's interval
    ms, new, old = cov.pop("pre_fec")
    assert new == old and "ci_unit" not in ms[0]  # independent line bits: Clopper-Pearson, unchanged
    for key, (ms, new, old) in cov.items():
        assert all(m["units_with_errors"] >= 50 for m in ms), key
        per = sum(m["bit_errors"] for m in ms) / sum(m["units_with_errors"] for m in ms)
        assert per > 10, key  # the errors do cluster
        assert _binom_ok(new, 40), f"{key}: {new}/40 stored intervals hold the pooled BER"
        assert not _binom_ok(old, 40), f"{key}: the bit-level interval held it in {old}/40: the test has no power"


def _flips_per_pair(path, rate: str) -> tuple[np.ndarray, dict]:
    with TraceReader(path) as r:
        assert r.n_chunks > 1
        off = np.concatenate([c.offsets for c in r.iter_chunks()])
        meta = r.meta
    cnt = np.bincount(pair_of_data_block(off // 256, get_rate(rate)), minlength=meta["pairs"]).astype(np.int64)
    assert cnt.size == meta["pairs"]
    return cnt, meta


@pytest.mark.parametrize("fec, ber", [("ieee", 2e-3), ("bypass", 5e-3)])
def test_stored_payload_interval_is_over_pairs_of_the_flips_read_back(tmp_path, fec, ber):
    # the metadata's interval is the one computed from the trace's own flips, counted per pair as
    # read back from the file: several chunks per shard and many shards (shard_pairs=7), so the
    # descrambler carries joined into a shard's first pair are counted there (at BER 5e-3 in
    # bypass ~30% of the shard boundaries carry copies)
    meta = generate_trace(tmp_path / "t.trace", rate="400G", fec=fec, ber=ber, line_bits=600 * PAIR_LINE_BITS,
                          seed=7, chunk_pairs=3, shard_pairs=7, workers=1)
    cnt, _ = _flips_per_pair(tmp_path / "t.trace", "400G")
    post = meta["post_fec"]
    bad, sq = int(np.count_nonzero(cnt)), int((cnt * cnt).sum())
    assert int(cnt.sum()) == post["bit_errors"] and 0 < bad <= meta["pairs"]
    assert fec == "bypass" or bad < meta["pairs"]  # some pairs clean, some not
    assert (post["units_with_errors"], post["bit_errors_sq"]) == (bad, sq)
    r = clustered_rate(post["bit_errors"], post["bits"], meta["pairs"], bad, sq, post["bits"] / meta["pairs"])
    assert post["ber_ci95"] == [r.lo, r.hi]
    assert r.lo <= post["ber"] <= r.hi
    lo, hi = clopper_pearson(post["bit_errors"], post["bits"])
    assert post["ber_ci95"][0] < lo and post["ber_ci95"][1] > hi  # wider than the bit-level one
    dec = post["decoder_output"]
    assert 0 < dec["units_with_errors"] <= dec["bit_errors"] and dec["bit_errors"] ** 2 / dec["units_with_errors"] \
        <= dec["bit_errors_sq"] <= dec["bit_errors"] ** 2
    r = clustered_rate(dec["bit_errors"], dec["bits"], meta["pairs"], dec["units_with_errors"], dec["bit_errors_sq"],
                       dec["bits"] / meta["pairs"])
    assert dec["ber_ci95"] == [r.lo, r.hi]


@pytest.mark.slow
@pytest.mark.parametrize("rate, fec, ber, burst_pb, decoder_old_fails", [
    # held, when written (pair intervals vs bit-level ones, payload / decoder output): bypass
    # 60, 60 vs 45, 60 -- there the decoder output is the independent line errors themselves, so
    # the bit-level interval is right and only the payload one (x3 flips) must fail
    ("400G", "bypass", 1e-4, None, False),
    ("200G", "ieee", 2e-3, None, True),  # 59, 59 vs 16, 28
    # lane_dfe bursts (mean 2 bits): 60, 60 vs 13, 20, and pre-FEC 59 vs 41 (at burst_pb 0.9, mean
    # 10 bits, the pre-FEC interval held 59 vs 20 of 60; KP4 then saw too few failures to test)
    ("400G", "ieee", 4e-3, 0.5, True),
])
def test_post_fec_interval_coverage_other_traces(tmp_path, rate, fec, ber, burst_pb, decoder_old_fails):
    metas, cov = _coverage(tmp_path, 60, 600, 500, rate=rate, fec=fec, ber=ber, burst_pb=burst_pb)
    ms, new, old = cov.pop("pre_fec")
    if burst_pb is None:
        assert new == old  # independent line bits: Clopper-Pearson, unchanged
    else:  # a burst's bits together: over pairs
        assert _binom_ok(new, 60) and not _binom_ok(old, 60), f"pre-FEC: {new}/60 over pairs, {old}/60 bit-level"
    for key, (ms, new, old) in cov.items():
        assert all(m["units_with_errors"] >= 50 for m in ms), key
        assert _binom_ok(new, 60), f"{key}: {new}/60 stored intervals hold the pooled BER"
        if key == "payload" or decoder_old_fails:
            assert not _binom_ok(old, 60), f"{key}: the bit-level interval held it in {old}/60"


@pytest.mark.slow
def test_unit_counts_do_not_depend_on_workers(tmp_path):
    # shards on 2 worker processes write the same file and merge to the same unit counters
    kw = dict(rate="400G", fec="bypass", ber=5e-3, line_bits=800 * PAIR_LINE_BITS, seed=3, chunk_pairs=5,
              shard_pairs=20)
    a = generate_trace(tmp_path / "a.trace", workers=1, **kw)
    b = generate_trace(tmp_path / "b.trace", workers=2, **kw)
    cnt = [_flips_per_pair(tmp_path / f, "400G")[0] for f in ("a.trace", "b.trace")]
    assert np.array_equal(*cnt)  # the same flips (the files differ only in wall_s and timing)
    assert (a["post_fec"]["units_with_errors"], a["post_fec"]["bit_errors_sq"]) == \
        (int(np.count_nonzero(cnt[0])), int((cnt[0] * cnt[0]).sum()))
    assert a["post_fec"] == b["post_fec"] and a["n_shards"] == 40
