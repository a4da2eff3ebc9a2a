"""protocol.cluster.nccl / topology: each algorithm and protocol against hand-computed values from
NCCL 2.30's table (literals written out here, not read from the JSON), the channels NCCL runs at a
size (src/enqueue.cc topoGetAlgoInfo), the transport's per-step latency, the FEC identity at BER 0,
the fabric's link counts, and bad clusters."""

import json
import math
from dataclasses import replace

import pytest

from phy802.cli import main
from protocol.cluster.nccl import candidates, load_table, predict
from protocol.cluster.topology import ClusterSpec, preset

H2 = preset("dgx-h100-ib", nodes=2)  # 16 ranks, 8 per node, 16 channels, Intel host
NET = 8 * 50.0 * 0.94  # 376 GB/s of NICs per node
RING_INTRA = 450.0 * 0.82  # 369 GB/s
IB = 2.5  # the model's InfiniBand latency per inter-node step (net_latency_us), twice for Simple


def t(op, size, c=H2, **kw):
    return predict(op, size, c, **kw)


def test_ring_ll_ll128_simple_allreduce_by_hand():
    # 30 steps, 2 between nodes; intra steps pay max(NVLink hop, 1 us net overhead, x3 for Simple)
    lat_ll = 6.6 + 28 * max(0.6, 1.0) + 2 * (2.7 + IB)
    lat_128 = 14.0 + 28 * max(1.9, 1.0) + 2 * (4.0 + IB)
    lat_s = (8.4 + 28 * max(3.4, 3.0) + 2 * (14.0 + 2 * IB)) * 1.4  # ring plateau (>= 64 B per rank and channel)
    bus = min(RING_INTRA, NET)
    bw_ll = min(39.0, bus * 0.5) * 16 / 30  # llMaxBws Intel, 2 nodes
    bw_128 = min(bus * 0.92, 16 * 36.7) * 16 / 30
    bw_s = bus * 16 / 30
    S = 1 << 20
    assert t("allreduce", S, algo="ring", proto="LL").time_us == pytest.approx(lat_ll + S / (1000 * bw_ll), rel=1e-12)
    assert t("allreduce", S, algo="ring", proto="LL128").time_us == pytest.approx(lat_128 + S / (1000 * bw_128),
                                                                                  rel=1e-12)
    assert t("allreduce", S, algo="ring", proto="Simple").time_us == pytest.approx(lat_s + S / (1000 * bw_s), rel=1e-12)
    # below 64 B per rank and channel no plateau factor
    small = t("allreduce", 8192, algo="ring", proto="Simple")
    assert small.latency_s * 1e6 == pytest.approx(8.4 + 28 * 3.4 + 2 * (14.0 + 2 * IB), rel=1e-12)


