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
    # 5 ops x 2 modes at BER 0 (one row each), 2 DDP identity rows, the wrapper's own no-sync row
    # (dispatch-level detector on CPU; the 1c row over the real inner is CUDA only), 2 flip-rate rows
    assert sum(v == "PASS" for v in results.values()) == 15 and "FAIL" not in results.values(), results
    sync = [r for r in res["rows"] if r[0].startswith("no host sync")]
    assert len(sync) == 1 and "fake inner" in sync[0][0] and int(sync[0][2].split()[0]) > 0, sync
    assert res["setup"]["device"] == "cpu" and res["setup"]["inner"] == "gloo"
    assert "| check | result | detail |" in p.stdout


def test_gpu_check_ring_order_reference_at_three_ranks(tmp_path):
    """Ring mode at 3 ranks is compared with a reference summed in the ring's order (not gloo's)."""
    out = tmp_path / "res.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--device", "cpu", "--tiny",
           "--world-size", "3", "--steps", "1", "--block-steps", "1", "--block", "8", "--flip-reps", "1",
           "--ber", "1e-4", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = {r[0]: r[1] for r in json.loads(out.read_text())["rows"]}
    assert rows["BER 0: all_reduce, ring mode == ring-order reference"] == "PASS"
    assert rows["BER 0: reduce_scatter_tensor, ring mode == ring-order reference"] == "PASS"
