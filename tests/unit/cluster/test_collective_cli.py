"""phy802 collective as a user reads it: the time at the BER asked (mean and tails, the no-loss time
marked as such), every option honoured or refused up front (products, trial budgets, negative
offsets, --code none, empty paths), simulations interruptible, and nccl-tests files read strictly
(sizes as nccl-tests prints them, wrong results refused, 0-byte rows left out, bounded input,
rank lines in one pass)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from phy802.cli import main
from protocol.cluster.ncclfile import NcclTestsError, read_nccl_tests

from test_ncclfile import ROWS, _text  # the same directory (pytest puts it on sys.path)

REPO = Path(__file__).resolve().parents[3]


def test_time_column_is_the_time_at_the_ber(capsys):
    # bypass at BER 1e-6 loses frames: the time shown is the simulated mean, the no-loss time is
    # beside it under its own name (it was the 'time us' column, the mean further right)
    assert main(["collective", "--fec", "bypass", "--ber", "1e-6", "--seed", "1", "--trials", "300", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["time_us"]) == {"mean", "p50", "p99", "p999"}
    assert d["time_us"]["mean"] > 10 * d["no_loss_time_us"]
    assert d["busbw_GBps"] < d["no_loss_busbw_GBps"] / 10
    assert main(["collective", "--fec", "bypass", "--ber", "1e-6", "--seed", "1", "--trials", "300"]) == 0
    out = capsys.readouterr().out.splitlines()
    hdr = out[1].split()
    row = out[2].split()
    # columns: op ranks bytes algo/proto code fec ber time p50 p99 p999 fail no-loss busbw ...
    assert hdr[7:9] == ["time", "us"] and "no-loss" in hdr
    assert float(row[7]) == pytest.approx(d["time_us"]["mean"], rel=1e-3)
    assert float(row[12]) == pytest.approx(d["no_loss_time_us"], rel=1e-3)
    assert "mean over the 300 seeded trials" in "\n".join(out)


def test_ber_without_trials_simulates_and_trials_0_is_refused(capsys):
    assert main(["collective", "--fec", "bypass", "--ber", "1e-6", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["trials"] == 1000 and d["time_us"]["mean"] > d["no_loss_time_us"]
    assert main(["collective", "--fec", "bypass", "--ber", "1e-6", "--trials", "0"]) == 2
    assert "--trials 0 with --ber" in capsys.readouterr().err
    # at BER 0 nothing is simulated: one value
    assert main(["collective", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert isinstance(d["time_us"], float) and d["time_us"] == d["no_loss_time_us"]


def test_large_products_and_trial_budgets_are_refused_up_front(capsys):
    t0 = time.monotonic()
    sizes = ",".join(str(8 * 2**i) for i in range(30))
    bers = ",".join(f"{k}e-9" for k in range(1, 10))
    assert main(["collective", "--bytes", sizes, "--fec", "ieee,bypass,llr,detect_only,unequal", "--ber",
                 "0," + bers, "--code", "kp4,kr4,rs272", "--ranks", ",".join(str(8 * k) for k in range(1, 13))]) == 2
    err = capsys.readouterr().err
    assert "rows" in err and "--force" in err and "54,000" in err
    # the run: ~5.3e10 lost frames, about half an hour of one compiled call, was accepted
    assert main(["collective", "--nodes", "1000", "--trials", "1400000", "--ber", "1e-4", "--fec", "bypass",
                 "--bytes", "1e9"]) == 2
    err = capsys.readouterr().err
    assert "lost frames expected" in err and "would take about" in err
    assert time.monotonic() - t0 < 30


def test_simulation_is_chunked_reproducibly(monkeypatch):
    from protocol.cluster import transport
    from protocol.cluster.nccl import predict
    from protocol.cluster.topology import preset

    c = preset("dgx-h100-ib", nodes=4, fec="bypass", ber=1e-5)
    pr = predict("allreduce", 1e6, c)
    one = transport.simulate(pr, c, 400, seed=5)
    assert transport.chunk_trials(pr, c, 400) == 400  # small runs: one call, as before
    monkeypatch.setattr(transport, "CHUNK_LOSSES", 64)
    step = transport.chunk_trials(pr, c, 400)
    assert 1 <= step < 400
    calls = []
    from protocol.cluster import _kernels  # imported inside simulate at each call: count its calls

    orig = _kernels.sim_trials

    def counting(*a):
        calls.append(a[1])
        return orig(*a)

    monkeypatch.setattr(_kernels, "sim_trials", counting)
    a = transport.simulate(pr, c, 400, seed=5)
    b = transport.simulate(pr, c, 400, seed=5)
    assert len(calls) == 2 * -(-400 // step) and max(calls) <= step
    assert np.array_equal(a.samples_us, b.samples_us)
    # the same distribution as the one-call run (different uniforms): the failure share and the mean
    assert abs(a.failure_rate - one.failure_rate) < 0.2
    assert a.p50_us == pytest.approx(one.p50_us, rel=0.2)
    # and a real test of "the same distribution": two-sample Kolmogorov-Smirnov at level 0.001
    from scipy.stats import ks_2samp

    assert ks_2samp(a.samples_us, one.samples_us).pvalue > 1e-3


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "NUMBA_NUM_THREADS": "1", "PHY802_STATE_DIR": str(tmp_path / "s")}


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_long_simulation_honours_ctrl_c_and_sigterm(tmp_path, sig, code):
    # the run under --force: one compiled call of ~30 min ignored both signals
    argv = ["collective", "--nodes", "1000", "--trials", "1400000", "--ber", "1e-4", "--fec", "bypass", "--bytes",
            "1e9", "--force"]
    proc = subprocess.Popen([sys.executable, "-m", "phy802", *argv], cwd=tmp_path, env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(8)
    assert proc.poll() is None
    t0 = time.monotonic()
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert time.monotonic() - t0 < 10
    assert "Traceback" not in err.decode()


def test_negative_offsets_are_refused(capsys):
    assert main(["collective", "--latency-offset-us", "-1000"]) == 2
    err = capsys.readouterr().err
    assert "--latency-offset-us -1000" in err and "negative" in err
    assert main(["collective", "--latency-offset-us", "-5", "--json"]) == 0  # a shift that keeps it >= 0
    assert json.loads(capsys.readouterr().out)["time_us"] > 0


def test_code_none_is_never_modelled_as_decoded(capsys):
    assert main(["collective", "--code", "none", "--fec", "ieee"]) == 2
    assert "no FEC sublayer" in capsys.readouterr().err
    assert main(["collective", "--code", "kp4,none", "--fec", "ieee,bypass"]) == 2
    assert "no FEC sublayer" in capsys.readouterr().err
    assert main(["collective", "--code", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fec"] == "bypass"


def test_empty_paths_are_refused(tmp_path, capsys):
    f = tmp_path / "ar.txt"
    f.write_text(_text(ROWS))
    assert main(["collective", "--nccl-tests", str(f), "--calibrate", ""]) == 2
    assert "empty path" in capsys.readouterr().err
    assert main(["collective", "--nccl-tests", ""]) == 2


def _swap_first_size(text: str, new: str) -> str:
    return text.replace("        8192          2048", f"{new:>12}          2048", 1)


@pytest.mark.parametrize("tok", ["8192.7", "8_192", "+8192", "８１９２", "8192e0"])
def test_sizes_are_ascii_integers(tmp_path, tok):
    f = tmp_path / "s.txt"
    f.write_text(_swap_first_size(_text(ROWS), tok), encoding="utf-8")
    with pytest.raises(NcclTestsError, match="line .*field 'size'"):
        read_nccl_tests(f)


def test_wrong_results_are_refused(tmp_path, capsys):
    text = _text(ROWS)
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("65536"))
    bad = lines[:]
    bad[at] = bad[at][: bad[at].rindex("0")] + "3"  # in-place #wrong 3
    f = tmp_path / "w.txt"
    f.write_text("\n".join(bad) + "\n")
    with pytest.raises(NcclTestsError, match=r"#wrong.*in-place.*is 3"):
        read_nccl_tests(f)
    g = tmp_path / "oob.txt"
    g.write_text(text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 7 FAILED"))
    with pytest.raises(NcclTestsError, match="Out of bounds values.*7 FAILED"):
        read_nccl_tests(g)
    assert main(["collective", "--nccl-tests", str(g)]) == 2
    assert str(g) in capsys.readouterr().err
    h = tmp_path / "na.txt"  # -c 0: no check, N/A
    h.write_text(text.replace("      0 ", "    N/A "))
    assert read_nccl_tests(h).bytes == tuple(s for s, _ in ROWS)


def test_zero_byte_rows_are_left_out_not_diagnosed(tmp_path, capsys):
    lines = _text(ROWS).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("8192"))
    zero = "           0             0     float     sum      -1    25.00    0.00    0.00      0    25.00    0.00    0.00      0"
    f = tmp_path / "z.txt"
    f.write_text("\n".join(lines[:at] + [zero] + lines[at:]) + "\n")
    run = read_nccl_tests(f)
    assert run.bytes == tuple(s for s, _ in ROWS) and run.meta["zero_byte_lines"] == [at + 1]
    assert main(["collective", "--nccl-tests", str(f)]) == 0
    out = capsys.readouterr().out
    assert "infx" not in out and "SLOW SMALL" not in out and "0-byte rows" in out


def test_endless_input_is_bounded_and_named(tmp_path, capsys):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(NcclTestsError, match="/dev/zero: is not a regular file"):
        read_nccl_tests("/dev/zero")
    from protocol.cluster import ncclfile

    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(ncclfile.MAX_NCCL_TESTS_BYTES + 1)
    with pytest.raises(NcclTestsError, match="big.txt: .*too large"):
        read_nccl_tests(big)


def test_rank_lines_are_read_in_linear_time(tmp_path):
    # 16,000 hosts x 1 GPU: hosts.count per host was O(hosts^2), 35 s
    hosts = tuple(f"n{i:05d}" for i in range(16000))
    f = tmp_path / "big.txt"
    f.write_text(_text(ROWS, ranks=16000, hosts=hosts))
    t0 = time.perf_counter()
    run = read_nccl_tests(f)
    assert run.nodes == 16000 and run.gpus_per_node == 1
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("extra, named", [
    (["--ranks", "16"], "--ranks"), (["--bytes", "1e6"], "--bytes"), (["--fec", "ieee,bypass"], "--fec ieee,bypass"),
    (["--code", "kp4,rs272"], "--code kp4,rs272"), (["--ber", "1e-6"], "--ber 1e-06"),
])
def test_options_a_measured_run_would_ignore_are_refused(tmp_path, capsys, extra, named):
    # the file gives ranks and sizes, and one cluster is compared with it: these were dropped silently
    f = tmp_path / "ar.txt"
    f.write_text(_text(ROWS))
    assert main(["collective", "--nccl-tests", str(f), *extra]) == 2
    assert named in capsys.readouterr().err


def test_trials_at_ber_0_only_are_refused(capsys):
    assert main(["collective", "--trials", "100"]) == 2
    assert "nothing to simulate" in capsys.readouterr().err
    assert main(["collective", "--trials", "20", "--ber", "0,1e-6", "--fec", "bypass", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert isinstance(rows[0]["time_us"], float) and set(rows[1]["time_us"]) == {"mean", "p50", "p99", "p999"}


@pytest.mark.parametrize("field", [{"latency_offset_us": -1000.0}, {"algo_latency_us": {"tree": -500.0}}])
def test_negative_offsets_from_a_calibration_file_are_refused(tmp_path, capsys, field):
    from protocol.cluster.ncclfile import CAL_FORMAT

    cal = {"format": CAL_FORMAT, "version": 2, "net_efficiency": 0.9, "latency_offset_us": 0.0, **field}
    f = tmp_path / "cal.json"
    f.write_text(json.dumps(cal))
    assert main(["collective", "--calibration", str(f), "--bytes", "8192"]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and next(iter(field)) in err  # the reader refuses it, naming the file and the field


def test_algo_and_proto_take_nccl_lists(capsys):
    # --algo / --proto read as NCCL_ALGO / NCCL_PROTO: a comma list or ^-list enables a set, NCCL's
    # minimum-time choice among it; an unknown name is refused naming it (was: one name only)
    assert main(["collective", "--algo", "Ring,Tree", "--proto", "Simple", "--bytes", "8,1e9", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["algo"] for r in rows} <= {"ring", "tree"} and {r["proto"] for r in rows} == {"Simple"}
    assert main(["collective", "--proto", "^LL", "--bytes", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["proto"] != "LL"
    with pytest.raises(SystemExit) as ex:
        main(["collective", "--algo", "ring,trea"])
    assert ex.value.code == 2 and "unknown algorithm 'trea'" in capsys.readouterr().err
    assert main(["collective", "--cluster", "flat-ethernet", "--algo", "ring,tree"]) == 2
    assert "flat-ethernet model knows ring, tree, direct" in capsys.readouterr().err


def _stdin(monkeypatch, data: bytes) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_nccl_tests_dash_reads_standard_input(tmp_path, monkeypatch, capsys):
    # '-' is standard input, as for 'fec tail -' and every phy802 reader (it was opened as a file
    # named '-': "-: cannot read: No such file or directory")
    f = tmp_path / "ar.txt"
    f.write_text(_text(ROWS))
    assert main(["collective", "--nccl-tests", str(f), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    _stdin(monkeypatch, f.read_bytes())
    assert main(["collective", "--nccl-tests", "-", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["file"] == "-" and got["rows"] == want["rows"] and got["summary"] == want["summary"]
    # a closed stdin ('CMD <&-') is bad input, named; so is an endless one
    monkeypatch.setattr("sys.stdin", None)
    assert main(["collective", "--nccl-tests", "-"]) == 2
    err = capsys.readouterr().err
    assert "<stdin>: standard input is closed" in err and "internal error" not in err
    from protocol.cluster import ncclfile

    monkeypatch.setattr(ncclfile, "MAX_NCCL_TESTS_BYTES", 1000)
    _stdin(monkeypatch, b"#" * 1001)
    with pytest.raises(NcclTestsError, match="<stdin>: more than 1000 bytes, too large"):
        read_nccl_tests("-")


def test_advise_refuses_two_inputs_from_standard_input(capsys):
    assert main(["advise", "--fec-hist", "-", "--nccl-tests", "-"]) == 2
    assert "--fec-hist and --nccl-tests are both '-'" in capsys.readouterr().err