def test_tree_protocols_by_hand_with_correction_factor():
    bus = min(NET * 0.92, 16 * 41.4)  # perChMaxTreeBw Hopper, 2 nodes: the price NCCL's choice sees
    # the tree as it runs on 2 nodes: each of the two trees rooted on one node, so a node's NICs carry
    # the buffer once per direction, twice the share of a tree over more nodes
    run = min(2 * NET * 0.92, 16 * 41.4)
    S = 8192  # log2(8192 / 64) = 7: corrections LL .7, LL128 .8, Simple .8
    # channels NCCL runs at 8 KB (of 16): bytes // (threads x threshold): LL 8192 // (512 x 8) = 2,
    # LL128 8192 // (640 x 8) = 1, Simple 8192 // (512 x 64) = 0 -> 1; the tree keeps all its threads
    ll = 6.8 + 2 * (7 * 0.6 + 1 * (5.0 + IB))
    r = t("allreduce", S, algo="tree", proto="LL")
    assert r.channels == 2
    assert r.time_us == pytest.approx(ll + S / (1000 * min(run / 3.8, 39.0) * 0.5 * 0.7 * 2 / 16), rel=1e-12)
    # NCCL chooses on its full-channel table: the candidate time is the 16-channel one
    assert r.candidates["tree/LL"] == pytest.approx(ll + S / (1000 * min(bus / 3.8, 39.0) * 0.5 * 0.7), rel=1e-12)
    l128 = 14.0 + 2 * (7 * 1.25 + 1 * (8.5 + IB))
    r = t("allreduce", S, algo="tree", proto="LL128")
    assert r.time_us == pytest.approx(l128 + S / (1000 * min(run * 120 / 128, 16 * 36.7) * 0.5 * 0.8 / 16), rel=1e-12)
    assert r.candidates["tree/LL128"] == pytest.approx(
        l128 + S / (1000 * min(bus * 120 / 128, 16 * 36.7) * 0.5 * 0.8), rel=1e-12)
    simple = 8.4 + 2 * (7 * 4.0 + 1 * (14.0 + 2 * IB))
    r = t("allreduce", S, algo="tree", proto="Simple")
    # as it runs, tree/Simple moves its one chunk per channel (8 KB on 1 channel; NCCL_BUFFSIZE / 8 =
    # 512 KB is the most) store-and-forward through 14 NVLink hops at 41.4 x 0.5 GB/s and 2 network
    # hops at twice the channel's steady share, 2 x NET x 0.92 / 16 (tree_simple_fill_us): no correction
    assert r.time_us == pytest.approx(simple + S * (14 / (1000 * 41.4 * 0.5) + 2 / (1000 * 2 * NET * 0.92 / 16)),
                                      rel=1e-12)
    assert r.candidates["tree/Simple"] == pytest.approx(simple + S / (1000 * bus * 0.5 * 0.8), rel=1e-12)
    # from 16 x 512 x 64 B = 512 KB up the Simple tree runs all 16 channels
    assert t("allreduce", 1 << 19, algo="tree", proto="Simple").channels == 16
    assert t("allreduce", (1 << 19) - 64, algo="tree", proto="Simple").channels == 15


def test_two_node_tree_runs_at_twice_the_network_share_but_is_chosen_at_nccls_price():
    # 2 x 8 A100 (no NVLS): at 1 GB the tree, once run, is network-bound at 2 x 0.92 x NICs x 0.5
    # in algorithm bandwidth; NCCL prices it at the undoubled share and so picks the ring there
    a100 = preset("hgx-a100-roce", nodes=2)
    net = a100.node_net_GBps
    S = 1 << 30
    tree = t("allreduce", S, a100, algo="tree", proto="Simple")
    # (no tree correction from 2^24 x 64 B = 1 GB up) plus the pipeline fill of a channel's first
    # 512 KB chunk (4 MB buffers / 8 steps): 14 NVLink hops at 23.6 x 0.5 GB/s, 2 network hops at
    # twice the steady share, 2 x net x 0.92 / channels, less the one chunk the steady rate already charges
    steady = min(2 * net * 0.92, a100.n_channels * 23.6) * 0.5
    fill = (1 << 19) * (14 / (1000 * 23.6 * 0.5) + 2 / (1000 * 2 * net * 0.92 / a100.n_channels)
                        - a100.n_channels / (1000 * steady))
    assert tree.bandwidth_s * 1e6 == pytest.approx(S / (1000 * steady) + fill, rel=1e-12)
    assert tree.candidates["tree/Simple"] > tree.time_us * 1.5
    assert t("allreduce", S, a100).algo == "ring"
    # on 3 nodes a tree's node sends its share up and down once more: no doubling
    a3 = preset("hgx-a100-roce", nodes=4)
    t3 = t("allreduce", S, a3, algo="tree", proto="Simple")
    from protocol.cluster.nccl import default_table, tree_simple_fill_us

    steady_us = t3.candidates["tree/Simple"] - t3.latency_s * 1e6  # the price NCCL sees, undoubled
    fill = tree_simple_fill_us(a3, default_table(), S, t3.channels, steady_us)
    assert fill > 0 and t3.time_us == pytest.approx(t3.candidates["tree/Simple"] + fill, rel=1e-12)


