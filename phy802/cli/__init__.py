"""The ``phy802`` command-line tool: argument parsing, errors (``phy802 CMD: error: ...``, exit 2) and
one module per subcommand over library calls; the only code that imports upward, lazily.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their subcommand runs, so ``phy802`` works without torch and the
layering (``phy802`` never imports ``protocol``/``integration`` at import time) is kept.
Library errors are exceptions; here they become exit codes (documented in README.md):

* 0 -- ok;
* 1 -- a check failed (a vector mismatch, a link that never locked, ...);
* 2 -- bad input: a bad option, a malformed/missing/unreadable input file, or work refused as too big
  for the machine; one line ``phy802 CMD: error: ...`` on stderr naming the file/field/value;
* 3 -- an internal error (a bug): one line saying so and how to report it; ``PHY802_DEBUG=1``
  prints the traceback too;
* 130 / 143 / 129 -- interrupted by Ctrl-C / terminated by SIGTERM / SIGHUP (temporary files are
  removed; an earlier output is left exactly as it was).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import threading
import traceback
import zipfile
from typing import Sequence

from phy802.cli._common import CliError, Parser, emit
from phy802.runtime.workers import JobFailed

__all__ = ["main", "COMMANDS", "CliError", "EXIT_OK", "EXIT_CHECK_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERNAL",
           "BAD_INPUT_ERRORS"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
REPORT_TO = "the phy802 issue tracker"

# Exceptions that mean "the input (options, files, environment) is bad", not "phy802 has a bug".
# Library errors are ValueError/TypeError subclasses (VectorError, LanesFileError, LockError,
# TraceError, ...) or OSError; a truncated/forged .npz raises BadZipFile/EOFError; numbers beyond
# what a field can hold raise OverflowError.
BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, TypeError, OSError, OverflowError, zipfile.BadZipFile, EOFError)

# name -> (module, one-line help). Order is the order shown by ``phy802 --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "fec": ("phy802.cli.fec", "Reed-Solomon encode/decode of codeword files; 'fec tail' fits a FEC bin histogram and extrapolates FER"),
    "pcs": ("phy802.cli.pcs", "Clause 119 PCS: frames to PCS lanes and back"),
    "pma": ("phy802.cli.pma", "Clause 120 PMA: PAM4 Gray map, precoder, test patterns"),
    "link": ("phy802.cli.link", "run the composed link once and print per-lane counters like a PHY"),
    "sweep": ("phy802.cli.sweep", "BER/FER sweep over SNR or pre-FEC BER and FEC modes"),
    "theory": ("phy802.cli.theory", "closed-form PAM4 / RS error rates"),
    "latency": ("phy802.cli.latency", "added latency per FEC mode and rate (protocol layer)"),
    "collective": ("phy802.cli.collective", "modelled time of a collective over 400G/200G links per FEC mode"),
    "trace": ("phy802.cli.trace", "generate and inspect payload error traces"),
    "train": ("phy802.cli.train", "train a GPT with link errors replayed into DDP, FSDP2 or a pipeline"),
    "experiment": ("phy802.cli.experiment", "sweep BER x parallelism x guard over seeds and report"),
    "vectors": ("phy802.cli.vectors", "verify or regenerate the known-answer test vectors"),
    "tradeoff": ("phy802.cli.tradeoff", "step time vs loss penalty per FEC mode and BER: time-to-target-loss"),
    "advise": ("phy802.cli.advise", "keep FEC or not, link by link: FEC histograms + cluster/nccl-tests + workload"),
    "demo": ("phy802.cli.demo", "the main job: vectors, BER sweep, latency, trace, training, report"),
}


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and exc.args:
        text = f"missing key {exc.args[0]!r}"
    return " ".join(text.split())


def _debug() -> bool:
    return os.environ.get("PHY802_DEBUG", "") not in ("", "0")


_HANDLED = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
_STATE = {"raised_at": None, "redeliver": False}


def _in_compiled_call(frame) -> bool:
    """True when the handler runs inside a Python callback of a Numba dispatcher: an exception raised
    there comes out as ``SystemError: CPUDispatcher(...) returned a result with an exception set``."""
    depth = 0
    while frame is not None and depth < 64:
        name = frame.f_code.co_filename.replace("\\", "/")
        if "/numba/" in name or "/llvmlite/" in name:
            return True
        frame = frame.f_back
        depth += 1
    return False


def _handler(signum, frame):
    """SIGINT -> ``KeyboardInterrupt``, SIGTERM/SIGHUP -> :class:`phy802.runtime.interrupts.Terminated`, raised only
    at a point where Python can unwind: never inside a compiled kernel's dispatcher (the signal is
    re-delivered a moment later), and not again while the first one's cleanup runs (10 s)."""
    import time

    from phy802.runtime.interrupts import Terminated, interrupts_deferred, note_signal

    redelivered, _STATE["redeliver"] = _STATE["redeliver"], False
    if not redelivered:
        note_signal(signum)
    if interrupts_deferred():
        return  # the running loop raises it between its chunks (phy802.runtime.interrupts.deferred_interrupts)
    if _in_compiled_call(frame):
        _STATE["redeliver"] = True
        t = threading.Timer(0.05, os.kill, (os.getpid(), signum))
        t.daemon = True
        t.start()
        return
    now = time.monotonic()
    if _STATE["raised_at"] is not None and now - _STATE["raised_at"] < 10.0:
        return  # cleanup of the first interrupt is running: let it finish
    _STATE["raised_at"] = now
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(f"terminated by signal {signum}")


