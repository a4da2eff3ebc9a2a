"""The size fit (``experiment --sizes`` scaling.json) as tradeoff's loss side of a larger model.

Synthetic scaling files written by the real writer (:func:`integration.scaling.scaling_doc`; no
training): the prediction at another size against an independent weighted fit (numpy.polyfit),
the threshold's verdict (tolerated / uncertain / not tolerated) at the interval's ends, the join
that gives a predicted row no penalty and no time unless tolerated, the refusals naming the file,
and the command's outputs saying which loss side they used."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from integration.scaling import scaling_doc
from phy802.cli import main
from protocol.cluster.sizefit import NOT_TOLERATED, TOLERATED, UNCERTAIN, read_size_fit
from protocol.cluster.tradeoff import TimeModel, load_results, steps_to_target, tradeoff_rows
from protocol.cluster.steptime import model_preset
from test_tradeoff_cluster import _curve  # the same directory (pytest puts it on sys.path)

#: (n_params, passes, fails, interp, lower, upper): three sizes whose interpolated thresholds lie on
#: log10 T = -2 - log10 N (slope -1), each with a 95% interval inside the grid
_SIZES = ((1e5, 1e-8, 1e-7, 1e-7 * 0.999, 1e-9, 1e-6),
          (1e6, 1e-9, 1e-8, 1e-8 * 0.999, 1e-10, 1e-7),
          (1e7, 1e-10, 1e-9, 1e-9 * 0.999, 1e-11, 1e-8))
_KIND = "payload-stream BER"
_GPT2 = model_preset("gpt2-124m")["params"]


def _row(passes, fails, interp, lower, upper, guard="none", kind=_KIND, status="bracketed"):
    return {"parallel": "ddp", "recipe": "default", "guard": guard, "ber_is": kind, "status": status,
            "passes": passes, "fails": fails, "interp": interp, "lower": lower, "upper": upper,
            "interval_known": lower is not None, "threshold": f"[{passes}, {fails})", "interval": f"[{lower}, {upper})",
            "delivered_passes": None}


def _write_scaling(path, guards=("none",), fec="bypass", sizes=_SIZES, drop_cov=False, **row_kw):
    sz = [{"size": f"s{i}", "n_params": int(n), "tolerance": [_row(*t, guard=g, **row_kw) for g in guards]}
          for i, (n, *t) in enumerate(sizes)]
    doc = scaling_doc(sz, 0.02, ("gpt2-small", _GPT2))
    if drop_cov:
        for g in doc["fits"]:
            g["fit"].pop("cov")
    path.write_text(json.dumps({"meta": {"fec": fec, "recipes": ["default"]}, **doc}))
    return path


def test_prediction_at_another_size_is_the_independent_weighted_fit(tmp_path):
    fit = read_size_fit(_write_scaling(tmp_path / "scaling.json"))
    x = np.log10([s[0] for s in _SIZES])
    y = np.log10([s[3] for s in _SIZES])
    sd = np.array([(math.log10(s[5]) - math.log10(s[4])) / 2 / 1.96 for s in _SIZES])
    coef, cov = np.polyfit(x, y, 1, w=1 / sd, cov="unscaled")  # numpy's own WLS: slope first
    for n in (3e5, 124e6, 8e9):
        p = fit.predict("ddp", "default", "none", "m", int(n))
        v = np.array([math.log10(int(n)), 1.0])
        assert p.log10_ber == pytest.approx(coef[0] * v[0] + coef[1], abs=1e-9)
        assert p.log10_sd == pytest.approx(math.sqrt(v @ cov @ v), rel=1e-9)
    p = fit.predict("ddp", "default", "none", "gpt2-124m", _GPT2)
    assert p.fit_range == (100_000, 10_000_000)
    assert p.decades == pytest.approx(math.log10(_GPT2 / 1e7))
    assert fit.predict("ddp", "default", "none", "m", 2_000_000).decades == 0.0
    assert fit.predict("ddp", "default", "none", "m", 1_000).decades == pytest.approx(2.0)


def test_the_threshold_judges_a_ber_against_its_interval(tmp_path):
    p = read_size_fit(_write_scaling(tmp_path / "scaling.json")).predict("ddp", "default", "none", "g", _GPT2)
    assert p.lo95 < p.ber < p.hi95
    assert p.verdict(p.lo95) == TOLERATED and p.verdict(p.lo95 * 0.9) == TOLERATED
    assert p.verdict(p.lo95 * 1.01) == UNCERTAIN and p.verdict(p.hi95) == UNCERTAIN
    assert p.verdict(p.hi95 * 1.01) == NOT_TOLERATED
    t = p.text()
    assert "unchecked" in t and f"[{p.lo95:.2g}, {p.hi95:.2g}]" in t and "extrapolates 1.1 decades" in t


def test_a_file_without_covariance_predicts_only_its_target(tmp_path):
    fit = read_size_fit(_write_scaling(tmp_path / "scaling.json", drop_cov=True))
    p = fit.predict("ddp", "default", "none", "gpt2-124m", _GPT2)
    with_cov = read_size_fit(_write_scaling(tmp_path / "b.json")).predict("ddp", "default", "none", "g", _GPT2)
    assert p.log10_ber == pytest.approx(with_cov.log10_ber) and p.log10_sd == pytest.approx(with_cov.log10_sd)
    with pytest.raises(ValueError, match=r"scaling\.json.*'cov'"):
        fit.predict("ddp", "default", "none", "llama3-8b", 8_000_000_000)


def test_refusals_name_the_file_and_what_differs(tmp_path):
    f = _write_scaling(tmp_path / "scaling.json", guards=("none", "nan_to_zero_clamp"))
    fit = read_size_fit(f)
    row = {"parallel": "ddp", "ber": 1e-6, "guard": "none", "recipe": "default", "ber_is": _KIND}
    fit.check_results({"fec": "bypass"}, [row], "R")
    with pytest.raises(ValueError, match=r"scaling\.json.*--fec unequal"):
        fit.check_results({"fec": "unequal"}, [row], "R")
    with pytest.raises(ValueError, match=r"scaling\.json.*recipe paper"):
        fit.check_results({"fec": "bypass"}, [dict(row, recipe="paper")], "R")
    with pytest.raises(ValueError, match=r"scaling\.json.*parallel pp"):
        fit.check_results({"fec": "bypass"}, [dict(row, parallel="pp")], "R")
    with pytest.raises(ValueError, match=r"scaling\.json.*guard exponent_protection"):
        fit.check_results({"fec": "bypass"}, [dict(row, guard="exponent_protection")], "R")
    with pytest.raises(ValueError, match=r"scaling\.json.*pre-FEC line BER"):
        fit.check_results({"fec": "bypass"}, [dict(row, ber_is="pre-FEC line BER")], "R")
    # a size whose threshold is not inside the grid: the file records no fit, and says why
    sizes = _SIZES[:2] + ((1e7, 1e-10, None, None, None, None),)
    sz = [{"size": f"s{i}", "n_params": int(n), "tolerance": [_row(*t, status="above grid" if t[1] is None else "bracketed")]}
          for i, (n, *t) in enumerate(sizes)]
    (tmp_path / "nofit.json").write_text(json.dumps({"meta": {}, **scaling_doc(sz, 0.02, ("g", _GPT2))}))
    with pytest.raises(ValueError, match=r"nofit\.json.*not made.*above grid"):
        read_size_fit(tmp_path / "nofit.json").predict("ddp", "default", "none", "g", _GPT2)
    (tmp_path / "bad.json").write_text(json.dumps({"epsilon": 0.02, "fits": [{"parallel": "ddp"}]}))
    with pytest.raises(ValueError, match=r"bad\.json: fits\[0\]"):
        read_size_fit(tmp_path / "bad.json")


def _results(tmp_path, n_params=212_480, bers=(1e-14, 1e-9)):
    d = tmp_path / "exp"
    d.mkdir()
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=_curve(), final_val_loss=2.0, n_params=n_params,
                 recipe="default", ber_is="error-free")]
    for b in bers:  # the small model measured a penalty of 0.3 nats: the prediction must not use it
        rows.append(dict(parallel="ddp", ber=b, guard="none", evals=_curve(0.3), final_val_loss=2.3,
                         n_params=n_params, recipe="default", ber_is=_KIND))
    (d / "results.json").write_text(json.dumps({"meta": {"fec": "bypass", "world_size": 2}, "rows": rows}))
    return d


def test_join_uses_the_threshold_not_the_small_models_penalty(tmp_path):
    p = read_size_fit(_write_scaling(tmp_path / "scaling.json")).predict("ddp", "default", "none", "g", _GPT2)
    lo_ber, hi_ber, mid = p.lo95 / 10, p.hi95 * 10, p.ber
    meta, rows = load_results(_results(tmp_path, bers=(lo_ber, mid, hi_ber)))
    kw = dict(modes=[("kp4", "ieee"), ("kp4", "bypass")], ranks=(8,), time_model=TimeModel(sim=TimeModel().sim))
    measured = tradeoff_rows(meta, rows, **kw)
    got = tradeoff_rows(meta, rows, predicted={("ddp", "none"): p}, **kw)
    shadow_steps = steps_to_target(_curve(), 2.0 * 1.01)
    by = {(r["mode"], r["ber"]): r for r in got}
    ok, unsure, bad = by[("kp4/bypass", lo_ber)], by[("kp4/bypass", mid)], by[("kp4/bypass", hi_ber)]
    assert (ok["tolerated"], unsure["tolerated"], bad["tolerated"]) == (TOLERATED, UNCERTAIN, NOT_TOLERATED)
    assert ok["steps_to_target"] == pytest.approx(shadow_steps) and math.isfinite(ok["vs_ref"])
    for r in (ok, unsure, bad):
        assert r["loss_side"] == "predicted" and math.isnan(r["loss_penalty"])
    for r in (unsure, bad):
        assert math.isnan(r["steps_to_target"]) and math.isnan(r["time_to_target_s"]) and math.isnan(r["vs_ref"])
    clean = by[("kp4/ieee", hi_ber)]
    assert clean["loss_side"] == "error-free" and clean["tolerated"] == TOLERATED
    # the measured join (no prediction) gives the small model's 0.3-nat penalty and no verdict
    m = {(r["mode"], r["ber"]): r for r in measured}[("kp4/bypass", lo_ber)]
    assert m["loss_side"] == "measured" and m["tolerated"] is None and m["loss_penalty"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="no predicted threshold for ddp guard none"):
        tradeoff_rows(meta, rows, predicted={("ddp", "clamp"): p}, **kw)


def _cli(tmp_path, results, *extra, name="o"):
    return main(["tradeoff", "--results", str(results), "--out", str(tmp_path / name), "--modes",
                 "kp4:ieee,kp4:bypass", "--trials", "20", "--ranks", "8", *extra])


def test_cli_says_which_loss_side_it_used(tmp_path, capsys):
    scaling = _write_scaling(tmp_path / "scaling.json")
    p = read_size_fit(scaling).predict("ddp", "default", "none", "gpt2-124m", _GPT2)
    res = _results(tmp_path, bers=(p.lo95 / 10, p.hi95 * 10))
    assert _cli(tmp_path, res, "--scaling", str(scaling)) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "o" / "tradeoff.json").read_text())
    side = doc["loss_side"]
    assert side["kind"] == "predicted" and side["scaling"] == str(scaling)
    assert side["thresholds"][0]["ber_lo95"] == pytest.approx(p.lo95) and side["thresholds"][0]["unchecked"]
    assert f"predicted for {_GPT2 / 1e6:.3g}M (gpt2-124m)" in side["text"] and "unchecked" in side["text"]
    assert f"95% interval [{p.lo95:.2g}, {p.hi95:.2g}]" in side["text"]
    assert "measured on the 212,480-parameter model" in side["text"]  # what it replaced
    assert f"loss side: {side['text']}" in out
    assert f"ddp kp4/bypass BER {p.hi95 * 10:g} guard none: not tolerated" in out
    csv_text = (tmp_path / "o" / "tradeoff.csv").read_text()
    assert "predicted,not tolerated" in csv_text and "predicted,tolerated" in csv_text
    # the same results without --scaling: the measured penalty, said as such
    assert _cli(tmp_path, res, name="m") == 0
    out = capsys.readouterr().out
    m = json.loads((tmp_path / "m" / "tradeoff.json").read_text())["loss_side"]
    assert m["kind"] == "measured" and "measured on the 212,480-parameter model" in m["text"]
    assert "carried over to gpt2-124m" in m["text"] and f"loss side: {m['text']}" in out
    # a model of the results' own size: the fit is not needed, and it says so
    assert _cli(tmp_path, res, "--scaling", str(scaling), "--params", "212480", "--layers", "4",
                "--d-model", "64", "--tokens-per-step", "4096", name="s") == 0
    s = json.loads((tmp_path / "s" / "tradeoff.json").read_text())["loss_side"]
    assert s["kind"] == "measured" and "is not used" in s["text"]


def test_cli_refuses_a_size_fit_that_does_not_match(tmp_path, capsys):
    res = _results(tmp_path)
    wrong = _write_scaling(tmp_path / "unequal.json", fec="unequal")
    assert _cli(tmp_path, res, "--scaling", str(wrong)) == 2
    err = capsys.readouterr().err
    assert "unequal.json" in err and "--fec unequal" in err and "Traceback" not in err
    other = _write_scaling(tmp_path / "clamp.json", guards=("nan_to_zero_clamp",))
    assert _cli(tmp_path, res, "--scaling", str(other), name="p") == 2
    assert "clamp.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "p").exists()


def test_advise_judges_bypass_and_unequal_by_the_predicted_threshold(tmp_path, capsys):
    """advise's loss side: with --scaling, a mode is allowed on the loss side only where the port's
    upper-95% BER is at or below the predicted interval's lower end; the checks say which, with no
    penalty; a penalty bound other than the fit's epsilon is refused."""
    from pathlib import Path

    from protocol.advise import loss_side_from_results

    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "vectors" / "fec_hist" / "_gen"))
    from gen_advise_series import fabric_snapshots

    snaps = []
    for i, text in enumerate(fabric_snapshots([[1e-5] * 2], 10**8, 44)):  # independent errors: binomial fits
        snaps.append(tmp_path / f"t{i}.out")
        snaps[-1].write_text(text)
    d = tmp_path / "exp"
    d.mkdir()
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=[[0, 4.0], [100, 2.0]], final_val_loss=2.0,
                 n_params=212_480, ber_is="error-free")]
    for g in ("none", "exponent_protection"):  # a 0.5-nat measured penalty: the prediction must not use it
        rows.append(dict(parallel="ddp", ber=1e-6, guard=g, evals=[[0, 4.0], [100, 2.5]], final_val_loss=2.5,
                         n_params=212_480, ber_is=_KIND))
    (d / "results.json").write_text(json.dumps({"meta": {"fec": "bypass", "world_size": 2}, "rows": rows}))
    base = ["advise", "--fec-hist", str(snaps[-1]), "--since", str(snaps[0]), "--models", "binomial", "--results", str(d), "--workload", "ddp", "--json",
            "--target-fer", "0.1", "--min-gain", "0"]  # frame headers lost at 0.0063 per frame pass: the loss side decides
    for shift, want in ((9.5, TOLERATED), (0, NOT_TOLERATED)):  # thresholds moved up by `shift` decades
        sizes = tuple((n, *(v * 10 ** shift for v in t)) for n, *t in _SIZES)
        sc = _write_scaling(tmp_path / f"s{shift}.json", guards=("none", "exponent_protection"), sizes=sizes)
        loss = loss_side_from_results(str(d), size_fit=read_size_fit(sc), model=("gpt2-124m", _GPT2))
        p = loss.predicted["bypass"]
        assert loss.penalty("unequal", 1e-6)[0] == pytest.approx(0.5)  # the measured points are still there
        assert set(loss.predicted) == {"bypass", "unequal"} and loss.predicted["unequal"].guard == "exponent_protection"
        assert main(base + ["--scaling", str(sc)]) == 0
        doc = json.loads(capsys.readouterr().out)
        ber_hi = doc["ports"][0]["pre_fec_ber"]["hi"]
        assert p.verdict(ber_hi) == want, (ber_hi, p.lo95, p.hi95)  # the precondition of this case
        for m in ("kp4/bypass", "kp4/unequal"):
            chk = doc["ports"][0]["checks"][m]
            assert chk["tolerated"] == want and chk["loss_penalty"] is None
            assert "size fit, unchecked" in chk["why"] and want in chk["why"]
            assert chk["allowed"] == (want == TOLERATED)
        if want == TOLERATED:  # bypass is the fastest allowed: priced by the threshold, no penalty
            assert doc["verdict"]["ports"][0]["mode"] == "kp4/bypass"
            assert any(x.startswith("the loss side, bypass: predicted for") and x.endswith("[prediction, unchecked]")
                       for x in doc["verdict"]["depends_on"])
            r = next(r for r in doc["workloads"] if r["scenario"] == "per_link")
            assert r["source"]["loss_penalty"].startswith("predicted") and r["steps_to_target"] == pytest.approx(99.0)
            assert not any("not measured" in c for c in doc["verdict"]["caveats"])
        assert doc["inputs"]["loss_side_kind"] == "predicted" and "unchecked" in doc["inputs"]["loss_side"]
        assert doc["inputs"]["max_loss_penalty"] == 0.02 and doc["inputs"]["loss_thresholds"]["bypass"]["unchecked"]
    assert main(base + ["--scaling", str(sc), "--max-loss-penalty", "0.01"]) == 2
    assert "--epsilon 0.01" in capsys.readouterr().err
    assert main(base) == 0  # no --scaling: the measured side, its model's size named
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["loss_side_kind"] == "measured" and "212,480 parameters" in doc["inputs"]["loss_side"]


def test_the_measured_models_size_is_read_from_the_rows_or_their_runs():
    from protocol.cluster.sizefit import results_n_params

    assert results_n_params([{"n_params": 818_176}, {"n_params": 818_176}]) == 818_176
    # results written before the rows carried it: their runs' records do
    assert results_n_params([{"seeds_detail": [{"n_params": 818_176}, {"n_params": 818_176}]}]) == 818_176
    assert results_n_params([{"n_params": 1}, {"n_params": 2}]) is None and results_n_params([{}]) is None
