"""Every command in the README's ```bash blocks runs as written and exits 0 (issue 15).

The commands run in README order in one scratch folder (so ``trace info t.npz`` finds the trace the
line before wrote), with ``phy802`` = ``python -m phy802`` and ``python X.py`` = this interpreter on
the repository's ``X.py``.  The files a user brings (``capture.txt``, ``messages.txt``,
``my_dump.txt``) are made first, in the formats the README describes.  Installing (``pip``) and the
test run itself (``pytest``) are not re-run; training, the demo and the tradeoff take minutes and
are marked slow (``pytest -m slow``), and so are the ``--scheduler`` commands, run against a local
Dask cluster whose address replaces the README's placeholder.  Nothing is shortened: a command too
slow for the default run is marked slow instead.  Jobs longer than CI's budget on 2 cores
(PARSE_ONLY: the 3-seed experiment, GPT-2-small training, the benchmarks) are checked as written
by their own argument parser (benchmark scripts: ``--help``), in the default run; their code paths
run in smaller tests (tests/integration, tests/unit/vectors/test_demo.py).  One too big for a
machine (TOO_BIG) is skipped with its reason.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"

#: commands not re-run by this test (installation, the test run itself)
NOT_RUN = ("pip ", "pytest")
#: commands that take minutes: run only with ``-m slow``
SLOW = ("phy802 demo", "phy802 train", "phy802 experiment", "phy802 tradeoff", "python benchmarks/")
#: commands that need a Dask scheduler: run (slow) against a LocalCluster whose address replaces the
#: README's placeholder (``tcp://127.0.0.1:36001``, ``tcp://HOST:8786``)
CLUSTER = "--scheduler"
#: jobs longer than CI's budget (tens of minutes to hours on 2 cores): checked by their parser only
PARSE_ONLY = ("phy802 experiment", "phy802 train --parallel fsdp --model gpt2-small", "python benchmarks/")
#: commands too big for one machine, whatever the marks: (README text, reason)
TOO_BIG = (("--bits 1e15", "a 1e15-bit trace is hours of cluster work"),)
#: wall-clock limit per command (s)
TIMEOUT = {"phy802 demo": 3600, "phy802 experiment": 7200, "phy802 train": 1800, "phy802 tradeoff": 1800,
           "python benchmarks/": 1800}


def readme_commands(text: str) -> list[str]:
    """Shell commands of the ```bash blocks of ``text``: continuation lines joined, comments dropped."""
    cmds: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                cmds.append(shlex.join(words))
    return cmds


def _argv(cmd: str) -> list[str]:
    words = shlex.split(cmd)
    if words[0] == "phy802":
        return [sys.executable, "-m", "phy802", *words[1:]]
    if words[0] == "python":
        return [sys.executable, str(ROOT / words[1]), *words[2:]]
    raise AssertionError(f"README command of an unknown program: {cmd!r} (teach tests/unit/core/"
                         "test_readme_commands.py how to run it, or add it to NOT_RUN)")


def _limit(cmd: str) -> float:
    return next((t for k, t in TIMEOUT.items() if cmd.startswith(k)), 300.0)


COMMANDS = [c for c in readme_commands(README.read_text(encoding="utf-8")) if not c.startswith(NOT_RUN)]


def _params():
    out = []
    for i, c in enumerate(COMMANDS):
        slow = (c.startswith(SLOW) or CLUSTER in c) and not c.startswith(PARSE_ONLY)
        marks = [pytest.mark.slow] if slow else []
        out.append(pytest.param(c, id=f"{i:02d}-{' '.join(shlex.split(c)[:3])}", marks=marks))
    return out


def test_readme_has_the_commands_this_test_knows():
    assert len(COMMANDS) >= 15
    assert any(c.startswith("phy802 theory rare") and "--ber" not in c for c in COMMANDS)
    assert readme_commands("```bash\na --x 1 \\\n   --y 2   # note\n# only a comment\nb 'c d'\n```\n") == [
        "a --x 1 --y 2", "b 'c d'"]


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    """A scratch folder holding the files the README's user brings."""
    from phy802.fec import KP4, encode

    d = tmp_path_factory.mktemp("readme")
    rng = np.random.default_rng(15)
    msgs = rng.integers(0, 1024, size=(3, KP4.k), dtype=np.uint16)
    (d / "messages.txt").write_text("\n".join(" ".join(map(str, m)) for m in msgs) + "\n")
    cws = np.asarray(encode(KP4, msgs))
    cws[0, [3, 100, 400]] ^= np.array([1, 0x3FF, 0x155], np.uint16)  # a correctable capture
    (d / "capture.txt").write_text("\n".join(" ".join(f"{int(s):03X}" for s in w) for w in cws) + "\n")
    shutil.copy(ROOT / "vectors" / "pma" / "gray_map.txt", d / "my_dump.txt")
    return d


@pytest.fixture(scope="module")
def scheduler_address():
    """A local Dask cluster for the README's ``--scheduler`` commands (started only when one runs)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def _parses(cmd: str, user_dir: Path) -> None:
    """A PARSE_ONLY command: its own parser accepts it as written (a benchmark script: ``--help``)."""
    import importlib

    words = shlex.split(cmd)
    if words[0] == "python":
        r = subprocess.run([sys.executable, str(ROOT / words[1]), "--help"], cwd=user_dir, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"`{words[1]} --help` exited {r.returncode}\n{r.stderr[-3000:]}"
        return
    from phy802.cli import COMMANDS
    from phy802.cli._common import Parser

    module = importlib.import_module(COMMANDS[words[1]][0])
    parser = Parser(prog=f"phy802 {words[1]}")
    module.add_arguments(parser)
    parser.parse_args(words[2:])  # exits 2 (SystemExit) on a spelling the command does not take


@pytest.mark.parametrize("cmd", _params())
def test_readme_command_runs(cmd: str, user_dir: Path, request):
    for text, reason in TOO_BIG:
        if text in cmd:
            pytest.skip(reason)
    if cmd.startswith(PARSE_ONLY):
        _parses(cmd, user_dir)
        return
    if CLUSTER in cmd:
        words = shlex.split(cmd)
        words[words.index(CLUSTER) + 1] = request.getfixturevalue("scheduler_address")
        cmd = shlex.join(words)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               NUMBA_NUM_THREADS=os.environ.get("NUMBA_NUM_THREADS", "1"))
    r = subprocess.run(_argv(cmd), cwd=user_dir, env=env, capture_output=True, text=True, timeout=_limit(cmd))
    assert r.returncode == 0, f"`{cmd}` exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
