"""Every option of the hardened commands (link, sweep, trace, fec, theory, ...) has help text that states its default (the
contract: every option has help text stating its default and unit), and every action a description."""

from __future__ import annotations

import argparse
import importlib

import pytest

from phy802.cli import COMMANDS
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
