"""``phy802 vectors``: verify or regenerate the known-answer files of every block (see :mod:`phy802.vectors`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from phy802.cli._common import add_json, emit
from phy802.vectors import FileReport, default_dir, fec_hist_sources, generate, verify_paths

__all__ = ["add_arguments", "run"]

def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{verify,generate}")
    text = "check vector files against the emulator (pass/fail table; exit 1 if any fails)"
    v = sub.add_parser("verify", help=text, description=text)
    v.add_argument("paths", nargs="*", help="files or folders (default: the repository's vectors/)")
    add_json(v)
    text = "regenerate the known-answer files into a folder"
    g = sub.add_parser("generate", help=text, description=text)
    g.add_argument("--out", required=True, help="output folder, written as a whole: it must be absent, empty or an earlier output of this command (a folder of other files is refused); required")
    g.add_argument("--no-progress", action="store_true", help="no progress display on stderr (default: shown)")
    g.add_argument("--force", action="store_true",
                   help="write into an --out folder phy802 did not write (adds/replaces the vector files, deletes nothing)")
    add_json(g)


def regenerate_fec_hist(source: Path, out: Path) -> Path:
    """Re-run the ``phy802 sweep ... --format ynl`` command named in ``source``'s
    ``generated_by`` and write the same document (``generated_by``, ``channel``, the new ``stats``)
    to ``out`` atomically.  Its ``--max-seconds`` is dropped (0: no time cap), so that the counts
    depend on the seed and the codeword cap only, never on the machine's speed."""
    import contextlib
    import io
    import json
    import shlex

    from phy802.runtime.output import atomic_write_text
    from phy802.cli import main
    from phy802.cli._hist import _dump
    from phy802.vectors import SIMULATED_PREFIX

    doc = json.loads(source.read_text(encoding="utf-8"))
    words = shlex.split(doc["generated_by"][len(SIMULATED_PREFIX):])[1:]
    if "--max-seconds" in words:
        words[words.index("--max-seconds") + 1] = "0"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*words, "--no-progress"])
    if rc != 0:
        raise ValueError(f"{source}: its generated_by command exited {rc}")
    got = json.loads(buf.getvalue())
    got = got[0] if isinstance(got, list) else got
    new = {k: v for k, v in doc.items() if k != "stats"} | {"stats": got["stats"]}
    atomic_write_text(out, _dump(new) + "\n")
    return out


def _shown(path: str) -> str:
    """``path`` as the user can type it back: relative to the working folder when under it, else as
    given; whole, never cut (a column cut from the left split names mid-word)."""
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def _table(reports: list[FileReport]) -> str:
    names = [_shown(r.path) for r in reports]
    w = max([len("file"), *map(len, names)])
    rows = [f"{'file':<{w}} {'block':<5} {'records':>7}  result"]
    for r, name in zip(reports, names):
        if r.error:
            result = f"ERROR  {r.error}"
        elif r.failures:
            result = f"FAIL   {len(r.failures)} mismatch(es): " + "; ".join(r.failures[:3])
        else:
            result = "pass"
        rows.append(f"{name:<{w}} {r.family:<5} {r.n_records:>7}  {result}")
    n_ok = sum(r.ok for r in reports)
    rows.append(f"{n_ok} passed, {len(reports) - n_ok} failed")
    return "\n".join(rows)


def _regenerate_telemetry_shapes(out: Path) -> list[Path]:
    """Re-make the simulated telemetry examples of ``vectors/fec_hist/`` (every input shape of one
    known histogram, the 64-port switch) with their deterministic generator script, into ``out``."""
    import subprocess

    script = default_dir() / "fec_hist" / "_gen" / "gen_fec_hist_vectors.py"
    if not script.is_file():  # an installed copy without the repository's generator scripts
        return []
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    r = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{script} exited {r.returncode}: {tail}")
    return sorted(set(out.iterdir()) - before)


def run(args: argparse.Namespace) -> int:
    if args.action == "generate":
        from phy802.runtime.progress import progress
        from phy802.vectors import generate_steps

        from phy802.runtime.output import output_set

        out = Path(args.out)
        # the set is built beside --out and swapped in whole: an existing folder is replaced only
        # if it is empty or an earlier phy802 output set, never a folder of the user's files
        with output_set(out, "vectors") as tmp, progress(total=generate_steps(), desc="vectors generate", unit="step",
                                              enable=not args.no_progress) as bar:
            made = generate(tmp, on_step=lambda name: bar.update(1))
            for src in fec_hist_sources():
                (tmp / "fec_hist").mkdir(parents=True, exist_ok=True)
                made.append(regenerate_fec_hist(src, tmp / "fec_hist" / src.name))
                bar.update(1)
            made.extend(_regenerate_telemetry_shapes(tmp / "fec_hist"))
            bar.update(1)
            rel = [p.relative_to(tmp) for p in made]
        written = [out / r for r in rel]
        emit(args, {"written": [str(p) for p in written]}, "\n".join(f"wrote {p}" for p in written))
        return 0
    paths = args.paths or [default_dir()]
    reports = verify_paths(paths)
    emit(args, {"ok": all(r.ok for r in reports), "files": [r.as_dict() for r in reports]}, lambda: _table(reports))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":  # pragma: no cover
    from phy802.cli import main

    sys.exit(main(["vectors", *sys.argv[1:]]))
