"""Fast generator vs the bit-exact reference link, error multiplication, FEC decisions."""

import numpy as np
import pytest

from protocol.framing import PAIR_LINE_BITS, data_blocks_before, get_rate
from protocol.source import FLAG_MISCORRECTED
from protocol.trace._base import merge_ranges
from protocol.trace.bitexact import BitExactGenerator
from protocol.trace.config import GeneratorConfig, lane_of_symbol
from protocol.trace.fast import FastGenerator

MODES = ["bypass", "ieee", "detect_only", "correct_no_indication"]


def _pos(P0, n_pairs, ber, rng):
    nb = n_pairs * PAIR_LINE_BITS
    k = rng.binomial(nb, ber)
    return np.sort(rng.choice(nb, size=k, replace=False)).astype(np.int64) + P0 * PAIR_LINE_BITS


def _same(a, b):
    assert (a.pair_start, a.pair_end, a.stream_start, a.stream_end) == (b.pair_start, b.pair_end, b.stream_start, b.stream_end)
    for f in ("offsets", "lanes", "flags", "marks"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape, f
        assert np.array_equal(x, y), f


@pytest.mark.parametrize("rate", ["400G", "200G"])
@pytest.mark.parametrize("fec", MODES)
def test_fast_equals_bit_exact_on_the_same_line_errors(rate, fec):
    """Same line error pattern -> identical payload flips, lanes, flags, marks and counters.

    Starts a few pairs before an AM group and spans it, over several chunks (descrambler
    copies crossing chunk ends), at BERs that exercise corrected, failed and detected codewords.
    """
    g = get_rate(rate)
    P = g.am_period_pairs - 3
    fast = FastGenerator(GeneratorConfig(rate, fec, 0.0), 1, start_pair=P)
    exact = BitExactGenerator(GeneratorConfig(rate, fec, 0.0), 2, start_pair=P)
    rng = np.random.default_rng(11)
    for n_pairs, ber in [(2, 3e-3), (4, 8e-3), (3, 5e-4), (5, 4e-3)]:
        pos = _pos(P, n_pairs, ber, rng)
        _same(fast._process(P, P + n_pairs, pos), exact.next_chunk(n_pairs, line_errors=pos))
        P += n_pairs
    a, b = fast.stats.as_dict(), exact.stats.as_dict()
    assert a == b or {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}
    if fec in ("ieee", "correct_no_indication"):
        assert fast.stats.uncorrectable_codewords > 0  # the heavy path was exercised
        assert fast.stats.corrected_codewords > 0


def test_lane_map_matches_notes_and_pcs():
    lanes = lane_of_symbol("400G")
    # notes 4.4: lane 0 = A0, B8, A16, B24 ...; lane 1 = B0, A8, B16 ...
    assert [lanes[0, 0], lanes[1, 8], lanes[0, 16], lanes[1, 24]] == [0, 0, 0, 0]
    assert [lanes[1, 0], lanes[0, 8], lanes[1, 16]] == [1, 1, 1]
    for rate in ("400G", "200G"):
        L = lane_of_symbol(rate)
        n = get_rate(rate).n_lanes
        assert np.all(np.bincount(L.ravel(), minlength=n) == 2 * 544 // n)
    import phy802.pcs as pcs
    for rate in ("400G", "200G"):
        la, lb, sa, sb = pcs.lane_of_symbol(rate)
        L = lane_of_symbol(rate)
        assert np.array_equal(la, L[0]) and np.array_equal(lb, L[1])
        J = get_rate(rate).n_lanes // 2
        assert np.array_equal(sa, np.arange(544) // J) and np.array_equal(sb, np.arange(544) // J)


def test_single_line_error_becomes_three_payload_flips():
    """One message-bit error in bypass -> payload bits n, n+39, n+58 (49.2.6), same lane."""
    gen = FastGenerator(GeneratorConfig("400G", "bypass", 0.0), 1, start_pair=1)
    u = 20 * 100 + 10 * 1 + 3  # symbol t=100 of codeword B, bit 3; pair 1 has no AM
    ch = gen._process(1, 2, np.array([PAIR_LINE_BITS + u], np.int64))
    s = data_blocks_before(1, get_rate("400G")) * 257 + u
    want = [(v // 257) * 256 + v % 257 - 1 for v in (s, s + 39, s + 58)]
    assert ch.offsets.tolist() == want
    lane = lane_of_symbol("400G")[1, 100]
    assert ch.lanes.tolist() == [lane] * 3
    assert ch.marks.size == 0


def test_parity_and_header_errors():
    gen = FastGenerator(GeneratorConfig("400G", "bypass", 0.0), 1, start_pair=1)
    # a parity bit (t >= 514) never reaches the payload
    ch = gen._process(1, 2, np.array([PAIR_LINE_BITS + 20 * 520 + 4], np.int64))
    assert ch.offsets.size == 0 and ch.marks.size == 0
    # the header bit of data block 0 of pair 1 (u = 0): a mark of that block, plus its copies
    ch = gen._process(2, 3, np.array([2 * PAIR_LINE_BITS], np.int64))
    blk = data_blocks_before(2, get_rate("400G"))
    assert ch.marks.tolist() == [[blk * 256, blk * 256 + 256]]
    assert ch.offsets.tolist() == [blk * 256 + 38, blk * 256 + 57]


def _symbol_errors(P, c, ts, b=0):
    return np.sort(np.array([P * PAIR_LINE_BITS + 20 * t + 10 * c + b for t in ts], np.int64))


def test_kp4_corrects_up_to_t_and_marks_failures():
    gen = FastGenerator(GeneratorConfig("400G", "ieee", 0.0), 1, start_pair=5)
    ch = gen._process(5, 6, _symbol_errors(5, 0, range(0, 450, 30)))  # 15 symbols: corrected
    assert ch.offsets.size == 0 and ch.marks.size == 0
    assert gen.stats.corrected_codewords == 1
    ch = gen._process(6, 7, _symbol_errors(6, 1, range(0, 480, 30)))  # 16 symbols: fails
    g = get_rate("400G")
    assert ch.marks.tolist() == [[data_blocks_before(6, g) * 256, data_blocks_before(7, g) * 256]]
    assert ch.offsets.size == 3 * 16
    assert gen.stats.uncorrectable_codewords == 1
    # the same failure without indication: flips delivered, nothing marked
    gen2 = FastGenerator(GeneratorConfig("400G", "correct_no_indication", 0.0), 1, start_pair=6)
    ch2 = gen2._process(6, 7, _symbol_errors(6, 1, range(0, 480, 30)))
    assert ch2.marks.size == 0 and np.array_equal(ch2.offsets, ch.offsets)


def test_miscorrection_is_flagged():
    """A codeword-plus-pattern landing within t of another codeword decodes to it: flag it."""
    from phy802.fec.rs import KP4, encode

    rng = np.random.default_rng(3)
    c = encode(KP4, rng.integers(0, 1024, size=(1, 514)))[0]
    # received error e = c (a nonzero codeword, weight ~544) minus 3 of its symbols: weight > t,
    # distance 3 from codeword c -> the decoder "corrects" to c: a miscorrection
    e = c.copy()
    e[[5, 77, 300]] = 0
    t = np.nonzero(e)[0]
    pos = []
    for ti in t:
        for b in range(10):
            if (int(e[ti]) >> b) & 1:
                pos.append(20 * ti + b)
    gen = FastGenerator(GeneratorConfig("400G", "ieee", 0.0), 1, start_pair=1)
    ch = gen._process(1, 2, np.sort(np.array(pos, np.int64)) + PAIR_LINE_BITS)
    assert gen.stats.miscorrected_codewords == 1 and gen.stats.uncorrectable_codewords == 0
    assert ch.marks.size == 0 or ch.marks.shape[0] < 40  # only header hits, no decoder mark
    assert np.all(ch.flags == FLAG_MISCORRECTED) and ch.offsets.size > 0


def test_detect_only_marks_every_errored_pair():
    gen = FastGenerator(GeneratorConfig("400G", "detect_only", 0.0), 1, start_pair=1)
    ch = gen._process(1, 4, np.array([PAIR_LINE_BITS + 20 * 520, 3 * PAIR_LINE_BITS + 5000], np.int64))
    g = get_rate("400G")
    # pair 1: only a parity error, still a nonzero syndrome -> marked; pair 2 clean; pair 3 marked
    assert ch.marks.tolist() == [
        [data_blocks_before(1, g) * 256, data_blocks_before(2, g) * 256],
        [data_blocks_before(3, g) * 256, data_blocks_before(4, g) * 256],
    ]


@pytest.mark.parametrize("fec,pb,w", [("bypass", None, None), ("ieee", None, None), ("bypass", 0.5, None),
                                      ("ieee", None, "pam4_gray"), ("bypass", 0.3, "pam4_gray")])
def test_chunking_does_not_change_the_output(fec, pb, w):
    cfg = GeneratorConfig("400G", fec, 4e-3, burst_pb=pb, lane_weights=w)
    a = FastGenerator(cfg, 9)
    one = a.next_chunk(300)
    b = FastGenerator(cfg, 9)
    parts = [b.next_chunk(n) for n in (7, 100, 193)]
    for f in ("offsets", "lanes", "flags"):
        assert np.array_equal(getattr(one, f), np.concatenate([getattr(p, f) for p in parts]))
    assert np.array_equal(merge_ranges(one.marks), merge_ranges(np.concatenate([p.marks for p in parts])))
    assert a.stats.as_dict() == b.stats.as_dict()


def test_error_free_and_bad_config():
    gen = FastGenerator(GeneratorConfig("200G", "bypass", 0.0), 1)
    ch = gen.next_chunk(5000)
    assert ch.offsets.size == 0 and gen.stats.line_bits == 5000 * PAIR_LINE_BITS
    with pytest.raises(ValueError, match="ber"):
        GeneratorConfig("400G", "bypass", 0.7)
    with pytest.raises(ValueError, match="rate"):
        GeneratorConfig("100G", "bypass", 1e-5)
    with pytest.raises(ValueError, match="FEC mode"):
        GeneratorConfig("400G", "turbo", 1e-5)
    with pytest.raises(ValueError, match="n_pairs"):
        gen.next_chunk(0)
    with pytest.raises(ValueError, match="seed"):
        FastGenerator(GeneratorConfig(), None)
    with pytest.raises(ValueError, match="burst_pb"):
        GeneratorConfig(burst_pb=1.0)
    with pytest.raises(ValueError, match="16 non-negative weights"):
        GeneratorConfig(lane_weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="preset"):
        GeneratorConfig(lane_weights="pam8")
    w = GeneratorConfig("200G", lane_weights=(1, 3) * 4).lane_weights
    assert w == (0.5, 1.5) * 4
    # a lane with weight 0 never errs
    gen = FastGenerator(GeneratorConfig("400G", "bypass", 1e-2, lane_weights=(0,) + (1,) * 15), 3)
    gen.next_chunk(50)
    assert gen.stats.lane_errors[0] == 0 and gen.stats.lane_errors[1:].min() > 0


def test_merge_ranges():
    r = merge_ranges(np.array([[5, 9], [0, 3], [3, 4], [8, 12], [20, 21]]))
    assert r.tolist() == [[0, 4], [5, 12], [20, 21]]


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_fused_bypass_kernel_equals_general_path(rate):
    """The fused bypass kernel and sample -> group -> expand give identical chunks and counters,
    across AM groups and chunk ends, at a BER high enough for interacting descrambler copies."""
    cfg = GeneratorConfig(rate, "bypass", 2e-2)
    a, b = FastGenerator(cfg, 7), FastGenerator(cfg, 7)
    b.fused = False
    for n in (5, 2050, 37, 1, 60):
        _same(a.next_chunk(n), b.next_chunk(n))
    assert a.stats.as_dict() == b.stats.as_dict()


def test_fused_bypass_kernel_equals_general_path_at_low_ber():
    """The same at BER 1e-4 (isolated primaries: the kernel's straight path, clean and
    block-straddling descrambler copies, header hits) over ~5e3 AM periods."""
    cfg = GeneratorConfig("400G", "bypass", 1e-4)
    a, b = FastGenerator(cfg, 5), FastGenerator(cfg, 5)
    b.fused = False
    for n in (30_000, 1, 70_001, 4097):
        _same(a.next_chunk(n), b.next_chunk(n))
    assert a.stats.as_dict() == b.stats.as_dict()


@pytest.mark.parametrize("rate,ber,steps", [("400G", 1e-4, (30_000, 7, 20_000)), ("400G", 5e-3, (50, 1, 300)),
                                            ("200G", 2e-3, (300, 33, 1000)), ("400G", 2e-2, (5, 60, 2))])
def test_encoded_chunks_equal_encode_chunk_of_the_raw_chunks(rate, ber, steps):
    """``next_encoded`` (the fused kernel writing trace records, with its staging and lane
    shortcut) gives the bytes ``encode_chunk`` gives for ``next_chunk``'s arrays, the same counts
    and counters, chunk after chunk (descrambler copies carried across chunk ends)."""
    from protocol.trace import encode_chunk

    cfg = GeneratorConfig(rate, "bypass", ber)
    a, b = FastGenerator(cfg, 9), FastGenerator(cfg, 9)
    for n in steps * 2:
        ca, eb = a.next_chunk(n), b.next_encoded(n)
        assert (eb.pair_start, eb.pair_end, eb.stream_start, eb.stream_end) == \
            (ca.pair_start, ca.pair_end, ca.stream_start, ca.stream_end)
        assert (eb.n_flips, eb.n_marks) == (ca.offsets.size, ca.marks.shape[0])
        ref = encode_chunk(ca.stream_start, ca.stream_end, ca.offsets, ca.lanes, ca.flags, ca.marks,
                           n_lanes=a.geom.n_lanes)
        assert eb.blob.tobytes() == ref.tobytes()
    assert a.stats.as_dict() == b.stats.as_dict()
    # the other modes encode next_chunk's arrays (no fused kernel)
    c, d = FastGenerator(GeneratorConfig(rate, "ieee", ber), 2), FastGenerator(GeneratorConfig(rate, "ieee", ber), 2)
    cc, ed = c.next_chunk(steps[0]), d.next_encoded(steps[0])
    assert ed.blob.tobytes() == encode_chunk(cc.stream_start, cc.stream_end, cc.offsets, cc.lanes, cc.flags, cc.marks,
                                             n_lanes=c.geom.n_lanes).tobytes()


def test_reference_scrambler_matches_the_pcs_and_multiplies_errors_by_three():
    """The bit-exact link's scrambler equals phy802.pcs's (49.2.6, all 257 bits of each block),
    and one flipped scrambled bit descrambles to flips at n, n+39, n+58."""
    from protocol.trace import _gen_kernels as K

    rng = np.random.default_rng(1)
    n = 257 * 40
    bits = rng.integers(0, 2, n, dtype=np.uint8)
    s = K.scramble_bits(bits, np.zeros(58, np.uint8))
    import phy802.pcs.scrambler as pcs
    words = np.packbits(np.concatenate([bits, np.zeros(-n % 64, np.uint8)]), bitorder="little").view("<u8").copy()
    ref = np.unpackbits(pcs.scramble(words, n, seed=0).view(np.uint8), bitorder="little")[:n]
    assert np.array_equal(s, ref)
    r = s.copy()
    r[1000] ^= 1
    d = K.descramble_bits(r, np.zeros(58, np.uint8))
    assert np.flatnonzero(d != bits).tolist() == [1000, 1039, 1058]


# --- rs272: a trace pair = two rs272 codeword pairs ---------------------------------
@pytest.mark.parametrize("rate", ["400G", "200G"])
@pytest.mark.parametrize("fec", MODES)
def test_rs272_fast_equals_bit_exact_on_the_same_line_errors(rate, fec):
    g = get_rate(rate)
    P = g.am_period_pairs - 3
    cfg = GeneratorConfig(rate, fec, 0.0, code="rs272")
    fast, exact = FastGenerator(cfg, 1, start_pair=P), BitExactGenerator(cfg, 2, start_pair=P)
    rng = np.random.default_rng(12)
    for n_pairs, ber in [(2, 2e-3), (4, 5e-3), (3, 3e-4), (5, 3e-3)]:
        pos = _pos(P, n_pairs, ber, rng)
        _same(fast._process_rs272(P, P + n_pairs, pos), exact.next_chunk(n_pairs, line_errors=pos))
        P += n_pairs
    a, b = fast.stats.as_dict(), exact.stats.as_dict()
    assert {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}
    assert a["codewords"] == 4 * 14  # four rs272 codewords per trace pair
    if fec in ("ieee", "correct_no_indication"):
        assert fast.stats.uncorrectable_codewords > 0 and fast.stats.corrected_codewords > 0
    if fec == "detect_only":
        assert fast.stats.marked_pairs > 0


def test_rs272_decisions_by_hand():
    """8 symbol errors in codeword A of rs272 pair 2 P + 1: t = 7 fails and only that rs272 pair's
    20 blocks are marked (ieee); 7 errors are corrected; the pad and parity carry no payload."""
    P = 5
    base = P * PAIR_LINE_BITS + PAIR_LINE_BITS // 2  # rs272 pair s = 1 of trace pair P

    def errs(ts):
        return np.array([base + 20 * t for t in ts], np.int64)  # bit 0 of symbol t of codeword A

    gen = FastGenerator(GeneratorConfig("400G", "ieee", 0.0, code="rs272"), 1, start_pair=P)
    ch = gen._process_rs272(P, P + 1, errs(range(0, 240, 30)))  # 8 symbols > t = 7
    g = get_rate("400G")
    lo = (data_blocks_before(P, g) + 20) * 256
    assert ch.marks.tolist() == [[lo, lo + 20 * 256]] and gen.stats.uncorrectable_codewords == 1
    gen = FastGenerator(GeneratorConfig("400G", "ieee", 0.0, code="rs272"), 1, start_pair=P)
    ch = gen._process_rs272(P, P + 1, errs(range(0, 210, 30)))  # 7 symbols: corrected
    assert ch.offsets.size == 0 and ch.marks.size == 0 and gen.stats.corrected_codewords == 1
    gen = FastGenerator(GeneratorConfig("400G", "bypass", 0.0, code="rs272"), 1, start_pair=P)
    ch = gen._process_rs272(P, P + 1, errs([257, 258, 271]))  # pad + parity only
    assert ch.offsets.size == 0 and gen.stats.line_bit_errors == 3
    ch = gen._process_rs272(P + 1, P + 2, errs([3]) + PAIR_LINE_BITS)  # one data bit -> 3 flips
    assert ch.offsets.size == 3


def test_rs272_and_none_generate_at_the_expected_rates():
    from phy802 import theory
    from phy802.stats import rate

    ber = theory.pre_fec_ber_for_fer(5e-3, theory.RS272)  # ~1.5e-3: ~400 failures in 80000 words
    a = FastGenerator(GeneratorConfig("400G", "ieee", ber, code="rs272"), 3)
    a.next_chunk(20000)

    st = a.stats
    fer = rate(st.uncorrectable_codewords + st.miscorrected_codewords, st.codewords, 0.999)
    expect = theory.rs_codeword_error_ratio(theory.symbol_error_prob(ber), theory.RS272)
    assert fer.contains(expect) and st.uncorrectable_codewords > 200, (fer, expect)
    assert fer.hi - fer.lo < 0.5 * fer.value  # power: the interval is narrow enough to fail
    n = FastGenerator(GeneratorConfig("400G", "ieee", ber, code="none"), 3)  # nothing decoded
    ch = n.next_chunk(200)
    assert n.stats.uncorrectable_codewords == n.stats.corrected_codewords == 0
    assert ch.offsets.size > 0 and ch.marks.shape[0] < n.stats.header_errors + 1
    with pytest.raises(ValueError, match="kr4"):
        GeneratorConfig("400G", "ieee", ber, code="kr4")


def test_rs272_sharded_trace_does_not_depend_on_workers(tmp_path):
    from protocol.trace import TraceReader, generate_trace

    kw = dict(fec="ieee", code="rs272", ber=1.5e-3, line_bits=2e7, seed=3, chunk_pairs=100, shard_pairs=300)
    a = generate_trace(tmp_path / "a.npz", workers=1, **kw)
    b = generate_trace(tmp_path / "b.npz", workers=2, **kw)
    assert a["code"] == "rs272" and a["codewords"] == b["codewords"] and a["codewords"]["total"] == 4 * a["pairs"]
    with TraceReader(tmp_path / "a.npz") as ra, TraceReader(tmp_path / "b.npz") as rb:
        xs, ys = list(ra.iter_chunks()), list(rb.iter_chunks())
    off = [np.concatenate([c.offsets for c in z]) for z in (xs, ys)]
    marks = [np.concatenate([c.marks for c in z]) for z in (xs, ys)]
    assert off[0].size > 1000 and np.array_equal(*off) and np.array_equal(*marks)


@pytest.mark.parametrize("pend_lane,expect_triple", [(8, True), (3, False)])
def test_fused_encoder_joins_a_staged_flip_to_a_triple_only_on_the_same_lane(pend_lane, expect_triple):
    """The kernel's encoding shortcut, on a hand-made chunk where it matters: a carried
    descrambler copy at the last payload bit of block 32 and one primary on block 33's 257b
    header bit (so its copies land 39 and 58 payload bits after the carried one).  On the same
    lane the three flips are one triple record (what the greedy encoder writes); on another lane
    they are three single records; either way the bytes equal ``encode_chunk`` of the raw output."""
    from protocol.trace import _gen_kernels as K
    from protocol.trace import encode_chunk

    geom = get_rate("400G")
    P = 1  # pair 1: no AM; its data starts at scrambled-stream block 32 (pair 0 carries 8 AM blocks)
    u = 257  # line bit 257 of the pair -> symbol 25: lane 8, scrambled-stream bit 33 * 257 (a header)
    s_end = int(data_blocks_before(P + 1, geom)) * 257
    stream_start = int(data_blocks_before(P, geom)) * 256

    def run(encode):
        cap = 64
        bufs = [np.empty(cap, np.int64), np.empty(cap, np.int8), np.empty(cap, np.uint8), np.empty(cap, np.int64),
                np.empty(cap, np.int64), np.empty(cap, np.int8), np.empty(cap, np.uint8)]
        enc = np.empty(4096 if encode else 0, np.uint8)
        state = np.array([0, stream_start - 1, -1, 0], np.int64)
        hist, lanes, counters = np.zeros(41, np.int64), np.zeros(16, np.int64), np.zeros(4, np.int64)
        pend = (np.array([4 * (33 * 257 - 1) + 1], np.int64), np.array([pend_lane], np.int8), np.zeros(1, np.uint8))
        nxt, no, nh, nn = K.bypass_run(np.random.default_rng(0), 1e15, np.int64(P * PAIR_LINE_BITS + u),
                                       np.int64((P + 1) * PAIR_LINE_BITS), 8, geom.am_period_pairs, geom.am_blocks,
                                       np.int64(s_end), hist, lanes, *pend, *bufs, counters, enc, state,
                                       np.array([[-1, 0, 0, 0, 0, 0]] * 3, np.int64), np.int64(P))
        assert nxt > (P + 1) * PAIR_LINE_BITS and counters[0] == 1 and lanes[8] == 1
        return bufs[0][:no], bufs[1][:no], bufs[3][:nh], enc[:state[0]], state

    off, ln, hdr, _, _ = run(False)
    assert off.tolist() == [33 * 256 - 1, 33 * 256 + 38, 33 * 256 + 57] and hdr.tolist() == [33]
    assert ln.tolist() == [pend_lane, 8, 8]
    ref = encode_chunk(stream_start, stream_start + 40 * 256, off, ln, np.zeros(3, np.uint8), n_lanes=16)
    _, _, _, blob, state = run(True)
    assert blob.tobytes() == ref.tobytes() and state[3] == 3
    assert (blob[0] & 2 == 2) == expect_triple  # the first record is a triple iff the lanes agree


def test_encoded_chunk_retried_larger_when_the_record_buffer_is_too_small(monkeypatch):
    """The fused kernel refuses to overrun its record buffer: it gives up, the generator restores
    the Generator state and runs the chunk again with more room; the bytes, counts and the
    stream afterwards are those of a run that never ran short."""
    cfg = GeneratorConfig("400G", "bypass", 5e-3)
    ref = FastGenerator(cfg, 4)
    want = [ref.next_encoded(n) for n in (200, 3, 500)]
    monkeypatch.setattr(FastGenerator, "_enc_bytes_per_slot", 0.001)
    gen = FastGenerator(cfg, 4)
    got = [gen.next_encoded(n) for n in (200, 3, 500)]
    for a, b in zip(got, want):
        assert (a.n_flips, a.n_marks, a.blob.tobytes()) == (b.n_flips, b.n_marks, b.blob.tobytes())
    assert gen.stats.as_dict() == ref.stats.as_dict()


@pytest.mark.parametrize("code", ["kp4", "rs272"])
def test_bit_exact_refuses_line_errors_outside_the_chunk(code):
    gen = BitExactGenerator(GeneratorConfig("400G", "bypass", 0.0, code=code), 1, start_pair=3)
    for bad in ([3 * PAIR_LINE_BITS - 1], [5 * PAIR_LINE_BITS]):  # before pair 3, after pair 4
        with pytest.raises(ValueError, match="line_errors must lie inside the chunk's pairs"):
            gen.next_chunk(2, line_errors=np.array(bad))
    assert gen.next_chunk(2, line_errors=np.array([3 * PAIR_LINE_BITS, 5 * PAIR_LINE_BITS - 1])).pair_end == 5
