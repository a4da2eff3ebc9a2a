"""Progress on stderr for long commands: a tqdm bar on a terminal, plain timed lines elsewhere
(a log file, a pipe, CI), nothing when disabled."""

from __future__ import annotations

import sys
from typing import Iterable

__all__ = ["progress", "LogProgress"]


class LogProgress:
    """Progress for a stderr that is not a terminal (a log file, CI, a pipe): no carriage-return
    animation and no 0% line; a plain line at most every ``interval`` seconds while work goes on,
    and one summary line when it ends (``desc: n/total done in t s``, or ``stopped at`` when it
    ended early).  Same calls as the tqdm bar: ``update``, ``write``, ``close``, a context manager
    and iteration."""

    def __init__(self, iterable=None, *, total: int | float | None = None, desc: str = "", file=None,
                 interval: float = 10.0, unit: str = "") -> None:
        import time

        self.iterable, self.desc, self.unit = iterable, desc or "progress", unit
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total = total
        self.n: int | float = 0
        self.file = file if file is not None else sys.stderr
        self.interval = float(interval)
        self._clock = time.monotonic
        self._t0 = self._last = self._clock()
        self._closed = False
        self.postfix = ""

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        """What the next progress line names as the current item (``refresh`` as in tqdm; unused)."""
        self.postfix = str(text)

    def _count(self, n: float) -> str:
        u = f" {self.unit}" if self.unit else ""

        def g(x: float) -> str:
            return f"{x:.4g}".replace("e+0", "e").replace("e+", "e")

        if self.total:
            return f"{g(n)}/{g(self.total)}{u} ({100.0 * n / self.total:.0f}%)"
        return f"{g(n)}{u}"

    def update(self, n: int | float = 1) -> None:
        self.n += n
        now = self._clock()
        if now - self._last >= self.interval and (not self.total or self.n < self.total):
            self._last = now
            tail = f" ({self.postfix})" if self.postfix else ""
            print(f"{self.desc}: {self._count(self.n)} after {now - self._t0:.0f} s{tail}", file=self.file, flush=True)

    def write(self, text: str, file=None) -> None:
        print(text, file=file if file is not None else self.file, flush=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        t = self._clock() - self._t0
        verb = "done" if not self.total or self.n >= self.total else "stopped at"
        print(f"{self.desc}: {verb} {self._count(self.n)} in {t:.1f} s", file=self.file, flush=True)
        self.postfix = ""

    def __iter__(self):
        for x in self.iterable:
            yield x
            self.update(1)
        self.close()

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Off:
    """A disabled progress bar (``enable=False``): every call does nothing."""

    def __init__(self, iterable=None) -> None:
        self.iterable = iterable
        self.n = 0

    def update(self, n=1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def write(self, text: str, file=None) -> None:  # the caller's table lines still go out
        print(text, file=file if file is not None else sys.stderr, flush=True)

    def close(self) -> None:
        pass

    def __iter__(self):
        return iter(self.iterable)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress(iterable: Iterable | None = None, *, total: int | float | None = None, desc: str = "",
             enable: bool = True, unit: str = "it", file=None, delay: float = 0.5):
    """A progress display on stderr for long commands; what it shows:

    * on a terminal: a tqdm bar that appears only after ``delay`` s (default 0.5: no 0% flash for
      quick work; ``delay=0`` for work whose steps take minutes, so the bar shows the total at once)
      and **stays** when done (``leave=True``): its last line gives the count, the time and the rate;
    * elsewhere (log file, pipe, CI): :class:`LogProgress` -- no 0% line and no ``\r`` animation;
      a plain line at most every 10 s while work goes on and one summary line at the end;
    * ``enable=False``: nothing (``write`` still prints, so a caller's table lines go out).
    """
    out = file if file is not None else sys.stderr
    if not enable:
        return _Off(iterable)
    if not (hasattr(out, "isatty") and out.isatty()):
        return LogProgress(iterable, total=total, desc=desc, file=out, unit="" if unit == "it" else unit)
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, file=out, leave=True, delay=delay, unit=unit,
                unit_scale=unit != "it")
