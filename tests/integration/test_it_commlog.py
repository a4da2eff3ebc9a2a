"""integration.commlog: the phy802 ProcessGroup records each op; the log replays without torch."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from integration.commlog import CommLog, instrument, save_gathered
from protocol.cluster.flat import Cluster
from protocol.cluster.steptime import read_commlog, step_time

ROOT = Path(__file__).resolve().parents[2]


class _FakeGroup:
    """Stands in for the ProcessGroup: op methods with torch's signatures."""

    def __init__(self, rank=0, size=4):
        self.commlog = CommLog(rank, size)
        self._r = rank
        self.calls = []

    def rank(self):
        return self._r

    def _classify(self, default, t):
        return "control" if (not t.is_floating_point() or t.numel() <= 1) else default

    def allreduce(self, tensors, opts=None):
        self.calls.append("allreduce")
        return "work"

    def send(self, tensors, dst, tag=0):
        self.calls.append("send")

    def recv(self, tensors, src, tag=0):
        self.calls.append("recv")

    def all_gather_single(self, output, input, opts=None):  # noqa: A002
        self.calls.append("all_gather_single")

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002
        self.calls.append("reduce_scatter_single")


instrument(_FakeGroup)


def test_instrument_records_op_bytes_dtype_class_peers():
    g = _FakeGroup(rank=1)
    g.commlog.mark_step(0)
    assert g.allreduce([torch.zeros(1000)]) == "work"  # the original still runs and returns
    g.allreduce([torch.zeros(1, dtype=torch.int32)])
    g.send([torch.zeros(10, dtype=torch.bfloat16)], 2)  # to a higher rank: forward activations
    g.recv([torch.zeros(10)], 2)  # from a higher rank: activation gradients
    g.commlog.mark_step(1)
    g.all_gather_single(torch.zeros(400), torch.zeros(100))
    g.reduce_scatter_single(torch.zeros(100), torch.zeros(400))
    assert g.calls == ["allreduce", "allreduce", "send", "recv", "all_gather_single", "reduce_scatter_single"]
    recs = g.commlog.records()
    assert [(r["step"], r["op"], r["bytes"], r["dtype"], r["cls"], r["peers"]) for r in recs] == [
        (0, "allreduce", 4000, "float32", "gradients", "all"),
        (0, "allreduce", 4, "int32", "control", "all"),
        (0, "send", 20, "bfloat16", "activations", [2]),
        (0, "recv", 40, "float32", "activation_grads", [2]),
        (1, "allgather", 1600, "float32", "params", "all"),
        (1, "reduce_scatter", 1600, "float32", "gradients", "all"),
    ]
    assert len(g.commlog.step_times()) == 1 and all(r["rank"] == 1 for r in recs)
    g.commlog.enabled = False
    g.allreduce([torch.zeros(3)])
    assert len(g.commlog.records()) == 6


