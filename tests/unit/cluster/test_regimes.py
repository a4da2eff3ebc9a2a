"""The regimes of the cluster model, each against a real public run of tests/data/nccl/ (runs.json says
which cluster each describes, which goal it is held to and which constant, if any, it sets), before
any calibration, plus the NCCL behaviours behind them.  Bounds are the issue's goals where the model
meets them; where it does not (single NVLink nodes below ~16 MB), the bound is what the model achieves
rounded up by 0.1, a regression guard that says so, not the goal."""

from dataclasses import replace
from pathlib import Path

import pytest

from protocol.cluster.accuracy import MIN_BYTES, evaluate, holdout, load_runs, summary
from protocol.cluster.nccl import predict
from protocol.cluster.topology import preset

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"
RUNS = {Path(s.path).name: s for s in load_runs(DATA / "runs.json")}

# file -> bound on the worst measured/predicted ratio from 8 KB up (max of r and 1/r)
MEETS_GOAL = ["oci_bm_gpu4_a100_roce_2n_allreduce.txt", "i152_a100_hdr_2n_allreduce.csv",
              "nccl1244_h20_ndr_2n_allreduce_default.csv", "spark_gb10_2x1_roce200_allreduce.csv",
              "i232_h100_2x1_4nic_allreduce_tree.csv", "i290_h100_1n_allreduce.csv",
              "cw_gb200_nvl72_1rack_allreduce.csv"]


@pytest.mark.parametrize("name", MEETS_GOAL)
def test_regime_within_its_goal(name):
    s = RUNS[name]
    sm = summary(evaluate(s))
    assert sm["worst"] <= s.goal, (name, sm)
    if s.goal_median is not None:
        assert sm["median_abs"] <= s.goal_median, (name, sm)


def test_tcpxo_cloud_transport_within_its_goal():
    # GPUDirect-TCPXO, 2 x 8 H100 on 8 x 200G, run as its profile and tuner made it (Tree, NCCL_PROTO=Simple,
    # no NVLS, NCCL_BUFFSIZE=8 MiB; runs.json): within the 2x goal at every size from 8 KB (0.94-1.16);
    # the 1-16 MB regime of ~20 GB/s is tree/Simple's one 1 MiB chunk per channel crossing 14 NVLink and
    # 2 network hops store-and-forward (nccl.tree_simple_fill_us), which the model had not (up to 3.72x)
    s = RUNS["gcp_a3mega_h100_tcpxo_2n_allreduce.csv"]
    rows = [r for r in evaluate(s) if r["bytes"] >= MIN_BYTES]
    assert all(r["algo"] == "tree" and r["proto"] == "Simple" for r in rows)
    assert summary(rows)["worst"] <= s.goal
    assert all(1 / 1.2 <= r["ratio"] <= 1.2 for r in rows if 1 << 20 <= r["bytes"] <= 64 << 20)
    # the held-out all-gather of another A3 Mega cluster (NCCL 2.28.7, NCCL_PROTO=Simple,LL128)
    rows = [r for r in evaluate(RUNS["gcp_a3mega_h100_tcpxo_2n_allgather.csv"]) if r["bytes"] >= MIN_BYTES]
    assert all(0.9 <= r["ratio"] <= 1.1 for r in rows if r["bytes"] >= 64 << 20)
    assert max(r["ratio"] for r in rows) <= 2.6  # 512 KB - 1 MB: NOT the 2x goal, a guard


