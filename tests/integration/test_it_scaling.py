"""The threshold-vs-size fit (integration.scaling): known answers on synthetic points, the
uncertainty of a prediction, and the rows that give no point."""

import math

import numpy as np
import pytest

from integration.scaling import SizePoint, fit_scaling, size_point


def test_points_on_a_power_law_give_its_slope_and_an_exact_prediction():
    pts = [SizePoint(n, -3.0 - 0.5 * math.log10(n / 1e5), 0.1, "t") for n in (2e5, 8e5, 3.2e6)]
    f = fit_scaling(pts)
    assert f.slope == pytest.approx(-0.5) and f.chi2 == pytest.approx(0.0, abs=1e-18) and f.dof == 1
    y, sd = f.predict(1.24e8)
    assert y == pytest.approx(-3.0 - 0.5 * math.log10(1240))
    # the covariance of a weighted line with known sigmas, by hand
    x = np.log10([2e5, 8e5, 3.2e6])
    sxx = np.sum((x - x.mean()) ** 2)
    assert f.slope_sd == pytest.approx(0.1 / math.sqrt(sxx))
    assert sd == pytest.approx(0.1 * math.sqrt(1 / 3 + (math.log10(1.24e8) - x.mean()) ** 2 / sxx))
    assert "fits within the errors" in f.fits and not f.scaled


def test_scatter_beyond_the_errors_is_said_and_widens_the_covariance():
    pts = [SizePoint(2e5, -3.0, 0.05, "t"), SizePoint(8e5, -2.0, 0.05, "t"), SizePoint(3.2e6, -3.0, 0.05, "t")]
    f = fit_scaling(pts)
    assert f.scaled and "does NOT fit" in f.fits
    unscaled = 0.05 / math.sqrt(np.sum((np.log10([2e5, 8e5, 3.2e6]) - np.log10([2e5, 8e5, 3.2e6]).mean()) ** 2))
    assert f.slope_sd == pytest.approx(unscaled * math.sqrt(f.chi2))


def test_two_points_fit_exactly_and_say_nothing_checks_it():
    f = fit_scaling([SizePoint(1e5, -4.0, 0.2, "t"), SizePoint(1e6, -5.0, 0.2, "t")])
    assert f.slope == pytest.approx(-1.0) and f.dof == 0 and "nothing checks" in f.fits
    with pytest.raises(ValueError, match="two distinct"):
        fit_scaling([SizePoint(1e5, -4.0, 0.2, "t")])
    with pytest.raises(ValueError, match="standard deviation"):
        fit_scaling([SizePoint(1e5, -4.0, 0.0, "t"), SizePoint(1e6, -5.0, 0.2, "t")])


def _row(**kw):
    base = {"status": "bracketed", "threshold": "[1e-05, 0.0001)", "passes": 1e-5, "fails": 1e-4,
            "interp": None, "lower": None, "upper": None, "interval_known": False}
    return {**base, **kw}


def test_a_size_point_from_its_tolerance_row():
    p = size_point(800_000, _row(interp=10 ** -4.5, lower=1e-6, upper=1e-4, interval_known=True))
    assert (p.log10_ber, p.sigma) == (pytest.approx(-4.5), pytest.approx(2 / 2 / 1.96))
    assert p.how == "interpolated; sd from the 95% interval"
    q = size_point(800_000, _row())  # bracket only: its middle, a uniform spread over one decade
    assert (q.log10_ber, q.sigma) == (pytest.approx(-4.5), pytest.approx(1 / math.sqrt(12)))
    assert "grid bracket" in q.how
    # an interval end outside the grid: the bracket's spread
    assert size_point(1, _row(lower=None, upper=1e-4, interval_known=True)).sigma == pytest.approx(1 / math.sqrt(12))
    why = size_point(3_200_000, _row(status="below grid", threshold="< 1e-07", passes=None, fails=1e-7))
    assert why == "3,200,000 parameters: threshold < 1e-07 is below grid (widen --bers so that it is bracketed)"


