"""Interrupts as a flag: the command line's signal handler records a signal (:func:`note_signal`) and
loops raise it where they choose (:func:`check_interrupt`), outside compiled kernels and held locks.

Inside :func:`deferred_interrupts` the handler only records; elsewhere it raises at once.
:class:`Terminated` (SIGTERM/SIGHUP) and :class:`Interrupted` (already dealt with, one line to
print) are ``KeyboardInterrupt``, so cleanup runs as for Ctrl-C.
"""

from __future__ import annotations

import contextlib

__all__ = ["Terminated", "Interrupted", "note_signal", "interrupt_requested", "check_interrupt",
           "deferred_interrupts", "interrupts_deferred"]


class Terminated(KeyboardInterrupt):
    """Raised by the CLI's SIGTERM/SIGHUP handler, so cleanup runs as for Ctrl-C."""


class Interrupted(KeyboardInterrupt):
    """An interrupt a command has already dealt with; ``message`` is the one line the CLI prints."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------ interrupts as a flag

_SIGNALS: list[int] = []  # signals received by this process (the CLI's handler appends)


def note_signal(signum: int) -> None:
    """Record that ``signum`` arrived (the CLI's handler calls it; loops poll :func:`interrupt_requested`)."""
    _SIGNALS.append(int(signum))


def interrupt_requested() -> int | None:
    """The first signal (SIGINT/SIGTERM/SIGHUP) received, or ``None``."""
    return _SIGNALS[0] if _SIGNALS else None


def check_interrupt() -> None:
    """Raise ``KeyboardInterrupt`` (SIGINT) or :class:`Terminated` if a signal arrived: called
    between batches, outside compiled kernels."""
    sig = interrupt_requested()
    if sig is None:
        return
    import signal as _signal

    if sig == _signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(f"terminated by signal {sig}")


_DEFERRED: list[bool] = []  # depth of :func:`deferred_interrupts` blocks in this process


@contextlib.contextmanager
def deferred_interrupts():
    """Within the block the CLI's handler only records a signal; the block's loop raises it with
    :func:`check_interrupt` at a point of its choosing.  An exception raised by the handler at an
    arbitrary bytecode could leave a lock held (the trace writer's queue: a deadlock in abort) or
    land mid-update of the generator's buffers."""
    _DEFERRED.append(True)
    try:
        yield
    finally:
        _DEFERRED.pop()


def interrupts_deferred() -> bool:
    """True inside :func:`deferred_interrupts` (the CLI's handler then records, not raises)."""
    return bool(_DEFERRED)
