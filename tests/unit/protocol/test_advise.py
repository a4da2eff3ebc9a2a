"""``phy802 advise``: verdict, per-port and per-workload tables, the per-link policy, the D7 replay, bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from phy802.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "vectors" / "fec_hist" / "_gen"))
from gen_advise_series import fabric_snapshots, portstat as _portstat  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
VEC = ROOT / "vectors" / "fec_hist"
NCCL = ROOT / "tests" / "data" / "nccl"


def _fabric(bers: list[list[float]], codewords: int = 10**8, seed: int = 44) -> list[str]:
    """Cumulative portstat snapshots drawn from independent-error codeword laws (the generator of the
    advise_fabric24 series; fec.tail.sample_histogram, fixed seed)."""
    return fabric_snapshots(bers, codewords, seed)


def _write(tmp_path: Path, snaps: list[str]) -> list[str]:
    out = []
    for i, s in enumerate(snaps):
        p = tmp_path / f"t{i}.out"
        p.write_text(s)
        out.append(str(p))
    return out


def _json(capsys, argv) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_switch_example_text_and_json(capsys):
    args = ["advise", "--fec-hist", str(VEC / "example_switch64_portstat_t1.out"), "--since",
            str(VEC / "example_switch64_portstat_t0.out"), "--models", "binomial"]
    assert main(args) == 0
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith("VERDICT: keep FEC")
    assert "per port (64;" in text and "per workload (" in text
    for scen in ("fec_everywhere", "fabric_wide", "per_link"):
        assert scen in text
    doc = _json(capsys, args)
    v = doc["verdict"]
    assert first == f"VERDICT: {v['sentence']}"
    assert len(v["ports"]) == 64 and all(set(r) == {"port", "mode"} for r in v["ports"])
    # the binomial alone is rejected on the bursty ports: they are 'unknown', kept on FEC, and the verdict says so
    unknown = [p for p in doc["ports"] if p["status"] == "unknown"]
    assert unknown and all(p["mode"] == "kp4/ieee" for p in unknown)
    assert "could not be judged" in v["sentence"]
    assert {r["workload"] for r in doc["workloads"]} == {"ddp", "tp"}
    assert all(r["source"]["step"] == "model" for r in doc["workloads"])


def test_one_port_and_unfittable_sample(capsys):
    doc = _json(capsys, ["advise", "--fec-hist", str(VEC / "example_kp4_ethtool.json"), "--models", "binomial,dfe"])
    assert [p["port"] for p in doc["ports"]] == ["eth0"]
    doc = _json(capsys, ["advise", "--fec-hist", str(VEC / "sonic_public_sample.out")])
    assert doc["ports"][0]["status"] == "unknown" and doc["ports"][0]["mode"] == "kp4/ieee"
    assert "no law fits" in doc["ports"][0]["why"]
    assert "could not be judged" in doc["verdict"]["sentence"]


def test_sixty_clean_four_marginal_gets_a_per_link_policy(tmp_path, capsys):
    """60 ports at BER 1e-5 (RS(272) FER 6.5e-18 < 1e-13) and 4 at 1.3e-4 (RS(272) FER 4e-9 > 1e-13, KP4 7.8e-17
    < 1e-13): the per-link policy runs rs272 on the 60 and KP4 on the 4; no single mode is allowed on all 64
    but kp4, so the fabric-wide mode is kp4 (synchronous collectives wait for the KP4 hops: no time saved)."""
    bers = [[1e-5] * 60 + [1.3e-4] * 4]
    t0, t1 = _write(tmp_path, _fabric(bers))
    doc = _json(capsys, ["advise", "--fec-hist", t1, "--since", t0, "--models", "binomial", "--workload", "ddp"])
    modes = {r["port"]: r["mode"] for r in doc["verdict"]["ports"]}
    marginal = {f"Ethernet{4 * j}" for j in range(60, 64)}
    assert {modes[p] for p in marginal} == {"kp4/ieee"}
    assert {m for p, m in modes.items() if p not in marginal} == {"rs272/ieee"}
    fw = [r for r in doc["workloads"] if r["scenario"] == "fabric_wide"][0]
    assert fw["fabric_mode"].startswith("kp4/")
    assert set(modes.values()) != {fw["fabric_mode"]}
    assert doc["ports"][-1]["port"] not in marginal  # worst first: the marginal ports lead
    assert all(doc["ports"][i]["port"] in marginal for i in range(4))


def test_replay_shows_the_degrading_links_fallback(tmp_path, capsys):
    """Port Ethernet0 at BER 1e-5 degrades to 1e-4 in interval 2 (SER ~1e-3 > the default activate SER 3.4e-4)
    and recovers in interval 3: the D7 monitor reverts it to kp4/ieee at 2 and returns it at 3."""
    clean = [1e-5] * 8
    bad = [1e-4] + [1e-5] * 7
    snaps = _write(tmp_path, _fabric([clean, clean, bad, clean], codewords=10**7))
    png = tmp_path / "replay.png"
    doc = _json(capsys, ["advise", "--fec-hist", *snaps, "--models", "binomial", "--workload", "ddp",
                         "--plot", str(png)])
    rep = doc["replay"]
    assert rep["intervals"] == 4
    e0 = [p for p in rep["ports"] if p["port"] == "Ethernet0"][0]
    assert e0["base_mode"] == "rs272/ieee"
    assert e0["fallbacks"] == [2] and e0["returns"] == [3]
    assert e0["modes"] == ["rs272/ieee", "rs272/ieee", "kp4/ieee", "rs272/ieee"]
    assert rep["fallbacks"] == 1
    others = [p for p in rep["ports"] if p["port"] != "Ethernet0"]
    assert all(not p["fallbacks"] for p in others)
    s = rep["scenarios"]
    assert s["per_link_adaptive"]["failed_total"] <= s["per_link_static"]["failed_total"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a higher activate threshold never fires
    doc = _json(capsys, ["advise", "--fec-hist", *snaps, "--models", "binomial", "--workload", "ddp",
                         "--degrade-activate-ser", "0.01"])
    assert doc["replay"]["fallbacks"] == 0


def test_folder_of_snapshots(tmp_path, capsys):
    d = tmp_path / "snaps"
    d.mkdir()
    _write(d, _fabric([[1e-5] * 4] * 2, codewords=10**6))
    doc = _json(capsys, ["advise", "--fec-hist", str(d), "--models", "binomial", "--workload", "ddp"])
    assert doc["replay"]["intervals"] == 2 and len(doc["inputs"]["fec_hist"]) == 3


def _err(capsys, argv) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_bad_input(tmp_path, capsys):
    # a port running another FEC than the cluster's --code
    dev = json.loads((VEC / "example_kp4_ethtool.json").read_text())
    dev[0]["active"] = ["LLRS"]
    p = tmp_path / "llrs.json"
    p.write_text(json.dumps(dev))
    err = _err(capsys, ["advise", "--fec-hist", str(p)])
    assert str(p) in err and "port eth0" in err and "'active'" in err and "LLRS" in err
    # nccl-tests of another cluster size
    err = _err(capsys, ["advise", "--fec-hist", str(VEC / "example_kp4_ethtool.json"), "--nccl-tests",
                        str(NCCL / "i152_a100_hdr_2n_allreduce.csv"), "--nodes", "4"])
    assert "i152_a100_hdr_2n_allreduce.csv" in err and "'nodes'" in err
    # snapshots out of time order (a counter went down)
    t0, t1, t2 = _write(tmp_path, _fabric([[1e-5] * 2] * 2, codewords=10**6))
    err = _err(capsys, ["advise", "--fec-hist", t0, t2, t1, "--models", "binomial"])
    assert "went down" in err and "port Ethernet" in err and "bin" in err
    # an empty switch
    e = tmp_path / "empty.out"
    e.write_text(_portstat({}))
    err = _err(capsys, ["advise", "--fec-hist", str(e)])
    assert str(e) in err
    # no codewords at all between snapshots
    err = _err(capsys, ["advise", "--fec-hist", t0, "--since", t0])
    assert "no codewords" in err


def test_nccl_tests_flagged_underperforming_is_said(capsys):
    doc = _json(capsys, ["advise", "--fec-hist", str(VEC / "example_kp4_ethtool.json"), "--models", "binomial,dfe",
                         "--nccl-tests", str(NCCL / "i290_h100_ndr_2n_allreduce_default.csv"), "--workload", "ddp"])
    assert "not trusted" in doc["verdict"]["sentence"]
    assert any("UNDERPERFORMING" in n or "BELOW EXPECTED" in n for n in doc["inputs"]["nccl_tests_notes"])
    r = doc["workloads"][0]
    assert r["step_interval_ms"][0] <= r["step_ms"] * 1.0000001 or r["step_interval_ms"][1] >= r["step_ms"]


def _results(tmp_path: Path) -> Path:
    """An experiment results folder as `phy802 experiment` writes it (NaN loss as null): bypass at 1e-6 and
    1e-5 with two guards, and a run that went NaN without a guard."""
    rows = [dict(parallel="ddp", ber=0.0, guard="-", evals=[[0, 4.0], [100, 2.0]], final_val_loss=2.0)]
    for ber, pen in ((1e-6, 0.004), (1e-5, 0.05)):
        rows.append(dict(parallel="ddp", ber=ber, guard="nan_to_zero_clamp", evals=[[0, 4.0], [100, 2 + pen]],
                         final_val_loss=2.0 + pen))
        rows.append(dict(parallel="ddp", ber=ber, guard="exponent_protection", evals=[[0, 4.0], [100, 2 + pen / 4]],
                         final_val_loss=2.0 + pen / 4))
        rows.append(dict(parallel="ddp", ber=ber, guard="none", evals=[[0, 4.0], [100, None]], final_val_loss=None))
    d = tmp_path / "exp"
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"meta": {"fec": "bypass", "world_size": 2}, "rows": rows}))
    return d


def test_loss_side_from_results(tmp_path, capsys):
    from protocol.advise import loss_side_from_results

    loss = loss_side_from_results(str(_results(tmp_path)))
    # bypass: the best guard at each BER (exponent_protection: penalty / 4); unequal: the exponent_protection rows
    assert loss.steps("bypass", 1e-5) == pytest.approx(100 * (4 - 2.02) / (4 - 2.0125))  # best guard's curve
    pen, b, guard = loss.penalty("bypass", 3e-7)
    assert (b, guard) == (1e-6, "ddp, guard exponent_protection") and pen == pytest.approx(0.001)
    assert loss.penalty("bypass", 1e-5)[0] == pytest.approx(0.0125)
    assert loss.penalty("bypass", 2e-5) is None  # beyond what was measured: not extrapolated
    assert loss.penalty("unequal", 1e-6)[0] == pytest.approx(0.001)
    doc = _json(capsys, ["advise", "--fec-hist", str(VEC / "example_kp4_ethtool.json"), "--models", "binomial,dfe",
                         "--results", str(loss.source.split(" (")[0]), "--workload", "ddp"])
    assert doc["inputs"]["loss_side"] and not any("loss side" in m for m in doc["inputs"]["missing"])
    # the port's BER (~1e-4) is beyond the measured 1e-5: bypass is refused with that reason, and its headers too
    chk = doc["ports"][0]["checks"]["kp4/bypass"]
    assert not chk["allowed"] and "header loss" in chk["why"]
    # time to target: the error-free curve reaches 2.0 x 1.01 = 2.02 at step 99 (linear between 4.0 at 0 and 2.0 at 100)
    assert loss.base_steps == pytest.approx(99.0)
    r = doc["workloads"][0]
    assert r["steps_to_target"] == pytest.approx(99.0)
    assert r["time_to_target_s"] == pytest.approx(99.0 * r["step_ms"] / 1e3)


def test_example_series_is_reproduced():
    """vectors/fec_hist/advise_fabric24_t*.out (SIMULATED) are what their generator writes, byte for byte."""
    from gen_advise_series import series_bers

    for i, text in enumerate(fabric_snapshots(series_bers())):
        assert (VEC / f"advise_fabric24_t{i}.out").read_text(encoding="utf-8") == text, f"t{i}"


def test_all_clean_fabric_verdict_names_the_fabric_wide_mode(tmp_path, capsys):
    """Every port clean enough for RS(272): the per-link policy is RS(272) everywhere, the same as the best
    fabric-wide mode, so the verdict names that mode (with --min-gain 0: any saving counts); with the default
    --min-gain 0.001 the same saving (a few ns per hop in a ms step) keeps FEC."""
    t0, t1 = _write(tmp_path, _fabric([[1e-5] * 8], codewords=10**7))
    argv = ["advise", "--fec-hist", t1, "--since", t0, "--models", "binomial", "--workload", "tp", "--nodes", "16"]
    doc = _json(capsys, argv + ["--min-gain", "0"])
    v = doc["verdict"]
    assert v["action"] == "fabric_wide" and v["sentence"].startswith("run rs272/ieee on all 8 links: saves ")
    fw = [r for r in doc["workloads"] if r["scenario"] == "fabric_wide"][0]
    assert fw["fabric_mode"] == "rs272/ieee" and fw["step_ms"] < doc["workloads"][0]["step_ms"]
    doc = _json(capsys, argv)
    assert doc["verdict"]["action"] == "keep_fec" and "changing pays from 0.1%" in doc["verdict"]["sentence"]
