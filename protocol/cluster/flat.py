"""Alpha-beta time model of collectives over a cluster of 400G/200G Ethernet links (no torch).

The model follows the style of NCCL's own cost model: an operation is a sequence of *steps*;
in a step every participating rank sends one message to a neighbour over a *path* of links
and switches, and the step costs the path latency ``alpha`` plus the message's serialisation
time.  Three parts are reported separately (:class:`CollectiveTime`): bandwidth, latency and
the expected cost of resending dropped frames.

Formulas (``N`` ranks, ``S`` bytes, ``t(x)`` the serialisation time of ``x`` payload bytes
framed as RoCEv2 packets at the link's MAC rate, ``L = ceil(log2 N)``):

=====================  ============  ======================  ====================================
op / algo              steps         bandwidth term          source
=====================  ============  ======================  ====================================
allreduce ring         ``2(N-1)``    ``2(N-1) t(S/N)``       Thakur, Rabenseifner, Gropp,
                                                             "Optimization of Collective
                                                             Communication Operations in MPICH",
                                                             IJHPCA 19(1), 2005 (ring =
                                                             reduce-scatter + all-gather)
reduce_scatter ring    ``N-1``       ``(N-1) t(S/N)``        same (S = the full input)
allgather ring         ``N-1``       ``(N-1) t(S/N)``        same (S = the full output)
allreduce tree         ``2L``        ``2 t(S)``              pipelined (double) binary tree,
                                                             reduce up + broadcast down, as NCCL's
                                                             tree [S] (tradeoff notes sec. 3)
broadcast ring         ``N-1``       ``t(S)``                pipelined chain (NCCL ring
                                                             broadcast): the latency of N-1 hops
                                                             plus one pass of the data
broadcast tree         ``L``         ``L t(S)``              binomial tree (Thakur et al. 2005,
                                                             short messages)
sendrecv               ``1``         ``t(S)``                one hop
=====================  ============  ======================  ====================================

So ring all-reduce takes ``2(N-1)`` sequential steps, each paying ``alpha + t(S/N)``:
``T = 2(N-1) alpha + 2(N-1) t(S/N)`` (= ``2(N-1) alpha + 2 (N-1)/N S/B`` without framing).
The nccl-tests "bus bandwidth" (``busbw = algbw x factor``, ``algbw = S / T``; factor
``2(N-1)/N`` for all-reduce, ``(N-1)/N`` for reduce-scatter / all-gather, 1 otherwise; nccl-tests
``doc/PERFORMANCE.md``) is reported so the model can be checked against NCCL measurements.

Path latency of one step (one-way, [I] defaults in :class:`Cluster`, every one settable to 0)::

    alpha = 2 nic_ns + switches x switch_ns + links x (phy_ns + fiber_m x fiber_ns_per_m) + step_ns

with ``links`` the PHY traversals of the path (single switch: 2; two-tier leaf-spine across
leaves: 4; three-tier across pods: 6; ``switches = links - 1``): every switch port terminates
the PHY, so every link pays its own FEC decode.  ``phy_ns`` is the added receive latency of
the link's (code, FEC mode) from :mod:`protocol.latency` (``total_ns``, the worst case that
``phy802 latency`` prints).  Hence at BER 0 two modes differ by exactly
``link_traversals x (phy_ns(a) - phy_ns(b))`` with ``link_traversals = steps x links``.

``t(x)``: the payload is cut into RoCEv2 frames (:func:`protocol.framing.layout`, headers,
ICRC, FCS, IPG, 8-octet alignment) and sent at the MAC rate (400 or 200 Gb/s: the PCS stream
rate, the line rate net of 256b/257b, RS parity and alignment markers, :mod:`protocol.framing`),
or at ``link_gbps`` when given.

Resends (expected value).  A frame is dropped on a link with probability ``q`` at pre-FEC BER
``p`` (independent bit errors, :func:`frame_loss_probability`; closed forms of
:mod:`phy802.theory`).  Over a path of ``h`` links ``q_path = 1 - (1-q)^h``.  A step with ``c``
concurrent messages of ``f`` frames is delayed when any of its ``c f`` frames is dropped:
``P_step = 1 - (1 - q_path)^(c f)``.  A delay costs one recovery, divided by ``1 - q_path`` for
the resends that drop again (geometric)::

    transport (go-back-N, RoCEv2 [I]): rtt = 2 alpha,           resend min(W, f) frames
    llr (link-level retry, UEC 1.0):   rtt = retry_ns,          resend min(W_link, f) frames
    recovery = rtt + min(W, f) x frame_time,   W = ceil(rtt / frame_time)  (window in flight)

with ``retry_ns`` the link round trip of :mod:`protocol.latency` (``LatencyBreakdown.retry_ns``:
NAK back and replay forth over one link, fibre and PHY pipelines included, with this cluster's
fibre length).  Several drops in one step on different links
overlap in time and are counted once (a lower bound); a dropped frame is never free.

``Cluster.header_fallback`` (default off, as :mod:`protocol.delivery` drops): a reading of
SPEC.md D3 in which an error-tolerant frame whose header check fails on the speculative path
is taken from the corrected path instead of dropped [I].  Then, in ``bypass`` and ``unequal``,
a header hit costs the step one link's ``ieee`` FEC latency (``fallback_s``, a lower bound:
once per step), and only frames
the corrected path cannot deliver (``ieee``'s loss probability) are resent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..framing import CODES, FramingConfig, get_code, get_rate
from ..latency import LatencyConfig, added_latency
from ..modes import MODE_NAMES, get_mode

__all__ = [
    "OPS",
    "ALGOS",
    "TOPOLOGIES",
    "CODE_NAMES",
    "FEC_NAMES",
    "Cluster",
    "CollectiveTime",
    "phy_latency_ns",
    "frame_loss_probability",
    "collective_time",
    "bus_factor",
    "serialization_ns",
]

OPS: tuple[str, ...] = ("allreduce", "reduce_scatter", "allgather", "broadcast", "sendrecv")
ALGOS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "tree"),
    "reduce_scatter": ("ring",),
    "allgather": ("ring",),
    "broadcast": ("ring", "tree"),
    "sendrecv": ("direct",),
}
_OP_ALIASES = {"all_reduce": "allreduce", "all-reduce": "allreduce", "reduce-scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "all_gather": "allgather", "all-gather": "allgather",
               "send": "sendrecv", "recv": "sendrecv", "send_recv": "sendrecv", "p2p": "sendrecv"}
TOPOLOGIES: tuple[str, ...] = ("single-switch", "leaf-spine", "three-tier")
CODE_NAMES: tuple[str, ...] = tuple(CODES)  # kp4, kr4, rs272, none (protocol.framing)
FEC_NAMES: tuple[str, ...] = MODE_NAMES  # ieee, correct_no_indication, detect_only, bypass, unequal, llr


@dataclass(frozen=True, slots=True)
class Cluster:
    """A cluster of ``ranks`` endpoints, one NIC each, on ``rate`` Ethernet links.

    Defaults are typical values, inferred [I], not measured (docs/cluster.md);
    every latency can be set to 0.

    Parameters
    ----------
    ranks : int
        Number of ranks (>= 1).
    rate : str
        ``"400G"`` or ``"200G"`` (:data:`protocol.framing.RATES`).
    code, fec : str
        RS code on every link (``kp4``, ``kr4``, ``rs272``, ``none``) and receive mode
        (``ieee``, ``correct_no_indication``, ``detect_only``, ``bypass``, ``unequal``, ``llr``).
    ber : float
        Pre-FEC line bit error ratio of every link (independent errors), in [0, 0.5).
    topology : str
        ``single-switch`` (2 links per path), ``leaf-spine`` (4 links across leaves, 2 within a
        leaf) or ``three-tier`` (6 across pods, 4 across leaves, 2 within a leaf).
    ranks_per_leaf, ranks_per_pod : int
        Ranks under one leaf switch (default 32: a 64-port leaf, half its ports up) and under
        one pod (default 512).  A collective over more ranks than a leaf crosses the spine on
        its slowest step (rings are laid out leaf by leaf, as NCCL does, but one hop per step
        still crosses).
    path_links : int or None
        Override of the PHY traversals per path (then ``path_links - 1`` switches).
    switch_ns : float
        Cut-through latency of one switch, ns (default 500; 400G ASICs 300-800 ns [I]).
    nic_ns : float
        Latency of one NIC traversal, ns (default 500, two per path; 0.5-1 us each way [I]).
    fiber_m : float
        Fibre length of each link, metres (default 10).
    fiber_ns_per_m : float
        Propagation delay, ns per metre (default 5.0; c / 1.47 is 4.9 ns/m).
    step_ns : float
        Fixed software cost per step (kernel launch, protocol), ns (default 0).
    link_gbps : float or None
        Payload (MAC) rate of a link in Gb/s; default the rate's PCS stream rate (400 / 200).
    header_fallback : bool
        ``bypass``/``unequal`` frames with a header hit wait for the corrected path instead of
        being dropped (module docstring; default False, as :mod:`protocol.delivery`).
    latency : LatencyConfig
        Decoder pipeline parameters of :mod:`protocol.latency`.
    framing : FramingConfig
        RoCEv2 framing of :mod:`protocol.framing`.
    """

    ranks: int = 2
    rate: str = "400G"
    code: str = "kp4"
    fec: str = "ieee"
    ber: float = 0.0
    topology: str = "single-switch"
    ranks_per_leaf: int = 32
    ranks_per_pod: int = 512
    path_links: int | None = None
    switch_ns: float = 500.0
    nic_ns: float = 500.0
    fiber_m: float = 10.0
    fiber_ns_per_m: float = 5.0
    step_ns: float = 0.0
    link_gbps: float | None = None
    header_fallback: bool = False
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    framing: FramingConfig = field(default_factory=FramingConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, int) or isinstance(self.ranks, bool) or self.ranks < 1:
            raise ValueError(f"Cluster.ranks must be an int >= 1, got {self.ranks!r}")
        get_rate(self.rate)
        if self.code not in CODE_NAMES:
            raise ValueError(f"Cluster.code must be one of {', '.join(CODE_NAMES)}, got {self.code!r}")
        if self.fec not in FEC_NAMES:
            raise ValueError(f"Cluster.fec must be one of {', '.join(FEC_NAMES)}, got {self.fec!r}")
        if not (0.0 <= self.ber < 0.5):
            raise ValueError(f"Cluster.ber must be in [0, 0.5), got {self.ber!r}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"Cluster.topology must be one of {', '.join(TOPOLOGIES)}, got {self.topology!r}")
        for name in ("ranks_per_leaf", "ranks_per_pod"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Cluster.{name} must be an int >= 1, got {v!r}")
        if self.path_links is not None and (not isinstance(self.path_links, int) or self.path_links < 1):
            raise ValueError(f"Cluster.path_links must be None or an int >= 1, got {self.path_links!r}")
        for name in ("switch_ns", "nic_ns", "fiber_m", "fiber_ns_per_m", "step_ns"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"Cluster.{name} must be a finite number >= 0, got {v!r}")
        if self.link_gbps is not None and not (math.isfinite(self.link_gbps) and self.link_gbps > 0):
            raise ValueError(f"Cluster.link_gbps must be None or > 0, got {self.link_gbps!r}")

    # ---------------------------------------------------------------- derived quantities
    @property
    def links(self) -> int:
        """PHY traversals on the slowest path a collective over all ranks uses."""
        if self.path_links is not None:
            return self.path_links
        if self.ranks <= 1:
            return 0
        if self.topology == "single-switch" or self.ranks <= self.ranks_per_leaf:
            return 2
        if self.topology == "leaf-spine" or self.ranks <= self.ranks_per_pod:
            return 4
        return 6

    @property
    def switches(self) -> int:
        return max(0, self.links - 1)

    @property
    def payload_gbps(self) -> float:
        """MAC (PCS stream) rate in Gb/s: the code's line rate net of 256b/257b, parity and AM
        overhead (400 at 400G, 200 at 200G, for every code)."""
        if self.link_gbps is not None:
            return float(self.link_gbps)
        c = get_code(self.code)
        return c.line_gbps(self.rate) / c.line_per_stream(self.rate)

    @property
    def phy_ns(self) -> float:
        """Added receive latency of one link in this (code, fec), ns (:func:`phy_latency_ns`)."""
        return phy_latency_ns(self.code, self.fec, self.rate, self.latency)

    @property
    def link_ns(self) -> float:
        """One link's latency: PHY (FEC) + fibre, ns."""
        return self.phy_ns + self.fiber_m * self.fiber_ns_per_m

    @property
    def llr_rtt_ns(self) -> float:
        """Link-level retry round trip of one link, ns: ``LatencyBreakdown.retry_ns`` of
        :mod:`protocol.latency` with this cluster's fibre (``2 (fibre + other PHY + FEC) + replay``)."""
        cfg = replace(self.latency, llr_fiber_m=self.fiber_m, fiber_ns_per_m=self.fiber_ns_per_m)
        return float(added_latency("llr", self.rate, cfg, code=self.code).retry_ns)

    @property
    def alpha_ns(self) -> float:
        """One-way latency of one step's path, ns (module docstring)."""
        return 2 * self.nic_ns + self.switches * self.switch_ns + self.links * self.link_ns + self.step_ns

    def with_(self, **changes) -> "Cluster":
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)


