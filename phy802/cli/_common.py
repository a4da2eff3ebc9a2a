"""Helpers shared by the subcommand modules: common flags, validating argument types and JSON-or-text
output (work too big for the machine is refused by :mod:`phy802.runtime.resources`).

Argument types (all reject NaN/inf, non-ASCII digits, ``_`` separators and a leading ``+``, and
raise :class:`argparse.ArgumentTypeError`, which the CLI reports as one ``error:`` line, exit 2):

* :func:`float_arg` -- a finite float, optionally bounded (``lo``/``hi``, open or closed);
* :func:`probability` -- a float in (0, 1) by default (``zero_ok``/``one_ok`` widen it);
* :func:`int_arg` -- an integer with bounds;
* :func:`count_arg` -- a count that may be written as an integer-valued float (``--bits 1e10``);
* :func:`list_arg` -- a comma-separated list of any of the above (the contract: lists are
  comma-separated everywhere); :func:`choice_list` for lists of names.

:func:`emit` prints strict JSON (no NaN/Infinity) and moves every wall-clock field under one
top-level ``timing`` key, so two runs with the same ``--seed`` diff equal outside it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any, Callable, Iterable, Iterator, Sequence

from phy802.runtime.jsonable import to_jsonable

__all__ = ["add_seed", "add_json", "add_force", "emit", "Parser", "CliError",
           "float_arg", "probability", "int_arg", "uint_arg", "count_arg", "list_arg", "choice_list",
           "split_timing", "TIMING_KEYS", "scheduler_address", "require_together",
           "MAX_SEED"]

MAX_SEED = 2**63 - 1


class CliError(ValueError):
    """Bad command-line input detected by a command (reported as one ``error:`` line, exit 2)."""


class _SubParsers(argparse._SubParsersAction):
    """Sub-commands whose ``help`` line doubles as their ``--help`` description."""

    def add_parser(self, name, **kwargs):
        if kwargs.get("help") and not kwargs.get("description"):
            kwargs["description"] = kwargs["help"]
        return super().add_parser(name, **kwargs)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (no usage block), exit code 2;
    its sub-commands get their help line as description."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _SubParsers)

    def error(self, message: str):  # noqa: D401 - argparse API
        msg = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {msg} (see '{self.prog} --help')\n")


# ----------------------------------------------------------------------------- numeric types

_FLOAT_RE = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
_INT_RE = re.compile(r"-?[0-9]+\Z")


def _parse_float(text: str) -> float:
    t = text.strip()
    if not _FLOAT_RE.match(t):
        raise argparse.ArgumentTypeError(f"expected a finite decimal number (e.g. 1e-4), got {text!r}")
    v = float(t)
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is out of range (not a finite number)")
    if v == 0.0 and re.search(r"[1-9]", t.lower().split("e")[0]):
        raise argparse.ArgumentTypeError(f"{text!r} is below the smallest number a double holds (it would be read as 0)")
    return v


def _bounds_text(lo, hi, lo_open, hi_open) -> str:
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    return f"{left}{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}{right}"


def _check_range(v: float, text: str, lo, hi, lo_open: bool, hi_open: bool) -> None:
    bad = ((lo is not None and (v < lo or (lo_open and v == lo)))
           or (hi is not None and (v > hi or (hi_open and v == hi))))
    if bad:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {_bounds_text(lo, hi, lo_open, hi_open)}")


def float_arg(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
              hi_open: bool = False) -> Callable[[str], float]:
    """A finite float in the given range (closed bounds unless ``lo_open``/``hi_open``)."""

    def parse(text: str) -> float:
        v = _parse_float(text)
        _check_range(v, text, lo, hi, lo_open, hi_open)
        return v

    parse.__name__ = "number"
    return parse


def probability(*, zero_ok: bool = False, one_ok: bool = False, hi: float = 1.0) -> Callable[[str], float]:
    """A probability in (0, ``hi``) (``zero_ok``: [0, ...; ``one_ok``: ..., hi])."""
    return float_arg(0.0, hi, lo_open=not zero_ok, hi_open=not one_ok)


def int_arg(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A decimal integer in [lo, hi]."""

    def parse(text: str) -> int:
        t = text.strip()
        if not _INT_RE.match(t):
            raise argparse.ArgumentTypeError(f"expected a decimal integer, got {text!r}")
        v = int(t)
        _check_range(v, text, lo, hi, False, False)
        return v

    parse.__name__ = "integer"
    return parse


_UINT_RE = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]+)\Z")