def test_save_gathered_is_readable_without_torch(tmp_path):
    g = _FakeGroup()
    g.commlog.mark_step(0)
    g.allreduce([torch.zeros(250_000)])
    g.commlog.mark_step(1)
    g.allreduce([torch.zeros(250_000)])
    p = tmp_path / "comm.jsonl"
    save_gathered(p, [{"records": g.commlog.records(), "step_s": [0.02, 0.02]}], parallel="ddp", params=250_000)
    code = textwrap.dedent(f"""
        import sys
        from protocol.cluster.steptime import read_commlog
        log = read_commlog({str(p)!r})
        assert "torch" not in sys.modules
        print(len(log.records), log.measured_step_s())
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["2", "0.02"]
    st = step_time(read_commlog(p), Cluster(ranks=16))
    assert st.compute_s == pytest.approx(0.02) and st.ops == 1


def test_process_group_hook_records_real_ops(tmp_path):
    # world size 1 in a fresh interpreter: the real ReplayProcessGroup, no spawn needed
    out = tmp_path / "rank0.jsonl"
    code = textwrap.dedent(f"""
        import torch, torch.distributed as dist
        from integration.process_group import register
        from integration.replay import ReplayConfig
        dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
        register(ReplayConfig())
        g = dist.new_group(backend="phy802")
        pg = g  # the phy802 group object itself (as integration/train.py uses it)
        pg.commlog.mark_step(0)
        dist.all_reduce(torch.ones(256), group=g)
        dist.broadcast(torch.ones(8, dtype=torch.float64), src=0, group=g)
        pg.commlog.mark_step(1)
        pg.commlog.save({str(out)!r}, parallel="ddp")
        dist.destroy_process_group()
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    log = read_commlog(out)
    got = [(r["step"], r["op"], r["bytes"], r["dtype"], r["cls"]) for r in log.records]
    assert (0, "allreduce", 1024, "float32", "gradients") in got
    assert (0, "broadcast", 64, "float64", "params") in got
    assert len(log.header["timing"]["step_s"]) == 1


@pytest.mark.slow
def test_train_comm_log_then_tradeoff(tmp_path):
    """One real small run: ``phy802 train --comm-log`` and the tradeoff replaying that log."""
    log = tmp_path / "comm.jsonl"
    run = [sys.executable, "-m", "phy802", "train", "--steps", "10", "--ber", "1e-5", "--n-layer", "1",
           "--n-embd", "32", "--eval-interval", "5", "--eval-iters", "2", "--comm-log", str(log), "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert res.returncode == 0, res.stderr
    data = read_commlog(log)
    assert data.header["parallel"] == "ddp" and data.header["world_size"] == 2
    last = [r for r in data.records if r["step"] == 9 and r["rank"] == 0]
    grads = [r for r in last if r["cls"] == "gradients"]
    assert grads and sum(r["bytes"] for r in grads) == 4 * data.header["params"]
    assert data.measured_step_s() > 0


@pytest.mark.slow
def test_tradeoff_runs_its_own_small_experiment(tmp_path):
    """``phy802 tradeoff`` without --results: a real small experiment, then table, CSV/JSON and plot."""
    out = tmp_path / "t"
    cmd = [sys.executable, "-m", "phy802", "tradeoff", "--out", str(out), "--steps", "12", "--bers", "1e-5",
           "--ranks", "8,64", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (out / "experiment" / "results.json").exists() and (out / "pareto.png").exists()
    modes = {r["mode"] for r in doc["rows"]}
    assert {"kp4/ieee", "kp4/bypass", "kp4/unequal", "rs272/ieee", "kp4/llr"} <= modes
    ref = [r for r in doc["rows"] if r["mode"] == "kp4/ieee" and r["ber"] == 0.0]
    assert all(r["vs_ref"] == pytest.approx(1.0) for r in ref)


def test_gpt2_small_time_preset_matches_the_training_preset():
    from integration.model import GPT
    from integration.train import MODEL_PRESETS as TRAIN
    from protocol.cluster.steptime import model_preset

    from integration.train import build_config, model_config

    t, m = TRAIN["gpt2-small"], model_preset("gpt2-small")
    assert (t["n_layer"], t["n_embd"], t["block_size"]) == (m["n_layer"], m["d_model"], m["seq_len"])
    gpt = GPT(model_config(build_config(model="gpt2-small")))
    assert sum(p.numel() for p in gpt.parameters()) == m["params"]


def test_a_repeated_allreduce_follows_the_class_override_and_the_reduce_op():
    """The group and its comm log work out an all-reduce's class (and inner backend, in-band signal)
    once per kind of all-reduce (dtype, size, device, class override, reduce op): the same tensor
    inside ``traffic(...)`` must not reuse the class worked out outside it, nor the reverse. (The
    reduce op's part of the key: test_it_failures' in-band test, a float MAX after a float SUM.)"""
    from datetime import timedelta

    import torch.distributed as dist

    from integration.process_group import ReplayProcessGroup
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig

    g = ReplayProcessGroup.standalone(ReplayConfig(source=SourceConfig(ber=1e-9, kind="independent")),
                                      timeout=timedelta(seconds=5))
    t = torch.ones(1000)
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    g.allreduce([t]).wait()
    with g.traffic("activations"):
        g.allreduce([t]).wait()
    g.allreduce([t], opts).wait()
    g.allreduce([t]).wait()
    assert [r["cls"] for r in g.commlog.records()] == ["gradients", "activations", "gradients", "gradients"]
    assert g.metrics.messages == {"gradients": 3, "activations": 1}
