import itertools

import numpy as np
import pytest

from phy802.pcs.codec66 import BLOCK_TYPES, SYNC_CTRL, SYNC_DATA, Blocks66, block_to_bits
from phy802.pcs.transcode257 import HI_OF_LO, bits_of, decode_257, encode_257, words_of


def _reference_257(blocks: Blocks66) -> np.ndarray:
    """Independent bit-level transcoder written straight from 91.5.2.5 (slow, numpy bits)."""
    bits = block_to_bits(blocks)
    out = []
    for g in range(len(blocks) // 4):
        c = bits[4 * g: 4 * g + 4]
        if all(blk[0] == 0 and blk[1] == 1 for blk in c):
            out.append(np.concatenate([[1]] + [blk[2:] for blk in c]))
            continue
        parts = [[0], [blk[1] for blk in c]]
        first = True
        for blk in c:
            if blk[1] == 0 and first:  # control: drop c<9:6> (high nibble of the type octet)
                parts.append(np.concatenate([blk[2:6], blk[10:]]))
                first = False
            else:
                parts.append(blk[2:])
        out.append(np.concatenate(parts))
    return np.concatenate(out).astype(np.uint8)


def _all_combinations(rng):
    """Every ordered 4-tuple of {data, each Clause 82 control type} (12^4 groups), random bodies."""
    kinds = [None, *BLOCK_TYPES]
    combos = np.array(list(itertools.product(range(len(kinds)), repeat=4))).ravel()
    n = combos.size
    payload = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
    sync = np.where(combos == 0, SYNC_DATA, SYNC_CTRL).astype(np.uint8)
    types = np.array([0] + list(BLOCK_TYPES), dtype=np.uint64)[combos]
    payload = np.where(combos == 0, payload, (payload & ~np.uint64(0xFF)) | types)
    return Blocks66(sync, payload)


def test_round_trip_every_block_type_combination():
    b = _all_combinations(np.random.default_rng(7))
    s = encode_257(b)
    back, bad = decode_257(s, len(b) // 4)
    assert not bad.any()
    assert (back.sync == b.sync).all() and (back.payload == b.payload).all()


def test_against_independent_bit_reference():
    rng = np.random.default_rng(8)
    b = _all_combinations(rng)
    idx = rng.choice(len(b) // 4, 300, replace=False)
    sel = (4 * idx[:, None] + np.arange(4)).ravel()
    sub = Blocks66(b.sync[sel], b.payload[sel])
    got = bits_of(encode_257(sub), 257 * 300)
    assert (got == _reference_257(sub)).all()


def test_header_bits():
    b = _all_combinations(np.random.default_rng(9))
    bits = bits_of(encode_257(b), 257 * (len(b) // 4)).reshape(-1, 257)
    data = (b.sync == SYNC_DATA).reshape(-1, 4)
    alldata = data.all(axis=1)
    assert (bits[:, 0] == alldata).all()  # x<0> = 1 iff all four are data
    ctl = ~alldata
    assert (bits[ctl, 1:5] == data[ctl]).all()  # x<j+1> = 1 for data, 0 for control


def test_low_nibbles_unique():
    assert sorted(HI_OF_LO[HI_OF_LO >= 0].tolist()) == sorted(BLOCK_TYPES)


def test_invalid_257_blocks_give_error_headers():
    bits = np.zeros(257 * 2, np.uint8)
    bits[1:5] = 1  # block 0: x<0> = 0 and mask 1111 (no control block): invalid
    bits[257 + 1: 257 + 5] = [1, 0, 1, 1]  # block 1: first control block (j=1) nibble 0x3: no type
    bits[257 + 5 + 64: 257 + 5 + 64 + 4] = [1, 1, 0, 0]
    blocks, bad = decode_257(words_of(bits), 2)
    assert bad.tolist() == [True, True]
    assert (blocks.sync == 3).all()


def test_bad_input():
    with pytest.raises(ValueError, match="multiple of 4"):
        encode_257(Blocks66(np.full(6, 2, np.uint8), np.zeros(6, np.uint64)))
    with pytest.raises(ValueError, match="too short"):
        decode_257(np.zeros(3, np.uint64), 1)


def test_vector_file_matches_independent_reference():
    from pathlib import Path

    from phy802.pcs.vectors import read_vectors

    recs = read_vectors(Path(__file__).resolve().parents[3] / "vectors" / "pcs" / "transcode257.txt")
    assert len(recs) >= 30
    for r in recs:
        parts = [p.split(":") for p in r.fields["blocks"].split(",")]
        b = Blocks66(np.array([int(s[0]) | int(s[1]) << 1 for s, _ in parts], np.uint8),
                     np.array([int(h, 16) for _, h in parts], np.uint64))
        x = np.frombuffer(r.fields["x"].encode(), np.uint8) - ord("0")
        assert (x == _reference_257(b)).all(), r.where()
