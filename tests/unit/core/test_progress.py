"""phy802.runtime.progress.progress: no 0% flash, and a last line that stays (terminal) or a summary (logs)."""

from __future__ import annotations

import io

from phy802.runtime.progress import LogProgress, progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_log_progress_has_no_zero_line_and_ends_with_a_summary():
    f = io.StringIO()
    bar = progress(total=4, desc="points", file=f)
    assert isinstance(bar, LogProgress)
    clock = _Clock()
    bar._clock, bar._t0, bar._last = clock, 0.0, 0.0
    assert f.getvalue() == ""  # nothing printed at 0%
    clock.t = 3.0
    bar.update(1)
    assert f.getvalue() == ""  # within the interval: quiet
    clock.t = 12.0
    bar.set_postfix_str("last: kp4", refresh=True)  # tqdm's signature
    bar.update(1)
    assert f.getvalue() == "points: 2/4 (50%) after 12 s (last: kp4)\n"
    bar.write("a table row")
    clock.t = 20.0
    bar.update(2)
    bar.close()
    bar.close()  # idempotent
    lines = f.getvalue().splitlines()
    assert lines[1:] == ["a table row", "points: done 4/4 (100%) in 20.0 s"]
    assert "\r" not in f.getvalue()


def test_log_progress_says_when_it_stopped_early():
    f = io.StringIO()
    with progress(total=10, desc="runs", unit="run", file=f) as bar:
        bar.update(3)
    assert f.getvalue().startswith("runs: stopped at 3/10 run (30%) in ")


def test_terminal_bar_leaves_its_last_line():
    f = _Tty()
    bar = progress(total=3, desc="points", file=f)
    bar.delay = 0  # show at once (the real delay of 0.5 s only hides quick work)
    for _ in range(3):
        bar.update(1)
    bar.close()
    out = f.getvalue()
    assert out.endswith("\n") and "points: 100%" in out.rsplit("\r", 1)[-1]
    assert " 0%|" not in out


def test_disabled_progress_prints_nothing_but_writes():
    f = io.StringIO()
    bar = progress(total=3, desc="x", enable=False, file=f)
    bar.update(3)
    bar.set_postfix_str("y", refresh=True)
    bar.close()
    assert f.getvalue() == ""
