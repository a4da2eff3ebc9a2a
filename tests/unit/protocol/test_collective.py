"""protocol.cluster.flat: every formula against hand-computed values, and the BER-0 latency identity."""

import json
import math

import pytest
from scipy import stats

from phy802.cli import main
from protocol.cluster.flat import Cluster, bus_factor, collective_time, frame_loss_probability, phy_latency_ns
from protocol.framing import RATES

# one RoCEv2 frame of 4096 payload octets: 8 preamble + 14 Eth + 20 IPv4 + 8 UDP + 12 BTH + 4096 + 4 ICRC
# + 4 FCS + 12 IPG = 4178 octets, rounded up to 8 -> 4184 octets = 33472 stream bits
FRAME_BITS = 33472
ZERO = dict(nic_ns=0.0, switch_ns=0.0, fiber_m=0.0, link_gbps=400.0)


def test_one_frame_serialisation_and_framing():
    c = Cluster(ranks=2, fec="bypass", **ZERO)
    r = collective_time("sendrecv", 4096, c)
    assert r.bandwidth_s == pytest.approx(FRAME_BITS / 400.0 * 1e-9, rel=1e-12)  # 83.68 ns
    assert r.latency_s == 0.0 and r.resend_s == 0.0 and r.steps == 1


def test_ring_allreduce_is_2n_minus_1_steps_of_alpha_plus_chunk():
    # N = 4, S = 4 x 4096: each step sends one 4096-octet frame
    c = Cluster(ranks=4, **{**ZERO, "nic_ns": 500.0, "switch_ns": 500.0, "fiber_m": 10.0})
    alpha = 2 * 500 + 1 * 500 + 2 * (57.6 + 10 * 5.0)  # 1715.2 ns, KP4 ieee = 57.6 ns per link
    assert c.alpha_ns == pytest.approx(alpha, rel=1e-12)
    r = collective_time("allreduce", 4 * 4096, c, "ring")
    assert r.steps == 6 and r.link_traversals == 12
    assert r.latency_s == pytest.approx(6 * alpha * 1e-9, rel=1e-12)
    assert r.bandwidth_s == pytest.approx(6 * FRAME_BITS / 400.0 * 1e-9, rel=1e-12)
    assert r.time_s == pytest.approx((6 * alpha + 6 * 83.68) * 1e-9, rel=1e-12)
    assert r.phy_s == pytest.approx(12 * 57.6e-9, rel=1e-12)
    # nccl-tests bus bandwidth: algbw x 2(N-1)/N
    assert r.bus_gbps == pytest.approx(8 * 4 * 4096 / (r.time_s * 1e9) * 1.5, rel=1e-12)


