"""Trace format v2 and v1: sharded generation (worker-count invariance, the joined stream),
content validation on read (hypothesis mutations), ``trace info --check``."""

from __future__ import annotations

import concurrent.futures as cf
import io
import json
import time
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from phy802.cli import main
from protocol.trace import _gen_kernels as K
from protocol.trace import _kernels as TK
from protocol.trace import TraceCursor, TraceError, TraceReader, TraceWriter, encode_chunk, generate_trace

# high BER and short shards: most shard boundaries carry descrambler copies into the next shard
KW = dict(rate="400G", ber=5e-3, line_bits=1e7, seed=11, chunk_pairs=10, shard_pairs=20)


def _assert_valid_chunk(c, a, b):
    """What a chunk that read without an error must satisfy: sorted unique offsets in [a, b), 16
    lanes, defined flags, non-empty sorted disjoint marks inside the chunk."""
    assert np.all(np.diff(c.offsets) > 0) and np.all((c.offsets >= a) & (c.offsets < b))
    assert np.all((c.lanes >= 0) & (c.lanes < 16)) and np.all(c.flags <= 3)
    assert np.all(c.marks[:, 1] > c.marks[:, 0]) and np.all(c.marks[1:, 0] >= c.marks[:-1, 1])
    assert np.all((c.marks >= a) & (c.marks <= b))


def _content(path):
    with TraceReader(path) as r:
        cs = list(r.iter_chunks())
        meta = {k: v for k, v in r.meta.items() if k != "wall_s"}
        idx = r.index.copy()
    cat = [np.concatenate([getattr(c, f) for c in cs]) for f in ("offsets", "lanes", "flags", "marks")]
    return idx, cat, meta


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    p = tmp_path_factory.mktemp("sh") / "one.trace"
    meta = generate_trace(p, fec="bypass", workers=1, **KW)
    assert meta["n_shards"] >= 4 and meta["n_chunks"] >= 8
    return p


def test_sharded_trace_is_identical_for_any_worker_count(sharded, tmp_path):
    ref = _content(sharded)
    outs = {}
    outs["2 processes"] = generate_trace(tmp_path / "p2.trace", fec="bypass", workers=2, **KW)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p2.trace"]  # the shards' batons are gone
    with cf.ThreadPoolExecutor(3) as ex:  # shards finishing out of order
        outs["3 threads"] = generate_trace(tmp_path / "t3.trace", fec="bypass", executor=ex, workers=3, **KW)
    import multiprocessing

    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as ex:
        # workers that are not this process's children (Python 3.14's default start method)
        outs["2 forkserver processes"] = generate_trace(tmp_path / "f2.trace", fec="bypass", executor=ex, workers=2,
                                                        **KW)
    for name in ("p2", "t3", "f2"):
        idx, cat, meta = _content(tmp_path / f"{name}.trace")
        assert np.array_equal(idx, ref[0]) and meta == ref[2], name
        for a, b in zip(cat, ref[1]):
            assert np.array_equal(a, b), name


def test_sharded_trace_on_a_dask_local_cluster(sharded, tmp_path):
    import distributed  # declared dependency (extra "dask")

    ref = _content(sharded)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        rc = main(["trace", "generate", "--fec", "bypass", "--ber", "5e-3", "--bits", "1e7", "--seed", "11",
                   "--chunk-pairs", "10", "--shard-pairs", "20", "--scheduler", lc.scheduler_address,
                   "--no-progress", "--out", str(tmp_path / "d.trace")])
    assert rc == 0
    idx, cat, meta = _content(tmp_path / "d.trace")
    assert np.array_equal(idx, ref[0]) and all(np.array_equal(a, b) for a, b in zip(cat, ref[1]))


