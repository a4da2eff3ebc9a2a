"""Trace file format, streaming reads, cursors and sources."""

import json

import numpy as np
import pytest

from protocol.source import DetailedErrorSource, ErrorSource
from protocol.trace import (
    LiveSource,
    TraceCursor,
    TraceError,
    TraceReader,
    TraceWriter,
    generate_trace,
    open_source,
)


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("tr") / "t.npz"
    meta = generate_trace(p, rate="400G", fec="bypass", ber=3e-4, line_bits=2e7, seed=5, chunk_pairs=300)
    assert meta["n_chunks"] > 3
    return p


def _all(reader):
    chunks = list(reader.iter_chunks())
    return (np.concatenate([c.offsets for c in chunks]), np.concatenate([c.lanes for c in chunks]),
            np.concatenate([c.marks for c in chunks]))


def test_round_trip_matches_the_generator(trace_path):
    from protocol.trace.config import GeneratorConfig
    from protocol.trace.fast import FastGenerator

    from protocol.trace import shard_seed

    gen = FastGenerator(GeneratorConfig("400G", "bypass", 3e-4), shard_seed(5, 0))  # one shard
    n_pairs = -(-int(2e7) // 10880)
    ch = [gen.next_chunk(k) for k in [300] * (n_pairs // 300) + ([n_pairs % 300] if n_pairs % 300 else [])]
    with TraceReader(trace_path) as r:
        off, lanes, marks = _all(r)
        assert r.stream_bits == ch[-1].stream_end
        m = r.meta
    assert np.array_equal(off, np.concatenate([c.offsets for c in ch]))
    assert np.array_equal(lanes, np.concatenate([c.lanes for c in ch]))
    assert m["n_shards"] == 1
    assert m["format"] == "phy802-trace" and m["version"] == 2 and m["seed"] == 5 and m["fec"] == "bypass"
    assert m["pre_fec"]["bit_errors"] == gen.stats.line_bit_errors
    assert m["post_fec"]["bit_errors"] == off.size == gen.stats.payload_flips
    lo, hi = m["pre_fec"]["ber_ci95"]
    assert lo <= m["pre_fec"]["ber"] <= hi
    json.dumps(m)  # self-describing metadata is plain JSON


def test_cursor_windows_equal_the_whole(trace_path):
    with TraceReader(trace_path) as r:
        off, _, marks = _all(r)
        total = r.stream_bits
        cur = TraceCursor(r)
        rng = np.random.default_rng(0)
        got, pos = [], 0
        while pos < total:
            n = int(min(rng.integers(1, total // 5), total - pos))
            w = cur.take(n)
            assert np.all((w >= 0) & (w < n)) and np.all(np.diff(w) > 0)
            got.append(w + pos)
            pos += n
        assert np.array_equal(np.concatenate(got), off)
        # wrap-around: the next window starts again at bit 0
        w = cur.take_chunk(1000)
        assert np.array_equal(w.offsets, off[off < 1000]) and cur.wraps == 1
        nowrap = TraceCursor(r, start=total - 10, wrap=False)
        nowrap.take(10)
        with pytest.raises(EOFError, match="exhausted"):
            nowrap.take(1)


def test_marks_are_clipped_to_windows(trace_path):
    with TraceReader(trace_path) as r:
        _, _, marks = _all(r)
        assert marks.shape[0] > 0
        a = int(marks[0, 0])
        assert int(marks[0, 1]) > a + 30  # the window below lies inside the first mark
        cur = TraceCursor(r, start=a + 10)
        w = cur.take_chunk(20)
        assert w.marks.tolist() == [[0, 20]]


def test_sources_satisfy_the_protocol(trace_path):
    src = open_source(trace_path, seed=np.random.SeedSequence(3))
    assert isinstance(src, ErrorSource) and isinstance(src, DetailedErrorSource)
    again = open_source(trace_path, seed=np.random.SeedSequence(3))
    assert src.pos == again.pos and np.array_equal(src.take(10**6), again.take(10**6))
    live = LiveSource("400G", "ieee", 1e-4, seed=1)
    assert isinstance(live, DetailedErrorSource)


def test_live_source_is_cut_invariant():
    a = LiveSource("400G", "bypass", 2e-4, seed=4, chunk_pairs=50)
    b = LiveSource("400G", "bypass", 2e-4, seed=4, chunk_pairs=333)
    whole = a.take(5_000_000)
    parts, pos = [], 0
    for n in (1, 999_999, 2_345_678, 1_654_322):
        parts.append(b.take(n) + pos)
        pos += n
    assert np.array_equal(whole, np.concatenate(parts)) and whole.size > 1000


def test_bad_files_give_clear_errors(tmp_path, trace_path):
    trunc = tmp_path / "trunc.npz"
    trunc.write_bytes(trace_path.read_bytes()[:5000])
    with pytest.raises(TraceError, match=r"trunc\.npz.*truncated"):
        TraceReader(trunc)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.arange(3))
    with pytest.raises(TraceError, match=r"foreign\.npz.*not a phy802 trace"):
        TraceReader(foreign)
    text = tmp_path / "x.txt"
    text.write_text("hello")
    with pytest.raises(TraceError, match=r"x\.txt.*not a phy802 trace"):
        TraceReader(text)
    with pytest.raises(TraceError, match="no such trace"):
        TraceReader(tmp_path / "missing.npz")
    # a future version is refused by name
    v3 = tmp_path / "v3.trace"
    raw = bytearray(trace_path.read_bytes())
    raw[8:16] = np.uint64(3).tobytes()
    v3.write_bytes(bytes(raw))
    with pytest.raises(TraceError, match="version 3"):
        TraceReader(v3)


def test_writer_is_atomic_and_validates(tmp_path):
    p = tmp_path / "w.npz"
    with pytest.raises(RuntimeError):
        with TraceWriter(p, {"x": 1}) as w:
            w.write_chunk(0, 100, [5, 7], [0, 1], [0, 0])
            raise RuntimeError("boom")
    assert not p.exists() and not list(tmp_path.iterdir())
    with TraceWriter(p, {"x": 1}) as w:
        with pytest.raises(ValueError, match="does not continue"):
            w.write_chunk(10, 100, [], [], [])
        with pytest.raises(ValueError, match="strictly increasing"):
            w.write_chunk(0, 100, [7, 5], [0, 1], [0, 0])
        w.write_chunk(0, 100, [5, 7], [0, 1], [0, 0], [[10, 20]])
    with TraceReader(p) as r:
        c = r.chunk(0)
        assert c.offsets.tolist() == [5, 7] and c.marks.tolist() == [[10, 20]] and r.meta["x"] == 1
