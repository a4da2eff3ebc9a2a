"""``phy802 fec tail`` judges its own fits: a law must pass its goodness-of-fit test before its tail is
reported; a port where none passes (or FEC is off) says so first, in text, JSON and CSV, has its FER
and margin withheld, and ranks as ``unknown``, never among the healthy ports."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from phy802.cli import main
from phy802.telemetry.bins import FecBin, FecHistogram
from phy802.telemetry.fit import CODES, fit_histogram

ROOT = Path(__file__).resolve().parents[3]
SONIC = ROOT / "vectors" / "fec_hist" / "sonic_public_sample.out"
KP4 = CODES["kp4"]

# two ports: Ethernet0 binomial-like (fits), Ethernet4 with a second hump no law can draw (bins 1 and 3
# high, 2 empty: every law is rejected, G2 p ~ 0)
HEADER = ("IFACE      STATE  BIN0  BIN1  BIN2  BIN3  BIN4  BIN5  BIN6  BIN7  BIN8  BIN9  BIN10  BIN11  BIN12  "
          "BIN13  BIN14  BIN15\n")
GOOD = "Ethernet0  U  100,000,000  54,000  15  0  0  0  0  0  0  0  0  0  0  0  0  0\n"
BAD = "Ethernet4  U  100,000,000  50,000  0  40,000  0  0  0  0  0  0  0  0  0  0  0  0\n"


def _hump() -> FecHistogram:
    return FecHistogram(tuple(FecBin(i, i, c) for i, c in enumerate([10**8, 50000, 0, 40000, 0, 0])), source="hump")


def test_no_law_fits_is_the_verdict():
    fit = fit_histogram(_hump(), KP4, models=("binomial", "dfe"), bootstrap=0)
    assert fit.verdict["status"] == "no_fit" and fit.withheld
    assert set(fit.verdict["rejected"]) == {"binomial", "dfe"} and fit.verdict["level"] == 0.01
    assert all(f.gof["verdict"] == "rejected" for f in fit.fits.values())
    text = fit.format_text()
    assert text.splitlines()[0].startswith("WARNING: no law fits this histogram at the 0.01 level")
    # the tail columns are withheld, the extrapolated FER never printed as a result
    fer = f"{fit.fits['dfe'].predicted['fer']['value']:.3g}"
    assert "withheld (no law fits)" in text and fer not in text
    # a law that fits keeps its tail
    ok = fit_histogram(FecHistogram(tuple(FecBin(i, i, c) for i, c in enumerate([10**8, 54000, 15, 0]))),
                       KP4, models=("binomial",), bootstrap=0)
    assert ok.verdict["status"] == "fits" and not ok.withheld and "WARNING" not in ok.format_text()


def test_untestable_laws_do_not_pass(capsys):
    # the public SONiC sample: every law has 0 or fewer degrees of freedom after pooling
    assert main(["fec", "tail", str(SONIC), "--bootstrap", "0", "--models", "binomial,dfe"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WARNING: no law fits this histogram at the 0.01 level (binomial untested")
    assert main(["fec", "tail", str(SONIC), "--bootstrap", "0", "--models", "binomial,dfe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc)[:4] == ["format", "version", "phy802_version", "verdict"]
    assert doc["verdict"]["status"] == "no_fit" and doc["verdict"]["untested"] == ["binomial", "dfe"]
    assert doc["notes"][0] == doc["verdict"]["message"]  # notes (read by tools) say it first too


def test_switch_ranks_an_unfitted_port_unknown(tmp_path, capsys):
    p = tmp_path / "sw.out"
    p.write_text(HEADER + BAD + GOOD)
    argv = ["fec", "tail", str(p), "--models", "binomial,dfe", "--bootstrap", "0", "--no-progress"]
    assert main(argv + ["--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    by = {r["port"]: r for r in rows}
    assert by["Ethernet4"]["status"] == "unknown" and by["Ethernet4"]["fer"] == "" and by["Ethernet4"]["margin_factor"] == ""
    assert by["Ethernet4"]["notes"].startswith("no law fits this histogram")
    assert by["Ethernet0"]["status"] == "ok" and float(by["Ethernet0"]["fer"]) > 0
    # unknown before the healthy port (ranked after ports below target, never among the healthy ones)
    assert [r["port"] for r in rows] == ["Ethernet4", "Ethernet0"]
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unknown_ports"] == ["Ethernet4"] and doc["gof_level"] == 0.01
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("WARNING: 1 port(s) unknown")
    # a stricter level of the test rejects nothing more here, a looser one cannot rescue the hump
    assert main(argv + ["--gof-level", "1e-300", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["port"]: r["status"] for r in rows}["Ethernet4"] == "unknown"


def test_fec_off_port_flagged_and_lane_note_once(tmp_path, capsys):
    doc = [{"ifname": "eth0", "active": ["None"], "statistics": {"hist": [
        {"bin_low": 0, "bin_high": 0, "total": 1000000, "lanes": [500000, 500000]},
        {"bin_low": 1, "bin_high": 1, "total": 5000}, {"bin_low": 2, "bin_high": 2, "total": 12},
        {"bin_low": 3, "bin_high": 3, "total": 0}]}}]
    p = tmp_path / "off.json"
    p.write_text(json.dumps(doc))
    assert main(["fec", "tail", str(p), "--models", "binomial", "--bootstrap", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["status"] == "fec_off" and "FEC is off" in out["verdict"]["message"]
    assert out["notes"][0] == out["verdict"]["message"] and out["notes"].count(out["verdict"]["message"]) == 1
    lane_notes = [n for n in out["notes"] if "per-lane counts" in n]
    assert len(lane_notes) == 1, out["notes"]
    assert main(["fec", "tail", str(p), "--models", "binomial", "--bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("WARNING: FEC is off on this port") and text.count("per-lane counts") == 1


def test_progress_is_one_summary_line_off_a_terminal(tmp_path, capsys):
    p = tmp_path / "sw.out"
    p.write_text(HEADER + GOOD + GOOD.replace("Ethernet0", "Ethernet8") + GOOD.replace("Ethernet0", "Ethernet12"))
    assert main(["fec", "tail", str(p), "--models", "binomial", "--bootstrap", "0"]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("phy802 fec tail")]
    # quick work: no line while it runs (one at most every 10 s), one summary line at the end
    assert err == [err[0]] and "done 3/3 port" in err[0], err


def test_all_zero_diff_is_an_error_for_a_switch_too(tmp_path, capsys):
    p = tmp_path / "sw.out"
    p.write_text(HEADER + GOOD + GOOD.replace("Ethernet0", "Ethernet8"))
    for extra in ([], ["--ifname", "Ethernet8"]):
        assert main(["fec", "tail", str(p), "--since", str(p), "--bootstrap", "0", "--models", "binomial"] + extra) == 2
        assert "no codewords counted between the snapshots" in capsys.readouterr().err


@pytest.mark.parametrize("level", ["0", "1", "nan"])
def test_gof_level_range(level, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fec", "tail", str(SONIC), "--gof-level", level])
    assert exc.value.code == 2 and "--gof-level" in capsys.readouterr().err


def test_from_fit_refuses_an_unfitted_best_unless_named():
    from phy802.telemetry.fit import generator_channel

    fit = fit_histogram(_hump(), KP4, models=("binomial", "dfe"), bootstrap=0).as_dict()
    fit = json.loads(json.dumps(fit, allow_nan=False))  # as FIT.json holds it
    with pytest.raises(ValueError, match=r"FIT\.json: no law fits this histogram.*name one with --fit-model"):
        generator_channel(fit, None, "FIT.json")
    assert generator_channel(fit, "dfe", "FIT.json")["model"] == "dfe"


def test_a_rejected_law_beside_one_that_fits_is_marked_in_the_tail_table(capsys):
    # binomial rejected (G2 p 0), dfe fits (p 0.57): the binomial's extrapolated FER (4.7e-22) was printed
    # in the same table as the dfe's with nothing beside it
    path = ROOT / "vectors" / "fec_hist" / "example_kp4_sonic_hist.out"
    assert main(["fec", "tail", str(path), "--models", "binomial,dfe", "--bootstrap", "0"]) == 0
    # the tail table's rows: a model name, then its predictions ending in the margin (x factor, dB SNR)
    tail_rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()
                 if " dB" in ln and " x" in ln and not ln.startswith("model")}
    assert set(tail_rows) == {"binomial", "dfe"}, tail_rows
    assert tail_rows["binomial"].endswith("(rejected: not the port's result)"), tail_rows
    assert "not the port's result" not in tail_rows["dfe"]



def test_switch_table_db_is_the_snr_margin_the_one_port_table_gives(tmp_path, capsys):
    # the switch table's dB column was 10 log10 of the BER factor (+23.22 for x210) beside the one-port
    # table's PAM4 AWGN SNR margin (+2.67 dB) for the same port
    p = tmp_path / "sw.out"
    p.write_text(HEADER + GOOD + GOOD.replace("54,000  15  0", "540,000  1500  3").replace("Ethernet0", "Ethernet8"))
    argv = ["fec", "tail", str(p), "--models", "binomial", "--bootstrap", "0", "--no-progress"]
    assert main(argv + ["--ifname", "Ethernet8"]) == 0
    one = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("binomial") and ln.endswith(" dB")]
    snr = one[0].rsplit(", ", 1)[1].removesuffix(" dB")  # the one-port table: 'x2.099e+02 [...], +2.67 dB'
    assert main(argv) == 0
    text = capsys.readouterr().out.splitlines()
    head = next(ln for ln in text if ln.lstrip().startswith("# port"))
    row = next(ln for ln in text if " Ethernet8 " in ln)
    assert "dB SNR" in head
    assert row.split()[-3] == snr, (row, snr)  # the column before SONiC pred. and R^2
    assert main(argv + ["--csv"]) == 0
    by = {r["port"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert f"{float(by['Ethernet8']['snr_margin_db']):+.2f}" == snr
    assert float(by["Ethernet8"]["margin_db"]) == pytest.approx(10 * math.log10(float(by["Ethernet8"]["margin_factor"])),
                                                                abs=1e-9)
