import zlib

import numpy as np
import pytest

from phy802.pcs.codec66 import (
    BLOCK_TYPES, ERROR_PAYLOAD, IDLE_PAYLOAD, START_PAYLOAD, SYNC_CTRL, SYNC_DATA, TERMINATE_TYPES,
    Blocks66, bits_to_block, block_to_bits, blocks_to_frames, check_blocks, concat_blocks, crc32,
    error_blocks, frames_to_blocks, idle_blocks, ordered_set_blocks,
)


def test_crc32_against_zlib_and_known_value():
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 64, 1500):
        d = rng.bytes(n)
        assert crc32(d) == zlib.crc32(d)
    assert crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value


def test_frame_layout_known_answer():
    # 9-octet frame + 4 FCS = 13 octets: S, one D block (8 octets), T5 (0xD2) with 5 octets
    f = bytes(range(1, 10))
    b = frames_to_blocks([f], idle_blocks=1, align=1)
    fcs = zlib.crc32(f).to_bytes(4, "little")
    assert b.sync.tolist() == [SYNC_CTRL, SYNC_DATA, SYNC_CTRL, SYNC_CTRL]
    assert b.payload[0] == START_PAYLOAD == 0xD555555555555578
    assert int(b.payload[1]).to_bytes(8, "little") == f[:8]
    assert int(b.payload[2]).to_bytes(8, "little") == bytes([0xD2]) + f[8:] + fcs + bytes(2)
    assert b.payload[3] == IDLE_PAYLOAD


@pytest.mark.parametrize("r", range(8))
def test_terminate_type_for_each_residue(r):
    f = bytes(16 + r - 4)  # frame+FCS = 16 + r octets -> 2 data blocks + T_r
    b = frames_to_blocks([f], idle_blocks=0, align=1)
    assert len(b) == 4 and int(b.payload[3]) & 0xFF == TERMINATE_TYPES[r]
    assert blocks_to_frames(b).frames == [f]


def test_random_frames_round_trip_and_stats():
    rng = np.random.default_rng(1)
    frames = [rng.bytes(int(n)) for n in rng.integers(0, 2000, 300)]
    b = frames_to_blocks(frames, idle_blocks=2, lead_idles=3)
    assert len(b) % 4 == 0
    d = blocks_to_frames(b)
    assert d.frames == frames and d.fcs_ok.all() and d.aborted == 0 and d.truncated == 0
    assert d.block_counts["error_blocks"] == 0 and d.block_counts["sequence_errors"] == 0
    assert d.block_counts["idle"] >= 2 * len(frames) + 3


def test_fcs_error_abort_and_truncation_detected():
    rng = np.random.default_rng(2)
    frames = [rng.bytes(100) for _ in range(3)]
    b = frames_to_blocks(frames, idle_blocks=1)
    s, p = b.sync.copy(), b.payload.copy()
    p[3] ^= np.uint64(1 << 17)  # one bit inside frame 0 -> FCS error
    start1 = np.flatnonzero((s == SYNC_CTRL) & ((p & np.uint64(0xFF)) == 0x78))[1]
    s[start1 + 2] = 3  # invalid sync header inside frame 1 -> aborted
    d = blocks_to_frames(Blocks66(s, p))
    assert d.fcs_ok.tolist() == [False, True] and d.frames[1] == frames[2]
    assert d.aborted == 1 and d.block_counts["invalid_sync"] == 1 and d.fcs_errors == 1
    cut = blocks_to_frames(Blocks66(b.sync[:5], b.payload[:5]))
    assert cut.truncated == 1 and cut.frames == []


def test_error_block_and_ordered_sets():
    e = error_blocks(2)
    assert e.payload[0] == ERROR_PAYLOAD
    d = blocks_to_frames(concat_blocks(idle_blocks(1), e, ordered_set_blocks(1), ordered_set_blocks(1, "remote_fault")))
    assert d.block_counts["error_blocks"] == 2 and d.block_counts["ordered_set"] == 2
    assert int(ordered_set_blocks(1, "remote_fault").payload[0]) == 0x4B | (2 << 24)
    with pytest.raises(ValueError, match="ordered set kind"):
        ordered_set_blocks(1, "bogus")


def test_check_blocks_bad_input():
    b = idle_blocks(8)
    s = b.sync.copy()
    s[5] = 0
    with pytest.raises(ValueError, match=r"block 5: invalid sync header"):
        check_blocks(Blocks66(s, b.payload))
    p = b.payload.copy()
    p[2] = np.uint64(0x2D)  # a Clause 49 type that Clause 82 dropped
    with pytest.raises(ValueError, match=r"block 2: unknown Clause 82 block type 0x2D"):
        check_blocks(Blocks66(b.sync, p))
    fixed = check_blocks(Blocks66(s, p), on_invalid="error_block")
    assert fixed.payload[5] == ERROR_PAYLOAD and fixed.sync[5] == SYNC_CTRL and fixed.payload[2] == ERROR_PAYLOAD
    with pytest.raises(ValueError, match="multiple of 4"):
        check_blocks(idle_blocks(6), multiple_of=4)
    with pytest.raises(ValueError, match="equal length"):
        check_blocks((np.zeros(3, np.uint8), np.zeros(4, np.uint64)))
    with pytest.raises(ValueError, match="frame 0: expected bytes"):
        frames_to_blocks(["text"])


def test_bits_round_trip():
    rng = np.random.default_rng(3)
    b = Blocks66(rng.integers(0, 4, 50).astype(np.uint8), rng.integers(0, 2**63, 50, dtype=np.uint64))
    bits = block_to_bits(b)
    assert bits.shape == (50, 66)
    assert (bits[:, 2] == (b.payload & np.uint64(1))).all()
    back = bits_to_block(bits)
    assert (back.sync == b.sync).all() and (back.payload == b.payload).all()
    assert set(BLOCK_TYPES) == {0x1E, 0x78, 0x4B, *TERMINATE_TYPES}


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=200), max_size=12), st.integers(0, 3), st.integers(0, 5))
def test_property_frames_round_trip(frames, idle, lead):
    b = frames_to_blocks(frames, idle_blocks=idle, lead_idles=lead)
    d = blocks_to_frames(b)
    assert d.frames == frames and d.fcs_ok.all() and d.aborted == 0
    # back-to-back frames without idles are legal blocks too (T7 then S)
    assert (b.sync[b.sync != SYNC_DATA] == SYNC_CTRL).all()
