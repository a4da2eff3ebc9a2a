"""Every command's --help names only options that command has: another command's option is quoted
with that command ('phy802 collective --calibrate OUT'), another program's with that program
(ethtool's --show-fec). Regression: tradeoff's help said '--calibrate fits it' (collective's option),
experiment's said '--ber' (experiment sweeps --bers), advise's said '--ranks' (advise has none)."""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from phy802.cli import Parser, _available

#: another program's options, as the help texts quote them: dropped before the check
_OTHERS = (re.compile(r"'(?:phy802|ethtool|torchrun|python)\b[^']*'"), re.compile(r"\bethtool(?: --?[a-z][\w-]*)+"))


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command as typed, parser) for every command and sub-command."""
    out = []
    for name, (module, text) in _available().items():
        p = Parser(prog=f"phy802 {name}", description=text)
        importlib.import_module(module).add_arguments(p)
        todo = [p]
        while todo:
            q = todo.pop()
            out.append((q.prog, q))
            for a in q._actions:
                if isinstance(a, argparse._SubParsersAction):
                    todo += list(a.choices.values())
    return out


_ALL = _parsers()


def test_every_command_is_checked():
    names = {n for n, _ in _ALL}
    assert {"phy802 tradeoff", "phy802 experiment", "phy802 advise", "phy802 fec tail", "phy802 trace generate"} <= names


@pytest.mark.parametrize("name,parser", _ALL, ids=[n for n, _ in _ALL])
def test_help_names_only_the_commands_own_options(name, parser, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100000")  # no line wrapping: '--log-' + newline + 'flips' is one name
    text = parser.format_help()
    for pat in _OTHERS:
        text = pat.sub("", text)
    own = {s for a in parser._actions for s in a.option_strings}
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    assert named <= own, f"{name} --help names {sorted(named - own)}, which {name} does not have"
