"""Alignment markers of the 400GBASE-R / 200GBASE-R PCS (119.2.4.4) and their lock/deskew.

Marker format (Table 119-2): 15 octets ``CM0 CM1 CM2 UP0 CM3 CM4 CM5 UP1 UM0 UM1 UM2 UP2 UM3
UM4 UM5``, sent in that order, each octet LSB first, i.e. 120 bits = twelve 10-bit symbols
(symbol bit 0 sent first).  The table below is the 400G table; at import the invariants of the
notes (common CM, ``UM3..5 == ~UM0..2``, ``UP2 == ~UP1``) are asserted.

AM group (one per ``am_spacing`` 257b blocks, at the start of a codeword pair):
``[ am_txmapped (n_lanes*120 bits) | PRBS9 pad (133 / 65 bits) | tx_am_sf<0>, <1>, <2> ]`` =
2056 bits (400G, 8 x 257b) or 1028 bits (200G, 4 x 257b).

Choices for open points of the notes ([?]/[I]), all documented and configurable through
:class:`phy802.pcs.PcsConfig`:

* **200G marker values** (Table 119-1 not at hand): default = the 400G lanes 0..7
  (``am_lanes_200g``); a complete custom table can be given instead (``am_table``).
* **PRBS9 pad**: x^9 + x^5 + 1, Fibonacci form, output ``state[8]``, feedback
  ``state[8] ^ state[4]`` into ``state[0]``; integer seed bit ``i`` = ``state[i]``; default seed
  all ones (0x1FF); it runs on across AM groups.  This reproduces the AM-group bits of an
  independent public implementation (see ``tests/unit/pcs/test_alignment.py``).
* **Status bits**: placed after the pad, ``tx_am_sf<0>`` first.  Per-bit meanings are not
  modelled; the value is carried as an opaque 3-bit field and reported at the receiver.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
from numpy.typing import NDArray

from phy802.clause119 import pcs_lanes
from phy802.pcs import _kernels as _k

__all__ = [
    "AM_400G_OCTETS", "check_am_table", "am_table", "am_bits", "am_symbols", "am_mapping",
    "prbs9", "am_group_bits", "am_group_len", "pad_len", "find_markers", "LaneLock", "lock_lanes",
    "LockError",
]

# Table 119-2 (400GBASE-R); rows = PCS lanes 0..15, columns UP0, UP1, UM0..2, UP2, UM3..5.
_CM = (0x9A, 0x4A, 0x26, 0x65, 0xB5, 0xD9)
_UNIQUE_400G = (
    (0xB6, 0xD9, 0x01, 0x71, 0xF3, 0x26, 0xFE, 0x8E, 0x0C),
    (0x04, 0x67, 0x5A, 0xDE, 0x7E, 0x98, 0xA5, 0x21, 0x81),
    (0x46, 0xFE, 0x3E, 0xF3, 0x56, 0x01, 0xC1, 0x0C, 0xA9),
    (0x5A, 0x84, 0x86, 0x80, 0xD0, 0x7B, 0x79, 0x7F, 0x2F),
    (0xE1, 0x19, 0x2A, 0x51, 0xF2, 0xE6, 0xD5, 0xAE, 0x0D),
    (0xF2, 0x4E, 0x12, 0x4F, 0xD1, 0xB1, 0xED, 0xB0, 0x2E),
    (0x3D, 0xEE, 0x42, 0x9C, 0xA1, 0x11, 0xBD, 0x63, 0x5E),
    (0x22, 0x32, 0xD6, 0x76, 0x5B, 0xCD, 0x29, 0x89, 0xA4),
    (0x60, 0x9F, 0xE1, 0x73, 0x75, 0x60, 0x1E, 0x8C, 0x8A),
    (0x6B, 0xA2, 0x71, 0xC4, 0x3C, 0x5D, 0x8E, 0x3B, 0xC3),
    (0xFA, 0x04, 0x95, 0xEB, 0xD8, 0xFB, 0x6A, 0x14, 0x27),
    (0x6C, 0x71, 0x22, 0x66, 0x38, 0x8E, 0xDD, 0x99, 0xC7),
    (0x18, 0x5B, 0xA2, 0xF6, 0x95, 0xA4, 0x5D, 0x09, 0x6A),
    (0x14, 0xCC, 0x31, 0x97, 0xC3, 0x33, 0xCE, 0x68, 0x3C),
    (0xD0, 0xB1, 0xCA, 0xFB, 0xA6, 0x4E, 0x35, 0x04, 0x59),
    (0xB4, 0x56, 0xA6, 0xBA, 0x79, 0xA9, 0x59, 0x45, 0x86),
)


def _row(u: Sequence[int]) -> bytes:
    up0, up1, um0, um1, um2, up2, um3, um4, um5 = u
    return bytes([*_CM[:3], up0, *_CM[3:], up1, um0, um1, um2, up2, um3, um4, um5])


#: the 16 x 15 marker octets of Table 119-2 in sending order
AM_400G_OCTETS: tuple[bytes, ...] = tuple(_row(u) for u in _UNIQUE_400G)


def check_am_table(table: Sequence[bytes]) -> None:
    """Raise ValueError unless every row is 15 octets with the common CM (= 100G lane-6 marker),
    ``UM3..5 == ~UM0..2``, ``UP2 == ~UP1``, and all rows are distinct (notes section 9.1)."""
    rows = [bytes(r) for r in table]
    for i, r in enumerate(rows):
        if len(r) != 15:
            raise ValueError(f"AM table row {i}: expected 15 octets, got {len(r)}")
        if (r[0], r[1], r[2], r[4], r[5], r[6]) != _CM:
            raise ValueError(f"AM table row {i}: common marker octets differ from 9A4A26/65B5D9")
        if any(r[12 + k] != (~r[8 + k] & 0xFF) for k in range(3)):
            raise ValueError(f"AM table row {i}: UM3..5 != ~UM0..2")
        if r[11] != (~r[7] & 0xFF):
            raise ValueError(f"AM table row {i}: UP2 != ~UP1")
    if len(set(rows)) != len(rows):
        raise ValueError("AM table rows are not distinct")


check_am_table(AM_400G_OCTETS)  # import-time invariant (notes section 9.1)


def am_table(rate: str = "400G", lanes_200g: Sequence[int] = tuple(range(8)),
             custom: Sequence[bytes] | None = None) -> tuple[bytes, ...]:
    """The marker table in use: 16 rows for 400G; 8 for 200G (default: 400G rows 0..7, a [?]
    choice), or ``custom`` rows (checked)."""
    n = pcs_lanes(rate)
    if custom is not None:
        rows = tuple(bytes(r) for r in custom)
    elif rate == "400G":
        rows = AM_400G_OCTETS
    else:
        if len(lanes_200g) != 8 or any(not 0 <= int(i) < 16 for i in lanes_200g):
            raise ValueError(f"am_lanes_200g must be 8 indices into the 400G table, got {lanes_200g!r}")
        rows = tuple(AM_400G_OCTETS[int(i)] for i in lanes_200g)
    if len(rows) != n:
        raise ValueError(f"{rate} needs {n} marker rows, got {len(rows)}")
    check_am_table(rows)
    return rows


def am_bits(table: Sequence[bytes]) -> NDArray[np.uint8]:
    """``uint8[n_lanes, 120]`` marker bits in sending order (each octet LSB first)."""
    a = np.frombuffer(b"".join(bytes(r) for r in table), np.uint8).reshape(len(table), 15)
    return np.unpackbits(a, axis=1, bitorder="little")


def am_symbols(table: Sequence[bytes]) -> NDArray[np.uint16]:
    """``uint16[n_lanes, 12]``: each marker as twelve 10-bit symbols (first bit = symbol bit 0)."""
    b = am_bits(table).reshape(len(table), 12, 10).astype(np.uint16)
    return (b << np.arange(10, dtype=np.uint16)).sum(axis=2).astype(np.uint16)


@lru_cache(maxsize=None)
def am_mapping(n_lanes: int) -> NDArray[np.intp]:
    """Index map of am_txmapped: ``field[i] = am_bits.ravel()[map[i]]`` (119.2.4.4).

    For symbol s and lane pair p: ``field[S s + 20p + b] = AM_{2p + (s mod 2)}[10s + b]`` and
    ``field[S s + 20p + 10 + b] = AM_{2p + 1 - (s mod 2)}[10s + b]`` with ``S = 10 n_lanes``.
    With the 119.2.4.7 interleave this puts lane L's marker first on PCS lane L.
    """
    m = np.empty(n_lanes * 120, np.intp)
    S = 10 * n_lanes
    b = np.arange(10)
    for s in range(12):
        for p in range(n_lanes // 2):
            m[S * s + 20 * p + b] = (2 * p + s % 2) * 120 + 10 * s + b
            m[S * s + 20 * p + 10 + b] = (2 * p + 1 - s % 2) * 120 + 10 * s + b
    m.setflags(write=False)
    return m


def pad_len(n_lanes: int) -> int:
    """PRBS9 pad bits per AM group: 133 (400G), 65 (200G)."""
    return am_group_len(n_lanes) - 120 * n_lanes - 3


def am_group_len(n_lanes: int) -> int:
    """Bits per AM group: 2056 (16 lanes) or 1028 (8 lanes), i.e. n_lanes/2 257b blocks."""
    return 257 * (n_lanes // 2)


def prbs9(n: int, seed: int = 0x1FF) -> tuple[NDArray[np.uint8], int]:
    """``n`` bits of PRBS9 x^9 + x^5 + 1 (Fibonacci; output ``state[8]``, feedback
    ``state[8] ^ state[4]`` into ``state[0]``).  Returns ``(bits, next_state)``."""
    if not 0 < seed < 512:
        raise ValueError(f"PRBS9 seed must be a nonzero 9-bit value, got {seed}")
    per, states = _prbs9_period(int(seed))
    bits = np.resize(per, n) if n else np.empty(0, np.uint8)
    return bits, int(states[n % 511])


@lru_cache(maxsize=64)
def _prbs9_period(seed: int) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """One period (511 bits) and the state before each bit; computed once per seed, then tiled."""
    per = np.empty(511, np.uint8)
    states = np.empty(512, np.int64)
    st = seed
    for i in range(511):
        states[i] = st
        per[i] = (st >> 8) & 1
        st = ((st << 1) | (((st >> 8) ^ (st >> 4)) & 1)) & 0x1FF
    states[511] = st
    per.setflags(write=False)
    return per, states


@lru_cache(maxsize=16)
def _field(table: tuple[bytes, ...]) -> NDArray[np.uint8]:
    """am_txmapped bits of a marker table (cached)."""
    f = am_bits(table).ravel()[am_mapping(len(table))]
    f.setflags(write=False)
    return f


def am_group_bits(table: Sequence[bytes], n_groups: int, prbs9_seed: int = 0x1FF,
                  status: int = 0) -> NDArray[np.uint8]:
    """``uint8[n_groups, group_len]`` bits of consecutive AM groups (the pad runs on)."""
    n_lanes = len(table)
    if not 0 <= status < 8:
        raise ValueError(f"am_status must be a 3-bit value, got {status}")
    field = _field(tuple(bytes(r) for r in table))
    npad = pad_len(n_lanes)
    pad, _ = prbs9(npad * n_groups, prbs9_seed)
    out = np.empty((n_groups, am_group_len(n_lanes)), np.uint8)
    out[:, : 120 * n_lanes] = field
    out[:, 120 * n_lanes: 120 * n_lanes + npad] = pad.reshape(n_groups, npad)
    out[:, -3:] = [(status >> i) & 1 for i in range(3)]
    return out


# ---------------------------------------------------------------------------------------------
# Receive: lane lock and deskew (119.2.5.1-3, simplified: first marker within a symbol tolerance)

class LockError(ValueError):
    """PCS lanes could not be locked/deskewed from the alignment markers."""


def _match(win: NDArray[np.uint16], am_syms: NDArray[np.uint16], tol: int):
    """Best marker for each 12-symbol window: ``(hit, lane)`` where hit means at most ``tol``
    symbols differ from that lane's marker and no other lane is as close."""
    miss = (win[:, None, :] != am_syms[None, :, :]).sum(axis=2)  # [cand, lanes]
    best = miss.argmin(axis=1)
    m = miss[np.arange(miss.shape[0]), best]
    unique = (miss == m[:, None]).sum(axis=1) == 1
    return (m <= tol) & unique, best


