"""The trace generators moved to :mod:`protocol.trace.config`, :mod:`protocol.trace._base`,
:mod:`protocol.trace.fast` and :mod:`protocol.trace.bitexact`; this old import path keeps working (every name is looked up there)."""

from phy802.runtime.moved import forward

__getattr__, __dir__ = forward(__name__, ["protocol.trace.config", "protocol.trace._base", "protocol.trace.fast", "protocol.trace.bitexact"])
