"""`phy802 demo` (the README's third command) end to end, without torch in the default run."""

import json

import pytest

from phy802.cli import main


def test_demo_quick_without_training(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--quick", "--no-train", "--workers", "1", "--no-progress", "--json", "--out", str(out)])
    assert rc == 0
    s = json.loads(capsys.readouterr().out)
    assert s["vectors"]["failed"] == 0 and s["vectors"]["passed"] >= 16
    for name in ("report.md", "summary.json", "ber_fer.png", "latency.png", "trace_bypass_400g.npz"):
        assert (out / name).stat().st_size > 0, name
    rows = {(r["mode"], r["x"]): r for r in s["sweep"]}
    # bypass delivers the channel's errors: its post-FEC BER interval holds the pre-FEC BER it was set to
    assert {m for m, _ in rows} == {"kp4/ieee", "kp4/bypass"}
    for (mode, x), r in rows.items():
        if mode == "kp4/bypass":
            assert r["post_fec_ber_lo"] <= x <= r["post_fec_ber_hi"]
    # KP4 at 3e-4 (theory FER ~1e-11) shows no failures, at 3e-3 most codewords fail
    assert rows[("kp4/ieee", 3e-4)]["codeword_errors"] == 0
    assert rows[("kp4/ieee", 3e-3)]["fer"] > 0.3
    assert {m for m, _ in rows} == {"kp4/ieee", "kp4/bypass"}
    meta = s["trace"]["meta"]
    assert meta["pre_fec"]["bit_errors"] > 0 and meta["fec"] == "bypass"
    report = (out / "report.md").read_text()
    assert "## 1. Known-answer vectors" in report and "## 3. Error trace" in report
    # the report opens with what the run shows, computed from its numbers, and says what is a model
    head = report.split("## 1. Known-answer vectors")[0]
    assert "## What this run shows" in head and f"All {s['vectors']['passed']} known-answer" in head
    assert f"0 of {rows[('kp4/ieee', 3e-4)]['codewords']:,}" in head and "**Measured or model.**" in head


@pytest.mark.slow
def test_demo_quick_with_training(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--no-progress", "--json", "--out", str(out)]) == 0
    s = json.loads(capsys.readouterr().out)
    shadow, noisy = s["training"][0], s["training"][1]
    assert shadow["ber"] == 0 and shadow["flips"] == 0
    assert shadow["injected_noise"] == 0 and shadow["weight_dist_shadow"] == 0
    # what the link injected into the received payload, and where the weights ended up
    assert noisy["flips"] > 0 and noisy["injected_noise"] > 0 and noisy["weight_dist_shadow"] > 0
    assert (out / "training" / "loss_ddp.png").stat().st_size > 0
    # step 5: the tradeoff of those runs (modelled step time x measured loss), table and Pareto plot
    assert s["tradeoff"]["rows"] > 0 and (out / "tradeoff" / "pareto.png").stat().st_size > 0
    assert "## 5. Is skipping FEC worth it?" in (out / "report.md").read_text()
