"""Property tests of every text/binary input parser: valid content round-trips,
anything else raises the parser's own ValueError subclass naming the file, never another exception."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from phy802._kvrecords import VectorError, read_records
from phy802.cli.fec import format_symbols, parse_symbol_lines
from phy802.pcs import PcsConfig
from phy802.pcs.lanesfile import LanesFileError, read_lanes, write_lanes

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# none of these is a valid 10-bit symbol in decimal nor in hex ("1024", "ff0" are > 0x3ff)
BAD_TOKENS = ["1_0", "+5", "-0", "-1", "\u0663", "\u0661\u0662", "0x3ff", "0X1", "1.5", "2e-1", "1024", "ff0",
              "\uff11", "0o7", " ", "nan"]


# ---------------------------------------------------------------- fec codeword files

words_st = st.lists(st.lists(st.integers(0, 1023), min_size=6, max_size=6), min_size=1, max_size=5)


@FAST
@given(words_st, st.sampled_from(["dec", "hex"]))
def test_fec_symbols_round_trip(words, fmt):
    text = "# header\n\n" + "".join(format_symbols(np.array(w), fmt) + "  # c\n" for w in words)
    arr, lines = parse_symbol_lines(io.StringIO(text), 6, "f.txt", fmt)
    assert arr.tolist() == words and lines == list(range(3, 3 + len(words)))


@FAST
@given(words_st, st.sampled_from(["dec", "hex"]), st.sampled_from(BAD_TOKENS), st.data())
def test_fec_symbols_reject_bad_tokens(words, fmt, bad, data):
    assume(not (fmt == "hex" and bad[:2] in ("0x", "0X")))  # 0x3ff and 0X1 are hex symbols as dumps print them
    row = data.draw(st.integers(0, len(words) - 1))
    col = data.draw(st.integers(0, 5))
    toks = [[format_symbols(np.array([v]), fmt) for v in w] for w in words]
    if bad.strip() == "":
        toks[row].pop(col)  # a missing symbol
    else:
        toks[row][col] = bad
    text = "".join(" ".join(t) + "\n" for t in toks)
    with pytest.raises(ValueError, match=rf"^f\.txt:{row + 1}: "):
        parse_symbol_lines(io.StringIO(text), 6, "f.txt", fmt)


@FAST
@given(st.text(max_size=200), st.sampled_from(["dec", "hex"]))
def test_fec_symbols_random_text_only_valueerror(text, fmt):
    try:
        arr, _ = parse_symbol_lines(io.StringIO(text), 3, "r.txt", fmt)
    except ValueError as exc:
        assert str(exc).startswith("r.txt")
        return
    assert arr.shape[1] == 3 and int(arr.max()) <= 1023


def test_fec_symbols_empty_and_binary(tmp_path):
    with pytest.raises(ValueError, match="no words"):
        parse_symbol_lines(io.StringIO("# only a comment\n\n"), 4, "e.txt")
    with pytest.raises(ValueError, match="binary"):
        parse_symbol_lines(io.StringIO("1 2 \x00 3\n"), 4, "b.txt")
    p = tmp_path / "bin.dat"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with open(p, encoding="utf-8") as fh, pytest.raises(ValueError, match="bin.dat:1: not UTF-8"):
        parse_symbol_lines(fh, 4, str(p))


# ---------------------------------------------------------------- key=value vector records

_REQ = {"gray": ("bits", "symbol"), "precode": ("initial", "input", "output")}
key_st = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@FAST
@given(st.sampled_from(sorted(_REQ)), key_st)
def test_vector_records_reject_unknown_fields(tmp_path_factory, kind, extra):
    assume(extra not in _REQ[kind] and extra != "kind")
    p = tmp_path_factory.mktemp("v") / "v.txt"
    fields = " ".join(f"{k}=1" for k in _REQ[kind])
    p.write_text(f"# c\nkind={kind} {fields}\nkind={kind} {fields} {extra}=0\n")
    with pytest.raises(VectorError, match=r"v\.txt:3: .*unknown field"):
        read_records(p, _REQ)


@FAST
@given(st.binary(max_size=300))
def test_vector_records_random_bytes_only_vectorerror(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("v") / "r.txt"
    p.write_bytes(data)
    try:
        recs = read_records(p, _REQ)
    except VectorError as exc:
        assert str(exc).startswith(str(p))
        return
    for r in recs:
        assert set(r.fields) == {"kind", *_REQ[r.kind]}


# ---------------------------------------------------------------- PCS lanes files

def _lanes(seed: int, n: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1024, (16, n)).astype(np.uint16)


@pytest.mark.parametrize("suffix", [".txt", ".npz"])
def test_lanes_round_trip(tmp_path, suffix):
    cfg = PcsConfig(rate="400G", am_spacing=80, am_status=5)
    lanes = _lanes(1)
    p = tmp_path / f"l{suffix}"
    write_lanes(p, lanes, cfg)
    got, fields = read_lanes(p)
    assert np.array_equal(got, lanes) and fields["am_spacing"] == 80 and fields["am_status"] == 5


@pytest.fixture(scope="module")
def lanes_text(tmp_path_factory):
    p = tmp_path_factory.mktemp("l") / "l.txt"
    write_lanes(p, _lanes(2, 8), PcsConfig(rate="400G"))
    return p.read_text()


@FAST
@given(st.data())
def test_lanes_text_mutations_only_lanesfileerror(tmp_path_factory, lanes_text, data):
    text = lanes_text
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i, min(len(text), i + 6)))
    repl = data.draw(st.sampled_from(["", "1_0", "+5", "\u0663", "1.5", "x", "=", " foo=1", ",", "0x", "\n", "-1",
                                      "99999", "\x00"]))
    p = tmp_path_factory.mktemp("m") / "m.txt"
    p.write_text(text[:i] + repl + text[j:])
    try:
        lanes, cfg = read_lanes(p)
    except LanesFileError as exc:
        assert str(exc).startswith(str(p))
        return
    assert lanes.dtype == np.uint16 and int(lanes.max()) <= 1023 and set(cfg) == {
        "rate", "am_spacing", "scrambler_seed", "prbs9_seed", "am_status"}


@FAST
@given(st.data())
def test_lanes_npz_truncated_or_forged(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("n")
    good = d / "g.npz"
    write_lanes(good, _lanes(3, 16), PcsConfig())
    blob = good.read_bytes()
    cut = data.draw(st.integers(0, len(blob) - 1))
    p = d / "t.npz"
    p.write_bytes(blob[:cut])
    with pytest.raises(LanesFileError, match=r"t\.npz"):
        read_lanes(p)


@pytest.mark.parametrize("lanes", [np.full((16, 4), 1.5), np.full((16, 4), 2000, np.int64), np.zeros(4, np.uint16),
                                   np.zeros((16, 0), np.uint16), np.full((16, 4), -1, np.int64)])
def test_lanes_npz_bad_arrays(tmp_path, lanes):
    p = tmp_path / "bad.npz"
    with open(p, "wb") as fh:
        np.savez(fh, lanes=lanes, config=np.array("kind=config rate=400G am_spacing=163840 "
                                                   "scrambler_seed=0x1 prbs9_seed=0x1FF am_status=0"))
    with pytest.raises(LanesFileError, match=r"bad\.npz"):
        read_lanes(p)


def test_lanes_npz_extra_array_and_pickle(tmp_path):
    p = tmp_path / "x.npz"
    with open(p, "wb") as fh:
        np.savez(fh, lanes=_lanes(1, 4), config=np.array("kind=config rate=400G"), extra=np.zeros(1))
    with pytest.raises(LanesFileError, match="expected arrays"):
        read_lanes(p)
    with open(p, "wb") as fh:
        np.savez(fh, lanes=np.array([object()], dtype=object), config=np.array("x"))
    with pytest.raises(LanesFileError):
        read_lanes(p)


# ---------------------------------------------------------------- sweep.json reader and merge

@pytest.fixture(scope="module")
def sweep_docs(tmp_path_factory):
    from phy802.sweep import SweepConfig, run_sweep

    d = tmp_path_factory.mktemp("s")
    docs = []
    for seed in (1, 2):
        res = run_sweep(SweepConfig(points=(2e-3, 3e-3), code=("kp4",), fec=("ieee", "bypass"), target_errors=5,
                                    max_codewords=500, seed=seed))
        p = d / f"s{seed}.json"
        res.write_json(p)
        docs.append(json.loads(p.read_text()))
    return docs


def _paths(obj):
    """Every (container, key) in a JSON document."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((obj, k))
            out += _paths(v)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((obj, i))
            out += _paths(v)
    return out


