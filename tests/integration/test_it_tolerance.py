"""The tolerated-BER estimator (integration.tolerance) on synthetic cells: known answers for the
bracket, the interval from the 95% bounds, the interpolation, and the edge cases (no BER passes,
every BER passes, a non-monotone penalty, a cell whose runs died)."""

import math

import pytest

from integration.tolerance import EPSILON, Bracket, Cell, threshold, tolerance_table

GRID = (1e-7, 1e-6, 1e-5, 1e-4)


def cells(pens, ci=0.005, grid=GRID):
    return [Cell(ber=b, penalty=p, ci95=ci, ber_delivered=b * 1.01) for b, p in zip(grid, pens)]


def test_bracketed_by_the_first_failure_with_interval_from_the_bounds():
    t = threshold(cells([0.001, 0.008, 0.018, 0.5]), epsilon=0.02)
    assert t.point == Bracket(1e-5, 1e-4) and t.point.status == "bracketed"
    # upper bounds 0.006, 0.013, 0.023 (fails), ...: the lower end is 1e-6
    assert t.lower == Bracket(1e-6, 1e-5)
    # lower bounds 0.013 (1e-5, passes), 0.495 (1e-4, fails): the upper end is 1e-4
    assert t.upper == Bracket(1e-5, 1e-4) and t.interval == (1e-6, 1e-4)
    assert t.delivered_passes == pytest.approx(1.01e-5) and t.delivered_fails == pytest.approx(1.01e-4)
    # the penalty linear in log10 BER crosses 0.02 at 0.002/0.482 of the decade above 1e-5
    assert t.interp == pytest.approx(10 ** (-5 + 0.002 / 0.482))
    assert t.interp_lower == pytest.approx(10 ** (-6 + (0.02 - 0.013) / (0.023 - 0.013)))
    assert t.passes_again == ()


def test_no_ber_passes_is_below_the_grid():
    t = threshold(cells([0.03, 0.1, 1.0, 2.0]), epsilon=0.02)
    assert t.point == Bracket(None, 1e-7) and t.point.status == "below grid" and t.point.text() == "< 1e-07"
    assert t.interp is None and t.delivered_passes is None
    assert t.interval == (None, 1e-7)  # lower bound 0.025 still fails at the smallest BER


def test_every_ber_passes_is_above_the_grid():
    t = threshold(cells([0.0, -0.002, 0.001, 0.004]), epsilon=0.02)
    assert t.point == Bracket(1e-4, None) and t.point.status == "above grid" and t.point.text() == ">= 0.0001"
    assert t.interval == (1e-4, None) and t.interp is None and t.delivered_fails is None


def test_a_pass_above_a_failure_is_not_counted_but_listed():
    t = threshold(cells([0.001, 0.05, 0.01, 0.6], ci=0.001), epsilon=0.02)
    assert t.point == Bracket(1e-7, 1e-6) and t.passes_again == (1e-5,)


def test_a_cell_whose_runs_died_fails_and_is_not_interpolated():
    t = threshold(cells([0.001, 0.002, math.inf, math.nan]), epsilon=0.02)
    assert t.point == Bracket(1e-6, 1e-5) and t.interp is None
    assert t.interval == (1e-6, 1e-5)


def test_one_run_per_cell_has_no_interval():
    t = threshold(cells([0.001, 0.05, 0.1, 0.2], ci=math.nan), epsilon=0.02)
    assert t.point == Bracket(1e-7, 1e-6) and t.lower is None and t.upper is None and t.interval is None
    assert t.interp_lower is None and t.interp is not None


def test_the_grid_order_does_not_matter_and_bad_input_is_refused():
    a = threshold(cells([0.001, 0.008, 0.018, 0.5]))
    b = threshold(list(reversed(cells([0.001, 0.008, 0.018, 0.5]))))
    assert a == b and a.epsilon == EPSILON
    with pytest.raises(ValueError, match="epsilon"):
        threshold(cells([0.0] * 4), epsilon=0.0)
    with pytest.raises(ValueError, match="distinct"):
        threshold([Cell(1e-5, 0.0), Cell(1e-5, 0.1)])
    with pytest.raises(ValueError, match="distinct"):
        threshold([])


