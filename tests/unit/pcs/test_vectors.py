"""Replay of the known-answer files in vectors/pcs and the parser's error reporting."""

from pathlib import Path

import numpy as np
import pytest

from phy802.fec import KP4, is_codeword
from phy802.pcs.alignment import AM_400G_OCTETS, am_symbols
from phy802.pcs.vectors import VectorError, read_vectors, verify_dir, verify_file, write_vectors

VEC = Path(__file__).resolve().parents[3] / "vectors" / "pcs"


def test_replay_all_files():
    results = verify_dir(VEC)
    names = {Path(r.path).name for r in results}
    assert {"transcode257.txt", "scrambler.txt", "am_400g.txt", "am_200g.txt", "pair_400g_idle.txt"} <= names
    for r in results:
        assert r.ok, r.failures


def test_pair_files_are_codewords_with_marker_prefix():
    for f in sorted(VEC.glob("pair_*.txt")):
        recs = read_vectors(f)
        pair = [r for r in recs if r.kind == "codeword_pair"][0]
        cw = np.array([[int(x) for x in pair.fields[k].split(",")] for k in ("codewordA", "codewordB")])
        h = 8 if pair.fields["rate"] == "400G" else 4
        assert (cw[:, :h] == 666).all() and (cw[:, h:2 * h] == 402).all()
        assert np.asarray(is_codeword(KP4, cw)).all()
        lanes = {int(r.fields["lane"]): [int(x) for x in r.fields["symbols"].split(",")] for r in recs if r.kind == "pair_lane"}
        assert len(lanes) == 2 * h
        if pair.fields["rate"] == "400G":
            assert lanes[0][:12] == [666, 402, 866, 406, 437, 630, 29, 452, 755, 905, 239, 50]
            assert all(lanes[L][:12] == am_symbols(AM_400G_OCTETS)[L].tolist() for L in range(16))


def test_regeneration_is_deterministic(tmp_path):
    write_vectors(tmp_path)
    for f in sorted(VEC.glob("*.txt")):
        assert (tmp_path / f.name).read_text() == f.read_text(), f.name


def test_mismatch_and_parse_errors(tmp_path):
    src = (VEC / "am_400g.txt").read_text().splitlines()
    i = next(k for k, ln in enumerate(src) if ln.startswith("kind=am_symbols") and "lane=3 " in ln)
    bad = list(src)
    bad[i] = bad[i].replace("symbols=666,", "symbols=667,")
    p = tmp_path / "am.txt"
    p.write_text("\n".join(bad) + "\n")
    r = verify_file(p)
    assert not r.ok and r.failures[0].startswith(f"{p}:{i + 1}: lane 3 marker symbol differs first at index 0")
    p.write_text("kind=am_symbols rate=400G lane=3\n")
    with pytest.raises(VectorError, match=rf"{p}:1: kind=am_symbols record lacks field\(s\) symbols"):
        read_vectors(p)
    p.write_text("# c\n\nkind=scramble seed=0x0 input=01x output=010\n")
    with pytest.raises(VectorError, match=rf"{p}:3: field input='01x'"):
        verify_file(p)
    p.write_text("kind=pair_lane rate=400G input=idle scrambler_seed=0 prbs9_seed=0x1FF status=9 lane=0 symbols=1\n")
    with pytest.raises(VectorError, match=rf"{p}:1: field status=9: out of range"):
        verify_file(p)
    p.write_text("kind=bogus\n")
    with pytest.raises(VectorError, match="kind='bogus'"):
        read_vectors(p)
