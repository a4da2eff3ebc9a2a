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
    # a trial count whose lost frames would not fit in memory is refused up front with the estimate
    c = preset("dgx-h100-ib", nodes=64, fec="bypass", ber=1e-3)
    assert estimate(predict("allreduce", 1e9, c), c, 10**9)["memory_bytes"] > 1e15
    assert main(["collective", "--nodes", "64", "--fec", "bypass", "--ber", "1e-3", "--bytes", "1e9",
                 "--trials", "1000000000"]) == 2
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
