"""Error sources that say which bits of a link's payload stream are in error.

An error source follows the protocol layer's ``ErrorSource`` protocol: ``take(n_bits)`` returns
the sorted int64 offsets in ``[0, n_bits)`` of the bits in error among the next ``n_bits`` bits of
the link's stream, and advances the source's cursor by ``n_bits``.  Every directed link
``src -> dst`` gets its own source, seeded deterministically from ``(seed, src, dst)``.

The wrapper advances a link's cursor by the *line* bits a message costs, framing overhead
included (:func:`message_line_bits`).  When ``protocol/framing.py`` and ``protocol/trace.py``
provide the payload->line-bit mapping and trace/live sources, :func:`message_line_bits` and
:func:`make_link_source` use them; until then the placeholder below is used and is named as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ErrorSource",
    "IndependentBitErrors",
    "NoErrors",
    "SourceConfig",
    "link_seed_sequence",
    "make_link_source",
    "message_line_bits",
    "resolve_line_bits",
    "PLACEHOLDER_FRAME_PAYLOAD_BYTES",
    "PLACEHOLDER_FRAME_HEADER_BYTES",
    "placeholder_line_bits",
]


@runtime_checkable
class ErrorSource(Protocol):
    """Anything with ``take(n_bits) -> sorted int64 offsets in [0, n_bits)``."""

    def take(self, n_bits: int) -> np.ndarray:  # pragma: no cover - protocol
        ...


class NoErrors:
    """An error-free link (BER 0); ``take`` only advances the cursor."""

    def __init__(self) -> None:
        self.cursor = 0

    def take(self, n_bits: int) -> np.ndarray:
        if n_bits < 0:
            raise ValueError(f"n_bits must be >= 0, got {n_bits}")
        self.cursor += int(n_bits)
        return np.empty(0, dtype=np.int64)


class IndependentBitErrors:
    """Independent bit errors with probability ``ber`` per bit (a binary symmetric channel).

    Error positions are drawn by geometric skipping: the gap to the next error is
    ``Geometric(ber)``, so the cost is proportional to the number of errors, not of bits.
    Gaps are drawn in blocks from a seeded ``numpy.random.Generator``; the positions therefore
    depend only on the seed, never on how the stream is cut into ``take`` calls.

    Parameters
    ----------
    ber : float
        Bit error probability in ``[0, 1)``.
    seed : int, SeedSequence or Generator
        Explicit seed (no global RNG).
    """

    _BLOCK = 256

    def __init__(self, ber: float, seed: int | np.random.SeedSequence | np.random.Generator) -> None:
        from phy802._rng import as_generator

        ber = float(ber)
        if not (0.0 <= ber < 1.0) or math.isnan(ber):
            raise ValueError(f"ber must be in [0, 1), got {ber!r}")
        self.ber = ber
        self._rng = as_generator(seed)
        self.cursor = 0  # absolute bit position of the next bit to be taken
        self._pending = np.empty(0, dtype=np.int64)  # absolute error positions >= cursor, sorted
        self._last = -1  # absolute position of the last drawn error

    def _extend(self, upto: int) -> None:
        # draw gaps until the last drawn error lies at or beyond ``upto``
        chunks = [self._pending]
        while self._last < upto:
            expect = (upto - self._last) * self.ber
            n = int(max(self._BLOCK, 1.2 * expect + 16))
            gaps = self._rng.geometric(self.ber, size=n).astype(np.int64)
            pos = self._last + np.cumsum(gaps)
            self._last = int(pos[-1])
            chunks.append(pos)
        self._pending = np.concatenate(chunks)

    def take(self, n_bits: int) -> np.ndarray:
        n_bits = int(n_bits)
        if n_bits < 0:
            raise ValueError(f"n_bits must be >= 0, got {n_bits}")
        start, end = self.cursor, self.cursor + n_bits
        self.cursor = end
        if self.ber == 0.0 or n_bits == 0:
            return np.empty(0, dtype=np.int64)
        if self._last < end:
            self._extend(end)
        k = int(np.searchsorted(self._pending, end, side="left"))
        out = self._pending[:k] - start
        self._pending = self._pending[k:]
        return out


@dataclass(frozen=True)
class SourceConfig:
    """How each directed link's error source is built.

    Parameters
    ----------
    ber : float
        Payload bit error rate of the live generator (default 0).
    seed : int
        Master seed; link ``src -> dst`` uses ``SeedSequence([seed, src + 1, dst + 1])``.
    fec : str
        FEC mode name handed to the protocol layer's live generator when it exists
        (``"bypass"`` default); the local fallback treats the payload BER as given.
    rate : str
        Line rate name handed to the protocol layer (``"400G"`` default).
    trace : str or None
        Path of a protocol-layer trace file; each link reads it from its own offset when set.
    """

    ber: float = 0.0
    seed: int = 0
    fec: str = "bypass"
    rate: str = "400G"
    trace: str | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.ber) < 1.0):
            raise ValueError(f"SourceConfig.ber must be in [0, 1), got {self.ber!r}")
        if int(self.seed) < 0:
            raise ValueError(f"SourceConfig.seed must be >= 0, got {self.seed!r}")


def link_seed_sequence(seed: int, src: int, dst: int) -> np.random.SeedSequence:
    """The seed of directed link ``src -> dst`` (``src = -1`` allowed for an abstract ingress)."""
    return np.random.SeedSequence([int(seed), int(src) + 1, int(dst) + 1])


def _protocol_trace():
    try:
        from protocol import trace  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the protocol layer may not exist yet or be mid-edit
        return None
    return trace


def make_link_source(cfg: SourceConfig, src: int, dst: int) -> ErrorSource:
    """Build the error source of link ``src -> dst``.

    A trace file (``cfg.trace``) is read through ``protocol.trace`` (required then). Otherwise
    the local :class:`IndependentBitErrors` generator is used with the payload BER ``cfg.ber``.
    """
    ss = link_seed_sequence(cfg.seed, src, dst)
    if cfg.trace is not None:
        trace = _protocol_trace()
        opener = getattr(trace, "open_trace_source", None) if trace is not None else None
        if opener is None:
            raise ValueError(f"trace {cfg.trace!r}: protocol.trace has no trace reader (open_trace_source) yet")
        # each link starts at its own seeded offset so that links do not replay the same errors
        return opener(cfg.trace, seed=ss)
    if cfg.ber == 0.0:
        return NoErrors()
    return IndependentBitErrors(cfg.ber, ss)


# --- framing overhead ---------------------------------------------------------------------------
# PLACEHOLDER until protocol/framing.py provides the payload->line-bit mapping: each message is
# cut into frames of up to 8192 payload bytes, each with a 64-byte header; header bits are on the
# link (they advance the cursor, and errors there hit no tensor byte). The payload occupies the
# first bits of the message's slot, the headers are accounted after it.
PLACEHOLDER_FRAME_PAYLOAD_BYTES = 8192
PLACEHOLDER_FRAME_HEADER_BYTES = 64


def placeholder_line_bits(payload_bits: int) -> int:
    """PLACEHOLDER framing: payload bits plus one 64-byte header per started 8192-byte frame."""
    payload_bits = int(payload_bits)
    if payload_bits < 0:
        raise ValueError(f"payload_bits must be >= 0, got {payload_bits}")
    frames = max(1, -(-payload_bits // (8 * PLACEHOLDER_FRAME_PAYLOAD_BYTES)))
    return payload_bits + frames * 8 * PLACEHOLDER_FRAME_HEADER_BYTES


def resolve_line_bits(fec: str = "bypass") -> Callable[[int], int]:
    """The payload->line-bit mapping of a message (framing overhead included), resolved once.

    Uses ``protocol.framing.line_bits`` when that exists, else :func:`placeholder_line_bits`.
    The payload is placed at offsets ``[0, payload_bits)`` of the message's slot.
    """
    try:
        from protocol import framing  # type: ignore[attr-defined]

        fn = getattr(framing, "line_bits", None)
    except Exception:  # noqa: BLE001 - the protocol layer may not exist yet
        fn = None
    if fn is None:
        return placeholder_line_bits
    return lambda payload_bits: int(fn(int(payload_bits)))


def message_line_bits(payload_bits: int, fec: str = "bypass") -> int:
    """Line bits a message of ``payload_bits`` costs (see :func:`resolve_line_bits`)."""
    return resolve_line_bits(fec)(payload_bits)
