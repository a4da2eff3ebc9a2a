"""Every option of the hardened commands (link, sweep, trace, fec, theory, ...) has help text that states its default (the
contract: every option has help text stating its default and unit), and every action a description;
every command's help names only options it has."""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from phy802.cli import COMMANDS, _available
from phy802.cli._common import Parser

CHECKED = ("fec", "pcs", "pma", "link", "sweep", "theory", "latency", "trace", "vectors", "demo", "collective",
           "tradeoff")


def _parsers(name: str):
    p = Parser(prog=f"phy802 {name}")
    importlib.import_module(COMMANDS[name][0]).add_arguments(p)
    todo = [p]
    while todo:
        q = todo.pop()
        yield q
        for a in q._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo.extend(a.choices.values())


@pytest.mark.parametrize("name", CHECKED)
def test_every_option_has_help_with_default(name):
    problems = []
    for q in _parsers(name):
        subs = [a for a in q._actions if isinstance(a, argparse._SubParsersAction)]
        if q.prog.count(" ") >= 2 and not q.description:
            problems.append(f"{q.prog}: no description")
        for a in q._actions:
            if isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            where = f"{q.prog} {'/'.join(a.option_strings) or a.dest}"
            if not a.help:
                problems.append(f"{where}: no help")
                continue
            if a.option_strings and not a.required and not isinstance(a, argparse._StoreTrueAction) \
                    and "default" not in a.help.lower():
                problems.append(f"{where}: help does not state the default")
        del subs
    assert not problems, "\n".join(problems)


#: another program's options as the help texts quote them ('phy802 collective --calibrate OUT',
#: ethtool's --show-fec): not the command's own, dropped before the check below
_OTHERS = (re.compile(r"'(?:phy802|ethtool|torchrun|python)\b[^']*'"), re.compile(r"\bethtool(?: --?[a-z][\w-]*)+"))


@pytest.mark.parametrize("name", sorted(_available()))
def test_help_names_only_the_commands_own_options(name, monkeypatch):
    """Regression: tradeoff's help said '--calibrate fits it' (collective's option), experiment's
    '--ber' (it sweeps --bers), advise's '--ranks' (it has none)."""
    monkeypatch.setenv("COLUMNS", "100000")  # no wrapping: '--log-' + newline + 'flips' is one name
    problems = []
    for q in _parsers(name):
        text = q.format_help()
        for pat in _OTHERS:
            text = pat.sub("", text)
        own = {s for a in q._actions for s in a.option_strings}
        named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
        if named - own:
            problems.append(f"{q.prog} --help names {sorted(named - own)}, which it does not have")
    assert not problems, "\n".join(problems)
