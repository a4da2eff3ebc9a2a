"""Every command in the ```bash blocks of the README and of every docs/*.md page runs as written and
exits 0.

Each page's commands run in page order in one scratch folder of that page (so ``trace info t.trace``
finds the trace the line before wrote; a page never relies on another page's files), with ``phy802`` =
``python -m phy802`` and ``python X.py`` = this interpreter on the repository's ``X.py``.  The files a
user brings (``capture.txt``, ``messages.txt``, ``my_dump.txt``) are made first in every folder, in
the formats the pages describe.  Installing (``pip``) and the test run itself (``pytest``) are not
re-run; training, the demo and the tradeoff take minutes and are marked slow (``pytest -m slow``),
and so are the ``--scheduler`` commands, run against a local Dask cluster whose address replaces the
page's placeholder.  Nothing is shortened: a command too slow for the default run is marked slow
instead.  Jobs longer than CI's budget on 2 cores (PARSE_ONLY: the 3-seed experiment, GPT-2-small
training, the benchmarks) are checked as written by their own argument parser (benchmark scripts:
``--help``), in the default run; their code paths run in smaller tests (tests/integration,
tests/unit/vectors/test_demo.py).  One too big for a machine (TOO_BIG) is skipped with its reason.

The README's answer (between ``<!-- demo-answer -->`` marks) quotes ``phy802 demo``: when the demo
runs here (slow), every number quoted there must appear in the report it wrote.
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
#: the pages whose commands run: the README first, then docs/*.md in name order
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: commands not re-run by this test (installation, the test run itself)
NOT_RUN = ("pip ", "pytest")
#: commands that take minutes: run only with ``-m slow``
SLOW = ("phy802 demo", "phy802 train", "phy802 experiment", "phy802 tradeoff", "python benchmarks/")
#: commands that take minutes because of one option: run only with ``-m slow`` (fec tail's example fit
#: with 100 bootstrap refits is ~35 s of CPU)
SLOW_IN = ("--bootstrap 100",)
#: commands that need a Dask scheduler: run (slow) against a LocalCluster whose address replaces the
#: README's placeholder (``tcp://127.0.0.1:36001``, ``tcp://HOST:8786``)
CLUSTER = "--scheduler"
#: jobs longer than CI's budget (tens of minutes to hours on 2 cores): checked by their parser only
#: and the commands that read such a job's output (the size sweep's folder, written only by its experiment)
PARSE_ONLY = ("phy802 experiment", "phy802 train --parallel fsdp --model gpt2-small", "python benchmarks/",
              "phy802 tradeoff --results size_out")
#: commands too big for one machine, whatever the marks: (README text, reason)
TOO_BIG = (("--bits 1e15", "a 1e15-bit trace is hours of cluster work"),)
#: wall-clock limit per command (s)
TIMEOUT = {"phy802 demo": 3600, "phy802 experiment": 7200, "phy802 train": 1800, "phy802 tradeoff": 1800,
           "python benchmarks/": 1800}


def readme_commands(text: str) -> list[str]:
    """Shell commands of the ```bash blocks of ``text``: continuation lines joined, comments dropped."""
    cmds: list[str] = []
    for block in re.findall(r"^[ \t]*```bash\n(.*?)^[ \t]*```", text, re.S | re.M):  # indented in a list too
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


def _page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


#: (page, command) in page order
PAGE_COMMANDS = [(_page_name(p), c) for p in PAGES for c in readme_commands(p.read_text(encoding="utf-8"))
                 if not c.startswith(NOT_RUN)]
COMMANDS = [c for _, c in PAGE_COMMANDS]


def _params():
    out = []
    seen: dict[str, int] = {}
    for page, c in PAGE_COMMANDS:
        i = seen[page] = seen.get(page, -1) + 1
        slow = (c.startswith(SLOW) or CLUSTER in c or any(w in c for w in SLOW_IN)) and not c.startswith(PARSE_ONLY)
        marks = [pytest.mark.slow] if slow else []
        stem = Path(page).stem
        out.append(pytest.param(page, c, id=f"{stem}-{i:02d}-{' '.join(shlex.split(c)[:3])}", marks=marks))
    return out


def test_readme_has_the_commands_this_test_knows():
    assert len(COMMANDS) >= 15
    assert any(c.startswith("phy802 theory rare") and "--ber" not in c for c in COMMANDS)
    assert len(PAGES) >= 6  # the README and its docs/ pages
    assert readme_commands("```bash\na --x 1 \\\n   --y 2   # note\n# only a comment\nb 'c d'\n```\n") == [
        "a --x 1 --y 2", "b 'c d'"]
    assert readme_commands("1. step\n\n   ```bash\n   a --x 1\n   ```\n") == ["a --x 1"]  # inside a list item