json_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**20), st.floats(allow_nan=False),
                        st.text(max_size=5), st.lists(st.integers(0, 3), max_size=3), st.just({}))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_sweep_json_mutations_only_valueerror(tmp_path_factory, sweep_docs, data):
    from phy802.sweep import SweepResult

    doc = copy.deepcopy(sweep_docs[0])
    targets = _paths(doc)
    container, key = targets[data.draw(st.integers(0, len(targets) - 1))]
    action = data.draw(st.sampled_from(["delete", "replace", "add"]))
    if action == "delete":
        del container[key]
    elif action == "replace":
        container[key] = data.draw(json_values)
    elif isinstance(container, dict):
        container[data.draw(st.text("abcxyz_", min_size=1, max_size=6))] = data.draw(json_values)
    else:
        container.append(data.draw(json_values))
    p = tmp_path_factory.mktemp("j") / "sweep.json"
    p.write_text(json.dumps(doc))
    try:
        res = SweepResult.read_json(p)
    except ValueError as exc:
        assert str(p) in str(exc)
        return
    for pt in res.points:  # accepted: still a consistent result
        assert pt.mode in res.config.modes and pt.x in res.config.points
        assert pt.counters.codeword_errors <= pt.counters.codewords


def test_sweep_merge_rules(tmp_path, sweep_docs):
    from phy802.sweep import SweepResult

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(sweep_docs[0]))
    b.write_text(json.dumps(sweep_docs[1]))
    m = SweepResult.merge_files([a, b])
    assert [e["seed"] for e in m.provenance] == [1, 2]
    assert m.points[0].counters.codewords == sum(d["points"][0]["counters"]["codewords"] for d in sweep_docs)
    with pytest.raises(ValueError, match="given twice"):
        SweepResult.merge_files([a, a])
    same_seed = copy.deepcopy(sweep_docs[0])
    c = tmp_path / "c.json"
    c.write_text(json.dumps(same_seed))
    with pytest.raises(ValueError, match="seed 1 was already merged"):
        SweepResult.merge_files([a, c])
    merged = tmp_path / "m.json"
    m.write_json(merged)
    with pytest.raises(ValueError, match="seed 2 was already merged"):
        SweepResult.merge_files([merged, b])
    other = copy.deepcopy(sweep_docs[1])
    other["config"]["simulator"] = "link"
    d = tmp_path / "d.json"
    d.write_text(json.dumps(other))
    with pytest.raises(ValueError, match="config.simulator"):
        SweepResult.merge_files([a, d])
    outside = copy.deepcopy(sweep_docs[1])
    outside["points"][0]["x"] = 0.1
    e = tmp_path / "e.json"
    e.write_text(json.dumps(outside))
    with pytest.raises(ValueError, match="not a point of the file's config"):
        SweepResult.read_json(e)
    unknown = copy.deepcopy(sweep_docs[1])
    unknown["config"]["fec"] = ["ieee", "warp"]
    f = tmp_path / "f.json"
    f.write_text(json.dumps(unknown))
    with pytest.raises(ValueError, match="warp"):
        SweepResult.read_json(f)


