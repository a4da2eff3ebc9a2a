"""Nothing the user owns is ever replaced.  A table, one row per repro of the issue's
items 1-5 and 16: the command line, the exit code it must give, and every file of the test's own
folder must be byte-identical afterwards (devices, FIFOs, sockets and links are made inside the
test's tmp folder, never at a system path), plus the cases that must still work."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from phy802.cli import main

SENTINEL = b"the user's own bytes\n"
SWEEP = ["sweep", "--ber", "1e-3", "--code", "kp4", "--fec", "ieee", "--max-codewords", "2000",
         "--max-seconds", "1", "--workers", "1", "--no-progress"]
ENC = ["fec", "encode", "--n", "4", "--k", "2", "in.txt"]


@pytest.fixture(autouse=True)
def _state(tmp_path_factory, monkeypatch):
    # phy802's provenance key and record of written files: this test's own
    monkeypatch.setenv("PHY802_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """Two sweep output folders (seeds 1 and 2) written by phy802, copied into each test."""
    d = tmp_path_factory.mktemp("sweeps")
    old = os.getcwd()
    env = os.environ.get("PHY802_STATE_DIR")
    os.environ["PHY802_STATE_DIR"] = str(d / "state")
    try:
        os.chdir(d)
        assert main(SWEEP + ["--out", "s1"]) == 0
        assert main(SWEEP + ["--seed", "2", "--out", "s2"]) == 0
    finally:
        os.chdir(old)
        if env is None:
            os.environ.pop("PHY802_STATE_DIR", None)
        else:
            os.environ["PHY802_STATE_DIR"] = env
    return d


def _snapshot(root: Path) -> dict:
    """Every entry below ``root``: type and bytes (files), target (links), mode (others)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", p.read_bytes())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode))
    return out


