"""The linter and the type checker configured in pyproject.toml pass on the repository as it is.

ruff: pyflakes (F) and syntax errors (E9) over every Python file; mypy: the modules listed under
``[tool.mypy] files``.  Both come with the ``test`` extra (``pip install -e ".[test]"``)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _tool(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.fail(f"{name} is not installed: it is part of the test extra (pip install -e '.[test]')")


def test_ruff_finds_nothing():
    _tool("ruff")
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_mypy_passes_on_the_checked_modules(tmp_path):
    _tool("mypy")
    res = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "Success" in res.stdout
