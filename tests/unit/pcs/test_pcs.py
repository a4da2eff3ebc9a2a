"""End-to-end Clause 119 PCS: TX -> lanes -> RX."""

import numpy as np
import pytest

from phy802.pcs import (
    LockError, PcsConfig, PcsReceiver, PcsTransmitter, SYNC_DATA, Blocks66, block_error_mask,
    data_bit_errors, frames_to_blocks, idle_blocks, lane_of_symbol, payload_bit_errors,
    stream_bit_errors,
)
from phy802.pcs.alignment import am_symbols


def _frames(seed, n=60, lo=40, hi=1600):
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(k)) for k in rng.integers(lo, hi, n)]


def _same(a, b):
    n = len(a)
    return bool((b.sync[:n] == a.sync).all() and (b.payload[:n] == a.payload).all())


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_frames_round_trip_across_am_groups(rate):
    cfg = PcsConfig(rate=rate, am_spacing=80, am_status=6)
    fr = _frames(1)
    blocks = frames_to_blocks(fr, idle_blocks=2)
    tx = PcsTransmitter(cfg).transmit(blocks)
    assert tx.n_pairs >= 6  # several AM groups crossed
    rx = PcsReceiver(cfg)(tx.lanes)
    c = rx.counters
    assert _same(blocks, rx.blocks) and rx.frames.frames == fr
    assert c.frames_delivered == len(fr) and c.fcs_errors == 0 and c.block_errors == 0
    assert c.am_groups == (tx.n_pairs + 1) // 2 and c.am_marker_errors == 0 and c.am_status == 6
    assert c.corrected_codewords == 0 and c.uncorrected_codewords == 0
    # after every AM group, PCS lane L starts with lane L's marker (119.2.4.7)
    K = cfg.symbols_per_pair
    am = am_symbols(cfg.markers)
    for g in range(0, tx.n_pairs, cfg.period_pairs):
        assert (tx.lanes[:, g * K: g * K + 12] == am).all()
        assert (tx.codewords[g, :, :cfg.n_lanes // 2] == 666).all()
        assert (tx.codewords[g, :, cfg.n_lanes // 2: cfg.n_lanes] == 402).all()


def test_long_idle_stream_real_spacing():
    cfg = PcsConfig()  # 163840 blocks between markers
    n66 = 4 * (163840 - 8 + 32 + 40 * 2)  # one full period plus three pairs (the first with AM)
    blocks = idle_blocks(n66)
    tx = PcsTransmitter(cfg).transmit(blocks)
    assert tx.n_pairs == 4096 + 3
    am = am_symbols(cfg.markers)
    assert (tx.lanes[:, 4096 * 68: 4096 * 68 + 12] == am).all()
    rx = PcsReceiver(cfg)(tx.lanes, frames=False)
    assert _same(blocks, rx.blocks) and rx.counters.am_groups == 2 and rx.counters.block_errors == 0


def _inject(lanes, rng, n_pairs, K, per_cw, laneA, laneB, slotA, slotB):
    """Put ``per_cw`` random symbol errors in every codeword; return the expected per-lane count."""
    bad = lanes.copy()
    expect = np.zeros(lanes.shape[0], np.int64)
    for p in range(n_pairs):
        for lane, slot in ((laneA, slotA), (laneB, slotB)):
            pos = rng.choice(544, per_cw, replace=False)
            ln, sl = lane[pos], p * K + slot[pos]
            bad[ln, sl] ^= rng.integers(1, 1024, per_cw).astype(np.uint16)
            np.add.at(expect, ln, 1)
    return bad, expect


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_up_to_t_errors_per_codeword_corrected(rate):
    cfg = PcsConfig(rate=rate, am_spacing=120)
    fr = _frames(2, n=30)
    blocks = frames_to_blocks(fr)
    tx = PcsTransmitter(cfg).transmit(blocks)
    rng = np.random.default_rng(3)
    bad, expect = _inject(tx.lanes, rng, tx.n_pairs, cfg.symbols_per_pair, 15, *lane_of_symbol(rate))
    rx = PcsReceiver(cfg)(bad)
    c = rx.counters
    assert _same(blocks, rx.blocks) and rx.frames.frames == fr
    assert c.corrected_codewords == 2 * tx.n_pairs and c.corrected_symbols == 30 * tx.n_pairs
    assert (c.symbol_errors == expect).all() and c.uncorrected_codewords == 0


def test_uncorrectable_pair_is_marked():
    cfg = PcsConfig(am_spacing=80)
    fr = _frames(4, n=40, lo=300, hi=400)
    blocks = frames_to_blocks(fr)
    tx = PcsTransmitter(cfg).transmit(blocks)
    la, lb, sa, sb = lane_of_symbol()
    bad = tx.lanes.copy()
    p = 3  # a pair without AM: 40 257b blocks = 160 66b blocks
    pos = np.arange(16) * 30
    bad[la[pos], p * 68 + sa[pos]] ^= 1  # 16 symbol errors in codeword A of pair 3
    rx = PcsReceiver(cfg)(bad)
    c = rx.counters
    assert c.uncorrected_codewords == 1 and c.marked_pairs == 1 and c.marked_blocks == 160
    start = 4 * (cfg.data_blocks_257(p))
    marked = np.flatnonzero(rx.blocks.sync == 3)
    assert marked.tolist() == list(range(start, start + 160))
    assert c.block_errors == 160 and c.frames_delivered < len(fr) and c.fcs_errors == 0
    assert set(rx.frames.delivered) <= set(fr)
    # "none": the same errors pass through unmarked (bypass indication)
    rx2 = PcsReceiver(PcsConfig(am_spacing=80, error_marking="none"))(bad)
    assert rx2.counters.marked_blocks == 0 and rx2.counters.uncorrected_codewords == 1


def test_detect_and_bypass_modes():
    fr = _frames(5, n=20)
    blocks = frames_to_blocks(fr)
    tx = PcsTransmitter(PcsConfig(am_spacing=80)).transmit(blocks)
    la, _, sa, _ = lane_of_symbol()
    bad = tx.lanes.copy()
    bad[la[200], 68 + sa[200]] ^= 4  # one symbol error in pair 1, codeword A
    det = PcsReceiver(PcsConfig(am_spacing=80, decode_mode="detect"))(bad)
    assert det.counters.uncorrected_codewords == 1 and det.counters.marked_pairs == 1
    assert (det.counters.symbol_errors == 0).all()
    byp = PcsReceiver(PcsConfig(am_spacing=80, decode_mode="bypass"))(bad)
    assert byp.counters.uncorrected_codewords == 0 and byp.counters.marked_blocks == 0
    errs = stream_bit_errors(blocks, byp.blocks)
    assert 1 <= errs.size <= 3
    ok = PcsReceiver(PcsConfig(am_spacing=80, decode_mode="bypass"))(tx.lanes)
    assert _same(blocks, ok.blocks)


def test_single_line_bit_error_becomes_three_after_descrambler():
    """FEC bypassed: one flipped line bit in the data -> bits n, n+39, n+58 of the 257b stream."""
    cfg = PcsConfig(am_spacing=80, decode_mode="bypass")
    rng = np.random.default_rng(6)
    n66 = 4 * cfg.data_blocks_257(4)
    blocks = Blocks66(np.full(n66, SYNC_DATA, np.uint8), rng.integers(0, 2**63, n66, dtype=np.uint64))
    tx = PcsTransmitter(cfg).transmit(blocks)
    la, lb, sa, sb = lane_of_symbol()
    base = 257 * cfg.data_blocks_257(1)  # pair 1 carries no AM: data-stream bits base .. base+10279
    for x in (1, 500, 3333, 7000, 10279 - 58 - 1):
        n = base + x
        g, r = divmod(n, 257)
        if r == 0 or (n + 39) % 257 == 0 or (n + 58) % 257 == 0:
            continue  # keep clear of the all-data x<0> header bits
        sym, bit = divmod(x, 10)
        t, X = sym // 2, sym % 2
        lane, slot = (la[t], sa[t]) if X == 0 else (lb[t], sb[t])
        bad = tx.lanes.copy()
        bad[lane, 68 + slot] ^= np.uint16(1 << bit)
        rx = PcsReceiver(cfg)(bad, frames=False)
        pos = payload_bit_errors(blocks, rx.blocks)
        blk, i = divmod(pos, 64)
        stream = 257 * (blk // 4) + 1 + 64 * (blk % 4) + i  # back to 257b-stream bit numbers
        assert stream.tolist() == [n, n + 39, n + 58]


def test_lane_permutation_and_symbol_skew():
    cfg = PcsConfig(am_spacing=80)
    fr = _frames(7, n=40)
    blocks = frames_to_blocks(fr)
    tx = PcsTransmitter(cfg).transmit(blocks)
    rng = np.random.default_rng(8)
    perm = rng.permutation(16)
    skew = rng.integers(0, 30, 16)
    n = tx.lanes.shape[1]
    rows = np.zeros((16, n + 40), np.uint16)
    for r in range(16):  # row r carries lane perm[r], delayed by skew[r] symbols (junk before)
        rows[r, : skew[r]] = rng.integers(0, 1024, skew[r])
        rows[r, skew[r]: skew[r] + n] = tx.lanes[perm[r]]
    rx = PcsReceiver(cfg)(rows)
    assert (rx.lock.lane_of_input == perm).all() and (rx.counters.skew == skew - skew.min()).all()
    assert _same(blocks, rx.blocks) and rx.frames.frames == fr


def test_bit_skew_and_permutation():
    cfg = PcsConfig(rate="200G", am_spacing=80)
    fr = _frames(9, n=30)
    blocks = frames_to_blocks(fr)
    tx = PcsTransmitter(cfg).transmit(blocks)
    rng = np.random.default_rng(10)
    perm = rng.permutation(8)
    bits = ((tx.lanes[:, :, None] >> np.arange(10, dtype=np.uint16)) & 1).astype(np.uint8).reshape(8, -1)
    skew = rng.integers(0, 200, 8)
    rows = [np.concatenate([rng.integers(0, 2, skew[r]).astype(np.uint8), bits[perm[r]],
                            rng.integers(0, 2, 7).astype(np.uint8)]) for r in range(8)]
    rx = PcsReceiver(cfg)(rows)
    assert rx.counters.skew_unit == "bits" and (rx.counters.skew == skew - skew.min()).all()
    assert (rx.lock.lane_of_input == perm).all()
    assert _same(blocks, rx.blocks) and rx.frames.frames == fr


def test_lanes_that_never_lock():
    cfg = PcsConfig(am_spacing=80)
    tx = PcsTransmitter(cfg)(idle_blocks(4 * 72))
    bad = tx.copy()
    bad[7] = np.random.default_rng(1).integers(0, 1024, bad.shape[1])
    with pytest.raises(LockError, match="lane row 7 never locked"):
        PcsReceiver(cfg)(bad)
    with pytest.raises(ValueError, match="expected 16 PCS lanes"):
        PcsReceiver(cfg)(tx[:8])


def test_transmit_bad_input():
    tx = PcsTransmitter(PcsConfig(am_spacing=80))
    s = np.full(8, 1, np.uint8)
    s[3] = 0
    with pytest.raises(ValueError, match="block 3: invalid sync header"):
        tx(Blocks66(s, np.full(8, 0x1E, np.uint64)))
    lanes = PcsTransmitter(PcsConfig(am_spacing=80), on_invalid="error_block")(Blocks66(s, np.full(8, 0x1E, np.uint64)))
    rx = PcsReceiver(PcsConfig(am_spacing=80))(lanes)
    assert rx.counters.block_errors == 1
    with pytest.raises(ValueError, match="am_spacing"):
        PcsConfig(am_spacing=100)
    with pytest.raises(ValueError, match="kp4"):
        PcsConfig(fec="kr4")


def test_payload_error_helpers():
    rng = np.random.default_rng(11)
    a = Blocks66(np.full(10, SYNC_DATA, np.uint8), rng.integers(0, 2**63, 10, dtype=np.uint64))
    b = Blocks66(a.sync.copy(), a.payload.copy())
    b.payload[2] ^= np.uint64((1 << 5) | (1 << 63))
    b.sync[7] = 1
    assert block_error_mask(a, b).tolist() == [i in (2, 7) for i in range(10)]
    assert payload_bit_errors(a, b).tolist() == [128 + 5, 128 + 63]
    assert stream_bit_errors(a, b).tolist() == [132 + 7, 132 + 65, 462, 463]
    d = data_bit_errors(a, b)
    assert d.size == 2 + 64 and d[:2].tolist() == [133, 191] and d[2] == 448


def test_receiver_input_checks():
    cfg = PcsConfig(am_spacing=80)
    lanes = PcsTransmitter(cfg)(idle_blocks(0))
    assert lanes.shape == (16, 68)  # an empty stream still fills one (AM) pair with idles
    rx = PcsReceiver(cfg)
    assert len(rx(lanes).blocks) == 128
    with pytest.raises(LockError, match="less than one codeword pair"):
        rx(lanes[:, :60])
    with pytest.raises(LockError, match="integer array"):
        rx(lanes.astype(np.float64))
    bad = lanes.astype(np.int64)
    bad[0, 5] = 5000
    with pytest.raises(ValueError, match="10-bit"):
        rx(bad)


def test_custom_marker_table_and_200g_lane_choice():
    from phy802.pcs.alignment import AM_400G_OCTETS

    rows = tuple(AM_400G_OCTETS[8:])
    for cfg in (PcsConfig(rate="200G", am_spacing=80, am_table=rows),
                PcsConfig(rate="200G", am_spacing=80, am_lanes_200g=tuple(range(8, 16)))):
        blocks = frames_to_blocks(_frames(12, n=10))
        lanes = PcsTransmitter(cfg)(blocks)
        assert (lanes[:, :12] == am_symbols(rows)).all()
        assert _same(blocks, PcsReceiver(cfg)(lanes).blocks)
        # a receiver expecting the default 200G markers (400G rows 0..7) cannot lock on these
        with pytest.raises(LockError):
            PcsReceiver(PcsConfig(rate="200G", am_spacing=80))(lanes)


def _inject_fast(lanes, rng, n_pairs, K, per_cw, rate):
    """Vectorised: ``per_cw`` distinct random symbol errors in every codeword of every pair."""
    la, lb, sa, sb = lane_of_symbol(rate)
    bad = lanes.copy()
    lane = np.stack([la, lb])
    slot = np.stack([sa, sb])
    pos = np.argsort(rng.random((n_pairs, 2, 544)), axis=2)[:, :, :per_cw]  # distinct positions
    X = np.broadcast_to(np.arange(2)[None, :, None], pos.shape)
    p = np.broadcast_to(np.arange(n_pairs)[:, None, None], pos.shape)
    ln, sl = lane[X, pos], p * K + slot[X, pos]
    bad[ln, sl] ^= rng.integers(1, 1024, pos.shape).astype(np.uint16)
    return bad, np.bincount(ln.ravel(), minlength=lanes.shape[0])


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_real_spacing_with_t_errors_skew_and_permutation(rate):
    cfg = PcsConfig(rate=rate)
    rng = np.random.default_rng(21)
    per = 40 * cfg.period_pairs - cfg.am_blocks  # 257b data blocks per AM period
    frames, n66 = [], 0
    while n66 < 4 * (per + 100):  # past the second AM group
        k = int(rng.integers(60, 1515))
        frames.append(rng.bytes(k))
        n66 += (k + 4) // 8 + 3
    blocks = frames_to_blocks(frames)
    tx = PcsTransmitter(cfg).transmit(blocks)
    K = cfg.symbols_per_pair
    assert (tx.lanes[:, cfg.period_pairs * K: cfg.period_pairs * K + 12] == am_symbols(cfg.markers)).all()
    bad, expect = _inject_fast(tx.lanes, rng, tx.n_pairs, K, 15, rate)
    perm = rng.permutation(cfg.n_lanes)
    skew = rng.integers(0, 50, cfg.n_lanes)
    rows = np.zeros((cfg.n_lanes, bad.shape[1] + 50), np.uint16)
    for r in range(cfg.n_lanes):
        rows[r, skew[r]: skew[r] + bad.shape[1]] = bad[perm[r]]
    rx = PcsReceiver(cfg)(rows)
    c = rx.counters
    assert _same(blocks, rx.blocks) and rx.frames.frames == frames
    assert c.corrected_codewords == 2 * tx.n_pairs and c.uncorrected_codewords == 0
    assert (c.symbol_errors == expect).all() and c.am_groups == 2


def test_lock_tolerates_marker_errors_and_falls_back_to_next_group():
    cfg = PcsConfig(am_spacing=80)
    blocks = frames_to_blocks(_frames(13, n=30))
    lanes = PcsTransmitter(cfg)(blocks)
    bad = lanes.copy()
    bad[:4, [2, 5, 9]] ^= 1  # 3 of 12 marker symbols wrong on lanes 0..3: still locks (tolerance 3)
    rx = PcsReceiver(cfg)(bad)
    assert rx.lock.offset.tolist() == [0] * 16 and _same(blocks, rx.blocks)
    assert rx.counters.corrected_symbols == 12 and rx.counters.symbol_errors[:4].tolist() == [3] * 4
    bad[3, :12] ^= 7  # lane 3's first marker destroyed: lanes lock on the second group instead
    rx2 = PcsReceiver(cfg)(bad)
    assert rx2.lock.offset.tolist() == [2 * 68] * 16 and rx2.counters.pairs == lanes.shape[1] // 68 - 2
    n0 = 4 * cfg.data_blocks_257(2)
    assert (rx2.blocks.payload[100:len(blocks) - n0] == blocks.payload[n0 + 100:]).all()
    with pytest.raises(LockError):
        PcsReceiver(PcsConfig(am_spacing=80, am_lock_tolerance=2))(bad[:, :68])


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_transmit_messages_match_a_plain_numpy_path(rate):
    """TX kernels (AM insertion + 10-bit round robin) against an independent numpy construction of
    tx_scrambled_am: 257b stream -> scrambler -> AM group bits spliced in every period."""
    from phy802.pcs.alignment import am_group_bits
    from phy802.pcs.codec66 import concat_blocks
    from phy802.pcs.distribution import round_robin, round_robin_inverse
    from phy802.pcs.scrambler import scramble
    from phy802.pcs.transcode257 import bits_of, encode_257

    cfg = PcsConfig(rate=rate, am_spacing=120, prbs9_seed=0x0AB, am_status=3)
    blocks = frames_to_blocks(_frames(14, n=40))
    tx = PcsTransmitter(cfg)
    msgs, n_in, n_pad = tx.messages(blocks)
    P = msgs.shape[0]
    full = concat_blocks(blocks, idle_blocks(n_pad))
    n = 257 * (len(full) // 4)
    data = bits_of(scramble(encode_257(full), n, cfg.scrambler_seed), n)
    groups = am_group_bits(cfg.markers, -(-P // cfg.period_pairs), cfg.prbs9_seed, cfg.am_status)
    parts, pos = [], 0
    for p in range(P):
        if p % cfg.period_pairs == 0:
            parts += [groups[p // cfg.period_pairs], data[pos: pos + 10280 - cfg.am_bits]]
            pos += 10280 - cfg.am_bits
        else:
            parts.append(data[pos: pos + 10280])
            pos += 10280
    stream = np.concatenate(parts).reshape(P, 10280)
    assert pos == n and (round_robin(stream) == msgs).all()
    assert (round_robin_inverse(msgs) == stream).all()
