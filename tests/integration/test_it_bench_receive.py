"""benchmarks/bench_receive.py runs (its smoke test) and its parts add up sensibly."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_receive_runs_and_reports_every_part():
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench_receive.py"), "--steps", "5", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for k in ("torch_fake_op_us", "wrapper_ber0_us", "wrapper_us", "wrapper_no_measure_us", "norm_sum_squares_us",
              "norm_vector_norm_us", "deliver_us", "stream_us", "lookup_hashstore_us", "lookup_filestore_us",
              "lookup_tcpstore_us", "wrapper_cold_us", "torch_fake_op_cold_us", "kernel_frames_us", "kernel_flips_us",
              "floor_us"):
        assert d[k] > 0, k
    assert d["flips_per_step"] > 100  # BER 1e-5 over 3.3 MB: ~780 flips per step
    parts = ("torch_fake_op_us", "stream_us", "kernel_frames_us", "kernel_flips_us", "norm_sum_squares_us")
    assert abs(d["floor_us"] - sum(d[k] for k in parts)) < 1e-6 * d["floor_us"]
    assert abs(d["above_floor_us"] - (d["wrapper_us"] - d["floor_us"])) < 1e-6 * d["floor_us"]
    assert d["buckets"][0] == 262144 and sum(d["buckets"]) == d["params"]


def test_bench_receive_refuses_bad_arguments():
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench_receive.py"), "--steps", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 2 and "--steps" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(cmd[:-2] + ["--gap-ms", "-1"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 2 and "--gap-ms" in r.stderr and "Traceback" not in r.stderr
