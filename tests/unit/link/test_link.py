"""Unit tests of the composed link (phy802.link): round trips, sparse vs dense PMA, lane accounting."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from phy802.channel import Noiseless, Pam4Awgn, SymbolErrors, lane_fault
from phy802.link import FastLink, Link, LinkConfig, LinkCounters, geometry
from phy802.pcs.distribution import lane_of_symbol, pair_gather_index
from phy802.pma import BitMux, gray_demap, gray_map


@dataclass(frozen=True)
class OneError:
    """Flips the Gray bit ``bit`` (0 = A, 1 = B) of the PAM4 symbol at ``pos`` of its lane."""

    pos: int
    bit: int

    def sample_symbol_errors(self, symbols, rng):
        s = np.asarray(symbols, np.uint8).reshape(-1)
        bits = gray_demap(s[self.pos:self.pos + 1])
        bits[self.bit] ^= 1
        v = gray_map(bits)
        return SymbolErrors(np.array([self.pos], np.int64), v.astype(np.uint8),
                            (v.astype(np.int16) - s[self.pos]).astype(np.int8))

    def apply(self, symbols, rng):
        s = np.array(symbols, np.uint8)
        e = self.sample_symbol_errors(s, rng)
        s.reshape(-1)[e.positions] = e.values
        return s


ZERO_CASES = [
    LinkConfig(),
    LinkConfig(n_lanes=4, precoding=True, precoder_init=2),
    LinkConfig(rate="200G", payload="frames", frame_bytes=300),
    LinkConfig(lane_order=((15, 0), (14, 1), (13, 2), (12, 3), (11, 4), (10, 5), (9, 6), (8, 7)), fec="detect_only"),
    LinkConfig(code="kr4", precoding=True),
    LinkConfig(code="rs272", fec="llr"),
    LinkConfig(code="rs272", fec="bypass", rate="200G", pad_position="first", pad_value=1023),
    LinkConfig(level="codeword", fec="bypass", rate="200G"),
]


@pytest.mark.parametrize("cfg", ZERO_CASES, ids=lambda c: f"{c.rate}-{c.code}-{c.fec}-{c.level}-{c.n_lanes}-{c.payload}")
def test_noiseless_round_trip_is_bit_exact(cfg):
    res = Link(cfg, Noiseless()).run(12, seed=3, batch_pairs=5)
    c = res.counters
    assert c.pairs == 12 and c.codewords == 24
    assert c.bit_errors == c.symbol_errors == c.codeword_errors == c.post_fec_bit_errors == 0
    assert c.hist[0] == 24 and c.hist.sum() == 24
    assert res.payload_errors.size == 0 and c.payload_bit_errors == 0
    assert c.uncorrected_codewords == c.corrected_codewords == 0
    if cfg.level == "pcs":
        assert c.payload_bits > 0
        if cfg.payload == "frames":
            assert c.frames > 0 and c.frames_ok == c.frames and c.fcs_errors == 0


@pytest.mark.parametrize("precoding", [False, True])
@pytest.mark.parametrize("level", ["pcs", "codeword"])
def test_sparse_path_equals_dense_pma_path(precoding, level):
    # the dense path runs every PMA stage through phy802.pma on full bit arrays: an independent oracle
    cfg = LinkConfig(precoding=precoding, precoder_init=1, level=level, n_lanes=4)
    ch = Pam4Awgn.from_ber(2e-3)
    a = Link(cfg, ch).run(6, seed=11, batch_pairs=3)
    b = Link(cfg, ch, pma="dense").run(6, seed=11, batch_pairs=3)
    da, db = a.counters.as_dict(), b.counters.as_dict()
    da.pop("seconds"), db.pop("seconds")
    assert da == db
    assert a.counters.bit_errors > 50  # the comparison saw real errors
    np.testing.assert_array_equal(a.payload_errors, b.payload_errors)


def test_same_seed_same_result_and_seeds_matter():
    cfg = LinkConfig(fec="bypass")
    ch = Pam4Awgn.from_ber(1e-3)
    a, b, c = (Link(cfg, ch).run(4, seed=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(a.payload_errors, b.payload_errors)
    assert not np.array_equal(a.payload_errors, c.payload_errors)


@pytest.mark.parametrize("bit", [0, 1])
@pytest.mark.parametrize("precoding", [False, True])
def test_single_error_is_charged_to_the_right_lanes(bit, precoding):
    order = ((3, 12), (0, 1), (2, 4), (5, 6), (7, 8), (9, 10), (11, 13), (14, 15))
    cfg = LinkConfig(lane_order=order, precoding=precoding)
    phys, pos = 0, 1234
    chans = [OneError(pos, bit) if i == phys else Noiseless() for i in range(8)]
    c = Link(cfg, chans).run(4, seed=1).counters
    expect_lane = order[phys][(2 * pos + bit) % 2]  # physical bit q = 2 pos + bit -> PCS lane order[i][q % r]
    one_hot = np.zeros(16, np.int64)
    one_hot[expect_lane] = 1
    assert c.lane_symbol_errors.tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    assert 1 <= c.corrected_codewords <= c.symbol_errors and c.codeword_errors == 0 and c.payload_bit_errors == 0
    assert (c.pcs_lane_corrected == c.pcs_lane_symbol_errors).all()  # the receiver's own per-lane counter agrees
    if not precoding:
        assert c.lane_bit_errors[0] == 1 == c.bit_errors
        assert (c.pcs_lane_bit_errors == one_hot).all()
        assert (c.pcs_lane_symbol_errors == one_hot).all() and c.corrected_codewords == 1
    else:
        # one line error e becomes data errors e at symbols pos and pos + 1; which Gray bit flips
        # depends on the data, but both symbols use PCS-lane bits 1234/1235 of the lanes muxed on
        # lane 0, i.e. symbol 123 of PCS lanes 3 and/or 12
        assert 2 <= c.bit_errors == c.lane_bit_errors[0] <= 4
        assert set(np.flatnonzero(c.pcs_lane_bit_errors)) <= set(order[phys])
        assert c.pcs_lane_symbol_errors.max() == 1 and c.pcs_lane_symbol_errors.sum() in (1, 2)


def test_lane_fault_shows_on_its_lanes_only():
    cfg = LinkConfig(lane_order=((0, 9), (1, 8), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14), (7, 15)))
    chans = lane_fault(8, 5, Pam4Awgn.from_ber(2e-3))
    for sim in (Link(cfg, chans), FastLink(cfg, chans)):
        c = sim.run(64, seed=2).counters
        assert np.flatnonzero(c.lane_symbol_errors).tolist() == [5]
        assert np.flatnonzero(c.pcs_lane_symbol_errors).tolist() == [5, 13]
        assert np.flatnonzero(c.pcs_lane_corrected).tolist() == [5, 13]
        # Gray map: 2 of the 3 one-level transitions flip B, so the B lane (13) sees ~2x the errors of A (5)
        assert c.pcs_lane_bit_errors[13] > 1.5 * c.pcs_lane_bit_errors[5]
        assert c.codeword_errors == 0


def test_generalised_interleave_follows_119_2_4_7():
    """The PCS tables for n = 544 / 528 / 272: t = h k + j, k even: lane 2j <- A_t, 2j+1 <- B_t,
    k odd swapped (written out here independently)."""
    for rate, L in (("400G", 16), ("200G", 8)):
        h = L // 2
        for n in (544, 528, 272):
            t = np.arange(n)
            k, j = t // h, t % h
            la, lb, sa, sb = lane_of_symbol(rate, n)
            np.testing.assert_array_equal(la, 2 * j + (k & 1))
            np.testing.assert_array_equal(lb, 2 * j + 1 - (k & 1))
            np.testing.assert_array_equal(sa, k)
            np.testing.assert_array_equal(sb, k)
            g = pair_gather_index(rate, n)
            assert g.shape == (L, n // h) and sorted(g.ravel()) == list(range(2 * n))
            assert all(g[la[x], sa[x]] == x and g[lb[x], sb[x]] == n + x for x in range(0, n, 7))
    g = geometry(LinkConfig(code="kr4"))
    assert g.K == 66 and g.n == 528 and sorted(g.gather.ravel()) == list(range(1056))
    g = geometry(LinkConfig(code="rs272"))
    assert g.K == 34 and g.n == 272 and g.line_symbols_per_pair == 34 * 5 * 2


def test_geometry_matches_bitmux():
    cfg = LinkConfig(n_lanes=4)
    g = geometry(cfg)
    mux = BitMux(16, 4)
    pcs_bits = np.zeros((16, 40), np.uint8)
    pcs_bits[6, 17] = 1
    q = np.flatnonzero(mux.mux(pcs_bits)[1])
    assert g.order[1, q[0] % g.r] == 6 and q[0] // g.r == 17


def test_fast_noiseless_and_counters_merge():
    f = FastLink(LinkConfig(), Noiseless()).run(100, seed=1)
    assert f.counters.codewords == 200 and f.counters.bit_errors == 0
    a = Link(LinkConfig(fec="bypass"), Pam4Awgn.from_ber(1e-3)).run(3, seed=1).counters
    b = a.copy().merge(a)
    assert b.codewords == 2 * a.codewords and b.bit_errors == 2 * a.bit_errors
    assert (b.pcs_lane_bit_errors == 2 * a.pcs_lane_bit_errors).all()
    assert LinkCounters.from_dict(a.as_dict()).as_dict() == a.as_dict()
    with pytest.raises(ValueError, match="geometries"):
        b.merge(LinkCounters.empty(528, 8, 16))


@pytest.mark.parametrize("kw, msg", [
    (dict(rate="100G"), "rate"),
    (dict(fec="rs"), "fec"),
    (dict(code="rs"), "code"),
    (dict(code="kr4", level="pcs"), "kr4"),
    (dict(fec="kp4"), "code='kp4', fec='ieee'"),
    (dict(fec="detect"), "code='kp4', fec='detect_only'"),
    (dict(fec="none"), "code='none'"),
    (dict(fec="kr4"), "code='kr4', fec='ieee'"),
    (dict(code="rs272", pad_value=1024), "pad_value"),
    (dict(code="rs272", pad_position="middle"), "pad_position"),
    (dict(code="rs272", pad_position="first", level="pcs"), "alignment markers"),
    (dict(n_lanes=3), "n_lanes"),
    (dict(lane_order=((0, 1),)), "lane_order"),
    (dict(precoder_init=4), "precoder_init"),
    (dict(payload="x"), "payload"),
])
def test_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        LinkConfig(**kw)


def test_run_argument_errors():
    link = Link(LinkConfig())
    with pytest.raises(ValueError, match="seed"):
        link.run(2, seed=None)
    with pytest.raises(ValueError, match="n_pairs"):
        link.run(0, seed=1)
    with pytest.raises(ValueError, match="one channel per physical lane"):
        Link(LinkConfig(), [Noiseless()] * 3)


@dataclass(frozen=True)
class MarkerKiller:
    """Flips the A bit of the first 60 PAM4 symbols of its lane: PCS-lane bits 0..59 of the first
    PCS lane muxed there, i.e. marker symbols 0..5 (the common symbols 0, 1, 4 among them)."""

    def sample_symbol_errors(self, symbols, rng):
        s = np.asarray(symbols, np.uint8).reshape(-1)
        bits = gray_demap(s[:60])
        bits[0::2] ^= 1
        v = gray_map(bits)
        return SymbolErrors(np.arange(60, dtype=np.int64), v, (v.astype(np.int16) - s[:60]).astype(np.int8))

    def apply(self, symbols, rng):  # pragma: no cover - the sparse path is used
        raise NotImplementedError


def test_unlockable_batch_is_dropped_and_counted():
    chans = [MarkerKiller()] + [Noiseless()] * 7
    c = Link(LinkConfig(), chans).run(6, seed=1, batch_pairs=3).counters
    assert c.lock_failures == 2 and c.codewords == 0 and c.bit_errors == 0 and c.line_symbols == 0


@dataclass(frozen=True)
class FlipBits:
    """Flips Gray bit ``bit`` of the PAM4 symbols at ``positions`` (a fixed error pattern)."""

    positions: tuple
    bit: int = 0

    def sample_symbol_errors(self, symbols, rng):
        s = np.asarray(symbols, np.uint8).reshape(-1)
        pos = np.asarray(self.positions, np.int64)
        bits = gray_demap(s[pos])
        bits[self.bit::2] ^= 1
        v = gray_map(bits)
        return SymbolErrors(pos, v, (v.astype(np.int16) - s[pos]).astype(np.int8))

    def apply(self, symbols, rng):  # pragma: no cover - the sparse path is used
        raise NotImplementedError


# lane 0 carries PCS lanes 0 (A bits) and 1 (B bits); PAM4 symbol j holds PCS-lane bit j.  PCS lane
# 0 slot k of pair p is codeword A for even k (119.2.4.7), so bit 0 of slots 68 + 2m (pair 1, m =
# 0..17) puts 18 symbol errors into codeword A of pair 1 (> t = 15), plus 3 in pair 2 (correctable)
HEAVY = tuple(10 * (68 + 2 * m) for m in range(18)) + tuple(10 * (136 + 2 * m) for m in range(3))


@pytest.mark.parametrize("code, fec", [("kp4", "ieee"), ("kr4", "ieee"), ("kp4", "detect_only"), ("kp4", "bypass"),
                                       ("none", "ieee"), ("kp4", "correct_no_indication"), ("kp4", "unequal"),
                                       ("kp4", "llr"), ("rs272", "ieee"), ("rs272", "detect_only")])
def test_all_simulators_agree_on_a_fixed_error_pattern(code, fec):
    chans = [FlipBits(HEAVY)] + [Noiseless()] * 7
    keys = ("lane_symbol_errors", "lane_bit_errors", "pcs_lane_bit_errors", "pcs_lane_symbol_errors",
            "pcs_lane_corrected", "hist", "bit_errors", "symbol_errors", "corrected_codewords",
            "uncorrected_codewords", "corrected_symbols", "miscorrected_codewords", "codeword_errors",
            "undetected_codeword_errors", "post_fec_symbol_errors", "post_fec_bit_errors", "codewords",
            "llr_retries", "message_bits")
    P = 8 if code == "rs272" else 4  # rs272 pairs are half as long: the pattern needs 8
    runs = [FastLink(LinkConfig(code=code, fec=fec), chans).run(P, seed=1, batch_pairs=P).counters,
            Link(LinkConfig(code=code, fec=fec, level="codeword"), chans).run(P, seed=2, batch_pairs=P).counters]
    if code != "kr4":  # kr4 has no Clause 119 framing; rs272 runs its own PCS framing too
        runs.append(Link(LinkConfig(code=code, fec=fec), chans).run(P, seed=3, batch_pairs=P).counters)
    ref = runs[0].as_dict()
    for c in runs[1:]:
        d = c.as_dict()
        assert {k: d[k] for k in keys} == {k: ref[k] for k in keys}
    c = runs[0]
    if code in ("kr4", "rs272"):  # other geometry (66 / 34 slots per lane and pair): only agreement
        assert c.k == (257 if code == "rs272" else 514) and c.message_bits == 2 * P * c.k * 10
        assert c.symbol_errors == 21 and c.codeword_errors >= 1
        return
    assert c.symbol_errors == 21
    assert c.hist[18] == 1 and c.hist[3] == 1
    # (uncorrected = flagged, codeword errors = wrong delivered message, of which not flagged)
    expect = {"ieee": (1, 1, 0), "detect_only": (2, 2, 0), "bypass": (0, 2, 2), "unequal": (0, 2, 2),
              "correct_no_indication": (1, 1, 0), "llr": (1, 1, 0)}
    expect = (0, 2, 2) if code == "none" else expect[fec]
    assert (c.uncorrected_codewords, c.codeword_errors, c.undetected_codeword_errors) == expect
    assert c.llr_retries == (1 if fec == "llr" else 0)  # one pair with a flagged codeword
    if code == "kp4" and fec in ("ieee", "llr", "correct_no_indication"):
        assert c.corrected_codewords == 1 and c.corrected_symbols == 3 and c.post_fec_bit_errors == 18


def test_rs272_frames_payload_sends_the_pairs_asked_for():
    """Whole frames can leave more than one 20-block rs272 pair empty: the link idles up to P pairs
    (at least one frame is sent, so a single pair rounds up: a 1514-octet frame spans 3 pairs)."""
    for P in (1, 7, 64):
        c = Link(LinkConfig(code="rs272", fec="llr", payload="frames")).run(P, seed=2, batch_pairs=P).counters
        assert c.pairs == max(P, 3) and c.frames > 0 and c.frames_ok == c.frames and c.llr_retries == 0
