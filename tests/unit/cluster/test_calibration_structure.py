"""The calibration's richer structure: NCCL's table refitted per algorithm (a
latency shift and a bandwidth factor each) and a sustained bus-bandwidth ceiling; hand-computed
cases for each, the calibration file round trip, and the held-out goal on the public runs whose
shape two constants cannot follow."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from phy802.cli import main
from protocol.cluster.nccl import bus_factor, predict
from protocol.cluster.ncclfile import apply_calibration, calibrate, compare, read_calibration, read_nccl_tests
from protocol.cluster.topology import preset

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"
REF = Path(__file__).resolve().parents[2] / "data" / "nccl"  # public runs copied in, sources in runs.json


def test_sustained_ceiling_hand_computed():
    c = preset("dgx-h100-ib", nodes=2)
    big, small = 2**30, 8192
    free_big, free_small = predict("allreduce", big, c), predict("allreduce", small, c)
    cc = replace(c, sustained_busbw_GBps=100.0)
    p = predict("allreduce", big, cc)
    # time = bytes x 2(N-1)/N / (1000 x 100 GB/s) us, exactly, and the bus bandwidth is the ceiling
    assert p.time_us == pytest.approx(big * bus_factor("allreduce", 16) / (1000.0 * 100.0), rel=1e-12)
    assert p.busbw_GBps == pytest.approx(100.0, rel=1e-12)
    assert p.time_s == pytest.approx(p.latency_s + p.bandwidth_s + p.path_s, rel=1e-12)
    assert p.algo == free_big.algo  # the same for every algorithm: it does not move the choice
    assert p.time_us > free_big.time_us
    # small sizes are far from the ceiling and unchanged
    assert predict("allreduce", small, cc).time_us == free_small.time_us


def test_per_algorithm_shift_and_factor_hand_computed():
    c = preset("dgx-h100-ib", nodes=2)
    s = 2**26
    base = predict("allreduce", s, c, algo="tree", proto="Simple")
    cc = replace(c, algo_latency_us=(("tree", 7.0),), algo_bw_factor=(("tree", 0.5),))
    p = predict("allreduce", s, cc, algo="tree", proto="Simple")
    assert p.latency_s * 1e6 == pytest.approx(base.latency_s * 1e6 + 7.0, rel=1e-12)
    assert p.bandwidth_s == pytest.approx(2.0 * base.bandwidth_s, rel=1e-12)
    # other algorithms untouched
    assert predict("allreduce", s, cc, algo="ring", proto="Simple").time_us == \
        predict("allreduce", s, c, algo="ring", proto="Simple").time_us
    # the shift enters the choice, as a tuner plugin's constants would: NVLSTree made 1 ms slower
    # loses the 1 GiB all-reduce it wins by default
    assert predict("allreduce", 2**30, c).algo == "nvls_tree"
    assert predict("allreduce", 2**30, replace(c, algo_latency_us=(("nvls_tree", 1e4),))).algo != "nvls_tree"


def test_cluster_refuses_bad_per_algorithm_values():
    c = preset("dgx-h100-ib", nodes=2)
    for kw in ({"algo_bw_factor": (("ring", 0.0),)}, {"algo_latency_us": (("ring", math.inf),)},
               {"algo_latency_us": "ring"}, {"sustained_busbw_GBps": -1.0}, {"sustained_busbw_GBps": True}):
        with pytest.raises(ValueError):
            replace(c, **kw)


def _held_out_worst(name, kw, algo, k=2, structure="auto", folder=REF):
    f = folder / name
    if not f.exists():
        pytest.fail(f"{f} is missing from tests/data/nccl")
    run = read_nccl_tests(f)
    c = preset("dgx-h100-ib", nodes=2, gpus_per_node=8, **kw)
    use = [i for i in range(len(run.bytes)) if i % k != k - 1]
    held = [i for i in range(len(run.bytes)) if i % k == k - 1]
    cal = calibrate(run, c, algo=algo, use=use, structure=structure)
    rows = compare(run, apply_calibration(c, cal), algo=algo)
    r = [rows[i]["ratio"] for i in held]
    return max(max(r), 1 / min(r)), cal


@pytest.mark.parametrize("name, kw, algo", [
    # busbw falls from 102 GB/s (64 MB) to 87-90 GB/s (512 MB up): the ceiling, not two constants
    ("i290_h100_ndr_2n_allreduce_ring.csv", {}, "ring"),
    # (the GPUDirect-TCPXO run was here, fitted as NVLSTree above 16 MB and LL128 below; its profile ran
    # neither -- NCCL_PROTO=Simple, NVLS off, Tree by its tuner plugin, runs.json -- and modelled as it
    # ran, with tree/Simple's pipeline fill, it needs no per-algorithm constant: test_regimes.py)
])
def test_per_algorithm_calibration_meets_the_held_out_goal(name, kw, algo):
    worst, cal = _held_out_worst(name, kw, algo)
    assert cal["structure"] == "per-algorithm"
    assert worst <= 1.2, worst
    # and the two-constant fit alone does not (the reason the structure exists)
    worst2, cal2 = _held_out_worst(name, kw, algo, structure="two-constant")
    assert cal2["structure"] == "two-constant" and worst2 > 1.2


def test_ring_run_ceiling_is_its_plateau():
    _, cal = _held_out_worst("i290_h100_ndr_2n_allreduce_ring.csv", {}, "ring")
    # the fitted ceiling is where the measured bus bandwidth settles (87-90 GB/s), within 10%
    assert 85.0 <= cal["sustained_busbw_GBps"] <= 99.0


def test_simpler_fit_kept_where_it_suffices():
    # the #290 default run is a scaled-down cluster: the extra constants do not pay for themselves
    worst, cal = _held_out_worst("i290_h100_ndr_2n_allreduce_default.csv", {}, None)
    assert cal["structure"] == "two-constant" and worst <= 1.2


def test_calibration_file_round_trip(tmp_path, capsys):
    f = REF / "i290_h100_ndr_2n_allreduce_ring.csv"
    if not f.exists():
        pytest.fail(f"{f} is missing from tests/data/nccl")
    out = tmp_path / "cal.json"
    assert main(["collective", "--nccl-tests", str(f), "--algo", "ring", "--calibrate", str(out), "--holdout", "2",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["calibration"]["structure"] == "per-algorithm" and d["summary"]["held_out_worst_ratio"] <= 1.2
    cal = read_calibration(out)
    assert set(cal["algo_latency_us"]) == {"ring"} and cal["sustained_busbw_GBps"] > 0
    # applying the file reproduces the calibrated column exactly
    assert main(["collective", "--nccl-tests", str(f), "--algo", "ring", "--calibration", str(out), "--json"]) == 0
    d2 = json.loads(capsys.readouterr().out)
    assert [r["predicted_us"] for r in d2["rows"]] == pytest.approx([r["calibrated_us"] for r in d["rows"]],
                                                                     rel=1e-12)


def test_version_1_file_still_reads_and_bad_fields_are_named(tmp_path):
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps({"format": "phy802-calibration", "version": 1, "net_efficiency": 0.5,
                              "latency_offset_us": 3.0}))
    cal = read_calibration(v1)
    assert cal == {"net_efficiency": 0.5, "latency_offset_us": 3.0, "algo_latency_us": {}, "algo_bw_factor": {},
                   "sustained_busbw_GBps": None}
    c = apply_calibration(preset("dgx-h100-ib", nodes=2), cal)
    assert predict("allreduce", 2**20, c).time_us == predict(
        "allreduce", 2**20, preset("dgx-h100-ib", nodes=2, net_efficiency=0.5, latency_offset_us=3.0)).time_us
    for field, value, word in (("algo_latency_us", {"rings": 1.0}, "rings"), ("algo_bw_factor", {"ring": -1}, "ring"),
                               ("sustained_busbw_GBps", "fast", "sustained_busbw_GBps")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"format": "phy802-calibration", "version": 2, "net_efficiency": 0.5,
                                   "latency_offset_us": 3.0, field: value}))
        with pytest.raises(ValueError, match=word) as e:
            read_calibration(bad)
        assert str(bad) in str(e.value)


def test_h20_run_is_flagged_below_expected(capsys):
    # nccl issue 1244: its poster reports the run below expectation (343 GB/s against ~460 GB/s)
    f = DATA / "nccl1244_h20_ndr_2n_allreduce_default.csv"
    assert main(["collective", "--nccl-tests", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["below_expected"] and not d["underperforming"]
    assert any(n.startswith("BELOW EXPECTED") for n in d["diagnosis"])
