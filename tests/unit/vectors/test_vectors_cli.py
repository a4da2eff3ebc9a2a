"""`phy802 vectors verify|generate`: every checked-in file passes, bad files are reported, not fatal."""

import json
import shutil
from pathlib import Path


from phy802.cli import main
from phy802.vectors import default_dir, family_of, verify_paths

VEC = default_dir()


def test_all_checked_in_vectors_pass(capsys):
    assert main(["vectors", "verify"]) == 0
    out = capsys.readouterr().out
    n_files = len([p for p in VEC.rglob("*.txt") if "_gen" not in p.parts])
    assert n_files >= 14
    assert f"{n_files} passed, 0 failed" in out


def test_families_cover_every_block():
    fams = {family_of(p) for p in VEC.rglob("*.txt") if "_gen" not in p.parts}
    assert fams == {"fec", "pcs", "pma", "c177"}


def _corrupt(src: Path, dst: Path, old: str, new: str) -> Path:
    text = src.read_text()
    assert old in text
    dst.write_text(text.replace(old, new, 1))
    return dst


def test_mismatch_and_malformed_files_are_reported_and_others_still_checked(tmp_path, capsys):
    good = tmp_path / "good.txt"
    shutil.copy(VEC / "pma" / "gray_map.txt", good)
    # a wrong expected value: verification fails (a mismatch, not a parse error)
    wrong = _corrupt(VEC / "pma" / "gray_map.txt", tmp_path / "wrong.txt", "bits=11 symbol=2", "bits=11 symbol=3")
    # malformed: a non-hex payload in a 66b block of the transcoder file
    badhex = _corrupt(VEC / "pcs" / "transcode257.txt", tmp_path / "badhex.txt", "blocks=01:", "blocks=01:ZZ")
    # malformed: a codeword with one symbol too few
    rs_lines = (VEC / "rs" / "kp4.txt").read_text().splitlines()
    i = next(j for j, ln in enumerate(rs_lines) if ln.startswith("codeword:"))
    rs_lines[i] = rs_lines[i].rsplit(" ", 1)[0]
    short = tmp_path / "short.txt"
    short.write_text("\n".join(rs_lines) + "\n")
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("# header\nkind=bogus x=1\n")
    rc = main(["vectors", "verify", "--json", str(good), str(wrong), str(badhex), str(short), str(unknown)])
    assert rc == 1
    res = {Path(f["path"]).name: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert res["good.txt"]["ok"]
    assert not res["wrong.txt"]["ok"] and res["wrong.txt"]["error"] is None and res["wrong.txt"]["failures"]
    assert "wrong.txt:" in res["wrong.txt"]["failures"][0]
    assert "badhex.txt:" in res["badhex.txt"]["error"]
    assert f"short.txt:{i + 1}" in res["short.txt"]["error"]
    assert "unknown.txt:2" in res["unknown.txt"]["error"] and "bogus" in res["unknown.txt"]["error"]


def test_missing_path_is_a_usage_error(tmp_path, capsys):
    assert main(["vectors", "verify", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt" in capsys.readouterr().err


def test_generate_reproduces_checked_in_records(tmp_path):
    from phy802.cli import main as cli

    assert cli(["vectors", "generate", "--out", str(tmp_path)]) == 0
    reports = verify_paths([tmp_path])
    assert reports and all(r.ok for r in reports)
    for new in tmp_path.rglob("*.txt"):
        old = VEC / new.relative_to(tmp_path)
        assert old.exists(), f"generate wrote {new.name}, which is not checked in"
        strip = lambda p: [ln for ln in p.read_text().splitlines() if ln and not ln.startswith("#")]  # noqa: E731
        assert strip(new) == strip(old), f"{old} differs from its regenerated copy"
    # the simulated FEC histograms are regenerated too, byte for byte (their command has no time cap)
    hist = sorted(p.name for p in (VEC / "fec_hist").glob("*.json"))
    assert hist and sorted(p.name for p in (tmp_path / "fec_hist").glob("*.json")) == hist
    for name in hist:
        assert (tmp_path / "fec_hist" / name).read_bytes() == (VEC / "fec_hist" / name).read_bytes(), name


def test_generate_never_replaces_a_folder_of_other_files(tmp_path, capsys):
    from phy802.cli import main as cli

    mine = tmp_path / "notes.txt"
    mine.write_text("the user's own file\n")
    assert cli(["vectors", "generate", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and mine.read_text() == "the user's own file\n"