def test_joined_stream_is_one_descrambled_error_stream(sharded):
    """The flips of the whole (multi-shard) stream are D(e) for a sparse scrambled-domain error set e
    (D = the 1 + x^39 + x^58 error multiplication): undoing D with the scrambler recursion gives back
    at most the line errors.  A shard join that lost or doubled a carried copy would leave a
    self-sustaining pattern (density ~1/2 after the boundary: ~3.9e6 ones here instead of ~5e4)."""
    idx, (off, _, _, marks), meta = _content(sharded)
    n_blocks = meta["stream_bits"] // 256
    y = np.zeros(n_blocks * 257, np.uint8)
    y[(off // 256) * 257 + off % 256 + 1] = 1
    for a, b in marks:  # bypass: every mark is a run of blocks whose 257b header bit flipped
        y[np.arange(a // 256, (b - 1) // 256 + 1) * 257] = 1
    e = K.scramble_bits(y, np.zeros(58, np.uint8))  # s_n = y_n ^ s_{n-39} ^ s_{n-58} inverts D
    n_e = int(e.sum())
    assert 0 < n_e <= meta["pre_fec"]["bit_errors"] - meta["am_bit_errors"]
    assert n_e > 0.9 * (meta["pre_fec"]["bit_errors"] - meta["am_bit_errors"]) * 10240 / 10880  # minus parity
    # read as one stream through a cursor in odd windows: the same bits
    with TraceReader(sharded) as r:
        cur = TraceCursor(r)
        got, pos = [], 0
        for n in [12_345_677] * (r.stream_bits // 12_345_677) + [r.stream_bits % 12_345_677]:
            got.append(cur.take(n) + pos)
            pos += n
    assert np.array_equal(np.concatenate(got), off)


def test_encoding_is_compact_and_round_trips(sharded, tmp_path):
    meta = generate_trace(tmp_path / "c.trace", fec="bypass", ber=1e-4, line_bits=3e8, seed=1)
    assert meta["encoded_bytes"] / meta["n_flips"] < 1.6  # vs 10 bytes per flip in version 1
    with TraceReader(sharded) as r:
        assert r.version == 2
        c = r.chunk(3)
    blob = encode_chunk(c.stream_start, c.stream_end, c.offsets, c.lanes, c.flags, c.marks)
    with TraceReader(sharded) as r:
        pos, size = r._full_index[3, 4:6]
    assert blob.tobytes() == sharded.read_bytes()[pos:pos + size]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31), st.integers(1, 300), st.integers(0, 4), st.integers(1, 16))
def test_join_on_encoded_chunk_equals_encoding_the_joined_flips(seed, n, n_carry, n_lanes):
    """Joining a shard's carry re-encodes only the head of the first chunk's bytes; the result
    must equal ``encode_chunk`` of the joined flips computed here from scratch: the symmetric
    difference of the chunk's flips and the carried copies (a bit hit twice is restored), header
    hits likewise, marks from the header hits.  Dense triples, lane changes, gaps around 58 bits
    and carried copies on the first block's header bit included; with few lanes, carried copies
    can change how the greedy encoder groups the head's flips into triples."""
    from protocol.trace.format import _encode_flips
    from protocol.trace.sharded import _join_first
    from protocol.trace._base import chunk_marks
    from protocol.trace.config import EncodedChunk, GeneratorConfig, TraceStats

    cfg = GeneratorConfig("400G", "bypass", 1e-4)
    rng = np.random.default_rng(seed)
    blk0 = int(rng.integers(100, 1000))
    a = blk0 * 256
    base = a + np.cumsum(rng.choice([1, 19, 39, 58, 59, 60, 200], size=n)) - 1
    trip = rng.random(n) < 0.5  # some flips become o, o + 39, o + 58
    off = np.unique(np.concatenate([base, base[trip] + 39, base[trip] + 58]))
    ln = rng.integers(0, n_lanes, off.size).astype(np.int8)  # few lanes: many would-be triples
    ln[np.searchsorted(off, base[trip] + 39)] = ln[np.searchsorted(off, base[trip])]  # triples on one lane
    ln[np.searchsorted(off, base[trip] + 58)] = ln[np.searchsorted(off, base[trip])]
    fl = np.zeros(off.size, np.uint8)
    b = (int(off[-1]) // 256 + 2) * 256
    hdr = np.unique(rng.integers(blk0, b // 256, 2))
    mark_pairs = np.empty(0, np.int64)
    # carried copies: scrambled-stream positions in the first 58 bits of the chunk (block blk0)
    cv = np.sort(rng.integers(blk0 * 257, blk0 * 257 + 58, n_carry))
    key, klane, kflag = 4 * cv + 1, rng.integers(0, n_lanes, n_carry).astype(np.int8), np.zeros(n_carry, np.uint8)
    # the oracle: XOR the carried copies into the flips (payload offset 256 k + r - 1) or headers
    flips = {int(o): int(x) for o, x in zip(off, ln)}
    hdrs = set(hdr.tolist())
    carried: dict = {}  # the carried copies cancel in pairs among themselves first (lane of the first)
    for v, x in zip(cv.tolist(), klane.tolist()):
        if v in carried and carried[v][1]:
            carried[v] = (carried[v][0], False)
        elif v in carried:
            carried[v] = (carried[v][0], True)
        else:
            carried[v] = (x, True)
    for v, (x, odd) in carried.items():
        if not odd:
            continue
        blk, r = divmod(v, 257)
        if r == 0:
            hdrs ^= {blk}
        elif blk * 256 + r - 1 in flips:
            del flips[blk * 256 + r - 1]
        else:
            flips[blk * 256 + r - 1] = x
    e_off = np.array(sorted(flips), np.int64)
    e_ln = np.array([flips[o] for o in e_off.tolist()], np.int8)
    e_marks = chunk_marks(mark_pairs, np.array(sorted(hdrs), np.int64), cfg.geometry)
    want = encode_chunk(a, b, e_off, e_ln, np.zeros(e_off.size, np.uint8), e_marks)
    marks = chunk_marks(mark_pairs, hdr, cfg.geometry)
    blob = encode_chunk(a, b, off, ln, fl, marks)
    e = EncodedChunk(0, 1, a, b, int(off.size), int(marks.shape[0]), blob,
                     int(_encode_flips(off, ln, fl, b, 16, prev=a - 1, plf=-1).size), hdr, mark_pairs)
    # the head ends where no triple record can span: after the first block, before a gap > 58
    ho, hl, hf = np.empty(off.size, np.int64), np.empty(off.size, np.int8), np.empty(off.size, np.uint8)
    k, _, err = TK.decode_records(blob, np.int64(a), np.int64(b), np.int64(16), ho, hl, hf, np.int64(a + 256))
    assert err == 0
    assert np.array_equal(ho[:k], off[:k]) and np.array_equal(hl[:k], ln[:k])
    assert k == off.size or (off[k - 1] >= a + 256 and off[k] - off[k - 1] > 58)
    assert not np.any((np.diff(off[:k]) > 58) & (off[:k - 1] >= a + 256))  # the first such place
    st = TraceStats(n_lanes=16)
    a2, b2, nf, nm, got = _join_first(cfg, e, (key, klane, kflag), st, 16)
    assert (a2, b2, nf, nm) == (a, b, e_off.size, e_marks.shape[0])
    assert got.tobytes() == want.tobytes()
    assert st.payload_flips == e_off.size - off.size and st.header_errors == len(hdrs) - hdr.size


# --------------------------------------------------------------------------- version 1 files


def _write_v1(path, chunks, meta_over=None, stream_bits=None):
    """A version-1 trace (zip of .npy members), as releases before format 2 wrote it."""
    def arr(z, name, a):
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
        z.writestr(name, buf.getvalue())

    idx = []
    with zipfile.ZipFile(path, "w") as z:
        for i, (a, b, off, ln, fl, mk) in enumerate(chunks):
            arr(z, f"c{i:06d}_offsets.npy", off)
            arr(z, f"c{i:06d}_lanes.npy", ln)
            arr(z, f"c{i:06d}_flags.npy", fl)
            arr(z, f"c{i:06d}_marks.npy", mk)
            idx.append((a, b, len(off), len(mk)))
        meta = {"format": "phy802-trace", "version": 1, "n_lanes": 16, "n_chunks": len(chunks),
                "stream_bits": stream_bits if stream_bits is not None else chunks[-1][1]}
        meta.update(meta_over or {})
        arr(z, "index.npy", np.asarray(idx, np.int64).reshape(-1, 4))
        arr(z, "meta.npy", np.frombuffer(json.dumps(meta).encode(), np.uint8))


GOOD = [(0, 1000, np.array([5, 44, 63, 700], np.int64), np.array([3, 3, 3, 15], np.int8),
         np.array([0, 0, 1, 2], np.uint8), np.array([[0, 256], [512, 768]], np.int64)),
        (1000, 3000, np.array([1000, 2999], np.int64), np.array([0, 1], np.int8), np.zeros(2, np.uint8),
         np.empty((0, 2), np.int64))]


def test_version1_files_still_read(tmp_path):
    p = tmp_path / "old.npz"
    _write_v1(p, GOOD)
    with TraceReader(p) as r:
        assert r.version == 1 and r.check()["flips"] == 6
        assert r.chunk(0).offsets.tolist() == [5, 44, 63, 700]


MUTATIONS = {
    "unsorted offsets": ("offsets", lambda c: np.array([44, 5, 63, 700], np.int64)),
    "duplicate offsets": ("offsets", lambda c: np.array([5, 44, 44, 700], np.int64)),
    "negative offset": ("offsets", lambda c: np.array([-5, 44, 63, 700], np.int64)),
    "offset past the chunk": ("offsets", lambda c: np.array([5, 44, 63, 1000], np.int64)),
    "float offsets": ("offsets", lambda c: np.array([5, 44, 63, 700], np.float64)),
    "uint64 offsets": ("offsets", lambda c: np.array([5, 44, 63, 700], np.uint64)),
    "string offsets": ("offsets", lambda c: np.array(["5", "44", "63", "700"])),
    "lane 99": ("lanes", lambda c: np.array([3, 3, 99, 15], np.int8)),
    "negative lane": ("lanes", lambda c: np.array([3, 3, -1, 15], np.int8)),
    "int64 lanes": ("lanes", lambda c: np.array([3, 3, 3, 15], np.int64)),
    "undefined flag bits": ("flags", lambda c: np.array([0, 0, 128, 0], np.uint8)),
    "mark end < start": ("marks", lambda c: np.array([[256, 0], [512, 768]], np.int64)),
    "empty mark": ("marks", lambda c: np.array([[0, 0], [512, 768]], np.int64)),
    "overlapping marks": ("marks", lambda c: np.array([[0, 600], [512, 768]], np.int64)),
    "mark past the chunk": ("marks", lambda c: np.array([[0, 256], [512, 1768]], np.int64)),
    "string marks": ("marks", lambda c: np.array([["0", "256"], ["512", "768"]])),
    "wrong length": ("lanes", lambda c: np.array([3, 3, 3], np.int8)),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_version1_mutations_are_rejected_naming_file_chunk_field(tmp_path, name):
    field, mutate = MUTATIONS[name]
    a, b, off, ln, fl, mk = GOOD[0]
    parts = {"offsets": off, "lanes": ln, "flags": fl, "marks": mk}
    parts[field] = mutate(parts[field])
    p = tmp_path / "bad.npz"
    _write_v1(p, [(a, b, parts["offsets"], parts["lanes"], parts["flags"], parts["marks"])] + GOOD[1:])
    with TraceReader(p) as r:
        r.chunk(1)  # the intact chunk still reads
        with pytest.raises(TraceError, match=rf"bad\.npz: chunk 0 field '{field}'"):
            r.chunk(0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_version1_random_mutations_never_read_silently_wrong(tmp_path, data):
    """Random edits of one array (values, dtype): the reader raises TraceError or returns content
    that satisfies every rule of TRACE_FORMAT.md."""
    a, b, off, ln, fl, mk = GOOD[0]
    parts = {"offsets": off.copy(), "lanes": ln.copy(), "flags": fl.copy(), "marks": mk.copy()}
    field = data.draw(st.sampled_from(sorted(parts)))
    x = parts[field]
    flat = x.reshape(-1)
    k = data.draw(st.integers(0, flat.size - 1))
    flat[k] = data.draw(st.integers(-200, 1200) if x.dtype == np.int64 else st.integers(0, 127))
    dt = data.draw(st.sampled_from([None, np.float64, np.uint64, np.int32, np.int16]))
    if dt is not None:
        x = x.astype(dt)
    parts[field] = x
    p = tmp_path / "m.npz"
    _write_v1(p, [(a, b, parts["offsets"], parts["lanes"], parts["flags"], parts["marks"])])
    with TraceReader(p) as r:
        try:
            c = r.chunk(0)
        except TraceError as exc:
            assert "m.npz: chunk 0 field" in str(exc)
            return
    assert c.offsets.dtype == np.int64 and c.lanes.dtype == np.int8 and c.flags.dtype == np.uint8
    _assert_valid_chunk(c, a, b)


def test_meta_fields_of_wrong_type_are_rejected(tmp_path):
    for over, field in (({"stream_bits": "3000"}, "stream_bits"), ({"n_chunks": 2.0}, "n_chunks"),
                        ({"n_lanes": 99}, "n_lanes"), ({"version": "1"}, "version")):
        p = tmp_path / "meta.npz"
        _write_v1(p, GOOD, meta_over=over)
        with pytest.raises(TraceError, match=rf"meta\.npz.*{field}|version"):
            TraceReader(p)


# --------------------------------------------------------------------------- version 2 chunks


def _v2_with_blob(path, blob, nf, nm, a=0, b=1000, n_lanes=16):
    with TraceWriter(path, {"n_lanes": n_lanes}) as w:
        if a:
            w.write_encoded(0, a, 0, 0, np.empty(0, np.uint8))
        w.write_encoded(a, b, nf, nm, np.frombuffer(bytes(blob), np.uint8))


def _varint(v):
    out = bytearray()
    while v >= 128:
        out.append((v & 127) | 128)
        v >>= 7
    out.append(v)
    return bytes(out)


CRAFTED = {
    "lane 99 (reserved bits)": (_varint(5 << 2 | 1) + bytes([99]), 1, 0, "lanes"),
    "lane 15 on 8 lanes": (_varint(5 << 2 | 1) + bytes([15]), 1, 0, "lanes"),
    "no lane byte first": (_varint(5 << 2), 1, 0, "lanes"),
    "offset past the chunk": (_varint(2000 << 2 | 1) + bytes([1]), 1, 0, "offsets"),
    "triple past the chunk": (_varint(950 << 2 | 3) + bytes([1]), 3, 0, "offsets"),
    "triple beyond the count": (_varint(5 << 2 | 3) + bytes([1]), 2, 0, "n_flips"),
    "truncated varint": (bytes([0x85]), 1, 0, "data"),
    "over-long varint": (bytes([0xFF] * 10), 1, 0, "data"),
    "mark past the chunk": (_varint(900) + _varint(200), 0, 1, "marks"),
    "trailing bytes": (_varint(5 << 2 | 1) + bytes([1, 0]), 1, 0, "data"),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_version2_bad_chunks_are_rejected(tmp_path, name):
    blob, nf, nm, field = CRAFTED[name]
    p = tmp_path / "c.trace"
    _v2_with_blob(p, blob, nf, nm, n_lanes=8 if "8 lanes" in name else 16)
    with TraceReader(p) as r:
        with pytest.raises(TraceError, match=rf"c\.trace: chunk 0 field '{field}'"):
            r.chunk(0)
    assert main(["trace", "info", str(p)]) == 0  # meta and index are fine ...
    assert main(["trace", "info", "--check", str(p)]) == 1  # ... the chunk is not


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(max_size=40), nf=st.integers(0, 12), nm=st.integers(0, 3))
def test_version2_random_chunks_never_read_silently_wrong(tmp_path, blob, nf, nm):
    p = tmp_path / "r.trace"
    _v2_with_blob(p, blob, nf, nm, a=100, b=1100)
    with TraceReader(p) as r:
        try:
            c = r.chunk(1)
        except TraceError as exc:
            assert "r.trace: chunk 1 field" in str(exc)
            return
    assert c.offsets.size == nf and c.marks.shape == (nm, 2)
    _assert_valid_chunk(c, 100, 1100)


def test_corrupt_bytes_fail_the_crc_and_info_check(sharded, tmp_path, capsys):
    raw = bytearray(sharded.read_bytes())
    with TraceReader(sharded) as r:
        pos = int(r._full_index[2, 4])
    raw[pos + 3] ^= 0x10
    bad = tmp_path / "bad.trace"
    bad.write_bytes(bytes(raw))
    with TraceReader(bad) as r:
        with pytest.raises(TraceError, match=r"chunk 2 field 'data': CRC-32"):
            r.chunk(2)
    assert main(["trace", "info", "--check", str(sharded), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"] is True
    assert main(["trace", "info", "--check", str(bad)]) == 1
    assert "chunk 2" in capsys.readouterr().err
    # a file whose writer did not finish has no trailer
    (tmp_path / "cut.trace").write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(TraceError, match="truncated"):
        TraceReader(tmp_path / "cut.trace")


def test_writer_rejects_bad_content_in_its_thread(tmp_path):
    p = tmp_path / "w.trace"
    with pytest.raises(ValueError, match="lanes"):
        with TraceWriter(p, {"n_lanes": 8}, threaded=True) as w:
            w.write_chunk(0, 100, [5], [12], [0])
            w.write_chunk(100, 200, [], [], [])
    assert not p.exists()
    assert zlib.crc32(b"") == 0  # (the empty chunk's CRC, written for chunks without flips or marks)


@pytest.mark.parametrize("pool", ["own", "caller's"])
def test_a_failing_shard_reaches_the_caller_and_the_shards_waiting_on_it_give_up(tmp_path, monkeypatch, pool):
    """Local worker processes write their shards themselves, each waiting for the previous shard's
    baton.  A shard that fails must reach the caller, and the shard already waiting for its baton on
    the other worker must give up (not wait forever: the pool ``generate_trace`` owns is shut down
    waiting for its workers); nothing is left beside the output."""
    import multiprocessing
    import threading

    import protocol.trace.sharded as T

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the injected failure reaches worker processes only when they are forked")

    real = T._new_generator

    def failing(cfg, generator, seed, start_pair):
        if start_pair == KW["shard_pairs"]:  # shard 1
            raise RuntimeError("injected failure in shard 1")
        return real(cfg, generator, seed, start_pair)

    monkeypatch.setattr(T, "_new_generator", failing)  # before the pool forks its workers
    out, box = tmp_path / "f.trace", {}

    def run():
        try:
            if pool == "own":
                generate_trace(out, fec="bypass", workers=2, **KW)
            else:
                with cf.ProcessPoolExecutor(2) as ex:
                    generate_trace(out, fec="bypass", workers=2, executor=ex, **KW)
        except BaseException as exc:  # noqa: BLE001 - checked below
            box["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "a shard waited forever for the failed shard's baton"
    assert isinstance(box.get("exc"), RuntimeError) and "injected failure in shard 1" in str(box["exc"])
    assert list(tmp_path.iterdir()) == []


def test_batons_pass_the_offset_and_carry_once_and_stop_when_abandoned(tmp_path):
    from protocol.trace.sharded import _await_baton, _pass_baton

    d = str(tmp_path)
    start, carry = _await_baton(d, 0)  # shard 0 follows the header, with no carry
    assert start == 16 and all(c.size == 0 for c in carry)
    _pass_baton(d, 4, 12345, (np.array([7, 9], np.int64), np.array([3, 15], np.int8), np.array([0, 2], np.uint8)))
    start, (key, lane, flag) = _await_baton(d, 5)
    assert start == 12345 and key.tolist() == [7, 9] and lane.tolist() == [3, 15] and flag.tolist() == [0, 2]
    assert key.dtype == np.int64 and lane.dtype == np.int8 and flag.dtype == np.uint8
    assert list(tmp_path.iterdir()) == []  # read once, then removed
    (tmp_path / "abort").touch()
    with pytest.raises(RuntimeError, match="shard 5: trace abandoned before shard 4 finished"):
        _await_baton(d, 5)


def test_a_shard_waiting_for_a_baton_gives_up_when_the_writer_dies(tmp_path):
    """A worker whose writing process was killed (no abort file, folder left behind, the dead
    process maybe not reaped yet) must not wait for a baton for ever -- but it must wait while
    the writer lives.  A writer process holds the lock, starts a waiter, sees it wait, and exits."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    repo, d = Path(__file__).resolve().parents[3], tmp_path / "batons"
    d.mkdir()
    waiter = textwrap.dedent(f"""
        import signal, sys
        signal.alarm(90)  # a waiter that never gives up does not outlive a failed test by long
        sys.path.insert(0, {str(repo)!r})
        from protocol.trace.sharded import _await_baton
        open({str(tmp_path / 'ready')!r}, "w").close()
        try:
            _await_baton({str(d)!r}, 3)
            msg = "got a baton"
        except RuntimeError as exc:
            msg = str(exc)
        open({str(tmp_path / 'result.txt')!r}, "w").write(msg)
    """)
    writer = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(repo)!r})
        from protocol.trace.sharded import _hold_writer_lock
        lock = _hold_writer_lock(Path({str(d)!r}))
        subprocess.Popen([sys.executable, "-c", {waiter!r}], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t = time.monotonic()
        while not os.path.exists({str(tmp_path / 'ready')!r}) and time.monotonic() < t + 60:
            time.sleep(0.01)
        time.sleep(0.3)
        print("waiting" if not os.path.exists({str(tmp_path / 'result.txt')!r}) else "gave up too early")
    """)  # ... and exits without unlocking: its lock goes with it
    out = subprocess.run([sys.executable, "-c", writer], capture_output=True, text=True, timeout=90)
    assert out.stdout.strip() == "waiting", out.stdout + out.stderr
    deadline = time.monotonic() + 60
    while not (tmp_path / "result.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "result.txt").read_text() == "shard 3: trace abandoned before shard 2 finished"


def test_shards_write_the_same_trace_where_the_file_system_has_no_locks(sharded, tmp_path, monkeypatch):
    """Some network file systems refuse POSIX locks (ENOLCK): the writer then holds none, the
    shards rely on the abort file and the folder, and the trace is the same."""
    import errno
    import fcntl

    def refuse(*a, **k):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(fcntl, "lockf", refuse)  # in this process and the workers it forks
    out = tmp_path / "nolock.trace"
    generate_trace(out, fec="bypass", workers=2, **KW)
    ref, got = _content(sharded), _content(out)
    assert np.array_equal(got[0], ref[0]) and all(np.array_equal(a, b) for a, b in zip(got[1], ref[1]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nolock.trace"]


def test_chunks_written_by_another_process_must_follow_the_last(tmp_path):
    with TraceWriter(tmp_path / "x.trace", {"n_lanes": 16}) as w:
        blob = encode_chunk(0, 100, [5], [1], [0])
        with open(w.temp_path, "r+b") as fh:
            fh.seek(16)
            fh.write(blob.tobytes())
        with pytest.raises(ValueError, match="written at byte 17, expected 16"):
            w.add_written([(0, 100, 1, 0, 17, blob.size, zlib.crc32(blob))])
        w.add_written([(0, 100, 1, 0, 16, blob.size, zlib.crc32(blob))])
    with TraceReader(tmp_path / "x.trace") as r:
        assert r.chunk(0).offsets.tolist() == [5] and r.meta["stream_bits"] == 100
    with pytest.raises(ValueError, match="needs an unthreaded writer"):
        with TraceWriter(tmp_path / "y.trace", {}, threaded=True) as w:
            w.add_written([])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.trace"]


def test_shards_too_big_for_memory_are_refused_up_front(tmp_path, monkeypatch, capsys):
    """Each worker holds one shard's records until it writes them: ``trace generate`` refuses a
    ``--shard-pairs`` whose shards would not fit in the free memory, before writing anything."""
    import argparse

    import phy802.runtime.resources as resources
    from phy802.cli.trace import _check_size

    monkeypatch.setattr(resources, "available_memory", lambda: 256 << 20)  # shards held: ~800 MB
    argv = ["trace", "generate", "--ber", "1e-2", "--bits", "1e10", "--workers", "2", "--shard-pairs", str(1 << 30),
            "--no-progress", "--out", str(tmp_path / "t.trace")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "of memory" in err and "--shard-pairs" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
    ns = dict(ber=1e-2, bits=1e10, generator="fast", chunk_pairs=None, burst_pb=None, fec="bypass", code="kp4",
              out=str(tmp_path / "t.trace"), force=False, scheduler=None)
    _check_size(argparse.Namespace(**ns, workers=2, shard_pairs=None))  # default shards: ~16 MB each
    _check_size(argparse.Namespace(**ns, workers=1, shard_pairs=1 << 30))  # one process streams chunk by chunk
    with pytest.raises(resources.WorkRefused, match="of memory.*--chunk-pairs"):  # ... unless its chunks are huge
        _check_size(argparse.Namespace(**{**ns, "chunk_pairs": 1 << 30}, workers=1, shard_pairs=None))