def uint_arg(hi: int, lo: int = 0) -> Callable[[str], int]:
    """A non-negative integer in [lo, hi] written in decimal or ``0x`` hex (register values, seeds)."""

    def parse(text: str) -> int:
        t = text.strip()
        if not _UINT_RE.match(t):
            raise argparse.ArgumentTypeError(f"expected a decimal or 0x-hex integer, got {text!r}")
        v = int(t, 0) if t[:2].lower() == "0x" else int(t, 10)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} is outside {lo:#x}..{hi:#x}")
        return v

    parse.__name__ = "integer"
    return parse


def count_arg(lo: int = 0, hi: int | None = None) -> Callable[[str], int]:
    """A count in [lo, hi] written as an integer or an integer-valued float (``1e10``, ``2.5e3``)."""

    def parse(text: str) -> int:
        t = text.strip()
        if _INT_RE.match(t):
            v = int(t)
        else:
            f = _parse_float(t)
            if f != math.floor(f):
                raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
            v = int(f)
        _check_range(v, text, lo, hi, False, False)
        return v

    parse.__name__ = "count"
    return parse


_ADDRESS_RE = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):\d{1,5}\Z")


def scheduler_address(text: str) -> str:
    """argparse type of ``--scheduler``: a Dask address ``[PROTOCOL://]HOST:PORT`` (``tcp://host:8786``),
    checked here so that a typo is a usage error naming the option, not Dask's bare 'missing port
    number in address' from deep inside the run."""
    t = str(text).strip()
    if re.fullmatch(r"inproc://\S+", t):  # a scheduler in this process (LocalCluster(processes=False))
        return t
    if not _ADDRESS_RE.match(t) or not 0 < int(t.rsplit(":", 1)[1]) < 65536:
        raise argparse.ArgumentTypeError(f"expected a Dask scheduler address [PROTOCOL://]HOST:PORT such as "
                                         f"tcp://host:8786, got {text!r}")
    return t


def list_arg(item: Callable[[str], Any], *, min_len: int = 1, max_len: int = 1000,
             unique: bool = True) -> Callable[[str], tuple]:
    """A comma-separated list (``1e-5,1e-4``) of ``item`` values, as a tuple."""

    def parse(text: str) -> tuple:
        parts = text.split(",")
        if any(not p.strip() for p in parts):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list without empty items, got {text!r}")
        vals = []
        for p in parts:
            try:
                vals.append(item(p.strip()))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"item {p.strip()!r}: {exc}") from None
        if not min_len <= len(vals) <= max_len:
            raise argparse.ArgumentTypeError(f"expected {min_len}..{max_len} items, got {len(vals)}")
        if unique and len(set(vals)) != len(vals):
            raise argparse.ArgumentTypeError(f"items must not repeat, got {text!r}")
        return tuple(vals)

    parse.__name__ = "list"
    return parse


