"""What a newcomer trips over in the first hour: each small defect seen, with its test."""

from __future__ import annotations

import re
import sys

import pytest

from phy802.cli import main


def test_error_lines_name_the_command_as_typed(tmp_path, capsys):
    # README: one line `phy802 CMD: error: ...`, CMD the command as typed -- the same prefix
    # argparse's own errors of that sub-command carry
    assert main(["fec", "tail", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.startswith("phy802 fec tail: error: ")
    assert main(["vectors", "verify", str(tmp_path / "nope.txt")]) == 2
    assert capsys.readouterr().err.startswith("phy802 vectors verify: error: ")
    with pytest.raises(SystemExit):
        main(["fec", "tail", "--bootstrap", "x", "a.json"])
    assert capsys.readouterr().err.startswith("phy802 fec tail: error: ")
    assert main(["latency", "--rate", "400G", "--json"]) == 0  # a command without actions is unchanged
    capsys.readouterr()


def test_vectors_verify_prints_whole_paths(tmp_path, capsys, monkeypatch):
    import shutil

    from phy802.vectors import default_dir

    deep = tmp_path / ("a_rather_long_folder_name_" * 3) / "my_capture_of_the_gray_map.txt"
    deep.parent.mkdir(parents=True)
    shutil.copy(default_dir() / "pma" / "gray_map.txt", deep)
    monkeypatch.chdir(tmp_path)
    assert main(["vectors", "verify", str(deep)]) == 0
    out = capsys.readouterr().out
    rel = str(deep.relative_to(tmp_path))
    assert re.search(rf"^{re.escape(rel)}\s+pma\s+4\s+pass$", out, re.M), out  # relative, whole, never cut


def test_a_vector_mismatch_says_which_side_is_the_file(tmp_path, capsys):
    from phy802.vectors import default_dir

    text = (default_dir() / "pma" / "precoder.txt").read_text()
    m = re.search(r"output=(\d)", text)
    bad = text[:m.start(1)] + str((int(m.group(1)) + 1) % 4) + text[m.end(1):]
    (tmp_path / "pre.txt").write_text(bad)
    assert main(["vectors", "verify", str(tmp_path / "pre.txt")]) == 1
    out = capsys.readouterr().out
    assert "the file has" in out and "phy802 computes" in out and "expected" not in out


def test_sweep_table_once_on_a_terminal(capsys, monkeypatch):
    args = ["sweep", "--ber", "1e-3", "--code", "kp4", "--fec", "ieee", "--target-errors", "5",
            "--max-codewords", "2000", "--max-seconds", "0", "--workers", "1", "--seed", "1"]
    # stdout a file: the whole table (the live rows go to stderr)
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out.count("kp4/ieee") >= 2 and "kp4/ieee" in err  # table row + histogram row; live row
    # both on one terminal: the live table is already on screen, stdout does not repeat it
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(args) == 0
    out, err = capsys.readouterr()
    rows = [ln for ln in (out + err).splitlines() if ln.lstrip().startswith("kp4/ieee")]
    assert len(rows) == 1, out + err  # the table row once; the histogram line starts with '#'
    assert "# FEC codeword histograms" in out


def test_trace_named_npz_is_refused_and_trace_is_written(tmp_path, capsys):
    base = ["trace", "generate", "--ber", "1e-4", "--bits", "1e7", "--seed", "1", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "t.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("phy802 trace generate: error: ") and "t.trace" in err and "not an .npz" in err
    assert not (tmp_path / "t.npz").exists()
    assert main([*base, "--out", str(tmp_path / "t.trace")]) == 0
    capsys.readouterr()
    assert main(["trace", "info", str(tmp_path / "t.trace")]) == 0


def _help(argv):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main([*argv, "--help"])
    return buf.getvalue()


@pytest.mark.parametrize("argv,interval,why", [
    (["link"], "(0, 0.375)", "0.375 = PAM4 Gray at zero SNR"),
    (["sweep"], "(0, 0.375)", "0.375 = PAM4 Gray at zero SNR"),
    (["theory", "pam4"], "(0, 0.375)", "0.375 = PAM4 Gray at zero SNR"),
    (["theory", "rs"], "(0, 0.5)", "0.5 = a coin flip per bit"),
    (["trace", "generate"], "(0, 0.5)", "0.5 = a coin flip per bit"),
    (["collective"], "[0, 0.5)", "0 = error-free; 0.5 = a coin flip per bit"),
])
def test_ber_help_states_the_real_range_and_why(argv, interval, why):
    text = _help(argv)
    m = re.search(r"^  --ber BER(?:\[,BER\.\.\.\])?\s(.*?)(?=^  -)", text, re.S | re.M)
    assert m, text
    words = " ".join(m.group(1).split())
    assert interval in words and why in words, words


@pytest.mark.parametrize("bad,argv", [("0.375", ["link"]), ("0.5", ["trace", "generate", "--out", "x.trace"]),
                                      ("0.5", ["collective"])])
def test_ber_ranges_are_the_ones_enforced(bad, argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--ber", bad])
    assert e.value.code == 2 and "is outside" in capsys.readouterr().err


def test_readme_map_names_every_package():
    # a package missing from the README's "Where things live" is one a newcomer cannot find (the
    # plumbing, now phy802/runtime/, was three private modules named only file by file)
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    section = (root / "README.md").read_text(encoding="utf-8").split("## Where things live", 1)[1].split("\n## ", 1)[0]
    packages = sorted(str(p.parent.relative_to(root)) for top in ("phy802", "protocol", "integration")
                      for p in (root / top).rglob("__init__.py"))
    assert "phy802/runtime" in packages
    assert [p for p in packages if f"`{p}/`" not in section] == []
