"""JSON-ready values: numpy scalars and arrays, dataclasses, tuples and paths as plain JSON types,
non-finite floats as ``null`` (strict JSON)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["to_jsonable"]


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