def test_the_doc_fits_each_group_and_says_why_not(tmp_path):
    from integration.scaling import scaling_doc, scaling_md, write_scaling

    def tol(passes, fails, interp):
        return [{"parallel": "ddp", "recipe": "paper", "guard": "none", "ber_is": "payload-stream BER",
                 "status": "bracketed" if passes and fails else ("below grid" if fails else "above grid"),
                 "threshold": "t", "interval": None, "passes": passes, "fails": fails, "interp": interp,
                 "lower": None, "upper": None, "interval_known": False, "delivered_passes": passes}]

    sizes = [{"size": "4x64", "n_params": 200_000, "tolerance": tol(1e-3, 1e-2, 10 ** -2.5)},
             {"size": "4x128", "n_params": 800_000, "tolerance": tol(1e-3, 1e-2, 10 ** -2.8)},
             {"size": "4x256", "n_params": 3_200_000, "tolerance": tol(1e-4, 1e-3, 10 ** -3.1)}]
    doc = scaling_doc(sizes, 0.02, ("gpt2-small", 124_475_904))
    (g,) = doc["fits"]
    assert g["fit"]["slope"] == pytest.approx(-0.3 / math.log10(4)) and g["why_no_fit"] is None
    p = g["prediction"]
    assert p["ber_lo95"] < p["ber"] < p["ber_hi95"] and "unchecked" in p["note"]
    assert "benchmarks/paper_run.py" in scaling_md(doc)
    sizes[2]["tolerance"] = tol(None, 1e-4, None)
    (g,) = scaling_doc(sizes, 0.02, ("gpt2-small", 124_475_904))["fits"]
    assert g["fit"] is None and g["why_no_fit"].startswith("3,200,000 parameters: threshold t is below grid")
    assert "no fit: 3,200,000 parameters" in scaling_md(scaling_doc(sizes, 0.02, ("gpt2-small", 1)))
    assert write_scaling(str(tmp_path / "s"), doc, {}) == ["scaling.json", "scaling.md", "scaling.png"]
    assert (tmp_path / "s" / "scaling.png").stat().st_size > 0


@pytest.mark.parametrize("argv,says", [
    (["--sizes", "4x64,4x128", "--n-layer", "2"], "--sizes sets --n-layer for each size; drop --n-layer 2"),
    (["--sizes", "4x64,4by128"], "expected LAYERSxWIDTH such as 4x128, got '4by128'"),
    (["--sizes", "4x64"], "--sizes"),  # one size fits nothing
    (["--sizes", "4x64,4x66"], "n_head (4) must divide n_embd (66)"),
])
def test_sizes_bad_input_exits_2_before_any_run(argv, says, tmp_path, capsys):
    from phy802.cli import main

    try:
        rc = main(["experiment", "--out", str(tmp_path / "x"), *argv, "--steps", "1", "--corpus", "stdlib"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_sizes_refuse_another_campaigns_runs_in_any_size_before_the_first_run(tmp_path, capsys, monkeypatch):
    import integration.experiment as experiment
    from phy802.cli import main

    started = []
    monkeypatch.setattr(experiment, "run_many", lambda cfgs, **kw: started.append(cfgs))
    from integration.scaling import scaling_doc, write_scaling

    write_scaling(str(tmp_path / "x"), scaling_doc([], 0.02, ("gpt2-small", 1)), {})  # an earlier size sweep's folder
    runs = tmp_path / "x" / "size-2x32" / "runs" / "ddp-seed1-ber0-none"  # the second size's folder
    runs.mkdir(parents=True)
    (runs / "result.json").write_text('{"config": {"steps": 999}}')
    rc = main(["experiment", "--out", str(tmp_path / "x"), "--sizes", "2x16,2x32", "--n-head", "2", "--parallel", "ddp",
               "--guards", "none", "--bers", "1e-4", "--steps", "1", "--corpus", "stdlib", "--no-progress"])
    assert rc == 2 and f"{runs / 'result.json'}: a run of another campaign" in capsys.readouterr().err
    assert started == []
