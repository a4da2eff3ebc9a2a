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


def _paper_main(argv, monkeypatch, free_bytes):
    """benchmarks/paper_run.py's main in this process, with the free memory phy802's refusals read
    (phy802.runtime.resources.available_memory) pinned to ``free_bytes``: the refusal tested does not
    depend on how much memory the machine has free at the moment."""
    import importlib.util

    import phy802.runtime.resources as resources

    monkeypatch.setattr(resources, "available_memory", lambda: int(free_bytes))
    spec = importlib.util.spec_from_file_location("paper_run_under_test", os.path.join(ROOT, "benchmarks", "paper_run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(argv)


def test_paper_command_refuses_the_full_run_on_cpu_up_front(tmp_path, monkeypatch, capsys):
    """GPT-2 124M x 8 runs on CPU is estimated at hours: exit 2 before anything starts, with the
    estimate and the way out (--tiny, --force), and no output folder made.  Free memory pinned
    ample (1 TiB), so the refusal is the run-time one on any machine (with less memory free than
    the run's estimate it was the memory one, and the test failed)."""
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is visible: the full run is what it is for")
    out = tmp_path / "paper"
    assert _paper_main(["--out", str(out), "--device", "cpu"], monkeypatch, 1 << 40) == 2
    err = capsys.readouterr().err
    assert "would take about" in err and "--force" in err and "--tiny" in err and "of memory" not in err
    assert not out.exists()


def test_paper_command_refuses_the_full_run_on_cpu_when_memory_is_short(tmp_path, monkeypatch, capsys):
    """The same run with little memory free (pinned at 1 GiB): refused for memory first, naming its
    estimate, before anything starts."""
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is visible: the full run is what it is for")
    out = tmp_path / "paper"
    assert _paper_main(["--out", str(out), "--device", "cpu"], monkeypatch, 1 << 30) == 2
    err = capsys.readouterr().err
    assert "of memory, more than the" in err and "--force" in err and "--tiny" in err
    assert not out.exists()
