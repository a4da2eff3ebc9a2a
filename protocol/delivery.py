"""Per-mode delivery of a message: corrupted payload delivered, or frames dropped and resent.

A message of ``payload_octets`` is cut into RoCEv2 frames (:mod:`protocol.framing`); the error
source supplies the flips and error-block marks of the stream window the frames occupy.  Each
frame then meets one of three fates (SPEC.md, deltas D3-D5):

* **dropped**: a mark (error block: decoder indication or a 257b header hit) overlaps the frame,
  or a flip hits its preamble/SFD or headers (the header check fails), or, in a non-tolerant
  mode, any flip hits it up to the FCS (FCS/ICRC fail; CRC-32 escapes, ~2^-32, are ignored).
  The transport resends the frame (``llr``: the link's replay buffer resends it, one link round
  trip instead of the transport's; :meth:`RetransmitConfig.resend_ns`); the resend consumes fresh
  stream bits from the same source and may fail again (up to ``max_attempts``).  A drop costs
  latency, never accuracy.
* **delivered with errors** (tolerant modes): payload flips are handed to the application;
  in ``unequal`` mode, flips on sign/exponent bits are removed first.
* **delivered clean**.

Flips on the inter-packet gap are on idle characters and are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .framing import FramingConfig, layout, line_bits_of_stream, stream_rate
from .modes import FecMode, get_mode, protected_bit_mask
from .source import ErrorChunk, ErrorSource

__all__ = ["RetransmitConfig", "Delivery", "deliver", "frame_fates"]


@dataclass(frozen=True, slots=True)
class RetransmitConfig:
    """Resend policy of the transport (RoCEv2 NAK / selective repeat, [I]).

    ``rtt_ns``: time from a drop to the resent frame's arrival (NAK + resend; 2 us is a typical
    same-rack RoCE figure [I], configurable).  ``max_attempts``: sends per frame before the frame
    is counted lost.  ``link_rtt_ns``: the same for a mode that resends at link level (``llr``:
    one link round trip); ``None`` (default) takes ``retry_ns`` of
    :func:`protocol.latency.added_latency` for the message's rate and code (465.2 ns for KP4 at
    400G with the default :class:`protocol.latency.LatencyConfig`).
    """

    rtt_ns: float = 2000.0
    max_attempts: int = 8
    link_rtt_ns: float | None = None

    def __post_init__(self) -> None:
        if self.rtt_ns < 0:
            raise ValueError(f"RetransmitConfig.rtt_ns must be >= 0, got {self.rtt_ns!r}")
        if self.link_rtt_ns is not None and not self.link_rtt_ns >= 0:
            raise ValueError(f"RetransmitConfig.link_rtt_ns must be >= 0 or None, got {self.link_rtt_ns!r}")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"RetransmitConfig.max_attempts must be an int >= 1, got {self.max_attempts!r}")

    def resend_ns(self, mode: str | FecMode, rate: str = "400G", code: str = "kp4") -> float:
        """Time one resend costs in ``mode``: the link round trip for ``llr``, else ``rtt_ns``."""
        if get_mode(mode).retry != "link":
            return float(self.rtt_ns)
        if self.link_rtt_ns is not None:
            return float(self.link_rtt_ns)
        from .latency import added_latency

        return float(added_latency("llr", rate, code=code).retry_ns)


@dataclass(frozen=True)
class Delivery:
    """What the receiving application gets for one message.

    Attributes
    ----------
    payload_flips : int64[k]
        Sorted payload bit offsets (bit ``i`` = bit ``i % 8`` of octet ``i // 8``) delivered flipped.
    frames, frames_resent, frames_lost : counts (a lost frame exhausted ``max_attempts``; its
        payload is reported in ``lost_ranges`` and not in ``payload_flips``).
    lost_ranges : int64[m, 2] payload bit ranges of lost frames.
    protected_removed : flips removed by unequal protection.
    stream_bits, line_bits : source bits consumed (resends included) and their line bits.
    retransmit_ns : added completion latency: the largest number of resends of any frame x rtt.
    """

    payload_flips: np.ndarray
    frames: int
    frames_resent: int
    frames_lost: int
    lost_ranges: np.ndarray
    protected_removed: int
    stream_bits: int
    line_bits: int
    retransmit_ns: float


def _take(source: ErrorSource, n: int) -> ErrorChunk:
    tc = getattr(source, "take_chunk", None)
    if tc is not None:
        return tc(n)
    off = np.asarray(source.take(n), dtype=np.int64)
    return ErrorChunk(n, off, np.zeros(off.size, np.int8), np.zeros(off.size, np.uint8), np.empty((0, 2), np.int64))


def frame_fates(win: ErrorChunk, frame_start, payload_start, payload_end, check_end, frame_end, mode: FecMode):
    """Decide each frame in a window: returns ``(dropped bool[f], flip frame index, flip payload-relative bit)``.

    Positions are window-relative stream bits; ``check_end`` is the end of the FCS (what the FCS
    covers), ``frame_end`` the end of the slot (after the IPG).
    """
    fs = np.asarray(frame_start)
    off = win.offsets
    fr = np.searchsorted(frame_end, off, side="right")
    in_hdr = off < payload_start[fr]
    in_pay = (~in_hdr) & (off < payload_end[fr])
    in_chk = off < check_end[fr]
    dropped = np.zeros(fs.size, bool)
    dropped[fr[in_hdr]] = True
    if not mode.tolerant:
        dropped[fr[in_chk]] = True
    if win.marks.size:
        # a mark [a, b) hits frame f if it overlaps [frame_start, check_end)
        for a, b in win.marks:
            lo = np.searchsorted(check_end, a, side="right")
            hi = np.searchsorted(fs, b, side="left")
            dropped[lo:hi] = True
    sel = in_pay & ~dropped[fr]
    return dropped, fr[sel], off[sel] - payload_start[fr[sel]]


def deliver(
    payload_octets: int,
    source: ErrorSource,
    mode: str | FecMode,
    *,
    rate: str = "400G",
    framing: FramingConfig = FramingConfig(),
    retransmit: RetransmitConfig = RetransmitConfig(),
    float_format: str = "float32",
    code: str = "kp4",
) -> Delivery:
    """Send one message of ``payload_octets`` over ``source`` in ``mode`` and return what arrives.

    ``code`` (kp4, kr4, rs272, none) sets the PHY overhead in ``line_bits`` and, for ``llr``, the
    link round trip of a resend (:meth:`RetransmitConfig.resend_ns`); the error source already
    carries the code's post-FEC errors."""
    m = get_mode(mode)
    stream_rate(rate)  # 400G, 200G, 800G or 1.6T (the stream is framed alike)
    lay = layout(payload_octets, framing)
    if lay.n_frames == 0:
        e = np.empty(0, np.int64)
        return Delivery(e, 0, 0, 0, np.empty((0, 2), np.int64), 0, 0, 0, 0.0)
    pay_first = np.concatenate(([0], np.cumsum(lay.payload_len)[:-1]))
    payload_end = lay.payload_start + lay.payload_len
    trailer = 8 * (framing.icrc + framing.fcs)
    # pad to the minimum frame sits between payload and ICRC
    mac_bits = 8 * np.maximum(
        framing.eth_header + framing.vlan_tag + framing.ip_packet(lay.payload_len // 8) + framing.fcs, framing.min_frame
    )
    check_end = lay.frame_start + 8 * framing.preamble_sfd + mac_bits
    assert np.all(check_end >= payload_end + trailer)

    win = _take(source, lay.stream_bits)
    used = lay.stream_bits
    dropped, fr, rel = frame_fates(win, lay.frame_start, lay.payload_start, payload_end, check_end, lay.frame_end, m)
    flips = [pay_first[fr] + rel]
    attempts = np.ones(lay.n_frames, np.int64)
    lost = []
    for f in np.flatnonzero(dropped):
        # resend frame f alone in fresh stream bits, until it passes or attempts run out
        span = int(lay.frame_end[f] - lay.frame_start[f])
        sh = int(lay.frame_start[f])
        ok = False
        while attempts[f] < retransmit.max_attempts:
            attempts[f] += 1
            w = _take(source, span)
            used += span
            d, fr1, rel1 = frame_fates(
                w, np.array([0]), lay.payload_start[f:f + 1] - sh, payload_end[f:f + 1] - sh,
                check_end[f:f + 1] - sh, np.array([span]), m,
            )
            if not d[0]:
                flips.append(pay_first[f] + rel1)
                ok = True
                break
        if not ok:
            lost.append((int(pay_first[f]), int(pay_first[f] + lay.payload_len[f])))
    out = np.sort(np.concatenate(flips)) if flips else np.empty(0, np.int64)
    removed = 0
    if m.protected == "sign_exponent" and out.size:
        mask = protected_bit_mask(float_format)
        hit = mask[out % mask.size]
        removed = int(hit.sum())
        out = out[~hit]
    resent = int((attempts - 1).sum())
    return Delivery(
        payload_flips=out.astype(np.int64),
        frames=lay.n_frames,
        frames_resent=resent,
        frames_lost=len(lost),
        lost_ranges=np.asarray(lost, dtype=np.int64).reshape(-1, 2),
        protected_removed=removed,
        stream_bits=int(used),
        line_bits=line_bits_of_stream(int(used), rate, code),
        retransmit_ns=float((attempts.max() - 1) * retransmit.resend_ns(m, rate, code)),
    )
