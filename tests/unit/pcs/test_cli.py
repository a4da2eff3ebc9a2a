import json

import numpy as np
import pytest

from phy802.cli import main
from phy802.pcs import PcsConfig
from phy802.pcs.lanesfile import LanesFileError, read_lanes, write_lanes


def test_tx_rx_round_trip_with_impairments(tmp_path, capsys):
    out = tmp_path / "lanes.txt"
    assert main(["pcs", "tx", "--frames", "50", "--seed", "4", "--am-spacing", "80", "--ser", "2e-3",
                 "--skew", "9", "--shuffle", "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["frames"] == 50 and sorted(info["lane_of_row"]) == list(range(16))
    assert main(["pcs", "rx", str(out), "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["frames_delivered"] == 50 and c["fcs_errors"] == 0 and c["uncorrected_codewords"] == 0
    assert c["lane_of_input"] == info["lane_of_row"]
    assert sum(c["symbol_errors"]) == c["corrected_symbols"] == info["symbol_errors_injected"]
    assert main(["pcs", "rx", str(out)]) == 0
    assert "frames delivered 50" in capsys.readouterr().out


def test_npz_and_text_forms_agree(tmp_path):
    lanes = np.random.default_rng(0).integers(0, 1024, (16, 30)).astype(np.uint16)
    cfg = PcsConfig(am_spacing=80, am_status=3)
    for name in ("a.txt", "a.npz"):
        write_lanes(tmp_path / name, lanes, cfg)
        back, fields = read_lanes(tmp_path / name)
        assert (back == lanes).all() and PcsConfig(**fields) == cfg


def test_bad_lanes_file(tmp_path, capsys):
    p = tmp_path / "bad.txt"
    p.write_text("kind=config rate=400G am_spacing=80 scrambler_seed=0 prbs9_seed=1 am_status=0\n"
                 "kind=lane row=0 symbols=1,2,x\n")
    with pytest.raises(LanesFileError, match=rf"{p}:2: field symbols"):
        read_lanes(p)
    assert main(["pcs", "rx", str(p)]) == 2
    assert f"{p}:2" in capsys.readouterr().err
    p.write_text("kind=config rate=400G am_spacing=80 scrambler_seed=0 prbs9_seed=1 am_status=0\n"
                 + "".join(f"kind=lane row={r} symbols=1,2,3\n" for r in range(16)))
    assert main(["pcs", "rx", str(p)]) == 2
    assert "never locked" in capsys.readouterr().err


def test_lanemap_and_markers_json(capsys):
    assert main(["pcs", "lanemap", "--rate", "200G", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert len(m["laneA"]) == 544 and max(m["slotA"]) == 135
    assert main(["pcs", "markers", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["symbols"][0][:3] == [666, 402, 866]