def choice_list(choices: Sequence[str], **kw) -> Callable[[str], tuple]:
    """A comma-separated list of names from ``choices``."""

    def one(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return text

    return list_arg(one, **kw)


# ----------------------------------------------------------------------------- common flags

def add_seed(parser: argparse.ArgumentParser, default: int = 1) -> None:
    parser.add_argument("--seed", type=int_arg(0, MAX_SEED), default=default,
                        help=f"random seed, an integer >= 0 (default {default})")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout (wall-clock fields under 'timing')")


def add_force(parser: argparse.ArgumentParser, what: str = "work beyond the safety limits") -> None:
    parser.add_argument("--force", action="store_true", help=f"allow {what} (default: refuse)")


def require_together(option: str, needs: str, given: bool, needed: bool) -> None:
    """Raise :class:`CliError` when ``option`` was given (``given``) without ``needs`` (``needed``),
    e.g. ``require_together("--fault-ber", "--fault-lane", a.fault_ber is not None, a.fault_lane is not None)``."""
    if given and not needed:
        raise CliError(f"{option} only makes sense with {needs}")


# ----------------------------------------------------------------------------- output

# wall-clock fields: moved under the top-level ``timing`` key by :func:`emit`
TIMING_KEYS = frozenset({"seconds", "wall_s", "wall_seconds", "elapsed_s", "gbps", "gb_per_s",
                         "duration_s", "timestamp", "created", "started", "finished", "steps_s"})


def _is_timing_key(key: str) -> bool:
    return key in TIMING_KEYS or key.endswith(("_wall_s", "_seconds_wall"))


def split_timing(doc: Any, prefix: str = "") -> tuple[Any, dict]:
    """``(doc without wall-clock fields, {dotted.path: value})`` of a JSON-ready document."""
    timing: dict = {}
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if _is_timing_key(str(k)):
                timing[path] = v
                continue
            out[k], sub = split_timing(v, path)
            timing.update(sub)
        return out, timing
    if isinstance(doc, list):
        out_l = []
        for i, v in enumerate(doc):
            o, sub = split_timing(v, f"{prefix}[{i}]")
            out_l.append(o)
            timing.update(sub)
        return out_l, timing
    return doc, timing


def json_document(obj: Any, timing: dict | None = None) -> dict | Any:
    """The document :func:`emit` prints: JSON-ready, wall-clock fields under ``timing``."""
    doc = to_jsonable(obj)
    if not isinstance(doc, dict):
        return doc
    own = doc.pop("timing", None)
    doc, found = split_timing(doc)
    tim = {}
    if isinstance(own, dict):
        tim.update(own)
    tim.update(found)
    if timing:
        tim.update(to_jsonable(timing))
    doc["timing"] = tim
    return doc


def emit(args: argparse.Namespace, obj: Any, text: Callable[[], str] | str, *, timing: dict | None = None) -> None:
    """Print ``obj`` as strict JSON when ``--json`` was given, else the human text."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(json_document(obj, timing), indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write((text() if callable(text) else text).rstrip("\n") + "\n")


MAX_LINE = 1 << 20  # characters; no phy802 text format has lines near this (a codeword is < 5 KiB)


def bounded_lines(stream, name: str, max_line: int = MAX_LINE) -> Iterable[str]:
    """The lines of a text ``stream``, each at most ``max_line`` characters: ``/dev/zero`` or a
    file without newlines raises ``ValueError`` naming it instead of growing memory until it runs
    out."""
    lineno = 0
    while True:
        raw = stream.readline(max_line + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > max_line:
            raise ValueError(f"{name}:{lineno}: line longer than {max_line} characters (binary data or no "
                             "line breaks): not a text file of this format")
        yield raw


def stdin_text(name: str = "<stdin>"):
    """Standard input as strict UTF-8 text (``sys.stdin`` may decode with surrogateescape under a C
    locale); ValueError naming it when it is closed (``CMD <&-``: Python's ``sys.stdin`` is None)."""
    if sys.stdin is None:
        raise ValueError(f"{name}: standard input is closed; give a FILE, or pipe or redirect the input in")
    if hasattr(sys.stdin, "buffer"):
        import io

        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict")
    return sys.stdin


def read_text_lines(path: str, *, stdin_name: str = "<stdin>") -> Iterable[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file or ``-`` (stdin); a binary or non-UTF-8 file
    raises ``ValueError`` naming it."""
    if path == "-":
        stream, name = stdin_text(stdin_name), stdin_name
    else:
        stream, name = open(path, encoding="utf-8"), path
    try:
        lineno = 0
        try:
            for lineno, raw in enumerate(bounded_lines(stream, name), start=1):
                if "\x00" in raw:
                    raise ValueError(f"{name}:{lineno}: binary data (NUL byte): not a text file")
                yield lineno, raw
        except UnicodeDecodeError as exc:
            raise ValueError(f"{name}:{lineno + 1}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    finally:
        if path != "-":
            stream.close()


#: whitespace/control characters other than ASCII space, tab, CR, LF
_BAD_SEP = re.compile(r"[^\S \t\r\n]|[\x00-\x08\x0e-\x1f\x7f]")


def token_lines(stream: Iterable[str], name: str, kind: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, tokens)`` of each line holding tokens (``#`` starts a comment), for the
    text inputs of ``fec encode/decode``; ValueError naming ``name`` and the line for non-UTF-8
    text, a NUL byte, or a separator other than ASCII space/tab (``kind`` says what was expected)."""
    lineno = 0
    it = iter(stream)
    while True:
        try:
            raw = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise ValueError(f"{name}:{lineno + 1}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                             f"expected {kind}") from None
        lineno += 1
        if "\x00" in raw:
            raise ValueError(f"{name}:{lineno}: binary data (NUL byte): expected {kind} as text")
        text = raw.split("#", 1)[0]
        bad = _BAD_SEP.search(text)
        if bad:  # str.split() would take U+00A0, U+001F, U+000B, ... for separators
            raise ValueError(f"{name}:{lineno}: character U+{ord(bad.group()):04X} is not allowed "
                             f"(separate {kind} with ASCII spaces or tabs)")
        toks = text.split()
        if toks:
            yield lineno, toks
