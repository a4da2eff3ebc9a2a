"""``phy802 fec tail`` fits the code the port runs: a port whose active FEC (ethtool's ``active`` /
``Active FEC encoding``, the kernel's names RS, BaseR, LLRS, None/Off) is not the fitted code is
withheld and ranked unknown, the reason first; with no ``--code``, ports that all run LLRS are fitted
as RS(272,258) and the output says so first."""

from __future__ import annotations

import csv
import io
import json
import math

from phy802.cli import main

ARGS = ["--models", "binomial", "--bootstrap", "0"]


def _bins(n: int, t: int, ber: float, words: int) -> list[int]:
    """Expected codewords with w = 0..t symbol errors of a binomial channel (a real-shaped histogram)."""
    p = 1 - (1 - ber) ** 10
    return [round(words * math.comb(n, w) * p**w * (1 - p) ** (n - w)) for w in range(t + 1)]


def _dev(name: str, mode: str, n: int, t: int, ber: float = 2e-5) -> dict:
    """One device as ``ethtool --json --include-statistics --show-fec`` prints it (Linux 6.18+ hist)."""
    counts = _bins(n, t, ber, 10**9)
    return {"ifname": name, "config": ["Auto"], "active": [mode], "statistics": {
        "corrected_blocks": {"total": sum(counts[1:])}, "uncorrectable_blocks": {"total": 0},
        "hist": [{"bin_low": w, "bin_high": w, "total": c} for w, c in enumerate(counts)]}}


def _text(mode: str, n: int, t: int) -> str:
    """The same as ``ethtool -I --show-fec eth0`` prints it."""
    counts = _bins(n, t, 2e-5, 10**9)
    return ("FEC parameters for eth0:\nSupported/Configured FEC encodings: Auto\n"
            f"Active FEC encoding: {mode}\nStatistics:\n  corrected_blocks: {sum(counts[1:])}\n"
            "  uncorrectable_blocks: 0\n" + "".join(f"  fec_symbols_err_{w}: {c}\n" for w, c in enumerate(counts)))


def test_llrs_port_is_fitted_as_rs272_and_said_first(tmp_path, capsys):
    # the kp4 default fitted an LLRS port's bins as RS(544,514) t=15, silently: margins of the wrong code
    for name, body in (("llrs.json", json.dumps([_dev("eth0", "LLRS", 272, 7)])), ("llrs.txt", _text("LLRS", 272, 7))):
        f = tmp_path / name
        f.write_text(body)
        assert main(["fec", "tail", str(f), *ARGS, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["code"] == {"name": "rs272", "n": 272, "k": 258, "t": 7}
        assert "LLRS" in d["code_chosen"] and d["verdict"]["status"] == "fits"
        assert main(["fec", "tail", str(f), *ARGS]) == 0
        out = capsys.readouterr().out
        assert out.startswith("note: fitted as --code rs272") and "code rs272(272,258) t=7" in out


def test_wrong_code_is_withheld_and_never_ranked_healthy(tmp_path, capsys):
    f = tmp_path / "llrs.json"
    f.write_text(json.dumps([_dev("eth0", "LLRS", 272, 7)]))
    assert main(["fec", "tail", str(f), *ARGS, "--code", "kp4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"]["status"] == "fec_mismatch" and d["notes"][0] == d["verdict"]["message"]
    assert "'LLRS'" in d["notes"][0] and "--code rs272" in d["notes"][0] and d["code_chosen"] is None
    g = tmp_path / "rs.json"
    g.write_text(json.dumps([_dev("eth0", "RS", 544, 15)]))
    assert main(["fec", "tail", str(g), *ARGS, "--code", "rs272", "--json"]) == 0  # bins above 7 all empty
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"]["status"] == "fec_mismatch" and "--code kp4 or --code kr4" in d["notes"][0]
    # a switch where one port runs LLRS, one RS and one BaseR (Clause 74 FC-FEC): the default kp4 fits RS
    sw = tmp_path / "sw.json"
    sw.write_text(json.dumps([_dev("eth0", "RS", 544, 15), _dev("eth1", "LLRS", 272, 7), _dev("eth2", "BaseR", 544, 15)]))
    assert main(["fec", "tail", str(sw), *ARGS, "--csv"]) == 0
    rows = {r["port"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert rows["eth0"]["status"] == "ok"
    assert rows["eth1"]["status"] == "unknown" and rows["eth1"]["notes"].startswith("the port's active FEC is 'LLRS'")
    assert rows["eth2"]["status"] == "unknown" and "Fire code" in rows["eth2"]["notes"]
    assert main(["fec", "tail", str(sw), *ARGS, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["code"] == "kp4" and d["code_chosen"] is None and sorted(d["unknown_ports"]) == ["eth1", "eth2"]
    # --ifname picks the port the code is chosen for
    assert main(["fec", "tail", str(sw), *ARGS, "--ifname", "eth1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["code"]["name"] == "rs272"


def test_a_kp4_histogram_labelled_llrs_is_refused_naming_the_choice(tmp_path, capsys):
    f = tmp_path / "x.json"
    f.write_text(json.dumps([_dev("eth0", "LLRS", 544, 15, ber=2e-4)]))  # bin 8 holds codewords
    assert main(["fec", "tail", str(f), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "t = 7" in err and "active FEC of the port is LLRS" in err
