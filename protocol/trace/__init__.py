"""Error traces: the file format, its readers and sources, and the generators that write them.

A neighbour of the bypass-FEC layer (:mod:`protocol`), not part of it: the layer consumes an
:class:`~protocol.source.ErrorSource`; this package is one way to produce one, from a ``.trace``
file or live.

* :mod:`protocol.trace.file`: the trace file format (``TRACE_FORMAT.md`` beside this file),
  :class:`TraceWriter`, :class:`TraceReader`, :class:`TraceCursor`, the sources and the sharded
  :func:`generate_trace` (``phy802 trace``);
* :mod:`protocol.trace.generator`: the fast event-driven generator and the bit-exact reference
  link of the PCS payload stream (:class:`FastGenerator`, :class:`BitExactGenerator`);
* :mod:`protocol.trace.inner`: traces of 800G / 1.6T links with the Clause 177 inner code and
  KP4, from :class:`phy802.link.concat.ConcatLink` (``phy802 trace generate --rate 800G``), and
  their live source :class:`ConcatLiveSource` (the same batches, no file);
* ``_kernels`` (chunk encoding/decoding) and ``_gen_kernels`` (the generator's hot loops): private
  Numba kernels.

``from protocol.trace import TraceReader, generate_trace, ...`` is the public face; the names
below are re-exported from the two modules.
"""

from .file import (
    FORMAT,
    TRACE_SUFFIX,
    VERSION,
    LiveSource,
    LiveWindow,
    TraceChunk,
    TraceCursor,
    TraceError,
    TraceReader,
    TraceSource,
    TraceWriter,
    encode_chunk,
    generate_trace,
    open_source,
    shard_layout,
    shard_seed,
)
from .inner import ConcatLiveSource
from .generator import BitExactGenerator, FastGenerator, GeneratorConfig, TraceStats
from ..source import DetailedErrorSource, ErrorChunk, ErrorSource

__all__ = [
    "FORMAT",
    "VERSION",
    "TRACE_SUFFIX",
    "TraceError",
    "encode_chunk",
    "TraceChunk",
    "TraceWriter",
    "TraceReader",
    "TraceCursor",
    "TraceSource",
    "LiveSource",
    "LiveWindow",
    "ConcatLiveSource",
    "open_source",
    "generate_trace",
    "shard_seed",
    "shard_layout",
    "GeneratorConfig",
    "TraceStats",
    "FastGenerator",
    "BitExactGenerator",
    "ErrorSource",
    "DetailedErrorSource",
    "ErrorChunk",
]
