"""The trace file format: :class:`TraceWriter` and :class:`TraceReader` (cursors and sources over a file
are :mod:`protocol.trace.sources`, sharded generation :mod:`protocol.trace.sharded`).

A trace is the payload error pattern of one direction of a link: which bits of the PCS payload
stream (:mod:`protocol.source`) were delivered flipped, the PCS lane each came from, per-error
flags, the ranges the MAC received as error blocks, and metadata (rate, FEC mode, channel, seed,
bits simulated, measured pre-/post-FEC BER with counts, project version).

File format (version 2; see ``protocol/trace/TRACE_FORMAT.md``)
---------------------------------------------------------
One file: a 16-byte header (``PHY802TR`` + version), the chunks (one varint-coded byte string
each: delta offsets with descrambler triples and a lane/flag byte only when it changes, then the
marks; ~1.5 bytes per flip), the index int64[n_chunks, 7] = ``(stream_start, stream_end,
n_flips, n_marks, byte_offset, byte_len, crc32)``, the UTF-8 JSON ``meta`` and a 48-byte trailer.
Written atomically; index, meta and trailer last, so a file cut short is reported as truncated.
Chunks are read one at a time (CRC-checked, then decoded and validated in one kernel pass), so a
trace of 1e15 bits never has to fit in memory.  Version-1 files (uncompressed ``.npz`` of raw
arrays) are still read, and validated by a kernel with the same rules.
"""

from __future__ import annotations

import json
import math
import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from phy802.runtime.output import atomic_open

from . import _kernels as TK

__all__ = [
    "FORMAT",
    "VERSION",
    "TRACE_SUFFIX",
    "TraceError",
    "encode_chunk",
    "TraceChunk",
    "TraceWriter",
    "TraceReader",
]


FORMAT = "phy802-trace"
VERSION = 2
READ_VERSIONS = (1, 2)

MAGIC = b"PHY802TR"
TRAILER_MAGIC = b"PHY802TE"
_HEADER = MAGIC + np.uint64(VERSION).tobytes()
_WRITEBACK_BYTES = 64 << 20  # start the write-back every 64 MiB written
_TRAILER_WORDS = 5  # index_offset, n_chunks, meta_offset, meta_len, crc32(index + meta)
_TRAILER_BYTES = 8 + 8 * _TRAILER_WORDS
INDEX_COLUMNS = ("stream_start", "stream_end", "n_flips", "n_marks", "byte_offset", "byte_len", "crc32")

_FIELD = {  # kernel error code -> (field, rule)
    TK.E_VARINT_TRUNCATED: ("data", "truncated varint"),
    TK.E_VARINT_LONG: ("data", "varint longer than 63 bits"),
    TK.E_OFFSET_RANGE: ("offsets", "offset outside the chunk's [stream_start, stream_end)"),
    TK.E_OFFSET_ORDER: ("offsets", "offsets not strictly increasing (unsorted or duplicate)"),
    TK.E_LANE: ("lanes", "lane outside 0..n_lanes-1"),
    TK.E_FLAGS: ("flags", "undefined flag bits (allowed: 0..3)"),
    TK.E_NO_LANE: ("lanes", "first flip record carries no lane"),
    TK.E_COUNT: ("n_flips", "more flips than the index says"),
    TK.E_MARK_RANGE: ("marks", "mark outside the chunk"),
    TK.E_MARK_ORDER: ("marks", "marks not sorted, disjoint, with end > start"),
    TK.E_TRAILING: ("data", "bytes left after the last mark (more flips or marks than the index says)"),
    TK.E_LANE_BYTE: ("lanes", "reserved bits set in a lane/flag byte"),
}


class TraceError(ValueError):
    """A trace file is missing, truncated, foreign, corrupt or of an unknown version."""


@dataclass(frozen=True)
class TraceChunk:
    """One stored chunk: absolute payload-stream offsets in ``[stream_start, stream_end)``."""

    index: int
    stream_start: int
    stream_end: int
    offsets: np.ndarray
    lanes: np.ndarray
    flags: np.ndarray
    marks: np.ndarray


def _member(i: int, what: str) -> str:
    return f"c{i:06d}_{what}.npy"


def _kernel_error(code: int) -> tuple[str, str, int]:
    c = -int(code)
    kind, where = c >> 40, c & ((1 << 40) - 1)
    field, rule = _FIELD.get(kind, ("data", f"error {kind}"))
    return field, rule, where


