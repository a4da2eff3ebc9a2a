"""Output helpers shared by libraries and the command line: JSON-ready values and progress bars.

They live below both :mod:`phy802` libraries and :mod:`phy802.cli`, so no library imports the
command-line face.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

import numpy as np

__all__ = ["to_jsonable", "progress"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, dataclasses, tuples and paths to plain JSON types.

    Non-finite floats (NaN, +-inf), also inside arrays, become ``None``: the output is strict JSON.
    """
    import dataclasses
    import math
    import os

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "fc":
            return to_jsonable(obj.tolist())
        return obj.tolist()
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", enable: bool = True):
    """A tqdm progress bar on stderr (disabled when ``enable`` is False or stderr is not a tty... unless forced)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, disable=not enable, file=sys.stderr, leave=False)
