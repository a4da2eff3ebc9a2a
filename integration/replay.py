"""Apply a link's bit errors to the bytes a rank receives; guards, injection log and metrics.

Bit numbering: bit ``k`` of a message is bit ``k % 8`` (LSB first, the order in which 802.3
serialises an octet) of byte ``k // 8`` of the tensor's native little-endian bytes. So for fp32
element ``i``, bits ``32 i + 23 .. 32 i + 30`` are the exponent and ``32 i + 31`` the sign.

Only floating-point tensors (fp32, fp64, fp16, bf16, float8_e4m3fn, float8_e5m2) of the selected
traffic classes are ever modified, plus the uint8 buffers of FSDP2's mixed-dtype parameter
all-gather (``all_gather_single`` of uint8, class ``params``); only on the receiving side, through
``tensor.detach()``. Other integer tensors (shapes, votes, pickles) never are.

Undeliverable data. A frame the transport cannot deliver within its retry limit (every one of
``retry_cnt + 1`` sends dropped) is *lost*; the operation it belongs to then fails
(:class:`LinkFailure`), as an RDMA queue pair goes to the error state after
``NCCL_IB_RETRY_CNT`` retries (IB spec: the requester's retry counter, each retry after the local
ACK timeout ``4.096 us x 2^NCCL_IB_TIMEOUT`` when no NAK arrives). The wrapper never hands lost
frames to the application as if they had arrived.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from integration.sources import SourceConfig

__all__ = [
    "TRAFFIC_CLASSES",
    "DEFAULT_CLASSES",
    "GUARDS",
    "MODES",
    "DEFAULT_CLAMP",
    "ReplayConfig",
    "LinkFailure",
    "is_corruptible",
    "InjectionLog",
    "Metrics",
    "is_float",
    "protected_bit_range",
    "corrupt_received",
    "apply_guard",
    "guard_flipped",
    "guard_values",
    "clamp_bound",
]

# tied_grads: the gradient of a tied embedding/head matrix summed between the first and last
# pipeline stage (integration/train.py); a gradient, but its own class so it can be targeted
TRAFFIC_CLASSES = ("gradients", "activations", "activation_grads", "params", "tied_grads", "control")
DEFAULT_CLASSES = ("gradients", "activations", "activation_grads", "tied_grads")
GUARDS = ("none", "nan_to_zero_clamp", "skip_nonfinite_step", "exponent_protection")
MODES = ("endpoint", "ring")
#: the inner backend of each device type, by the name it is registered under with torch.distributed
DEFAULT_INNER_BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
# [?] receive clamp per class for the nan_to_zero_clamp guard: gradients and activation gradients
# of a small char GPT are << 1 element-wise, activations and weights are O(1..10).
DEFAULT_CLAMP = {"gradients": 1.0, "tied_grads": 1.0, "activation_grads": 1.0, "activations": 100.0, "params": 100.0, "control": math.inf}

_FLOAT8 = tuple(d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None)
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64) + _FLOAT8
# (first bit, last bit) of sign+exponent inside one element, bits numbered LSB first
_SIGN_EXP_BITS = {
    torch.float32: (23, 31),
    torch.float16: (10, 15),
    torch.bfloat16: (7, 15),
    torch.float64: (52, 63),
}
if _FLOAT8:  # e4m3fn: 1 sign, 4 exponent, 3 mantissa bits; e5m2: 1, 5, 2 (OCP FP8 formats)
    _SIGN_EXP_BITS[torch.float8_e4m3fn] = (3, 7)
    _SIGN_EXP_BITS[torch.float8_e5m2] = (2, 7)

# integer view of an element, for flipping its bits in the Numba kernel (fp16/bf16 take the numpy path)
_WORD = {torch.float32: np.uint32, torch.float64: np.uint64}

if sys.byteorder != "little":  # pragma: no cover - the byte layout above is little-endian only
    raise ImportError("integration.replay assumes a little-endian host (bit layout of float elements)")


def is_float(t: torch.Tensor) -> bool:
    """True for the float dtypes the wrapper may corrupt (fp32, fp16, bf16, fp64, float8_e4m3fn, float8_e5m2)."""
    return t.dtype in _FLOAT_DTYPES


def is_corruptible(t: torch.Tensor, op: str = "") -> bool:
    """Float tensors, and uint8 in ``all_gather_single``: FSDP2 all-gathers the parameters of a
    mixed-dtype module as one uint8 buffer (its copy-in), which is parameter payload, not control.

    uint8 in the list ``allgather`` / ``broadcast`` / point-to-point stays control: that is how
    ``all_gather_object`` and ``send_object_list`` move pickles, which a flip would desynchronise.
    """
    return t.dtype in _FLOAT_DTYPES or (t.dtype == torch.uint8 and op == "all_gather_single")


class LinkFailure(RuntimeError):
    """An operation whose data the transport could not deliver (a frame lost after every retry).

    Raised by the operation's ``Work.wait()`` (and its future) on the rank that lost the data,
    and by every later operation of that group on that rank (the queue pair is in error); the
    other ranks raise it when they wait on an operation the failed rank no longer issues (they
    read the failure from the group's store). Attributes: ``link`` ``(src, dst)``, ``op``,
    ``frames_lost``, ``frames_resent``, ``rank``.
    """

    def __init__(self, message: str, *, link: tuple[int, int] | None = None, op: str = "", frames_lost: int = 0,
                 frames_resent: int = 0, rank: int = -1) -> None:
        super().__init__(message)
        self.link, self.op, self.frames_lost, self.frames_resent, self.rank = link, op, frames_lost, frames_resent, rank


def protected_bit_range(dtype: torch.dtype) -> tuple[int, int]:
    """Inclusive ``(lo, hi)`` bit positions of sign+exponent within one element of ``dtype``."""
    try:
        return _SIGN_EXP_BITS[dtype]
    except KeyError:
        raise ValueError(f"no float bit layout for dtype {dtype}") from None


@dataclass(frozen=True)
class ReplayConfig:
    """Experiment knobs of the replay wrapper.

    Parameters
    ----------
    source : SourceConfig
        Per-link error sources (BER / trace, seed, FEC mode).
    mode : str
        ``"endpoint"`` (inner backend reduces; errors on what each rank receives) or ``"ring"``
        (reduce-scatter + all-gather hops over the inner send/recv).
    classes : tuple of str
        Traffic classes whose float payload is corrupted (default gradients, activations,
        activation gradients).
    guard : str
        One of :data:`GUARDS`. ``nan_to_zero_clamp`` and ``exponent_protection`` act here on
        receive, and only on what the link corrupted: ``nan_to_zero_clamp`` sets each element
        the link flipped to 0 if it is non-finite and clamps it to the class's clamp otherwise
        (the emulator knows which elements it flipped; a real receiver learns it per FEC
        codeword from the syndrome check that runs alongside the bypass path, so this is the
        ideal case of an error-flagging receiver); elements the link did not touch, Inf/NaN
        included, are delivered as sent, so an error-free run is bit-identical to the inner
        backend and fp16 ``GradScaler`` still sees its own overflows. ``exponent_protection``
        removes flips of sign/exponent bits (the ``unequal`` mode). ``skip_nonfinite_step`` is
        applied by the training loop: it skips every step whose global gradient norm is not
        finite (an Inf/NaN element, or an fp32 overflow of the norm, which plain clipping would
        turn into a zeroed update), agreed by all ranks.
    clamp : float or None
        Receive clamp for ``nan_to_zero_clamp``; ``None`` uses :data:`DEFAULT_CLAMP` per class.
    log_limit : int
        Maximum number of flips kept in the injection log (the counters keep counting).
    forward_increasing : bool
        Point-to-point traffic from a lower to a higher rank is a forward activation (pipeline
        stage ``i`` on rank ``i``); the other direction carries activation gradients.
    batch_p2p : str
        ``"auto"`` / ``"never"`` (default auto): every send/receive is issued when it is called (a
        ring hop's pair is one coalesced NCCL group); ``"always"``: queued and issued as one
        coalesced group at the first ``wait`` (the old behaviour; tests the queue on gloo).
    retry_cnt : int
        ``NCCL_IB_RETRY_CNT`` (default 7, NCCL's default; IB allows 0..7): resends of one frame
        before it is lost and the operation fails (:class:`LinkFailure`); a frame is sent at most
        ``retry_cnt + 1`` times.
    ib_timeout : int
        ``NCCL_IB_TIMEOUT`` (default 20, NCCL's default since 2.14; IB allows 1..31): the local
        ACK timeout is ``4.096 us x 2^ib_timeout`` (:attr:`rto_s`), the wait before a resend when
        no NAK arrives. The wrapper's delivery decision uses only ``retry_cnt``; the RTO is
        reported in the failure and used by the cluster time model for the time a loss costs.
    measure_noise : bool
        Measure the injected noise (default True): ``signal_sq``, the squared L2 norm of every
        received float message, and ``perturbation_sq``. The norm is a pass over each whole
        message, the one cost of the receive path that grows with the message rather than with
        its flips (about a fifth of the wrapper's own CPU time per DDP step at line BER 1e-5,
        ``benchmarks/bench_replay.py``); False leaves both counters at 0 (``injected_noise``
        then reads ``nan``: not measured) and touches only the flipped elements.
    inner_backends : dict
        Device type -> the name of the backend (registered with ``torch.distributed``) that moves
        tensors of that type underneath the replay (default ``{"cpu": "gloo", "cuda": "nccl"}``):
        UCC, a vendor backend, or a test's stand-in. A name that is not registered, or that is
        registered without that device type, is refused (:func:`integration.inner.check_inner_backends`)
        when the backend is registered and when a group is made, before any rank blocks.
    summary : bool
        Print one line per rank to stderr when the group shuts down, saying what was injected
        (:meth:`integration.process_group.ReplayProcessGroup.summary`, default True).
    """

    source: SourceConfig = field(default_factory=SourceConfig)
    mode: str = "endpoint"
    classes: tuple[str, ...] = DEFAULT_CLASSES
    guard: str = "none"
    clamp: float | None = None
    log_limit: int = 200_000
    forward_increasing: bool = True
    batch_p2p: str = "auto"
    retry_cnt: int = 7
    ib_timeout: int = 20
    measure_noise: bool = True
    inner_backends: dict = field(default_factory=lambda: dict(DEFAULT_INNER_BACKENDS))
    summary: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"ReplayConfig.mode must be one of {MODES}, got {self.mode!r}")
        if self.guard not in GUARDS:
            raise ValueError(f"ReplayConfig.guard must be one of {GUARDS}, got {self.guard!r}")
        bad = [c for c in self.classes if c not in TRAFFIC_CLASSES]
        if bad:
            raise ValueError(f"ReplayConfig.classes: unknown traffic class {bad[0]!r} (choose from {TRAFFIC_CLASSES})")
        object.__setattr__(self, "classes", tuple(self.classes))
        if self.clamp is not None and not (self.clamp > 0):
            raise ValueError(f"ReplayConfig.clamp must be > 0, got {self.clamp!r}")
        if self.batch_p2p not in ("auto", "always", "never"):
            raise ValueError(f"ReplayConfig.batch_p2p must be auto, always or never, got {self.batch_p2p!r}")
        if int(self.log_limit) < 0:
            raise ValueError(f"ReplayConfig.log_limit must be >= 0, got {self.log_limit!r}")
        if not isinstance(self.retry_cnt, int) or not 0 <= self.retry_cnt <= 7:
            raise ValueError(f"ReplayConfig.retry_cnt (NCCL_IB_RETRY_CNT) must be an int in 0..7, got {self.retry_cnt!r}")
        if not isinstance(self.measure_noise, bool):
            raise ValueError(f"ReplayConfig.measure_noise must be a bool, got {self.measure_noise!r}")
        if not isinstance(self.ib_timeout, int) or not 1 <= self.ib_timeout <= 31:
            raise ValueError(f"ReplayConfig.ib_timeout (NCCL_IB_TIMEOUT) must be an int in 1..31, got {self.ib_timeout!r}")
        ib = self.inner_backends
        if not isinstance(ib, dict) or not ib or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                         for k, v in ib.items()):
            raise ValueError("ReplayConfig.inner_backends must map device types to backend names (non-empty "
                             f"strings), e.g. {DEFAULT_INNER_BACKENDS}; got {ib!r}")
        object.__setattr__(self, "inner_backends", {k.lower(): v.lower() for k, v in ib.items()})
        if not isinstance(self.summary, bool):
            raise ValueError(f"ReplayConfig.summary must be a bool, got {self.summary!r}")

    @property
    def rto_s(self) -> float:
        """Local ACK timeout of one retry, ``4.096 us x 2^ib_timeout`` (IB spec; 4.29 s at 20)."""
        return 4.096e-6 * 2.0 ** self.ib_timeout

    def retransmit(self):
        """The ``protocol.delivery.RetransmitConfig`` of this configuration (``max_attempts = retry_cnt + 1``)."""
        from protocol.delivery import RetransmitConfig

        return RetransmitConfig(max_attempts=self.retry_cnt + 1)

    def clamp_for(self, cls: str) -> float:
        return float(self.clamp) if self.clamp is not None else DEFAULT_CLAMP[cls]

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ReplayConfig":
        d = dict(d)
        d["source"] = SourceConfig(**d.get("source", {}))
        if "classes" in d:
            d["classes"] = tuple(d["classes"])
        return cls(**d)


class InjectionLog:
    """Every applied flip: op, traffic class, link, hop, element, bit, old and new value.

    ``msg_bit`` is the flipped payload bit of the message (what the delivery model returned), so
    a log can be checked against the source replayed through ``protocol.delivery``. ``old``/``new`` are the
    element's values before and after the message's flips (per-bit when one flip hits an element).

    A message's flips are kept as one int64 block of :data:`BLOCK_ROWS` rows (element, bit,
    msg_bit, then old and new as float64 bits) that the CPU receive kernel fills in place
    (:meth:`add_block`): no per-message slicing or copying on the per-bucket path.
    """

    #: rows of a block: element, bit, msg_bit (int64), old, new (float64, viewed)
    BLOCK_ROWS = 5

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = int(limit)
        self.dropped = 0
        self._parts: list[tuple] = []  # (seq, op, cls, src, dst, hop, block, n): block int64[5, >= n]
        self._n = 0
        self.messages: list[tuple] = []  # (seq, op, cls, src, dst, hop, payload_bits, stream_bits, n_offsets)

    def __len__(self) -> int:
        return self._n

    def __iter__(self):
        """The flips, one dict each, as :meth:`records` gives them (``for flip in group.log``)."""
        return iter(self.records())

    def add_message(self, seq: int, op: str, cls: str, src: int, dst: int, hop: int,
                    payload_bits: int, stream_bits: int, n_offsets: int) -> None:
        self.messages.append((seq, op, cls, src, dst, hop, payload_bits, stream_bits, n_offsets))

    def add_block(self, seq: int, op: str, cls: str, src: int, dst: int, hop: int, block: np.ndarray, n: int) -> None:
        """Log the first ``n`` columns of ``block`` (int64[5, >= n], rows as :data:`BLOCK_ROWS`),
        kept by reference: the caller does not write to it afterwards."""
        room = self.limit - self._n
        if n > room:
            self.dropped += n - max(0, room)
            n = max(0, room)
        if n:
            self._parts.append((seq, op, cls, src, dst, hop, block, n))
            self._n += n

    def add(self, *, seq: int, op: str, cls: str, src: int, dst: int, hop: int, element: np.ndarray,
            bit: np.ndarray, old: np.ndarray, new: np.ndarray, msg_bit: np.ndarray) -> None:
        n = len(element)
        block = np.empty((self.BLOCK_ROWS, n), np.int64)
        block[0], block[1], block[2] = element, bit, msg_bit
        fl = block[3:].view(np.float64)
        fl[0], fl[1] = old, new
        self.add_block(seq, op, cls, src, dst, hop, block, n)

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per flip (JSON-ready)."""
        out = []
        for seq, op, cls, src, dst, hop, block, n in self._parts:
            ints = block[:3, :n].tolist()
            fl = block[3:, :n].view(np.float64).tolist()
            for e, b, mb, o, w in zip(ints[0], ints[1], ints[2], fl[0], fl[1]):
                out.append(dict(seq=seq, op=op, cls=cls, link=[src, dst], hop=hop, element=e, bit=b, old=o,
                                new=w, msg_bit=mb))
        return out

    def elements_hit(self, classes: Iterable[str]) -> int:
        """Distinct elements hit by the logged flips of traffic classes ``classes``, counted per
        received message: several flips (bits) on one element of one message count once; an
        element hit in two messages (two hops, two steps) counts twice. One numpy pass per
        message; the flips past :attr:`limit` (:attr:`dropped`) are not counted."""
        want = set(classes)
        return int(sum(len(np.unique(block[0, :n])) for _, _, cls, *_, block, n in self._parts if cls in want))

    def offsets_by_message(self, seqs: Iterable[int] | None = None) -> dict[int, np.ndarray]:
        """``seq -> msg_bit offsets`` of the applied flips (for checks against the source), sorted;
        only the messages in ``seqs`` when given (a caller reading step by step sorts each flip once)."""
        want = None if seqs is None else set(seqs)
        d: dict[int, list[np.ndarray]] = {}
        for seq, *_, block, n in self._parts:
            if want is None or seq in want:
                d.setdefault(seq, []).append(block[2, :n])
        return {k: np.sort(np.concatenate(v)) for k, v in d.items()}


@dataclass
class Metrics:
    """Per-rank counters, each link counted at its destination (sums over ranks do not double count).

    ``errors_injected`` are flips applied to tensor bytes; ``errors_unselected`` were delivered
    on traffic that is not selected or not float; ``errors_protected`` were removed by exponent
    protection (guard or the ``unequal`` FEC mode); ``frames_resent`` / ``frames_lost`` come from
    the delivery model (frames dropped for header hits, marks or, non-tolerant modes, any error);
    ``op_failures`` counts operations that raised :class:`LinkFailure` on this rank (lost frames);
    ``nonfinite_events`` counts received messages where the flips produced Inf/NaN;
    ``guard_elements`` counts flipped elements changed by the receive guard;
    ``guard_skipped`` counts flipped elements that a receive guard (``nan_to_zero_clamp``,
    ``exponent_protection``) could not act on and that were delivered as flipped: the bytes of
    FSDP2's uint8 all-gather of mixed-dtype parameters, which carry no one float layout.

    ``perturbation_sq`` sums, over every flipped element, ``(delivered - clean)^2`` in float64,
    where *delivered* is the value after the flips and the receive guard (``inf`` once a
    non-finite value is delivered); ``signal_sq`` sums ``||clean message||^2`` over every
    received message of a selected float class on a link with errors. Their ratio is what the
    link injected (:meth:`injected_noise`).
    """

    messages: dict[str, int] = field(default_factory=dict)
    payload_bits: dict[str, int] = field(default_factory=dict)
    stream_bits: dict[str, int] = field(default_factory=dict)
    line_bits: dict[str, int] = field(default_factory=dict)
    errors_injected: dict[str, int] = field(default_factory=dict)
    errors_unselected: dict[str, int] = field(default_factory=dict)
    errors_protected: dict[str, int] = field(default_factory=dict)
    frames_resent: dict[str, int] = field(default_factory=dict)
    frames_lost: dict[str, int] = field(default_factory=dict)
    op_failures: dict[str, int] = field(default_factory=dict)
    nonfinite_events: dict[str, int] = field(default_factory=dict)
    guard_elements: dict[str, int] = field(default_factory=dict)
    guard_skipped: dict[str, int] = field(default_factory=dict)
    perturbation_sq: dict[str, float] = field(default_factory=dict)
    signal_sq: dict[str, float] = field(default_factory=dict)

    _FLOAT_FIELDS = ("perturbation_sq", "signal_sq")

    def add(self, name: str, cls: str, n: int | float) -> None:
        d = getattr(self, name)
        d[cls] = d.get(cls, 0) + (float(n) if name in self._FLOAT_FIELDS else int(n))

    def add_received(self, cls: str, injected: int, signal_sq: float, perturbation_sq: float, protected: int,
                     nonfinite: bool, guarded: int, skipped: int = 0) -> None:
        """The counters of one received message's applied flips in one call (the per-bucket path):
        ``signal_sq`` only when finite, the others only when nonzero (as :meth:`add` per counter)."""
        d = self.errors_injected
        d[cls] = d.get(cls, 0) + int(injected)
        if math.isfinite(signal_sq):
            d = self.signal_sq
            d[cls] = d.get(cls, 0) + float(signal_sq)
        for d, v in ((self.perturbation_sq, perturbation_sq), (self.errors_protected, protected),
                     (self.nonfinite_events, nonfinite), (self.guard_elements, guarded),
                     (self.guard_skipped, skipped)):
            if v:
                d[cls] = d.get(cls, 0) + (float(v) if d is self.perturbation_sq else int(v))

    def add_message(self, cls: str, payload_bits: int, stream_bits: int, line_bits: int, frames_resent: int = 0,
                    frames_lost: int = 0, errors_protected: int = 0) -> None:
        """One received message: ``messages`` +1, its payload, stream and line bits, and its frames
        resent and lost and flips removed by protection, each only when nonzero (as :meth:`add`; one
        call per message)."""
        for d, n in ((self.messages, 1), (self.payload_bits, payload_bits), (self.stream_bits, stream_bits),
                     (self.line_bits, line_bits)):
            d[cls] = d.get(cls, 0) + int(n)
        for d, n in ((self.frames_resent, frames_resent), (self.frames_lost, frames_lost),
                     (self.errors_protected, errors_protected)):
            if n:
                d[cls] = d.get(cls, 0) + int(n)

    def total(self, name: str) -> int:
        return int(sum(getattr(self, name).values()))

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {k: dict(v) for k, v in self.__dict__.items()}

    @staticmethod
    def merge(parts: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for p in parts:
            for name, d in p.items():
                o = out.setdefault(name, {})
                for c, v in d.items():
                    o[c] = o.get(c, 0) + (float(v) if name in Metrics._FLOAT_FIELDS else int(v))
        return out

    @staticmethod
    def injected_noise(metrics: dict[str, dict[str, float]], classes=None) -> float:
        """``sqrt(sum perturbation_sq / sum signal_sq)`` over ``classes`` (all by default).

        The relative L2 size of what the link changed in the received float payload (after any
        receive guard) against the error-free payload: 0 with no flips, ``inf`` when a flip left
        an Inf/NaN that nothing removed, ``nan`` when nothing was measured (BER 0).
        """
        p = metrics.get("perturbation_sq", {})
        s = metrics.get("signal_sq", {})
        keys = set(p) | set(s) if classes is None else set(classes)
        num = sum(float(p.get(k, 0.0)) for k in keys)
        den = sum(float(s.get(k, 0.0)) for k in keys)
        if den <= 0.0:
            return 0.0 if num == 0.0 and s else float("nan")
        return math.sqrt(num / den) if math.isfinite(num) else float("inf")


def _values(u8: np.ndarray, dtype: torch.dtype, elem: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # NaN/Inf produced by a flip are values to log, not warnings
        return _values_raw(u8, dtype, elem)


def _values_raw(u8: np.ndarray, dtype: torch.dtype, elem: np.ndarray) -> np.ndarray:
    if dtype == torch.float32:
        return u8.view(np.float32)[elem].astype(np.float64)
    if dtype == torch.float64:
        return u8.view(np.float64)[elem].copy()
    if dtype == torch.float16:
        return u8.view(np.float16)[elem].astype(np.float64)
    if dtype == torch.uint8:
        return u8[elem].astype(np.float64)
    if dtype in _FLOAT8:  # numpy has no float8: decode through torch
        return torch.from_numpy(np.ascontiguousarray(u8[elem])).view(dtype).double().numpy()
    # bfloat16: the high half of an fp32
    return (u8.view(np.uint16)[elem].astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def corrupt_received(t: torch.Tensor, offsets: np.ndarray, *, protect_sign_exponent: bool = False,
                     _force_torch_path: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Flip the bits ``offsets`` (message bit numbering) of the received tensor ``t`` in place.

    ``t`` must be a contiguous float tensor (CPU: numpy in place; CUDA: index ops on the device);
    it is modified through ``t.detach()``. Offsets at
    or beyond ``8 * t.nbytes`` are not applied (they hit framing overhead). With
    ``protect_sign_exponent`` the flips in sign/exponent bits are removed (unequal protection).

    Returns ``(element, bit_in_element, old, new, applied_index, n_protected)`` where
    ``applied_index`` indexes the flips that were applied within ``offsets``.
    """
    if not (is_float(t) or t.dtype == torch.uint8):
        raise TypeError(f"corrupt_received: dtype {t.dtype} is not a dtype the wrapper may corrupt "
                        "(float, or the uint8 buffer of an FSDP2 all-gather)")
    if not t.is_contiguous():
        raise ValueError("corrupt_received: tensor must be contiguous")
    offsets = np.asarray(offsets, dtype=np.int64)
    if t.device.type == "cpu" and t.dtype in _WORD and not _force_torch_path:
        return _corrupt_cpu(t.detach().view(-1).numpy(), t.dtype, np.ascontiguousarray(offsets),
                            protect_sign_exponent)[:6]
    nbits = 8 * t.numel() * t.element_size()
    idx = np.flatnonzero((offsets >= 0) & (offsets < nbits))
    offs = offsets[idx]
    isz = t.element_size()
    elem = offs // (8 * isz)
    bit = offs % (8 * isz)
    n_prot = 0
    if protect_sign_exponent and len(offs) and t.dtype != torch.uint8:  # a uint8 buffer has no float layout
        lo, hi = protected_bit_range(t.dtype)
        keep = (bit < lo) | (bit > hi)
        n_prot = int(len(offs) - keep.sum())
        offs, elem, bit, idx = offs[keep], elem[keep], bit[keep], idx[keep]
    if len(offs) == 0:
        z = np.empty(0, dtype=np.int64)
        return z, z, np.empty(0), np.empty(0), z, n_prot
    if t.device.type == "cpu" and not _force_torch_path:
        u8 = t.detach().view(-1).view(torch.uint8).numpy()
        old = _values(u8, t.dtype, elem)
        # offsets are distinct; two flips in one byte are two entries of np.bitwise_xor.at
        np.bitwise_xor.at(u8, offs >> 3, (np.uint8(1) << (offs & 7).astype(np.uint8)))
        new = _values(u8, t.dtype, elem)
        return elem, bit, old, new, idx, n_prot
    # device path (CUDA with NCCL): one XOR mask per distinct byte, applied with index ops on the
    # device (no per-element host loop); only the touched elements travel to the host for the log
    dev = t.device
    byte, first = np.unique(offs >> 3, return_index=True)
    masks = np.bitwise_or.reduceat((np.uint8(1) << (offs & 7).astype(np.uint8)), first)
    flat = t.detach().view(-1)
    u8t = flat.view(torch.uint8)
    e_u, inv = np.unique(elem, return_inverse=True)
    eidx = torch.from_numpy(e_u).to(dev, non_blocking=True)
    before = flat[eidx].double()
    bidx = torch.from_numpy(byte).to(dev, non_blocking=True)
    u8t.index_put_((bidx,), u8t[bidx] ^ torch.from_numpy(masks).to(dev, non_blocking=True))
    after = flat[eidx].double()
    both = torch.stack([before, after]).cpu().numpy()  # one small transfer: 2 x touched elements
    return elem, bit, both[0][inv], both[1][inv], idx, n_prot


def _corrupt_cpu(vals: np.ndarray, dtype: torch.dtype, offsets: np.ndarray, protect: bool) -> tuple:
    """:func:`corrupt_received` on the numpy view ``vals`` of a CPU fp32/fp64 tensor, in one Numba pass.

    Returns its six results plus ``nonfinite`` (some flipped element is Inf/NaN afterwards).
    """
    from integration._kernels import flip_bits

    lo, hi = _SIGN_EXP_BITS[dtype] if protect else (1, 0)
    k = offsets.size
    ints, floats = np.empty((3, k), np.int64), np.empty((2, k))
    n, n_prot, n_bad = flip_bits(vals, vals.view(_WORD[dtype]), offsets, 8 * vals.itemsize, lo, hi, ints, floats)
    return ints[0, :n], ints[1, :n], floats[0, :n], floats[1, :n], ints[2, :n], int(n_prot), n_bad > 0


def apply_guard(t: torch.Tensor, clamp: float) -> int:
    """NaN/Inf -> 0 then clamp to ``[-clamp, clamp]`` in place (through ``detach``); returns elements changed.

    A contiguous fp32/fp64 CPU tensor takes one Numba pass over its numpy view; other dtypes and
    devices take torch ops, where one reduction pass (``aminmax``) decides the common clean case
    without allocating and only a tensor with something out of range pays for the masks.
    """
    x = t.detach()
    if x.numel() == 0:
        return 0
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and x.is_contiguous():
        from integration._kernels import guard_inplace

        return int(guard_inplace(x.view(-1).numpy(), float(clamp)))
    lo, hi = torch.aminmax(x)
    lo, hi = float(lo), float(hi)
    if -clamp <= lo and hi <= clamp:  # False for NaN; an Inf is outside any finite clamp
        return 0
    out = (x > clamp) | (x < -clamp) | torch.isnan(x)
    n = int(torch.count_nonzero(out))
    x.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0).clamp_(-clamp, clamp)
    return n


_BOUND_CACHE: dict[tuple, float] = {}


def clamp_bound(dtype: torch.dtype, clamp: float) -> float:
    """The clamp as a receiver of ``dtype`` can write it: the largest finite ``dtype`` value ``<= clamp``.

    The clamp itself for fp32/fp64/fp16/bf16 (the class bounds 1 and 100 are exact there); for
    float8 the value just below it when it is not representable (e4m3fn: 100 -> 96, because
    rounding to nearest would give 104, above the bound; e5m2: 100 -> 96) and the format's
    largest finite value (e4m3fn 448, e5m2 57344) for a larger or infinite clamp.
    """
    if dtype not in _FLOAT8:
        return float(clamp)
    key = (dtype, float(clamp))
    b = _BOUND_CACHE.get(key)
    if b is None:
        t = torch.tensor([min(float(clamp), 1e30)], dtype=torch.float32).to(dtype)
        u = t.view(torch.uint8)
        # positive float8 values increase with their bit pattern: step down to the bound
        while not (math.isfinite(float(t[0])) and float(t[0]) <= clamp):
            u -= 1
        b = _BOUND_CACHE[key] = float(t[0])
    return b


def guard_values(x: torch.Tensor, idx: torch.Tensor, clamp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``nan_to_zero_clamp`` on the elements ``idx`` of the flat float tensor ``x``, with device ops only.

    Each element becomes 0 if non-finite, else is clamped to ``[-b, b]`` with ``b =``
    :func:`clamp_bound` ``(x.dtype, clamp)``. float8 elements are guarded in fp32 and written
    back through the byte view (torch 2.13 has no CPU ``index_copy_`` for float8; every guarded
    value is a float8 value, so the write is exact). Returns ``(changed, values_after)``: a bool
    and a float tensor per index, on ``x``'s device (nothing read to the host).
    """
    c = clamp_bound(x.dtype, clamp)
    f8 = x.dtype in _FLOAT8
    v = x[idx].float() if f8 else x[idx]
    bad = ~torch.isfinite(v) | (v > c) | (v < -c)
    nv = torch.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0).clamp_(-c, c)
    if f8:
        x.view(torch.uint8).index_copy_(0, idx, nv.to(x.dtype).view(torch.uint8))
    else:
        x.index_copy_(0, idx, nv)
    return bad, nv


def guard_flipped(t: torch.Tensor, elems: np.ndarray, clamp: float) -> tuple[int, np.ndarray]:
    """The ``nan_to_zero_clamp`` receive guard on the flipped elements ``elems`` of ``t`` only.

    ``elems`` are distinct element indices of the contiguous tensor ``t`` (flat numbering) that
    the link's flips changed; each becomes 0 if non-finite, else is clamped to
    ``[-clamp, clamp]``. Elements the link did not touch are never changed (so an error-free
    message is delivered bit-identical, and a clean Inf from fp16 loss scaling still reaches
    ``GradScaler``). Returns ``(n_changed, values_after)`` (float64, one per ``elems``).
    """
    x = t.detach().view(-1)
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"guard_flipped: a {x.dtype} tensor has no float layout to guard "
                         "(e.g. FSDP2's uint8 all-gather of mixed-dtype parameters)")
    elems = np.ascontiguousarray(elems, dtype=np.int64)
    if len(elems) == 0:
        return 0, np.empty(0)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        from integration._kernels import guard_at

        final = np.empty(len(elems))
        n = guard_at(x.numpy(), elems, float(clamp), final)
        return int(n), final
    idx = torch.from_numpy(elems).to(x.device, non_blocking=True)
    bad, nv = guard_values(x, idx, clamp)
    out = torch.stack([bad.double(), nv.double()]).cpu().numpy()
    return int(out[0].sum()), out[1]


def values_at(t: torch.Tensor, elems: np.ndarray) -> np.ndarray:
    """float64 values of the flat elements ``elems`` of the contiguous tensor ``t`` (small gather)."""
    x = t.detach().view(-1)
    if x.device.type == "cpu":
        with np.errstate(all="ignore"):
            return x[torch.from_numpy(np.asarray(elems, dtype=np.int64))].double().numpy()
    return x[torch.from_numpy(np.asarray(elems, dtype=np.int64)).to(x.device)].double().cpu().numpy()
