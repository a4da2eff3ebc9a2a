"""The integration README's DDP snippet runs as written (torchrun, 2 ranks) and each rank says what it did."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _snippet() -> str:
    text = open(os.path.join(ROOT, "integration", "README.md")).read()
    block = text[text.index("## The one-line change"):]
    return re.search(r"```python\n(.*?)```", block, re.S).group(1)


@pytest.mark.slow  # torchrun with 2 ranks and a 1024x1024 DDP model: ~45 s on a loaded 2-vCPU machine
def test_readme_ddp_snippet_runs_and_prints_one_summary_line_per_rank(tmp_path):
    src = _snippet()
    assert "DistributedDataParallel" in src.split("dist.init_process_group")[0]  # imported before use
    script = tmp_path / "replay_ddp.py"
    script.write_text(src)
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(script)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    # each rank's summary is one line of its own (one atomic write): the two ranks' lines never merge
    # (torch's C++ logging may still put its own text before one), and each rank says it once
    lines = [ln[ln.index("phy802 rank "):] for ln in p.stderr.splitlines() if "phy802 rank " in ln]
    assert sorted(ln[:17] for ln in lines) == ["phy802 rank 0/2 (", "phy802 rank 1/2 ("], p.stderr[-4000:]
    assert all(ln.count("phy802 rank ") == 1 for ln in lines), p.stderr[-4000:]
    documented = re.search(r"`(phy802 rank 0/2 \(.*?)`", " ".join(open(os.path.join(ROOT, "integration",
                                                                               "README.md")).read().split()))
    assert documented.group(1) in [" ".join(ln.split()) for ln in lines]


def test_a_group_made_without_register_says_what_to_do():
    code = ("import torch.distributed as dist, integration.process_group\n"
            "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
            "dist.new_group(backend='phy802')\n")
    env = {k: v for k, v in os.environ.items() if k != "PHY802_REPLAY"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(env, PYTHONPATH=ROOT))
    assert p.returncode != 0
    assert "call integration.process_group.register(ReplayConfig(...))" in p.stderr
    assert "Unknown backend type" not in p.stderr