def test_tree_simple_runs_one_chunk_per_channel_below_channels_x_chunk():
    # NCCL (2.20 on) runs tree/Simple in NCCL_BUFFSIZE / 8 chunks at every size: on 16 channels with
    # GPUDirect-TCPXO's 8 MiB buffers, up to 16 MiB each channel has one 1 MiB chunk that crosses every
    # hop unpipelined; doubling to 32 MiB adds one chunk per channel at the pipeline's slowest hop only
    c = preset("dgx-h100-ib", nodes=2, rate="200G", transport="tcpxo", nvls=False)
    t = {k: predict("allreduce", 1 << k, c, algo="tree", proto="Simple").time_us for k in (22, 23, 24, 25)}
    assert t[25] - t[24] < 0.25 * (t[24] - t[23])
    assert t[24] - t[23] == pytest.approx(2 * (t[23] - t[22]), rel=0.05)  # linear in size below 16 MiB
    # the measured run has the same step (977.6 us at 16 MiB, 1059.9 us at 32 MiB)
    # NCCL's default 4 MiB buffers (InfiniBand here) halve the chunk: the knee moves to 8 MiB
    ib = replace(c, transport="ib")
    u = {k: predict("allreduce", 1 << k, ib, algo="tree", proto="Simple").time_us for k in (21, 22, 23, 24)}
    assert u[24] - u[23] < 0.25 * (u[23] - u[22])
    # aws-ofi-nccl sets NCCL_BUFFSIZE=8 MiB on AWS's EFA platforms: the knee is at 16 MiB again
    efa = replace(c, transport="efa")
    e = {k: predict("allreduce", 1 << k, efa, algo="tree", proto="Simple").time_us for k in (22, 23, 24, 25)}
    assert e[25] - e[24] < 0.25 * (e[24] - e[23]) and e[24] - e[23] > 1.5 * (e[23] - e[22])


def test_healthy_hopper_ib_two_nodes_held_out():
    # a healthy 2 x 8 H100 InfiniBand cluster (Nebius; 435 GB/s bus bandwidth at 1000 MiB), held out,
    # 1 MiB - 1000 MiB timed through PyTorch (runs.json): every size within the 1.5x goal.  At 10 and
    # 100 MiB NCCL (and the model) run NVLSTree: without the first loop's two unpipelined network hops
    # (nccl.nvls_tree_fill_us) the model was 1.32-1.33x too fast there, with them 1.12 and 1.21; the
    # 1.15x median goal is still NOT met (1.16: 1 MiB, tree/LL128, is 1.48) -- a guard, not the goal
    s = RUNS["nebius_h100_ib_2n_allreduce_torch.csv"]
    rows = evaluate(s)
    assert [r["bytes"] for r in rows] == [1 << 20, 10 << 20, 100 << 20, 1000 << 20]
    sm = summary(rows)
    assert sm["worst"] <= s.goal
    assert sm["median_abs"] <= 1.17
    assert all(r["ratio"] <= 1.25 for r in rows if r["algo"] == "nvls_tree")
    assert all(r["ratio"] >= 1.0 for r in rows)  # the model is never the slower one here
    assert 1 / 1.1 <= rows[-1]["ratio"] <= 1.1  # the bandwidth-bound end


def test_small_message_floor_per_transport():
    # 8 B on 2 x 8: the transport's own latency per inter-node step (net_latency_us) makes the floor;
    # measured: TCPXO 123 us (A3 Mega file), EFA 50.6-57 us (p6-b200 file), within 10%
    for name, lo, hi in (("gcp_a3mega_h100_tcpxo_2n_allreduce.csv", 0.9, 1.1),
                         ("p6b200_efa_2n_allreduce_small.csv", 0.9, 1.1)):
        rows = [r for r in evaluate(RUNS[name]) if 16 <= r["bytes"] <= 256]
        assert all(lo <= r["ratio"] <= hi for r in rows), name
    ib = predict("allreduce", 8, preset("dgx-h100-ib")).time_us
    roce = predict("allreduce", 8, preset("dgx-h100-ib", transport="roce")).time_us
    assert ib < roce < predict("allreduce", 8, preset("dgx-h100-ib", transport="efa")).time_us
    assert 28 <= ib <= 33 and 40 <= roce <= 46  # public 2 x 8 floors: ~30-37 us IB, ~43-56 us RoCE