def encode_chunk(stream_start: int, stream_end: int, offsets, lanes, flags, marks=None, *,
                 n_lanes: int = 16, scratch: list | None = None) -> np.ndarray:
    """Version-2 bytes (uint8 array) of one chunk; ``ValueError`` naming the field on bad content.

    Offsets int64 strictly increasing in ``[stream_start, stream_end)``; lanes ``0..n_lanes-1``;
    flags ``0..3``; marks int64[m, 2] sorted disjoint non-empty ``[start, end)`` inside the chunk.
    ``scratch`` (a one-element list holding a reusable buffer) avoids a fresh allocation per call:
    the result is then a view into it, valid until the next call with the same scratch.
    """
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    ln = np.ascontiguousarray(lanes, dtype=np.int8)
    fl = np.ascontiguousarray(flags, dtype=np.uint8)
    mk = (np.empty((0, 2), np.int64) if marks is None
          else np.ascontiguousarray(np.asarray(marks, dtype=np.int64).reshape(-1, 2)))
    if not (off.ndim == ln.ndim == fl.ndim == 1 and off.size == ln.size == fl.size):
        raise ValueError("offsets, lanes and flags must be 1-D of equal length")
    need = 10 * (off.size + 2 * mk.shape[0]) + 16
    if scratch is None:
        out = np.empty(need, np.uint8)
    else:
        if scratch[0] is None or scratch[0].size < need:
            scratch[0] = np.empty(max(need, 2 * (0 if scratch[0] is None else scratch[0].size)), np.uint8)
        out = scratch[0]
    n = TK.encode_chunk(off, ln, fl, mk, np.int64(stream_start), np.int64(stream_end), np.int64(n_lanes), out)
    if n < 0:
        field, rule, where = _kernel_error(n)
        raise ValueError(f"chunk [{stream_start}, {stream_end}): field {field!r} entry {where}: {rule}")
    return out[:n]


def _encode_flips(off, ln, fl, end: int, n_lanes: int, *, prev: int, plf: int) -> np.ndarray:
    """The flip records alone (no marks), continuing after ``prev``/``plf`` (:func:`TK.encode_flips`)."""
    out = np.empty(10 * off.size + 16, np.uint8)
    n = TK.encode_flips(off, ln, fl, np.int64(end), np.int64(n_lanes), out, np.int64(0), np.int64(prev), np.int64(plf))
    if n < 0:
        field, rule, where = _kernel_error(n)
        raise ValueError(f"chunk ending at {end}: field {field!r} entry {where}: {rule}")
    return out[:n]


def _encode_marks(marks, start: int, end: int) -> np.ndarray:
    out = np.empty(20 * marks.shape[0] + 16, np.uint8)
    n = TK.encode_marks(np.ascontiguousarray(marks, dtype=np.int64).reshape(-1, 2), np.int64(start), np.int64(end),
                        out, np.int64(0))
    if n < 0:
        field, rule, where = _kernel_error(n)
        raise ValueError(f"chunk [{start}, {end}): field {field!r} entry {where}: {rule}")
    return out[:n]


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Start the disk write-back of ``length`` bytes from ``offset`` without waiting for it (Linux:
    DONTNEED on dirty pages queues them), so that the fsync at close, which makes the trace durable
    before it is renamed into place, has little left to wait for."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _no_flips() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Empty (offsets or keys, lanes, flags): e.g. no descrambler carry."""
    return np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.uint8)


#: the file name extension of a trace (format version 2); version-1 traces were ``.npz`` (still read)
TRACE_SUFFIX = ".trace"


