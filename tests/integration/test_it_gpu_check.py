"""benchmarks/gpu_check.py runs on CPU with gloo in a tiny configuration (its smoke test)."""

import json
import os
import subprocess
import sys

import torch  # noqa: F401  (a declared dependency)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gpu_check_smoke_on_cpu(tmp_path):
    out = tmp_path / "res.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--device", "cpu", "--tiny",
           "--steps", "2", "--block", "16", "--flip-reps", "3", "--ber", "1e-4", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(out.read_text())
    results = {r[0]: r[1] for r in res["rows"]}
    assert sum(v == "PASS" for v in results.values()) == 5 and "FAIL" not in results.values()
    assert res["setup"]["device"] == "cpu" and res["setup"]["inner"] == "gloo"
    assert "| check | result | detail |" in p.stdout