def test_one_node_picks_nvls_not_a_doubled_tree():
    one = preset("dgx-h100-ib", nodes=1)
    r = predict("allreduce", 1 << 30, one)
    assert r.algo == "nvls"
    tree = predict("allreduce", 1 << 30, one, algo="tree")
    assert tree.busbw_GBps < 0.92 * 450 * 0.82  # the chains run on the ring's NVLink graph: no doubling
    assert r.busbw_GBps == pytest.approx(476, rel=0.02)  # nccl-tests #290's single node


def test_one_gpu_cannot_drive_four_nics():
    c = preset("dgx-h100-ib", gpus_per_node=1, scale_up="none", nics_per_node=4)
    assert c.node_net_GBps == pytest.approx(48.0)
    assert preset("dgx-h100-ib").node_net_GBps == pytest.approx(8 * 50 * 0.94)


def test_channels_used_grow_with_size():
    c = preset("dgx-h100-ib")
    chans = [predict("allreduce", 1 << k, c, algo="ring", proto="Simple").channels for k in range(13, 22)]
    assert chans == sorted(chans) and chans[0] == 1 and chans[-1] == 16
    # NVLSTree runs its own 16 channels on Hopper, 32 on Blackwell across nodes
    assert predict("allreduce", 1 << 30, c).channels == 16
    assert predict("allreduce", 1 << 30, preset("hgx-b200-roce")).channels == 32


def test_held_out_sizes_after_calibration():
    # every other size from 8 KB up held out, the rest fitted: held-out sizes within 1.2x on these runs
    # (not on NVL72, 1.21, the A3 Mega node's, 1.27, nor the H20 run's, 1.32 -- fitted to 42% of its NICs,
    # the poster's slow cluster, whose 8 MiB then runs 1.32x slow: see docs/cluster.md; guarded below,
    # not the goal)
    for name in ("i152_a100_hdr_2n_allreduce.csv", "gcp_a3mega_h100_tcpxo_2n_allgather.csv",
                 "gcp_a3mega_h100_tcpxo_2n_allreduce.csv", "i232_h100_2x1_4nic_allreduce_tree.csv",
                 "i290_h100_1n_allreduce.csv", "i290_h100_ndr_2n_allreduce_default.csv",
                 "i290_h100_ndr_2n_allreduce_ring.csv"):
        ho = holdout(RUNS[name])
        assert max(max(r["ratio"], 1 / r["ratio"]) for r in ho) <= 1.2, name
    for name, bound in (("nccl1244_h20_ndr_2n_allreduce_default.csv", 1.35),):
        ho = holdout(RUNS[name])
        assert max(max(r["ratio"], 1 / r["ratio"]) for r in ho) <= bound, name


# held-out single-node runs from small sizes up (runs.json): the bandwidth-bound sizes within their goal;
# below ~16 MB the measured floor (16 us on 4 GPUs, 30-35 us on 8) is likely a single-process nccl-tests
# run's (-g N: one thread launching N GPUs' kernels), which the model does not have -- guarded at what
# the model achieves, NOT the goal
@pytest.mark.parametrize("name, big_from, big_bound, worst_guard", [
    ("gcp_a3mega_h100_1n_allreduce.csv", 128 << 20, 1.15, 2.3),
    ("azure_ndh200v5_1n_allreduce_nvls.csv", 128 << 20, 1.1, 1.5),
    ("azure_ndgb200v6_4gpu_nvlink5_allreduce_ring.csv", 8 << 20, 1.25, 1.7),
])
def test_single_node_runs_held_out(name, big_from, big_bound, worst_guard):
    rows = [r for r in evaluate(RUNS[name]) if r["bytes"] >= MIN_BYTES]
    assert all(1 / big_bound <= r["ratio"] <= big_bound for r in rows if r["bytes"] >= big_from), name
    assert summary(rows)["worst"] <= worst_guard, name
    assert all(r["ratio"] >= 0.95 for r in rows), name  # never slower than measured by more than 5%
