"""protocol.cluster.tradeoff and ``phy802 tradeoff`` on a small synthetic experiment results folder."""

import csv
import json
import math

import pytest

from phy802.runtime.jsonable import to_jsonable
from phy802.cli import main
from protocol.cluster.flat import Cluster
from protocol.cluster.tradeoff import (TimeModel, load_results, parse_modes, pareto_front, steps_to_target,
                               tradeoff_rows)


def _curve(pen=0.0, nan_from=None):
    out = []
    for s in range(0, 301, 50):
        v = 4.0 - 2.0 * (s / 300) ** 0.5 + pen * s / 300
        out.append([s, float("nan") if nan_from is not None and s >= nan_from else v])
    return out


def _rows():
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=_curve(), final_val_loss=2.0)]
    for ber, pen in ((1e-6, 0.01), (1e-5, 0.05)):
        rows.append(dict(parallel="ddp", ber=ber, guard="nan_to_zero_clamp", evals=_curve(pen),
                         final_val_loss=2.0 + pen))
        rows.append(dict(parallel="ddp", ber=ber, guard="exponent_protection", evals=_curve(pen / 5),
                         final_val_loss=2.0 + pen / 5))
        rows.append(dict(parallel="ddp", ber=ber, guard="none", evals=_curve(nan_from=100), final_val_loss=float("nan")))
    return rows


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "exp"
    d.mkdir()
    # as `phy802 experiment` writes it: strict JSON, a NaN loss as null (phy802.runtime.jsonable.to_jsonable)
    (d / "results.json").write_text(json.dumps(to_jsonable({"meta": {"fec": "bypass", "world_size": 2}, "rows": _rows()})))
    return d


def test_steps_to_target_interpolates():
    ev = [[0, 4.0], [100, 3.0], [200, 2.0]]
    assert steps_to_target(ev, 2.5) == pytest.approx(150.0)
    assert steps_to_target(ev, 3.0) == pytest.approx(100.0)
    assert steps_to_target(ev, 4.5) == 0.0
    assert steps_to_target(ev, 1.0) == math.inf
    assert steps_to_target([[0, 4.0], [100, float("nan")], [200, 1.0]], 2.0) == math.inf


def test_join_rules(results):
    meta, rows = load_results(results)
    tm = TimeModel()
    table = tradeoff_rows(meta, rows, modes=parse_modes("kp4:ieee,kp4:llr,kp4:bypass,kp4:unequal"), ranks=(64,),
                          cluster=Cluster(), time_model=tm)
    by = {(r["mode"], r["ber"], r["guard"]): r for r in table}
    # ieee and llr deliver no errors: the error-free curve at every BER, so the same steps to target
    assert by[("kp4/ieee", 1e-5, "-")]["loss_penalty"] == 0.0
    assert by[("kp4/llr", 1e-5, "-")]["steps_to_target"] == by[("kp4/ieee", 0.0, "-")]["steps_to_target"]
    ref = by[("kp4/ieee", 0.0, "-")]
    assert ref["vs_ref"] == pytest.approx(1.0)
    # bypass gets the measured rows (all guards); unequal the exponent_protection ones
    bp = by[("kp4/bypass", 1e-5, "nan_to_zero_clamp")]
    assert bp["loss_penalty"] == pytest.approx(0.05)
    assert bp["time_to_target_s"] == math.inf and math.isinf(bp["vs_ref"])  # never reaches the 1% target
    assert by[("kp4/unequal", 1e-5, "exponent_protection")]["loss_penalty"] == pytest.approx(0.01)
    assert ("kp4/unequal", 1e-5, "nan_to_zero_clamp") not in by
    assert math.isnan(by[("kp4/bypass", 1e-6, "none")]["loss_penalty"])
    # time side: at BER 0 bypass is faster than ieee by exactly its exposed PHY latency share
    b0 = by[("kp4/bypass", 0.0, "-")]
    assert b0["step_ms"] < ref["step_ms"] and b0["phy_us"] == 0.0
    # time to target = steps x step time
    assert ref["time_to_target_s"] == pytest.approx(ref["steps_to_target"] * ref["step_ms"] / 1e3)
    # the target: error-free final x 1.01 = 2.02, reached by the shadow curve before step 300
    assert ref["target_loss"] == pytest.approx(2.02) and ref["steps_to_target"] < 300


def test_pareto_front():
    pts = [(0.0, 10.0), (0.1, 9.0), (0.2, 9.5), (float("nan"), 1.0), (0.3, 8.0)]
    assert pareto_front(pts) == [0, 1, 4]


