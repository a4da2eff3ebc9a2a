"""The FEC bin histograms moved to :mod:`phy802.telemetry.bins` (the one-port readers to
:mod:`phy802.telemetry.parsers`); this old import path keeps working (every name is looked up there)."""

from phy802.runtime.moved import forward

__getattr__, __dir__ = forward(__name__, ["phy802.telemetry.bins", "phy802.telemetry.parsers"])
