"""A table of bad command lines: each exits 2 with exactly one line on
stderr, no traceback, and leaves every pre-existing file in the working folder untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from phy802.cli import main

SENTINEL = "user data, not phy802's\n"


def _setup(d: Path) -> None:
    (d / "keep.txt").write_text(SENTINEL)
    (d / "out.txt").write_text(SENTINEL)  # an existing output file
    (d / "userdir").mkdir()
    (d / "userdir" / "notes.txt").write_text(SENTINEL)
    (d / "emptydir").mkdir()
    (d / "empty.txt").write_text("")
    (d / "comments.txt").write_text("# nothing but a comment\n\n")
    (d / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 10)
    (d / "underscore.txt").write_text("1_0 " + "1 " * 543 + "\n")
    (d / "plus.txt").write_text("+5 " + "1 " * 543 + "\n")
    (d / "arabic.txt").write_text("\u0663 " + "1 " * 543 + "\n")
    (d / "hex0x.txt").write_text("0x400 " + "1 " * 543 + "\n")  # 0x is read (as dumps print it); 0x400 > 1023
    (d / "hexneg.txt").write_text("-0 " + "1 " * 543 + "\n")
    (d / "trunc.npz").write_bytes(b"PK\x03\x04" + b"\x00" * 20)
    with open(d / "float.npz", "wb") as fh:
        np.savez(fh, lanes=np.full((16, 8), 1.5), config=np.array(
            "kind=config rate=400G am_spacing=163840 scrambler_seed=0x1 prbs9_seed=0x1FF am_status=0"))
    (d / "lanes_float.txt").write_text("kind=config rate=400G am_spacing=163840 scrambler_seed=0x1 prbs9_seed=0x1FF "
                                       "am_status=0\nkind=lane row=0 symbols=1,2.5,3\n")
    (d / "notsweep.json").write_text(json.dumps({"format": "phy802.sweep", "version": 1}))
    (d / "badjson.json").write_text("{nope")


# (id, argv) -- paths are relative to the test's working folder
CASES = [
    # train / experiment options: the same strict validators as every other command (parsed before
    # torch or any process is started)
    ("train-lr-nan", ["train", "--lr", "nan"]),
    ("train-lr-negative", ["train", "--lr", "-1"]),
    ("train-steps-plus", ["train", "--steps", "+5"]),
    ("train-batch-zero", ["train", "--batch-size", "0"]),
    ("train-ber-underscore", ["train", "--ber", "1_0e-5"]),
    ("experiment-bers-underscore", ["experiment", "--out", "newdir", "--bers", "1_0"]),
    ("experiment-seeds-repeat", ["experiment", "--out", "newdir", "--seeds", "1,1"]),
    ("experiment-guard-unknown", ["experiment", "--out", "newdir", "--guards", "none,foo"]),
    # fec codeword files: lenient parsing, empty and binary input, bad options
    ("fec-underscore", ["fec", "decode", "underscore.txt"]),
    ("fec-plus", ["fec", "decode", "plus.txt"]),
    ("fec-arabic", ["fec", "decode", "arabic.txt"]),
    ("fec-hex-0x", ["fec", "decode", "--format", "hex", "hex0x.txt"]),
    ("fec-hex-minus0", ["fec", "decode", "--format", "hex", "hexneg.txt"]),
    ("fec-empty", ["fec", "decode", "empty.txt"]),
    ("fec-comments-only", ["fec", "encode", "comments.txt"]),
    ("fec-binary", ["fec", "decode", "binary.txt"]),
    ("fec-missing", ["fec", "decode", "no_such_file.txt"]),
    ("fec-bad-input-keeps-out", ["fec", "decode", "plus.txt", "--out", "out.txt"]),
    ("fec-out-is-folder", ["fec", "encode", "--n", "4", "--k", "2", "--out", "userdir", "keep.txt"]),
    ("fec-n-without-k", ["fec", "decode", "--n", "10", "keep.txt"]),
    ("fec-odd-parity", ["fec", "decode", "--n", "10", "--k", "7", "keep.txt"]),
    ("fec-n-huge", ["fec", "decode", "--n", "99999999999999999999", "--k", "2", "keep.txt"]),
    # pcs
    ("pcs-frames-1e12", ["pcs", "tx", "--frames", "1e12", "--out", "out.txt"]),
    ("pcs-frames-float", ["pcs", "tx", "--frames", "2.5", "--out", "out.txt"]),
    ("pcs-ser-nan", ["pcs", "tx", "--ser", "nan", "--out", "out.txt"]),
    ("pcs-ser-big", ["pcs", "tx", "--ser", "1.5", "--out", "out.txt"]),
    ("pcs-skew-neg", ["pcs", "tx", "--skew", "-1", "--out", "out.txt"]),
    ("pcs-len-order", ["pcs", "tx", "--min-len", "100", "--max-len", "50", "--out", "out.txt"]),
    ("pcs-seed-0x", ["pcs", "tx", "--scrambler-seed", "0x", "--out", "out.txt"]),
    ("pcs-seed-neg", ["pcs", "tx", "--seed", "-1", "--out", "out.txt"]),
    ("pcs-am-spacing", ["pcs", "tx", "--am-spacing", "41", "--frames", "1", "--out", "out.txt"]),
    ("pcs-out-is-folder", ["pcs", "tx", "--frames", "1", "--out", "userdir"]),
    ("pcs-rx-truncated", ["pcs", "rx", "trunc.npz"]),
    ("pcs-rx-float-npz", ["pcs", "rx", "float.npz"]),
    ("pcs-rx-float-text", ["pcs", "rx", "lanes_float.txt"]),
    ("pcs-rx-binary", ["pcs", "rx", "binary.txt"]),
    ("pcs-rx-empty", ["pcs", "rx", "empty.txt"]),
    ("pcs-rx-missing", ["pcs", "rx", "nope.txt"]),
    # pma
    ("pma-count-1e12", ["pma", "prbs", "--count", "1e12"]),
    ("pma-count-neg", ["pma", "prbs", "--count", "-1"]),
    ("pma-pattern", ["pma", "prbs", "--pattern", "prbs7"]),
    ("pma-state", ["pma", "prbs", "--state", "000000000"]),
    ("pma-initial-huge", ["pma", "decode", "0112", "--initial", "99999999999999999999"]),
    ("pma-initial-4", ["pma", "precode", "0112", "--initial", "4"]),
    ("pma-map-odd", ["pma", "map", "010"]),
    ("pma-demap-digit", ["pma", "demap", "0124"]),
    # vectors
    ("vectors-missing", ["vectors", "verify", "nope_dir"]),
    ("vectors-empty-folder", ["vectors", "verify", "emptydir"]),
    # sweep
    ("sweep-merge-self", ["sweep", "--merge", "s1/sweep.json", "s1/sweep.json"]),
    ("sweep-merge-notsweep", ["sweep", "--merge", "notsweep.json"]),
    ("sweep-merge-badjson", ["sweep", "--merge", "badjson.json"]),
    ("sweep-merge-binary", ["sweep", "--merge", "binary.txt"]),
    ("sweep-out-foreign", ["sweep", "--merge", "s1/sweep.json", "--out", "userdir"]),
    ("sweep-out-file", ["sweep", "--merge", "s1/sweep.json", "--out", "keep.txt"]),
    ("sweep-max-codewords-inf", ["sweep", "--ber", "1e-3", "--max-codewords", "inf"]),
    ("sweep-max-seconds-nan", ["sweep", "--ber", "1e-3", "--max-seconds", "nan"]),
    # link
    ("link-pairs-1e15", ["link", "--pairs", "1e15"]),
    ("link-pairs-1e12", ["link", "--pairs", "1e12"]),
    ("link-ber-nan", ["link", "--ber", "nan"]),
    ("link-snr-inf", ["link", "--snr-db", "inf"]),
    ("link-fault-ber-alone", ["link", "--fault-ber", "1e-3"]),
    ("link-precoder-init-alone", ["link", "--precoder-init", "2"]),
    ("link-fault-lane-range", ["link", "--fault-lane", "9", "--pairs", "4"]),
    ("link-lane-order", ["link", "--lane-order", "0,x;1", "--pairs", "4"]),
    ("link-seed-neg", ["link", "--seed", "-1"]),
    # sweep budget, theory, latency, trace
    ("sweep-too-long", ["sweep", "--ber", "1e-4,2e-4", "--max-codewords", "1e15", "--max-seconds", "0"]),
    ("sweep-plot-no-out", ["sweep", "--ber", "1e-3", "--plot"]),
    ("theory-snr-nan", ["theory", "pam4", "--snr-db", "nan"]),
    ("theory-rs-ber", ["theory", "rs", "--ber", "0.7"]),
    ("theory-rare-huge", ["theory", "rare", "--ber", "2.4e-4", "--samples-per-k", "1e15"]),
    ("theory-burst-pb", ["theory", "burst", "--pe", "1e-4", "--pb", "1"]),
    ("latency-clock-inf", ["latency", "--clock-ghz", "inf"]),
    ("latency-clock-zero", ["latency", "--clock-ghz", "0"]),
    ("trace-bits-1e30", ["trace", "generate", "--bits", "1e30", "--out", "out.txt"]),
    ("trace-too-long", ["trace", "generate", "--bits", "1e16", "--out", "out.txt"]),
    ("trace-weights-nan", ["trace", "generate", "--lane-weights", "nan,1", "--out", "out.txt"]),
    ("trace-weights-zero", ["trace", "generate", "--lane-weights", "0,0", "--out", "out.txt"]),
    ("trace-info-missing", ["trace", "info", "nope.npz"]),
    ("trace-info-truncated", ["trace", "info", "trunc.npz"]),
    ("trace-info-text", ["trace", "info", "keep.txt"]),
    # unknown option / command
    ("unknown-option", ["pma", "prbs", "--bogus"]),
    ("unknown-command", ["warp"]),
]


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("sw")
    assert main(["sweep", "--ber", "2e-3", "--target-errors", "5", "--max-codewords", "300", "--workers", "1",
                 "--no-progress", "--out", str(d / "s1")]) == 0
    return d / "s1" / "sweep.json"


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
            for p in sorted(d.rglob("*"))}


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors exit from inside main
        return int(exc.code)


@pytest.mark.parametrize("argv", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, sweep_file, argv):
    monkeypatch.chdir(tmp_path)
    _setup(tmp_path)
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "sweep.json").write_bytes(sweep_file.read_bytes())
    before = _snapshot(tmp_path)
    rc = _run(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert rc == 2, (rc, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "error:" in lines[0] and lines[0].startswith("phy802")
    assert _snapshot(tmp_path) == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".tmp", ".old"))]


def test_internal_error_is_one_line_and_exit_3(monkeypatch, capsys):
    import phy802.cli.pma as pma

    def boom(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(pma, "run", boom)
    assert main(["pma", "prbs"]) == 3
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "internal error" in err and "PHY802_DEBUG=1" in err
    monkeypatch.setenv("PHY802_DEBUG", "1")
    assert main(["pma", "prbs"]) == 3
    assert "Traceback" in capsys.readouterr().err


# ----------------------------------------------------------------------------- options that contradict

@pytest.mark.parametrize("argv,flags", [
    (["link", "--code", "none", "--fec", "ieee"], ("--code none", "--fec ieee")),
    (["link", "--code", "none", "--fec", "detect_only"], ("--code none", "--fec detect_only")),
    (["sweep", "--code", "none", "--fec", "ieee,bypass"], ("--code none", "--fec ieee")),
    (["trace", "generate", "--code", "none", "--fec", "llr", "--out", "t.trace"], ("--code none", "--fec llr")),
    (["trace", "info", "x.trace", "--json", "--format", "text"], ("--json", "--format text")),
    (["link", "--json", "--format", "ethtool-json"], ("--json", "--format ethtool-json")),
    (["sweep", "--json", "--format", "text"], ("--json", "--format text")),
])
def test_contradicting_options_are_refused_naming_both(tmp_path, monkeypatch, capsys, argv, flags):
    """``--code none --fec ieee`` (no FEC sublayer: the mode would be ignored) and ``--json --format
    text`` were accepted; now exit 2 before anything runs, the one line naming both options."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and all(f in err for f in flags), err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv", [
    ["link", "--code", "none"],  # the default --fec is not a choice of the user's
    ["link", "--code", "none", "--fec", "bypass"],  # what --code none does anyway
    ["sweep", "--code", "kp4,none", "--fec", "ieee"],  # --fec applies to kp4
    ["link", "--json", "--format", "json"],
    ["link", "--format", "text"],
])
def test_compatible_options_are_not_refused(monkeypatch, argv):
    import importlib

    mod = importlib.import_module(f"phy802.cli.{argv[0]}")
    monkeypatch.setattr(mod, "run", lambda args: 0)
    assert main(argv) == 0


