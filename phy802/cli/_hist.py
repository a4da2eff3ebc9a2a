"""FEC bin histogram output shared by ``link``, ``sweep`` and ``trace info`` (issue 14).

``--bins EDGES`` chooses the bins (``"0,1-3,4-7,8-15"``; default one bin per corrected-symbol
count 0..t), ``--format ethtool-json`` prints the Linux kernel's FEC statistics structure
(``{"stats": {"corrected", "uncorrectable", "hist": [...]}}``) instead of the usual output.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_hist_arguments", "histogram_from_counts", "wants_ethtool", "print_ethtool", "format_conflict"]


def add_hist_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bins", default=None, metavar="EDGES",
                   help="FEC histogram bins, inclusive corrected-symbol ranges like '0,1-3,4-7,8-15' "
                        "(default: one bin per count 0..t)")
    p.add_argument("--format", dest="out_format", choices=("text", "json", "ethtool-json"), default=None,
                   help="output format: text (default), json (= --json), or ethtool-json: the kernel's "
                        "FEC statistics structure with the codeword histogram")


def histogram_from_counts(hist, t: int, bins_text: str | None, source: str):
    """A :class:`phy802.fec.bins.FecHistogram` of ``hist[w]`` in the ``--bins`` edges."""
    from phy802.fec.bins import FecHistogram, parse_edges

    edges = parse_edges(bins_text, t) if bins_text else None
    return FecHistogram.from_counts(hist, t, edges, source=source)


def format_conflict(args: argparse.Namespace) -> str | None:
    """The usage error of ``--json`` with a ``--format`` other than json (``--json --format text``
    asks for two outputs at once); None when fine.  ``--json --format json`` is the same request."""
    fmt = getattr(args, "out_format", None)
    if getattr(args, "json", False) and fmt not in (None, "json"):
        return f"--json and --format {fmt} contradict each other (--json is --format json); give one of them"
    return None


def wants_ethtool(args: argparse.Namespace) -> bool:
    if getattr(args, "out_format", None) == "json":
        args.json = True
    return getattr(args, "out_format", None) == "ethtool-json"


def _dump(obj, indent: str = "") -> str:
    """JSON with each histogram bin on one line (readable and still plain JSON)."""
    if isinstance(obj, dict):
        if "bin-low" in obj:
            return json.dumps(obj)
        inner = ",\n".join(f"{indent}  {json.dumps(k)}: {_dump(v, indent + '  ')}" for k, v in obj.items())
        return "{\n" + inner + "\n" + indent + "}" if obj else "{}"
    if isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        inner = ",\n".join(f"{indent}  {_dump(v, indent + '  ')}" for v in obj)
        return "[\n" + inner + "\n" + indent + "]"
    return json.dumps(obj)


def print_ethtool(obj) -> None:
    """Print the kernel structure (or a list of them) as JSON on stdout."""
    from phy802._output import to_jsonable

    sys.stdout.write(_dump(to_jsonable(obj)) + "\n")
