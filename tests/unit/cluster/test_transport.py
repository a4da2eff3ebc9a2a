"""protocol.cluster.transport: BER 0 is deterministic, selective repeat never slower than
go-back-N on the same trials, one frame on one path against its closed form (quantiles, mean,
failure rate), link-level retry, and the CLI's --trials output and refusals."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from phy802.cli import main
from protocol.cluster.nccl import predict
from protocol.cluster.transport import estimate, rto_ns, simulate, traffic
from protocol.cluster.topology import preset


def test_ber0_gives_the_deterministic_time():
    c = preset("dgx-h100-ib", nodes=8, fec="bypass", ber=0.0)
    pr = predict("allreduce", 25e6, c)
    r = simulate(pr, c, 50, seed=3)
    assert np.all(r.samples_us == pr.time_us)
    assert r.p50_us == r.p99_us == r.p999_us == pr.time_us and r.failure_rate == 0.0
    assert r.mean_us == pytest.approx(pr.time_us, rel=1e-14)


def test_rto():
    assert rto_ns(20) == pytest.approx(4.294967296e9)  # 4.096 us x 2^20 = 4.29 s
    assert rto_ns(0) == 4096.0


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_selective_never_slower_than_go_back_n_on_the_same_trials(algo):
    base = dict(nodes=4, fec="bypass", ber=3e-5, timeout=4)
    g = preset("dgx-h100-ib", transport="ib", **base)
    s = preset("dgx-h100-ib", transport="selective", **base)
    pg, ps = predict("allreduce", 4e6, g, algo=algo), predict("allreduce", 4e6, s, algo=algo)
    rg, rs = simulate(pg, g, 300, seed=11), simulate(ps, s, 300, seed=11)
    assert rg.losses == rs.losses > 0
    assert np.all(rs.samples_us <= rg.samples_us + 1e-9)
    assert np.any(rs.samples_us < rg.samples_us)
    for r in (rg, rs):
        assert r.p50_us <= r.p99_us <= r.p999_us and r.mean_us >= r.deterministic_us


def test_one_frame_one_path_closed_form():
    # one send of one frame between two nodes: a loss is the last packet, so every loss waits the RTO
    # and resends the frame: delay = L (RTO + ft) with P(L = l) = qp^l (1 - qp); failure when L > retry_cnt
    c = preset("dgx-h100-ib", nodes=2, fec="bypass", ber=1e-6, timeout=0, retry_cnt=7)
    pr = predict("sendrecv", 1000, c)
    assert traffic(pr, c).frames_per_trial == 1 and traffic(pr, c).links == 2
    qp = 0.3
    q = 1 - math.sqrt(1 - qp)  # per link, two links
    n = 200_000
    r = simulate(pr, c, n, seed=5, q_override=q)
    ft = 8 * float(c.framing.frame_octets(1000)) / 400.0
    unit = (rto_ns(0) + ft) * 1e-3
    det = pr.time_us
    # quantiles over the completed trials: CDF(l) = (1 - qp^(l+1)) / (1 - qp^8)
    cdf = [(1 - qp ** (l + 1)) / (1 - qp ** 8) for l in range(8)]
    want = {p: next(l for l in range(8) if cdf[l] >= p) for p in (0.5, 0.99, 0.999)}
    assert want == {0.5: 0, 0.99: 3, 0.999: 5}
    assert r.p50_us == pytest.approx(det + want[0.5] * unit, rel=1e-9)
    assert r.p99_us == pytest.approx(det + want[0.99] * unit, rel=1e-9)
    assert r.p999_us == pytest.approx(det + want[0.999] * unit, rel=1e-9)
    # mean: E[L | L <= 7] (RTO + ft), within 4 standard errors
    pl = np.array([qp ** l * (1 - qp) for l in range(8)])
    pl /= pl.sum()
    mean_l = (pl * np.arange(8)).sum()
    sd_l = math.sqrt((pl * (np.arange(8) - mean_l) ** 2).sum())
    assert abs((r.mean_us - det) / unit - mean_l) < 4 * sd_l / math.sqrt(n * (1 - qp ** 8))
    # failure rate qp^8 = 6.6e-5: a two-sided 99.9% binomial interval
    k = round(r.failure_rate * n)
    lo, hi = stats.binom.ppf([0.0005, 0.9995], n, qp ** 8)
    assert lo <= k <= hi


def test_link_level_retry_hides_losses_from_the_transport():
    c = preset("dgx-h100-ib", nodes=4, fec="llr", ber=1e-4, timeout=20)
    pr = predict("allreduce", 4e6, c, algo="ring")
    llr = simulate(pr, c, 200, seed=2, q_override=1e-3)
    gbn = simulate(pr, c.with_(fec="ieee"), 200, seed=2, q_override=1e-3)
    assert llr.losses == gbn.losses > 0
    assert llr.p999_us < 1e3 * rto_ns(20) * 1e-3  # no trial waited for an RTO
    assert llr.mean_us < gbn.mean_us
    tiny = simulate(pr, c.with_(llr_buffer_frames=1), 200, seed=2, q_override=1e-3)  # buffer < a link RTT
    assert tiny.mean_us == pytest.approx(gbn.mean_us, rel=1e-12)


def test_all_frames_lost_fails_every_trial():
    c = preset("dgx-h100-ib", nodes=2, fec="bypass", ber=1e-3)
    pr = predict("sendrecv", 1e5, c)
    r = simulate(pr, c, 10, seed=1, q_override=1.0)
    assert r.failure_rate == 1.0 and math.isinf(r.mean_us)


def test_seeded_and_reproducible():
    c = preset("dgx-h100-ib", nodes=4, fec="bypass", ber=1e-5)
    pr = predict("allreduce", 2e6, c)
    a, b = simulate(pr, c, 100, seed=9), simulate(pr, c, 100, seed=9)
    assert np.array_equal(a.samples_us, b.samples_us)


def test_cli_trials_json_and_refusal(capsys):
    assert main(["collective", "--nodes", "4", "--fec", "bypass", "--ber", "1e-5", "--bytes", "1e6", "--trials", "100",
                 "--seed", "3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["time_us"]) == {"mean", "p50", "p99", "p999"} and 0 <= d["failure_rate"] <= 1
    assert d["time_us"]["p50"] <= d["time_us"]["p99"] <= d["time_us"]["p999"]
    # a trial count whose lost frames would take past an hour is refused up front with the estimate:
    # ~7.7e5 lost frames per trial (none fails: a lost frame fails its QP with p ~ 1e-11), 1e7 trials,
    # 7.7e12 lost frames: over an hour even at 1e9 lost frames per second (the kernel does ~3e7)
    c = preset("dgx-h100-ib", nodes=64, fec="bypass", ber=1e-5)
    est = estimate(predict("allreduce", 1e9, c), c, 10**7)
    assert est["losses"] > 3.6e12 and est["seconds"] > 3600
    assert main(["collective", "--nodes", "64", "--fec", "bypass", "--ber", "1e-5", "--bytes", "1e9",
                 "--trials", "10000000"]) == 2
    assert "lost frames expected" in capsys.readouterr().err


def test_burst_channel_frame_loss():
    from protocol.cluster.transport import frame_loss

    for fec in ("ieee", "bypass", "detect_only"):
        c = preset("dgx-h100-ib", fec=fec, ber=1e-4)
        # no propagation: the Markov chain reduces to independent errors (the closed forms)
        assert frame_loss(c.with_(burst_pb=0.0), 4096) == pytest.approx(frame_loss(c, 4096), rel=0.05)
    ieee, byp = preset("dgx-h100-ib", fec="ieee", ber=1e-5), preset("dgx-h100-ib", fec="bypass", ber=1e-5)
    # bursts of the same BER break RS codewords far more often and headers less often
    assert frame_loss(ieee.with_(burst_pb=0.9), 4096) > 1e10 * frame_loss(ieee, 4096)
    assert frame_loss(byp.with_(burst_pb=0.9), 4096) < 0.5 * frame_loss(byp, 4096)
    assert main(["collective", "--nodes", "4", "--fec", "ieee", "--ber", "1e-4", "--burst-pb", "0.9", "--trials", "20",
                 "--bytes", "1e6"]) == 0


def _reference_delays(kp, rec_t, rec_idx, rec_k, trials):
    """The array formulation (flow_delays + reduce_trials) on the streaming kernel's own draws."""
    from protocol.cluster._kernels import flow_delays, reduce_trials

    F, per_chain, off = kp["F"], kp["per_chain"], kp["off"]
    chain = rec_idx // per_chain
    rem = rec_idx - chain * per_chain
    flow = rem // F
    pos = rem - flow * F
    step = np.searchsorted(off, flow, side="right") - 1
    d, t, c, s, f = flow_delays(rec_t, chain, flow, pos, step, rec_k, F, kp["last_step"], kp["W"], kp["ft"],
                                kp["rtt"], kp["gap"], kp["rto"], kp["retry_cnt"], kp["mode"], kp["llr"],
                                kp["llr_ok"], kp["llr_ns"], kp["llr_retries"])
    return reduce_trials(d, t, c, s, f, 0, trials)


