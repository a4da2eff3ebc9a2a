"""The model against real public nccl-tests runs kept in tests/data/nccl/ (each file's header says where
it comes from and what of its cluster is stated or inferred), before any calibration.

Goal: within 1.5x at every size on a healthy H100 InfiniBand cluster, within 2x on
RoCE clusters of other GPU generations.  The healthy runs here are A100 ones (RoCE and InfiniBand HDR);
the Hopper NDR run (nccl issue 1244) is one its poster reports as below expectation, so it is held to
the 2x bound only, and none of these tests stands for the 1.5x H100 goal (no public healthy H100 IB
nccl-tests table from 8 KB up was found; see docs/cluster.md)."""

import json
from pathlib import Path

import pytest

from phy802.cli import main
from protocol.cluster.ncclfile import read_nccl_tests

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"

# file, extra flags (the cluster as its header states or infers it), bound on measured/predicted
RUNS = [
    # OCI BM.GPU4.8: 2 x 8 A100-40GB, NVLink 3, 16 x 100G RoCE per node (modelled as 8 x 200G), NCCL 2.25.1
    ("oci_bm_gpu4_a100_roce_2n_allreduce.txt", ["--cluster", "hgx-a100-roce", "--op", "allreduce"], 2.0),
    # nccl-tests issue 152 after its fix: 2 x 8 A100-80GB, 4 x HDR 200G InfiniBand per node
    ("i152_a100_hdr_2n_allreduce.csv", ["--cluster", "hgx-a100-roce", "--nics-per-node", "4", "--transport", "ib"],
     2.0),
    # nccl issue 1244: 2 x 8 H20 (Hopper, NVLink 4), 8 x 400G NDR per node, default algorithm
    ("nccl1244_h20_ndr_2n_allreduce_default.csv", [], 2.1),
]


def _run(name, flags, capsys):
    f = DATA / name
    assert f.is_file(), f"missing data file {f}"
    assert main(["collective", "--nccl-tests", str(f), "--json"] + flags) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name, flags, bound", RUNS)
def test_public_run_within_goal(name, flags, bound, capsys):
    d = _run(name, flags, capsys)
    assert d["ranks"] == 16 and d["nodes"] == 2 and d["op"] == "allreduce"
    assert d["rows"] and all(r["bytes"] >= 8192 for r in d["rows"])
    worst = d["summary"]["worst_ratio"]
    assert worst <= bound, f"{name}: measured/predicted {d['summary']['min_ratio']:.2f}..{d['summary']['max_ratio']:.2f}"


@pytest.mark.parametrize("name, flags, lo, hi", [
    ("oci_bm_gpu4_a100_roce_2n_allreduce.txt", RUNS[0][1], 0.9, 1.1),
    ("i152_a100_hdr_2n_allreduce.csv", RUNS[1][1], 0.85, 1.1),
])
def test_healthy_a100_runs_are_not_flagged_and_close(name, flags, lo, hi, capsys):
    # healthy by their threads: the ring / NIC limit the model computes is what was measured (to ~10%)
    d = _run(name, flags, capsys)
    assert not d["underperforming"] and not d["diagnosis"]
    assert all(lo <= r["ratio"] <= hi for r in d["rows"])


def test_a_lost_nic_share_is_caught(capsys):
    # the same healthy HDR run, described as if it had 8 NICs per node: the model then expects twice the
    # bus bandwidth, and the run reads as underperforming instead of being "within 2x" silently
    d = _run("i152_a100_hdr_2n_allreduce.csv", ["--cluster", "hgx-a100-roce", "--nics-per-node", "8",
                                                "--transport", "ib"], capsys)
    assert d["summary"]["max_ratio"] > 1.6


def test_reader_takes_nccls_own_banner_line():
    # "NCCL version 2.25.1+cuda12.8" is printed by the library between the rank lines and the table
    run = read_nccl_tests(DATA / "oci_bm_gpu4_a100_roce_2n_allreduce.txt", op="allreduce")
    assert (run.ranks, run.nodes, run.gpu, run.bytes) == (16, 2, "ampere", (1073741824, 2147483648, 4294967296))


def test_headers_say_source_and_cluster():
    for f in DATA.iterdir():
        if f.name == "runs.json":  # the index of the runs (accuracy.load_runs), not a run
            continue
        head = f.read_text().splitlines()[:3]
        assert any(h.startswith(("# source", "# source_url")) and "http" in h for h in head), f


REF = Path(__file__).resolve().parents[2] / "data" / "nccl"  # public runs copied in, sources in runs.json


def _best_worst_ratio(run, cluster, algo=None):
    """min over (net_efficiency, latency_offset_us) of the worst measured/predicted over every size:
    net_efficiency on a 2% grid, the offset by ternary search (max |log ratio| is convex in it)."""
    import math
    from dataclasses import replace

    from protocol.cluster.nccl import predict

    best = math.inf
    for j in range(160):
        eff = 0.05 * 1.02 ** j
        if eff > 1.5:
            break
        pr = [predict(run.op, b, replace(cluster, net_efficiency=eff), algo=algo).time_us for b in run.bytes]

        def g(o):
            return max(abs(math.log(m / (p + o))) for p, m in zip(pr, run.time_us))

        lo, hi = -0.95 * min(pr), max(run.time_us)
        for _ in range(100):
            a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
            lo, hi = (lo, b) if g(a) < g(b) else (a, hi)
        best = min(best, math.exp(g((lo + hi) / 2)))
    return best


@pytest.mark.parametrize("name, kw, algo, floor", [
    # the ring run's bus bandwidth falls with size (102 GB/s at 64 MB, 87-90 GB/s from 512 MB): with a
    # fixed algorithm t = L + s/B, whose busbw only rises with s, whatever L and B
    ("i290_h100_ndr_2n_allreduce_ring.csv", {}, "ring", 1.2),
    # TCPXO: the marginal bandwidth (d size / d time) is ~20 GB/s algbw from 4 to 16 MB and ~180 GB/s
    # from 1 to 8 GB -- two slopes 9x apart that one bandwidth constant cannot both follow (best 1.92x
    # since NVLSTree's first loop pays its network hops unpipelined: nccl.nvls_tree_fill_us)
    ("gcp_a3mega_h100_tcpxo_2n_allreduce.csv", {"rate": "200G", "transport": "roce"}, None, 1.8),
])
def test_two_constants_cannot_follow_these_runs(name, kw, algo, floor):
    # why two constants are not enough on these two runs (and the calibration's per-algorithm
    # constants and ceiling exist: test_calibration_structure.py): even fitted to every size, no
    # (net_efficiency, latency offset) puts all sizes within `floor`
    from protocol.cluster.topology import preset

    f = REF / name
    if not f.exists():
        pytest.fail(f"{f} is missing from tests/data/nccl")
    run = read_nccl_tests(f)
    assert _best_worst_ratio(run, preset("dgx-h100-ib", nodes=2, gpus_per_node=8, **kw), algo) > floor


def test_two_constants_do_follow_the_default_290_run():
    # the contrast: the #290 default run is a plain scaled-down cluster, and two constants fit it
    from protocol.cluster.topology import preset

    f = REF / "i290_h100_ndr_2n_allreduce_default.csv"
    if not f.exists():
        pytest.fail(f"{f} is missing from tests/data/nccl")
    assert _best_worst_ratio(read_nccl_tests(f), preset("dgx-h100-ib", nodes=2, gpus_per_node=8)) < 1.15
