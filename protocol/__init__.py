"""The bypass-FEC protocol layer on top of :mod:`phy802` (see ``protocol/SPEC.md``).
Owns the FEC modes, framing, delivery and latency model; traces and the cluster model are subpackages.

Modules (imported on demand; this package imports nothing heavy at import time):

* :mod:`protocol.modes`: FEC/delivery modes per traffic class (ieee, correct_no_indication,
  detect_only, bypass, unequal) and the unequal-protection bit masks;
* :mod:`protocol.framing`: RoCEv2 frame layout and the payload-stream / line-bit mapping;
* :mod:`protocol.delivery`: per-mode frame fates (delivered with errors, or dropped and resent);
* :mod:`protocol.latency`: added receive latency per mode and rate (``phy802 latency``);
* :mod:`protocol.source`: the ``ErrorSource`` protocol and ``ErrorChunk`` (what the layer consumes);

Two neighbours of the layer, each a subpackage of its own:

* :mod:`protocol.trace`: error traces: the file format, readers, cursors, sources, the sharded
  writer (``protocol.trace.format`` / ``sources`` / ``sharded``) and the fast and bit-exact
  generators (``protocol.trace.fast`` / ``bitexact``) (``phy802 trace``);
* :mod:`protocol.cluster`: the time side: the
  cluster (nodes, scale-up domain, NICs, fabric), NCCL's cost model as data, transport loss
  recovery, step time from communication logs, the trade-off (``phy802 collective``,
  ``phy802 tradeoff``).
"""

__all__ = ["modes", "framing", "delivery", "latency", "source", "trace", "cluster"]