@pytest.mark.parametrize("op,algo,steps,passes", [
    ("reduce_scatter", "ring", 7, 7), ("allgather", "ring", 7, 7),
    ("allreduce", "tree", 6, 2), ("broadcast", "ring", 7, 1), ("broadcast", "tree", 3, 3),
])
def test_step_and_bandwidth_counts(op, algo, steps, passes):
    n, size = 8, 8 * 4096
    c = Cluster(ranks=n, fec="bypass", **ZERO)
    r = collective_time(op, size, c, algo)
    per = size // n if algo == "ring" and op != "broadcast" else size
    frames = -(-per // 4096)
    assert r.steps == steps
    assert r.bandwidth_s == pytest.approx(passes * frames * FRAME_BITS / 400.0 * 1e-9, rel=1e-12)


def test_path_links_per_topology():
    assert Cluster(ranks=64).links == 2
    assert Cluster(ranks=32, topology="leaf-spine").links == 2
    assert Cluster(ranks=64, topology="leaf-spine").links == 4
    assert Cluster(ranks=64, topology="three-tier").links == 4
    assert Cluster(ranks=1024, topology="three-tier").links == 6
    assert Cluster(ranks=64, topology="leaf-spine", path_links=3).switches == 2
    c = Cluster(ranks=64, topology="leaf-spine")
    assert c.alpha_ns == pytest.approx(2 * 500 + 3 * 500 + 4 * (57.6 + 50.0), rel=1e-12)  # 2930.4 ns


def test_payload_rate_is_the_mac_rate():
    g = RATES["400G"]
    assert Cluster().payload_gbps == pytest.approx(425.0 / g.line_per_stream)
    assert abs(Cluster().payload_gbps - 400.0) < 0.05
    assert abs(Cluster(rate="200G").payload_gbps - 200.0) < 0.05
    for code in ("kr4", "rs272", "none"):  # the MAC rate does not depend on the code
        assert Cluster(code=code).payload_gbps == pytest.approx(Cluster().payload_gbps, rel=1e-4)


def test_bus_factor():
    assert bus_factor("allreduce", 64) == pytest.approx(126 / 64)
    assert bus_factor("allgather", 64) == pytest.approx(63 / 64)
    assert bus_factor("broadcast", 64) == 1.0


@pytest.mark.parametrize("topology,ranks", [("single-switch", 64), ("leaf-spine", 256), ("three-tier", 2048)])
@pytest.mark.parametrize("op,algo", [("allreduce", "ring"), ("allreduce", "tree"), ("allgather", "ring"),
                                     ("broadcast", "tree"), ("sendrecv", None)])
def test_ber0_modes_differ_by_traversals_times_latency_difference(topology, ranks, op, algo):
    for extra in (ZERO, {}):  # all non-PHY latencies zero, and the defaults: the identity holds for both
        a = collective_time(op, 25e6, Cluster(ranks=ranks, topology=topology, fec="ieee", **extra), algo)
        b = collective_time(op, 25e6, Cluster(ranks=ranks, topology=topology, fec="bypass", **extra), algo)
        assert a.link_traversals == b.link_traversals
        assert a.time_s - b.time_s == pytest.approx(a.link_traversals * (57.6 - 0.0) * 1e-9, rel=1e-9)
        assert a.bandwidth_s == b.bandwidth_s


def test_cli_ber0_identity_with_zero_non_phy_latency(capsys):
    base = ["collective", "--cluster", "flat-ethernet", "--op", "allreduce", "--algo", "ring", "--ranks", "64", "--bytes", "25e6",
            "--ber", "0", "--topology", "single-switch", "--switch-ns", "0", "--nic-ns", "0", "--fiber-m", "0", "--json"]
    out = {}
    for code, fec in (("kp4", "ieee"), ("kp4", "detect_only")):
        assert main(base + ["--code", code, "--fec", fec]) == 0
        out[fec] = json.loads(capsys.readouterr().out)
    d = out["ieee"]["phy_ns"] - out["detect_only"]["phy_ns"]
    assert d == pytest.approx(57.6 - 29.6)
    assert out["ieee"]["link_traversals"] == 2 * 63 * 2
    assert out["ieee"]["time_s"] - out["detect_only"]["time_s"] == pytest.approx(252 * d * 1e-9, rel=1e-9)
    assert out["ieee"]["latency_s"] == pytest.approx(252 * 57.6e-9, rel=1e-12)  # only PHY latency left


def test_cli_bad_input_exit_codes(capsys):
    assert main(["collective", "--cluster", "flat-ethernet", "--op", "reduce_scatter", "--algo", "tree"]) == 2
    with pytest.raises(SystemExit) as ei:
        main(["collective", "--fec", "kp4"])
    assert ei.value.code == 2
    assert "--fec kp4 is now --code kp4 --fec ieee" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["collective", "--nic-ns", "-1"])


def test_latency_ordering_of_the_modes():
    lat = {m: phy_latency_ns(c, f) for m, (c, f) in {
        "bypass": ("kp4", "bypass"), "unequal": ("kp4", "unequal"), "rs272": ("rs272", "ieee"),
        "kr4": ("kr4", "ieee"), "kp4": ("kp4", "ieee")}.items()}
    assert lat["bypass"] <= lat["unequal"] <= lat["rs272"] <= lat["kr4"] <= lat["kp4"]
    assert lat["kp4"] == pytest.approx(57.6) and lat["bypass"] == 0.0
    assert lat["rs272"] == pytest.approx(30.8) and lat["kr4"] == pytest.approx(47.6)  # protocol.latency per code
    assert phy_latency_ns("kp4", "llr") == pytest.approx(lat["kp4"])  # llr decodes like ieee


# ---------------------------------------------------------------- frame loss (closed forms, by hand)

P = 1e-4
LINE = FRAME_BITS * RATES["400G"].line_per_stream


def test_frame_loss_bypass_is_header_and_block_bits():
    # 62 header octets = 496 bits, ceil(33472 / 256) = 131 257b-block header bits
    assert frame_loss_probability("kp4", "bypass", P, 4096) == pytest.approx(1 - (1 - P) ** 627, rel=1e-12)
    assert frame_loss_probability("kp4", "unequal", P, 4096) == pytest.approx(1 - (1 - P) ** 627, rel=1e-12)


def test_frame_loss_ieee_and_detect_from_binomial():
    ps = 1 - (1 - P) ** 10
    pairs = LINE / (2 * 5440) + 1
    fer = stats.binom.sf(15, 544, ps)
    want = 1 - (1 - fer) ** (2 * pairs)
    assert frame_loss_probability("kp4", "ieee", P, 4096) == pytest.approx(want, rel=1e-6)
    assert frame_loss_probability("kp4", "llr", P, 4096) == pytest.approx(want, rel=1e-6)
    fer_d = 1 - (1 - ps) ** 544
    assert frame_loss_probability("kp4", "detect_only", P, 4096) == pytest.approx(1 - (1 - fer_d) ** (2 * pairs), rel=1e-9)
    fer7 = stats.binom.sf(7, 272, ps)  # rs272: t = 7, pairs of 2 x 2720 bits (same line bits per stream bit)
    want7 = 1 - (1 - fer7) ** (2 * (LINE / 5440 + 1))
    assert frame_loss_probability("rs272", "ieee", P, 4096) == pytest.approx(want7, rel=1e-6)
    # kr4: t = 7, n = 528; its line carries 528/544 of KP4's bits per stream bit
    fer_kr4 = stats.binom.sf(7, 528, ps)
    line_kr4 = LINE * 528 / 544
    want_kr4 = 1 - (1 - fer_kr4) ** (2 * (line_kr4 / 10560 + 1))
    assert frame_loss_probability("kr4", "ieee", P, 4096) == pytest.approx(want_kr4, rel=1e-6)


