"""Unit tests of phy802.sweep and the ``phy802 sweep`` / ``phy802 link`` commands."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from phy802.cli import main
from phy802.sweep import SweepConfig, SweepResult, format_header, format_row, run_point, run_sweep

FAST = dict(points=(2e-3, 3e-3), code=("kp4",), fec=("ieee", "bypass"), target_errors=20, max_codewords=20_000, max_seconds=20)


def _counts(res: SweepResult):
    out = []
    for p in res.points:
        d = p.counters.as_dict()
        d.pop("seconds")
        out.append((p.mode, p.x, p.stop_reason, d))
    return out


def test_stopping_rules():
    cfg = SweepConfig(points=(3e-3,), code="kp4", fec="ieee", target_errors=30, max_codewords=10**6, max_seconds=None)
    p = run_point(cfg.tasks()[0])
    assert p.stop_reason == "target_errors" and p.counters.codeword_errors >= 30
    cfg = SweepConfig(points=(1e-5,), code="kp4", fec="ieee", target_errors=30, max_codewords=1000, max_seconds=None)
    p = run_point(cfg.tasks()[0])
    assert p.stop_reason == "max_codewords" and 1000 <= p.counters.codewords < 1000 + 2 * 64 + 2
    cfg = SweepConfig(points=(1e-5,), code="kp4", fec="ieee", target_errors=None, max_codewords=10**12, max_seconds=0.3)
    p = run_point(cfg.tasks()[0])
    assert p.stop_reason == "max_seconds" and 0.3 <= p.counters.seconds < 5


def test_serial_result_rows_files_and_merge(tmp_path):
    seen = []
    res = run_sweep(SweepConfig(**FAST), callback=seen.append)
    assert [(p.mode, p.x) for p in res.points] == [("kp4/ieee", 2e-3), ("kp4/ieee", 3e-3), ("kp4/bypass", 2e-3), ("kp4/bypass", 3e-3)]
    assert len(seen) == 4 and not res.interrupted
    for p in res.points:
        r = p.rates()
        assert r["fer"].events == p.counters.codeword_errors and r["fer"].lo <= r["fer"].value <= r["fer"].hi
        assert "|" in format_row(p)
    assert "FER 95% CI" in format_header()
    res.write_csv(tmp_path / "s.csv")
    res.write_json(tmp_path / "s.json")
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert len(rows) == 4 and {"fer", "fer_lo", "fer_hi", "theory_fer", "post_fec_ber_hi", "stop_reason"} <= set(rows[0])
    back = SweepResult.read_json(tmp_path / "s.json")
    assert _counts(back) == _counts(res)
    merged = res.merge(back)
    for a, m in zip(res.points, merged.points):
        assert m.counters.codewords == 2 * a.counters.codewords
        assert m.counters.codeword_errors == 2 * a.counters.codeword_errors
    (tmp_path / "bad.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a phy802 sweep file"):
        SweepResult.read_json(tmp_path / "bad.json")


def test_process_pool_gives_the_serial_result():
    cfg = SweepConfig(**FAST)
    assert _counts(run_sweep(cfg, executor="process", workers=2)) == _counts(run_sweep(cfg))


def test_dask_executor_gives_the_serial_result():
    import distributed
    cfg = SweepConfig(**{**FAST, "code": ("kr4",)})
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        res = run_sweep(cfg, executor=client.get_executor())
    assert _counts(res) == _counts(run_sweep(cfg))


def test_link_simulator_in_the_sweep():
    cfg = SweepConfig(points=(3e-3,), code=("kp4", "kr4"), fec="ieee", simulator="link", target_errors=5, max_codewords=400,
                      max_seconds=20)
    res = run_sweep(cfg)
    assert all(p.counters.codewords >= 2 for p in res.points)
    assert res.point("kr4/ieee", 3e-3).counters.n == 528


@pytest.mark.parametrize("kw, msg", [
    (dict(points=()), "points"),
    (dict(points=(0.5,)), "points"),
    (dict(points=(1e-4,), fec=("kp5",)), "fec"),
    (dict(points=(1e-4,), code=("kp5",)), "code"),
    (dict(points=(1e-4,), fec=("kp4",)), "code='kp4', fec='ieee'"),
    (dict(points=(1e-4,), fec=("detect",)), "code='kp4', fec='detect_only'"),
    (dict(points=(1e-4,), axis="ebn0"), "axis"),
    (dict(points=(1e-4,), max_codewords=1), "max_codewords"),
    (dict(points=(1e-4,), target_errors=0), "target_errors"),
    (dict(points=(1e-4, 1e-4)), "repeat"),
])
def test_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SweepConfig(**kw)


def test_sweep_cli(tmp_path, capsys):
    out = tmp_path / "o"
    rc = main(["sweep", "--ber", "2e-3,3e-3", "--code", "kp4", "--fec", "ieee,detect_only", "--target-errors", "10",
               "--max-codewords", "5000", "--max-seconds", "10", "--workers", "1", "--out", str(out), "--plot", "--json"])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["format"] == "phy802.sweep" and len(obj["points"]) == 4
    assert (out / "sweep.csv").read_text().startswith("mode,code,fec,axis,x,")
    assert json.loads((out / "sweep.json").read_text())["points"][1]["codewords"] == obj["points"][1]["codewords"]
    assert (out / "ber_fer.png").read_bytes()[:4] == b"\x89PNG"
    # a file merged with itself would double its counts: refused
    assert main(["sweep", "--merge", str(out / "sweep.json"), str(out / "sweep.json"), "--json"]) == 2
    assert "given twice" in capsys.readouterr().err
    out2 = tmp_path / "o2"
    rc = main(["sweep", "--ber", "2e-3,3e-3", "--code", "kp4", "--fec", "ieee,detect_only", "--target-errors", "10",
               "--max-codewords", "5000", "--max-seconds", "10", "--workers", "1", "--out", str(out2), "--seed", "2"])
    assert rc == 0
    second = json.loads((out2 / "sweep.json").read_text())
    capsys.readouterr()
    rc = main(["sweep", "--merge", str(out / "sweep.json"), str(out2 / "sweep.json"), "--json"])
    assert rc == 0
    merged = json.loads(capsys.readouterr().out)
    assert merged["points"][0]["codewords"] == obj["points"][0]["codewords"] + second["points"][0]["codewords"]
    assert [e["seed"] for e in merged["merged_from"]] == [1, 2]
    assert main(["sweep", "--fec", "ieee"]) == 2  # no channel points: clear error, exit 2
    assert "--ber or --snr-db" in capsys.readouterr().err


def test_sweep_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--target-errors" in text and "--scheduler" in text and "example" in text


def test_link_cli(capsys):
    rc = main(["link", "--code", "kp4", "--fec", "ieee", "--fault-lane", "2", "--fault-ber", "2e-3", "--pairs", "16",
               "--payload", "frames", "--json"])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    c = obj["counters"]
    assert np.flatnonzero(c["lane_symbol_errors"]).tolist() == [2]
    assert np.flatnonzero(c["pcs_lane_symbol_errors"]).tolist() == [4, 5]
    assert c["frames"] > 0 and c["frames_ok"] == c["frames"]
    assert main(["link", "--lane-order", "0,1;x"]) == 2


def test_burst_sweep_has_no_closed_form_and_does_not_merge_with_awgn():
    cfg = SweepConfig(points=(2e-3,), code="kp4", fec="ieee", burst_pb=0.5, target_errors=10, max_codewords=20_000)
    res = run_sweep(cfg)
    p = res.points[0]
    assert p.burst_pb == 0.5 and np.isnan(p.row()["theory_fer"])
    assert p.rates()["ser"].contains(4e-3)  # the point sets SER = 2 x BER
    with pytest.raises(ValueError, match="different link structure"):
        res.merge(run_sweep(SweepConfig(points=(2e-3,), code="kp4", fec="ieee", target_errors=10, max_codewords=2000)))


def test_ctrl_c_keeps_finished_points():
    def stop_after_first(p):
        raise KeyboardInterrupt

    res = run_sweep(SweepConfig(**FAST), callback=stop_after_first)
    assert res.interrupted and len(res.points) == 1 and res.points[0].mode == "kp4/ieee"


def test_cli_scheduler_flag_uses_a_dask_cluster(tmp_path, capsys):
    import distributed
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as cl:
        rc = main(["sweep", "--ber", "3e-3", "--code", "kr4", "--fec", "ieee", "--target-errors", "10", "--max-codewords", "4000",
                   "--scheduler", cl.scheduler_address, "--no-progress", "--json"])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    serial = run_sweep(SweepConfig(points=(3e-3,), code="kr4", fec="ieee", target_errors=10, max_codewords=4000, seed=1))
    assert obj["points"][0]["codewords"] == serial.points[0].counters.codewords
    assert main(["sweep", "--ber", "3e-3", "--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "1",
                 "--no-progress"]) == 2
    assert "cannot connect" in capsys.readouterr().err


def test_link_sweep_stops_when_the_receiver_cannot_lock():
    cfg = SweepConfig(points=(0.3,), code="kp4", fec="ieee", simulator="link", target_errors=None, max_codewords=10**9,
                      max_seconds=None, batch_pairs=4)
    p = run_point(cfg.tasks()[0])
    assert p.stop_reason == "no_lock" and p.counters.lock_failures >= 8


@pytest.mark.parametrize("argv, new", [
    (["sweep", "--ber", "1e-3", "--fec", "kp4"], "--fec kp4 is now --code kp4 --fec ieee"),
    (["sweep", "--ber", "1e-3", "--fec", "ieee,detect"], "--fec detect is now --code kp4 --fec detect_only"),
    (["sweep", "--ber", "1e-3", "--fec", "kr4"], "--fec kr4 is now --code kr4 --fec ieee"),
    (["link", "--fec", "none"], "--fec none is now --code none"),
    (["link", "--fec", "kp4"], "--fec kp4 is now --code kp4 --fec ieee"),
    (["link", "--code", "kp5"], "unknown code"),
    (["sweep", "--ber", "1e-3", "--code", "kp4,,kr4"], "empty item"),
])
def test_old_spellings_exit_2_with_the_new_spelling(argv, new, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert new in capsys.readouterr().err


def test_sweep_reads_a_file_written_before_issue_15(tmp_path):
    res = run_sweep(SweepConfig(**FAST))
    obj = res.to_json_obj()
    c = obj["config"]
    c["modes"] = ["kp4", "bypass"]
    del c["code"], c["fec"]
    for p in obj["points"]:
        p["mode"] = {"kp4/ieee": "kp4", "kp4/bypass": "bypass"}[p["mode"]]
    (tmp_path / "old.json").write_text(json.dumps(obj, default=float))
    back = SweepResult.read_json(tmp_path / "old.json")
    assert back.config.modes == res.config.modes and _counts(back) == _counts(res)


def test_llr_and_rs272_in_a_sweep():
    cfg = SweepConfig(points=(3e-3,), code=("kp4", "rs272", "none"), fec=("ieee", "llr"), target_errors=10,
                      max_codewords=20_000, max_seconds=20)
    assert cfg.modes == ("kp4/ieee", "kp4/llr", "rs272/ieee", "rs272/llr", "none")
    res = run_sweep(cfg)
    llr = res.point("rs272/llr", 3e-3).counters
    assert llr.n == 272 and llr.k == 257 and llr.llr_retries > 0
    assert res.point("rs272/ieee", 3e-3).counters.llr_retries == 0
    th = res.point("rs272/ieee", 3e-3).theory()
    assert 0 < th["fer"] < 1