def test_nccl_algo_and_proto_lists_enable_sets_as_nccl_does():
    # NCCL_ALGO=Ring,Tree and NCCL_PROTO=Simple (the GPUDirect-TCPXO profiles of 2024): NCCL's choice
    # among those only; '^' disables the names listed (tuning.cc parseList)
    S = 1 << 30
    r = t("allreduce", S, algo="Ring,Tree", proto="Simple")
    assert r.algo in ("ring", "tree") and r.proto == "Simple"
    assert t("allreduce", S).algo == "nvls_tree"
    assert t("allreduce", S, algo="^nvls_tree,nvls").algo in ("ring", "tree")
    assert t("allreduce", 8, proto="^LL").proto != "LL"
    assert t("allreduce", 8, proto="^LL").time_us == min(
        t("allreduce", 8, algo=a, proto=p).time_us for a in ("ring", "tree") for p in ("LL128", "Simple"))
    with pytest.raises(ValueError, match="unknown algorithm 'rong'"):
        t("allreduce", S, algo="ring,rong")
    with pytest.raises(ValueError, match="not available"):
        t("allreduce", S, algo="pat")


def test_tcpxo_runs_no_ll_its_profile_never_enables_it():
    # Google's nccl-env-profile.sh sets NCCL_PROTO=Simple,LL128 (Simple before v1.0.8), enforced by
    # its guest config checker: NCCL never runs LL over GPUDirect-TCPXO
    tcpxo = preset("dgx-h100-ib", nodes=2, rate="200G", transport="tcpxo")
    assert {p for _, p in candidates("allreduce", tcpxo)} == {"LL128", "Simple"}
    assert {p for _, p in candidates("allreduce", replace(tcpxo, transport="roce"))} == {"LL", "LL128", "Simple"}
    assert t("allreduce", 8, tcpxo).proto != "LL"
    # one node has no network: all protocols
    assert "LL" in {p for _, p in candidates("allreduce", replace(tcpxo, nodes=1))}


def test_nvls_and_nvlstree_by_hand():
    nv = 450.0 * 1.058
    S = 1 << 30
    # NVLS-bound: the first 16 x 8 x 128 KiB loop adds its two network hops, each over twice the
    # node's NICs (half the channels' trees rooted on each node), to the steady bandwidth term
    loop = 16 * 8 * (128 << 10)
    assert t("allreduce", S, algo="nvls_tree").time_us == pytest.approx(
        25.0 + 2 * 1 * (20.9 + 2 * IB) + S / (1000 * min(nv, 2 * NET, 16 * 57.7) * 16 / 30)
        + 2 * loop / (1000 * 2 * NET), rel=1e-12)
    one = preset("dgx-h100-ib", nodes=1)
    assert t("allreduce", S, one, algo="nvls").time_us == pytest.approx(25.0 + S / (1000 * nv * 8 / 14), rel=1e-12)
    with pytest.raises(ValueError, match="possible"):
        t("allreduce", S, algo="nvls")  # multi-node NVLS needs CollNet (SHARP)
    blackwell = preset("hgx-b200-roce", nodes=1)
    r = t("allreduce", S, blackwell, algo="nvls")
    assert S / r.bandwidth_s * 1e-9 * 14 / 8 == pytest.approx(900 * 1.058 * 0.74 / 0.85, rel=1e-12)


def test_ring_reduce_scatter_allgather_broadcast_by_hand():
    S = 1 << 26
    bus = min(RING_INTRA, NET)
    lat = 8.4 + (15 - 1) * max(3.4, 3.0) + 1 * (14.0 + 2 * IB)
    for op in ("reduce_scatter", "allgather"):
        r = t(op, S, algo="ring", proto="Simple")
        assert r.time_us == pytest.approx(lat + S / (1000 * bus * 16 / 15), rel=1e-12)
        assert r.busbw_GBps == pytest.approx(S / (1000 * r.time_us) * 15 / 16, rel=1e-12)
    b = t("broadcast", S, algo="ring", proto="Simple")
    assert b.time_us == pytest.approx(8.4 + 16 * 14.0 + S / (1000 * bus), rel=1e-12)


