"""Hostile inputs of the link engineer's commands: a closed stdin, endless devices, FIFOs, link loops,
tampered 800G trace metadata, a --from-fit that names a model the generator cannot draw: each is a
clear error naming what it is (exit 2), never an internal error, a hang or memory growing to its end."""

from __future__ import annotations

import json
import os
import signal
import zlib
from pathlib import Path

import numpy as np
import pytest

from phy802.cli import main
from phy802.telemetry.fit import generator_channel

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def no_hang():
    def fail(signum, frame):
        raise TimeoutError("still running after 30 s: a hang")

    prev = signal.signal(signal.SIGALRM, fail)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, prev)


@pytest.mark.parametrize("argv", [["fec", "encode", "-"], ["fec", "decode"], ["fec", "tail", "-"],
                                  ["fec", "decode", "--code", "c177", "-"], ["fec", "decode", "--code", "c177", "--soft", "-"]])
def test_closed_stdin_is_bad_input(argv, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", None)  # what Python makes of a closed fd 0 ('CMD <&-')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "<stdin>: standard input is closed" in err and "internal error" not in err


@pytest.mark.parametrize("argv", [["fec", "tail", "/dev/zero"], ["vectors", "verify", "/dev/zero"]])
def test_endless_device_is_refused_naming_it(argv, capsys, no_hang):
    assert main(argv) == 2
    assert "/dev/zero:" in capsys.readouterr().err


def test_fifo_and_link_loop_named_for_what_they_are(tmp_path, capsys, no_hang, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo")
    os.symlink("loop", "loop")
    assert main(["trace", "info", "fifo"]) == 2
    assert "fifo: is not a regular file" in capsys.readouterr().err
    for argv in (["trace", "info", "loop"], ["vectors", "verify", "loop"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "loop: Too many levels of symbolic links" in err and "no such" not in err
    os.symlink("gone.trace", "dangling")  # a link whose target is missing: said so, not 'no such trace file'
    assert main(["trace", "info", "dangling"]) == 2
    assert "dangling: a symbolic link to 'gone.trace', which does not exist" in capsys.readouterr().err
    # a FIFO no one writes: refused at once, not waited on
    assert main(["trace", "generate", "--from-fit", "fifo", "--bits", "1e5", "--out", "t.trace"]) == 2
    assert "fifo: is not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["fec", "tail"], ["fec", "decode"], ["fec", "encode"], ["fec", "decode", "--code", "c177"],
                                  ["fec", "encode", "--code", "c177"]])
def test_socket_is_named_not_called_missing(argv, tmp_path, capsys, monkeypatch):
    import socket

    monkeypatch.chdir(tmp_path)  # a short path: AF_UNIX names are limited to ~107 bytes
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("sock")
        assert main([*argv, "sock"]) == 2
    err = capsys.readouterr().err
    assert "sock: is a socket, not a" in err and "No such device" not in err, err


def test_800g_without_noise_names_the_options_not_ber_none(tmp_path, capsys):
    assert main(["trace", "generate", "--rate", "800G", "--path", "exact", "--bits", "1e6",
                 "--out", str(tmp_path / "x.trace")]) == 2
    err = capsys.readouterr().err
    assert "give the line noise with --ber or --snr-db" in err and "None" not in err


def test_from_fit_ge_says_the_generator_cannot_draw_it():
    fit = {"best": "ge", "models": {"binomial": {"aic": 120.0}, "dfe": {"aic": 101.5}, "ge": {"aic": 100.0}}}
    with pytest.raises(ValueError, match=r"the best model by AIC is 'ge' \(Gilbert-Elliott\), which the trace generator "
                                         r"cannot draw.*--fit-model dfe \(AIC \+1\.5 vs ge\) or binomial \(AIC \+20 vs ge\)"):
        generator_channel(fit, None, "FIT.json")


# ------------------------------------------------------------------------------ tampered 800G trace metadata


@pytest.fixture(scope="module")
def dj_trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("dj") / "dj.trace"
    assert main(["trace", "generate", "--rate", "800G", "--snr-db", "16", "--bits", "2e6", "--seed", "1",
                 "--out", str(p), "--no-progress", "--json"]) == 0
    return p


def _retrailer(src: Path, dst: Path, edit) -> Path:
    """``src`` with its metadata edited and the trailer's CRC recomputed (what a tamperer does)."""
    from protocol.trace.format import _TRAILER_BYTES, TRAILER_MAGIC

    data = src.read_bytes()
    tr = data[-_TRAILER_BYTES:]
    i_off, n_ch, m_off, m_len, _ = (int(x) for x in np.frombuffer(tr[8:], "<u8"))
    meta = json.loads(data[m_off:m_off + m_len])
    edit(meta)
    mb = json.dumps(meta).encode()
    trailer = np.array([i_off, n_ch, m_off, len(mb), zlib.crc32(mb, zlib.crc32(data[i_off:m_off]))], "<u8")
    dst.write_bytes(data[:m_off] + mb + TRAILER_MAGIC + trailer.tobytes())
    return dst


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.update(rate="3.2T"), "'rate'"),
    (lambda m: m["inner"].update(code="c999"), "'inner.code'"),
    (lambda m: m["inner"]["counters"].update(inner_failed=-5), "'inner.counters.inner_failed'"),
    (lambda m: m["inner"]["rates"]["fer"].update(value=-0.1), "'inner.rates.fer.value'"),
    (lambda m: m.pop("inner"), "'inner' is missing"),
])
def test_tampered_800g_meta_fails_the_check(dj_trace, tmp_path, capsys, edit, field):
    capsys.readouterr()
    assert main(["trace", "info", str(dj_trace), "--check"]) == 0  # the untampered trace passes
    capsys.readouterr()
    bad = _retrailer(dj_trace, tmp_path / "bad.trace", edit)
    assert main(["trace", "info", str(bad), "--check"]) == 2
    assert field in capsys.readouterr().err
