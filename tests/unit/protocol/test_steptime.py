"""protocol.cluster.steptime: a hand-written communication log replayed through the collective model."""

import json

import pytest

from protocol.cluster.flat import Cluster, collective_time
from protocol.cluster.steptime import (compute_from_flops, model_preset, read_commlog, step_time, synthetic_ddp_log,
                               synthetic_fsdp_log, synthetic_pp_log, write_commlog)

HEADER = {"format": "phy802-commlog", "version": 1, "parallel": "ddp", "world_size": 2,
          "timing": {"step_s": [0.5, 0.010, 0.011, 0.012]}}
C = Cluster(ranks=8)


def _write(tmp_path, header, records, name="log.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(x) for x in [header, *records]) + "\n", encoding="utf-8")
    return p


def _ddp_records(step=1):
    return [
        {"rank": 0, "step": step, "op": "allreduce", "bytes": 1_000_000, "dtype": "float32", "cls": "gradients", "peers": "all"},
        {"rank": 0, "step": step, "op": "allreduce", "bytes": 3_000_000, "dtype": "float32", "cls": "gradients", "peers": "all"},
        {"rank": 0, "step": step, "op": "allreduce", "bytes": 4, "dtype": "int32", "cls": "control", "peers": "all"},
        {"rank": 1, "step": step, "op": "allreduce", "bytes": 1_000_000, "dtype": "float32", "cls": "gradients", "peers": "all"},
    ]


def test_ddp_overlap_rule_by_hand(tmp_path):
    log = read_commlog(_write(tmp_path, HEADER, _ddp_records(0) + _ddp_records(1)))
    t1 = collective_time("allreduce", 1_000_000, C).time_s
    t2 = collective_time("allreduce", 3_000_000, C).time_s
    t3 = collective_time("allreduce", 4, C).time_s
    # backward-bound: compute 30 ms (fwd 10, bwd 20); bucket 1 ready at 10 + 20 x 1/4 = 15 ms, bucket 2 at 30 ms
    st = step_time(log, C, compute_s=0.030)
    e1 = 0.015 + t1
    e2 = max(0.030, e1) + t2
    assert st.step_s == pytest.approx(max(0.030, e2) + t3, rel=1e-12)
    assert st.exposed_s == pytest.approx(st.step_s - 0.030, rel=1e-12)
    assert st.comm_s == pytest.approx(t1 + t2 + t3, rel=1e-12)
    assert st.ops == 3  # rank 0's last step only
    # communication-bound: compute 0.3 ms; bucket 2 waits for bucket 1
    st = step_time(log, C, compute_s=0.0003)
    e1 = 0.0001 + 0.0002 * 0.25 + t1
    e2 = max(0.0003, e1) + t2
    assert st.step_s == pytest.approx(e2 + t3, rel=1e-12)


def test_measured_compute_is_the_median_after_warmup(tmp_path):
    h = dict(HEADER, timing={"step_s": [9.0, 9.0, 9.0, 9.0, 9.0, 0.010, 0.011, 0.030]})
    log = read_commlog(_write(tmp_path, h, _ddp_records()))
    assert log.measured_step_s() == pytest.approx(0.011)
    assert step_time(log, C).compute_s == pytest.approx(0.011)


def test_pipeline_bubble_rule_by_hand(tmp_path):
    recs = []
    for mb in range(4):
        recs.append({"rank": 0, "step": 2, "op": "send", "bytes": 200_000, "dtype": "float32", "cls": "activations", "peers": [1]})
        recs.append({"rank": 1, "step": 2, "op": "send", "bytes": 100_000, "dtype": "float32", "cls": "activation_grads", "peers": [0]})
        recs.append({"rank": 1, "step": 2, "op": "recv", "bytes": 200_000, "dtype": "float32", "cls": "activations", "peers": [0]})
    recs.append({"rank": 0, "step": 2, "op": "allreduce", "bytes": 4, "dtype": "int32", "cls": "control", "peers": "all"})
    h = dict(HEADER, parallel="pp", microbatches=4, timing={"step_s": [0.05]})
    log = read_commlog(_write(tmp_path, h, recs))
    hop = Cluster(ranks=2)
    a = collective_time("sendrecv", 200_000, hop).time_s
    g = collective_time("sendrecv", 100_000, hop).time_s
    ctl = collective_time("allreduce", 4, hop).time_s
    m, p = 4, 2
    c = 0.040 / m
    st = step_time(log, hop, compute_s=0.040)
    assert st.step_s == pytest.approx((m + p - 1) * c + (p - 1) * (a + g) + ctl, rel=1e-12)
    assert st.bubble_s == pytest.approx((p - 1) * c, rel=1e-12)
    # a hop slower than a microbatch's compute sets the pace
    st = step_time(log, hop, compute_s=4e-6)
    assert st.step_s == pytest.approx((m + p - 1) * max(1e-6, a, g) + (p - 1) * (a + g) + ctl, rel=1e-12)
    # measured: the busy compute is the measured step x m / (m + p - 1)
    assert step_time(log, hop).compute_s == pytest.approx(0.05 * 4 / 5)
    # 8 ranks = 4 data-parallel pipelines: each stage's gradients (params x 4 / p bytes) all-reduced over 4
    log2 = read_commlog(_write(tmp_path, dict(h, params=1_000_000), recs, "pp2.jsonl"))
    st8 = step_time(log2, Cluster(ranks=8), compute_s=0.040)
    ar = collective_time("allreduce", 2_000_000, Cluster(ranks=4)).time_s
    ctl8 = collective_time("allreduce", 4, Cluster(ranks=8)).time_s
    assert st8.step_s == pytest.approx((m + p - 1) * c + (p - 1) * (a + g) + ar + ctl8, rel=1e-12)


def test_flops_compute_by_hand():
    pr = model_preset("gpt2-124m")
    assert compute_from_flops(pr["params"], pr["tokens_per_step"], 64, 989.0, 0.4) == pytest.approx(
        6 * 124_439_808 * 524_288 / (64 * 989e12 * 0.4))
    with pytest.raises(ValueError):
        compute_from_flops(1, 1, 1, 1.0, 1.5)
    with pytest.raises(ValueError, match="unknown model preset"):
        model_preset("gpt5")


def test_synthetic_ddp_buckets():
    log = synthetic_ddp_log(10_000_000)  # 40 MB of fp32 gradients: 1 MiB, 25 MiB, the rest
    b = [r["bytes"] for r in log.records if r["cls"] == "gradients"]
    assert b == [2**20, 25 * 2**20, 40_000_000 - 26 * 2**20]
    assert [r["cls"] for r in log.records][-1] == "control"
    pp = synthetic_pp_log(1000, stages=3, microbatches=2, act_bytes=10)
    assert sum(r["op"] == "send" for r in pp.records) == 2 * 2 * 2


def test_write_read_roundtrip(tmp_path):
    p = tmp_path / "out.jsonl"
    write_commlog(p, {"parallel": "ddp", "world_size": 2}, _ddp_records())
    log = read_commlog(p)
    assert log.header["format"] == "phy802-commlog" and log.records == _ddp_records()
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]  # no temp file left
    one = tmp_path / "one.json"  # one JSON document is accepted too
    one.write_text(json.dumps({"header": HEADER, "records": _ddp_records()}))
    assert read_commlog(one).records == _ddp_records()