# ---------------------------------------------------------------- per-link PHY from protocol.latency

def phy_latency_ns(code: str, fec: str, rate: str = "400G", cfg: LatencyConfig = LatencyConfig()) -> float:
    """Added receive latency (ns) of one PHY traversal: ``added_latency(fec, rate, cfg, code=code).total_ns``."""
    if code not in CODE_NAMES:
        raise ValueError(f"unknown code {code!r}; choose from {', '.join(CODE_NAMES)}")
    if fec not in FEC_NAMES:
        raise ValueError(f"unknown FEC mode {fec!r}; choose from {', '.join(FEC_NAMES)}")
    return float(added_latency(fec, rate, cfg, code=code).total_ns)


def _rs_code(code: str):
    from phy802 import theory

    return theory.rs_code(code)


def _decoder(fec: str) -> tuple[str, bool]:
    """``(decoder, tolerant)`` of a receive mode (``llr`` decodes and drops like ``ieee``)."""
    m = get_mode(fec)
    return m.decoder, m.tolerant


def _p_any(p: float, n: float) -> float:
    """``1 - (1 - p)^n`` without cancellation."""
    if p <= 0 or n <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    return -math.expm1(n * math.log1p(-p))


def frame_loss_probability(code: str, fec: str, ber: float, payload_octets: int, rate: str = "400G",
                           framing: FramingConfig = FramingConfig()) -> float:
    """Probability that one link drops a RoCEv2 frame of ``payload_octets`` at pre-FEC BER ``ber``.

    Independent bit errors of probability ``p``; ``ps = 1 - (1-p)^10`` per RS symbol;
    ``FER = P(Binomial(n, ps) > t)`` (:func:`phy802.theory.rs_codeword_error_ratio`).
    A frame of ``F`` line bits (the code's line bits per stream bit,
    :meth:`protocol.framing.CodeGeometry.line_per_stream`) overlaps ``F / (2 n m) + 1`` codeword
    pairs on average; a pair is marked when either codeword is (Cl.119 marks the pair):

    * correcting, non-tolerant (``ieee``, ``llr``): ``q = 1 - (1 - FER_pair)^pairs``;
    * ``detect_only``: as above with ``FER = 1 - (1 - ps)^n`` (any symbol error marks);
    * tolerant (``bypass``, ``unequal``, ``correct_no_indication``): the frame is dropped only
      when its headers (``8 x header_octets`` bits) or a 257b block header bit (one per block,
      an invalid block becomes error blocks) is hit, at the raw BER, or for
      ``correct_no_indication`` at the post-FEC BER (:func:`phy802.theory.post_fec_ber`);
    * ``code=none`` with a non-tolerant mode: any bit up to the FCS fails the frame.
    """
    if not (0.0 <= ber < 0.5):
        raise ValueError(f"ber must be in [0, 0.5), got {ber!r}")
    if ber == 0.0 or payload_octets <= 0:
        return 0.0
    from phy802 import theory

    decoder, tolerant = _decoder(fec)
    stream_octets = int(framing.frame_octets(int(payload_octets)))
    stream_bits = 8 * stream_octets
    line_bits = stream_bits * get_code(code).line_per_stream(rate)
    hdr_bits = 8 * framing.header_octets + math.ceil(stream_bits / 256)
    if code == "none":
        if tolerant:
            return _p_any(ber, hdr_bits)
        return _p_any(ber, stream_bits - 8 * framing.ipg)
    rs = _rs_code(code)
    if tolerant:
        p = float(theory.post_fec_ber(ber, rs)) if decoder == "correct" else ber
        return _p_any(p, hdr_bits)
    ps = float(theory.symbol_error_prob(ber, rs.m))
    if decoder == "detect":
        fer = _p_any(ps, rs.n)
    else:
        fer = float(theory.rs_codeword_error_ratio(ps, rs))
    pairs = line_bits / (2 * rs.n * rs.m) + 1
    return _p_any(fer, 2 * pairs)


