"""Modes, framing, latency, delivery and the CLIs of the protocol layer."""

import json
from fractions import Fraction

import numpy as np
import pytest

from phy802.cli import main
from protocol import framing as F
from protocol.delivery import RetransmitConfig, deliver
from protocol.latency import LatencyConfig, added_latency, latency_table
from protocol.modes import MODE_NAMES, ClassPolicy, get_mode, protected_bit_mask
from protocol.source import ErrorChunk


# --- modes -----------------------------------------------------------------------------------
def test_modes_and_aliases():
    for old, new in (("kp4", "code 'kp4' with mode 'ieee'"), ("none", "code 'none'"), ("detect", "mode 'detect_only'")):
        with pytest.raises(ValueError, match=new):
            get_mode(old)
    assert get_mode("detect-only").decoder == "detect" and get_mode("detect_only").indicate
    llr = get_mode("llr")
    assert llr.decoder == "correct" and llr.indicate and not llr.tolerant and llr.retry == "link"
    assert {get_mode(m).retry for m in MODE_NAMES if m != "llr"} == {"transport"}
    assert not get_mode("bypass").indicate and get_mode("bypass").tolerant
    assert not get_mode("ieee").tolerant
    with pytest.raises(ValueError, match="unknown FEC mode 'x'"):
        get_mode("x")
    with pytest.raises(ValueError, match="control"):
        ClassPolicy(control="bypass")
    p = ClassPolicy.uniform("bypass")
    assert p.mode_of("gradients").name == "bypass" and p.mode_of("control").name == "ieee"


@pytest.mark.parametrize("fmt,dtype", [("float32", np.float32), ("float16", np.float16), ("float64", np.float64)])
def test_protected_bits_are_sign_and_exponent(fmt, dtype):
    """Flip each element bit of 1.5 (little-endian octets, LSB first): the mask marks exactly
    the bits that change the sign or the exponent."""
    mask = protected_bit_mask(fmt)
    x = np.array([1.5], dtype)
    nbits = mask.size
    u = x.view(f"u{nbits // 8}")
    for j in range(nbits):
        y = (u ^ (np.array([1], u.dtype) << j)).view(dtype)[0]
        changed = (np.signbit(y) != np.signbit(x[0])) or (np.frexp(y)[1] != np.frexp(x[0])[1])
        assert bool(mask[j]) == bool(changed), j


def test_bfloat16_mask():
    m = protected_bit_mask("bfloat16")
    assert m.tolist() == [False] * 7 + [True] * 9


# --- framing ---------------------------------------------------------------------------------
def test_rate_geometry():
    g4, g2 = F.get_rate("400G"), F.get_rate("200g")
    assert g4.pair_ns == pytest.approx(25.6) and g2.pair_ns == pytest.approx(51.2)
    assert (g4.rows_per_pair, g2.rows_per_pair) == (68, 136)
    # 425/400 = (257/256)(544/514) exactly; the AM group adds 8 blocks per 163840
    r = Fraction(10880 * 4096, 256 * (40 * 4096 - 8))
    assert r == Fraction(257, 256) * Fraction(544, 514) * Fraction(163840, 163832)
    assert g4.line_per_stream == pytest.approx(float(r), rel=1e-15)
    assert F.line_bits_of_stream(256 * (40 * 4096 - 8), g4) == 10880 * 4096


def test_block_pair_maps_are_inverse():
    g = F.get_rate("400G")
    P = np.arange(0, 3 * 4096 + 7)
    first = F.data_blocks_before(P, g)
    assert first[1] == 32 and first[4097] - first[4096] == 32 and first[2] - first[1] == 40
    assert np.array_equal(F.pair_of_data_block(first, g), P)
    last = F.data_blocks_before(P + 1, g) - 1
    assert np.array_equal(F.pair_of_data_block(last, g), P)


def test_layout():
    cfg = F.FramingConfig()
    L = F.layout(10_000, cfg)
    assert L.n_frames == 3 and L.payload_len.tolist() == [32768, 32768, 14464]
    assert L.payload_start[0] == 8 * (8 + 14 + 20 + 8 + 12)
    # frame slot: 8 + 14 + 20 + 8 + 12 + 4096 + 4 + 4 + 12 = 4178 -> 4184 (8-octet aligned)
    assert L.frame_end[0] == 8 * 4184 and L.stream_bits == F.stream_bits(80_000)
    fr, pb = L.payload_bit_of(np.array([0, int(L.payload_start[1]) + 5, int(L.stream_bits) - 1]))
    assert fr.tolist() == [0, 1, 2] and pb.tolist() == [-1, 32768 + 5, -1]
    tiny = F.layout(1, cfg)  # padded to the 64-octet minimum frame
    assert tiny.stream_bits == 8 * 88
    assert F.layout(0).stream_bits == 0
    assert F.line_bits(80_000) == F.line_bits_of_stream(L.stream_bits)
    with pytest.raises(ValueError, match="eth_mtu"):
        F.FramingConfig(rdma_mtu=4096, eth_mtu=1500)
    with pytest.raises(ValueError, match="payload_octets"):
        F.layout(-1)


