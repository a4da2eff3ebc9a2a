"""The step-time distribution on the cluster model: each trial replays the step with every
collective's time in that trial (a delay hidden behind backward stays hidden), so the quantiles
are those of the step time itself, not a sum of delays added on top of the mean."""

import numpy as np
import pytest

from protocol.cluster import steptime as st
from protocol.cluster.steptime import CommLogData, FORMAT, VERSION, step_time, synthetic_ddp_log
from protocol.cluster.topology import preset


def _log(buckets):
    recs = [dict(rank=0, step=0, op="allreduce", bytes=b, dtype="float32", cls="gradients", peers="all")
            for b in buckets]
    recs.append(dict(rank=0, step=0, op="allreduce", bytes=4, dtype="int32", cls="control", peers="all"))
    return CommLogData({"format": FORMAT, "version": VERSION, "parallel": "ddp", "world_size": 2}, recs)


def _samples(op, nbytes, c):
    return st._op_time_cached(op, nbytes, c, None, st.DEFAULT_SIM.trials, st.DEFAULT_SIM.seed).samples_s


# a short RTO (4.096 us x 2^4 = 66 us) keeps every trial's delays far below a second
C = preset("dgx-h100-ib", nodes=4, fec="bypass", ber=3e-5, timeout=4)


def test_ber0_is_the_deterministic_step():
    s = step_time(synthetic_ddp_log(10**8, world_size=32), C.with_(ber=0.0), compute_s=0.05)
    assert s.p50_s == s.p99_s == s.p999_s == s.step_s and s.failure_rate == 0.0 and s.samples_s is None


def test_quantiles_ordered_and_the_mean_inside():
    s = step_time(synthetic_ddp_log(10**8, world_size=32), C, compute_s=1e-4)
    a = s.samples_s
    assert a is not None and a.shape == (st.DEFAULT_SIM.trials,) and np.all(np.isfinite(a))
    assert a.min() <= s.p50_s <= s.p99_s <= s.p999_s <= a.max()
    assert a.min() <= s.step_s <= a.max() and s.step_s == pytest.approx(a.mean(), rel=1e-12)
    assert s.p999_s > s.p50_s  # losses happen: the distribution has a spread
    assert s.exposed_s == pytest.approx(s.step_s - s.compute_s, rel=1e-12)


def test_one_bucket_per_trial_against_the_op_samples():
    # one gradient bucket, ready at the end of backward (C), then the control all-reduce:
    # step_i = C + T_bucket,i + T_ctrl,i, trial for trial (first use of each: its own trials)
    comp = 2e-3
    s = step_time(_log([3_000_000]), C, compute_s=comp)
    want = comp + _samples("allreduce", 3_000_000, C) + _samples("allreduce", 4, C)
    np.testing.assert_allclose(s.samples_s, want, rtol=1e-14, atol=0)


def test_two_buckets_overlap_rule_per_trial():
    # bucket 1 (1 MB of 4 MB) is ready at C/3 + (2C/3)/4; it ends before backward does unless its
    # trial is slow; bucket 2 starts at max(C, end_1): a per-trial max, not one at the mean
    comp = 1e-3
    b1, b2 = 1_000_000, 3_000_000
    s = step_time(_log([b1, b2]), C, compute_s=comp)
    t1, t2, tc = (_samples("allreduce", b, C) for b in (b1, b2, 4))
    end1 = comp / 3 + (2 * comp / 3) * b1 / (b1 + b2) + t1
    want = np.maximum(comp, end1) + t2 + tc
    np.testing.assert_allclose(s.samples_s, want, rtol=1e-14, atol=0)


def test_hidden_delays_stay_hidden():
    # compute of 1 s hides every bucket's delay (tens of us): every trial's step is the same,
    # so p99 is the step itself (summing the delays on top, the former bound, gave more)
    comp = 1.0
    log = _log([1_000_000, 2_000_000])
    s = step_time(log, C, compute_s=comp)
    tc = _samples("allreduce", 4, C)
    assert np.ptp(_samples("allreduce", 1_000_000, C)) > 0  # the hidden bucket did vary
    np.testing.assert_allclose(s.samples_s, comp + _samples("allreduce", 2_000_000, C) + tc, rtol=1e-14)
    late = _samples("allreduce", 2_000_000, C) + tc  # only the last bucket and the control op show
    assert s.p99_s == pytest.approx(comp + np.quantile(late, 0.99, method="inverted_cdf"), rel=1e-12)


def test_selective_never_slower_than_go_back_n_per_step_trial():
    log = synthetic_ddp_log(10**8, world_size=32)
    g = step_time(log, C.with_(transport="ib"), compute_s=1e-4)
    r = step_time(log, C.with_(transport="selective"), compute_s=1e-4)
    assert np.all(r.samples_s <= g.samples_s * (1 + 1e-12))
    assert np.any(r.samples_s < g.samples_s)


def test_repeated_collectives_are_independent_draws():
    # ten equal buckets: one simulation, used ten times; the later uses resample its trials, so
    # the sum's spread is about sqrt(10) x one bucket's (the same trial ten times would be 10 x)
    comp = 1e-6
    one = step_time(_log([2_000_000]), C, compute_s=comp).samples_s
    ten = step_time(_log([2_000_000] * 10), C, compute_s=comp).samples_s
    ratio = ten.std() / one.std()
    assert 2.0 < ratio < 5.0


def test_simulation_settings_are_an_argument_not_module_state():
    """The trials and seed of the loss-recovery simulation are a frozen SimSettings passed to step_time
    (before, module globals SIM_TRIALS / SIM_SEED, set from outside by the tradeoff command)."""
    log = synthetic_ddp_log(10**8, world_size=32)
    a = step_time(log, C, compute_s=1e-4, sim=st.SimSettings(trials=30, seed=4))
    assert a.samples_s.shape == (30,)
    assert step_time(log, C, compute_s=1e-4, sim=st.SimSettings(trials=30, seed=4)).step_s == a.step_s
    b = step_time(log, C, compute_s=1e-4, sim=st.SimSettings(trials=30, seed=5))
    assert not np.array_equal(a.samples_s, b.samples_s)  # the seed reaches the simulation
    assert step_time(log, C, compute_s=1e-4).samples_s.shape == (st.DEFAULT_SIM.trials,)
    with pytest.raises(ValueError, match="SimSettings.trials"):
        st.SimSettings(trials=-1)


def test_the_tradeoff_command_leaves_the_library_defaults_alone(tmp_path, capsys):
    """``phy802 tradeoff --trials 20 --seed 3`` used to set the step-time module's globals, so every
    later step_time in the same process ran 20 trials from seed 3; now it passes its settings."""
    import json

    from phy802.cli import main

    d = tmp_path / "exp"
    d.mkdir()
    curve = [[s, 4.0 - 2.0 * (s / 300) ** 0.5] for s in range(0, 301, 50)]
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=curve, final_val_loss=2.0),
            dict(parallel="ddp", ber=1e-6, guard="exponent_protection", evals=curve, final_val_loss=2.0)]
    (d / "results.json").write_text(json.dumps({"meta": {"fec": "bypass", "world_size": 2}, "rows": rows}))
    assert main(["tradeoff", "--results", str(d), "--out", str(tmp_path / "o"), "--ranks", "16",
                 "--modes", "kp4:ieee,kp4:bypass", "--trials", "20", "--seed", "3"]) == 0
    capsys.readouterr()
    s = step_time(synthetic_ddp_log(10**8, world_size=32), C, compute_s=1e-4)
    assert s.samples_s.shape == (st.DEFAULT_SIM.trials,)
