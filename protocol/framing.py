"""Transport framing and PHY overhead: how many stream and line bits a message costs.

Two coordinates are used throughout the protocol layer (see :mod:`protocol.source`):

* **stream bits**: the PCS payload stream, the bits the MAC hands to the PCS (preamble/SFD,
  headers, payload, ICRC, FCS and the inter-packet idles).  256 stream bits per 257b block.
  Error sources and traces index this stream; a message advances a cursor by :func:`stream_bits`.
* **line bits**: what the PMA sends: 257 bits per 256 stream bits (256b/257b, 119.2.4.2), the
  RS(544,514) parity (2 x 30 symbols per codeword pair, 119.2.4.6) and the alignment-marker
  group (8 blocks per 163,840 at 400G, 4 per 81,920 at 200G; 119.2.4.4).  Exactly
  ``10880 * period / (256 * (40 * period - am_blocks))`` line bits per stream bit, 1.062516 at 400G.

The transport is RoCEv2 over UDP/IPv4 over Ethernet (defaults below); each frame is laid out in
the stream as ``preamble/SFD | Ethernet | IPv4 | UDP | BTH | payload | pad | ICRC | FCS | IPG``,
and each frame starts on an 8-octet boundary (a Clause 82 Start control character sits in the
first octet of a 66b block; the gap is rounded up, no deficit idle count: conservative [I]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the Clause 119 geometry (defined once, in phy802.clause119; RS_N / RS_K are the names used here)
from phy802.clause119 import AM_SPACING_BLOCKS, BLOCK_BITS, BLOCK_PAYLOAD_BITS, BLOCKS_PER_PAIR, CODE_SIZES
from phy802.clause119 import KP4_K as RS_K
from phy802.clause119 import KP4_N as RS_N
from phy802.clause119 import PAIR_LINE_BITS, PAIR_MESSAGE_BITS, PCS_LANES, SYMBOL_BITS

__all__ = [
    "RS_N",
    "RS_K",
    "SYMBOL_BITS",
    "BLOCKS_PER_PAIR",
    "PAIR_MESSAGE_BITS",
    "PAIR_LINE_BITS",
    "BLOCK_BITS",
    "BLOCK_PAYLOAD_BITS",
    "RateGeometry",
    "RATES",
    "get_rate",
    "INNER_STREAM_RATES",
    "stream_rate",
    "CodeGeometry",
    "CODES",
    "get_code",
    "FramingConfig",
    "MessageLayout",
    "layout",
    "stream_bits",
    "line_bits",
    "line_bits_of_stream",
    "line_time_ns",
    "data_blocks_before",
    "pair_of_data_block",
]



@dataclass(frozen=True, slots=True)
class RateGeometry:
    """Geometry of one 802.3bs rate (Clause 119).

    Parameters
    ----------
    name : str
        ``"400G"`` or ``"200G"``.
    n_lanes : int
        PCS lanes (16 or 8); the 119.2.4.7 interleave gives each lane ``1088 / n_lanes`` symbols
        per codeword pair.
    line_gbps : float
        Line rate in Gb/s (425 or 212.5).
    am_blocks : int
        257b blocks per alignment-marker group (8 at 400G; 4 at 200G, [I] per the notes).
    am_period_pairs : int
        Codeword pairs between AM groups (163840 / 40 = 4096 at 400G; 81920 / 40 = 2048 at 200G [I]).
    """

    name: str
    n_lanes: int
    line_gbps: float
    am_blocks: int
    am_period_pairs: int

    @property
    def pair_ns(self) -> float:
        """Time one codeword pair (10,880 line bits) takes on the line: 25.6 ns at 400G."""
        return PAIR_LINE_BITS / self.line_gbps

    @property
    def rows_per_pair(self) -> int:
        """Symbols per PCS lane per codeword pair (68 at 400G, 136 at 200G)."""
        return 2 * RS_N // self.n_lanes

    @property
    def line_per_stream(self) -> float:
        """Long-run line bits per stream bit (exact ratio of the pair/AM structure)."""
        p = self.am_period_pairs
        return PAIR_LINE_BITS * p / (BLOCK_PAYLOAD_BITS * (BLOCKS_PER_PAIR * p - self.am_blocks))


RATES: dict[str, RateGeometry] = {
    rate: RateGeometry(rate, PCS_LANES[rate], gbps, PCS_LANES[rate] // 2, AM_SPACING_BLOCKS[rate] // BLOCKS_PER_PAIR)
    for rate, gbps in (("400G", 425.0), ("200G", 212.5))
}


def get_rate(rate: str | RateGeometry) -> RateGeometry:
    """The :class:`RateGeometry` for ``"400G"`` / ``"200G"`` (case-insensitive)."""
    if isinstance(rate, RateGeometry):
        return rate
    key = str(rate).strip().upper()
    if key not in RATES:
        raise ValueError(f"unknown rate {rate!r}; choose from {', '.join(RATES)}")
    return RATES[key]


#: the 802.3dj 200G-per-lane rates.  Their payload stream is the concatenated link's
#: (``protocol.trace.inner``): 80 data 257b blocks = 20480 stream bits per interleave group of 4 KP4
#: codewords = 21760 line bits, no alignment markers; messages are framed as at 400G.
INNER_STREAM_RATES: tuple[str, ...] = ("800G", "1.6T")


def stream_rate(rate: str | RateGeometry) -> str:
    """The canonical name of a rate the layer delivers messages at: ``400G`` / ``200G``
    (:data:`RATES`) or ``800G`` / ``1.6T`` (:data:`INNER_STREAM_RATES`); ValueError naming any other."""
    if isinstance(rate, RateGeometry):
        return rate.name
    key = str(rate).strip().upper()
    if key in INNER_STREAM_RATES:
        return key
    if key not in RATES:
        raise ValueError(f"unknown rate {rate!r}; choose from {', '.join((*RATES, *INNER_STREAM_RATES))}")
    return key


@dataclass(frozen=True, slots=True)
class CodeGeometry:
    """How an RS code frames the 257b stream (the codes beside KP4).

    Parameters
    ----------
    name : ``"kp4"``, ``"kr4"``, ``"rs272"`` or ``"none"``.
    n : codeword length in 10-bit symbols (a pair is two codewords, A and B).
    data_symbols : payload symbols per codeword (514; 257 for ``rs272``, whose 258th message
        symbol is a pad).
    blocks_per_pair : 257b blocks per codeword pair (40; 20 for ``rs272``: ten per codeword).
    pad_symbols : message symbols per codeword that carry no data (1 for ``rs272``).

    The MAC rate stays 400 / 200 Gb/s, so the line rate scales with ``n / data_symbols``
    (KP4 and rs272: 425 Gb/s at 400G, the same 544/514 overhead; KR4: 412.5 Gb/s).  ``none`` (no
    FEC sublayer) keeps the KP4 layout on the line, as :class:`phy802.link.LinkConfig` does
    (parity sent as filler): Clause 119 has no FEC-less format [I].
    """

    name: str
    n: int
    data_symbols: int
    blocks_per_pair: int
    pad_symbols: int = 0

    @property
    def t(self) -> int:
        """Symbol errors the code corrects: ``(n - k) / 2`` with ``k = data_symbols + pad_symbols``."""
        return (self.n - self.data_symbols - self.pad_symbols) // 2

    @property
    def pair_line_bits(self) -> int:
        """Line bits of one codeword pair: 10880 (KP4), 10560 (KR4), 5440 (rs272)."""
        return 2 * self.n * SYMBOL_BITS

    @property
    def overhead(self) -> float:
        """Line bits per 257b-stream bit from the RS parity (and pad): ``n / data_symbols``."""
        return self.n / self.data_symbols

    def line_gbps(self, rate: "str | RateGeometry") -> float:
        """Line rate of ``rate`` with this code (the rate's KP4 line rate x overhead ratio)."""
        from fractions import Fraction

        g = get_rate(rate)
        return float(Fraction(g.line_gbps) * Fraction(self.n * RS_K, self.data_symbols * RS_N))

    def pair_ns(self, rate: "str | RateGeometry") -> float:
        """Time one codeword pair takes on the line: 25.6 ns (KP4, KR4), 12.8 ns (rs272) at 400G."""
        return self.pair_line_bits / self.line_gbps(rate)

    def am_period_pairs(self, rate: "str | RateGeometry") -> int:
        """Pairs between AM groups (the AM spacing in 257b blocks is the same for every code)."""
        g = get_rate(rate)
        return g.am_period_pairs * BLOCKS_PER_PAIR // self.blocks_per_pair

    def line_per_stream(self, rate: "str | RateGeometry") -> float:
        """Long-run line bits per stream bit (pair, parity and AM structure)."""
        g = get_rate(rate)
        p = self.am_period_pairs(g)
        return self.pair_line_bits * p / (BLOCK_PAYLOAD_BITS * (self.blocks_per_pair * p - g.am_blocks))


CODES: dict[str, CodeGeometry] = {
    **{name: CodeGeometry(name, c.n, c.data_symbols, c.blocks_per_pair, c.k - c.data_symbols)
       for name, c in CODE_SIZES.items()},
    "none": CodeGeometry("none", RS_N, RS_K, BLOCKS_PER_PAIR),
}


def get_code(code: "str | CodeGeometry") -> CodeGeometry:
    """The :class:`CodeGeometry` of ``kp4``, ``kr4``, ``rs272`` or ``none``."""
    if isinstance(code, CodeGeometry):
        return code
    key = str(code).strip().lower()
    if key not in CODES:
        raise ValueError(f"unknown code {code!r}; choose from {', '.join(CODES)}")
    return CODES[key]


def data_blocks_before(pair: int | np.ndarray, geom: RateGeometry) -> int | np.ndarray:
    """Data (non-AM) 257b blocks in pairs ``[0, pair)``; pair ``p`` carries an AM group when
    ``p % am_period_pairs == 0`` (the stream starts with an AM group, as after link-up)."""
    p = np.asarray(pair, dtype=np.int64)
    n_am = (p + geom.am_period_pairs - 1) // geom.am_period_pairs
    out = p * BLOCKS_PER_PAIR - n_am * geom.am_blocks
    return int(out) if np.ndim(out) == 0 else out


def pair_of_data_block(block: int | np.ndarray, geom: RateGeometry) -> int | np.ndarray:
    """Inverse of :func:`data_blocks_before`: the pair that carries data block ``block``."""
    b = np.asarray(block, dtype=np.int64)
    per_period = geom.am_period_pairs * BLOCKS_PER_PAIR - geom.am_blocks
    q, r = np.divmod(b, per_period)
    # within a period: the first pair has 40 - am_blocks data blocks, the others 40
    first = BLOCKS_PER_PAIR - geom.am_blocks
    within = np.where(r < first, 0, 1 + (r - first) // BLOCKS_PER_PAIR)
    out = q * geom.am_period_pairs + within
    return int(out) if np.ndim(out) == 0 else out


# --- transport framing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FramingConfig:
    """RoCEv2 (UDP/IPv4) over Ethernet framing, in octets.

    Defaults: RoCE path MTU 4096 payload octets per packet (the largest InfiniBand MTU), Ethernet
    MTU 4200 (the usual RoCE setting), no VLAN tag, no RETH/extension headers.
    """

    rdma_mtu: int = 4096
    eth_mtu: int = 4200
    preamble_sfd: int = 8
    eth_header: int = 14
    vlan_tag: int = 0
    ipv4_header: int = 20
    udp_header: int = 8
    bth: int = 12
    ext_headers: int = 0
    icrc: int = 4
    fcs: int = 4
    ipg: int = 12
    min_frame: int = 64  # Ethernet header .. FCS
    align: int = 8  # frame starts on a 66b block boundary

    def __post_init__(self) -> None:
        for name in ("rdma_mtu", "eth_mtu", "preamble_sfd", "eth_header", "vlan_tag", "ipv4_header",
                     "udp_header", "bth", "ext_headers", "icrc", "fcs", "ipg", "min_frame", "align"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"FramingConfig.{name} must be a non-negative int, got {v!r}")
        if self.rdma_mtu <= 0 or self.align <= 0:
            raise ValueError("FramingConfig.rdma_mtu and .align must be > 0")
        if self.ip_packet(self.rdma_mtu) > self.eth_mtu:
            raise ValueError(
                f"FramingConfig: rdma_mtu={self.rdma_mtu} needs an IP packet of {self.ip_packet(self.rdma_mtu)} "
                f"octets, above eth_mtu={self.eth_mtu}"
            )

    @property
    def header_octets(self) -> int:
        """Octets before the payload, from the preamble to the end of the transport headers."""
        return (self.preamble_sfd + self.eth_header + self.vlan_tag + self.ipv4_header + self.udp_header
                + self.bth + self.ext_headers)

    def ip_packet(self, payload: int) -> int:
        return self.ipv4_header + self.udp_header + self.bth + self.ext_headers + payload + self.icrc

    def frame_octets(self, payload: int | np.ndarray) -> int | np.ndarray:
        """Stream octets one frame occupies, IPG and alignment included."""
        mac = self.eth_header + self.vlan_tag + self.ip_packet(payload) + self.fcs
        mac = np.maximum(mac, self.min_frame)
        total = self.preamble_sfd + mac + self.ipg
        return -(-total // self.align) * self.align


@dataclass(frozen=True)
class MessageLayout:
    """Where a message's payload sits in the stream.

    All positions are stream bits relative to the start of the message's slot.

    Attributes
    ----------
    payload_bits : int
        Message payload in bits (octets x 8).
    frame_start, payload_start, payload_len : int64[frames]
        Start of each frame's slot, of its payload, and its payload length (bits).
    frame_end : int64[frames]
        End (exclusive) of each frame's slot (after IPG and alignment).
    stream_bits : int
        Total stream bits of the message = ``frame_end[-1]``.
    """

    payload_bits: int
    frame_start: np.ndarray
    payload_start: np.ndarray
    payload_len: np.ndarray
    frame_end: np.ndarray

    @property
    def n_frames(self) -> int:
        return int(self.frame_start.size)

    @property
    def stream_bits(self) -> int:
        return int(self.frame_end[-1]) if self.frame_end.size else 0

    def payload_bit_of(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map stream offsets to ``(frame index, payload bit or -1 when outside the payload)``."""
        off = np.asarray(offsets, dtype=np.int64)
        if off.size and (off.min() < 0 or off.max() >= self.stream_bits):
            raise ValueError(f"stream offsets must lie in [0, {self.stream_bits}), got [{off.min()}, {off.max()}]")
        frame = np.searchsorted(self.frame_end, off, side="right")
        rel = off - self.payload_start[frame]
        inside = (rel >= 0) & (rel < self.payload_len[frame])
        first_bit = np.concatenate(([0], np.cumsum(self.payload_len)[:-1]))
        pbit = np.where(inside, first_bit[frame] + rel, -1)
        return frame, pbit


def layout(payload_octets: int, cfg: FramingConfig = FramingConfig()) -> MessageLayout:
    """Cut a message of ``payload_octets`` into RoCEv2 frames of at most ``cfg.rdma_mtu`` octets."""
    n = int(payload_octets)
    if n < 0:
        raise ValueError(f"payload_octets must be >= 0, got {payload_octets!r}")
    k = -(-n // cfg.rdma_mtu)
    plen = np.full(k, cfg.rdma_mtu, dtype=np.int64)
    if k:
        plen[-1] = n - (k - 1) * cfg.rdma_mtu
    flen = np.asarray(cfg.frame_octets(plen), dtype=np.int64)
    fend = np.cumsum(flen)
    fstart = fend - flen
    return MessageLayout(
        payload_bits=8 * n,
        frame_start=8 * fstart,
        payload_start=8 * (fstart + cfg.header_octets),
        payload_len=8 * plen,
        frame_end=8 * fend,
    )


def _octets(payload_bits: int) -> int:
    b = int(payload_bits)
    if b < 0:
        raise ValueError(f"payload_bits must be >= 0, got {payload_bits!r}")
    return -(-b // 8)


def stream_bits(payload_bits: int, cfg: FramingConfig = FramingConfig()) -> int:
    """Stream bits (the unit of ``ErrorSource.take``) a message of ``payload_bits`` costs."""
    return layout(_octets(payload_bits), cfg).stream_bits


def line_bits_ratio(rate: str | RateGeometry = "400G", code: str = "kp4") -> tuple[int, int]:
    """``(num, den)``: ``n`` stream bits take ``ceil(n * num / den)`` line bits (257b, RS parity/pad
    and AM overhead of ``code``).  At 800G / 1.6T (:data:`INNER_STREAM_RATES`, ``kp4`` or ``none``,
    the KP4 layout either way): 17 line bits per 16 stream bits (21760 per group of 20480, no AMs),
    the KP4 line of 850 / 1700 Gb/s; the Clause 177 inner code's 128/120 on the physical lanes is
    not counted."""
    if not isinstance(rate, RateGeometry) and str(rate).strip().upper() in INNER_STREAM_RATES:
        c = get_code(code)
        if c.name not in ("kp4", "none"):
            raise ValueError(f"code {code!r} at {rate}: 802.3dj keeps RS(544,514) (kp4) as the outer code; "
                             f"choose kp4 or none")
        return 17, 16
    g = get_rate(rate)
    c = get_code(code)
    p = c.am_period_pairs(g)
    return c.pair_line_bits * p, BLOCK_PAYLOAD_BITS * (c.blocks_per_pair * p - g.am_blocks)


def line_bits_of_stream(n_stream_bits: int, rate: str | RateGeometry = "400G", code: str = "kp4") -> int:
    """Line bits that carry ``n_stream_bits``, rounded up (:func:`line_bits_ratio`)."""
    num, den = line_bits_ratio(rate, code)
    return -(-int(n_stream_bits) * num // den)


def line_bits(payload_bits: int, rate: str | RateGeometry = "400G", cfg: FramingConfig = FramingConfig(),
              code: str = "kp4") -> int:
    """Line bits a message of ``payload_bits`` costs on the wire (framing + PHY overhead of ``code``)."""
    return line_bits_of_stream(stream_bits(payload_bits, cfg), rate, code)


def line_time_ns(n_stream_bits: int, rate: str | RateGeometry = "400G", code: str = "kp4") -> float:
    """Serialisation time of ``n_stream_bits`` at the line rate of ``rate`` with ``code``, in ns
    (the same for every code: the MAC rate is fixed, the line rate carries the overhead)."""
    g = get_rate(rate)
    return line_bits_of_stream(n_stream_bits, g, code) / get_code(code).line_gbps(g)
