"""Error sources that say which bits of a link's payload stream are in error.

An error source follows the protocol layer's ``ErrorSource`` protocol: ``take(n_bits)`` returns
the sorted int64 offsets in ``[0, n_bits)`` of the bits in error among the next ``n_bits`` bits of
the link's stream, and advances the source's cursor by ``n_bits``.  Every directed link
``src -> dst`` gets its own source, seeded deterministically from ``(seed, src, dst)``.

Coordinates are those of ``protocol.source``: a source indexes the PCS payload stream of one
link direction. The wrapper hands each message to ``protocol.delivery.deliver``, which takes the
stream bits of its RoCEv2 frames (headers, FCS, IPG and alignment included, resends too) from
the link's source; the line bits (257b, RS parity, AMs) are counted in the metrics.

Kinds: the protocol layer's live generator (``protocol.trace.LiveSource`` at 400G/200G: rate,
FEC mode, pre-FEC line BER, seed; ``protocol.trace.ConcatLiveSource`` at 800G/1.6T: the
concatenated link with the Clause 177 inner code, as ``phy802 trace generate --rate 800G``), a
trace file (``protocol.trace.open_source``, each link starting at its own seeded offset), or
:class:`IndependentBitErrors` (independent stream-bit flips; fast, for tests and for a memoryless
channel stated directly at the stream).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ErrorSource",
    "IndependentBitErrors",
    "NoErrors",
    "SOURCE_KINDS",
    "BER_MEANING",
    "ber_meaning",
    "resolved_kind",
    "error_free",
    "SourceConfig",
    "link_seed_sequence",
    "make_link_source",
    "BufferedLink",
    "trace_rate_mismatch",
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


SOURCE_KINDS = ("generator", "independent", "trace")

#: what the number ``SourceConfig.ber`` is, per source kind (every output prints it next to the BER):
#: the live generator takes the pre-FEC *line* BER (the FEC mode and the descrambler decide what
#: reaches the payload stream: bypass roughly triples it); independent flips take the BER of the
#: *payload stream* itself; a trace carries its own errors (its header states the line BER it was
#: made at).
BER_MEANING = {
    "generator": "pre-FEC line BER",
    "independent": "payload-stream BER",
    "trace": "trace (line BER of its header)",
}


def ber_meaning(kind: str) -> str:
    """Which BER the number means for source ``kind`` (:data:`BER_MEANING`)."""
    try:
        return BER_MEANING[kind]
    except KeyError:
        raise ValueError(f"unknown source kind {kind!r} (choose from {', '.join(SOURCE_KINDS)})") from None


@dataclass(frozen=True)
class SourceConfig:
    """How each directed link's error source is built.

    Parameters
    ----------
    ber : float
        ``kind="independent"``: bit error ratio of the payload stream (independent flips).
        ``kind="generator"``: pre-FEC line BER of the protocol layer's live generator, whose FEC
        mode ``fec`` decides what is delivered (``bypass``: every line error reaches the stream,
        multiplied by the descrambler).
        At 800G/1.6T (``kind="generator"``): the PAM4 AWGN line BER before the inner decoder, in
        (0, 0.5), as ``phy802 trace generate --rate 800G --ber``.
    seed : int
        Master seed; link ``src -> dst`` uses ``SeedSequence([seed, src + 1, dst + 1])``.
    fec, rate : str
        FEC (receive) mode and rate of the live generator (``"bypass"``, ``"400G"`` by default).
        Rates 400G, 200G, 800G, 1.6T; at 800G/1.6T the generator is the concatenated link
        (``protocol.trace.ConcatLiveSource``: for one seed exactly the flips of ``phy802 trace
        generate --rate R --inner I --fec F --ber B --seed S`` over its whole batches of 614.4 Mbit),
        whose KP4 decodes and marks (``ieee``, ``llr``) or does not decode (``bypass``,
        ``unequal``); ``correct_no_indication`` and ``detect_only`` are refused there.  The line
        bits counted at 800G/1.6T are the KP4 line's (17 per 16 stream bits; the inner code's
        128/120 not included).
    code : str
        RS code on the line (``"kp4"`` default; ``kr4``, ``rs272``, ``none`` where the protocol
        layer's generator models them: a generator without code support refuses anything but kp4).
        At 800G/1.6T: ``kp4`` (``none`` too for ``independent`` / ``trace``: the same layout).
    inner : str or None
        Inner code of the 800G/1.6T lanes: ``"c177"`` (Clause 177 (128,120), Chase-2 decoder, as
        ``trace generate``) or ``"none"``; ``None`` (default) is the rate's own: c177 at
        800G/1.6T, none at 400G/200G (where only ``None`` or ``"none"`` is accepted).
    kind : str
        ``"generator"`` (default), ``"independent"`` or ``"trace"`` (``trace`` names the file).
        Always explicit: the kind fixes what ``ber`` means (:data:`BER_MEANING`), so it is never
        chosen by whether an import works (``auto`` gave 6,252 vs 2,092 flips per 25 MiB
        at the same ``--ber 1e-5``); a generator that does not import is an error.
    trace : str or None
        Path of a protocol-layer trace file (``kind="trace"``).
    """

    ber: float = 0.0
    seed: int = 0
    fec: str = "bypass"
    rate: str = "400G"
    kind: str = "generator"
    code: str = "kp4"
    trace: str | None = None
    inner: str | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.ber) < 1.0):
            raise ValueError(f"SourceConfig.ber must be in [0, 1), got {self.ber!r}")
        if int(self.seed) < 0:
            raise ValueError(f"SourceConfig.seed must be >= 0, got {self.seed!r}")
        if self.kind == "auto":
            raise ValueError("SourceConfig.kind 'auto' was removed (it chose the source, and so what the BER "
                             "means, by whether an import worked): give generator, independent or trace")
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"SourceConfig.kind must be one of {SOURCE_KINDS}, got {self.kind!r}")
        if self.kind == "trace" and not self.trace:
            raise ValueError("SourceConfig.kind='trace' needs a trace path")
        if self.code not in ("kp4", "kr4", "rs272", "none"):
            raise ValueError(f"SourceConfig.code must be kp4, kr4, rs272 or none, got {self.code!r}")
        rate = _rate_key(self.rate)
        if rate not in ("400G", "200G", *_INNER_RATES):
            raise ValueError(f"SourceConfig.rate must be one of 400G, 200G, {', '.join(_INNER_RATES)}, "
                             f"got {self.rate!r}")
        if self.inner not in (None, "c177", "none"):
            raise ValueError(f"SourceConfig.inner must be c177, none or None (the rate's own), got {self.inner!r}")
        if rate not in _INNER_RATES:
            if self.inner == "c177":
                raise ValueError(f"SourceConfig.inner 'c177': rate {self.rate} has no inner code (Clause 177 is for "
                                 f"the 200G-per-lane rates {', '.join(_INNER_RATES)})")
            return
        if self.code not in ("kp4", "none") or (self.kind == "generator" and self.code != "kp4"):
            raise ValueError(f"SourceConfig.code {self.code!r} at {self.rate}: 802.3dj keeps RS(544,514) (kp4) as the "
                             f"outer code" + (" (the generator models kp4)" if self.kind == "generator" else ""))
        if self.kind == "generator":
            from protocol.trace.inner import concat_fec

            try:
                concat_fec(self.fec)
            except (KeyError, ValueError) as exc:
                raise ValueError(f"SourceConfig.fec {self.fec!r} at {self.rate}: {exc}") from None
            if float(self.ber) > 0.0:
                from phy802.channel import Pam4Awgn

                try:
                    Pam4Awgn.from_ber(float(self.ber))
                except ValueError as exc:
                    raise ValueError(f"SourceConfig.ber {self.ber!r} at {self.rate} is the PAM4 line BER: "
                                     f"{exc}") from None

    @property
    def inner_code(self) -> str:
        """The inner code in force: :attr:`inner`, or the rate's own (c177 at 800G/1.6T, else none)."""
        if self.inner is not None:
            return self.inner
        return "c177" if _rate_key(self.rate) in _INNER_RATES else "none"


_INNER_RATES = ("800G", "1.6T")  # protocol.framing.INNER_STREAM_RATES (not imported: config stays light)


def trace_rate_mismatch(meta: dict, rate, path, field: str = "rate") -> None:
    """Raise ``ValueError`` when a trace written at one line rate is replayed at another.

    The wrapper counts a message's line bits at the configured rate (RS/AM overhead differ: at
    800G/1.6T there are no 400G alignment markers), so an 800G trace replayed as 400G would be
    accounted at the wrong line rate without a word. Traces without a ``rate`` in their metadata
    are taken as they are.
    """
    trate = meta.get("rate")
    if trate is not None and _rate_key(str(trate)) != _rate_key(rate):
        raise ValueError(f"{field} {rate!r} does not match the rate the trace was written at, {trate!r} "
                         f"({path}): its line bits would be counted at the wrong rate; use {trate!r}")


def _rate_key(rate) -> str:
    return str(rate).strip().upper()


def link_seed_sequence(seed: int, src: int, dst: int) -> np.random.SeedSequence:
    """The seed of directed link ``src -> dst``."""
    return np.random.SeedSequence([int(seed), int(src) + 1, int(dst) + 1])


def resolved_kind(cfg: SourceConfig) -> str:
    """The source kind ``cfg`` builds (always ``cfg.kind``: there is no ``auto`` any more)."""
    return cfg.kind


_NO_RANGES = np.empty((0, 2), np.int64)
_NO_RANGES.flags.writeable = False  # shared by every delivery that lost no frame
_MAX_PREDICTED = 16  # messages BufferedLink works out ahead at most (DDP: a few steps' buckets)


def error_free(cfg: SourceConfig) -> bool:
    """Whether every link built from ``cfg`` is error-free (:func:`make_link_source` gives
    :class:`NoErrors`): BER 0 from a generator or independent flips (a trace has the errors it holds)."""
    return resolved_kind(cfg) != "trace" and cfg.ber == 0.0


def make_link_source(cfg: SourceConfig, src: int, dst: int) -> ErrorSource:
    """Build the error source of link ``src -> dst`` (see :class:`SourceConfig`)."""
    if error_free(cfg):
        return NoErrors()
    ss = link_seed_sequence(cfg.seed, src, dst)
    kind = resolved_kind(cfg)
    if kind == "trace":
        from protocol.trace import open_source

        cur = open_source(cfg.trace, seed=ss)
        trace_rate_mismatch(cur.reader.meta, cfg.rate, cfg.trace, field="SourceConfig.rate")
        return cur
    if kind == "generator" and _rate_key(cfg.rate) in _INNER_RATES:
        from protocol.trace import ConcatLiveSource

        return ConcatLiveSource(_rate_key(cfg.rate), cfg.fec, cfg.ber, seed=ss, inner=cfg.inner_code)
    if kind == "generator":
        import inspect

        from protocol.trace import LiveSource

        if "code" in inspect.signature(LiveSource).parameters:
            return LiveSource(cfg.rate, cfg.fec, cfg.ber, seed=ss, code=cfg.code)
        if cfg.code != "kp4":
            raise ValueError(f"SourceConfig.code {cfg.code!r}: this protocol layer's generator models kp4 only")
        return LiveSource(cfg.rate, cfg.fec, cfg.ber, seed=ss)
    return IndependentBitErrors(cfg.ber, ss)


class BufferedLink:
    """A link's error stream read ahead in large windows, delivering messages in one compiled pass.

    Gives exactly what ``protocol.delivery.deliver(octets, source, mode, rate=..., float_format=...,
    retransmit=...)`` gives for the same sequence of messages (default framing; ``retransmit``
    default ``RetransmitConfig()``): the source's
    offsets depend only on its cursor, never on how the stream is cut into calls (the contract of
    ``protocol.source.ErrorSource``, kept by :class:`IndependentBitErrors` and the live generator),
    so reading ahead changes no flip. What changes is the cost: ``deliver`` spends ~0.2-0.5 ms per
    1-3 MB message in Python (a source call and a ``frame_fates`` per resent frame); here a message
    is one Numba call over the buffered offsets and marks (:func:`integration._kernels.deliver_frames`).
    Calls also work out the messages they predict next (:meth:`_predict`), consuming nothing; a
    call that asks for the predicted message gets that result (:attr:`predicted` counts them).

    The wrapped source's own cursor runs ahead of :attr:`cursor` (``prefetch_bits`` at first, then
    about 16k errors' worth, within ``min(prefetch_bits, 2^22)`` .. 2^28 bits), so the source must
    not be read elsewhere once wrapped.
    """

    def __init__(self, source: ErrorSource, mode, *, rate: str = "400G", prefetch_bits: int = 1 << 25,
                 code: str = "kp4", retransmit=None) -> None:
        from protocol.delivery import RetransmitConfig
        from protocol.framing import FramingConfig, line_bits_ratio, stream_rate
        from protocol.modes import get_mode

        self.source = source
        self.mode = get_mode(mode)
        stream_rate(rate)
        self.rate = rate
        self.code = code
        self.cursor = 0  # stream bits delivered (what ``source.cursor`` would be without read-ahead)
        self._prefetch = int(prefetch_bits)
        self._min_prefetch = min(1 << 22, self._prefetch)
        self.redone = 0  # messages redone after reading further (resends past the read-ahead)
        self._framing = FramingConfig()
        self._retx = retransmit if retransmit is not None else RetransmitConfig()
        self._resend_ns = float(self._retx.resend_ns(self.mode, rate, code))
        self._end = 0  # stream position the buffer covers up to (the source's own cursor)
        self._off = np.empty(0, np.int64)  # absolute error offsets
        self._marks = np.empty((0, 2), np.int64)  # absolute error-block ranges
        self._k = 0  # first buffered offset >= cursor
        self._m = 0  # first mark that may end after cursor
        self._layouts: dict[int, tuple] = {}
        self._flips = np.empty(0, np.int64)
        self._lost = np.empty((0, 2), np.int64)
        # line bits of ``n`` stream bits: ceil(n * num / den) (protocol.framing.line_bits_ratio)
        self._line_num, self._line_den = line_bits_ratio(rate, code)
        self.predicted = 0  # messages served from the prediction made at the end of the previous call
        self._chain: list[tuple] = []  # predicted messages, next last: (octets, float_format, *_message(...))
        self._depth = 1  # how many messages _predict works out ahead (1 .. _MAX_PREDICTED)
        self._last: int | None = None  # the previous message's octets
        self._next: dict[int, int] = {}  # octets -> the octets of the message that followed it last
        self._masks: dict[str, np.ndarray] = {}
        # per-message constants, read once (each attribute chain costs on the per-bucket path)
        self._tolerant = bool(self.mode.tolerant)
        self._max_attempts = int(self._retx.max_attempts)
        self._sign_exp = self.mode.protected == "sign_exponent"
        # bound once: an import statement per message costs more than the Numba pass on a loaded CPU
        from integration._kernels import deliver_frames
        from protocol.delivery import Delivery

        self._deliver_frames = deliver_frames
        self._delivery = Delivery

    @staticmethod
    def supports(source: ErrorSource) -> bool:
        """Sources whose offsets are known to be independent of how the stream is cut."""
        from protocol.trace import LiveWindow  # LiveSource (400G/200G), ConcatLiveSource (800G/1.6T)

        return isinstance(source, (IndependentBitErrors, LiveWindow))

    def _layout(self, octets: int) -> tuple:
        lay = self._layouts.get(octets)
        if lay is None:
            from protocol.framing import layout

            fr = self._framing
            L = layout(octets, fr)
            pfirst = np.concatenate(([0], np.cumsum(L.payload_len)[:-1])).astype(np.int64)
            pend = L.payload_start + L.payload_len
            # as protocol.delivery.deliver: pad to the minimum frame sits between payload and ICRC
            mac_bits = 8 * np.maximum(fr.eth_header + fr.vlan_tag + fr.ip_packet(L.payload_len // 8) + fr.fcs,
                                      fr.min_frame)
            cend = (L.frame_start + 8 * fr.preamble_sfd + mac_bits).astype(np.int64)
            lay = self._layouts[octets] = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in (
                L.frame_start, L.payload_start, pend, cend, L.frame_end, pfirst, L.payload_len))
        return lay

    def _extend(self, upto: int) -> None:
        # drop what lies behind the cursor, then read the source up to at least ``upto``
        n = max(int(upto) - self._end, self._prefetch)
        tc = getattr(self.source, "take_chunk", None)
        if tc is not None:
            ch = tc(n)
            off, mk = ch.offsets, ch.marks
        else:
            off, mk = np.asarray(self.source.take(n), dtype=np.int64), np.empty((0, 2), np.int64)
        self._off = np.concatenate((self._off[self._k:], off + self._end))
        self._marks = np.concatenate((self._marks[self._m:], mk.reshape(-1, 2) + self._end))
        self._k = self._m = 0
        self._end += n
        # next read-ahead: ~16k errors at the density just seen (fewer, larger source calls at low
        # BER; a bounded buffer at high BER), within [2^22, 2^28] bits
        self._prefetch = int(min(1 << 28, max(self._min_prefetch, 16384 * n / (off.size + 1))))

    def deliver(self, octets: int, float_format: str = "float32"):
        """One message of ``octets`` payload octets; returns a ``protocol.delivery.Delivery``."""
        octets = int(octets)
        if octets < 0:
            raise ValueError(f"octets must be >= 0, got {octets}")
        if octets == 0:
            e = np.empty(0, np.int64)
            return self._delivery(e, 0, 0, 0, np.empty((0, 2), np.int64), 0, 0, 0, 0.0)
        chain = self._chain
        if chain and chain[-1][0] == octets and chain[-1][1] == float_format:
            # the next of the messages predicted earlier, at this cursor: the same result (the buffer
            # has not changed since), worked out while the code was in the caches
            _, _, d, used, k, m = chain.pop()
            self.predicted += 1
            if not chain:
                self._depth = min(2 * self._depth, _MAX_PREDICTED)  # every guess held: guess further
        else:
            if chain:
                chain.clear()
                self._depth = 1
            d, used, k, m = self._message(octets, float_format, True, self.cursor, self._k, self._m)
            if self._last is not None and (self._last in self._next or len(self._next) < 4096):
                self._next[self._last] = octets  # bounded for sizes that never repeat
        self._last = octets
        self.cursor += used
        self._k, self._m = k, m
        if not chain:
            self._predict(octets, float_format)
        return d

    def _predict(self, octets: int, float_format: str) -> None:
        """Work out the next messages now, each the size that followed the previous one last time
        (DDP's buckets and a pipeline's activations repeat every step), up to ``_depth`` of them
        and as far as the buffer goes, consuming nothing.

        On a CPU busy with the step's other work the wrapper's code is cold at each call, and each
        call into numpy or Numba then costs several times what it does in a loop; worked out in one
        go, the messages cost what they do warm, and a predicted call only looks its result up. A
        wrong guess drops the rest (and the depth falls back to one); the depth doubles each time
        every guess held.
        """
        cursor, k, m = self.cursor, self._k, self._m
        out = []
        for _ in range(self._depth):
            octets = self._next.get(octets)
            if octets is None:
                break
            r = self._message(octets, float_format, False, cursor, k, m)
            if r is None:  # the buffer ends first: the call that needs it reads further
                break
            out.append((octets, float_format) + r)
            cursor, k, m = cursor + r[1], r[2], r[3]
        out.reverse()  # popped from the end
        self._chain[:] = out

    def _message(self, octets: int, float_format: str, extend: bool, cursor: int, k: int, m: int):
        """``(Delivery, used_bits, k_next, m_next)`` of a message at stream position ``cursor``
        (buffered offsets from ``k``, marks from ``m``), consuming nothing; ``None`` if the buffer
        ends first and ``extend`` is False (with ``extend``, ``cursor`` must be :attr:`cursor`:
        reading further drops what lies behind it)."""
        fs, ps, pe, ce, fe, pf, pl = self._layout(octets)
        need = cursor + int(fe[-1])
        while True:
            if self._end < need:
                if not extend:
                    return None
                self._extend(need)
                k, m = self._k, self._m
            # scratch outputs reused from message to message (at most one flip per buffered error)
            if self._flips.size < self._off.size - k:
                self._flips = np.empty(2 * (self._off.size - k), np.int64)
            if self._lost.shape[0] < fs.size:
                self._lost = np.empty((fs.size, 2), np.int64)
            flips, lost = self._flips, self._lost
            n, used, resent, nl, maxr, k2, m2 = self._deliver_frames(
                self._off, k, self._marks, m, cursor, self._end, fs, ps, pe, ce, fe, pf, pl,
                self._tolerant, self._max_attempts, flips, lost)
            if n >= 0:
                break
            if not extend:
                return None
            # resends ran past the buffer: read further and redo the message (nothing was consumed)
            need = self._end + int(fe[-1])
            self.redone += 1
        out = flips[:n].copy()
        removed = 0
        if self._sign_exp and n:
            mask = self._masks.get(float_format)
            if mask is None:
                from protocol.modes import protected_bit_mask

                mask = self._masks[float_format] = protected_bit_mask(float_format)
            hit = mask[out % mask.size]
            removed = int(hit.sum())
            out = out[~hit]
        used = int(used)
        d = self._delivery(payload_flips=out, frames=int(fs.size), frames_resent=int(resent), frames_lost=int(nl),
                           lost_ranges=lost[:nl].copy() if nl else _NO_RANGES, protected_removed=removed,
                           stream_bits=used, line_bits=-(-used * self._line_num // self._line_den),
                           retransmit_ns=float(maxr * self._resend_ns))
        return d, used, int(k2), int(m2)
