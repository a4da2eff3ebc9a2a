"""``phy802 vectors``: verify or regenerate the known-answer files of every block (see :mod:`phy802.vectors`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from phy802.cli._common import add_json, emit
from phy802.vectors import FileReport, default_dir, generate, verify_paths

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
    add_json(g)


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


def run(args: argparse.Namespace) -> int:
    if args.action == "generate":
        from phy802._output import progress
        from phy802.vectors import generate_steps

        from phy802._io import output_set

        out = Path(args.out)
        # the set is built beside --out and swapped in whole: an existing folder is replaced only
        # if it is empty or an earlier phy802 output set, never a folder of the user's files
        with output_set(out) as tmp, progress(total=generate_steps(), desc="vectors generate", unit="step",
                                              enable=not args.no_progress) as bar:
            rel = [p.relative_to(tmp) for p in generate(tmp, on_step=lambda name: bar.update(1))]
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
