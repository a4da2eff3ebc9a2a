"""Old import paths that still work after a module moved: a module ``__getattr__`` that looks each
name (public or private) up in the module's new home(s), so ``from old.path import name`` keeps working."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

__all__ = ["forward"]


def forward(old: str, homes: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module ``old`` whose names now live in ``homes`` (first wins)."""

    def __getattr__(name: str) -> Any:
        for home in homes:
            mod = importlib.import_module(home)
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({n for home in homes for n in dir(importlib.import_module(home))})

    return __getattr__, __dir__
