"""FEC bin histogram output shared by ``link``, ``sweep`` and ``trace info``.

``--bins EDGES`` chooses the bins (``"0,1-3,4-7,8-15"``; default one bin per corrected-symbol
count 0..t). Instead of the usual output, ``--format ynl`` prints the kernel's YNL structure
(``{"stats": {"corrected", "uncorrectable", "hist": [{"bin-low", ...}]}}``, as ``ynl --do fec-get``)
and ``--format ethtool-json`` what ``ethtool --json --include-statistics --show-fec`` prints (a list
of devices, ``statistics.hist[]`` of ``bin_low``/``bin_high``/``total``). The names mean the same
shapes as ``phy802 fec tail --format`` reads.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_hist_arguments", "histogram_from_counts", "hist_format", "print_histograms", "format_conflict"]

#: the histogram documents ``--format`` writes (their names as ``phy802 fec tail --format`` reads them)
HIST_FORMATS = ("ynl", "ethtool-json")


def add_hist_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bins", default=None, metavar="EDGES",
                   help="FEC histogram bins, inclusive corrected-symbol ranges like '0,1-3,4-7,8-15' "
                        "(default: one bin per count 0..t)")
    p.add_argument("--format", dest="out_format", choices=("text", "json") + HIST_FORMATS, default=None,
                   help="output format: text (default), json (= --json), or the codeword histogram alone as "
                        "ynl (the kernel's YNL fec-get structure, bin-low/bin-high/bin-val) or ethtool-json "
                        "(what 'ethtool --json --show-fec' prints: a list of devices, bin_low/bin_high/total)")


def histogram_from_counts(hist, t: int, bins_text: str | None, source: str):
    """A :class:`phy802.telemetry.bins.FecHistogram` of ``hist[w]`` in the ``--bins`` edges."""
    from phy802.telemetry.bins import FecHistogram, parse_edges

    edges = parse_edges(bins_text, t) if bins_text else None
    return FecHistogram.from_counts(hist, t, edges, source=source)


def format_conflict(args: argparse.Namespace) -> str | None:
    """The usage error of ``--json`` with a ``--format`` other than json (``--json --format text``
    asks for two outputs at once); None when fine.  ``--json --format json`` is the same request."""
    fmt = getattr(args, "out_format", None)
    if getattr(args, "json", False) and fmt not in (None, "json"):
        return f"--json and --format {fmt} contradict each other (--json is --format json); give one of them"
    return None


def hist_format(args: argparse.Namespace) -> str | None:
    """The histogram document ``--format`` asks for (one of :data:`HIST_FORMATS`), or None for the usual
    output (``--format json`` sets ``--json``)."""
    fmt = getattr(args, "out_format", None)
    if fmt == "json":
        args.json = True
    return fmt if fmt in HIST_FORMATS else None


def _dump(obj, indent: str = "") -> str:
    """JSON with each histogram bin on one line (readable and still plain JSON)."""
    if isinstance(obj, dict):
        if "bin-low" in obj or "bin_low" in obj:
            return json.dumps(obj)
        inner = ",\n".join(f"{indent}  {json.dumps(k)}: {_dump(v, indent + '  ')}" for k, v in obj.items())
        return "{\n" + inner + "\n" + indent + "}" if obj else "{}"
    if isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        inner = ",\n".join(f"{indent}  {_dump(v, indent + '  ')}" for v in obj)
        return "[\n" + inner + "\n" + indent + "]"
    return json.dumps(obj)


def print_histograms(fmt: str, items: list, single: bool = True) -> None:
    """Print ``items`` = ``[(name, FecHistogram, extra keys)]`` as ``fmt`` on stdout: ``ynl``, one reply
    ``{**extra, "stats": ...}`` (a list of them unless ``single``); ``ethtool-json``, a list of devices
    named ``name``, as ethtool prints even one."""
    from phy802.runtime.jsonable import to_jsonable

    if fmt == "ynl":
        docs = [{**extra, **h.to_ynl()} for _, h, extra in items]
        obj = docs[0] if single and len(docs) == 1 else docs
    elif fmt == "ethtool-json":
        obj = [h.to_ethtool_json(name) for name, h, _ in items]
    else:
        raise ValueError(f"unknown histogram format {fmt!r} (choose from {', '.join(HIST_FORMATS)})")
    sys.stdout.write(_dump(to_jsonable(obj)) + "\n")