def test_link_layer_modes_agree_with_the_protocol_modes():
    """phy802.link cannot import protocol: its own table of the six modes must agree."""
    from phy802.link import FEC_MODES, LinkConfig

    assert FEC_MODES == MODE_NAMES
    for m in MODE_NAMES:
        cfg, mode = LinkConfig(code="kp4", fec=m), get_mode(m)
        assert (cfg.decoder or "none") == mode.decoder and cfg.indicate == mode.indicate, m


# --- latency ---------------------------------------------------------------------------------
def test_latency_model():
    ieee = added_latency("ieee", "400G")
    assert ieee.accumulation_ns == pytest.approx(25.6)
    assert added_latency("ieee", "200G").accumulation_ns == pytest.approx(51.2)
    assert ieee.total_ns == pytest.approx(25.6 + 32.0)
    order = [added_latency(m, "400G").total_ns for m in ("bypass", "unequal", "detect_only", "correct_no_indication", "ieee")]
    assert order == sorted(order) and order[0] == 0.0
    fast = LatencyConfig(clock_ghz=2.0)
    assert added_latency("ieee", "400G", fast).decoder_ns == pytest.approx(16.0)
    assert len(latency_table()) == 2 * len(MODE_NAMES)
    assert len(latency_table(codes=("kp4", "kr4", "rs272"))) == 2 * 3 * len(MODE_NAMES)
    with pytest.raises(ValueError, match="clock_ghz"):
        LatencyConfig(clock_ghz=0)


# --- delivery --------------------------------------------------------------------------------
class FixedSource:
    """Returns scripted windows (offsets and marks), then clean windows."""

    def __init__(self, windows):
        self.windows = list(windows)
        self.asked = []

    def take_chunk(self, n):
        self.asked.append(n)
        off, marks = self.windows.pop(0) if self.windows else ([], [])
        off = np.asarray(off, np.int64)
        return ErrorChunk(n, off, np.zeros(off.size, np.int8), np.zeros(off.size, np.uint8),
                          np.asarray(marks, np.int64).reshape(-1, 2))

    def take(self, n):
        return self.take_chunk(n).offsets


def test_delivery_fates():
    L = F.layout(10_000)
    p0, p1 = int(L.payload_start[0]), int(L.payload_start[1])
    # payload flip in frame 0, header flip in frame 1 -> bypass delivers the first, resends frame 1
    src = FixedSource([([p0 + 3, p1 - 5], [])])
    d = deliver(10_000, src, "bypass")
    assert d.payload_flips.tolist() == [3] and d.frames_resent == 1 and d.frames_lost == 0
    assert src.asked == [L.stream_bits, int(L.frame_end[1] - L.frame_start[1])]
    assert d.retransmit_ns == RetransmitConfig().rtt_ns
    # ieee is not tolerant: the payload flip drops frame 0 too
    d = deliver(10_000, FixedSource([([p0 + 3, p1 - 5], [])]), "ieee")
    assert d.payload_flips.size == 0 and d.frames_resent == 2
    # a mark over frame 2 drops it; an IPG flip is ignored
    ipg = int(L.frame_end[0]) - 10
    d = deliver(10_000, FixedSource([([ipg], [[int(L.payload_start[2]) + 100, int(L.payload_start[2]) + 356]])]), "bypass")
    assert d.frames_resent == 1 and d.payload_flips.size == 0
    # unequal: exponent bit 30 of element 0 removed, mantissa bit 3 kept
    d = deliver(10_000, FixedSource([([p0 + 3, p0 + 30], [])]), "unequal", float_format="float32")
    assert d.payload_flips.tolist() == [3] and d.protected_removed == 1
    # a frame that keeps failing is lost after max_attempts
    bad = [([p0 + 1], [])] + [([int(L.payload_start[0] - L.frame_start[0]) - 1], [])] * 10
    d = deliver(10_000, FixedSource(bad), "ieee", retransmit=RetransmitConfig(max_attempts=3))
    assert d.frames_lost == 1 and d.lost_ranges.tolist() == [[0, 32768]] and d.frames_resent == 2


