"""What link engineers paste and what phy802 writes for them: one meaning per histogram format name
across commands, hex dumps as hex tools print them, SONiC pastes with their prompt and CRLF line ends,
counters that contradict the bins, bounded reads of endless input."""

from __future__ import annotations

import json

import pytest

from phy802.cli import main
from phy802.fec.telemetry import TelemetryError, parse_telemetry

LINK = ["link", "--code", "kp4", "--fec", "ieee", "--ber", "2e-4", "--pairs", "64", "--seed", "1", "--level",
        "codeword", "--bins", "0,1-3,4-15"]


# ------------------------------------------------------------------------------ one meaning per format name


@pytest.mark.parametrize("fmt", ["ethtool-json", "ynl"])
def test_link_writes_what_fec_tail_reads_under_the_same_name(fmt, tmp_path, capsys):
    assert main(LINK + ["--format", fmt]) == 0
    p = tmp_path / "h.json"
    p.write_text(capsys.readouterr().out)
    doc = json.loads(p.read_text())
    if fmt == "ethtool-json":  # ethtool --json: a list of devices, statistics.hist[] of bin_low/bin_high/total
        assert isinstance(doc, list) and set(doc[0]["statistics"]["hist"][0]) == {"bin_low", "bin_high", "total"}
    else:  # the kernel's YNL fec-get reply
        assert set(doc["stats"]["hist"][0]) == {"bin-low", "bin-high", "bin-val"}
    for forced in (fmt, "auto"):
        assert main(["fec", "tail", str(p), "--format", forced, "--models", "binomial", "--bootstrap", "0",
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["input_format"] == fmt
    other = "ynl" if fmt == "ethtool-json" else "ethtool-json"
    assert main(["fec", "tail", str(p), "--format", other, "--models", "binomial", "--bootstrap", "0"]) == 2
    assert f"--format {fmt}" in capsys.readouterr().err  # the hint names the right one


def test_sweep_ethtool_json_is_one_device_per_point(capsys):
    assert main(["sweep", "--ber", "1e-3,2e-3", "--code", "kp4", "--fec", "ieee", "--max-codewords", "400",
                 "--max-seconds", "5", "--workers", "1", "--no-progress", "--format", "ethtool-json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["ifname"] for d in doc] == ["kp4/ieee:ber=0.001", "kp4/ieee:ber=0.002"]
    tel = parse_telemetry(json.dumps(doc), "sweep.json", fmt="ethtool-json", t=15)
    assert tel.names() == ["kp4/ieee:ber=0.001", "kp4/ieee:ber=0.002"]


# ------------------------------------------------------------------------------ counters against the bins


def _eth(corrected: int, bins=(10**9, 2 * 10**8, 4 * 10**7)) -> str:
    hist = [{"bin_low": i, "bin_high": i, "total": c} for i, c in enumerate(bins)]
    return json.dumps([{"ifname": "eth0", "statistics": {"corrected_blocks": {"total": corrected}, "hist": hist}}])


def test_corrected_blocks_must_agree_with_the_bins():
    with pytest.raises(TelemetryError, match=r"corrected-blocks counter 5 holds only the 240000000 codewords"):
        parse_telemetry(_eth(5), "e.json", t=15)
    # a counter that holds the bins (bins 3..15 not reported) is fine, and one read a moment apart
    parse_telemetry(_eth(240_000_000 + 12345), "e.json", t=15)
    parse_telemetry(_eth(240_000_000 - 1000), "e.json", t=15)
    # bins covering every count 1..t must sum to the counter
    full = [10**6, 500, 20] + [0] * 13
    with pytest.raises(TelemetryError, match="far more than"):
        parse_telemetry(_eth(10**8, full), "e.json", t=15)
    parse_telemetry(_eth(520, full), "e.json", t=15)
