"""``link`` / ``sweep`` / ``theory`` at 800G/1.6T with the inner code: they run, agree with the
closed form, and refuse --inner c177 at a rate without an inner code (exit 2)."""

import json

import pytest

from phy802.cli import main


def test_link_800g_json(capsys):
    assert main(["link", "--rate", "800G", "--code", "kp4", "--inner", "c177", "--inner-decoder", "hard",
                 "--snr-db", "15", "--codewords", "1200", "--path", "fast", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["rate"] == "800G" and doc["counters"]["codewords"] >= 1200
    fer = doc["rates"]["fer"]
    assert fer["lo"] <= doc["theory"]["fer"] <= fer["hi"]


@pytest.mark.parametrize("argv,msg", [
    (["link", "--rate", "400G", "--inner", "c177", "--ber", "1e-4"], "rate 400G has no inner code"),
    (["sweep", "--rate", "200G", "--inner", "c177", "--ber", "1e-4"], "rate 200G has no inner code"),
    (["link", "--rate", "1.6T", "--code", "rs272", "--snr-db", "15"], "kp4"),
    (["link", "--rate", "800G", "--precoding", "--snr-db", "15"], "--precoding does not apply"),
    (["link", "--rate", "800G"], "--ber or --snr-db"),
])
def test_bad_combinations_exit_2(capsys, argv, msg):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_sweep_hard_and_soft_side_by_side(tmp_path, capsys):
    assert main(["sweep", "--rate", "1.6T", "--snr-db", "15", "--max-codewords", "1200", "--no-progress",
                 "--out", str(tmp_path / "o"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["decoder"] for p in doc["points"]] == ["hard", "chase"]
    hard, soft = doc["points"]
    assert soft["rates"]["inner_block_failure"]["value"] < 0.5 * hard["rates"]["inner_block_failure"]["value"]
    assert (tmp_path / "o" / "sweep.csv").read_text().count("\n") == 3


def test_inner_sweep_replaces_its_own_earlier_output(tmp_path, capsys):
    # the 800G/1.6T sweep named its output kind ("sweep.csv", "sweep.json"): a list in the signed
    # marker, which no later run could verify, so rerunning into the same --out was refused
    argv = ["sweep", "--rate", "800G", "--snr-db", "16", "--max-codewords", "200", "--no-progress",
            "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    assert main(argv) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [".phy802-output", "sweep.csv", "sweep.json"]


def test_theory_inner(capsys):
    assert main(["theory", "inner", "--snr-db", "16", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["fer"] < row["fer_kp4_alone"] and row["decoder"] == "hard"


def test_theory_inner_erasure_column(capsys):
    assert main(["theory", "inner", "--snr-db", "16", "--erasure", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["fer_erasure"] > row["fer"]
    assert main(["theory", "inner", "--snr-db", "16", "--erasure", "--hops", "2", "--outer", "end_to_end"]) == 2
