"""The target loss of ``phy802 tradeoff`` (and advise's loss side) is on the validation curve's own
scale, so the error-free run reaches it; a target the error-free run never reaches is said, not
left as a bare inf; and an ``experiment --sizes`` size fit sitting beside the results is pointed at
(``--scaling`` stays explicit). Synthetic results.json, no training."""

from __future__ import annotations

import json
import math

import pytest

from phy802.cli import main
from protocol.advise import loss_side_from_results
from protocol.cluster.tradeoff import TimeModel, curve_target, load_results, tradeoff_rows

#: a 40-step run as 'experiment' writes it: the curve on random validation batches ends at 2.5307,
#: the final loss on the fixed validation set is 2.4945 (integration/train.py _Evaluator), 1.4% apart
EVALS = [[0, 4.197335243225098], [20, 2.91], [40, 2.5307012399037676]]
FINAL = 2.494524836540222


def _results(d, n_params=818_176):
    d.mkdir(parents=True)
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=EVALS, final_val_loss=FINAL, n_params=n_params,
                 recipe="default"),
            dict(parallel="ddp", ber=1e-6, guard="none", evals=[[s, v + 0.01 * s / 40] for s, v in EVALS],
                 final_val_loss=FINAL + 0.01, n_params=n_params, recipe="default")]
    (d / "results.json").write_text(json.dumps({"meta": {"fec": "bypass", "world_size": 2}, "rows": rows}))
    return d


def _cli(tmp_path, results, *extra, name="o"):
    return main(["tradeoff", "--results", str(results), "--out", str(tmp_path / name), "--cluster", "flat-ethernet",
                 "--modes", "kp4:ieee,kp4:bypass", "--ranks", "8", *extra])


def test_error_free_run_reaches_its_own_target(tmp_path):
    # the target was the fixed set's final loss x 1.01 = 2.5195, below every point of the curve: steps inf
    meta, rows = load_results(_results(tmp_path / "exp"))
    assert curve_target(rows[0], 0.01) == pytest.approx(EVALS[-1][1] * 1.01)
    table = tradeoff_rows(meta, rows, modes=[("kp4", "ieee"), ("kp4", "bypass")], ranks=(8,),
                          time_model=TimeModel(sim=TimeModel().sim))
    ref = next(r for r in table if r["mode"] == "kp4/ieee" and r["ber"] == 0.0)
    assert ref["target_loss"] == pytest.approx(2.5307012399037676 * 1.01)
    assert 20 < ref["steps_to_target"] < 40 and math.isfinite(ref["time_to_target_s"]) and ref["vs_ref"] == 1.0
    side = loss_side_from_results(str(tmp_path / "exp"))  # advise's loss side: the same target
    assert side.target_loss == pytest.approx(ref["target_loss"]) and side.base_steps == pytest.approx(ref["steps_to_target"])


def test_an_unreached_target_is_said(tmp_path, capsys):
    res = _results(tmp_path / "exp")
    assert _cli(tmp_path, res, "--target-loss", "2.0") == 0
    out = capsys.readouterr().out
    note = ("note: ddp: the error-free run never reaches the target loss 2 (its lowest validation-curve point "
            "is 2.531): every steps/time to target is inf")
    assert note in out
    doc = json.loads((tmp_path / "o" / "tradeoff.json").read_text())
    assert doc["notes"] and doc["notes"][0].startswith("ddp: the error-free run never reaches")
    assert _cli(tmp_path, res, name="p") == 0  # the default target: reached, nothing to say
    assert "never reaches" not in capsys.readouterr().out
    assert json.loads((tmp_path / "p" / "tradeoff.json").read_text())["notes"] == []


def test_a_size_fit_beside_the_results_is_pointed_at(tmp_path, capsys):
    camp = tmp_path / "size_out"  # 'experiment --sizes --out size_out': scaling.json beside size-*/
    size = _results(camp / "size-4x128")
    _results(camp / "size-4x64", n_params=212_480)
    (camp / "scaling.json").write_text("{}")  # found, never read without --scaling
    assert _cli(tmp_path, size, "--model", "gpt2-124m") == 0
    out = capsys.readouterr().out
    hint = f"hint: {camp / 'scaling.json'} is the size fit of this experiment's sizes: --scaling {camp / 'scaling.json'}"
    assert hint in out
    doc = json.loads((tmp_path / "o" / "tradeoff.json").read_text())
    assert doc["loss_side"]["kind"] == "measured" and doc["loss_side"]["scaling_hint"].startswith(str(camp))
    # no hint where the time side's model is the results' own size (the fit would not be used)
    assert _cli(tmp_path, size, "--params", "818176", "--layers", "4", "--d-model", "128", "--tokens-per-step",
                "4096", name="same") == 0
    assert "hint:" not in capsys.readouterr().out
    # the campaign folder itself as --results: refused, naming a size folder and the fit
    assert _cli(tmp_path, camp, name="c") == 2
    err = capsys.readouterr().err
    assert "campaign folder" in err and str(camp / "size-4x128") in err and f"--scaling {camp / 'scaling.json'}" in err
