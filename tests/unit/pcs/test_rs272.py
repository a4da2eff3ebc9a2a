"""The low-latency RS(272,257+1) framing in the PCS: TX -> lanes -> RX, with galois as
the RS oracle and the KP4 transmitter as the oracle of the round robin."""

import numpy as np
import pytest

from phy802.pcs import PcsConfig, PcsReceiver, PcsTransmitter, frames_to_blocks
from phy802.pcs.alignment import am_symbols
from phy802.pcs.distribution import deinterleave_n, interleave_n, lane_of_symbol


def _frames(seed, n=50):
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(k)) for k in rng.integers(40, 1500, n)]


@pytest.mark.parametrize("rate", ["400G", "200G"])
def test_rs272_frames_round_trip_across_am_groups(rate):
    cfg = PcsConfig(rate=rate, fec="rs272", am_spacing=80, am_status=5, pad_value=777)
    fr = _frames(2)
    tx = PcsTransmitter(cfg).transmit(frames_to_blocks(fr, idle_blocks=2))
    K = 34 if rate == "400G" else 68
    assert tx.codewords.shape[1:] == (2, 272) and tx.lanes.shape[1] == tx.n_pairs * K
    assert tx.n_pairs >= 9  # several AM groups (every 4 rs272 pairs)
    assert (tx.codewords[:, :, 257] == 777).all()  # the pad: last message symbol, configured value
    # every AM-bearing pair starts each PCS lane with that lane's marker (lane lock needs it)
    ams = am_symbols(cfg.markers)
    for p in range(0, tx.n_pairs, cfg.period_pairs):
        np.testing.assert_array_equal(tx.lanes[:, p * K: p * K + 12], ams)
    res = PcsReceiver(cfg)(tx.lanes)
    assert [f for f in res.frames.delivered] == fr
    c = res.counters
    assert c.am_groups == -(-tx.n_pairs // cfg.period_pairs) and c.am_marker_errors == 0 and c.am_status == 5
    assert c.uncorrected_codewords == 0 and c.fcs_errors == 0
    np.testing.assert_array_equal(res.codewords, tx.codewords)


@pytest.mark.parametrize("n_pairs", [1, 2, 5, 8])
def test_rs272_codewords_match_galois_and_the_kp4_round_robin(n_pairs):
    """RS(272,258) parity from galois; the messages are the KP4 transmitter's A/B messages split
    in halves (119.2.4.5 over each 20-block pair), with the pad appended."""
    import galois

    cfg = PcsConfig(fec="rs272", am_spacing=160)
    kp4 = PcsConfig(am_spacing=160)
    rng = np.random.default_rng(n_pairs)
    n66 = 4 * cfg.data_blocks_257(n_pairs)
    from phy802.pcs import Blocks66, SYNC_DATA

    blocks = Blocks66(np.full(n66, SYNC_DATA, np.uint8), rng.integers(0, 2**63, n66, dtype=np.uint64))
    tx = PcsTransmitter(cfg).transmit(blocks)
    assert tx.n_pairs == n_pairs and tx.n_pad_blocks == 0
    GF = galois.GF(2**10, irreducible_poly="x^10 + x^3 + 1")
    rs = galois.ReedSolomon(1023, 1023 - 14, field=GF, alpha=GF(2), c=0)  # shortened by passing 258
    msgs = tx.codewords[:, :, :258].reshape(-1, 258)
    np.testing.assert_array_equal(np.asarray(rs.encode(rs.field(msgs.astype(int)))), tx.codewords.reshape(-1, 272))
    # the KP4 transmitter on the same blocks plus idle padding to whole KP4 pairs
    ref, _, _ = PcsTransmitter(kp4).messages(blocks)
    half = ref.reshape(ref.shape[0], 2, 2, 257).transpose(0, 2, 1, 3).reshape(-1, 2, 257)
    np.testing.assert_array_equal(tx.codewords[:, :, :257], half[:n_pairs])


def test_rs272_interleave_round_trip_and_lane_map():
    rng = np.random.default_rng(3)
    cw = rng.integers(0, 1024, (3, 2, 272), dtype=np.uint16)
    for rate in ("400G", "200G"):
        lanes = interleave_n(cw, rate)
        np.testing.assert_array_equal(deinterleave_n(lanes, rate, 272), cw)
        la, lb, sa, sb = lane_of_symbol(rate, 272)
        K = lanes.shape[1] // 3
        for t in (0, 9, 100, 271):
            assert lanes[la[t], K + sa[t]] == cw[1, 0, t] and lanes[lb[t], 2 * K + sb[t]] == cw[2, 1, t]


def test_rs272_decoding_and_pair_marking():
    """t = 7 per codeword; an uncorrectable codeword marks the 66b blocks of its rs272 pair (20
    257b blocks), not its neighbour's."""
    cfg = PcsConfig(fec="rs272", am_spacing=160)
    fr = _frames(4, n=40)
    tx = PcsTransmitter(cfg).transmit(frames_to_blocks(fr))
    rx_cw = tx.codewords.copy()
    rx_cw[1, 0, [3, 50, 90, 120, 150, 200, 250]] ^= 1  # 7 symbol errors in A of pair 1: corrected
    rx_cw[3, 1, [1, 20, 40, 60, 80, 100, 120, 140]] ^= 5  # 8 errors in B of pair 3: uncorrectable
    res = PcsReceiver(cfg)(interleave_n(rx_cw, cfg.rate), frames=False)
    c = res.counters
    assert c.corrected_codewords == 1 and c.corrected_symbols == 7 and c.uncorrected_codewords == 1
    assert c.marked_pairs == 1 and c.marked_blocks == 4 * 20  # pair 3 carries no AM group
    assert int(c.symbol_errors.sum()) == 7
    bad = np.flatnonzero(res.blocks.sync == 3)
    first = 4 * cfg.data_blocks_257(3)
    assert bad.min() >= first and bad.max() < first + 80


def test_rs272_config():
    cfg = PcsConfig(fec="rs272")
    assert (cfg.blocks_per_pair, cfg.period_pairs, cfg.symbols_per_pair, cfg.pad_index) == (20, 8192, 34, 257)
    assert PcsConfig(rate="200G", fec="rs272").symbols_per_pair == 68
    assert cfg.data_blocks_257(3) == 60 - 8
    with pytest.raises(ValueError, match="alignment markers"):
        PcsConfig(fec="rs272", pad_position="first")
    with pytest.raises(ValueError, match="pad_value"):
        PcsConfig(fec="rs272", pad_value=1024)
    with pytest.raises(ValueError, match="rs272"):
        PcsConfig(fec="kr4")
