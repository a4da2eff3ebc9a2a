"""Reproducibility and strict JSON: every ``--json`` output is strict JSON
(no NaN/Infinity) with all wall-clock fields under one top-level ``timing`` key, and two runs with
the same ``--seed`` print the same document outside ``timing``."""

from __future__ import annotations

import json

import pytest

from phy802.cli import main


def _strict(text: str):
    def bad(const):
        raise AssertionError(f"non-JSON constant {const} in output")

    return json.loads(text, parse_constant=bad)


COMMANDS = [
    ("pma", ["pma", "prbs", "--pattern", "prbs13q", "--count", "300"]),
    ("pcs-tx", ["pcs", "tx", "--frames", "20", "--ser", "1e-3", "--skew", "5", "--shuffle", "--out", "{d}/l.txt"]),
    ("fec", ["fec", "decode", "{d}/cw.txt"]),
    ("link", ["link", "--ber", "2e-4", "--pairs", "64", "--batch", "64"]),
    ("link-nolock", ["link", "--ber", "1e-2", "--pairs", "64", "--batch", "64"]),
    ("sweep", ["sweep", "--ber", "2e-3,3e-3", "--max-codewords", "400", "--max-seconds", "0", "--workers", "1",
               "--no-progress"]),
    ("theory-rare", ["theory", "rare", "--ber", "1e-3", "--samples-per-k", "100"]),
    ("theory-pam4", ["theory", "pam4", "--snr-db", "14,16"]),
    ("latency", ["latency"]),
    ("trace", ["trace", "generate", "--ber", "1e-4", "--bits", "2e8", "--no-progress", "--out", "{d}/t.trace"]),
    ("vectors", ["vectors", "verify"]),
    ("collective-sim", ["collective", "--bytes", "1e6", "--trials", "200", "--ber", "1e-6", "--fec", "bypass"]),
]


@pytest.mark.parametrize("argv", [c[1] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_same_seed_same_json_outside_timing(tmp_path, capsys, argv):
    (tmp_path / "cw.txt").write_text("".join(" ".join(str((i * j) % 1024) for j in range(544)) + "\n"
                                             for i in range(3)))
    argv = [a.replace("{d}", str(tmp_path)) for a in argv] + ["--json", "--seed", "7"]
    if argv[0] in ("latency", "vectors", "fec", "pma") or argv[:2] == ["theory", "pam4"]:
        argv = argv[:-2]  # no randomness, no --seed
    docs = []
    for _ in range(2):
        rc = main(argv)
        out = capsys.readouterr().out
        assert rc in (0, 1)
        doc = _strict(out)
        assert isinstance(doc.get("timing"), dict)
        docs.append(doc)
    a, b = ({k: v for k, v in d.items() if k != "timing"} for d in docs)
    assert a == b


def test_timing_keys_are_collected():
    from phy802.cli._common import json_document

    doc = json_document({"x": 1, "counters": {"seconds": 2.5, "n": 3}, "points": [{"gbps": 1.0, "v": float("nan")}],
                         "timing": {"total_s": 9.0}})
    assert doc == {"x": 1, "counters": {"n": 3}, "points": [{"v": None}],
                   "timing": {"total_s": 9.0, "counters.seconds": 2.5, "points[0].gbps": 1.0}}
    assert "Infinity" not in json.dumps(json_document({"a": float("inf"), "b": [float("-inf")]}), allow_nan=False)