def test_table_one_row_per_parallelism_recipe_and_guard_naming_the_ber_kind():
    def row(par, recipe, guard, ber, pen, died=False):
        return {"parallel": par, "recipe": recipe, "guard": guard, "ber": ber, "delta_val_loss": pen,
                "delta_val_loss_ci95": 0.004, "ber_delivered": ber, "ber_is": "payload-stream BER", "runs": 4,
                "died": [[1, 3]] if died else [], "failed": []}

    rows = [row("ddp", "paper", "-", 0.0, 0.0)]
    rows += [row("ddp", "paper", "none", b, p) for b, p in zip(GRID, (0.0, 0.01, 0.3, 1.0))]
    rows += [row("ddp", "default", "none", b, p, died=b >= 1e-5) for b, p in zip(GRID, (0.0, 0.001, 0.0, 0.0))]
    table = tolerance_table(rows, epsilon=0.02)
    assert [(t["parallel"], t["recipe"], t["guard"]) for t in table] == [("ddp", "paper", "none"),
                                                                         ("ddp", "default", "none")]
    paper, default = table
    assert (paper["passes"], paper["fails"], paper["threshold"], paper["ber_is"]) == \
        (1e-6, 1e-5, "[1e-06, 1e-05)", "payload-stream BER")
    assert paper["interval"] == "[1e-06, 1e-05)" and paper["runs_per_cell"] == 4
    assert (default["passes"], default["fails"]) == (1e-6, 1e-5)  # died runs fail whatever their mean


def test_table_says_why_the_first_failing_ber_fails():
    def row(ber, pen, died=(), failed=()):
        return {"parallel": "pp", "recipe": "paper", "guard": "none", "ber": ber, "delta_val_loss": pen,
                "delta_val_loss_ci95": 0.001, "runs": 2, "died": list(died), "failed": list(failed)}

    t = tolerance_table([row(1e-6, 0.001), row(1e-4, math.nan, failed=[[1, 1, 0, "lost"]] * 2)])[0]
    assert t["fails"] == 1e-4 and t["fails_by"].startswith("job failed in 2/2 runs (frames lost")
    t = tolerance_table([row(1e-6, math.nan, died=[[1, 5]])])[0]
    assert t["fails"] == 1e-6 and t["fails_by"] == "validation loss NaN in 1/2 runs"
    t = tolerance_table([row(1e-6, 0.5)])[0]
    assert t["fails_by"] == "penalty 0.5"
    assert tolerance_table([row(1e-6, 0.001)])[0]["fails_by"] is None


def test_a_run_that_failed_its_job_early_aggregates_with_nan_past_its_end():
    """Regression: a cell with one run failed in set-up (one evaluation, no training loss) and one
    finished run made ``aggregate`` raise on the ragged curves, losing the whole campaign's report."""
    from integration.experiment import aggregate

    def one(seed, evals, train, failed):
        return {"parallel": "ddp", "ber": 1e-3, "guard": "none", "seed": seed, "final_val_loss": math.nan,
                "delta_val_loss": math.nan, "injected_noise": 0.0, "injected_noise_step": 0.0,
                "weight_dist_shadow": 0.0, "replica_divergence": 0.0, "flips": 0, "nonfinite_events": 0,
                "nonfinite_steps": 0, "overflow_steps": 0, "skipped_steps": 0, "step_ms": 1.0,
                "first_nonfinite_loss_step": None, "evals": evals, "train_loss": train, "metrics": {},
                "source_kind": "independent", "failed": failed, "failed_step": 0 if failed else None,
                "failure": "lost" if failed else None}

    (row,) = aggregate([one(1, [[0, 4.0], [10, 3.0]], [4.0, 3.5, 3.0], False), one(2, [[0, 4.2]], [], True)])
    assert row["evals"][0] == [0, pytest.approx(4.1)] and row["evals"][1][0] == 10 and math.isnan(row["evals"][1][1])
    assert len(row["train_loss"]) == 3 and all(math.isnan(v) for v in row["train_loss"])
    assert row["failed_runs"] == 1