def test_frame_loss_without_fec_is_any_checked_bit():
    assert frame_loss_probability("none", "ieee", P, 4096) == pytest.approx(1 - (1 - P) ** (FRAME_BITS - 96), rel=1e-12)
    assert frame_loss_probability("kp4", "ieee", 0.0, 4096) == 0.0


def test_resend_cost_by_hand_transport_and_llr():
    c = Cluster(ranks=2, fec="bypass", ber=1e-5)
    r = collective_time("sendrecv", 4096, c)
    q = 1 - (1 - 1e-5) ** 627
    q_path = 1 - (1 - q) ** 2
    frame = FRAME_BITS / c.payload_gbps
    rtt = 2 * c.alpha_ns
    rec = rtt + 1 * frame  # one frame in the message: min(W, 1) = 1
    assert r.frame_loss == pytest.approx(q, rel=1e-12)
    assert r.resend_s == pytest.approx(q_path * rec / (1 - q_path) * 1e-9, rel=1e-9)
    # llr at a BER where KP4 fails often enough to count: one link round trip instead of the path's
    hi = Cluster(ranks=2, fec="ieee", ber=4e-4)
    t, l = collective_time("sendrecv", 1e6, hi), collective_time("sendrecv", 1e6, hi.with_(fec="llr"))
    assert t.frame_loss == l.frame_loss > 0
    assert l.recovery_ns < t.recovery_ns and 0 < l.resend_s < t.resend_s
    # protocol.latency's retry round trip with the cluster's 10 m: 2 (50 + 100 + 57.6) + 50 = 465.2 ns
    assert hi.llr_rtt_ns == pytest.approx(465.2)
    assert l.recovery_ns == pytest.approx(465.2 + min(math.ceil(465.2 / frame), 245) * frame, rel=1e-9)


def test_a_dropped_frame_is_never_free():
    for fec in ("bypass", "unequal", "detect_only", "ieee", "llr"):
        r = collective_time("allreduce", 25e6, Cluster(ranks=16, fec=fec, ber=3e-4))
        assert r.frame_loss > 0 and r.resend_s > 0, fec


@pytest.mark.parametrize("kw", [dict(ranks=0), dict(topology="torus"), dict(ber=0.6), dict(fec="kp4"),
                                dict(code="rs528"), dict(nic_ns=-1.0), dict(link_gbps=0.0), dict(path_links=0)])
def test_cluster_rejects_bad_fields(kw):
    with pytest.raises(ValueError):
        Cluster(**kw)


def test_bad_op_and_algo_and_trivial_cases():
    with pytest.raises(ValueError, match="unknown collective"):
        collective_time("gather", 1, Cluster())
    with pytest.raises(ValueError, match="not modelled"):
        collective_time("allgather", 1, Cluster(), "tree")
    assert collective_time("allreduce", 0, Cluster(ranks=8)).time_s == 0.0
    assert collective_time("allreduce", 1e6, Cluster(ranks=1)).time_s == 0.0


def test_header_fallback_turns_bypass_drops_into_one_fec_latency_per_step():
    c = Cluster(ranks=64, fec="bypass", ber=1e-5)
    drop = collective_time("allreduce", 25e6, c)
    fb = collective_time("allreduce", 25e6, c.with_(header_fallback=True))
    assert drop.resend_s > 0 and drop.fallback_s == 0.0
    ieee = collective_time("allreduce", 25e6, c.with_(fec="ieee"))
    assert fb.frame_loss == ieee.frame_loss and fb.resend_s < 1e-20  # only what the corrected path loses
    # every step has a header hit at 1e-5 (P_step = 1 - (1 - q_path)^(64 x 96) ~ 1): 126 x 57.6 ns
    assert fb.fallback_s == pytest.approx(126 * 57.6e-9, rel=1e-9)
    assert fb.time_s == pytest.approx(fb.bandwidth_s + fb.latency_s + fb.resend_s + fb.fallback_s, rel=1e-12)
    assert collective_time("allreduce", 25e6, c.with_(ber=0.0, header_fallback=True)).fallback_s == 0.0


def test_serialisation_matches_the_frame_layout_and_scales():
    from protocol.cluster.flat import _stream_bits, serialization_ns
    from protocol.framing import FramingConfig, layout

    f = FramingConfig()
    for n in (1, 50, 4095, 4096, 4097, 3 * 4096, 1_000_003):
        assert _stream_bits(n, f) == layout(n, f).stream_bits
    c = Cluster(**ZERO)
    assert serialization_ns(10**13, c) == pytest.approx(10**13 / 4096 * FRAME_BITS / 400.0, rel=1e-9)  # no arrays
