"""phy802 collective --nccl-tests: the text and CSV readers, strict refusals naming file, line and
field, the public runs of tests/data/nccl (ratios, the underperforming diagnosis), and
--calibrate / --calibration."""

import json
import os
from pathlib import Path

import pytest

from phy802.cli import main
from protocol.cluster.ncclfile import NcclTestsError, read_nccl_tests

REF = Path(__file__).resolve().parents[2] / "data" / "nccl"  # public runs copied in, sources in runs.json


def _text(rows, *, ranks=16, hosts=("nodeA", "nodeB"), binary="all_reduce_perf", avg=True, extra_op=None):
    out = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
           "validation: 1 graph: 0", "#"]
    if binary:
        out.insert(0, f"# Collective test starting: {binary}")
    out.append("# Using devices")
    per = ranks // len(hosts)
    for r in range(ranks):
        out.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r} on {hosts[r // per]:>10} device {r % per} [0x{r:02x}] "
                   "NVIDIA H100 80GB HBM3")
    out += ["#", "#                                                              out-of-place                       "
            "in-place", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
            "   algbw   busbw #wrong", "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)"]
    for size, t in rows:
        alg = size / (t * 1e3)
        bus = alg * 2 * (ranks - 1) / ranks
        out.append(f"{size:>12} {size // 4:>13}     float     sum      -1 {t:8.2f} {alg:7.2f} {bus:7.2f}      0 {t:8.2f} "
                   f"{alg:7.2f} {bus:7.2f}      0")
    if extra_op:
        out.append(f"# Collective test starting: {extra_op}")
    out += ["# Out of bounds values : 0 OK"]
    if avg:
        out.append("# Avg bus bandwidth    : 123.45")
    return "\n".join(out) + "\n"


ROWS = [(8192, 26.5), (65536, 31.9), (1048576, 62.0), (16777216, 160.0), (268435456, 1300.0), (1073741824, 4500.0)]


def test_text_reader_ranks_nodes_op(tmp_path):
    f = tmp_path / "ar.txt"
    f.write_text(_text(ROWS))
    run = read_nccl_tests(f)
    assert (run.op, run.ranks, run.nodes, run.gpus_per_node, run.gpu) == ("allreduce", 16, 2, 8, "hopper")
    assert run.bytes == tuple(s for s, _ in ROWS) and run.time_us[0] == 26.5


def test_old_format_and_mpi_prefix(tmp_path):
    text = _text(ROWS).replace(" Group  0 Pid", " Pid")
    text = "\n".join("[1,0]<stdout>:" + ln for ln in text.splitlines()) + "\n"
    f = tmp_path / "old.txt"
    f.write_text(text)
    run = read_nccl_tests(f)
    assert (run.ranks, run.nodes, run.op) == (16, 2, "allreduce") and len(run.bytes) == len(ROWS)


def test_healthy_h100_run_is_within_1_5x(tmp_path, capsys):
    # times of the order public healthy 2 x 8 H100 / 8 x 400G IB runs show (~25-32 us at 8 KB, ~4.5 ms at 1 GB)
    f = tmp_path / "ar.txt"
    f.write_text(_text(ROWS))
    assert main(["collective", "--nccl-tests", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"bytes", "measured_us", "predicted_us"} <= set(d["rows"][0])
    assert all(1 / 1.5 <= r["ratio"] <= 1.5 for r in d["rows"])
    assert not d["underperforming"]


@pytest.mark.parametrize("name, algo, under", [
    ("i290_h100_ndr_2n_allreduce_default.csv", None, True),
    ("i290_h100_ndr_2n_allreduce_ring.csv", "ring", True),
    ("gcp_a3mega_h100_tcpxo_2n_allreduce.csv", None, False),
])
def test_public_runs(name, algo, under, capsys):
    f = REF / name
    if not f.exists():
        pytest.fail(f"{f} is missing from tests/data/nccl")
    args = ["collective", "--nccl-tests", str(f), "--json"] + (["--algo", algo] if algo else [])
    if name.startswith("gcp"):
        args += ["--rate", "200G", "--transport", "roce"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ranks"] == 16 and d["nodes"] == 2 and d["op"] == "allreduce"
    assert d["underperforming"] is under
    if name.startswith("gcp"):  # a TCP offload: bandwidth fine at the top, small messages far too slow
        assert any(n.startswith("SLOW SMALL MESSAGES") for n in d["diagnosis"])
        assert 1 / 1.5 <= d["rows"][-1]["ratio"] <= 1.5


def test_calibrate_and_reuse(tmp_path, capsys):
    f = REF / "i290_h100_ndr_2n_allreduce_default.csv"
    if not f.exists():
        pytest.fail(f"{f} is missing from tests/data/nccl")
    cal = tmp_path / "cal.json"
    assert main(["collective", "--nccl-tests", str(f), "--calibrate", str(cal), "--holdout", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["summary"]["held_out_worst_ratio"] < 1.2  # the held-out sizes of the same run
    c = json.loads(cal.read_text())
    assert 0.1 < c["net_efficiency"] < 0.4 and c["diagnosis"]  # the fit says what it is: a broken cluster
    assert main(["collective", "--nccl-tests", str(f), "--calibration", str(cal), "--json"]) == 0
    d2 = json.loads(capsys.readouterr().out)
    assert max(abs(r["ratio"] - 1) for r in d2["rows"]) < 0.25
    assert main(["collective", "--bytes", "1e9", "--calibration", str(cal), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_us"] > 2.5 * 4296  # the broken cluster's 1 GB
    (tmp_path / "bad.json").write_text("{}")
    assert main(["collective", "--calibration", str(tmp_path / "bad.json")]) == 2


def _bad(tmp_path, text, name="bad.txt"):
    f = tmp_path / name
    f.write_text(text)
    return f


@pytest.mark.parametrize("make, match", [
    (lambda: _text(ROWS, avg=False), "Avg bus bandwidth"),
    (lambda: _text(ROWS)[: _text(ROWS).index("float     sum      -1   160.00")] + "\n", "truncated"),
    (lambda: _text(ROWS, extra_op="all_gather_perf"), "mixed ops"),
    (lambda: "\n".join(ln for ln in _text(ROWS).splitlines() if "Rank" not in ln) + "\n", "Rank"),
    (lambda: _text([(65536, 31.9), (8192, 26.5)]), "field 'size'"),
    (lambda: _text(ROWS).replace("238.61  447.39", "300.00  447.39", 1), "field 'algbw'"),
    (lambda: _text(ROWS).replace("238.61  447.39", "238.61  400.00", 1), "field 'busbw'"),
    (lambda: _text(ROWS, binary=None), "give --op"),
])
def test_bad_files_exit_2_naming_file_line_field(tmp_path, capsys, make, match):
    f = _bad(tmp_path, make())
    with pytest.raises(NcclTestsError, match=match):
        read_nccl_tests(f)
    assert main(["collective", "--nccl-tests", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "Traceback" not in err


def test_op_from_flag_and_csv_refusals(tmp_path, capsys):
    f = _bad(tmp_path, _text(ROWS, binary=None))
    assert read_nccl_tests(f, op="allreduce").op == "allreduce"
    g = _bad(tmp_path, _text(ROWS), "g.txt")
    with pytest.raises(NcclTestsError, match="--op is allgather"):
        read_nccl_tests(g, op="allgather")
    csv = _bad(tmp_path, "# nodes: 2\n# gpus_per_node: 8\n# collective: all_reduce_perf\n"
                         "size_bytes,time_us_out_of_place,algbw_GBps,busbw_GBps\n8388608,215.3,38.96,73.04\n"
                         "16777216,262.9,63.81\n", "t.csv")
    with pytest.raises(NcclTestsError, match="line 6.*truncated"):
        read_nccl_tests(csv)
    assert main(["collective", "--nccl-tests", str(csv)]) == 2
    # the cluster must have the run's ranks
    h = _bad(tmp_path, _text(ROWS), "h.txt")
    assert main(["collective", "--nccl-tests", str(h), "--gpus-per-node", "4"]) == 2
    assert "16 ranks" in capsys.readouterr().err
    assert os.path.exists(h)


def test_library_lines_skipped_other_text_refused(tmp_path):
    # NCCL's own stdout (its version banner, whole NCCL_DEBUG=INFO lines) is not nccl-tests' data
    lines = _text(ROWS).splitlines()
    at = next(i for i, ln in enumerate(lines) if "out-of-place" in ln)
    lib = ["NCCL version 2.21.5+cuda12.3", "node1:1234:1240 [0] NCCL INFO comm 0x55 rank 0 nranks 16 - Init COMPLETE"]
    f = _bad(tmp_path, "\n".join(lines[:at] + lib + lines[at:]) + "\n")
    assert read_nccl_tests(f).bytes == tuple(s for s, _ in ROWS)
    f2 = _bad(tmp_path, "\n".join(lines[:at] + ["some other text"] + lines[at:]) + "\n", "bad2.txt")
    with pytest.raises(NcclTestsError, match="line .*data before the column header"):
        read_nccl_tests(f2)