def test_choice_is_the_minimum_and_forcing_works():
    for S in (8, 8192, 1 << 20, 1 << 24, 1 << 30):
        r = t("allreduce", S)
        assert r.candidates[f"{r.algo}/{r.proto}"] == min(r.candidates.values())
    assert t("allreduce", 8192).algo == "tree" and t("allreduce", 8192).proto == "LL"
    assert t("allreduce", 1 << 30).algo == "nvls_tree"
    assert t("allreduce", 1 << 30, algo="ring").algo == "ring"
    # healthy 2 x 8 H100, 8 x 400G IB: public runs show ~25-32 us at 8 KB and ~4.5 ms at 1 GB
    assert 25.0 / 1.5 < t("allreduce", 8192).time_us < 32.0 * 1.5
    assert 4500 / 1.5 < t("allreduce", 1 << 30).time_us < 4500 * 1.5
    pcie = preset("dgx-h100-ib", nodes=2, scale_up="pcie")
    assert all(p != "LL128" for _, p in candidates("allreduce", pcie))


def test_ber0_identity_two_modes_differ_by_traversals_times_latency():
    for algo in ("ring", "tree", "nvls_tree"):
        for nodes in (2, 16, 64):
            a = t("allreduce", 25e6, preset("dgx-h100-ib", nodes=nodes, fec="ieee"), algo=algo)
            b = t("allreduce", 25e6, preset("dgx-h100-ib", nodes=nodes, fec="bypass"), algo=algo)
            assert a.proto == b.proto
            assert a.time_s - b.time_s == pytest.approx(a.fec_traversals * 57.6e-9, rel=1e-9, abs=1e-15)
            assert a.phy_s == pytest.approx(a.fec_traversals * 57.6e-9, rel=1e-12)
    # the choice does not depend on the FEC mode (NCCL does not know it)
    assert t("allreduce", 1e6, preset("dgx-h100-ib", nodes=8, fec="bypass")).algo == t("allreduce", 1e6, preset(
        "dgx-h100-ib", nodes=8)).algo


def test_link_counts_per_fabric():
    ring = t("allreduce", 1e6, preset("dgx-h100-ib", nodes=16), algo="ring")
    assert ring.hops == (2,) * 30 and ring.fec_traversals == 60
    ls = preset("dgx-h100-ib", nodes=16, topology="leaf-spine")  # 32 down ports / 8 NICs = 4 nodes per leaf
    assert ls.nodes_per_leaf == 4
    r = t("allreduce", 1e6, ls, algo="ring")
    # hops k -> k+1 (k = 0..29) that cross a leaf: into nodes 4, 8, 12, 0: k = 3, 7, 11, 15, 19, 23, 27
    assert r.fec_traversals == 7 * 4 + 23 * 2
    tr = t("allreduce", 1e6, ls, algo="tree")
    assert tr.hops == (2, 2, 4, 4, 4, 4, 2, 2)  # node 0 to 1, 2 (same leaf), 4, 8 (other leaves), and back
    three = preset("dgx-h100-ib", nodes=8, topology="three-tier", radix=8, nics_per_node=1)
    assert three.path(0, 1) == (2, 1) and three.path(0, 4) == (4, 3)
    big = preset("dgx-h100-ib", nodes=64, topology="three-tier", radix=8, nics_per_node=1)
    assert big.path(0, 63) == (6, 5)
    rail = preset("dgx-h100-ib", nodes=128, radix=64)  # > 64 nodes: rail groups of 32 joined by spines
    assert rail.path(0, 31) == (2, 1) and rail.path(0, 32) == (4, 3)


def test_extra_hops_cost_switches_fibre_and_fec():
    c = preset("dgx-h100-ib", nodes=16, topology="leaf-spine")
    a = t("allreduce", 1e6, c, algo="ring")
    fixed = t("allreduce", 1e6, c.with_(topology="rail-optimized"), algo="ring")
    extra = 7 * (2 * (10 * 5.0 + 200.0) + 2 * 0.0)  # 7 crossings x 2 extra links (fibre) + 2 extra switches
    assert (a.time_s - fixed.time_s) * 1e9 == pytest.approx(extra, rel=1e-9)


@pytest.mark.parametrize("kw, flag", [
    (dict(topology="single-switch", nodes=16), "--radix"),
    (dict(oversubscription=0.5), "--oversubscription"),
    (dict(rate="300G"), "--rate"),
    (dict(scale_up="none"), "--scale-up none"),
    (dict(topology="leaf-spine", radix=4), "--radix"),
    (dict(nodes=0), "--nodes"),
])
def test_impossible_clusters_name_the_flag(kw, flag):
    with pytest.raises(ValueError, match=flag):
        preset("dgx-h100-ib", **kw)


