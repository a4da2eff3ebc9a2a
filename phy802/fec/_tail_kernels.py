"""The tail-fit kernels moved to :mod:`phy802.telemetry._kernels`; this old import path keeps working (every name is looked up there)."""

from phy802.runtime.moved import forward

__getattr__, __dir__ = forward(__name__, ["phy802.telemetry._kernels"])