@pytest.fixture(scope="module")
def page_dirs(tmp_path_factory):
    """One scratch folder per page, made on first use, holding the files the page's user brings."""
    made: dict[str, Path] = {}

    def get(page: str) -> Path:
        if page not in made:
            made[page] = _user_files(tmp_path_factory.mktemp(Path(page).stem.replace(".", "_")))
        return made[page]

    return get


def _user_files(d: Path) -> Path:
    from phy802.fec import KP4, encode

    rng = np.random.default_rng(15)
    msgs = rng.integers(0, 1024, size=(3, KP4.k), dtype=np.uint16)
    (d / "messages.txt").write_text("\n".join(" ".join(map(str, m)) for m in msgs) + "\n")
    cws = np.asarray(encode(KP4, msgs))
    cws[0, [3, 100, 400]] ^= np.array([1, 0x3FF, 0x155], np.uint16)  # a correctable capture
    (d / "capture.txt").write_text("\n".join(" ".join(f"{int(s):03X}" for s in w) for w in cws) + "\n")
    shutil.copy(ROOT / "vectors" / "pma" / "gray_map.txt", d / "my_dump.txt")
    # docs/800g.md: Clause 177 inner-code files (120-bit messages, 128-bit blocks with one error, PAM4 samples)
    from phy802.fec import inner

    bits = rng.integers(0, 2, size=(3, 120), dtype=np.uint8)
    (d / "c177_messages.txt").write_text("\n".join(" ".join(map(str, m)) for m in bits) + "\n")
    blocks = np.asarray(inner.encode(bits)).copy()
    blocks[0, 5] ^= 1
    (d / "c177_blocks.txt").write_text("\n".join(" ".join(map(str, b)) for b in blocks) + "\n")
    levels = np.array([-3.0, -1.0, 1.0, 3.0])
    samples = levels[rng.integers(0, 4, size=(3, 64))] + rng.normal(0.0, 0.3, size=(3, 64))
    (d / "c177_samples.txt").write_text("\n".join(" ".join(f"{v:.4f}" for v in row) for row in samples) + "\n")
    # docs/cluster.md names the public nccl-tests runs kept in tests/data/nccl/
    shutil.copytree(ROOT / "tests" / "data" / "nccl", d / "tests" / "data" / "nccl")
    # the pages run from a clone's root: the example files they name (vectors/fec_hist/...) are there
    shutil.copytree(ROOT / "vectors" / "fec_hist", d / "vectors" / "fec_hist")
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


@pytest.mark.parametrize("page,cmd", _params())
def test_readme_command_runs(page: str, cmd: str, page_dirs, request):
    user_dir = page_dirs(page)
    for text, reason in TOO_BIG:
        if text in cmd:
            pytest.skip(reason)
    assert "../shared/" not in cmd, "a documented command names a path outside the repository"
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
    assert r.returncode == 0, (f"{page}: `{cmd}` exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\n"
                               f"stderr:\n{r.stderr[-3000:]}")
    if page == "README.md" and cmd.startswith("phy802 demo"):
        _answer_matches_the_report(user_dir / _demo_out(cmd) / "report.md")


ANSWER = re.compile(r"<!-- demo-answer -->(.*?)<!-- /demo-answer -->", re.S)
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\d.])")


def _demo_out(cmd: str) -> str:
    words = shlex.split(cmd)
    return words[words.index("--out") + 1] if "--out" in words else "phy802-demo"


