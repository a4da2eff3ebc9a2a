"""Helpers shared by the subcommand modules: common flags and JSON-or-text output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from phy802._output import progress, to_jsonable

__all__ = ["add_seed", "add_json", "emit", "to_jsonable", "progress"]


def add_seed(parser: argparse.ArgumentParser, default: int = 1) -> None:
    parser.add_argument("--seed", type=int, default=default, help=f"random seed (default {default})")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")



def emit(args: argparse.Namespace, obj: Any, text: Callable[[], str] | str) -> None:
    """Print ``obj`` as JSON when ``--json`` was given, else the human text."""
    if getattr(args, "json", False):
        json.dump(to_jsonable(obj), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write((text() if callable(text) else text).rstrip("\n") + "\n")
