"""Work too big for this machine refused up front: estimated memory, disk and run time checked against
what is free (:func:`check_budget`, :func:`check_disk`), run time measured on a short run (:func:`calibrated_seconds`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

__all__ = ["WorkRefused", "available_memory", "check_budget", "check_disk", "calibrated_seconds"]


class WorkRefused(ValueError):
    """Work estimated to need more memory, disk or time than allowed; the message gives the estimate
    and says that ``--force`` runs it anyway (the command line reports it as one ``error:`` line, exit 2)."""


def _human(n: float, unit: str) -> str:
    for p in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if abs(n) < 1024 or p == "Ei":
            return f"{n:.3g} {p}{unit}"
        n /= 1024
    return f"{n:.3g} {unit}"  # pragma: no cover


def available_memory() -> int:
    """Bytes of memory free now (the figure :func:`check_budget` allows 80% of)."""
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 << 30


def check_budget(what: str, *, memory_bytes: float = 0.0, seconds: float = 0.0, force: bool = False,
                 max_memory: float | None = None, max_seconds: float = 3600.0, hint: str = "") -> None:
    """Refuse work estimated to need more memory than is free (or ``max_memory``) or more than
    ``max_seconds`` of run time, unless ``force``; raises :class:`WorkRefused` with the estimate."""
    if force:
        return
    limit = available_memory() * 0.8 if max_memory is None else max_memory
    tail = f"; {hint}" if hint else ""
    if memory_bytes > limit:
        raise WorkRefused(f"{what} needs about {_human(memory_bytes, 'B')} of memory, more than the "
                       f"{_human(limit, 'B')} available{tail} (--force to try anyway)")
    if seconds > max_seconds:
        raise WorkRefused(f"{what} would take about {seconds / 3600:.3g} h (limit {max_seconds / 3600:.3g} h){tail} "
                       f"(--force to run anyway)")


def calibrated_seconds(total: float, run_small: Callable[[int], Any], small: int, *, assumed_rate: float,
                       max_seconds: float = 3600.0) -> float:
    """Run time of ``total`` units (bits, pairs, ...) estimated from a short measured run of the
    same kernel on this machine (constants were 4x-20x optimistic).

    ``run_small(n)`` does ``n`` units of the real work.  When even ``assumed_rate`` (an upper
    bound of the speed) gives over ``max_seconds``, or under 1/100 of it, no measurement is needed
    (refused / clearly fine either way); otherwise ``run_small`` runs once for ``small / 4`` units (loading the compiled
    kernels) and is then timed over ``4 small`` units."""
    import time

    optimistic = total / assumed_rate
    if optimistic > max_seconds or optimistic < max_seconds / 100.0:
        return optimistic
    run_small(max(1, small // 4))  # compile / load the kernels outside the timing
    t1 = time.perf_counter()
    run_small(4 * small)
    t2 = time.perf_counter()
    # the whole timed run, its fixed cost included: a difference of two short runs came out near 0
    # on a loaded machine (a stall in the shorter one) and let an hours-long run through
    rate = 4 * small / max(t2 - t1, 1e-9)
    return max(optimistic, total / rate)


def check_disk(path: str | Path, nbytes: float, what: str, *, force: bool = False, hint: str = "") -> None:
    """Refuse to write an estimated ``nbytes`` under ``path`` when the file system has less free
    (keeping 10% spare), unless ``force``."""
    if force:
        return
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    free = shutil.disk_usage(p).free
    if nbytes > 0.9 * free:
        tail = f"; {hint}" if hint else ""
        raise WorkRefused(f"{what} needs about {_human(nbytes, 'B')} of disk, {_human(free, 'B')} is free at "
                       f"{p}{tail} (--force to try anyway)")
