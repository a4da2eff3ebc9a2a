"""Reading a trace as a stream of errors: :class:`TraceCursor` (a position in a file, the
:class:`~protocol.source.ErrorSource` the bypass-FEC layer consumes; alias ``TraceSource``),
:func:`open_source`, and :class:`LiveSource`: the same stream drawn live from the fast generator,
no file (:class:`LiveWindow` is the windowing both live sources share).
"""

from __future__ import annotations

import os

import numpy as np

from ..source import ErrorChunk, empty_chunk
from .format import TraceChunk, TraceError, TraceReader

__all__ = [
    "TraceCursor",
    "TraceSource",
    "LiveSource",
    "LiveWindow",
    "open_source",
]


class TraceCursor:
    """A position in a trace: ``take(n_bits)`` returns the next window's flipped-bit offsets.

    Parameters
    ----------
    reader : an open :class:`TraceReader` (or a path).
    start : first stream bit (default 0).
    wrap : at the end of the trace, continue from bit 0 (default True) or raise ``EOFError``.
    """

    def __init__(self, reader: TraceReader | str | os.PathLike, *, start: int = 0, wrap: bool = True) -> None:
        self.reader = reader if isinstance(reader, TraceReader) else TraceReader(reader)
        total = self.reader.stream_bits
        if total <= 0:
            raise TraceError(f"{self.reader.path}: empty trace (0 stream bits)")
        if not 0 <= int(start) < total:
            raise ValueError(f"start must be in [0, {total}), got {start}")
        self.pos = int(start)
        self.wrap = bool(wrap)
        self.wraps = 0
        self._cached: TraceChunk | None = None

    @property
    def meta(self) -> dict:
        return self.reader.meta

    def _chunk_at(self, pos: int) -> TraceChunk:
        c = self._cached
        if c is not None and c.stream_start <= pos < c.stream_end:
            return c
        i = int(np.searchsorted(self.reader.index[:, 1], pos, side="right"))
        c = self._cached = self.reader.chunk(i)
        return c

    def take_chunk(self, n_bits: int) -> ErrorChunk:
        """The next ``n_bits`` stream bits, with lanes, flags and marks; advances the cursor."""
        n_bits = int(n_bits)
        if n_bits < 0:
            raise ValueError(f"n_bits must be >= 0, got {n_bits}")
        total = self.reader.stream_bits
        offs, lanes, flags, marks = [], [], [], []
        done = 0
        while done < n_bits:
            if self.pos >= total:
                if not self.wrap:
                    raise EOFError(f"{self.reader.path}: trace exhausted after {total} stream bits")
                self.pos = 0
                self.wraps += 1
            c = self._chunk_at(self.pos)
            hi = min(c.stream_end, self.pos + (n_bits - done))
            a = int(np.searchsorted(c.offsets, self.pos, side="left"))
            b = int(np.searchsorted(c.offsets, hi, side="left"))
            shift = done - self.pos
            offs.append(c.offsets[a:b] + shift)
            lanes.append(c.lanes[a:b])
            flags.append(c.flags[a:b])
            if c.marks.size:
                sel = (c.marks[:, 1] > self.pos) & (c.marks[:, 0] < hi)
                m = np.clip(c.marks[sel], self.pos, hi) + shift
                marks.append(m)
            done += hi - self.pos
            self.pos = hi
        if not offs:
            return empty_chunk(n_bits)
        return ErrorChunk(
            n_bits,
            np.concatenate(offs),
            np.concatenate(lanes),
            np.concatenate(flags),
            np.concatenate(marks) if marks else np.empty((0, 2), np.int64),
        )

    def take(self, n_bits: int) -> np.ndarray:
        """Sorted int64 offsets in ``[0, n_bits)`` of the flipped bits of the next window."""
        return self.take_chunk(n_bits).offsets


TraceSource = TraceCursor