def _candidates(v: NDArray[np.uint16], stride: int, am_syms: NDArray[np.uint16]) -> NDArray[np.intp]:
    """Offsets where at least two of the common symbols 0, 1, 4 are present."""
    n = v.size - 11 * stride
    if n <= 0:
        return np.empty(0, np.intp)
    c = ((v[:n] == am_syms[0, 0]).astype(np.int8) + (v[stride:n + stride] == am_syms[0, 1])
         + (v[4 * stride:n + 4 * stride] == am_syms[0, 4]))
    return np.flatnonzero(c >= 2)


def find_markers(symbols: NDArray[np.uint16], am_syms: NDArray[np.uint16], tol: int = 3,
                 stride: int = 1) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Positions where a 12-symbol marker starts in one lane's stream and which lane's marker it
    is.  A window matches when at most ``tol`` of its 12 symbols differ from exactly one lane's
    marker (so markers hit by a few line errors still lock; [?] the standard's exact rule is not
    modelled).  ``stride`` = distance between consecutive symbols in ``symbols`` (10 when
    ``symbols`` holds the 10-bit value at every bit offset).  Vectorised."""
    s = np.asarray(symbols)
    cand = _candidates(s, stride, am_syms)
    if cand.size == 0:
        return cand, cand
    win = s[cand[:, None] + stride * np.arange(12)]
    hit, who = _match(win, am_syms, tol)
    return cand[hit], who[hit]


@dataclass(frozen=True)
class LaneLock:
    """Outcome of lane lock/deskew.

    ``lane_of_input[r]``: PCS lane number carried by input row r; ``offset[r]``: where (in the
    input's units, symbols or bits) the deskewed stream of row r starts; ``skew[r]`` = offset -
    min(offset); ``n_symbols``: common length per lane kept (whole codeword pairs).
    """

    lane_of_input: NDArray[np.intp]
    offset: NDArray[np.int64]
    skew: NDArray[np.int64]
    n_symbols: int
    unit: str


def _bit_symbols(bits: NDArray[np.uint8]) -> NDArray[np.uint16]:
    """10-bit value starting at every bit offset (vectorised)."""
    n = bits.size - 9
    if n <= 0:
        return np.empty(0, np.uint16)
    v = np.zeros(n, np.uint16)
    for b in range(10):
        v |= bits[b:b + n].astype(np.uint16) << b
    return v


def lock_lanes(lanes, am_syms: NDArray[np.uint16], period_symbols: int, symbols_per_pair: int,
               tol: int = 3, *, _view_ok: bool = False) -> tuple[NDArray[np.uint16], LaneLock]:
    """Find every lane's marker, reorder lanes by marker identity and remove skew.

    Parameters
    ----------
    lanes : ``uint16[n_rows, n]`` 10-bit symbols (skew in whole symbols), or a sequence of
        ``uint8`` bit arrays, one per lane, any lengths (skew in bits, symbol boundary unknown).
        Rows are sampled at the same time: element i of every row arrived together.  Markers are
        searched in the first two marker periods of each row; the scan stops at the first match.
    am_syms : ``[n_lanes, 12]`` marker symbols.
    period_symbols : marker period on one lane, in symbols.
    tol : symbols of a marker allowed to differ (see :func:`find_markers`).

    Returns ``(aligned uint16[n_lanes, n_symbols], LaneLock)``; row L of ``aligned`` is PCS lane L
    starting with its marker (a new array; with the private ``_view_ok`` the receiver accepts a
    read-only-use view of ``lanes`` when they need no reordering or deskew).  Raises
    :class:`LockError` when a lane has no marker, a marker is seen twice, or a lane is missing.
    """
    n_lanes = am_syms.shape[0]
    rows = list(lanes)
    bitmode = all(np.asarray(r).dtype in (np.uint8, np.bool_) for r in rows)
    if len(rows) != n_lanes:
        raise LockError(f"expected {n_lanes} PCS lanes, got {len(rows)}")
    unit = "bits" if bitmode else "symbols"
    scale = 10 if bitmode else 1
    period = period_symbols * scale
    # Scan each row only up to its first marker (a Numba scan that stops at the first match);
    # the marker of the common group is then taken at +/- whole periods.
    if not bitmode and any(np.asarray(r).dtype.kind not in "ui" for r in rows):
        raise LockError("lane symbols must be an integer array (uint16 10-bit symbols) or uint8 bits")
    # (10-bit range of a 2-D symbol array: checked during de-interleaving, in the same pass)
    am = np.ascontiguousarray(am_syms, dtype=np.int64)
    found, streams, vals_of = [], [], []
    for r, row in enumerate(rows):
        row = np.asarray(row)
        if bitmode:
            if row.ndim != 1 or (row.size and row.max() > 1):
                raise LockError(f"lane row {r}: bit mode expects a 1-D array of 0/1 values")
            vals = _bit_symbols(row[: 2 * period + 120].astype(np.uint8))
            stride = 10
        else:
            if row.ndim != 1 or not isinstance(lanes, np.ndarray) and row.max(initial=0) > 1023:
                raise LockError(f"lane row {r}: expected 1-D 10-bit symbols (< 1024)")
            vals, stride = row, 1
        o, lane = _k.first_marker(vals, 0, 2 * period, stride, am, tol)
        if o < 0:
            raise LockError(f"lane row {r} never locked: no alignment marker in "
                            f"{min(row.size, 2 * period + 12 * scale)} {unit}")
        found.append((o, lane))
        streams.append(row)
        vals_of.append((vals, stride))
    tmax = max(o for o, _ in found)
    off = np.empty(len(rows), np.int64)
    lane_of = np.empty(len(rows), np.intp)
    for r, (o, lane) in enumerate(found):
        # rows are sampled together: use the marker of the same group as the latest first marker
        if tmax - o > period // 2:
            vals, stride = vals_of[r]
            o2, lane2 = _k.first_marker(vals, o + period - period // 2, o + period + period // 2, stride, am, tol)
            if o2 < 0 or abs(o2 - tmax) > period // 2:
                raise LockError(f"lane row {r}: no marker within half a marker period of the others "
                                f"(skew too large or lane lost)")
            o, lane = o2, lane2
        off[r] = o
        lane_of[r] = lane
    if len(set(lane_of.tolist())) != n_lanes:
        dup = sorted({int(x) for x in lane_of if (lane_of == x).sum() > 1})
        raise LockError(f"PCS lane marker(s) {dup} seen on more than one input row; "
                        f"missing lanes {sorted(set(range(n_lanes)) - set(lane_of.tolist()))}")
    avail = min((len(s) - o) // scale for s, o in zip(streams, off.tolist()))
    nsym = (avail // symbols_per_pair) * symbols_per_pair
    if nsym == 0:
        raise LockError(f"lanes hold less than one codeword pair ({symbols_per_pair} symbols per lane) "
                        f"after the first alignment marker")
    lock = LaneLock(lane_of, off, off - off.min(), nsym, unit)
    if _view_ok and not bitmode and isinstance(lanes, np.ndarray) and lanes.ndim == 2 \
            and (lane_of == np.arange(n_lanes)).all() and (off == off[0]).all():
        # lanes already in order and without skew: a view (for the receiver, which only reads it)
        return lanes[:, int(off[0]): int(off[0]) + nsym], lock
    out = np.empty((n_lanes, nsym), np.uint16)
    for r, s in enumerate(streams):
        o = int(off[r])
        if bitmode:
            b = np.asarray(s[o:o + 10 * nsym], np.uint16).reshape(nsym, 10)
            out[lane_of[r]] = (b << np.arange(10, dtype=np.uint16)).sum(axis=1)
        else:
            out[lane_of[r]] = s[o:o + nsym]
    return out, lock