@pytest.mark.parametrize("header,records,match", [
    ({"format": "other"}, [], "not a phy802 communication log"),
    (HEADER, [{"step": 0, "op": "gather", "bytes": 4}], "line 2: unknown op"),
    (HEADER, [{"step": 0, "op": "send"}], "line 2: record has no field 'bytes'"),
    (HEADER, [{"step": -1, "op": "send", "bytes": 4}], "step must be"),
    (dict(HEADER, version=99), [], "newer"),
])
def test_bad_logs_name_the_file_and_line(tmp_path, header, records, match):
    p = _write(tmp_path, header, records)
    with pytest.raises(ValueError, match=match) as ei:
        read_commlog(p)
    assert str(p) in str(ei.value)


def test_not_json_and_no_compute(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"format": "phy802-commlog"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        read_commlog(p)
    log = read_commlog(_write(tmp_path, {"format": "phy802-commlog"}, _ddp_records(), "n.jsonl"))
    with pytest.raises(ValueError, match="no measured step time"):
        step_time(log, C)


def test_bypass_saves_exactly_the_phy_latency_at_ber0_when_comm_is_exposed():
    log = synthetic_ddp_log(124_439_808)
    a = step_time(log, Cluster(ranks=64, fec="ieee"), compute_s=1e-6)
    b = step_time(log, Cluster(ranks=64, fec="bypass"), compute_s=1e-6)
    assert a.step_s - b.step_s == pytest.approx(a.phy_s, rel=1e-9)
    assert b.phy_s == 0.0


def test_tree_algo_replays_every_allreduce_as_a_tree(tmp_path):
    log = read_commlog(_write(tmp_path, HEADER, _ddp_records()))
    t = [collective_time("allreduce", b, C, "tree").time_s for b in (1_000_000, 3_000_000, 4)]
    st = step_time(log, C, compute_s=1e-9, algo="tree")  # communication-bound: the sum of the three
    assert st.step_s == pytest.approx(max(1e-9, 1e-9 / 3 + 2e-9 / 3 * 0.25 + t[0]) + t[1] + t[2], rel=1e-9)
    with pytest.raises(ValueError, match="algo"):
        step_time(log, C, compute_s=1.0, algo="butterfly")


def test_fsdp_overlap_rule_by_hand(tmp_path):
    recs = [{"rank": 0, "step": 0, "op": "allgather", "bytes": 2_000_000, "dtype": "float32", "cls": "params", "peers": "all"},
            {"rank": 0, "step": 0, "op": "allgather", "bytes": 2_000_000, "dtype": "float32", "cls": "params", "peers": "all"},
            {"rank": 0, "step": 0, "op": "reduce_scatter", "bytes": 2_000_000, "dtype": "float32", "cls": "gradients", "peers": "all"},
            {"rank": 0, "step": 0, "op": "reduce_scatter", "bytes": 1_000_000, "dtype": "float32", "cls": "gradients", "peers": "all"},
            {"rank": 0, "step": 0, "op": "allreduce", "bytes": 4, "dtype": "int32", "cls": "control", "peers": "all"}]
    log = read_commlog(_write(tmp_path, dict(HEADER, parallel="fsdp"), recs))
    ag = collective_time("allgather", 2_000_000, C).time_s
    rs2, rs1 = collective_time("reduce_scatter", 2_000_000, C).time_s, collective_time("reduce_scatter", 1_000_000, C).time_s
    ctl = collective_time("allreduce", 4, C).time_s
    total = 2 * ag + rs2 + rs1
    for comp in (0.050, 1e-6):  # compute-bound, then communication-bound
        st = step_time(log, C, compute_s=comp)
        assert st.step_s == pytest.approx(ag + max(comp, total - ag - rs1) + rs1 + ctl, rel=1e-12)
        assert st.comm_s == pytest.approx(total + ctl, rel=1e-12)
    syn = synthetic_fsdp_log(1200, units=3)
    assert [r["op"] for r in syn.records].count("allgather") == 6 and syn.records[0]["bytes"] == 1600
