"""The tail fits and the switch table moved to :mod:`phy802.telemetry.fit` and
:mod:`phy802.telemetry.ports`; this old import path keeps working (every name is looked up there)."""

from phy802.runtime.moved import forward

__getattr__, __dir__ = forward(__name__, ["phy802.telemetry.fit", "phy802.telemetry.ports"])
