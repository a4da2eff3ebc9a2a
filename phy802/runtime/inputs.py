"""Bounded, strict reading of input files: a regular file of at most a given size (never a device,
FIFO or folder), UTF-8 text, and JSON without NaN/Infinity or deep nesting; every refusal names
the file."""

from __future__ import annotations

import json
import os

__all__ = ["read_input_bytes", "read_stdin_bytes", "read_input_text", "read_json_file", "json_depth_ok", "check_stream_input",
           "MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 64  # no phy802 JSON format nests deeper than a handful of levels


def json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """False when brackets outside strings nest deeper than ``limit`` (cheap: regex-free scan of
    the bracket characters only)."""
    import re

    depth = 0
    # strings removed first (escapes included), so brackets inside them do not count
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', "", text):
        if ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def check_stream_input(path: str | os.PathLike, *, what: str = "file", error=ValueError) -> None:
    """Refuse, naming ``path``, what a reader that streams its input (and so takes a FIFO or a device,
    its reads bounded by the caller) still cannot read: a folder, and a socket, which ``open()`` reports
    as 'No such device or address' (ENXIO), as if the file were missing. Anything ``os.stat`` cannot
    reach (no such file, a link loop) is left to ``open()``, whose message names it."""
    import stat as _stat

    p = os.fspath(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return
    if _stat.S_ISDIR(mode):
        raise error(f"{p}: is a folder, expected a {what}")
    if _stat.S_ISSOCK(mode):
        raise error(f"{p}: is a socket, not a {what} (a FIFO or standard input is read)")


def read_input_bytes(path: str | os.PathLike, limit: int, *, what: str = "file", error=ValueError) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; a FIFO, device, socket or folder
    (``/dev/zero``, ...) and a larger file raise ``error`` naming the path."""
    import stat as _stat

    p = os.fspath(path)
    st = os.stat(p)
    if _stat.S_ISDIR(st.st_mode):
        raise error(f"{p}: is a folder, expected a {what}")
    if not _stat.S_ISREG(st.st_mode):
        raise error(f"{p}: is not a regular file (a device, FIFO or socket); expected a {what}")
    if st.st_size > limit:
        raise error(f"{p}: {st.st_size} bytes is too large for a {what} (limit {limit})")
    with open(p, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise error(f"{p}: more than {limit} bytes, too large for a {what}")
    return data


def read_stdin_bytes(limit: int, *, what: str = "input", error=ValueError, name: str = "<stdin>") -> bytes:
    """At most ``limit`` bytes of standard input (a file named ``-``); ``error`` naming ``name`` when
    stdin is closed (``CMD <&-``: Python's ``sys.stdin`` is None) or holds more than ``limit`` bytes
    (``< /dev/zero``, a pipe that does not end)."""
    import sys

    if sys.stdin is None:
        raise error(f"{name}: standard input is closed; give a FILE, or pipe or redirect the input in")
    src = getattr(sys.stdin, "buffer", None)
    data = src.read(limit + 1) if src is not None else sys.stdin.read(limit + 1).encode("utf-8")
    if len(data) > limit:
        raise error(f"{name}: more than {limit} bytes, too large for a {what} (a device or a stream that does "
                    "not end?)")
    return data


def read_input_text(path: str | os.PathLike, limit: int, *, what: str = "file", error=ValueError) -> str:
    """:func:`read_input_bytes` decoded as strict UTF-8 (``error`` naming the file and byte otherwise)."""
    p = os.fspath(path)
    data = read_input_bytes(p, limit, what=what, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_json_file(path: str | os.PathLike, limit: int, *, what: str = "JSON file", error=ValueError):
    """Parse the JSON file ``path`` strictly: a regular file of at most ``limit`` bytes, UTF-8, no
    NaN/Infinity constants, nesting at most :data:`MAX_JSON_DEPTH` deep; else ``error`` naming it."""
    p = os.fspath(path)
    text = read_input_text(p, limit, what=what, error=error)
    if not json_depth_ok(text):
        raise error(f"{p}: JSON nested deeper than {MAX_JSON_DEPTH} levels; not a {what}")

    def constant(c):
        raise error(f"{p}: non-JSON constant {c}")

    try:
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise error(f"{p}: not a {what} ({exc})") from None
    except RecursionError:
        raise error(f"{p}: JSON nested too deeply; not a {what}") from None