@pytest.mark.parametrize("field", ["x", "snr_db"])
def test_sweep_file_number_past_float_range_names_the_field(tmp_path, monkeypatch, capsys, sweep_file, field):
    """``points[0].x = 10**400`` was 'int too large to convert to float' (no file, no field)."""
    monkeypatch.chdir(tmp_path)
    doc = json.loads(sweep_file.read_text())
    doc["points"][0][field] = 10 ** 400
    (tmp_path / "big.json").write_text(json.dumps(doc))
    assert main(["sweep", "--merge", "big.json", str(sweep_file), "--out", "m"]) == 2
    err = capsys.readouterr().err
    assert "big.json" in err and f"points[0]: field {field}" in err, err


@pytest.mark.parametrize("argv,named", [
    (["pma", "prbs", "--state", "x"], "--state 'x'"),
    (["pma", "prbs", "--count", "1e-400"], "argument --count: '1e-400' is below"),  # was read as 0, exit 0
    (["collective", "--bytes", "1e-400"], "argument --bytes: item '1e-400': '1e-400' is below"),
    (["trace", "generate", "--scheduler", "x", "--out", "t.trace"], "argument --scheduler"),
    (["sweep", "--ber", "1e-3", "--scheduler", "host", "--out", "s"], "argument --scheduler"),
    (["tradeoff", "--results", "binary.json", "--out", "t"], "binary.json: not UTF-8"),
    (["tradeoff", "--results", "rows.json", "--out", "t"], "rows.json: row 0 must be an object"),
    (["tradeoff", "--results", "deep.json", "--out", "t"], "deep.json: JSON nested deeper"),
])
def test_messages_name_the_option_or_file_and_the_value(tmp_path, monkeypatch, capsys, argv, named):
    """Item 16: 'seed must be 9 characters ...' (no --state), Dask's 'missing port number in address
    'x'' (no --scheduler), ''utf-8' codec can't decode byte ...' (no file) were exit-2 lines naming
    neither the option nor the file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "binary.json").write_bytes(b'{"rows": "\x88\x89"}')
    (tmp_path / "rows.json").write_text('{"rows": [5]}')
    (tmp_path / "deep.json").write_text("[" * 5000 + "]" * 5000)
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and named in err, err
    assert not (tmp_path / "t").exists() and not (tmp_path / "s").exists()