def answer_numbers(text: str) -> list[str]:
    """The numbers the README's answer quotes (between its demo-answer marks)."""
    m = ANSWER.search(text)
    return NUMBER.findall(m.group(1)) if m else []


def _as_quoted(x: str, quoted: str) -> str:
    """The report's number ``x`` written with the digits of the README's ``quoted`` (its rounding)."""
    v = abs(float(x))
    q = quoted.lstrip("+-")
    if "e" in q:
        mant = q.split("e")[0]
        digits = len(mant.split(".")[1]) if "." in mant else 0
        return f"{v:.{digits}e}"
    digits = len(q.split(".")[1]) if "." in q else 0
    return f"{v:.{digits}f}"


def _canon(quoted: str) -> str:
    """``quoted`` without its sign, written the way :func:`_as_quoted` writes (``3e+03``, ``0.02``)."""
    q = quoted.lstrip("+-")
    return _as_quoted(q, q)


def missing_numbers(readme_text: str, report_text: str) -> list[str]:
    """The answer's numbers that are not a number of the report rounded to the digits the answer
    quotes: ``+0.02`` is ``0.02279`` to two decimals, while ``0.023`` is not ``0.02381`` (a substring
    test let that stale answer pass); signs are not compared."""
    printed = NUMBER.findall(report_text)
    missing = []
    for n in answer_numbers(readme_text):
        want = _canon(n)
        if not any(_as_quoted(x, n) == want for x in printed):
            missing.append(n)
    return missing


def _answer_matches_the_report(report: Path) -> None:
    missing = missing_numbers(README.read_text(encoding="utf-8"), report.read_text(encoding="utf-8"))
    assert not missing, f"the README's answer quotes {missing}, which {report} does not say: re-run the demo " \
                        "and copy its numbers"


def test_readme_answer_quotes_the_demo():
    # the answer is there, with numbers (checked against a fresh report when the demo runs, -m slow)
    nums = answer_numbers(README.read_text(encoding="utf-8"))
    assert len(nums) >= 4, nums
    assert answer_numbers("a <!-- demo-answer -->x 0.996x, -1.0% and 1e-5 (64 ranks)<!-- /demo-answer -->") == [
        "0.996", "-1.0", "1e-5", "64"]
    # a number is the report's rounded to the digits quoted, not the start of a longer one
    answer = "<!-- demo-answer -->penalty +0.023, 3.28e+03x, 64 ranks<!-- /demo-answer -->"
    assert missing_numbers(answer, "| 0.02381 | 3.283e+03 | 64 |") == ["+0.023"]
    assert missing_numbers(answer, "| 0.02281 | 3.276e+03 | 64 |") == []
    assert missing_numbers(answer, "(+0.023) ... 3.28e+03x, 64") == []
    assert missing_numbers(answer, "0.023 3.28e+04 3.28 64") == ["3.28e+03"]  # the exponent counts
    assert missing_numbers(answer, "0.023 3.28e+03 65") == ["64"]
    # one digit quoted: any report number that rounds to it
    short = "<!-- demo-answer -->penalty +0.02, 3e+03x<!-- /demo-answer -->"
    assert missing_numbers(short, "0.02279 3.24e+03") == []
    assert missing_numbers(short, "0.0251 3.6e+03") == ["+0.02", "3e+03"]


def test_readme_steps_are_what_ci_runs():
    # .ci/run's contract: "README step 1" and "README step 2" are the README's first two commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    steps = [ci[i + 1].strip() for i, ln in enumerate(ci) if re.match(r"# README step [12]\b", ln.strip())]
    first = readme_commands(README.read_text(encoding="utf-8"))[:2]
    assert [shlex.split(c) for c in steps] == [shlex.split(c) for c in first], (steps, first)


#: docs pages other issues are writing (linked from the README before they land)
PENDING_PAGES = {"docs/cluster.md", "docs/telemetry.md", "docs/800g.md"}


def test_readme_and_docs_links_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (page.parent / target).resolve()
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            assert path.exists() or rel in PENDING_PAGES, f"{_page_name(page)} links to {target}, which is missing"
