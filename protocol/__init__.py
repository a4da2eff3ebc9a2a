"""The bypass-FEC protocol layer on top of :mod:`phy802` (see ``protocol/SPEC.md``).

Modules (imported on demand; this package imports nothing heavy at import time):

* :mod:`protocol.modes`: FEC/delivery modes per traffic class (ieee, correct_no_indication,
  detect_only, bypass, unequal) and the unequal-protection bit masks;
* :mod:`protocol.framing`: RoCEv2 frame layout and the payload-stream / line-bit mapping;
* :mod:`protocol.delivery`: per-mode frame fates (delivered with errors, or dropped and resent);
* :mod:`protocol.latency`: added receive latency per mode and rate (``phy802 latency``);
* :mod:`protocol.source`: the ``ErrorSource`` protocol and ``ErrorChunk``;
* :mod:`protocol.tracegen`: the fast event-driven generator and the bit-exact reference link;
* :mod:`protocol.trace`: the trace file format, readers, cursors, sources (``phy802 trace``);
* :mod:`protocol.collective`: alpha-beta time of collectives per (code, mode) (``phy802 collective``);
* :mod:`protocol.steptime`: communication logs replayed into a training step time;
* :mod:`protocol.tradeoff`: step time joined with measured loss (``phy802 tradeoff``).
"""

__all__ = ["modes", "framing", "delivery", "latency", "source", "tracegen", "trace", "collective", "steptime",
           "tradeoff"]