def _install_sigterm():
    """SIGINT/SIGTERM/SIGHUP -> :func:`_handler` (so that every ``finally`` and the atomic writers'
    cleanup run, outside compiled kernels); returns the previous handlers (``None`` if not installed)."""
    try:
        previous = {s: signal.getsignal(s) for s in _HANDLED}
        for s in _HANDLED:
            if s == signal.SIGINT and previous[s] is not signal.default_int_handler:
                continue  # SIGINT ignored by whoever started us (nohup, a shell's '&'): keep it so
            if s != signal.SIGINT and previous[s] is not signal.SIG_DFL:
                continue
            signal.signal(s, _handler)
        return previous
    except ValueError:  # not the main thread
        return None


def _signal_of(exc: BaseException) -> int | None:
    """The signal an interrupt came from (the first one received), ``None`` if not an interrupt."""
    from phy802.runtime.interrupts import Terminated, interrupt_requested

    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            sig = interrupt_requested()
            if sig is not None:
                return sig
            return signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
        e = e.__cause__ or e.__context__
    return None


def _empty_path_option(argv: Sequence[str]) -> str | None:
    """An output/input path option given as '' (``--out ''``), which would otherwise mean '.'."""
    for i, a in enumerate(argv):
        if a.startswith("--") and "=" in a:
            opt, val = a.split("=", 1)
            if val == "" and opt in _PATH_OPTIONS:
                return opt
        elif a in _PATH_OPTIONS and i + 1 < len(argv) and argv[i + 1] == "":
            return a
    return None


_PATH_OPTIONS = ("--out", "--comm-log", "--results", "--from-fit", "--trace", "--merge")
# option attributes that name what a command writes (every other existing path on its command
# line is one of its inputs, which it never writes over)
_OUTPUT_ATTRS = ("out", "comm_log")
_WRITES_COMM_LOG = ("train", "experiment", "demo")


def _inputs_of(name: str, args: argparse.Namespace) -> list[str]:
    outs = {"out", "calibrate"} | ({"comm_log"} if name in _WRITES_COMM_LOG else set())  # options naming an output
    found: list[str] = []
    for key, v in vars(args).items():
        if key in outs:
            continue
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, (str, os.PathLike)) and os.fspath(x) not in ("", "-"):
                try:
                    if os.path.exists(x):
                        found.append(os.fspath(x))
                except (OSError, ValueError):
                    pass
    return found


def _stdout_closed() -> bool:
    if sys.stdout is None:  # started with fd 1 closed ('>&-')
        return True
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture): fine
        return False
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _suppress():
    import contextlib

    return contextlib.suppress(ValueError, TypeError, OSError)


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, text) in COMMANDS.items():
        if importlib.util.find_spec(module.rsplit(".", 1)[0]) is None:
            continue
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except ModuleNotFoundError:
            continue
        found[name] = (module, text)
    return found


def _top_parser(commands: dict[str, tuple[str, str]]) -> argparse.ArgumentParser:
    p = Parser(
        prog="phy802",
        description="Bit-exact IEEE 802.3bs 400GBASE-R/200GBASE-R emulator, bypass-FEC layer and "
        "torch.distributed error replay.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="subcommands:\n" + "\n".join(f"  {n:<11} {t}" for n, (_, t) in commands.items())
        + "\n\nRun 'phy802 COMMAND --help' for each command's options.\n\nexit codes: 0 ok, 1 a check "
        "failed, 2 bad input (one 'error:' line), 3 internal error (a bug; PHY802_DEBUG=1 shows the "
        "traceback), 130/143 interrupted/terminated.",
    )
    from phy802 import __version__

    p.add_argument("--version", action="version", version=f"phy802 {__version__}")
    p.add_argument("command", nargs="?", choices=list(commands), metavar="COMMAND")
    return p