def test_lanes_config_decimal_with_leading_zeros(tmp_path, lanes_text):
    # hypothesis found "099999": int(s, 0) raised a bare ValueError; it is decimal, then range-checked
    import re as _re

    text = _re.sub(r"am_spacing=(\d+)", lambda m: "am_spacing=0" + m.group(1), lanes_text, count=1)
    assert text != lanes_text
    p = tmp_path / "z.txt"
    p.write_text(text)
    try:
        _, cfg = read_lanes(p)
    except LanesFileError as exc:
        assert str(exc).startswith(str(p))
    else:
        assert cfg["am_spacing"] == int(_re.search(r"am_spacing=(\d+)", lanes_text).group(1))


def test_sweep_merge_refuses_a_file_without_points_and_one_run_given_twice(tmp_path, sweep_docs, capsys):
    # a sweep.json with no points, or a copy of a run with only its seed edited, merged without a word
    from phy802.cli import main

    a = tmp_path / "a.json"
    a.write_text(json.dumps(sweep_docs[0]))
    empty = copy.deepcopy(sweep_docs[1])
    empty["points"] = []
    e = tmp_path / "empty.json"
    e.write_text(json.dumps(empty))
    assert main(["sweep", "--merge", str(a), str(e), "--no-progress"]) == 2
    assert f"{e}: holds no points" in capsys.readouterr().err
    assert main(["sweep", "--merge", str(e), "--no-progress"]) == 2
    assert f"{e}: holds no points" in capsys.readouterr().err
    renamed = copy.deepcopy(sweep_docs[0])
    renamed["config"]["seed"] = 7  # the same counts under another seed: one run, given twice
    r = tmp_path / "r.json"
    r.write_text(json.dumps(renamed))
    assert main(["sweep", "--merge", str(a), str(r), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{r}: every raw count" in err and str(a) in err and "one run given twice" in err
    b = tmp_path / "b.json"  # two real runs (seeds 1 and 2) still merge
    b.write_text(json.dumps(sweep_docs[1]))
    assert main(["sweep", "--merge", str(a), str(b), "--no-progress"]) == 0
