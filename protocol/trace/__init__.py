"""Error traces: the file format, its readers and sources, and the generators that write them.
Owns the ``.trace`` format and every way to produce or consume one; laid out like :mod:`phy802.link`.

A neighbour of the bypass-FEC layer (:mod:`protocol`), not part of it: the layer consumes an
:class:`~protocol.source.ErrorSource`; this package is one way to produce one, from a ``.trace``
file or live.

* :mod:`~protocol.trace.format`: the file format (``TRACE_FORMAT.md`` beside this file),
  :class:`TraceWriter`, :class:`TraceReader`, :func:`encode_chunk`;
* :mod:`~protocol.trace.sources`: :class:`TraceCursor` / :func:`open_source` over a file and the
  live sources (:class:`LiveSource`, :class:`LiveWindow`);
* :mod:`~protocol.trace.sharded`: :func:`generate_trace` (``phy802 trace generate``), sharded over
  worker processes or Dask, joined through the descrambler's carry;
* :mod:`~protocol.trace.config`: :class:`GeneratorConfig` and :class:`TraceStats`;
  :mod:`~protocol.trace._base` what both generators share; :mod:`~protocol.trace.fast`:
  :class:`FastGenerator` (event-driven); :mod:`~protocol.trace.bitexact`: :class:`BitExactGenerator`
  (real bits, the oracle of the fast one);
* :mod:`~protocol.trace.inner`: traces of 800G / 1.6T links with the Clause 177 inner code and
  KP4, from :class:`phy802.link.concat.ConcatLink` (``phy802 trace generate --rate 800G``), and
  their live source :class:`ConcatLiveSource` (the same batches, no file);
* ``_kernels`` (chunk encoding/decoding) and ``_gen_kernels`` (the generator's hot loops): private
  Numba kernels. ``file`` and ``generator`` are the old module paths, kept as forwarding modules.

``from protocol.trace import TraceReader, generate_trace, ...`` is the public face; the names
below are re-exported from those modules.
"""

from .bitexact import BitExactGenerator
from .config import GeneratorConfig, TraceStats
from .fast import FastGenerator
from .format import FORMAT, TRACE_SUFFIX, VERSION, TraceChunk, TraceError, TraceReader, TraceWriter, encode_chunk
from .inner import ConcatLiveSource
from .sharded import generate_trace, shard_layout, shard_seed
from .sources import LiveSource, LiveWindow, TraceCursor, TraceSource, open_source
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
