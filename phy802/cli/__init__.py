"""The ``phy802`` command-line tool.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their subcommand runs, so ``phy802`` works without torch and the
layering (``phy802`` never imports ``protocol``/``integration`` at import time) is kept.
Library errors are exceptions; here they become exit codes: 0 ok, 1 check failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

__all__ = ["main", "COMMANDS"]

# name -> (module, one-line help). Order is the order shown by ``phy802 --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "fec": ("phy802.cli.fec", "Reed-Solomon RS(544,514)/RS(528,514) encode and decode of codeword files"),
    "pcs": ("phy802.cli.pcs", "Clause 119 PCS: frames to PCS lanes and back"),
    "pma": ("phy802.cli.pma", "Clause 120 PMA: PAM4 Gray map, precoder, test patterns"),
    "link": ("phy802.cli.link", "run the composed link once and print per-lane counters like a PHY"),
    "sweep": ("phy802.cli.sweep", "BER/FER sweep over SNR or pre-FEC BER and FEC modes"),
    "theory": ("phy802.cli.theory", "closed-form PAM4 / RS error rates"),
    "latency": ("phy802.cli.latency", "added latency per FEC mode and rate (protocol layer)"),
    "collective": ("phy802.cli.collective", "modelled time of a collective over 400G/200G links per FEC mode"),
    "trace": ("phy802.cli.trace", "generate and inspect payload error traces"),
    "train": ("phy802.cli.train", "train a small GPT with link errors replayed into DDP or PP"),
    "experiment": ("phy802.cli.experiment", "sweep BER x {DDP, PP} x guard and report"),
    "vectors": ("phy802.cli.vectors", "verify or regenerate the known-answer test vectors"),
    "tradeoff": ("phy802.cli.tradeoff", "step time vs loss penalty per FEC mode and BER: time-to-target-loss"),
    "demo": ("phy802.cli.demo", "the main job: vectors, BER sweep, latency, trace, training, report"),
}


class CliError(Exception):
    """Bad command-line input; reported as ``phy802: error: ...`` with exit code 2."""


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
    p = argparse.ArgumentParser(
        prog="phy802",
        description="Bit-exact IEEE 802.3bs 400GBASE-R/200GBASE-R emulator, bypass-FEC layer and "
        "torch.distributed error replay.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="subcommands:\n" + "\n".join(f"  {n:<11} {t}" for n, (_, t) in commands.items())
        + "\n\nRun 'phy802 COMMAND --help' for each command's options.",
    )
    from phy802 import __version__

    p.add_argument("--version", action="version", version=f"phy802 {__version__}")
    p.add_argument("command", nargs="?", choices=list(commands), metavar="COMMAND")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``phy802`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _available()
    top = _top_parser(commands)
    if not argv or argv[0].startswith("-"):
        top.parse_args(argv)  # handles --help / --version
        top.print_help()
        return 2
    name = argv[0]
    if name not in commands:
        top.error(f"unknown command {name!r} (choose from {', '.join(commands)})")
    module = importlib.import_module(commands[name][0])
    parser = argparse.ArgumentParser(prog=f"phy802 {name}", description=commands[name][1])
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except (CliError, ValueError, OSError) as exc:
        print(f"phy802 {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"phy802 {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