class TraceWriter:
    """Write a version-2 trace chunk by chunk (atomically: the file appears only on :meth:`close`).

    Parameters
    ----------
    path : output file, named ``*.trace`` (:data:`TRACE_SUFFIX`; the reader goes by the content, so a
        version-1 ``.npz`` still reads, but the CLI refuses to write format 2 under an ``.npz`` name).
    meta : metadata dict (JSON-serialisable); ``format``/``version``/``stream_bits``/``n_chunks``
        are filled in at :meth:`close`, and ``close(extra)`` may add measured results.  Its
        ``n_lanes`` (default 16) bounds the lanes accepted.
    threaded : encode and write in a background thread (the encoder is a GIL-free kernel and
        file writes release the GIL), overlapping with whatever produces the chunks; at most
        ``queue_depth`` chunks wait.  Errors surface at the next call.

    Use as a context manager; an exception inside leaves no file behind.
    """

    def __init__(self, path: str | os.PathLike, meta: dict, *, threaded: bool = False, queue_depth: int = 2) -> None:
        self.path = Path(path)
        self.meta = dict(meta)
        self.n_lanes = int(self.meta.get("n_lanes", 16))
        self._ctx = atomic_open(self.path, "wb")
        self._fh = self._ctx.__enter__()
        self._fh.write(_HEADER)
        self._pos = len(_HEADER)
        self._flushed = 0  # bytes whose write-back has been started
        self._index: list[tuple[int, ...]] = []
        self._end = 0
        self._closed = False
        self._scratch: list = [None]  # encode buffer, used by the thread that encodes
        self._thread = None
        self._error: BaseException | None = None
        if threaded:
            import queue
            import threading

            self._q: "queue.Queue" = queue.Queue(maxsize=max(1, int(queue_depth)))
            self._thread = threading.Thread(target=self._drain, name="trace-writer", daemon=True)
            self._thread.start()

    # -- the writing end (this thread or the background one)
    def _emit(self, a: int, b: int, nf: int, nm: int, blob: np.ndarray, crc: int | None = None) -> None:
        crc = zlib.crc32(blob) if crc is None else crc
        self._fh.write(memoryview(blob))
        self._index.append((a, b, nf, nm, self._pos, int(blob.size), crc))
        self._pos += int(blob.size)
        self._writeback()

    def _writeback(self) -> None:
        if self._pos - self._flushed >= _WRITEBACK_BYTES:
            self._fh.flush()
            _start_writeback(self._fh.fileno(), self._flushed, self._pos - self._flushed)
            self._flushed = self._pos

    def _drain(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    kind, args = item
                    if kind == "raw":
                        a, b, off, ln, fl, mk = args
                        blob = self._encode(a, b, off, ln, fl, mk)
                        self._emit(a, b, int(off.size), int(mk.shape[0]), blob)
                    else:
                        self._emit(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the producer at its next call
                self._error = exc
            finally:
                self._q.task_done()

    def _encode(self, a, b, off, ln, fl, mk) -> np.ndarray:
        try:
            return encode_chunk(a, b, off, ln, fl, mk, n_lanes=self.n_lanes, scratch=self._scratch)
        except ValueError as exc:
            raise ValueError(f"{self.path}: {exc}") from None

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _continue(self, stream_start, stream_end) -> tuple[int, int]:
        if self._closed:
            raise ValueError(f"{self.path}: trace writer already closed")
        self._raise_pending()
        a, b = int(stream_start), int(stream_end)
        if a != self._end or b < a:
            raise ValueError(f"{self.path}: chunk [{a}, {b}) does not continue the trace at {self._end}")
        return a, b

    def write_chunk(self, stream_start: int, stream_end: int, offsets, lanes, flags, marks=None) -> None:
        """Append the chunk ``[stream_start, stream_end)``; it must start where the last ended."""
        a, b = self._continue(stream_start, stream_end)
        off = np.ascontiguousarray(offsets, dtype=np.int64)
        ln = np.ascontiguousarray(lanes, dtype=np.int8)
        fl = np.ascontiguousarray(flags, dtype=np.uint8)
        mk = (np.empty((0, 2), np.int64) if marks is None
              else np.ascontiguousarray(np.asarray(marks, dtype=np.int64).reshape(-1, 2)))
        if self._thread is not None:
            if not (off.ndim == ln.ndim == fl.ndim == 1 and off.size == ln.size == fl.size):
                raise ValueError(f"{self.path}: offsets, lanes and flags must be 1-D of equal length")
            self._q.put(("raw", (a, b, off, ln, fl, mk)))
        else:
            blob = self._encode(a, b, off, ln, fl, mk)
            self._emit(a, b, int(off.size), int(mk.shape[0]), blob)
        self._end = b

    def write_encoded(self, stream_start: int, stream_end: int, n_flips: int, n_marks: int, blob: np.ndarray,
                      crc: int | None = None) -> None:
        """Append a chunk already encoded by :func:`encode_chunk` (e.g. by a worker process, which
        may also pass the blob's ``zlib.crc32``)."""
        a, b = self._continue(stream_start, stream_end)
        blob = np.ascontiguousarray(blob, dtype=np.uint8)
        if self._thread is not None:
            self._q.put(("enc", (a, b, int(n_flips), int(n_marks), blob, crc)))
        else:
            self._emit(a, b, int(n_flips), int(n_marks), blob, crc)
        self._end = b

    @property
    def temp_path(self) -> str:
        """The file being written (renamed to ``path`` at :meth:`close`); other processes may write
        chunks into it at the offsets :meth:`add_written` then indexes."""
        return self._fh.name

    def add_written(self, rows) -> None:
        """Index chunks another process wrote into :attr:`temp_path`, right after the last chunk:
        ``rows`` lists ``(stream_start, stream_end, n_flips, n_marks, byte_offset, byte_len, crc)``
        in stream order, the first at the current end of the file, each following the last."""
        if self._thread is not None:
            raise ValueError(f"{self.path}: add_written needs an unthreaded writer")
        for a, b, nf, nm, off, nbytes, crc in rows:
            a, b = self._continue(a, b)
            if int(off) != self._pos or int(nbytes) < 0:
                raise ValueError(f"{self.path}: chunk [{a}, {b}) written at byte {off}, expected {self._pos}")
            self._index.append((a, b, int(nf), int(nm), int(off), int(nbytes), int(crc)))
            self._pos += int(nbytes)
            self._end = b
        self._fh.seek(self._pos)  # the index and meta go after them (flushes the header first)

    def _join(self) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join()
            self._thread = None

    def close(self, extra: dict | None = None) -> dict:
        """Write the index, ``meta`` and the trailer and move the file into place; returns the metadata."""
        if self._closed:
            return self.meta
        from phy802 import __version__

        self._join()
        self._raise_pending()
        meta = dict(self.meta)
        if extra:
            meta.update(extra)
        idx = np.asarray(self._index, dtype=np.int64).reshape(-1, len(INDEX_COLUMNS))
        meta.update(
            format=FORMAT,
            version=VERSION,
            project_version=meta.get("project_version", __version__),
            stream_bits=self._end,
            n_chunks=int(idx.shape[0]),
            n_flips=int(idx[:, 2].sum()),
            n_marks=int(idx[:, 3].sum()),
            encoded_bytes=int(idx[:, 5].sum()),
        )
        ib = idx.astype("<i8").tobytes()
        mb = json.dumps(meta, sort_keys=True).encode("utf-8")
        i_off = self._pos
        self._fh.write(ib)
        self._fh.write(mb)
        trailer = np.array([i_off, idx.shape[0], i_off + len(ib), len(mb), zlib.crc32(mb, zlib.crc32(ib))], "<u8")
        self._fh.write(TRAILER_MAGIC + trailer.tobytes())
        self._ctx.__exit__(None, None, None)
        self._closed = True
        self.meta = meta
        return meta

    def abort(self, exc: BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._join()
        finally:
            e = exc if exc is not None else RuntimeError("aborted")
            try:
                self._ctx.__exit__(type(e), e, None)
            except BaseException:  # noqa: BLE001 - atomic_open re-raises the cause; we only want cleanup
                pass

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, et, ev, tb) -> None:
        if et is None:
            self.close()
        else:
            self.abort(ev)


def _check_meta(path: Path, meta) -> dict:
    """Types of the metadata fields a reader relies on (``TraceError`` naming the field)."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TraceError(f"{path}: not a phy802 trace (format {meta.get('format') if isinstance(meta, dict) else None!r})")
    v = meta.get("version")
    if v not in READ_VERSIONS or isinstance(v, bool):
        raise TraceError(f"{path}: trace format version {v!r} is not supported (this reader: {', '.join(map(str, READ_VERSIONS))})")
    for key in ("stream_bits", "n_chunks"):
        x = meta.get(key)
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            raise TraceError(f"{path}: trace meta field {key!r} must be an int >= 0, got {x!r}")
    nl = meta.get("n_lanes", 16)
    if not isinstance(nl, int) or isinstance(nl, bool) or not 1 <= nl <= 16:
        raise TraceError(f"{path}: trace meta field 'n_lanes' must be an int in 1..16, got {nl!r}")
    _check_summary_fields(path, meta)
    _check_rate_and_inner(path, meta)
    return meta


def _check_rate_and_inner(path: Path, meta: dict) -> None:
    """``rate`` one phy802 models, and an 800G/1.6T trace's ``inner`` metadata (format 2.1) sound: a
    known inner code, counts and counters that are non-negative integers, rates that are probabilities
    with their counts (a tampered trailer with its CRC recomputed passes the CRC, not this)."""
    from phy802.link.concat import INNER_CODES, INNER_RATES

    from ..framing import RATES

    rate = meta.get("rate")
    if rate is not None and rate not in RATES and rate not in INNER_RATES:
        raise TraceError(f"{path}: trace meta field 'rate' is {json.dumps(rate)[:40]}, not a rate phy802 models "
                         f"({', '.join([*RATES, *INNER_RATES])})")
    inner = meta.get("inner")
    if inner is None:
        if rate in INNER_RATES:
            raise TraceError(f"{path}: trace meta field 'inner' is missing (a {rate} trace is format 2.1, with it)")
        return
    if rate not in INNER_RATES:
        raise TraceError(f"{path}: trace meta field 'inner' in a {rate or '400G'} trace (only 800G/1.6T traces have it)")
    _meta_type(path, "inner", inner, "object")
    if inner.get("code") not in INNER_CODES:
        raise TraceError(f"{path}: trace meta field 'inner.code' is {json.dumps(inner.get('code'))[:40]}, not an inner "
                         f"code phy802 models ({', '.join(INNER_CODES)})")
    for key in ("interleave", "hops", "n_lrp"):
        if inner.get(key) is not None:
            _meta_type(path, f"inner.{key}", inner[key], "count")
    counters = inner.get("counters", {})
    _meta_type(path, "inner.counters", counters, "object")
    for key, v in counters.items():
        if isinstance(v, list):
            _meta_type(path, f"inner.counters.{key}", v, "counts")
        elif isinstance(v, float):
            if not (math.isfinite(v) and v >= 0):
                raise TraceError(f"{path}: trace meta field 'inner.counters.{key}' must be a number >= 0, got {v!r}")
        else:
            _meta_type(path, f"inner.counters.{key}", v, "count")
    rates = inner.get("rates", {})
    _meta_type(path, "inner.rates", rates, "object")
    for key, r in rates.items():
        _meta_type(path, f"inner.rates.{key}", r, "object")
        for k in ("events", "trials"):
            if k in r:
                _meta_type(path, f"inner.rates.{key}.{k}", r[k], "count")
        for k in ("value", "lo", "hi"):
            x = r.get(k)
            if isinstance(x, float) and math.isnan(x) and r.get("trials") == 0:
                continue  # a rate over no trials (no inner code: no inner blocks) is written as NaN
            if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1):
                raise TraceError(f"{path}: trace meta field 'inner.rates.{key}.{k}' must be a probability in [0, 1], "
                                 f"got {json.dumps(x)[:40]}")


_I63 = 1 << 63


def _meta_type(path: Path, name: str, x, kind: str) -> None:
    """``kind``: count (int 0..2^63-1), number (int/float), name (str), counts (list of counts),
    pair (list of two numbers), object (dict)."""
    ok = {
        "count": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _I63,
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "name": lambda v: isinstance(v, str) and len(v) <= 200,
        "counts": lambda v: isinstance(v, list) and len(v) <= 1 << 16
        and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < _I63 for c in v),
        "pair": lambda v: isinstance(v, list) and len(v) == 2
        and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in v),
        "object": lambda v: isinstance(v, dict),
    }[kind]
    if not ok(x):
        what = {"count": "an integer in 0..2^63-1", "number": "a number", "name": "a name (string)",
                "counts": "a list of integers in 0..2^63-1", "pair": "a list of two numbers",
                "object": "an object"}[kind]
        raise TraceError(f"{path}: trace meta field {name!r} must be {what}, got {json.dumps(x)[:60]}")


# the fields 'phy802 trace info' and the replay read: (path, kind, required when the parent is there)
_SUMMARY_FIELDS = (
    ("code", "name", False), ("fec", "name", False), ("rate", "name", False), ("generator", "name", False),
    ("line_bits", "count", False), ("pairs", "count", False), ("wall_s", "number", False),
    ("lane_bit_errors", "counts", False), ("am_bit_errors", "count", False), ("header_errors", "count", False),
    ("channel", "object", False), ("channel.model", "name", False), ("channel.ber", "number", False),
    ("channel.pb", "number", False),
    ("pre_fec", "object", False), ("pre_fec.bit_errors", "count", True), ("pre_fec.bits", "count", False),
    ("pre_fec.ber", "number", True), ("pre_fec.ber_ci95", "pair", False),
    ("post_fec", "object", False), ("post_fec.bit_errors", "count", True), ("post_fec.bits", "count", False),
    ("post_fec.ber", "number", True), ("post_fec.ber_ci95", "pair", False), ("post_fec.marked_bits", "count", False),
    ("post_fec.decoder_output", "object", False), ("post_fec.decoder_output.bit_errors", "count", True),
    ("post_fec.decoder_output.ber", "number", True), ("post_fec.decoder_output.ber_ci95", "pair", False),
    ("codewords", "object", False), ("codewords.total", "count", True), ("codewords.with_errors", "count", True),
    ("codewords.corrected", "count", True), ("codewords.uncorrectable", "count", True),
    ("codewords.miscorrected", "count", True), ("codewords.undetected", "count", True),
    ("codewords.marked_pairs", "count", True), ("codewords.symbol_error_hist", "counts", False),
)


def _check_summary_fields(path: Path, meta: dict) -> None:
    """Wrong-typed or missing summary fields -> :class:`TraceError` naming the field
    (e.g. ``channel: "x"``, ``codewords: "x"``, ``pre_fec`` as a list, no ``pre_fec.bit_errors``)."""
    for name, kind, required in _SUMMARY_FIELDS:
        *parents, leaf = name.split(".")
        node = meta
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue  # the parent is absent (checked as a field of its own)
        if leaf not in node:
            if required:
                raise TraceError(f"{path}: trace meta field {name!r} is missing")
            continue
        _meta_type(path, name, node[leaf], kind)


class TraceReader:
    """Open a trace for streaming reads; only ``meta`` and the index are loaded up front.

    Reads format version 2 (this writer) and version 1 (the uncompressed ``.npz`` of earlier
    releases).  Every chunk is validated as it is read (CRC-32, then its content in the decoding
    kernel: see ``protocol/trace/TRACE_FORMAT.md``).  Raises :class:`TraceError` (a ``ValueError``
    naming the file, and for chunk content the chunk and field) for a missing, truncated,
    foreign or corrupt file, an unknown format version or invalid content.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if os.path.islink(self.path):  # the name exists: it is the link's target that does not
                raise TraceError(f"{self.path}: a symbolic link to {os.readlink(self.path)!r}, which does not "
                                 "exist") from None
            raise TraceError(f"{self.path}: no such trace file") from None
        except OSError as exc:  # a symbolic link loop (ELOOP), no permission, ...: say which, not "no such file"
            raise TraceError(f"{self.path}: {exc.strerror or exc}") from None
        if stat.S_ISDIR(st.st_mode):
            raise TraceError(f"{self.path}: is a folder, not a trace file")
        if not stat.S_ISREG(st.st_mode):  # a trace is read by seeking (trailer, index): a stream cannot be one
            raise TraceError(f"{self.path}: is not a regular file (a FIFO, device or socket); a trace file is read "
                             "by seeking, so it must be a file")
        try:
            self._fh = open(self.path, "rb")
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot read trace ({exc})") from None
        try:
            head = self._fh.read(16)
            if head[:2] == b"PK":
                self._open_v1()
            elif head[:8] == MAGIC:
                self._open_v2(head)
            else:
                raise TraceError(f"{self.path}: not a phy802 trace (no trace header)")
        except BaseException:
            self._fh.close()
            raise
        self.n_lanes = int(self.meta.get("n_lanes", 16))

    # -- version 2
    def _open_v2(self, head: bytes) -> None:
        self._zip = None
        ver = int(np.frombuffer(head[8:16], "<u8")[0]) if len(head) == 16 else -1
        if ver != VERSION:  # this container is version 2; version 1 is a zip
            raise TraceError(f"{self.path}: trace format version {ver} is not supported (this reader: "
                             f"{', '.join(map(str, READ_VERSIONS))})")
        size = os.fstat(self._fh.fileno()).st_size
        if size < len(_HEADER) + _TRAILER_BYTES:
            raise TraceError(f"{self.path}: truncated trace file ({size} bytes, no trailer)")
        self._fh.seek(size - _TRAILER_BYTES)
        tr = self._fh.read(_TRAILER_BYTES)
        if tr[:8] != TRAILER_MAGIC:
            raise TraceError(f"{self.path}: truncated or corrupt trace file (no trailer: the writer did not finish)")
        i_off, n_ch, m_off, m_len, crc = (int(x) for x in np.frombuffer(tr[8:], "<u8"))
        n_cols = len(INDEX_COLUMNS)
        if not (len(_HEADER) <= i_off and i_off + 8 * n_cols * n_ch == m_off and m_off + m_len == size - _TRAILER_BYTES):
            raise TraceError(f"{self.path}: corrupt trace trailer (index/meta positions do not add up)")
        self._fh.seek(i_off)
        ib = self._fh.read(8 * n_cols * n_ch)
        mb = self._fh.read(m_len)
        if zlib.crc32(mb, zlib.crc32(ib)) != crc:
            raise TraceError(f"{self.path}: trace index/meta fail their CRC-32 (corrupt file)")
        try:
            meta = json.loads(mb.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise TraceError(f"{self.path}: unreadable trace metadata ({exc})") from None
        except RecursionError:
            raise TraceError(f"{self.path}: trace metadata nested too deeply (not a phy802 trace)") from None
        self.meta = _check_meta(self.path, meta)
        if meta["version"] != ver:
            raise TraceError(f"{self.path}: header says version {ver}, metadata {meta['version']}")
        idx = np.frombuffer(ib, "<i8").reshape(n_ch, n_cols).astype(np.int64)
        if n_ch != meta["n_chunks"]:
            raise TraceError(f"{self.path}: trace index has {n_ch} chunks, meta says {meta['n_chunks']}")
        self._check_index(idx[:, :4])
        pos = np.concatenate([[len(_HEADER)], np.cumsum(idx[:, 5]) + len(_HEADER)])
        if n_ch and (np.any(idx[:, 5] < 0) or np.any(idx[:, 4] != pos[:-1]) or pos[-1] != i_off):
            raise TraceError(f"{self.path}: trace index byte ranges do not tile the data section")
        self._full_index = idx
        self.index = np.ascontiguousarray(idx[:, :4])

    def _check_index(self, idx: np.ndarray) -> None:
        sb = self.meta["stream_bits"]
        if idx.shape[0] and (idx[0, 0] != 0 or np.any(idx[1:, 0] != idx[:-1, 1]) or idx[-1, 1] != sb
                             or np.any(idx[:, 1] < idx[:, 0])):
            raise TraceError(f"{self.path}: trace chunks do not tile [0, {sb})")
        if idx.shape[0] == 0 and sb != 0:
            raise TraceError(f"{self.path}: trace has no chunks but {sb} stream bits")
        if np.any(idx[:, 2:4] < 0) or np.any(idx[:, 2] > idx[:, 1] - idx[:, 0]):
            raise TraceError(f"{self.path}: trace index has negative or impossible flip/mark counts")

    # -- version 1 (zip of .npy members)
    def _open_v1(self) -> None:
        try:
            self._zip = zipfile.ZipFile(self._fh, "r")
        except (zipfile.BadZipFile, OSError) as exc:
            raise TraceError(f"{self.path}: truncated or corrupt trace file ({exc})") from None
        names = set(self._zip.namelist())
        if "meta.npy" not in names or "index.npy" not in names:
            raise TraceError(f"{self.path}: not a phy802 trace (no meta/index members)")
        meta_arr = self._load("meta.npy")
        if meta_arr.dtype != np.uint8 or meta_arr.ndim != 1:
            raise TraceError(f"{self.path}: trace member 'meta.npy' must be uint8[n], got {meta_arr.dtype}{list(meta_arr.shape)}")
        try:
            meta = json.loads(meta_arr.tobytes().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise TraceError(f"{self.path}: unreadable trace metadata ({exc})") from None
        self.meta = _check_meta(self.path, meta)
        if meta["version"] != 1:
            raise TraceError(f"{self.path}: a zip (.npz) trace must be version 1, metadata says {meta['version']!r}")
        idx = self._load("index.npy")
        if idx.dtype != np.int64 or idx.ndim != 2 or idx.shape[1] != 4 or idx.shape[0] != meta.get("n_chunks"):
            raise TraceError(f"{self.path}: trace index has shape {idx.shape} / dtype {idx.dtype}, expected ({meta.get('n_chunks')}, 4) int64")
        self._check_index(idx)
        self.index = idx

    def _load(self, name: str) -> np.ndarray:
        try:
            with self._zip.open(name) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except KeyError:
            raise TraceError(f"{self.path}: trace member {name!r} is missing") from None
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise TraceError(f"{self.path}: trace member {name!r} is corrupt ({exc})") from None

    @property
    def version(self) -> int:
        return int(self.meta["version"])

    @property
    def stream_bits(self) -> int:
        return int(self.meta["stream_bits"])

    @property
    def n_chunks(self) -> int:
        return int(self.index.shape[0])

    def _bad(self, i: int, field: str, rule: str, where: str = "") -> TraceError:
        return TraceError(f"{self.path}: chunk {i} field {field!r}{where}: {rule}")

    def chunk(self, i: int) -> TraceChunk:
        """Load chunk ``i``, validated (``TraceError`` naming file, chunk and field)."""
        if not 0 <= i < self.n_chunks:
            raise IndexError(f"{self.path}: chunk {i} out of range 0..{self.n_chunks - 1}")
        a, b, nf, nm = (int(x) for x in self.index[i])
        if self._zip is not None:
            return self._chunk_v1(i, a, b, nf, nm)
        _, _, _, _, pos, size, crc = (int(x) for x in self._full_index[i])
        self._fh.seek(pos)
        raw = self._fh.read(size)
        if len(raw) != size:
            raise self._bad(i, "data", f"file ends inside the chunk ({len(raw)} of {size} bytes)")
        if zlib.crc32(raw) != crc:
            raise self._bad(i, "data", "CRC-32 mismatch (corrupt chunk)")
        off = np.empty(nf, np.int64)
        ln = np.empty(nf, np.int8)
        fl = np.empty(nf, np.uint8)
        mk = np.empty((nm, 2), np.int64)
        rc = TK.decode_chunk(np.frombuffer(raw, np.uint8), np.int64(a), np.int64(b), np.int64(self.n_lanes), off, ln, fl, mk)
        if rc:
            field, rule, where = _kernel_error(rc)
            raise self._bad(i, field, rule, f" (byte {where})")
        return TraceChunk(i, a, b, off, ln, fl, mk)

    def _chunk_v1(self, i: int, a: int, b: int, nf: int, nm: int) -> TraceChunk:
        arrs = {}
        for what, dt, shape in (("offsets", np.int64, (nf,)), ("lanes", np.int8, (nf,)), ("flags", np.uint8, (nf,)),
                                ("marks", np.int64, (nm, 2))):
            x = self._load(_member(i, what))
            if x.dtype != dt:
                raise self._bad(i, what, f"dtype {x.dtype}, expected {np.dtype(dt)}")
            if x.shape != shape:
                raise self._bad(i, what, f"shape {x.shape} does not match the index {shape}")
            arrs[what] = np.ascontiguousarray(x)
        rc = TK.check_chunk(arrs["offsets"], arrs["lanes"], arrs["flags"], arrs["marks"], np.int64(a), np.int64(b),
                            np.int64(self.n_lanes))
        if rc:
            field, rule, where = _kernel_error(rc)
            raise self._bad(i, field, rule, f" (entry {where})")
        return TraceChunk(i, a, b, arrs["offsets"], arrs["lanes"], arrs["flags"], arrs["marks"])

    def iter_chunks(self) -> Iterator[TraceChunk]:
        for i in range(self.n_chunks):
            yield self.chunk(i)

    def check(self) -> dict:
        """Read and validate every chunk; return counts (``TraceError`` on the first bad chunk)."""
        nf = nm = 0
        for c in self.iter_chunks():
            nf += c.offsets.size
            nm += c.marks.shape[0]
        for key, n in (("n_flips", nf), ("n_marks", nm)):
            if key in self.meta and self.meta[key] != n:
                raise TraceError(f"{self.path}: meta field {key!r} = {self.meta[key]!r}, the chunks hold {n}")
        return {"chunks": self.n_chunks, "flips": nf, "marks": nm, "stream_bits": self.stream_bits}

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
        self._fh.close()

    def __enter__(self) -> "TraceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
