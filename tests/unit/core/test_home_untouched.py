"""The test session keeps out of the user's home (its state folders are its own; the guard in
tests/conftest.py fails the run when anything under $HOME changes)."""

import os
import subprocess
import sys
from pathlib import Path

from _home_guard import home_changes, home_snapshot


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def test_phy802_state_folder_is_the_sessions_own_not_the_home():
    # before, the tests' written-file records and key went to ~/.local/state/phy802
    from phy802.runtime.provenance import state_dir

    home = os.path.expanduser("~")
    assert not _inside(str(state_dir()), home)
    assert not _inside(os.environ["MPLCONFIGDIR"], home)
    code = "from phy802.runtime.output import state_dir; print(state_dir())"  # a command run by a test: the same
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(state_dir())


def test_written_file_is_recorded_in_the_sessions_state_folder(tmp_path):
    from phy802.runtime.output import atomic_write_text
    from phy802.runtime.provenance import state_dir

    atomic_write_text(tmp_path / "x.txt", "x\n")
    assert (state_dir() / "written.json").is_file()
    assert str(tmp_path / "x.txt") in (state_dir() / "written.json").read_text()


def test_home_guard_sees_a_file_created_changed_or_removed(tmp_path):
    home = tmp_path / "home"
    (home / ".cache" / "tool").mkdir(parents=True)
    (home / ".cache" / "tool" / "a").write_text("1")
    (home / "b").write_text("2")
    before = home_snapshot(str(home), set())
    assert home_changes(before, home_snapshot(str(home), set())) == []
    (home / ".cache" / "tool" / "a").write_text("11")
    (home / "b").unlink()
    (home / ".local" / "state").mkdir(parents=True)
    changes = home_changes(before, home_snapshot(str(home), set()))
    for what in (f"changed {home / '.cache' / 'tool' / 'a'}", f"removed {home / 'b'}", f"created {home / '.local'}",
                 f"created {home / '.local' / 'state'}"):
        assert what in changes
    skipped = home_snapshot(str(home), {os.path.realpath(home / ".cache")})
    assert not any(Path(p).is_relative_to(home / ".cache" / "tool") for p in skipped)
