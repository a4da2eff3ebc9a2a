"""FEC histogram telemetry: what a switch or NIC reports about its RS decoder, read and extrapolated.
Owns the paste readers (:mod:`.parsers`), the bin histogram (:mod:`.bins`), the channel-model tail fits
(:mod:`.fit`, kernels in :mod:`._kernels`) and the per-port table of ``phy802 fec tail`` (:mod:`.ports`).

    from phy802.telemetry import read_telemetry, fit_ports, rank_ports
    tel = read_telemetry("switch.txt")                 # every port of an ethtool / SONiC / YNL / CSV paste
    rows = rank_ports(tel, fit_ports(tel, "kp4"))      # worst port first

The codec itself (RS encode/decode) is :mod:`phy802.fec`.
"""

from .bins import FecBin, FecHistogram, default_edges, parse_edges
from .fit import CODES, MODELS, ModelFit, TailFit, fit_histogram, generator_channel, model_pmf, read_fit, sample_histogram
from .parsers import (
    FORMATS,
    Port,
    Telemetry,
    TelemetryError,
    difference,
    parse_histogram_text,
    parse_telemetry,
    read_histogram,
    read_telemetry,
)
from .ports import fit_ports, ports_csv, ports_text, rank_ports

__all__ = [
    "FecBin", "FecHistogram", "default_edges", "parse_edges",
    "CODES", "MODELS", "ModelFit", "TailFit", "fit_histogram", "generator_channel", "model_pmf", "read_fit",
    "sample_histogram",
    "FORMATS", "Port", "Telemetry", "TelemetryError", "difference", "parse_histogram_text", "parse_telemetry",
    "read_histogram", "read_telemetry",
    "fit_ports", "ports_csv", "ports_text", "rank_ports",
]
