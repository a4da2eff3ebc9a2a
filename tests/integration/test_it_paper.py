"""The paper command (benchmarks/paper_run.py) on CPU with tiny settings: the smoke test of the GPU run."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(out, *extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "paper_run.py"), "--out", str(out),
                           "--tiny", "--json", *extra], capture_output=True, text=True, env=env, timeout=900)


def _check(p, out, bers):
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["setup"]["params"] > 1e6 and doc["setup"]["model"] == "gpt2-small" and doc["setup"]["tiny"]
    assert doc["setup"]["guard"] == "none" and doc["setup"]["source"] == "independent"
    assert {(r["parallel"], r["ber"]) for r in doc["rows"]} == {(par, b) for par in ("ddp", "pp") for b in (0.0, *bers)}
    assert {"paper.json", "paper.png", "table.md", "results.json", "loss_ddp.png", "loss_pp.png"} <= set(os.listdir(out))
    with open(os.path.join(out, "paper.png"), "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_paper_command_tiny_one_ber(tmp_path):
    out = tmp_path / "paper"
    _check(_run(out, "--bers", "1e-4"), out, (1e-4,))


@pytest.mark.slow
def test_paper_command_tiny_all_bers(tmp_path):
    out = tmp_path / "paper"
    _check(_run(out), out, (1e-6, 1e-5, 1e-4))


def test_paper_command_refuses_the_full_run_on_cpu_up_front(tmp_path):
    """GPT-2 124M x 8 runs on CPU is estimated at hours: exit 2 before anything starts, with the
    estimate and the way out (--tiny, --force), and no output folder made."""
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is visible: the full run is what it is for")
    out = tmp_path / "paper"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "paper_run.py"), "--out", str(out),
                        "--device", "cpu"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "would take about" in p.stderr and "--force" in p.stderr and "--tiny" in p.stderr
    assert "Traceback" not in p.stderr and not out.exists()
