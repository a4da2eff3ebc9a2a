"""``phy802 fec encode|decode --code c177``: round trip, strict input (exit 2 naming file, line, value)."""

import json

import numpy as np
import pytest

from phy802.cli import main
from phy802.fec import inner as I


def _write(path, arr):
    path.write_text("# blocks\n" + "".join(" ".join(map(str, r)) + "\n" for r in arr))


def test_round_trip(tmp_path, capsys):
    rng = np.random.default_rng(1)
    m = rng.integers(0, 2, (3, 120), dtype=np.uint8)
    _write(tmp_path / "m.txt", m)
    assert main(["fec", "encode", "--code", "c177", str(tmp_path / "m.txt"), "--out", str(tmp_path / "c.txt")]) == 0
    c = np.loadtxt(tmp_path / "c.txt", dtype=np.uint8, ndmin=2)
    assert np.array_equal(c, I.encode(m))
    c[0, 121] ^= 1
    c[1, [1, 41]] ^= 1
    _write(tmp_path / "r.txt", c)
    capsys.readouterr()
    assert main(["fec", "decode", "--code", "c177", str(tmp_path / "r.txt")]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].endswith("# corrected 61") and lines[1].endswith("# uncorrectable -1") and lines[2].endswith("# ok -1")
    assert "3 blocks, 1 corrected, 1 uncorrectable" in err
    assert main(["fec", "decode", "--code", "c177", str(tmp_path / "r.txt"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["words"][0]["decoded"] == I.encode(m)[0].tolist()


def test_soft_decode_cli(tmp_path, capsys):
    rng = np.random.default_rng(2)
    c = I.encode(rng.integers(0, 2, (2, 120), dtype=np.uint8))
    y = I.pam4_samples(c, 0.05, rng)
    y[0, 7] = -y[0, 7] * 0.2 if abs(y[0, 7]) < 2 else y[0, 7] * 0.55
    (tmp_path / "y.txt").write_text("".join(" ".join(f"{v:.4f}" for v in r) + "\n" for r in y))
    assert main(["fec", "decode", "--code", "c177", "--soft", str(tmp_path / "y.txt"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [w["decoded"] for w in doc["words"]] == c.tolist()


@pytest.mark.parametrize("action,text,msg", [
    ("encode", "0 1 0\n", "m.txt:1: expected 120 bits, got 3"),
    ("encode", "# c\n\n" + "0 " * 119 + "2\n", "m.txt:3: bit 120: '2' is not 0 or 1"),
    ("encode", "0 " * 128 + "\n", "m.txt:1: expected 120 bits, got 128"),
    ("decode", "1 " * 120 + "\n", "m.txt:1: expected 128 bits, got 120"),
    ("decode", "0 " * 127 + "x\n", "m.txt:1: bit 128: 'x' is not 0 or 1"),
    ("encode", "", "m.txt: no blocks"),
])
def test_bad_input_exit_2(tmp_path, capsys, action, text, msg):
    (tmp_path / "m.txt").write_text(text)
    assert main(["fec", action, "--code", "c177", str(tmp_path / "m.txt")]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["fec", "encode", "--code", "c177"], ["fec", "decode", "--code", "c177"],
                                  ["fec", "decode", "--code", "c177", "--soft"]])
def test_a_file_without_line_breaks_is_refused_not_read_whole(tmp_path, capsys, monkeypatch, argv):
    # the c177 files go through cli._common.bounded_lines like the RS files: a line past MAX_LINE
    # characters is refused naming the file and line 1, before the whole line is held in memory
    import phy802.cli._common as C

    monkeypatch.setattr(C, "MAX_LINE", 4096)
    monkeypatch.setattr(C.bounded_lines, "__defaults__", (4096,))
    f = tmp_path / "long.txt"
    f.write_text("0 " * 5000)  # 10000 characters, no newline
    assert main([*argv, str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:1: line longer than 4096 characters" in err, err
