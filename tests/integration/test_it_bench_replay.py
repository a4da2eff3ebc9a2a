"""benchmarks/bench_replay.py runs end to end on a tiny model (its smoke test) and reports every stage."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_bench_replay_runs_and_reports_every_stage():
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench_replay.py"), "--steps", "2", "--block", "1",
           "--n-layer", "1", "--n-embd", "32", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["stage_ms_per_step"]) == {"reserve", "shadow", "receive", "look_up", "check_peer", "deliver", "source"}
    assert all(v >= 0 for v in d["stage_ms_per_step"].values())
    # nested stages never exceed the stage they sit in
    st = d["stage_ms_per_step"]
    assert st["deliver"] <= st["reserve"] + st["shadow"] and st["source"] <= st["deliver"]
    assert d["flips_rank0"] > 0 and d["ber_is"] == "pre-FEC line BER"
    for k in ("ratio", "wrapper_vs_corrupt", "cpu_ratio", "wrapper_code_cpu_ms_per_step"):
        assert d[k] > 0, k
    # the corrupted baseline replayed the wrapper's own flips: the same weights, bit for bit
    assert d["corrupt_identical"] is True
    assert d["aa_ratio"] > 0 and d["aa_cpu_ratio"] > 0
