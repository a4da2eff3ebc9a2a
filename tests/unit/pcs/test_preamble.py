"""Receive checks the preamble and SFD of every start block (82.2.3.3 / 4.2.5)."""

import numpy as np
import pytest

from phy802.pcs import PcsConfig, PcsReceiver, PcsTransmitter, blocks_to_frames, frames_to_blocks


def _start_blocks(b):
    return np.flatnonzero((b.sync == 1) & ((b.payload & np.uint64(0xFF)) == np.uint64(0x78)))


@pytest.mark.parametrize("octet", [1, 4, 7])  # a preamble octet, another one, the SFD
def test_a_bad_preamble_or_sfd_octet_stops_that_frame_only(octet):
    frames = [bytes([i]) * (64 + 7 * i) for i in range(5)]
    b = frames_to_blocks(frames)
    clean = blocks_to_frames(b)
    assert clean.delivered == frames and clean.preamble_errors == 0
    p = b.payload.copy()
    p[_start_blocks(b)[2]] ^= np.uint64(1) << np.uint64(8 * octet + 3)
    d = blocks_to_frames((b.sync, p))
    assert list(d.preamble_ok) == [True, True, False, True, True]
    assert d.preamble_errors == 1 and d.fcs_errors == 0
    assert d.delivered == frames[:2] + frames[3:]


def test_receiver_counts_preamble_errors():
    cfg = PcsConfig(am_spacing=80)
    frames = [bytes([7]) * 100 for _ in range(6)]
    b = frames_to_blocks(frames)
    p = b.payload.copy()
    p[_start_blocks(b)[0]] ^= np.uint64(1) << np.uint64(60)  # inside the SFD octet
    lanes = PcsTransmitter(cfg)((b.sync, p))
    rx = PcsReceiver(cfg)(lanes)
    assert rx.counters.preamble_errors == 1
    assert rx.counters.frames_delivered == 5 and rx.counters.fcs_errors == 0