def test_llr_resends_at_link_level():
    L = F.layout(10_000)
    p0 = int(L.payload_start[0])
    d = deliver(10_000, FixedSource([([p0 + 3], [])]), "llr")  # not tolerant: frame 0 dropped, resent
    assert d.payload_flips.size == 0 and d.frames_resent == 1
    assert d.retransmit_ns == pytest.approx(465.2)  # one link round trip (latency model default)
    d = deliver(10_000, FixedSource([([p0 + 3], [])]), "llr", code="rs272")
    assert d.retransmit_ns == pytest.approx(added_latency("llr", code="rs272").retry_ns)
    d = deliver(10_000, FixedSource([([p0 + 3], [])]), "llr", retransmit=RetransmitConfig(link_rtt_ns=100.0))
    assert d.retransmit_ns == 100.0
    d = deliver(10_000, FixedSource([([p0 + 3], [])]), "ieee")
    assert d.retransmit_ns == 2000.0  # the transport's round trip
    kr4 = deliver(10_000, FixedSource([]), "ieee", code="kr4")
    assert kr4.line_bits < deliver(10_000, FixedSource([]), "ieee").line_bits
    with pytest.raises(ValueError, match="link_rtt_ns"):
        RetransmitConfig(link_rtt_ns=-1.0)


def test_delivery_with_plain_take_source():
    from protocol.trace import LiveSource

    d = deliver(1 << 20, LiveSource("400G", "ieee", 1e-5, seed=1), "ieee")
    assert d.frames == 256 and d.payload_flips.size == 0 and d.line_bits > d.stream_bits
    # rs272 errors through the same delivery (llr: failed frames cost a link round trip each)
    src = LiveSource("400G", "llr", 1.5e-3, seed=2, code="rs272")
    d = deliver(1 << 20, src, "llr", code="rs272")
    assert d.frames_resent > 0 and d.payload_flips.size == 0
    rounds = d.retransmit_ns / added_latency("llr", code="rs272").retry_ns  # whole link round trips
    assert rounds >= 1 and rounds == pytest.approx(round(rounds))


@pytest.mark.parametrize("code, rate, mode, acc, dec", [
    # accumulation = 2 n 10 / (line rate of the code); decoder = 3 + ceil(20 t/15) + ceil(8 n/544) + 1
    ("kp4", "400G", "ieee", 10880 / 425, 3 + 20 + 8 + 1),
    ("kr4", "400G", "ieee", 10560 / 412.5, 3 + 10 + 8 + 1),            # 412.5 = 425 x 528/544
    ("rs272", "400G", "ieee", 5440 / 425, 3 + 10 + 4 + 1),
    ("rs272", "200G", "ieee", 5440 / 212.5, 3 + 10 + 4 + 1),
    ("rs272", "400G", "correct_no_indication", 12.8, 3 + 10 + 1),
    ("rs272", "400G", "detect_only", 12.8, 3 + 1),
    ("kr4", "400G", "llr", 25.6, 22),
    ("kp4", "400G", "unequal", 257 / 425, 4),
    ("none", "400G", "ieee", 0.0, 0.0),
    ("none", "400G", "unequal", 257 / 425, 4),
])
def test_latency_per_code_by_hand(code, rate, mode, acc, dec):
    b = added_latency(mode, rate, code=code)
    assert b.code == code and b.mode == mode and b.rate == rate
    assert b.accumulation_ns == pytest.approx(acc, rel=1e-12)
    assert b.decoder_ns == pytest.approx(dec, rel=1e-12)
    assert b.total_ns == pytest.approx(acc + dec, rel=1e-12)


