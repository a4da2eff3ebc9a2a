"""The frame-level PCS vectors (codec66.txt, tx_400g_frames.txt) are right for reasons of their own."""

import zlib
from pathlib import Path

import numpy as np

from phy802.pcs import PcsConfig, PcsReceiver, blocks_to_frames
from phy802.pcs.codec66 import Blocks66
from phy802.pcs.vectors import read_vectors, verify_file

VEC = Path(__file__).resolve().parents[3] / "vectors" / "pcs"


def _blocks(text: str) -> Blocks66:
    parts = [p.split(":") for p in text.split(",")]
    sync = np.array([int(sh[0]) | int(sh[1]) << 1 for sh, _ in parts], np.uint8)
    return Blocks66(sync, np.array([int(h, 16) for _, h in parts], np.uint64))


def test_codec66_records_decode_to_their_frame_with_zlib_fcs():
    recs = read_vectors(VEC / "codec66.txt")
    assert {len(bytes.fromhex(r.fields["frame"])) % 8 for r in recs} == set(range(8))  # every terminate type
    for r in recs:
        frame = bytes.fromhex(r.fields["frame"])
        blocks = _blocks(r.fields["blocks"])
        dec = blocks_to_frames(blocks)  # the decoder strips and checks the FCS
        assert dec.frames == [frame] and list(dec.fcs_ok) == [True]
        # the FCS octets on the wire are zlib's CRC-32, least significant octet first
        data = blocks.sync == 2
        octets = b"".join(int(p).to_bytes(8, "little") for p in blocks.payload[data])
        term = int(blocks.payload[np.flatnonzero(~data)[1]]).to_bytes(8, "little")
        wire = octets + term[1:1 + (len(frame) + 4) % 8]
        assert wire == frame + zlib.crc32(frame).to_bytes(4, "little")
    assert verify_file(VEC / "codec66.txt").ok


def test_frames_tx_lanes_receive_back_to_the_frames():
    recs = read_vectors(VEC / "tx_400g_frames.txt")
    assert sorted(int(r.fields["lane"]) for r in recs) == list(range(16))
    frames = [bytes.fromhex(f) for f in recs[0].fields["frames"].split(";")]
    lanes = np.array([[int(v) for v in r.fields["symbols"].split(",")]
                      for r in sorted(recs, key=lambda r: int(r.fields["lane"]))], np.uint16)
    assert lanes.shape == (16, 68)
    rng = np.random.default_rng(0)
    perm = rng.permutation(16)  # the receiver must find the lanes from the markers
    rx = PcsReceiver(PcsConfig(rate="400G"))(lanes[perm])
    assert rx.frames.frames == frames and all(rx.frames.fcs_ok)
    assert verify_file(VEC / "tx_400g_frames.txt").ok


def test_a_wrong_lane_symbol_is_a_mismatch_with_line_number(tmp_path):
    text = (VEC / "tx_400g_frames.txt").read_text().splitlines()
    i = next(j for j, ln in enumerate(text) if "lane=5 " in ln)
    head, sym = text[i].rsplit("symbols=", 1)
    vals = sym.split(",")
    vals[20] = str((int(vals[20]) + 1) % 1024)
    text[i] = head + "symbols=" + ",".join(vals)
    p = tmp_path / "bad.txt"
    p.write_text("\n".join(text) + "\n")
    res = verify_file(p)
    assert not res.ok and len(res.failures) == 1
    assert f"bad.txt:{i + 1}" in res.failures[0] and "index 20" in res.failures[0]