@pytest.mark.parametrize("algo,transport,fec,q", [("ring", "ib", "bypass", 2e-3), ("tree", "ib", "bypass", 2e-2),
                                                   ("tree", "selective", "bypass", 2e-2),
                                                   ("ring", "selective", "bypass", 0.08),
                                                   ("tree", "ib", "llr", 0.2), ("tree", "ib", "bypass", 0.3)])
def test_streaming_kernel_equals_the_array_reference_on_the_same_draws(algo, transport, fec, q):
    # the streaming kernel (geometric skips, flows/steps/chains closed on the fly, a trial stopped at
    # its failing frame) against the sorted-array formulation, fed the very lost frames it drew
    from protocol.cluster._kernels import sim_trials
    from protocol.cluster.transport import kernel_args, kernel_params

    c = preset("dgx-h100-ib", nodes=4, fec=fec, ber=1e-5, transport=transport, timeout=3, retry_cnt=3)
    pr = predict("allreduce", 2e6, c, algo=algo)
    kp = kernel_params(pr, c, q_override=q)
    trials, cap = 60, 2_000_000
    rec_t, rec_idx, rec_k = (np.zeros(cap, np.int64) for _ in range(3))
    delay, fail, losses, nrec = sim_trials(5, trials, *kernel_args(kp), rec_t, rec_idx, rec_k)
    assert 0 < nrec == losses < cap
    ref_d, ref_f = _reference_delays(kp, rec_t[:nrec], rec_idx[:nrec], rec_k[:nrec], trials)
    assert np.array_equal(fail, ref_f)
    assert np.array_equal(delay[~fail], ref_d[~fail])  # same operations in the same order: bit-equal
    assert np.any(delay > 0) if q < 0.25 else fail.all()
    # the draws: every frame lost independently (lost frames per trial against Binomial(M, qp))
    if not fail.all():
        per_trial = np.bincount(rec_t[:nrec], minlength=trials)[~fail]
        fk = kp["retry_cnt"] + (kp["llr_retries"] if kp["llr_ok"] else 0)
        qc = (kp["qp"] - kp["qp"] ** (fk + 1)) / (1 - kp["qp"] ** (fk + 1))  # P(lost | its QP did not fail)
        m = kp["M"] * qc
        assert abs(per_trial.mean() - m) < 4 * math.sqrt(m * (1 - qc) / per_trial.size)
    # positions strictly increasing inside a trial (no frame drawn twice)
    same = rec_t[1:nrec] == rec_t[:nrec - 1]
    assert np.all(np.diff(rec_idx[:nrec])[same] > 0)


def test_estimate_counts_the_frames_a_failing_trial_stops_at():
    # detect_only at 1e-5 fails every trial within ~1/qp^7 lost frames, far fewer than its M q_path:
    # the estimate follows the early stop (E[min(K, G)]), and where nothing fails it is M q_path
    # (the approximation uses the mean K: within 20% of the frames the kernel drew)
    for ber, all_fail in ((1e-5, True), (3e-7, False)):
        c = preset("dgx-h100-ib", nodes=16, fec="detect_only", ber=ber, topology="three-tier")
        pr = predict("allreduce", 25e6, c)
        r, e = simulate(pr, c, 200, seed=1), estimate(pr, c, 200)
        assert (r.failure_rate == 1.0) if all_fail else (r.failure_rate == 0.0)
        assert abs(e["losses"] / r.losses - 1) < 0.2
        if all_fail:
            assert e["losses"] < 1e-3 * 200 * traffic(pr, c).frames_per_trial * r.path_loss
