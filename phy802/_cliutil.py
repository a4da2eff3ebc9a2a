"""Small helpers shared by the subcommand modules (common flags, JSON output, progress bars)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["add_seed", "add_json", "emit", "to_jsonable", "progress"]


def add_seed(parser: argparse.ArgumentParser, default: int = 1) -> None:
    parser.add_argument("--seed", type=int, default=default, help=f"random seed (default {default})")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, dataclasses and tuples to plain JSON types."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def emit(args: argparse.Namespace, obj: Any, text: Callable[[], str] | str) -> None:
    """Print ``obj`` as JSON when ``--json`` was given, else the human text."""
    if getattr(args, "json", False):
        json.dump(to_jsonable(obj), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write((text() if callable(text) else text).rstrip("\n") + "\n")


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", enable: bool = True):
    """A tqdm progress bar on stderr (disabled when ``enable`` is False or stderr is not a tty... unless forced)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, disable=not enable, file=sys.stderr, leave=False)