def test_cli_on_a_synthetic_folder(results, tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["tradeoff", "--cluster", "flat-ethernet", "--results", str(results), "--out", str(out), "--ranks", "8,64",
                 "--modes", "kp4:ieee,rs272:ieee,kp4:bypass"]) == 0
    cap = capsys.readouterr()
    assert "kp4/bypass" in cap.out and "time_to_target_s" in cap.out and not cap.err  # the live table, on stdout
    assert "fastest to the target loss" in cap.out
    doc = json.loads((out / "tradeoff.json").read_text())
    assert {r["ranks"] for r in doc["rows"]} == {8, 64}
    with open(out / "tradeoff.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == len(doc["rows"])
    png = (out / "pareto.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.name != ".phy802-output"]  # no temporaries


def test_combinations_without_a_loss_curve_are_reported(tmp_path, capsys):
    rows = [r for r in _rows() if r["guard"] != "exponent_protection"]
    d = tmp_path / "r"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(to_jsonable({"meta": {"fec": "bypass"}, "rows": rows})))
    assert main(["tradeoff", "--cluster", "flat-ethernet", "--results", str(d), "--out", str(tmp_path / "o"), "--ranks", "8",
                 "--modes", "kp4:ieee,kp4:unequal"]) == 0
    out = capsys.readouterr().out
    assert "no loss curve in the results for: ddp kp4/unequal at BER 1e-06, ddp kp4/unequal at BER 1e-05" in out
    doc = json.loads((tmp_path / "o" / "tradeoff.json").read_text())
    assert {(x["mode"], x["ber"]) for x in doc["not_measured"]} == {("kp4/unequal", 1e-6), ("kp4/unequal", 1e-5)}


def test_cli_json_and_bad_inputs(results, tmp_path, capsys):
    assert main(["tradeoff", "--cluster", "flat-ethernet", "--results", str(results), "--out", str(tmp_path / "j"), "--ranks", "8",
                 "--modes", "kp4:ieee", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["mode"] == "kp4/ieee"
    assert main(["tradeoff", "--results", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    assert "results.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tradeoff", "--modes", "kp4-ieee"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.json").write_text(json.dumps({"rows": [{"parallel": "ddp"}]}))
    assert main(["tradeoff", "--results", str(bad), "--out", str(tmp_path / "y")]) == 2
    assert "has no field" in capsys.readouterr().err


def test_fsdp_rows_use_the_fsdp_time_model(tmp_path):
    rows = _rows() + [dict(r, parallel="fsdp") for r in _rows()]
    table = tradeoff_rows({"fec": "bypass"}, rows, modes=parse_modes("kp4:ieee,kp4:bypass"), ranks=(64,))
    st = {(r["parallel"], r["mode"], r["ber"]): r["step_ms"] for r in table}
    assert st[("fsdp", "kp4/ieee", 0.0)] > st[("ddp", "kp4/ieee", 0.0)]  # 1.5x the traffic of DDP
    assert st[("fsdp", "kp4/bypass", 0.0)] < st[("fsdp", "kp4/ieee", 0.0)]


def test_cli_summary_reports_a_tie_as_a_tie(results, tmp_path, capsys):
    """rs272/ieee and rs272/llr reach the target in the same modelled time (the summary
    named one of them, picked by row order): the text and --json list both and say tie."""
    args = ["tradeoff", "--cluster", "flat-ethernet", "--results", str(results), "--ranks", "64",
            "--modes", "kp4:ieee,rs272:ieee,rs272:llr,kp4:bypass"]
    assert main(args + ["--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "x64" in x and "BER 1e-05" in x)
    assert "tie of 2: rs272/ieee, rs272/llr" in line and "vs_ref 0.996" in line
    assert "equal at 3 decimals are a tie" in out
    assert "phy_us (model): the FEC receive latency summed over every sequential link hop" in out
    # the error-free winner is alone: kp4/bypass (no FEC latency) is faster than both RS(272) modes
    assert next(x for x in out.splitlines() if "x64" in x and "BER 0 " in x).rstrip().endswith("kp4/bypass")
    assert main(args + ["--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    g = next(g for g in doc["fastest"] if g["ranks"] == 64 and g["ber"] == 1e-5)
    assert g["tie"] is True and [s["mode"] for s in g["settings"]] == ["rs272/ieee", "rs272/llr"]
    assert round(g["settings"][0]["vs_ref"], 3) == round(g["settings"][1]["vs_ref"], 3) == g["vs_ref"]
    g0 = next(g for g in doc["fastest"] if g["ranks"] == 64 and g["ber"] == 0.0)
    assert g0["tie"] is False and [s["mode"] for s in g0["settings"]] == ["kp4/bypass"]
    assert "tie" in doc["fastest_rule"] and "summed" in doc["phy_us_meaning"]
    assert json.loads((tmp_path / "j" / "tradeoff.json").read_text())["fastest"] == doc["fastest"]


def test_results_of_several_recipes_are_refused_naming_the_file(tmp_path):
    d = tmp_path / "exp"
    d.mkdir()
    rows = [dict(r, recipe="default") for r in _rows()] + [dict(r, recipe="paper") for r in _rows()]
    (d / "results.json").write_text(json.dumps(to_jsonable({"meta": {"fec": "bypass"}, "rows": rows})))
    with pytest.raises(ValueError, match=r"results.json: rows of several training recipes \(default, paper\)"):
        load_results(d)
