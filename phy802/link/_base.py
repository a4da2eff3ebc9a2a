"""Shared plumbing of the bit-exact and fast links: channels per lane, seeds, sparse line flips."""

from __future__ import annotations


import numpy as np
from numpy.typing import NDArray

from phy802.link import _kernels as _k
from phy802.channel import Channel, LaneChannels, Noiseless
from phy802.link.config import LinkConfig
from phy802.link.geometry import geometry
from phy802.link.counters import LinkCounters


def _as_lane_channels(channels, n_phys: int) -> tuple:
    if channels is None:
        return (Noiseless(),) * n_phys
    if isinstance(channels, LaneChannels):
        chans = channels.channels
    elif isinstance(channels, Channel):
        return (channels,) * n_phys
    else:
        chans = tuple(channels)
    if len(chans) != n_phys:
        raise ValueError(f"need one channel per physical lane ({n_phys}), got {len(chans)}")
    for i, c in enumerate(chans):
        if not isinstance(c, Channel):
            raise TypeError(f"channel {i} ({type(c).__name__}) lacks apply/sample_symbol_errors")
    return tuple(chans)


def _seed_sequence(seed) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if seed is None or isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0 or a numpy SeedSequence, got {seed!r}")
    return np.random.SeedSequence(int(seed))


def _sorted_unique(a: NDArray[np.int64]):
    """``(values, first_index, counts)`` of a *sorted* array (cheaper than ``np.unique``)."""
    if a.size == 0:
        e = np.zeros(0, np.int64)
        return a[:0], e, e
    start = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    counts = np.diff(np.append(start, a.size))
    return a[start], start, counts


def _neighbours(pos: NDArray[np.int64], n_sym: int) -> NDArray[np.int64]:
    """Sorted union of ``pos``, ``pos - 1`` and ``pos + 1`` inside ``[0, n_sym)``."""
    U = np.sort(np.concatenate([pos - 1, pos, pos + 1]))
    U = _sorted_unique(U)[0]
    return U[(U >= 0) & (U < n_sym)]


def _flips(pos, sent_at, recv_at, n_sym: int, precoded: bool, init: int, neighbour_sent=None):
    """Wrong physical-lane bit positions for sparse line errors (see :func:`phy802.link._kernels.line_flips`).

    ``sent_at``/``recv_at`` are the levels at ``pos``; ``neighbour_sent(U)`` gives the sent levels
    at the non-error neighbours (precoded case only).
    """
    if pos.size == 0:
        return np.zeros(0, np.int64)
    if precoded:
        U = _neighbours(pos, n_sym)
        is_err = np.isin(U, pos, assume_unique=True)
        sent = np.empty(U.size, np.uint8)
        recv = np.empty(U.size, np.uint8)
        sent[is_err] = sent_at
        recv[is_err] = recv_at
        others = U[~is_err]
        nb = neighbour_sent(others)
        sent[~is_err] = nb
        recv[~is_err] = nb
    else:
        U, is_err, sent, recv = pos, np.ones(pos.size, np.bool_), sent_at, recv_at
    out = np.empty(4 * U.size + 4, np.int64)
    m = _k.line_flips(np.ascontiguousarray(U, np.int64), np.ascontiguousarray(sent, np.uint8),
                      np.ascontiguousarray(recv, np.uint8), is_err, n_sym, bool(precoded), int(init), out)
    return out[:m]


# ------------------------------------------------------------------------------------- the link


class _Base:
    def __init__(self, config: LinkConfig, channels=None) -> None:
        if not isinstance(config, LinkConfig):
            raise TypeError(f"config must be a LinkConfig, got {type(config).__name__}")
        self.config = config
        self.geometry = geometry(config)
        self.channels = _as_lane_channels(channels, self.geometry.n_phys)
        self._gather64 = np.ascontiguousarray(self.geometry.gather, np.int64)

    def _new_counters(self) -> LinkCounters:
        g = self.geometry
        return LinkCounters.empty(g.n, g.n_phys, g.n_pcsl, self.config.data_symbols)

    def _locate(self, lane: int, q: NDArray[np.int64]):
        """Physical lane bits -> (PCS lane L, PCS-lane bit u, codeword c = 2 p + X, symbol t, bit b)."""
        g = self.geometry
        m = q.size
        L, u, c, t, b = (np.empty(m, np.int64) for _ in range(5))
        _k.locate(np.ascontiguousarray(q, np.int64), int(lane), g.order, self._gather64, g.n, g.K, L, u, c, t, b)
        return L, u, c, t, b

    def _line_counts(self, ctr: LinkCounters, per_lane) -> tuple:
        """Fill the pre-FEC counters from per-lane (n_line_errors, flips); return flat (L, u, c, t, b)."""
        g = self.geometry
        parts = []
        for i, (n_err, q) in enumerate(per_lane):
            ctr.lane_symbol_errors[i] += n_err
            ctr.lane_bit_errors[i] += q.size
            if q.size:
                parts.append(self._locate(i, q))
        if parts:
            L, u, c, t, b = (np.concatenate(x) for x in zip(*parts))
        else:
            L = u = c = t = b = np.zeros(0, np.int64)
        ctr.bit_errors += int(L.size)
        ctr.pcs_lane_bit_errors += np.bincount(L, minlength=g.n_pcsl).astype(np.int64)
        return L, u, c, t, b

    @staticmethod
    def _symbol_errors(c, t, b, n: int):
        """Unique wrong symbols: (key = c n + t sorted, XOR error value)."""
        if c.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.uint16)
        kb = np.sort((c.astype(np.int64) * n + t) << 4 | b)  # one sort of (symbol, bit) keys
        key, val = kb >> 4, np.int64(1) << (kb & 15)
        ukey, start, _ = _sorted_unique(key)
        return ukey, np.bitwise_or.reduceat(val, start).astype(np.uint16)  # distinct bits: OR == XOR

    def _count_llr(self, ctr: LinkCounters, flagged_words) -> None:
        """``llr`` mode: one link-level retry per codeword pair holding a flagged codeword."""
        if self.config.fec == "llr" and self.config.decoder is not None and len(flagged_words):
            ctr.llr_retries += int(np.unique(np.asarray(flagged_words, np.int64) // 2).size)

    def _pre_symbol_counts(self, ctr: LinkCounters, ukey, n_words: int):
        g = self.geometry
        c, t = ukey // g.n, ukey % g.n
        w = np.bincount(c, minlength=n_words)
        ctr.hist += np.bincount(w, minlength=g.n + 1)[: g.n + 1].astype(np.int64)
        ctr.symbol_errors += int(ukey.size)
        ctr.pcs_lane_symbol_errors += np.bincount(g.lane_of[c % 2, t], minlength=g.n_pcsl).astype(np.int64)
        return w
