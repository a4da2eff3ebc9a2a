"""A GPU cluster as it is built: nodes, the scale-up domain inside them, NICs, and the fabric.

Only traffic between nodes crosses optical links; inside a node GPUs talk over the scale-up
domain (NVLink / NVSwitch, PCIe).  Every NIC-switch and switch-switch hop is one link with its
own PHY, so a FEC mode's receive latency is paid once per link a message crosses, and that is
where its frames can be lost.  This module says, for a pair of nodes, how many links and
switches the path between them has (:meth:`ClusterSpec.path`); :mod:`protocol.cluster.nccl`
counts which steps of which algorithm cross which paths.

Fabrics (``topology``), with ``R`` the switch radix (ports) and ``o`` the oversubscription
(down ports : up ports of a leaf; 1 = non-blocking):

=================  ==========================================================================
``single-switch``  every NIC on one switch: 2 links, 1 switch per path; needs
                   ``nodes x nics_per_node <= R``
``rail-optimized`` NIC *i* of every node on the leaf of rail *i* (NVIDIA's DGX SuperPOD layout):
                   up to ``R`` nodes a rail needs no spine (2 links); beyond, rail groups of
                   ``R/2`` nodes joined by spines (4 links between groups), at most
                   ``R/2 x R`` nodes.  Cross-rail traffic is moved to the right rail over
                   NVLink first (NCCL's PXN), so it stays on one rail.
``leaf-spine``     ``floor(R o / (1 + o)) / nics_per_node`` nodes per leaf (2 links inside a
                   leaf, 4 across leaves), at most ``R`` leaves
``three-tier``     leaves as leaf-spine, ``R/2`` leaves per pod (4 links across leaves of a
                   pod, 6 across pods), at most ``R`` pods
=================  ==========================================================================

Scale-up domains (per GPU, per direction; vendors' datasheets, [S]): ``nvlink3`` 300 GB/s
(A100), ``nvlink4`` 450 GB/s (H100, 900 GB/s bidirectional), ``nvlink5`` 900 GB/s (B200),
``pcie`` 48 GB/s (Gen5 x16 as achieved [I]), ``none`` (one GPU per node).

Each link has its own PHY: the two NIC-leaf links of a path run ``code``/``fec``/``ber``, the
switch-switch links beyond them ``spine_code``/``spine_fec``/``spine_ber`` (default the same).

Defaults tagged [I] are typical values; every one is a field.  Presets (:data:`PRESETS`) name
common machines; ``flat-ethernet`` is the project's earlier flat model
(:mod:`protocol.cluster.flat`), kept so that its numbers stay reproducible.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from ..framing import CODES, FramingConfig
from ..latency import LatencyConfig
from ..modes import MODE_NAMES

__all__ = ["RATES_GBPS", "SCALE_UP", "TOPOLOGIES", "TRANSPORTS", "GPUS", "ClusterSpec", "PRESETS", "preset",
           "PRESET_NAMES"]

#: MAC rate of one NIC port in Gb/s (the ``--rate`` choices)
RATES_GBPS: dict[str, float] = {"200G": 200.0, "400G": 400.0, "800G": 800.0, "1.6T": 1600.0}
#: scale-up bandwidth per GPU per direction, GB/s, and the NCCL latency class of its links
SCALE_UP: dict[str, tuple[float, str]] = {"nvlink3": (300.0, "nvlink"), "nvlink4": (450.0, "nvlink"),
                                          "nvlink5": (900.0, "nvlink"), "pcie": (48.0, "pci"), "none": (0.0, "pci")}
TOPOLOGIES: tuple[str, ...] = ("single-switch", "rail-optimized", "leaf-spine", "three-tier")
#: ``ib``/``roce``: reliable connection, go-back-N; ``selective``: selective repeat (IRN, UEC)
#: ``efa``: AWS EFA (SRD: out-of-order, selective resend); ``tcpxo``: GPUDirect-TCPXO (TCP with SACK);
#: the transport also sets NCCL's per-step network latency (``nccl_tuning.json`` ``net_latency_us``)
TRANSPORTS: tuple[str, ...] = ("ib", "roce", "selective", "efa", "tcpxo")
GPUS: tuple[str, ...] = ("volta", "ampere", "hopper", "blackwell")


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster of ``nodes x gpus_per_node`` GPUs (module docstring for the fabric rules).

    Model constants that are not NCCL's table (:mod:`protocol.cluster.nccl`):

    * ``net_efficiency``: the share of a NIC's rate a collective gets (default 0.94: NVIDIA's
      "expect 46-48 GB/s per NDR NIC" of 50, nccl-tests issue 290 [S]); ``--calibrate`` fits it.
    * ``ring_intra_efficiency``: ring bus bandwidth inside a node over the scale-up rate (default
      0.82: ~370 GB/s of H100's 450 GB/s NVLink 4 "with the protocol overhead (~20%)", NCCL's
      maintainer in nccl-tests issue 212 [S]).
    * ``nvls_busbw_per_up``: NVLink SHARP all-reduce bus bandwidth over the scale-up rate on Hopper
      (default 1.058: 476 GB/s single-node in nccl-tests issue 290, "~480GB/s" peak in issue 212
      [C]); other generations scale by NCCL's ``nvlsEfficiency``.
    * ``latency_offset_us``: added to every collective (``--calibrate`` fits it; default 0).
    * ``algo_latency_us`` / ``algo_bw_factor``: per-algorithm corrections to NCCL's table, as
      ``((algo, value), ...)`` pairs (default none: NCCL's values): microseconds added to that
      algorithm's latency, and a factor on its bandwidth.  NCCL's table is NVIDIA's fit to an
      InfiniBand reference machine; a transport with its own per-message cost (GPUDirect-TCPXO's
      host-side receive path, sockets) or its own per-channel rate shifts each algorithm by a
      different amount, because each has its own pipeline depth and channel count.  They enter the
      algorithm choice as NCCL's own entries would (what a tuner plugin does); ``--calibrate`` fits
      them (``protocol.cluster.ncclfile``).
    * ``sustained_busbw_GBps``: a ceiling on the bus bandwidth of any collective (default None: no
      ceiling), for a bottleneck off the pipelined path (a shared PCIe switch or root complex, a
      host-staged copy, a degraded link): ``time >= bytes x busbw factor / sustained``.  It leaves
      small sizes alone and makes the measured bus bandwidth *fall* to a plateau at large ones,
      which no ``latency + bytes / bandwidth`` form can; ``--calibrate`` fits it where the run
      shows one.  A healthy cluster has none.
    * ``gpu_pcie_GBps``: what one GPU's PCIe link carries to its NICs (default 48: Gen5 x16 as
      achieved [I], the ``pcie`` scale-up rate); binds only where a node has more NICs than GPUs
      (one GPU driving several NICs, nccl-tests issue 232).
    * ``switch_ns``, ``nic_ns``, ``fiber_m``: the path beyond NCCL's reference path (one switch,
      two links, KP4 ``ieee``), whose latency NCCL's table already holds [I].
    * ``burst_pb``: None for independent bit errors (the closed forms); else the link's errors come
      from a 1-tap DFE error-propagation chain over PAM4 symbols (:meth:`phy802.theory.ErrorChain.dfe`,
      burst continuation probability ``burst_pb``, the same BER), priced exactly by
      :func:`phy802.theory.markov_codeword_error_ratio` (``transport.frame_loss``).
    * Transport: ``timeout`` (``NCCL_IB_TIMEOUT``, RTO = 4.096 us x 2^timeout, default 20),
      ``retry_cnt`` (``NCCL_IB_RETRY_CNT``, default 7), ``llr_retries`` (link-level replays before
      the loss reaches the transport, default 3 [I]), ``llr_buffer_frames`` (replay buffer, default
      64 frames [I]).
    """

    nodes: int = 2
    gpus_per_node: int = 8
    nics_per_node: int = 8
    rate: str = "400G"
    scale_up: str = "nvlink4"
    gpu: str = "hopper"
    topology: str = "rail-optimized"
    radix: int = 64
    oversubscription: float = 1.0
    transport: str = "ib"
    code: str = "kp4"
    fec: str = "ieee"
    ber: float = 0.0
    spine_code: str | None = None
    spine_fec: str | None = None
    spine_ber: float | None = None
    burst_pb: float | None = None
    nvls: bool | None = None
    collnet: bool = False
    cpu: str = "intel"
    channels: int | None = None
    gpu_pcie_GBps: float = 48.0
    net_efficiency: float = 0.94
    ring_intra_efficiency: float = 0.82
    nvls_busbw_per_up: float = 1.058
    latency_offset_us: float = 0.0
    algo_latency_us: tuple = ()
    algo_bw_factor: tuple = ()
    sustained_busbw_GBps: float | None = None
    switch_ns: float = 300.0
    nic_ns: float = 500.0
    fiber_m: float = 10.0
    fiber_ns_per_m: float = 5.0
    timeout: int = 20
    retry_cnt: int = 7
    llr_retries: int = 3
    llr_buffer_frames: int = 64
    name: str = "custom"
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    framing: FramingConfig = field(default_factory=FramingConfig)

    def __post_init__(self) -> None:
        def flag(name: str) -> str:
            return "--" + name.replace("_", "-")

        for name in ("nodes", "gpus_per_node", "radix", "timeout", "retry_cnt", "llr_retries", "llr_buffer_frames"):
            v = getattr(self, name)
            lo = 0 if name in ("timeout", "retry_cnt", "llr_retries") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{flag(name)} must be an int >= {lo}, got {v!r}")
        if isinstance(self.nics_per_node, bool) or not isinstance(self.nics_per_node, int) or self.nics_per_node < 0:
            raise ValueError(f"--nics-per-node must be an int >= 0, got {self.nics_per_node!r}")
        if self.nodes > 1 and self.nics_per_node < 1:
            raise ValueError(f"--nics-per-node must be >= 1 when --nodes > 1, got {self.nics_per_node}")
        if self.rate not in RATES_GBPS:
            raise ValueError(f"--rate must be one of {', '.join(RATES_GBPS)}, got {self.rate!r}")
        if self.scale_up not in SCALE_UP:
            raise ValueError(f"--scale-up must be one of {', '.join(SCALE_UP)}, got {self.scale_up!r}")
        if self.scale_up == "none" and self.gpus_per_node != 1:
            raise ValueError(f"--scale-up none means one GPU per node; --gpus-per-node is {self.gpus_per_node}")
        if self.gpu not in GPUS:
            raise ValueError(f"--gpu must be one of {', '.join(GPUS)}, got {self.gpu!r}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(TOPOLOGIES)}, got {self.topology!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.cpu not in ("intel", "amd"):
            raise ValueError(f"--cpu must be intel or amd, got {self.cpu!r}")
        if self.code not in CODES:
            raise ValueError(f"--code must be one of {', '.join(CODES)}, got {self.code!r}")
        if self.fec not in MODE_NAMES:
            raise ValueError(f"--fec must be one of {', '.join(MODE_NAMES)}, got {self.fec!r}")
        if not (isinstance(self.ber, (int, float)) and 0.0 <= self.ber < 0.5):
            raise ValueError(f"--ber must be in [0, 0.5), got {self.ber!r}")
        if self.burst_pb is not None and not (isinstance(self.burst_pb, (int, float)) and 0.0 <= self.burst_pb < 1.0):
            raise ValueError(f"--burst-pb must be in [0, 1), got {self.burst_pb!r}")
        if self.spine_code is not None and self.spine_code not in CODES:
            raise ValueError(f"--spine-code must be one of {', '.join(CODES)}, got {self.spine_code!r}")
        if self.spine_fec is not None and self.spine_fec not in MODE_NAMES:
            raise ValueError(f"--spine-fec must be one of {', '.join(MODE_NAMES)}, got {self.spine_fec!r}")
        if self.spine_ber is not None and not (isinstance(self.spine_ber, (int, float)) and 0.0 <= self.spine_ber < 0.5):
            raise ValueError(f"--spine-ber must be in [0, 0.5), got {self.spine_ber!r}")
        if not (isinstance(self.oversubscription, (int, float)) and math.isfinite(self.oversubscription)
                and self.oversubscription >= 1.0):
            raise ValueError(f"--oversubscription must be >= 1 (down:up ports of a leaf), got {self.oversubscription!r}")
        if self.channels is not None and (not isinstance(self.channels, int) or not 1 <= self.channels <= 64):
            raise ValueError(f"--channels must be an int in [1, 64], got {self.channels!r}")
        for name in ("net_efficiency", "ring_intra_efficiency", "nvls_busbw_per_up"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 2):
                raise ValueError(f"{flag(name)} must be in (0, 2], got {v!r}")
        if not (isinstance(self.gpu_pcie_GBps, (int, float)) and math.isfinite(self.gpu_pcie_GBps)
                and self.gpu_pcie_GBps > 0):
            raise ValueError(f"gpu_pcie_GBps must be a finite number > 0, got {self.gpu_pcie_GBps!r}")
        for name in ("switch_ns", "nic_ns", "fiber_m", "fiber_ns_per_m"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{flag(name)} must be a finite number >= 0, got {v!r}")
        if not (isinstance(self.latency_offset_us, (int, float)) and math.isfinite(self.latency_offset_us)):
            raise ValueError(f"--latency-offset-us must be finite, got {self.latency_offset_us!r}")
        for name, ok in (("algo_latency_us", lambda v: -1e6 <= v <= 1e6), ("algo_bw_factor", lambda v: 1e-4 <= v <= 1e4)):
            pairs = getattr(self, name)
            if isinstance(pairs, dict):  # from a calibration file: store hashable, sorted pairs
                object.__setattr__(self, name, pairs := tuple(sorted(pairs.items())))
            if not isinstance(pairs, tuple):
                raise ValueError(f"{name} must be ((algorithm, value), ...) pairs, got {pairs!r}")
            for item in pairs:
                if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                        and isinstance(item[1], (int, float)) and not isinstance(item[1], bool)
                        and math.isfinite(item[1]) and ok(item[1])):
                    raise ValueError(f"{name}: bad entry {item!r} (an algorithm name and a finite number in range)")
        v = self.sustained_busbw_GBps
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
            raise ValueError(f"sustained_busbw_GBps must be a finite number > 0 or None, got {v!r}")
        self._check_fabric()

    # ---------------------------------------------------------------- fabric
    def _check_fabric(self) -> None:
        if self.nodes == 1:
            return
        R, n, k = self.radix, self.nodes, self.nics_per_node
        if self.topology == "single-switch":
            if n * k > R:
                raise ValueError(f"--radix {R} is too small: a single switch would need {n * k} ports "
                                 f"({n} nodes x {k} NICs); use --topology rail-optimized, leaf-spine or three-tier")
        elif self.topology == "rail-optimized":
            if n > R and n > (R // 2) * R:
                raise ValueError(f"--radix {R} is too small: a two-tier rail holds at most {(R // 2) * R} nodes, "
                                 f"--nodes is {n}")
        else:
            per = self.nodes_per_leaf
            if per < 1:
                raise ValueError(f"--radix {R} is too small: a leaf's {self.leaf_down_ports} down ports cannot hold "
                                 f"one node's {k} NICs")
            leaves = -(-n // per)
            cap = R if self.topology == "leaf-spine" else R * (R // 2)
            if leaves > cap:
                raise ValueError(f"--radix {R} is too small for {n} nodes: {leaves} leaves, a {self.topology} "
                                 f"of radix {R} holds at most {cap}")

    @property
    def leaf_down_ports(self) -> int:
        """Ports of a leaf facing NICs: ``floor(R o / (1 + o))``."""
        o = float(self.oversubscription)
        return int(math.floor(self.radix * o / (1.0 + o) + 1e-9))

    @property
    def nodes_per_leaf(self) -> int:
        return self.leaf_down_ports // max(1, self.nics_per_node)

    def _group(self, node: int) -> tuple[int, int]:
        """``(leaf group, pod)`` of a node."""
        if self.topology == "single-switch":
            return 0, 0
        if self.topology == "rail-optimized":
            g = self.nodes if self.nodes <= self.radix else self.radix // 2
            return node // g, 0
        leaf = node // self.nodes_per_leaf
        if self.topology == "leaf-spine":
            return leaf, 0
        return leaf, leaf // max(1, self.radix // 2)

    def path(self, a: int, b: int) -> tuple[int, int]:
        """``(links, switches)`` between node ``a`` and node ``b`` (0, 0 for the same node)."""
        if a == b:
            return 0, 0
        ga, pa = self._group(a)
        gb, pb = self._group(b)
        if ga == gb:
            return 2, 1
        if pa == pb:
            return 4, 3
        return 6, 5

    # ---------------------------------------------------------------- derived
    @property
    def spine(self) -> "ClusterSpec":
        """The same cluster with the switch-switch links' PHY (``spine_*``, default the NIC links')
        as its ``code``/``fec``/``ber``: what a link beyond the two NIC-leaf links of a path runs."""
        return replace(self, code=self.spine_code or self.code, fec=self.spine_fec or self.fec,
                       ber=self.ber if self.spine_ber is None else self.spine_ber, spine_code=None, spine_fec=None,
                       spine_ber=None)

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def rate_gbps(self) -> float:
        return RATES_GBPS[self.rate]

    @property
    def nic_GBps(self) -> float:
        """What a collective gets of one NIC, GB/s: rate / 8 x ``net_efficiency``."""
        return self.rate_gbps / 8.0 * self.net_efficiency

    @property
    def node_net_GBps(self) -> float:
        """All NICs of a node together, GB/s, as far as its GPUs can feed them: a GPU reaches its NICs
        through its own PCIe link (GPUDirect RDMA through the PCIe switch), so a node with more NICs
        than GPUs gets at most ``gpus_per_node x gpu_pcie_GBps``."""
        return min(self.nics_per_node * self.nic_GBps, self.gpus_per_node * self.gpu_pcie_GBps)

    @property
    def up_GBps(self) -> float:
        return SCALE_UP[self.scale_up][0]

    @property
    def intra_hw(self) -> str:
        """NCCL latency class of the links inside a node: ``nvlink`` or ``pci``."""
        return SCALE_UP[self.scale_up][1]

    @property
    def has_nvls(self) -> bool:
        """NVLink SHARP (NVSwitch multicast/reduction): Hopper and Blackwell on NVLink 4/5."""
        if self.nvls is not None:
            return bool(self.nvls) and self.scale_up in ("nvlink4", "nvlink5")
        return self.scale_up in ("nvlink4", "nvlink5") and self.gpu in ("hopper", "blackwell")

    @property
    def n_channels(self) -> int:
        """Channels (rings / trees in parallel): default two per NIC, at least 2, at most 32 [I]."""
        if self.channels is not None:
            return self.channels
        return int(min(32, max(2, 2 * max(1, self.nics_per_node))))

    @property
    def ranks_per_node(self) -> int:
        return self.gpus_per_node

    def with_(self, **changes) -> "ClusterSpec":
        """A copy with ``changes``; ``ranks=N`` keeps ``gpus_per_node`` (fewer when N is smaller) and
        sets ``nodes = ceil(N / gpus_per_node)``."""
        if "ranks" in changes:
            n = int(changes.pop("ranks"))
            if n < 1:
                raise ValueError(f"ranks must be >= 1, got {n}")
            g = changes.get("gpus_per_node", self.gpus_per_node)
            if n < g:
                changes["gpus_per_node"], changes["nodes"] = n, 1
            else:
                changes["nodes"] = -(-n // g)
        return replace(self, **changes)

    def describe(self) -> str:
        return (f"{self.name}: {self.nodes} nodes x {self.gpus_per_node} {self.gpu} GPUs ({self.scale_up}), "
                f"{self.nics_per_node} x {self.rate} NICs per node, {self.topology} (radix {self.radix}, "
                f"oversubscription {self.oversubscription:g}), transport {self.transport}, links {self.code}/{self.fec}"
                f" at BER {self.ber:g}")

    def to_dict(self) -> dict:
        d = asdict(self)
        return d


#: preset name -> field values (everything else: :class:`ClusterSpec` defaults)
PRESETS: dict[str, dict] = {
    # NVIDIA DGX H100 / HGX H100 with 8 x ConnectX-7 400G NDR InfiniBand, rail-optimized, Quantum-2
    # switches of 64 x 400G ports [S: NVIDIA DGX SuperPOD reference architecture]
    "dgx-h100-ib": dict(gpus_per_node=8, nics_per_node=8, rate="400G", scale_up="nvlink4", gpu="hopper",
                        topology="rail-optimized", radix=64, transport="ib", switch_ns=200.0),
    # HGX B200 with 8 x 400G RoCE NICs on 51.2 Tb/s Ethernet switches (128 x 400G) [I]
    "hgx-b200-roce": dict(gpus_per_node=8, nics_per_node=8, rate="400G", scale_up="nvlink5", gpu="blackwell",
                          topology="rail-optimized", radix=128, transport="roce", switch_ns=600.0),
    # HGX A100 with 8 x 200G RoCE NICs, leaf-spine of 25.6 Tb/s switches (64 x 400G, used as 128 x 200G) [I]
    "hgx-a100-roce": dict(gpus_per_node=8, nics_per_node=8, rate="200G", scale_up="nvlink3", gpu="ampere",
                          topology="leaf-spine", radix=128, transport="roce", switch_ns=600.0),
    # the project's earlier model: one 400G link per rank, every step over the network
    # (protocol.cluster.flat); a ClusterSpec stand-in with one GPU per node for the fields
    "flat-ethernet": dict(gpus_per_node=1, nics_per_node=1, rate="400G", scale_up="none", gpu="hopper",
                          topology="single-switch", radix=100_000, transport="roce", switch_ns=500.0),
}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)


def preset(name: str, **over) -> ClusterSpec:
    """The :class:`ClusterSpec` of preset ``name`` with ``over`` applied (``nodes=``, ``ber=``, ...)."""
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise ValueError(f"--cluster must be one of {', '.join(PRESETS)}, got {name!r}")
    kw = {**PRESETS[key], "name": key}
    valid = {f.name for f in fields(ClusterSpec)}
    for k, v in over.items():
        if k not in valid:
            raise ValueError(f"unknown cluster field {k!r}")
        if v is not None:
            kw[k] = v
    return ClusterSpec(**kw)