# ---------------------------------------------------------------- the collective model

@dataclass(frozen=True, slots=True)
class CollectiveTime:
    """Modelled time of one collective, in seconds, and its parts.

    ``time_s = bandwidth_s + latency_s + resend_s + fallback_s``; ``phy_s`` is the part of ``latency_s`` spent
    in FEC receive paths (``link_traversals x phy_ns``).  ``bus_gbps`` is the nccl-tests bus
    bandwidth of the modelled time (payload bits).
    """

    op: str
    algo: str
    ranks: int
    bytes: int
    code: str
    fec: str
    ber: float
    time_s: float
    bandwidth_s: float
    latency_s: float
    resend_s: float
    fallback_s: float
    phy_s: float
    steps: int
    path_links: int
    link_traversals: int
    alpha_ns: float
    phy_ns: float
    payload_gbps: float
    frame_loss: float
    step_drop_probability: float
    recovery_ns: float
    retry: str
    algbw_gbps: float
    bus_gbps: float


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests ``busbw / algbw`` factor (doc/PERFORMANCE.md)."""
    n = ranks
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "allgather"):
        return (n - 1) / n
    return 1.0


def _norm_op(op: str) -> str:
    key = str(op).strip().lower()
    key = _OP_ALIASES.get(key, key)
    if key not in OPS:
        raise ValueError(f"unknown collective op {op!r}; choose from {', '.join(OPS)}")
    return key


def _schedule(op: str, algo: str, n: int, size: int) -> tuple[int, int, int, int]:
    """``(steps, bytes per step on the critical path, bandwidth passes of that size, concurrent messages)``.

    The bandwidth term is ``passes x t(bytes per step)``; see the module docstring's table.
    """
    lg = max(1, math.ceil(math.log2(n))) if n > 1 else 0
    chunk = -(-size // n)
    if op == "allreduce" and algo == "ring":
        return 2 * (n - 1), chunk, 2 * (n - 1), n
    if op in ("reduce_scatter", "allgather"):
        return n - 1, chunk, n - 1, n
    if op == "allreduce":  # tree: 2L latency steps, 2 passes of S (pipelined)
        return 2 * lg, size, 2, n - 1
    if op == "broadcast" and algo == "ring":  # pipelined chain: N-1 hops, one pass of S
        return n - 1, size, 1, n - 1
    if op == "broadcast":  # binomial tree
        return lg, size, lg, max(1, n // 2)
    return 1, size, 1, 1  # sendrecv


def serialization_ns(payload_octets: int, cluster: Cluster) -> float:
    """``t(x)``: time to send ``payload_octets`` as RoCEv2 frames at the MAC rate, ns."""
    return _stream_bits(int(payload_octets), cluster.framing) / cluster.payload_gbps


def _stream_bits(payload_octets: int, framing: FramingConfig) -> int:
    """``protocol.framing.layout(payload_octets).stream_bits`` in O(1) (full frames + the last one),
    so that terabyte messages need no per-frame arrays."""
    if payload_octets <= 0:
        return 0
    mtu = framing.rdma_mtu
    k = -(-payload_octets // mtu)
    last = payload_octets - (k - 1) * mtu
    return 8 * ((k - 1) * int(framing.frame_octets(mtu)) + int(framing.frame_octets(last)))


def collective_time(op: str, size_bytes: float, cluster: Cluster, algo: str | None = None) -> CollectiveTime:
    """Modelled time of ``op`` on ``size_bytes`` over ``cluster`` (module docstring for the model).

    ``algo`` defaults to ``ring`` (``direct`` for ``sendrecv``).  ``size_bytes`` is the full
    buffer (all-reduce, broadcast, send), the full input (reduce-scatter) or the full output
    (all-gather).  One rank, or zero bytes, costs nothing.
    """
    op = _norm_op(op)
    algo = (ALGOS[op][0] if algo is None else str(algo).strip().lower())
    if algo not in ALGOS[op]:
        raise ValueError(f"algo {algo!r} is not modelled for {op}; choose from {', '.join(ALGOS[op])}")
    if not (isinstance(size_bytes, (int, float)) and math.isfinite(size_bytes) and size_bytes >= 0):
        raise ValueError(f"size_bytes must be a finite number >= 0, got {size_bytes!r}")
    size = int(math.ceil(size_bytes))
    n = cluster.ranks if op != "sendrecv" else max(cluster.ranks, 2)
    c = cluster
    retry = "llr" if c.fec == "llr" else "transport"
    if (n <= 1 and op != "sendrecv") or size == 0:
        return CollectiveTime(op, algo, c.ranks, size, c.code, c.fec, c.ber, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, c.links, 0,
                              c.alpha_ns, c.phy_ns, c.payload_gbps, 0.0, 0.0, 0.0, retry, math.inf, math.inf)
    links = c.links if op != "sendrecv" or c.path_links is not None or c.ranks > 1 else 2
    steps, per_step, passes, concurrent = _schedule(op, algo, n, size)
    alpha = c.alpha_ns
    if links != c.links:  # sendrecv on a 1-rank cluster description: one switch hop
        alpha = 2 * c.nic_ns + (links - 1) * c.switch_ns + links * c.link_ns + c.step_ns
    bw_ns = passes * serialization_ns(per_step, c)
    lat_ns = steps * alpha
    # resends: expected recovery per step (module docstring)
    mtu = c.framing.rdma_mtu
    q = frame_loss_probability(c.code, c.fec, c.ber, min(mtu, per_step), c.rate, c.framing)
    frames = -(-per_step // mtu)
    frame_ns = serialization_ns(min(mtu, per_step), c)
    fallback_ns = 0.0
    if c.header_fallback and c.fec in ("bypass", "unequal") and c.code != "none" and q > 0:
        p_fb = _p_any(_p_any(q, links), concurrent * frames)
        fallback_ns = steps * p_fb * phy_latency_ns(c.code, "ieee", c.rate, c.latency)
        q = frame_loss_probability(c.code, "ieee", c.ber, min(mtu, per_step), c.rate, c.framing)
    q_path = _p_any(q, links)
    p_step = _p_any(q_path, concurrent * frames)
    if retry == "llr":
        rtt = c.llr_rtt_ns
    else:
        rtt = 2 * alpha
    window = max(1, math.ceil(rtt / frame_ns)) if frame_ns > 0 else 1
    recovery = rtt + min(window, frames) * frame_ns
    if p_step <= 0:
        resend_ns = 0.0
    elif q_path >= 1.0:
        resend_ns = math.inf  # every frame drops: the collective never completes
    else:
        resend_ns = steps * p_step * recovery / (1.0 - q_path)
    total_ns = bw_ns + lat_ns + resend_ns + fallback_ns
    time_s = total_ns * 1e-9
    algbw = 8 * size / total_ns if total_ns > 0 else math.inf
    return CollectiveTime(
        op=op, algo=algo, ranks=n, bytes=size, code=c.code, fec=c.fec, ber=c.ber,
        time_s=time_s, bandwidth_s=bw_ns * 1e-9, latency_s=lat_ns * 1e-9, resend_s=resend_ns * 1e-9,
        fallback_s=fallback_ns * 1e-9,
        phy_s=steps * links * c.phy_ns * 1e-9, steps=steps, path_links=links, link_traversals=steps * links,
        alpha_ns=alpha, phy_ns=c.phy_ns, payload_gbps=c.payload_gbps, frame_loss=q,
        step_drop_probability=p_step, recovery_ns=recovery, retry=retry,
        algbw_gbps=algbw, bus_gbps=algbw * bus_factor(op, n),
    )
