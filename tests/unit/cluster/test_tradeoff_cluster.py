"""phy802 tradeoff on the cluster model: workloads, communication logs used or refused (never
silently ignored), and step times with the simulated loss recovery."""

import csv
import json

import pytest

from phy802.cli import main
from protocol.cluster.steptime import synthetic_ddp_log, synthetic_pp_log, write_commlog
from protocol.cluster.topology import preset
from protocol.cluster.workloads import WorkloadConfig, workload_step


def _curve(pen=0.0):
    return [[s, 4.0 - 2.0 * (s / 300) ** 0.5 + pen * s / 300] for s in range(0, 301, 50)]


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "exp"
    d.mkdir()
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=_curve(), final_val_loss=2.0),
            dict(parallel="ddp", ber=1e-6, guard="exponent_protection", evals=_curve(0.01), final_val_loss=2.01)]
    (d / "results.json").write_text(json.dumps({"meta": {"fec": "bypass", "world_size": 2}, "rows": rows}))
    return d


def _log(tmp_path, log, name="comm.jsonl"):
    p = tmp_path / name
    write_commlog(p, {k: v for k, v in log.header.items() if k not in ("format", "version")}, log.records)
    return p


BASE = ["--ranks", "16,64", "--modes", "kp4:ieee,kp4:bypass", "--trials", "20"]


def test_pp_log_with_ddp_results_is_refused(results, tmp_path, capsys):
    pp = _log(tmp_path, synthetic_pp_log(10**6, stages=2, microbatches=2, act_bytes=1000, tokens_per_step=100))
    assert main(["tradeoff", "--results", str(results), "--out", str(tmp_path / "o"), "--comm-log", str(pp)] + BASE) == 2
    err = capsys.readouterr().err
    assert "'pp'" in err and "ddp" in err


def test_header_only_and_no_rank0_logs_are_refused(results, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"format": "phy802-commlog", "version": 1, "parallel": "ddp", "world_size": 2}) + "\n")
    assert main(["tradeoff", "--results", str(results), "--out", str(tmp_path / "o"), "--comm-log", str(empty)]
                + BASE) == 2
    assert "header only" in capsys.readouterr().err
    log = synthetic_ddp_log(10**6, world_size=2, tokens_per_step=1000)
    for r in log.records:
        r["rank"] = 1
    p = _log(tmp_path, log, "r1.jsonl")
    assert main(["tradeoff", "--results", str(results), "--out", str(tmp_path / "o"), "--comm-log", str(p)] + BASE) == 2
    assert "rank 0" in capsys.readouterr().err


def test_measured_compute_needs_a_log(results, tmp_path, capsys):
    assert main(["tradeoff", "--results", str(results), "--out", str(tmp_path / "o"), "--measured-compute"] + BASE) == 2
    assert "--comm-log" in capsys.readouterr().err


def test_a_matching_log_is_used(results, tmp_path):
    log = synthetic_ddp_log(2 * 10**9, world_size=2, tokens_per_step=524_288)
    p = _log(tmp_path, log)
    assert main(["tradeoff", "--results", str(results), "--out", str(tmp_path / "a")] + BASE) == 0
    assert main(["tradeoff", "--results", str(results), "--out", str(tmp_path / "b"), "--comm-log", str(p)] + BASE) == 0
    a = (tmp_path / "a" / "tradeoff.csv").read_text()
    b = (tmp_path / "b" / "tradeoff.csv").read_text()
    assert a != b
    assert json.loads((tmp_path / "b" / "tradeoff.json").read_text())["model"].startswith("comm-log")


def test_workloads_rows_and_columns(results, tmp_path):
    for w in ("tp", "moe", "decode", "pp", "fsdp"):
        out = tmp_path / w
        args = ["tradeoff", "--results", str(results), "--out", str(out), "--workload", w, "--model",
                "mixtral-8x7b" if w == "moe" else "llama3-8b"] + BASE
        assert main(args) == 0, w
        rows = list(csv.DictReader((out / "tradeoff.csv").open()))
        assert rows and all(r["workload"] == w for r in rows)
        assert {"step_p99_ms", "failure_rate"} <= set(rows[0])


def test_tp_inside_a_node_does_not_see_the_fec_mode_but_across_nodes_does():
    kw = dict(tflops=989.0, mfu=0.4)
    c = preset("dgx-h100-ib", nodes=8)
    a = workload_step("tp", "llama3-8b", c, cfg=WorkloadConfig(tp=8), **kw)
    b = workload_step("tp", "llama3-8b", c.with_(fec="bypass"), cfg=WorkloadConfig(tp=8), **kw)
    # only the data-parallel gradient all-reduce crosses optics; it is hidden behind backward
    assert a.step_s == pytest.approx(b.step_s, rel=1e-6)
    a16 = workload_step("tp", "llama3-8b", c, cfg=WorkloadConfig(tp=16), **kw)
    b16 = workload_step("tp", "llama3-8b", c.with_(fec="bypass"), cfg=WorkloadConfig(tp=16), **kw)
    assert b16.step_s < a16.step_s and b16.phy_s == 0 < a16.phy_s
    d = workload_step("decode", "llama3-70b", preset("dgx-h100-ib", nodes=2), cfg=WorkloadConfig(tp=16), **kw)
    assert d.ops == 2 * 80 and d.exposed_s > 0


def test_flat_cluster_refuses_workloads(results, tmp_path):
    assert main(["tradeoff", "--cluster", "flat-ethernet", "--results", str(results), "--out", str(tmp_path / "o"),
                 "--workload", "tp"] + BASE) == 2
