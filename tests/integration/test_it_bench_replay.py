"""benchmarks/bench_replay.py runs end to end on a tiny model (its smoke test) and reports every stage."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_bench_replay_runs_and_reports_every_stage():
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench_replay.py"), "--steps", "4", "--block", "1",
           "--n-layer", "1", "--n-embd", "32", "--python-pg", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["stage_ms_per_step"]) == {"issue", "reserve", "shadow", "receive", "look_up", "check_peer", "deliver",
                                           "source", "pt_issue"}
    assert all(v >= 0 for v in d["stage_ms_per_step"].values())
    # nested stages never exceed the stage they sit in; the own code is the top-level stages
    st = d["stage_ms_per_step"]
    assert st["reserve"] + st["shadow"] <= st["issue"]
    assert st["deliver"] <= st["reserve"] + st["shadow"] and st["source"] <= st["deliver"]
    calls = d["stage_calls_per_step"]
    assert calls["issue"] == calls["look_up"] >= 1  # one all-reduce per DDP bucket, each looked up once
    # the pass-through replica issues the same ops as the wrapper's, through its own (timed) methods
    assert calls["pt_issue"] == calls["issue"] and st["pt_issue"] > 0
    assert st["issue"] <= d["wrapper_code_cpu_ms_per_step"] <= st["issue"] + st["receive"] + st["look_up"] + 1e-9
    assert d["flips_rank0"] > 0 and d["ber_is"] == "pre-FEC line BER"
    for k in ("ratio", "wrapper_vs_corrupt", "cpu_ratio", "wrapper_code_cpu_ms_per_step"):
        assert d[k] > 0, k
    # the corrupted baseline replayed the wrapper's own flips: the same weights, bit for bit, though
    # the rotated order ran plain_corrupt's block before the wrapper's in two of the four rounds
    assert d["corrupt_identical"] is True
    assert d["rounds"] == 4
    for kind in ("paired", "paired_cpu"):
        assert set(d[kind]) == {"ratio", "aa_ratio", "wrapper_vs_corrupt", "corrupt_ratio", "python_pg_ratio",
                                "wrapper_vs_python_pg"}
        for v in d[kind].values():
            assert v["n"] == 4 and 0 < v["lo"] <= v["ratio"] <= v["hi"]
    assert d["aa_ratio"] > 0 and d["aa_cpu_ratio"] > 0 and d["aa_own_gloo"] is True


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_replay", os.path.join(ROOT, "benchmarks", "bench_replay.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_paired_ratio_is_the_geometric_mean_of_per_round_block_ratios_with_a_t_interval():
    import numpy as np
    from scipy import stats

    paired = _bench_module()._paired_ratio
    y = [1.0, 3.0, 2.0, 2.0, 4.0, 4.0]  # rounds of 2 steps: block means 2, 2, 4
    exact = paired([1.1 * v for v in y], y, 2)  # the same ratio in every round: a zero-width interval
    assert exact["n"] == 3 and exact["lo"] == pytest.approx(1.1) and exact["hi"] == pytest.approx(1.1)
    x = [2.0, 2.0, 2.0, 2.0, 4.0, 4.0, 9.0]  # a spare step past the last whole round is unused
    y = [1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    r = paired(x, y, 2)  # per-round ratios 2, 1, 2
    lr = np.log([2.0, 1.0, 2.0])
    h = stats.t.ppf(0.975, 2) * lr.std(ddof=1) / np.sqrt(3)
    assert r["n"] == 3 and r["ratio"] == pytest.approx(np.exp(lr.mean()))
    assert r["lo"] == pytest.approx(np.exp(lr.mean() - h)) and r["hi"] == pytest.approx(np.exp(lr.mean() + h))
