"""The one vocabulary of every command that simulates or replays a link.

* ``--code {kp4,kr4,rs272,none}`` (default ``kp4``): the RS code on the line.
* ``--fec {ieee,correct_no_indication,detect_only,bypass,unequal,llr}`` (default ``ieee``): the
  receive mode.
* Lists are comma-separated in one argument (``--fec ieee,bypass``).
* Old spellings (``--fec kp4|kr4|detect|none``) fail with exit 2 and name the new spelling,
  e.g. ``--fec kp4 is now --code kp4 --fec ieee``.

:func:`add_code_fec` adds both options to a parser; the argparse ``type=`` functions do the
checking, so a bad value is a usage error (exit 2) before anything runs.
"""

from __future__ import annotations

import argparse

__all__ = ["CODES", "MODES", "OLD_FEC", "add_code_fec", "code_name", "fec_name", "code_list", "fec_list",
           "old_fec_message", "float_list", "rs_code_name", "code_fec_conflict"]

CODES: tuple[str, ...] = ("kp4", "kr4", "rs272", "none")
MODES: tuple[str, ...] = ("ieee", "correct_no_indication", "detect_only", "bypass", "unequal", "llr")
#: old ``--fec`` values -> (code, mode) of the new spelling
OLD_FEC: dict[str, tuple[str, str]] = {
    "kp4": ("kp4", "ieee"), "kr4": ("kr4", "ieee"), "detect": ("kp4", "detect_only"), "none": ("none", "bypass"),
    "rs272": ("rs272", "ieee"),
}
_HYPHEN = {"detect-only": "detect_only", "correct-no-indication": "correct_no_indication"}

CODE_HELP = ("RS code on the line: kp4 = RS(544,514) t=15, kr4 = RS(528,514) t=7, rs272 = low-latency "
             "RS(272,257+1) t=7, none = no FEC sublayer")
FEC_HELP = ("receive mode: ieee (correct + indicate), correct_no_indication, detect_only, bypass, "
            "unequal (sign/exponent protected), llr (as ieee, bad frames resent by link-level retry)")


def old_fec_message(value: str) -> str:
    """``"--fec kp4 is now --code kp4 --fec ieee"``."""
    code, mode = OLD_FEC[value]
    if value == "none":
        return "--fec none is now --code none (no FEC sublayer), or --fec bypass"
    return f"--fec {value} is now --code {code} --fec {mode}"


def code_name(text: str) -> str:
    """argparse type of ``--code``."""
    v = str(text).strip().lower()
    if v not in CODES:
        raise argparse.ArgumentTypeError(f"unknown code {text!r}; choose from {', '.join(CODES)}")
    return v


def fec_name(text: str) -> str:
    """argparse type of ``--fec`` (one receive mode)."""
    v = str(text).strip().lower()
    v = _HYPHEN.get(v, v)
    if v in OLD_FEC:
        raise argparse.ArgumentTypeError(old_fec_message(v))
    if v not in MODES:
        raise argparse.ArgumentTypeError(f"unknown receive mode {text!r}; choose from {', '.join(MODES)}")
    return v


def _split(text: str, one, what: str) -> tuple[str, ...]:
    parts = [x for x in str(text).split(",")]
    if any(not x.strip() for x in parts):
        raise argparse.ArgumentTypeError(f"{what}: empty item in {text!r} (comma-separated, no spaces)")
    out = tuple(one(x) for x in parts)
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{what}: repeated value in {text!r}")
    return out


def rs_code_name(text: str) -> str:
    """argparse type of ``--code`` where an RS code is needed (``none`` is refused)."""
    v = code_name(text)
    if v == "none":
        raise argparse.ArgumentTypeError("--code none has no RS code to compute; choose kp4, kr4 or rs272")
    return v


def float_list(text: str) -> tuple[float, ...]:
    """argparse type of a comma-separated number list: ``"1e-4,2e-4"`` -> ``(1e-4, 2e-4)``."""
    parts = str(text).split(",")
    try:
        return tuple(float(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers (no spaces), got {text!r}") from None


def code_list(text: str) -> tuple[str, ...]:
    """argparse type of a comma-separated ``--code`` list."""
    return _split(text, code_name, "--code")


def fec_list(text: str) -> tuple[str, ...]:
    """argparse type of a comma-separated ``--fec`` list."""
    return _split(text, fec_name, "--fec")


class _Given(argparse.Action):
    """Store the value and note that the option was typed (a default is not a choice)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"_{self.dest}_given", True)


def code_fec_conflict(args: argparse.Namespace) -> str | None:
    """The usage error of a ``--fec MODE`` typed with ``--code none`` only (no FEC sublayer: nothing
    is decoded, every mode is ``bypass``, so the mode would be silently ignored); None when fine."""
    if not getattr(args, "_fec_given", False):
        return None
    codes = args.code if isinstance(args.code, tuple) else (args.code,)
    fecs = args.fec if isinstance(args.fec, tuple) else (args.fec,)
    bad = [f for f in fecs if f != "bypass"]
    if codes and all(c == "none" for c in codes) and bad:
        return (f"--code none --fec {','.join(fecs)}: --code none has no FEC sublayer, so nothing is decoded and "
                f"--fec {bad[0]} would be ignored; drop --fec (or choose --code kp4/kr4/rs272)")
    return None


def add_code_fec(p: argparse.ArgumentParser, *, multi: bool = False, code_default="kp4",
                 fec_default="ieee") -> None:
    """Add ``--code`` and ``--fec`` (one value each, or comma lists with ``multi``); a typed
    ``--fec`` other than bypass with ``--code none`` is refused (:func:`code_fec_conflict`)."""
    if multi:
        cd = tuple(code_default) if not isinstance(code_default, str) else (code_default,)
        fd = tuple(fec_default) if not isinstance(fec_default, str) else (fec_default,)
        p.add_argument("--code", type=code_list, default=cd, metavar="CODE[,CODE...]",
                       help=f"{CODE_HELP}; comma list (default {','.join(cd)})")
        p.add_argument("--fec", type=fec_list, default=fd, metavar="MODE[,MODE...]", action=_Given,
                       help=f"{FEC_HELP}; comma list, every code x mode is run (default {','.join(fd)})")
    else:
        p.add_argument("--code", type=code_name, default=code_default, metavar="CODE",
                       help=f"{CODE_HELP} (default {code_default})")
        p.add_argument("--fec", type=fec_name, default=fec_default, metavar="MODE", action=_Given,
                       help=f"{FEC_HELP} (default {fec_default})")