def test_latency_ordering_of_the_alternatives_and_the_llr_round_trip():
    order = [added_latency("bypass").total_ns, added_latency("unequal").total_ns,
             added_latency("ieee", code="rs272").total_ns, added_latency("ieee", code="kr4").total_ns,
             added_latency("ieee", code="kp4").total_ns]
    assert order == sorted(order) and order[0] == 0.0 and len(set(order)) == 5
    for rate in ("400G", "200G"):  # and for every mode that decodes, rs272 <= kr4 <= kp4
        for m in ("ieee", "correct_no_indication", "detect_only", "llr"):
            t = [added_latency(m, rate, code=c).total_ns for c in ("rs272", "kr4", "kp4")]
            assert t == sorted(t), (rate, m, t)
    llr = added_latency("llr")
    assert llr.total_ns == added_latency("ieee").total_ns  # a good frame pays nothing more
    assert llr.retry_ns == pytest.approx(2 * (10 * 5.0 + 100.0 + 57.6) + 50.0)  # 465.2 ns
    assert added_latency("ieee").retry_ns == 0.0
    far = LatencyConfig(llr_fiber_m=100.0, llr_phy_ns=0.0, llr_replay_ns=0.0)
    assert added_latency("llr", cfg=far, code="rs272").retry_ns == pytest.approx(2 * (500.0 + 30.8))
    flat = LatencyConfig(scale_with_code=False)
    assert added_latency("ieee", cfg=flat, code="rs272").total_ns == pytest.approx(12.8 + 32.0)
    with pytest.raises(ValueError, match="llr_fiber_m"):
        LatencyConfig(llr_fiber_m=-1.0)
    with pytest.raises(ValueError, match="unknown code"):
        added_latency("ieee", code="kp5")


def test_framing_per_code():
    assert F.get_code("rs272").line_gbps("400G") == 425.0 and F.get_code("kr4").line_gbps("400G") == 412.5
    assert F.get_code("rs272").am_period_pairs("400G") == 8192 and F.get_code("rs272").t == 7
    # rs272 keeps KP4's 544/514 overhead: the same line bits per stream bit
    assert F.get_code("rs272").line_per_stream("400G") == pytest.approx(F.RATES["400G"].line_per_stream, rel=1e-15)
    n = 10**7
    assert F.line_bits_of_stream(n, "400G", "rs272") == F.line_bits_of_stream(n, "400G")
    assert F.line_bits_of_stream(n, "400G", "kr4") < F.line_bits_of_stream(n, "400G")
    assert F.line_time_ns(n, "400G", "kr4") == pytest.approx(F.line_time_ns(n, "400G"), rel=1e-6)


# --- CLIs ------------------------------------------------------------------------------------
def test_cli_latency_and_trace(tmp_path, capsys):
    assert main(["latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {(r["rate"], r["code"], r["mode"]) for r in rows} == {
        (r, c, m) for r in ("400G", "200G") for c in ("kp4", "kr4", "rs272") for m in MODE_NAMES}
    assert main(["latency", "--rate", "400G"]) == 0
    text = capsys.readouterr().out
    assert "25.60" in text and "rs272" in text and "465.2" in text
    assert main(["latency", "--rate", "400G", "--code", "rs272", "--fec", "ieee,llr", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["code"], r["mode"], round(r["total_ns"], 6)) for r in rows] == [("rs272", "ieee", 30.8), ("rs272", "llr", 30.8)]
    with pytest.raises(SystemExit) as e:
        main(["latency", "--fec", "kp4"])
    assert e.value.code == 2 and "--fec kp4 is now --code kp4 --fec ieee" in capsys.readouterr().err
    out = tmp_path / "t.trace"
    assert main(["trace", "generate", "--rate", "200G", "--fec", "ieee", "--ber", "2e-3", "--bits", "5e6",
                 "--seed", "3", "--out", str(out), "--no-progress", "--json"]) == 0
    gen = json.loads(capsys.readouterr().out)
    assert gen["fec"] == "ieee" and gen["rate"] == "200G" and gen["codewords"]["corrected"] > 0
    assert main(["trace", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stream_bits"] == gen["stream_bits"] and info["pre_fec"] == gen["pre_fec"]
    assert main(["trace", "info", str(out)]) == 0
    assert "pre-FEC" in capsys.readouterr().out
    assert main(["trace", "info", str(tmp_path / "nope.npz")]) == 2
    assert "nope.npz" in capsys.readouterr().err
    ll = tmp_path / "ll.trace"
    assert main(["trace", "generate", "--code", "rs272", "--fec", "llr", "--ber", "2e-3", "--bits", "5e6",
                 "--out", str(ll), "--no-progress", "--json"]) == 0
    gen = json.loads(capsys.readouterr().out)
    assert gen["code"] == "rs272" and gen["fec"] == "llr" and gen["codewords"]["total"] == 4 * gen["pairs"]
    assert main(["trace", "generate", "--code", "kr4", "--out", str(tmp_path / "k.trace"), "--no-progress"]) == 2
    assert "kr4" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["trace", "generate", "--fec", "kp4", "--out", str(tmp_path / "k.trace")])
    assert e.value.code == 2 and "--fec kp4 is now --code kp4 --fec ieee" in capsys.readouterr().err
