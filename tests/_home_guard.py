"""What the test session checks in the user's home: a list of everything under it, and what
changed between two lists (used by ``tests/conftest.py``)."""

import os


def home_snapshot(home: str, skip: set[str]) -> dict[str, tuple[int, int, int]]:
    """``path -> (mtime_ns, size, mode)`` of every entry under ``home`` (links not followed)."""
    out: dict[str, tuple[int, int, int]] = {}
    stack = [home]
    while stack:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[e.path] = (st.st_mtime_ns, st.st_size, st.st_mode)
                if e.is_dir(follow_symlinks=False) and os.path.realpath(e.path) not in skip:
                    stack.append(e.path)
    return out


def home_changes(before: dict, after: dict) -> list[str]:
    """The paths created, removed or changed between two :func:`home_snapshot` lists."""
    return sorted([f"created {p}" for p in after.keys() - before.keys()]
                  + [f"removed {p}" for p in before.keys() - after.keys()]
                  + [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]])