def _setup(d: Path) -> None:
    (d / "in.txt").write_text("1 2\n3 4\n")
    (d / "cw.txt").write_text("1 2 3 4\n")
    (d / "user.txt").write_bytes(SENTINEL)
    (d / "thesis.tex").write_bytes(SENTINEL)
    (d / "link").symlink_to("user.txt")
    (d / "dangling").symlink_to("nowhere.txt")
    os.mkfifo(d / "fifo")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(d / "sock"))
    finally:
        s.close()
    try:  # a character device like /dev/null, but in the test's own folder (needs root, as in CI)
        os.mknod(d / "dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pass
    (d / "userdir").mkdir()
    for n in ("tradeoff.csv", "pareto.png", "result.json", "params.pt", "report.md", "sweep.csv", "notes.txt"):
        (d / "userdir" / n).write_bytes(SENTINEL)
    (d / "fit.json").write_text("{}")
    (d / "histo.csv").write_text("0,1000\n1,10\n2,1\n")


def _vectors_set(d: Path) -> None:
    """An output folder of another kind (what 'phy802 vectors generate' writes: rs/, pcs/, pma/)."""
    from phy802.runtime.output import output_set

    with output_set(d / "vecs", "vectors") as tmp:
        for sub in ("rs", "pcs", "pma"):
            (tmp / sub).mkdir()
            (tmp / sub / "kat.txt").write_bytes(SENTINEL)


def _run(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


# (id, argv, expected exit code, issue item) -- every entry of the folder must be unchanged after
REFUSED = [
    # item 1: a device, FIFO, socket or symbolic link named by --out is never replaced
    ("fec-encode-fifo", ENC + ["--out", "fifo"], 2, 1),
    ("fec-encode-socket", ENC + ["--out", "sock"], 2, 1),
    ("fec-encode-device", ENC + ["--out", "dev"], 2, 1),
    ("fec-encode-symlink", ENC + ["--out", "link"], 2, 1),
    ("fec-encode-dangling-link", ENC + ["--out", "dangling"], 2, 1),
    ("fec-decode-symlink", ["fec", "decode", "--n", "4", "--k", "2", "cw.txt", "--out", "link"], 2, 1),
    ("fec-tail-fifo", ["fec", "tail", "histo.csv", "--models", "binomial", "--out", "fifo"], 2, 1),
    ("fec-tail-device", ["fec", "tail", "histo.csv", "--models", "binomial", "--out", "dev"], 2, 1),
    ("trace-generate-fifo", ["trace", "generate", "--bits", "1e6", "--no-progress", "--out", "fifo"], 2, 1),
    ("trace-generate-symlink", ["trace", "generate", "--bits", "1e6", "--no-progress", "--out", "link"], 2, 1),
    ("pcs-tx-device", ["pcs", "tx", "--frames", "2", "--out", "dev"], 2, 1),
    ("pcs-tx-socket", ["pcs", "tx", "--frames", "2", "--out", "sock"], 2, 1),
    ("sweep-out-symlink-dir", SWEEP + ["--out", "linkdir"], 2, 1),
    # item 2: an existing file phy802 did not write, and the input itself
    ("fec-encode-existing", ENC + ["--out", "user.txt"], 2, 2),
    ("fec-encode-own-input", ENC + ["--out", "in.txt"], 2, 2),
    ("fec-tail-own-input", ["fec", "tail", "histo.csv", "--models", "binomial", "--out", "histo.csv"], 2, 2),
    ("pcs-tx-existing", ["pcs", "tx", "--frames", "2", "--out", "user.txt"], 2, 2),
    ("trace-generate-existing", ["trace", "generate", "--bits", "1e6", "--no-progress", "--out", "thesis.tex"], 2, 2),
    # item 3: folders of the user's files (tradeoff and demo refused before any work)
    ("tradeoff-userdir", ["tradeoff", "--results", "userdir", "--out", "userdir"], 2, 3),
    ("tradeoff-userdir-2", ["tradeoff", "--results", "nosuch", "--out", "userdir"], 2, 3),
    ("tradeoff-fails-leaves-no-folder", ["tradeoff", "--results", "nosuch", "--out", "newtr"], 2, 3),
    ("demo-userdir", ["demo", "--no-train", "--quick", "--out", "userdir"], 2, 3),
    ("sweep-userdir", SWEEP + ["--out", "userdir"], 2, 3),
    # item 4: an output folder of another kind
    ("sweep-merge-into-vectors", ["sweep", "--merge", "s1", "s2", "--out", "vecs", "--no-progress"], 2, 4),
    ("vectors-into-sweep", ["vectors", "generate", "--no-progress", "--out", "s1"], 2, 4),
    # item 5: forged, copied, edited or old-style markers are not trusted
    ("sweep-copied-marker", ["sweep", "--merge", "s1", "s2", "--out", "victim_copied", "--no-progress"], 2, 5),
    ("sweep-edited-marker", ["sweep", "--merge", "s1", "s2", "--out", "victim_edited", "--no-progress"], 2, 5),
    ("sweep-old-marker", ["sweep", "--merge", "s1", "s2", "--out", "victim_old", "--no-progress"], 2, 5),
    ("sweep-edited-own-file", ["sweep", "--merge", "s1", "s2", "--out", "s1_edited", "--no-progress"], 2, 5),
    ("sweep-merge-into-own-input", ["sweep", "--merge", "s1", "s2", "--out", "s1", "--no-progress"], 2, 2),
    # item 16: empty and folder-like names
    ("fec-out-empty", ENC + ["--out", ""], 2, 16),
    ("fec-out-empty-eq", ENC + ["--out="], 2, 16),
    ("sweep-out-empty", SWEEP + ["--out", ""], 2, 16),
    ("fec-out-trailing-slash", ENC + ["--out", "newd/"], 2, 16),
    ("pcs-out-trailing-slash", ["pcs", "tx", "--frames", "2", "--out", "newd/"], 2, 16),
    ("sweep-out-dot", SWEEP + ["--out", "."], 2, 16),
]

TORCH = [
    ("train-userdir", ["train", "--out", "userdir", "--steps", "1"], 2, 3),
    ("train-comm-log-existing", ["train", "--comm-log", "user.txt", "--steps", "1"], 2, 3),
    ("train-comm-log-fifo", ["train", "--comm-log", "fifo", "--steps", "1"], 2, 1),
    ("experiment-forged-marker", ["experiment", "--out", "victim_copied", "--bers", "1e-5", "--steps", "1"], 2, 5),
    ("experiment-userdir", ["experiment", "--out", "userdir", "--bers", "1e-5", "--steps", "1"], 2, 3),
]


def _arrange(tmp_path: Path, sweeps: Path) -> None:
    _setup(tmp_path)
    for s in ("s1", "s2"):
        shutil.copytree(sweeps / s, tmp_path / s)  # a copy: its marker is not valid here
    # make s1/s2 genuinely phy802's in this folder: rewrite them with the test's own key
    os.chdir(tmp_path)
    for s, seed in (("s1", "1"), ("s2", "2")):
        shutil.rmtree(tmp_path / s)
        assert main(SWEEP + ["--seed", seed, "--out", s]) == 0
    _vectors_set(tmp_path)
    (tmp_path / "linkdir").symlink_to("userdir")
    for name in ("victim_copied", "victim_edited", "victim_old"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "thesis.tex").write_bytes(SENTINEL)
    from phy802.runtime.output import output_set

    with output_set(tmp_path / "gen", "sweep") as tmp:  # a genuine set that held a thesis.tex
        (tmp / "thesis.tex").write_bytes(b"an old copy")
    shutil.copy(tmp_path / "gen" / ".phy802-output", tmp_path / "victim_copied" / ".phy802-output")
    m = json.loads((tmp_path / "s1" / ".phy802-output").read_text())
    m["files"]["thesis.tex"] = m["files"]["sweep.csv"]
    (tmp_path / "victim_edited" / ".phy802-output").write_text(json.dumps(m))
    (tmp_path / "victim_old" / ".phy802-output").write_text("thesis.tex\n")  # the pre-issue-28 plain listing
    shutil.copytree(tmp_path / "s1", tmp_path / "s1_edited", copy_function=shutil.copy2)
    (tmp_path / "s1_edited" / "sweep.csv").write_bytes(SENTINEL)


@pytest.fixture
def arranged(tmp_path, sweeps, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _arrange(tmp_path, sweeps)
    return tmp_path


@pytest.mark.parametrize("case_id,argv,code,item", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_and_nothing_changed(arranged, monkeypatch, capsys, case_id, argv, code, item):
    if "dev" in argv and not (arranged / "dev").exists():
        pytest.skip("creating a device node needs root")
    before = _snapshot(arranged)
    rc = _run(arranged, monkeypatch, argv)
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert len([ln for ln in err.splitlines() if "error" in ln]) == 1, err
    assert _snapshot(arranged) == before, f"item {item}: files changed"
    assert not (arranged / "newd").exists()


@pytest.mark.parametrize("case_id,argv,code,item", TORCH, ids=[c[0] for c in TORCH])
def test_refused_training_outputs(arranged, monkeypatch, capsys, case_id, argv, code, item):
    pytest.importorskip("torch")
    before = _snapshot(arranged)
    rc = _run(arranged, monkeypatch, argv)
    err = capsys.readouterr().err
    assert rc == code, err
    assert _snapshot(arranged) == before, f"item {item}: files changed"


def test_sweep_rerun_replaces_its_own_set_and_keeps_user_additions(arranged, monkeypatch):
    (arranged / "s1" / "notes.txt").write_bytes(SENTINEL)
    assert _run(arranged, monkeypatch, SWEEP + ["--seed", "3", "--out", "s1"]) == 0
    assert (arranged / "s1" / "notes.txt").read_bytes() == SENTINEL
    assert json.loads((arranged / "s1" / "sweep.json").read_text())["config"]["seed"] == 3
    # and a third run (the marker of the updated folder verifies)
    assert _run(arranged, monkeypatch, SWEEP + ["--seed", "4", "--out", "s1"]) == 0
    assert (arranged / "s1" / "notes.txt").read_bytes() == SENTINEL


def test_merge_into_new_folder_and_rerun_own_file(arranged, monkeypatch):
    assert _run(arranged, monkeypatch, ["sweep", "--merge", "s1", "s2", "--out", "m", "--no-progress"]) == 0
    assert _run(arranged, monkeypatch, ENC + ["--out", "new.txt"]) == 0
    first = (arranged / "new.txt").read_bytes()
    assert _run(arranged, monkeypatch, ENC + ["--out", "new.txt"]) == 0  # phy802's own file: replaced
    assert (arranged / "new.txt").read_bytes() == first


def test_force_writes_through_a_link_and_into_a_device(arranged, monkeypatch):
    assert _run(arranged, monkeypatch, ENC + ["--out", "link", "--force"]) == 0
    assert os.path.islink(arranged / "link") and (arranged / "user.txt").read_bytes() != SENTINEL
    if (arranged / "dev").exists():
        assert _run(arranged, monkeypatch, ENC + ["--out", "dev", "--force"]) == 0
        assert stat.S_ISCHR(os.lstat(arranged / "dev").st_mode)


def test_force_into_a_foreign_folder_adds_and_deletes_nothing(arranged, monkeypatch):
    assert _run(arranged, monkeypatch, ["sweep", "--merge", "s1", "s2", "--out", "victim_copied", "--force",
                                        "--no-progress"]) == 0
    assert (arranged / "victim_copied" / "thesis.tex").read_bytes() == SENTINEL
    assert (arranged / "victim_copied" / "sweep.json").is_file()


def test_long_legal_name_works(arranged, monkeypatch):
    name = "a" * 244  # legal (NAME_MAX 255) but the old temporary name '.NAME.PID.xxxxxxxx.tmp' was not
    assert _run(arranged, monkeypatch, ENC + ["--out", name]) == 0
    assert (arranged / name).is_file()
    assert _run(arranged, monkeypatch, SWEEP + ["--out", "b" * 250]) == 0
    assert not [p for p in os.listdir(arranged) if p.endswith((".tmp", ".old"))]


def test_fec_out_new_folder_name_is_not_a_file(arranged, monkeypatch):
    assert _run(arranged, monkeypatch, ENC + ["--out", "newd/"]) == 2
    assert not (arranged / "newd").exists()


def test_library_writer_refuses_too(tmp_path, monkeypatch):
    """The rule holds below the command line: a library writer never replaces a link or a user's file."""
    from phy802.runtime.output import OutputRefused
    from phy802.sweep import SweepConfig, SweepResult

    res = SweepResult(SweepConfig(points=(1e-3,), axis="ber", code=("kp4",), fec=("ieee",)), [])
    (tmp_path / "user.csv").write_bytes(SENTINEL)
    (tmp_path / "l.csv").symlink_to("user.csv")
    for name in ("user.csv", "l.csv"):
        with pytest.raises(OutputRefused):
            res.write_csv(tmp_path / name)
    assert (tmp_path / "user.csv").read_bytes() == SENTINEL and os.path.islink(tmp_path / "l.csv")
    res.write_csv(tmp_path / "ours.csv")
    res.write_csv(tmp_path / "ours.csv")  # its own file: replaced