def _command_prog(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The chosen (sub)command's name as typed, e.g. ``phy802 fec tail``: the prefix of every error line,
    the same one argparse's own errors of that sub-parser carry."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if not isinstance(chosen, str) or chosen not in subs[0].choices:
            return parser.prog
        parser = subs[0].choices[chosen]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``phy802`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _available()
    top = _top_parser(commands)
    if not argv or argv[0].startswith("-"):
        top.parse_args(argv)  # handles --help / --version
        top.print_help()
        return EXIT_BAD_INPUT
    name = argv[0]
    if name not in commands:
        top.error(f"unknown command {name!r} (choose from {', '.join(commands)})")
    prog = f"phy802 {name}"
    try:
        module = importlib.import_module(commands[name][0])
    except ImportError as exc:
        print(f"{prog}: error: needs a package that is not installed ({_one_line(exc)}); "
              f"install the extras: pip install 'phy802[all]'", file=sys.stderr)
        return EXIT_BAD_INPUT
    parser = Parser(prog=prog, description=commands[name][1])
    module.add_arguments(parser)
    empty = _empty_path_option(argv[1:])
    if empty:
        parser.error(f"{empty} '': an empty path names no file or folder")
    args = parser.parse_args(argv[1:])
    prog = _command_prog(parser, args)  # "phy802 fec tail": errors name the command as typed
    why = _refused_before_run(args)
    if why:
        print(f"{prog}: error: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _run(module, args, name, prog)


def _refused_before_run(args: argparse.Namespace) -> str | None:
    """Why the parsed command may not start (options that contradict each other, a closed stdout), or None."""
    from phy802.cli._hist import format_conflict
    from phy802.cli._vocab import code_fec_conflict

    for conflict in (code_fec_conflict(args), format_conflict(args)):  # options that contradict
        if conflict:
            return conflict
    if _stdout_closed():
        return "standard output is closed; run it with stdout open (or redirected to a file)"
    return None


def _run(module, args: argparse.Namespace, name: str, prog: str) -> int:
    """``module.run(args)`` under the command's output policy and signal handlers; every way it can
    end becomes an exit code and at most one line on stderr (a traceback only with PHY802_DEBUG)."""
    previous = _install_sigterm()
    from phy802.runtime.output import output_policy

    try:
        with output_policy(force=bool(getattr(args, "force", False)), inputs=_inputs_of(name, args)):
            return int(module.run(args) or 0)
    except KeyboardInterrupt as exc:
        return _interrupted(prog, exc)
    except BrokenPipeError:
        # stdout closed early (e.g. '| head'): not an error of ours; silence the flush at exit
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except JobFailed as exc:
        return _job_failed(prog, args, exc)
    except MemoryError:
        return _bad_input(prog, "out of memory; ask for less work (fewer pairs/frames/bits/points)")
    except BAD_INPUT_ERRORS as exc:
        return _bad_input(prog, _one_line(exc))
    except RecursionError:
        return _bad_input(prog, "input nested too deeply to read (a JSON or other nested document beyond any "
                                "phy802 format)")
    except Exception as exc:  # a bug: say so, one line, and how to report it
        return _internal_error(prog, exc)
    finally:
        if previous is not None:
            for s, h in previous.items():
                with _suppress():
                    signal.signal(s, h)


def _interrupted(prog: str, exc: KeyboardInterrupt) -> int:
    """Ctrl-C / SIGTERM / SIGHUP (or an interrupt the command already reported): one line, 128 + signal."""
    from phy802.runtime.interrupts import Interrupted

    if _debug():
        traceback.print_exc()
    sig = _signal_of(exc) or signal.SIGINT
    if isinstance(exc, Interrupted):
        print(f"{prog}: {exc.message}", file=sys.stderr)
    elif sig == signal.SIGINT:
        print(f"{prog}: interrupted; partial output removed, earlier output left as it was", file=sys.stderr)
    else:
        print(f"{prog}: terminated by signal {sig}; partial output removed, earlier output left as it was",
              file=sys.stderr)
    return 128 + int(sig)


def _job_failed(prog: str, args: argparse.Namespace, exc: JobFailed) -> int:
    """A job that ran and failed (a worker process died, raised or overran its deadline) under any
    command that runs one (tradeoff's small experiment, the demo's training; train and experiment
    say it themselves): the cause on stderr and exit 1 -- not 'internal error', exit 3 -- and with
    ``--json`` a document saying so."""
    if getattr(args, "json", False):  # the same document shape as every --json output
        emit(args, {"failed": True, "failure": str(exc)}, "")
    print(f"{prog}: {_one_line(exc)}", file=sys.stderr)
    return EXIT_CHECK_FAILED


def _bad_input(prog: str, message: str) -> int:
    """Called while handling the exception: its one ``error:`` line (and traceback with PHY802_DEBUG), exit 2."""
    if _debug():
        traceback.print_exc()
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _internal_error(prog: str, exc: Exception) -> int:
    """An exception no command should raise: an interrupt that surfaced through a compiled call
    (128 + signal), else a bug in phy802 -- one line saying where, and how to report it (exit 3)."""
    sig = _signal_of(exc)  # an interrupt that surfaced through a compiled call (SystemError)
    if sig is not None:
        print(f"{prog}: {'interrupted' if sig == signal.SIGINT else f'terminated by signal {sig}'}; "
              "partial output removed, earlier output left as it was", file=sys.stderr)
        return 128 + int(sig)
    if _debug():
        traceback.print_exc()
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}"
    print(f"{prog}: internal error (a bug in phy802, not in your input): {type(exc).__name__}: "
          f"{_one_line(exc)}{where}; please report it to {REPORT_TO} with the command line and the "
          f"traceback that PHY802_DEBUG=1 {prog} ... prints", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
