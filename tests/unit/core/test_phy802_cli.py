"""The `phy802` command line: every registered subcommand exists and has --help."""

import subprocess
import sys

import pytest

from phy802.cli import COMMANDS, main


def test_top_level_help_lists_every_subcommand():
    res = subprocess.run([sys.executable, "-m", "phy802.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in res.stdout, name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as ei:
        main([name, "--help"])
    assert ei.value.code == 0
    assert f"usage: phy802 {name}" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["frobnicate"])
    assert ei.value.code == 2
    assert "frobnicate" in capsys.readouterr().err
