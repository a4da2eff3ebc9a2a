"""``phy802 fec encode|decode``: round trips, formats, JSON, and bad input (exit 2, line and field named)."""

import io
import json

import numpy as np
import pytest

from phy802.cli import main
from phy802.fec import KP4, KR4, RS272, encode


def _lines(arr, fmt="dec"):
    if fmt == "hex":
        return "".join(" ".join(f"{v:x}" for v in row) + "\n" for row in arr)
    return "".join(" ".join(str(v) for v in row) + "\n" for row in arr)


def test_encode_decode_round_trip_through_files(tmp_path, capsys, rng):
    msgs = rng.integers(0, 1024, size=(4, KR4.k))
    (tmp_path / "m.txt").write_text("# messages\n" + _lines(msgs) + "\n")
    assert main(["fec", "encode", "--code", "kr4", str(tmp_path / "m.txt"), "--out", str(tmp_path / "c.txt")]) == 0
    cw = np.loadtxt(tmp_path / "c.txt", dtype=np.int64, ndmin=2)
    assert np.array_equal(cw, encode(KR4, msgs))
    rx = cw.copy()
    rx[0, [3, 100, 527]] ^= 5  # 3 errors: corrected
    rx[1, :KR4.t + 3] ^= 1  # uncorrectable
    (tmp_path / "r.txt").write_text(_lines(rx))
    capsys.readouterr()
    assert main(["fec", "decode", "--code", "kr4", str(tmp_path / "r.txt")]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].endswith("# corrected 3") and lines[1].endswith("# uncorrectable -1")
    assert lines[2].endswith("# ok 0")
    dec = np.array([[int(v) for v in ln.split("#")[0].split()] for ln in lines])
    assert np.array_equal(dec[[0, 2, 3]], cw[[0, 2, 3]]) and np.array_equal(dec[1], rx[1])
    assert "4 words, 1 corrected (3 symbols), 1 uncorrectable" in err
    # the text output is valid input again
    (tmp_path / "d.txt").write_text(out)
    assert main(["fec", "decode", "--code", "kr4", str(tmp_path / "d.txt"), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert [w["status"] for w in obj["words"]] == ["ok", "uncorrectable", "ok", "ok"]


def test_rs272_encode_decode(tmp_path, capsys, rng):
    msgs = rng.integers(0, 1024, size=(2, RS272.k))
    (tmp_path / "m.txt").write_text(_lines(msgs))
    assert main(["fec", "encode", "--code", "rs272", str(tmp_path / "m.txt"), "--out", str(tmp_path / "c.txt")]) == 0
    cw = np.loadtxt(tmp_path / "c.txt", dtype=np.int64, ndmin=2)
    assert cw.shape == (2, 272) and np.array_equal(cw, encode(RS272, msgs))
    rx = cw.copy()
    rx[0, :7] ^= 3  # t = 7: corrected
    rx[1, :8] ^= 3  # 8 errors: uncorrectable (d = 15)
    (tmp_path / "r.txt").write_text(_lines(rx))
    capsys.readouterr()
    assert main(["fec", "decode", "--code", "rs272", str(tmp_path / "r.txt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("# corrected 7") and lines[1].endswith("# uncorrectable -1")


def test_stdin_hex_json_and_detect(monkeypatch, capsys, rng):
    cw = encode(KP4, rng.integers(0, 1024, size=(2, KP4.k)))
    rx = cw.copy()
    rx[1, 7] ^= 0x3FF
    monkeypatch.setattr("sys.stdin", io.StringIO(_lines(rx, "hex")))
    assert main(["fec", "decode", "--format", "hex", "--json", "-"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["code"] == {"name": "KP4", "n": 544, "k": 514, "t": 15}
    assert obj["words"][1]["n_corrected"] == 1 and obj["words"][1]["positions"] == [7]
    assert obj["words"][1]["decoded"] == cw[1].tolist()
    assert obj["counters"]["corrected_symbols"] == 1 and obj["counters"]["codewords"] == 2

    monkeypatch.setattr("sys.stdin", io.StringIO(_lines(rx, "hex")))
    assert main(["fec", "decode", "--format", "hex", "--mode", "detect"]) == 0
    out, err = capsys.readouterr()
    first, second = out.splitlines()
    assert first.endswith("# ok 0") and second.endswith("# detected -1")
    assert second.split("#")[0].split()[7] == f"{rx[1, 7]:03x}"  # unchanged, 3-digit hex
    assert "1 with errors detected" in err


def test_custom_code_encode(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("1 2 3\n"))
    assert main(["fec", "encode", "--n", "7", "--k", "3", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    from phy802.fec import RSCode

    assert obj["words"][0]["codeword"] == encode(RSCode(7, 3), [1, 2, 3]).tolist()


@pytest.mark.parametrize(
    "content, args, match",
    [
        ("1 2 3\n", ["encode", "--code", "kr4"], r"in\.txt:1: expected 514 symbols, got 3"),
        ("\n# c\n" + "5 " * 513 + "abc\n", ["encode", "--code", "kr4"], r"in\.txt:3: field 514: 'abc' is not a decimal"),
        ("5 " * 513 + "1024\n", ["encode", "--code", "kr4"], r"in\.txt:1: field 514: symbol 1024 = 1024 is outside"),
        ("5 " * 513 + "g\n", ["encode", "--code", "kr4", "--format", "hex"], r"field 514: 'g' is not a hex"),
        ("5 " * 513 + "400\n", ["encode", "--code", "kr4", "--format", "hex"], r"symbol 400 = 1024 is outside"),
        ("1 " * 528 + "\n", ["decode", "--code", "kp4"], r"in\.txt:1: expected 544 symbols, got 528"),
        ("1\n", ["encode", "--n", "7"], r"--n and --k must be given together"),
        ("1\n", ["encode", "--n", "8", "--k", "3"], r"n - k even"),
    ],
)
def test_bad_input_exits_2_with_line_and_field(tmp_path, capsys, content, args, match):
    f = tmp_path / "in.txt"
    f.write_text(content)
    assert main(["fec", *args, str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"phy802 fec {args[0]}: error:")  # the command as typed (README: exit codes)
    import re

    assert re.search(match, err), err


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["fec", "decode", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt" in capsys.readouterr().err
