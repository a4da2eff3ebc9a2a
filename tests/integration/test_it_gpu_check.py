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
    # (4 collectives sync and async + batched p2p) x 2 modes at BER 0, 2 DDP identity rows, the
    # wrapper's own no-sync row (dispatch-level detector on CPU; the 1c row over the real inner is
    # CUDA only), 2 flip-rate rows
    assert sum(v == "PASS" for v in results.values()) == 23 and "FAIL" not in results.values(), results
    assert results["BER 0: all_reduce sync, endpoint mode == plain"] == "PASS"
    sync = [r for r in res["rows"] if r[0].startswith("no host sync")]
    assert len(sync) == 1 and "fake inner" in sync[0][0] and int(sync[0][2].split()[0]) > 0, sync
    assert res["setup"]["device"] == "cpu" and res["setup"]["inner"] == "gloo"
    assert "| check | result | detail |" in p.stdout
    # every rank's peak memory is reported next to the up-front estimate (on CPU: no GPU figure)
    peaks = res["setup"]["peak_memory_per_rank"]
    assert len(peaks) == 2 and all(0 < q["host_gib"] and q["gpu_gib"] is None for q in peaks), peaks
    assert res["setup"]["memory_estimate_gib_per_rank"] > 0 and "peak memory per rank: host" in p.stdout


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
    for kind in ("sync", "async"):
        assert rows[f"BER 0: all_reduce {kind}, ring mode == ring-order reference"] == "PASS"
        assert rows[f"BER 0: reduce_scatter_tensor {kind}, ring mode == ring-order reference"] == "PASS"


def _load_gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check_mod", os.path.join(ROOT, "benchmarks", "gpu_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_refuses_what_it_cannot_do_before_starting(tmp_path):
    """No rank starts for an --out it may not write, a missing GPU or a single rank: exit 2, one
    line naming the option, no traceback, and a foreign file left as it was."""
    script = os.path.join(ROOT, "benchmarks", "gpu_check.py")
    env = dict(os.environ, PYTHONPATH=ROOT)
    foreign = tmp_path / "mine.json"
    foreign.write_text("{}")
    cases = [(["--device", "cpu", "--tiny", "--out", str(foreign)], "--out"),
             (["--device", "cpu", "--tiny", "--world-size", "1"], "--world-size"),
             (["--device", "cpu", "--tiny", "--block", "0"], "--block"),
             (["--device", "cpu", "--tiny", "--ber", "1.5"], "--ber")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "no GPU is visible"))
    for extra, what in cases:
        p = subprocess.run([sys.executable, script, *extra], capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 2 and what in p.stderr and "Traceback" not in p.stderr, (extra, p.stderr[-2000:])
    assert foreign.read_text() == "{}"


def test_gpu_check_memory_estimate_refuses_a_model_that_does_not_fit(monkeypatch):
    """The up-front memory check: the GPT-2 preset's estimate (three replicas per rank) against the
    host memory the check would have; what fits runs."""
    import argparse

    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig

    gc = _load_gpu_check()
    args = argparse.Namespace(device="cpu", tiny=False, block=128, world_size=2)
    n = gc._model_params(args)
    assert n == 85_547_520  # 12 x 12 x 768, byte vocabulary, context 128: counted on the meta device
    tiny = argparse.Namespace(device="cpu", tiny=True, block=16, world_size=2)
    model = GPT(GPTConfig(CharCorpus.load("stdlib", "byte").vocab_size, 16, n_layer=2, n_head=2, n_embd=32))
    assert gc._model_params(tiny) == sum(q.numel() for q in model.parameters())
    per_rank = gc._rank_bytes(args)
    need = 2 * (gc._REPLICAS_ALIVE * gc._BYTES_PER_PARAM * n + gc._RANK_BASE_BYTES)
    from phy802.runtime import resources

    monkeypatch.setattr(resources, "available_memory", lambda: need - 1)
    why = gc._memory_refusal(args, 0, per_rank)
    assert why is not None and f"{need / 2**30:.1f} GiB" in why and "--tiny" in why
    monkeypatch.setattr(resources, "available_memory", lambda: need)
    assert gc._memory_refusal(args, 0, per_rank) is None