def test_cli_impossible_cluster_exit_2(capsys):
    assert main(["collective", "--nodes", "16", "--topology", "single-switch"]) == 2
    assert "--radix" in capsys.readouterr().err
    assert main(["collective", "--nodes", "3", "--ranks", "4"]) == 2
    assert "--ranks" in capsys.readouterr().err
    assert main(["collective", "--gpus-per-node", "8", "--ranks", "4"]) == 2
    assert "more GPUs than --ranks" in capsys.readouterr().err
    assert main(["collective", "--cluster", "flat-ethernet", "--nodes", "3"]) == 2
    assert main(["collective", "--step-ns", "5"]) == 2


def test_cli_rates_and_800g_fallback(capsys):
    for rate in ("200G", "400G", "800G", "1.6T"):
        assert main(["collective", "--rate", rate, "--bytes", "1e9", "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["phy_rate"] in ("200G", "400G", rate)
    # a 200G ring is NIC-bound (8 x 23.5 GB/s < 369 GB/s of NVLink); at 400G and 800G NVLink binds
    a, b, c = (predict("allreduce", 1 << 30, preset("dgx-h100-ib", rate=r), algo="ring", proto="Simple")
               for r in ("200G", "400G", "800G"))
    assert a.bandwidth_s == pytest.approx((1 << 30) / (8 * 25 * 0.94 * 16 / 30) * 1e-9, rel=1e-12)
    assert b.bandwidth_s == c.bandwidth_s == pytest.approx((1 << 30) / (RING_INTRA * 16 / 30) * 1e-9, rel=1e-12)
    # the 2-node tree (twice the network share as it runs) is NIC-bound at 200G, at 400G its 16
    # channels' cap (16 x 41.4 GB/s) binds
    assert predict("allreduce", 1 << 30, preset("dgx-h100-ib", rate="400G"), algo="tree").bandwidth_s < \
        predict("allreduce", 1 << 30, preset("dgx-h100-ib", rate="200G"), algo="tree").bandwidth_s
    # (the same steady rate; only the pipeline fill's network hops are faster at 800G)
    t8, t4 = (predict("allreduce", 1 << 30, preset("dgx-h100-ib", rate=r), algo="tree") for r in ("800G", "400G"))
    assert t8.bandwidth_s - fill_s(t8, "800G") == pytest.approx(t4.bandwidth_s - fill_s(t4, "400G"), rel=1e-12)
    assert fill_s(t8, "800G") < fill_s(t4, "400G")


def fill_s(pr, rate):
    from protocol.cluster.nccl import default_table, tree_simple_fill_us

    c = preset("dgx-h100-ib", rate=rate)
    steady_us = (1 << 30) / (1000 * 16 * 41.4 * 0.5)  # the 16 channels' cap binds at 400G and 800G
    return tree_simple_fill_us(c, default_table(), 1 << 30, pr.channels, steady_us) * 1e-6


def test_flat_ethernet_reproduces_the_earlier_model(capsys):
    # the numbers: a flat ring of 16 ranks predicts 51.8 us at 8 KB and 38.4 ms at 1 GB
    assert main(["collective", "--cluster", "flat-ethernet", "--ranks", "16", "--bytes", "8192,1e9", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["time_s"] * 1e6 == pytest.approx(51.816, abs=1e-3)
    assert rows[1]["time_s"] * 1e3 == pytest.approx(38.359, abs=1e-3)


def test_table_override(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"base_latency_us": {"tree": {"LL": 100.0}}}))
    T = load_table(f)
    assert T["base_latency_us"]["tree"]["LL"] == 100.0 and T["base_latency_us"]["ring"]["LL"] == 6.6
    assert predict("allreduce", 8192, H2, table=T).algo != "tree" or predict("allreduce", 8192, H2, table=T).proto != "LL"
    (tmp_path / "bad.json").write_text(json.dumps({"nope": 1}))
    with pytest.raises(ValueError, match="unknown key 'nope'"):
        load_table(tmp_path / "bad.json")
    assert main(["collective", "--nccl-table", str(tmp_path / "bad.json")]) == 2


def test_spec_is_hashable_and_with_ranks():
    c = ClusterSpec()
    assert c.with_(ranks=512).nodes == 64 and c.with_(ranks=4).gpus_per_node == 4
    assert hash(c) == hash(ClusterSpec())
    assert math.isfinite(predict("sendrecv", 1e6, c).time_us)
    assert predict("alltoall", 1e6, preset("dgx-h100-ib", nodes=4)).busbw_GBps > 0


def test_each_link_its_own_phy_spine_links():
    # leaf-spine, 16 nodes: the ring's 7 leaf crossings have 2 spine links each
    base = preset("dgx-h100-ib", nodes=16, topology="leaf-spine")
    a = predict("allreduce", 1e6, base, algo="ring")
    b = predict("allreduce", 1e6, base.with_(spine_fec="bypass"), algo="ring")
    assert (a.time_s - b.time_s) * 1e9 == pytest.approx(7 * 2 * 57.6, rel=1e-9)
    assert b.phy_s * 1e9 == pytest.approx((a.fec_traversals - 14) * 57.6, rel=1e-12)
    # losses only on the spine links: the NIC links are clean
    from protocol.cluster.transport import path_loss

    c = base.with_(spine_fec="bypass", spine_ber=1e-5)
    q, qp = path_loss(c, 4, 4096)
    assert q == 0.0 and 0 < qp < 1
    assert path_loss(c, 2, 4096) == (0.0, 0.0)


def test_nvls_tree_chunk_as_nccl_cuts_it():
    # src/transport/nvls.cc: 128 KiB (NCCL_NVLS_CHUNKSIZE), at most 64 KiB from 4 nodes; src/enqueue.cc
    # calcCollChunking with 16 channels x 8 heads = 128 concurrent chunks: 64 KiB below 4 x 128 x 128 KiB
    # (64 MiB), 32 KiB below 128 x 64 KiB (8 MiB)
    from protocol.cluster.nccl import default_table, nvls_tree_chunk_bytes

    T = default_table()
    got = [nvls_tree_chunk_bytes(H2, T, s) for s in ((8 << 20) - 1, 8 << 20, (64 << 20) - 1, 64 << 20, 1 << 30)]
    assert got == [32 << 10, 64 << 10, 64 << 10, 128 << 10, 128 << 10]
    four = preset("dgx-h100-ib", nodes=4)
    assert [nvls_tree_chunk_bytes(four, T, s) for s in ((8 << 20) - 1, 1 << 30)] == [32 << 10, 64 << 10]
    # compute capability 10.x, 2 nodes, 400G NICs (ncclNvlsTreeSm100Tuning): 128 KiB, 256 KiB with <= 4 GPUs
    assert nvls_tree_chunk_bytes(preset("hgx-b200-roce", nodes=2), T, 1 << 30) == 128 << 10
    assert nvls_tree_chunk_bytes(preset("hgx-b200-roce", nodes=2, gpus_per_node=4), T, 1 << 30) == 256 << 10


def test_nvls_tree_first_loop_crosses_the_network_unpipelined():
    # the fill is the first loop's two network hops: it doubles with the chunk at 64 MiB, where NCCL's
    # chunk goes from 64 to 128 KiB, and is absent on one node; the old model had no step there
    def fill(size):
        r = t("allreduce", size, algo="nvls_tree")
        bus = min(450.0 * 1.058, 2 * NET, 16 * 57.7)
        return r.bandwidth_s * 1e6 - size / (1000 * bus * 16 / 30)

    loop64 = 16 * 8 * (64 << 10)
    assert fill((64 << 20) - 4096) == pytest.approx(2 * loop64 / (1000 * 2 * NET), rel=1e-9)
    assert fill(64 << 20) == pytest.approx(2 * fill((64 << 20) - 4096), rel=1e-9)
    # below one loop (16 x 8 x 32 KiB = 4 MiB) the whole buffer crosses each hop in turn
    assert fill(1 << 20) == pytest.approx(2 * (1 << 20) / (1000 * 2 * NET), rel=1e-9)
