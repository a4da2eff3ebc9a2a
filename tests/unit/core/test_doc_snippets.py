"""The Python snippets of README.md and docs/*.md run as scripts, and what the documented commands
write is ignored by git.

Each ```python block follows a ``<!-- run: RUNNER SCRIPT -->`` line saying how it runs (``python
SCRIPT``, ``torchrun --nproc-per-node 2 SCRIPT``); the default run compiles every block and checks
that one starting processes (a Dask cluster, a process group, a pool) does so only under
``if __name__ == "__main__":`` (the workers import the script again: without the guard each starts
its own cluster and the script crashes).  The slow run executes each block as a file, with Enter on
its standard input, from an empty folder.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:^<!-- run: (?P<run>[^\n]*?) -->\n)?^```python\n(?P<code>.*?)^```", re.M | re.S)
#: calls that start other processes: a script making them must guard them with ``__main__``
_STARTS_PROCESSES = ("LocalCluster", "init_process_group", "ProcessPoolExecutor", "multiprocessing", "mp.spawn")


def python_snippets() -> list[tuple[str, str | None, str]]:
    """``(page:line, runner or None, code)`` of every ```python block of the pages."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            line = text[: m.start("code")].count("\n")
            out.append((f"{page.relative_to(ROOT)}:{line}", m.group("run"), m.group("code")))
    return out


def _guarded(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)


def test_snippets_parse_and_say_how_they_run():
    snippets = python_snippets()
    assert snippets, "no python snippets found: the pattern no longer matches the pages"
    for where, run, code in snippets:
        tree = ast.parse(code, filename=where)  # a SyntaxError names the page and line
        assert run and "SCRIPT" in run, f"{where}: no '<!-- run: ... SCRIPT -->' line above the block"
        if any(s in code for s in _STARTS_PROCESSES):
            assert _guarded(tree), f"{where}: starts processes outside 'if __name__ == \"__main__\":'"


def test_the_dask_snippet_guards_its_cluster():
    # docs/scaling-out.md's LocalCluster snippet crashed when run as a script (no __main__ guard)
    dask = [(w, c) for w, _, c in python_snippets() if "LocalCluster" in c]
    assert dask and all(_guarded(ast.parse(c)) for _, c in dask)


@pytest.mark.slow
@pytest.mark.parametrize("where,run,code", python_snippets(), ids=[w for w, _, _ in python_snippets()])
def test_snippet_runs_as_a_script(where, run, code, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    argv = [str(script) if a == "SCRIPT" else a for a in shlex.split(run)]
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(argv, cwd=tmp_path, input="\n", capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"{where}: exit {p.returncode}\n{p.stderr[-3000:]}"


def test_what_the_documented_commands_write_is_ignored_by_git():
    sys.path.insert(0, str(Path(__file__).parent))
    from test_readme_commands import readme_commands

    outs = set()
    for page in PAGES:
        for cmd in readme_commands(page.read_text(encoding="utf-8")):
            try:
                argv = shlex.split(cmd)
            except ValueError:
                continue
            outs |= {b for a, b in zip(argv, argv[1:]) if a == "--out"}
    assert {"tradeoff_out/", "tradeoff_3tier/"} <= outs
    p = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-v", "-n"], cwd=ROOT, capture_output=True,
                       text=True, input="\n".join(sorted(outs)) + "\n")
    unignored = [line.split("\t")[-1] for line in p.stdout.splitlines() if line.startswith("::")]
    assert unignored == [], f"documented outputs not in .gitignore: {unignored}"
