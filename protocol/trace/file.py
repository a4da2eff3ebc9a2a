"""The trace file, its sources and sharded generation moved to :mod:`protocol.trace.format`,
:mod:`protocol.trace.sources` and :mod:`protocol.trace.sharded`; this old import path keeps working (every name is looked up there)."""

from phy802.runtime.moved import forward

__getattr__, __dir__ = forward(__name__, ["protocol.trace.format", "protocol.trace.sources", "protocol.trace.sharded"])