def open_source(path: str | os.PathLike, *, seed=None, start: int | None = None, wrap: bool = True) -> TraceCursor:
    """An :class:`ErrorSource` reading ``path``.

    ``start`` gives the first stream bit; with ``seed`` instead (int or SeedSequence), the start
    is drawn uniformly from the trace so that several links replaying one file do not see the
    same errors at the same time.  Default: bit 0.
    """
    reader = TraceReader(path)
    if start is None:
        if seed is None:
            start = 0
        else:
            from phy802._rng import as_generator

            start = int(as_generator(seed).integers(0, reader.stream_bits))
    return TraceCursor(reader, start=start, wrap=wrap)


class LiveWindow:
    """Cursor-based window over a live generator's chunks (the ``take`` / ``take_chunk`` half of
    :class:`LiveSource` and :class:`protocol.trace.inner.ConcatLiveSource`).

    A subclass sets :meth:`_start_window` up and implements :meth:`_next_chunk`, which returns the
    generator's next chunk as ``(stream_end, offsets, lanes, flags, marks)`` (absolute, sorted,
    starting where the previous one ended).  The chunks depend only on the generator's seed and
    settings, so what ``take`` returns depends only on the cursor, never on how the stream is cut
    into calls (``integration.sources.BufferedLink`` relies on it).
    """

    def _start_window(self) -> None:
        self.cursor = 0
        self._end = 0
        self._off = np.empty(0, np.int64)
        self._lane = np.empty(0, np.int8)
        self._flag = np.empty(0, np.uint8)
        self._marks = np.empty((0, 2), np.int64)

    def _next_chunk(self, need_bits: int) -> tuple:  # pragma: no cover - abstract
        raise NotImplementedError

    def take_chunk(self, n_bits: int) -> ErrorChunk:
        n_bits = int(n_bits)
        if n_bits < 0:
            raise ValueError(f"n_bits must be >= 0, got {n_bits}")
        a, b = self.cursor, self.cursor + n_bits
        parts = [(self._off, self._lane, self._flag, self._marks)]
        while self._end < b:
            end, *part = self._next_chunk(b - self._end)
            self._end = int(end)
            parts.append(tuple(part))
        off = np.concatenate([p[0] for p in parts])
        lane = np.concatenate([p[1] for p in parts])
        flag = np.concatenate([p[2] for p in parts])
        mk = np.concatenate([p[3] for p in parts])
        k = int(np.searchsorted(off, b, side="left"))
        keep = mk[:, 1] > b
        sel = mk[:, 0] < b
        out_marks = np.clip(mk[sel], a, b) - a
        out = ErrorChunk(n_bits, off[:k] - a, lane[:k], flag[:k], out_marks[out_marks[:, 1] > out_marks[:, 0]])
        self._off, self._lane, self._flag, self._marks = off[k:], lane[k:], flag[k:], mk[keep]
        self.cursor = b
        return out

    def take(self, n_bits: int) -> np.ndarray:
        return self.take_chunk(n_bits).offsets


class LiveSource(LiveWindow):
    """An :class:`ErrorSource` backed by the live :class:`~protocol.trace.fast.FastGenerator`.

    Parameters
    ----------
    rate, fec, ber, burst_pb, lane_weights, code : as :class:`~protocol.trace.config.GeneratorConfig`
        (pre-FEC line BER; ``code`` kp4, rs272 or none).
    seed : explicit seed.
    """

    def __init__(self, rate: str = "400G", fec: str = "bypass", ber: float = 1e-5, *, seed, chunk_pairs: int = 4096,
                 burst_pb: float | None = None, lane_weights=None, code: str = "kp4") -> None:
        from .config import GeneratorConfig
        from .fast import FastGenerator

        self.cfg = GeneratorConfig(rate, fec, ber, burst_pb, lane_weights, code)
        self.gen = FastGenerator(self.cfg, seed)
        self._chunk_pairs = int(chunk_pairs)
        self._start_window()

    def _next_chunk(self, need_bits: int) -> tuple:
        need = -(-need_bits // 10240) + 1
        ch = self.gen.next_chunk(max(self._chunk_pairs, need))
        return ch.stream_end, ch.offsets, ch.lanes, ch.flags, ch.marks
