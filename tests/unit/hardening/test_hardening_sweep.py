"""The attack sweep (tests/hardening_sweep.py): a random sample by default, all 1,000+
attacks under ``-m slow``; each must report 0 files lost, 0 tracebacks, 0 exit 3, 0 silent accepts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import hardening_sweep  # noqa: E402


def _check(r: dict) -> None:
    assert r["generated"] >= 1000
    assert (r["files_lost"], r["tracebacks"], r["exit_3"], r["silent_accepts"]) == (0, 0, 0, 0), r["failures"][:10]


def test_attack_sweep_sample():
    _check(hardening_sweep.sweep(sample=60, seed=28))


@pytest.mark.slow
def test_attack_sweep_all():
    r = hardening_sweep.sweep()
    _check(r)
    assert r["attacks"] >= 1000
