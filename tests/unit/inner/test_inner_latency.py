"""800G/1.6T latency rows (protocol/latency.py) and the rate-aware modes (protocol/modes.py)."""

import pytest

from phy802.cli import main
from protocol.latency import INNER_RATES, LatencyConfig, added_latency, path_latency
from protocol.modes import PATH_OPTIONS, inner_code_for


def test_outer_accumulation_x4():
    # X = 4 KP4 codewords at 850 / 1700 Gb/s
    assert added_latency("ieee", "800G").accumulation_ns == pytest.approx(4 * 5440 / 850)
    assert added_latency("ieee", "1.6T").accumulation_ns == pytest.approx(12.8)
    assert INNER_RATES["800G"].lane_gbps_inner == pytest.approx(212.5 * 128 / 120)


def test_inner_part_and_bypass():
    cfg = LatencyConfig()
    b = added_latency("ieee", "800G", cfg)
    assert b.inner == "c177" and b.inner_ns == pytest.approx(128 / (212.5 * 128 / 120) + 4.0)
    assert b.total_ns == pytest.approx(b.accumulation_ns + b.decoder_ns + b.inner_ns)
    hard = added_latency("ieee", "800G", cfg, inner_decoder="hard")
    assert b.inner_ns - hard.inner_ns == pytest.approx(2.0)
    none = added_latency("ieee", "800G", cfg, inner="none")
    assert none.inner_ns == 0 and none.total_ns == pytest.approx(b.total_ns - b.inner_ns)
    assert added_latency("bypass", "1.6T").total_ns == pytest.approx(b.inner_ns)
    # the 400G rows are unchanged (no inner code) and c177 there is refused
    assert added_latency("ieee", "400G").total_ns == pytest.approx(57.6)
    with pytest.raises(ValueError, match="no inner code"):
        added_latency("ieee", "400G", inner="c177")
    with pytest.raises(ValueError, match="kp4"):
        added_latency("ieee", "800G", code="rs272")


def test_path_latency_segmented_vs_end_to_end():
    b = added_latency("ieee", "800G")
    assert path_latency("ieee", "800G", 3, "segmented") == pytest.approx(3 * b.total_ns)
    assert path_latency("ieee", "800G", 3, "end_to_end") == pytest.approx(3 * b.inner_ns + b.outer_ns)


def test_modes_know_rates():
    assert inner_code_for("800G") == "c177" and inner_code_for("1.6t") == "c177"
    assert inner_code_for("400G") == "none"
    assert set(PATH_OPTIONS) >= {"segmented", "end_to_end", "bypass_inner", "bypass_outer"}
    with pytest.raises(ValueError, match="unknown rate"):
        inner_code_for("100G")


def test_latency_cli_800g(capsys):
    assert main(["latency", "--rate", "800G,1.6T", "--code", "kp4", "--fec", "ieee", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["rate"], r["inner"]) for r in rows] == [("800G", "c177"), ("1.6T", "c177")]
    assert main(["latency", "--rate", "400G", "--inner", "c177"]) == 2
    assert "rate 400G has no inner code" in capsys.readouterr().err


def test_latency_paths_frontier(capsys):
    import json

    assert main(["latency", "--rate", "800G", "--paths", "--hops", "2", "--snr-db", "16", "--inner-decoder", "hard",
                 "--json"]) == 0
    rows = {r["option"]: r for r in json.loads(capsys.readouterr().out)["paths"]}
    seg, e2e = rows["segmented"], rows["end_to_end"]
    assert e2e["path_fec_ns"] < seg["path_fec_ns"] and e2e["fer"] > seg["fer"]
    assert rows["bypass_inner"]["fer"] > seg["fer"] and rows["bypass_outer"]["path_fec_ns"] < e2e["path_fec_ns"]
    assert main(["latency", "--rate", "400G", "--paths"]) == 2
