"""PRBS13Q/PRBS31Q default seeds checked against the IEEE 802.3 COM reference script.

COM's ``PRBS13Q`` (LFSR taps [13 12 2 1], seed [0 0 0 0 0 1 0 1 0 1 0 1 1]) was run in Octave by
the public repository tbermen/SiCoPR, whose tests pin its output: the first and last 32 symbols,
the level counts and the SHA-256 of all 4095 symbol digits. COM emits the 13 seed bits first, then
the recurrence; phy802 emits the recurrence only, so COM's stream is ``reversed(seed) + ours``.
Provenance: vectors/pma/README.md.
"""

import hashlib

import numpy as np
import pytest

from phy802.cli import main
from phy802.pma import gray_map
from phy802.pma.prbs import PATTERNS, prbs_bits, prbsq

COM_FIRST32 = "21110003102131230333200310232202"
COM_LAST32 = "22131021012303013322120300323132"
COM_LEVELS = [1014, 1002, 1014, 1065]
COM_SHA256 = "7b18e164d4d8b13c80c5db3955f86dbb1b097a24ffc937585d755f9b7b2ad81f"


def _com_stream() -> str:
    seed = PATTERNS["prbs13q"].seed
    bits = np.concatenate([np.array([int(c) for c in reversed(seed)], np.uint8), prbs_bits("prbs13q", 8191 - 13)])
    sym = gray_map(bits[:8190])  # COM pairs 8190 of its 8191 bits
    return "".join(map(str, sym.tolist()))


def test_prbs13q_default_seed_is_the_com_seed():
    assert PATTERNS["prbs13q"].seed == "0000010101011"  # S0..S12


def test_prbs13q_matches_com_reference_output():
    d = _com_stream()
    assert d[:32] == COM_FIRST32
    assert d[-32:] == COM_LAST32
    assert [d.count(str(v)) for v in range(4)] == COM_LEVELS
    assert hashlib.sha256(d.encode()).hexdigest() == COM_SHA256


def test_all_ones_seed_does_not_match_com():
    bits = np.concatenate([np.ones(13, np.uint8), prbs_bits("prbs13q", 8178, "1" * 13)])
    d = "".join(map(str, gray_map(bits[:8190]).tolist()))
    assert hashlib.sha256(d.encode()).hexdigest() != COM_SHA256


def test_prbs31q_output_is_inverted_recurrence():
    pat = PATTERNS["prbs31q"]
    assert pat.invert
    b = prbs_bits("prbs31q", 200, "1" * 31)
    # all-ones history: the recurrence gives 0 for the first 28 bits, the inverter makes them 1
    assert np.all(b[:28] == 1)


def test_state_overrides_default(capsys):
    assert main(["pma", "prbs", "--pattern", "prbs13q", "--count", "20", "--state", "1" * 13]) == 0
    out = capsys.readouterr().out.strip()
    assert out == "".join(map(str, prbsq("prbs13q", 20, "1" * 13).tolist()))
    assert out != "".join(map(str, prbsq("prbs13q", 20).tolist()))


@pytest.mark.parametrize("name", ["prbs13q", "prbs31q"])
def test_default_seed_is_used_when_none(name):
    assert np.array_equal(prbsq(name, 50), prbsq(name, 50, PATTERNS[name].seed))
