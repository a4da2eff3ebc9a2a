"""NCCL's cost structure over a :class:`~protocol.cluster.topology.ClusterSpec`, as data.

The structure follows NCCL's own tuning model (``src/graph/tuning.cc``, NCCL 2.30; the numbers
are in ``nccl_tuning.json`` beside this file, with the file, version and commit they come from,
and can be overridden with :func:`load_table`).  For an operation, algorithm ``a`` and protocol
``p`` (LL, LL128, Simple)::

    time = lat(a, p) + bytes / algbw(a, p)        (ncclTopoGetAlgoTime)

``lat`` is NCCL's base latency of (a, p) plus, per step, the hardware latency of the step's link
class (NVLink, PCI, network; ``hw_latency_us``):

=================  ===========================================================================
ring all-reduce    ``base + (2(N-1) - 2(n-1)) max(intra, net overhead) + 2(n-1) net``, x 1.4 for
                   Simple on several nodes above 64 bytes per rank and channel (the "plateau")
ring RS / AG       the same with ``N-1`` steps, ``n-1`` of them between nodes
ring broadcast     ``base + N x hop`` (Simple: the tree's hop latency)
tree all-reduce    ``base + 2((ppn-1) intra + floor(log2 n) net)`` (double binary tree across
                   nodes, chains inside)
NVLS               ``intra(NVLS)`` (+ ``net`` across nodes, CollNet/SHARP only)
NVLSTree           ``base + intra(NVLS) + 2 floor(log2 n) net(NVLSTree)``
CollNet direct     ``base + 2(min(1, ppn-1) intra + 0.4 (ppn-1)) + net``; chain ``2 (ppn-1) intra + net``
PAT (RS / AG)      ``base + floor(log2 n) net / 3.5 + 2.8 N`` (one GPU per node)
=================  ===========================================================================

with ``N`` ranks, ``n`` nodes, ``ppn`` GPUs per node; ``net`` is NCCL's network hop latency plus the
transport's own (``net_latency_us`` by ``ClusterSpec.transport``: NCCL's ``graph->latencyInter``,
twice for Simple).  ``algbw`` comes from the cluster's
physical bandwidths (this is where the model is ours, not NCCL's: NCCL reads them from the
topology it detects) and NCCL's protocol refinements (``protocol_factor``, the per-channel caps,
``ll_max_busbw``, ``tree_correction``); bus bandwidths as nccl-tests report them:

* ring: ``min(ring_intra_efficiency x scale-up, node NICs)`` (a ring crosses each node boundary
  once per channel, so the node's NICs together are its inter-node limit);
* tree: NCCL's ``busBw x 0.5`` with ``busBw = min(0.92 x node NICs, channels x per-channel cap)``
  (on 2 nodes the tree's time, once it is chosen, takes twice the network share, see ``_algbw``;
  its price for the choice does not [I]; one
  node: the ring's NVLink rate, NCCL's ``bwIntra``);
* NVLS: ``nvls_busbw_per_up x scale-up`` (x ``nvlsEfficiency`` relative to Hopper);
  NVLSTree: ``min(NVLS, node NICs x (2 on 2 nodes), NVLS channels x cap)``, with the tree
  correction on Blackwell (``ncclTopoGetAlgoTime``);
* all-to-all: each rank's ``(N - ppn)/N`` share crosses its node's NICs (``/ oversubscription``
  when leaves are crossed), the rest NVLink; send/recv: one NIC (``p2p_latency_us``, [I]).

**Calibrated structure** (off by default; ``ClusterSpec`` fields that ``--calibrate`` fits): per
algorithm a latency shift and a bandwidth factor on NCCL's entries (``algo_latency_us``,
``algo_bw_factor``: a transport with its own per-message cost moves each algorithm by its own
pipeline depth, which the table does not expose; they enter the choice as a tuner plugin's
constants would), and a sustained bus-bandwidth ceiling (``sustained_busbw_GBps``:
``time >= bytes x busbw factor / ceiling``, a bottleneck off the pipelined path; the same for every
algorithm, so it does not move the choice, and it is charged to ``bandwidth_s``).  With the ceiling
binding, the FEC identity below holds only where the ceiling does not bind.

A tree/Simple all-reduce that runs pays its pipeline's fill (:func:`tree_simple_fill_us`: NCCL cuts
it in ``NCCL_BUFFSIZE / 8`` chunks at every size, each moved whole from hop to hop), in place of
NCCL's tree correction, which only its price for the choice keeps.  An NVLSTree all-reduce across
nodes that runs pays its first loop's fill (:func:`nvls_tree_fill_us`: ``channels x heads x chunk``
bytes, NCCL's NVLSTree chunk of 32-128 KiB by size, crossing the NVLS stages and each network hop
in turn), at the uncorrected rate.

(algorithm, protocol) is chosen per size by minimum time on the full-channel table, as NCCL does,
among the pairs enabled: ``algo=`` / ``proto=`` take ``NCCL_ALGO`` / ``NCCL_PROTO`` values (one
name, a comma list, a ``^``-list of names disabled), and a transport's own stack may rule protocols
out (``transport_protocols``: GPUDirect-TCPXO never runs LL).  The chosen pair then runs with
the channels and threads NCCL gives that size (:func:`channels_used`, ``src/enqueue.cc``
topoGetAlgoInfo): below ``channels x threads x threshold`` bytes a ring or tree runs fewer
channels, and its bandwidth term grows in proportion; ``Prediction.channels`` says how many.  The choice uses NCCL's table only: NCCL does not know
the links' FEC mode.

**FEC and the path.**  NCCL's network hop latency is measured on a reference path (one switch,
two links, standard KP4 ``ieee`` FEC).  The model adds, for every inter-node hop on the critical
path of the chosen algorithm (ring: the ``2(n-1)`` node crossings of one chunk's journey from
node 0; tree / NVLSTree: the ``2 floor(log2 n)`` edges from node 0 to node ``2^l``; all-to-all:
node 0 to node ``n-1``; send/recv: node 0 to node 1), with ``L`` links and ``L-1`` switches::

    delta = L x (phy(code, fec) - phy(kp4, ieee)) + (L - 2) x fibre + (L - 2) x switch

(links beyond the two NIC-leaf links use the spine PHY's ``phy``: ``ClusterSpec.spine``).
``phy`` is :func:`protocol.latency.added_latency` ``(fec, rate, code=code).total_ns``, so at BER 0
two modes differ by exactly ``fec_traversals x (phy(a) - phy(b))`` with ``fec_traversals`` the
links summed over those hops.  Rates that :mod:`protocol.latency` does not (yet) know (800G,
1.6T) take its 400G value and say so (``phy_rate``): an 802.3dj inner code plugs in there.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources

from ..latency import added_latency
from .topology import ClusterSpec

__all__ = ["OPS", "ALGOS", "PROTOS", "load_table", "default_table", "Prediction", "predict", "candidates",
           "bus_factor", "phy_latency_ns", "norm_op", "channels_used", "tree_simple_fill_us", "nvls_tree_chunk_bytes",
           "nvls_tree_fill_us", "enabled",
           "parse_nccl_list"]

OPS: tuple[str, ...] = ("allreduce", "reduce_scatter", "allgather", "broadcast", "alltoall", "sendrecv")
ALGOS: tuple[str, ...] = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat", "p2p")
PROTOS: tuple[str, ...] = ("LL", "LL128", "Simple")
_OP_ALIASES = {"all_reduce": "allreduce", "all-reduce": "allreduce", "reduce-scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "all_gather": "allgather", "all-gather": "allgather",
               "all_to_all": "alltoall", "all-to-all": "alltoall", "send": "sendrecv", "recv": "sendrecv",
               "send_recv": "sendrecv", "p2p": "sendrecv"}
_ALGO_ALIASES = {"nvlstree": "nvls_tree", "nvls-tree": "nvls_tree", "collnetdirect": "collnet_direct",
                 "collnetchain": "collnet_chain", "collnet": "collnet_direct"}
_PROTO_ALIASES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}


def norm_op(op: str) -> str:
    key = str(op).strip().lower()
    key = _OP_ALIASES.get(key, key)
    if key not in OPS:
        raise ValueError(f"unknown collective op {op!r}; choose from {', '.join(OPS)}")
    return key


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


@functools.lru_cache(maxsize=1)
def _builtin() -> str:
    return resources.files(__package__).joinpath("nccl_tuning.json").read_text(encoding="utf-8")


class NegativeLatencyError(ValueError):
    """A latency offset or per-algorithm shift drives a collective's modelled fixed cost below zero."""

    def __init__(self, op: str, algo: str, proto: str, latency_us: float, msg: str) -> None:
        super().__init__(msg)
        self.op, self.algo, self.proto, self.latency_us = op, algo, proto, latency_us


class Table(dict):
    """NCCL's constants (a dict read from JSON); hashable by identity so predictions can be cached."""

    __hash__ = object.__hash__  # type: ignore[assignment]
    __eq__ = object.__eq__  # type: ignore[assignment]


_DEFAULT: Table | None = None


def default_table() -> Table:
    """The built-in table (``nccl_tuning.json``)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Table(json.loads(_builtin()))
    return _DEFAULT


def load_table(path: str | os.PathLike | None = None) -> Table:
    """The built-in table with the values of the JSON file ``path`` (same keys, any subset) on top."""
    if path is None:
        return default_table()
    p = os.fspath(path)
    from phy802.runtime.inputs import read_json_file

    try:  # the project's strict reader: a regular file, bounded size and nesting, no NaN constants
        over = read_json_file(p, 1 << 20, what="NCCL table (JSON)")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read the NCCL table: {exc.strerror}") from None
    if not isinstance(over, dict):
        raise ValueError(f"{p}: an NCCL table must be a JSON object")
    base = default_table()
    for k in over:
        if k not in base:
            raise ValueError(f"{p}: unknown key {k!r} (known: {', '.join(base)})")
    return Table(_merge(base, over))


@functools.lru_cache(maxsize=256)
def phy_latency_ns(code: str, fec: str, rate: str, cfg=None) -> tuple[float, str]:
    """``(added receive latency of one link in ns, the rate protocol.latency priced it at)``."""
    from ..latency import LatencyConfig

    cfg = cfg if cfg is not None else LatencyConfig()
    try:
        return float(added_latency(fec, rate, cfg, code=code).total_ns), rate
    except ValueError:
        # protocol.latency does not know this rate yet: 802.3df/dj 800G and 1.6T run 400G-style
        # RS(544,514) flows, so a codeword pair takes about as long [I]; say so in the result
        return float(added_latency(fec, "400G", cfg, code=code).total_ns), "400G"


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests ``busbw / algbw`` (doc/PERFORMANCE.md)."""
    n = ranks
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "allgather", "alltoall"):
        return (n - 1) / n
    return 1.0


def _log2i(x: int) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else 0


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one collective (deterministic, no losses), seconds unless named.

    ``time_s = latency_s + bandwidth_s + path_s``: NCCL's latency term (with the calibration
    offset), the bytes over the algorithm bandwidth, and the path beyond NCCL's reference path
    (FEC mode, extra switches and fibre; module docstring).  ``phy_s``: all FEC receive latency on
    the critical path (``fec_traversals x phy_ns``).  ``hops``: links of each inter-node hop on
    the critical path.  ``resend_s`` is 0 here; :mod:`protocol.cluster.transport` simulates it.
    """

    op: str
    algo: str
    proto: str
    nodes: int
    gpus_per_node: int
    ranks: int
    bytes: int
    code: str
    fec: str
    ber: float
    time_s: float
    latency_s: float
    bandwidth_s: float
    path_s: float
    phy_s: float
    phy_ns: float
    phy_rate: str
    fec_traversals: int
    hops: tuple
    algbw_GBps: float
    busbw_GBps: float
    forced: bool
    channels: int
    candidates: dict = field(default_factory=dict)
    resend_s: float = 0.0

    @property
    def time_us(self) -> float:
        return self.time_s * 1e6


def _enabled(op: str, c: ClusterSpec, T: dict) -> list[tuple[str, str]]:
    ll128 = c.scale_up.startswith("nvlink")
    allowed = T["transport_protocols"].get(c.transport, PROTOS) if c.nodes > 1 else PROTOS
    protos = [p for p in PROTOS if (p != "LL128" or ll128) and p in allowed]
    n = c.nodes
    out: list[tuple[str, str]] = []
    if op == "allreduce":
        out += [("ring", p) for p in protos] + [("tree", p) for p in protos]
        if c.has_nvls and c.gpus_per_node > 1 and (n == 1 or c.collnet):
            out.append(("nvls", "Simple"))
        if c.has_nvls and c.gpus_per_node > 1 and n > 1:
            out.append(("nvls_tree", "Simple"))
        if c.collnet and n > 1:
            out += [("collnet_direct", "Simple"), ("collnet_chain", "Simple")]
    elif op in ("reduce_scatter", "allgather"):
        out += [("ring", p) for p in protos]
        if c.has_nvls and c.gpus_per_node > 1 and n == 1:
            out.append(("nvls", "Simple"))
        if c.gpus_per_node == 1 and n > 1:
            out.append(("pat", "Simple"))
    elif op == "broadcast":
        out += [("ring", p) for p in protos]
    else:
        out.append(("p2p", "Simple"))
    return out


def candidates(op: str, cluster: ClusterSpec, table: dict | None = None) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL would consider for ``op`` on ``cluster``."""
    return _enabled(norm_op(op), cluster, table if table is not None else default_table())


def _gen_index(n: int) -> int:
    return 0 if n <= 1 else (1 if n == 2 else 2)


def _lat_us(op: str, a: str, p: str, c: ClusterSpec, T: dict, size: int) -> float:
    N, n, ppn = c.ranks, c.nodes, c.gpus_per_node
    if a == "p2p":  # all-to-all, send/recv: one message's latency [I]
        return T["p2p_latency_us"]["net" if n > 1 else c.intra_hw]
    hw = T["hw_latency_us"]
    base = T["base_latency_us"][a][p]
    intra = hw[c.intra_hw][a][p]
    inter = hw["net"]["tree" if ppn == 1 and a == "ring" else a][p] if n > 1 else intra
    if n > 1:
        # the transport's own latency (graph->latencyInter), once per inter-node step, twice for
        # Simple (its flush), as ncclTopoTuneModel adds it
        inter += T["net_latency_us"][c.transport] * (2.0 if p == "Simple" else 1.0)
    if a == "ring":
        if op == "broadcast":
            lat = hw["net" if n > 1 else c.intra_hw]["tree" if p == "Simple" else "ring"][p]
            return base + N * lat
        nsteps = 2 * (N - 1) if op == "allreduce" else N - 1
        if n == 1:
            return base + nsteps * intra
        oh = T["net_overhead_us"][c.cpu] * (3.0 if p == "Simple" else 1.0)
        ninter = 2 * (n - 1) if op == "allreduce" else n - 1
        lat = base + (nsteps - ninter) * max(intra, oh) + ninter * inter
        if op == "allreduce" and p == "Simple" and size / (c.n_channels * N) >= 64:
            lat *= T["ring_plateau_factor"]["sm80_plus" if c.gpu in ("ampere", "hopper", "blackwell") else "older"]
        return lat
    if a == "tree":
        return base + 2 * ((ppn - 1) * intra + _log2i(n) * inter)
    if a == "nvls":
        return intra + (inter if n > 1 else 0.0)
    if a == "nvls_tree":
        return base + intra + 2 * _log2i(n) * inter
    if a == "collnet_direct":
        return base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    if a == "collnet_chain":
        return base + 2 * (ppn - 1) * intra + inter
    return base + _log2i(n) * inter / 3.5 + N * 2.8  # pat


def _nvls_channels(c: ClusterSpec, T: dict) -> int:
    """NVLS channels (src/transport/nvls.cc): 16 on Hopper, 32 on Blackwell across nodes, 24 in one node."""
    ch = T["channel_tuning"]["nvls_channels"]
    if c.gpu == "blackwell":
        return int(ch["blackwell"] if c.nodes > 1 else ch["blackwell_single_node"])
    return int(ch["hopper"])


def channels_used(a: str, p: str, c: ClusterSpec, T: dict, size: int) -> tuple[int, float]:
    """``(channels, share of the full-channel bandwidth)`` NCCL runs ``a``/``p`` with at ``size`` bytes.

    NCCL chooses the algorithm and protocol on its table, which assumes all ``comm->nChannels``
    channels, then (``src/enqueue.cc`` topoGetAlgoInfo) drops ring/tree channels while ``size <
    channels x threads x threshold`` and, for the ring, halves its threads (while a multiple of 128)
    under the same test; the tree keeps all its threads, NVLS/NVLSTree run their own channel
    count.  Each channel is one SM's pipeline, so the bandwidth scales with channels x threads.
    """
    nch = c.n_channels
    if a in ("nvls", "nvls_tree"):
        return _nvls_channels(c, T), 1.0
    if a not in ("ring", "tree"):
        return nch, 1.0
    ct = T["channel_tuning"]
    nt_max = int(ct["max_threads"][p])
    thr = int(ct["thread_threshold"][p]) * (c.ranks if (a == "ring" and p == "LL") else 1)
    nc = max(1, min(nch, size // (nt_max * thr)))
    nt = nt_max
    if a == "ring":
        while size < nc * nt * thr and nt % 128 == 0:
            nt //= 2
    return nc, (nc * nt) / (nch * nt_max)


def tree_simple_fill_us(c: ClusterSpec, T: dict, size: int, nch: int, bwt_us: float) -> float:
    """Pipeline fill of a tree/Simple all-reduce, us, added to the bandwidth term ``bwt_us``.

    NCCL (2.20 on) runs tree/Simple in chunks of one step, ``NCCL_BUFFSIZE / NCCL_STEPS``, at every
    size (``nccl_tuning.json`` ``tree_simple_pipeline`` cites the sources), and a Simple step moves
    store-and-forward: a channel's first chunk ``c1 = min(chunk, size / nch)`` crosses the tree's
    ``2(ppn-1)`` NVLink hops at NCCL's per-channel tree rate and its ``2 floor(log2 n)`` network hops
    at twice the channel's steady share of the node NICs (one phase per link direction while the
    trees fill), the rest follows at the rate ``bwt_us`` already charges::

        fill = c1 x (sum over hops of 1 / rate) - c1 / (steady rate of the channel)

    Below ``nch x chunk`` bytes (16 MiB on 16 channels with 8 MiB buffers) there is one chunk per
    channel and no pipelining at all.  Never negative.
    """
    if not (bwt_us > 0 and math.isfinite(bwt_us)) or size <= 0:
        return 0.0
    ts = T["tree_simple_pipeline"]
    bufs = ts["buffsize_bytes"]
    chunk = float(bufs.get(c.transport, bufs["default"])) / int(ts["nccl_steps"])
    per_ch = size / max(1, nch)
    c1 = min(chunk, per_ch)
    steady = per_ch / bwt_us  # bytes per us, the channel's rate as the bandwidth term runs it
    n, ppn = c.nodes, c.gpus_per_node
    gi = _gen_index(n)
    # NCCL's per-channel tree cap is a bus bandwidth; a hop moves the chunk at its algorithm rate (x 0.5)
    b_up = T["per_channel_max"]["tree"][c.gpu][gi] * 0.5 * 1e3
    hop_us = (2 * (ppn - 1)) / b_up if ppn > 1 and b_up > 0 else 0.0
    if n > 1:
        # the channel's share of the node NICs as the tree runs (_algbw, tree_run: both trees of a
        # 2-node tree), twice the steady share: while the first chunks fill the trees a link direction
        # carries one phase (up or down), not both [I]
        net = c.node_net_GBps * (2.0 if n == 2 else 1.0)
        b_net = net * T["protocol_factor"]["tree"] * 1e3 / max(1, c.n_channels)
        hop_us += 2 * _log2i(n) / b_net if b_net > 0 else math.inf
    # a calibrated tree bandwidth factor (ClusterSpec.algo_bw_factor) scales every rate of the tree
    hop_us /= _algo_value(c.algo_bw_factor, "tree", 1.0)
    return max(0.0, c1 * (hop_us - 1.0 / steady))


def _nvls_heads(c: ClusterSpec) -> int:
    """NVLS heads per node: every GPU in one node; across nodes at most one per NIC [I] (nccl_tuning.json)."""
    return max(1, c.gpus_per_node if c.nodes == 1 else min(c.gpus_per_node, max(1, c.nics_per_node)))


def _nvls_tree_base_chunk(c: ClusterSpec, T: dict) -> int:
    """NCCL's starting NVLSTree chunk, min(nvlsChunkSize, nvlsTreeMaxChunkSize) (src/transport/nvls.cc)."""
    nt = T["nvls_tree_pipeline"]
    chunk = tree_max = 0
    if c.gpu == "blackwell" and c.nodes > 1:
        # ncclNvlsTreeSm100Tuning (its NICs-behind-a-PCIe-switch case is not modelled)
        nic, ppn = c.rate_gbps / 8.0, c.gpus_per_node
        chunk = 128 << 10
        if c.nodes == 2 and nic >= 48.0:
            tree_max = 256 << 10 if ppn <= 4 else (64 << 10 if ppn >= 16 else 128 << 10)
            chunk = 256 << 10 if ppn <= 4 else chunk
        elif nic >= 96.0:
            chunk = 256 << 10 if ppn <= 8 else chunk
            tree_max = 256 << 10 if ppn <= 8 else (128 << 10 if ppn < 32 else 64 << 10)
        elif nic >= 48.0:
            tree_max = 128 << 10
    if chunk == 0:
        chunk = int(nt["chunk_bytes"])
    if tree_max == 0:
        tree_max = int(nt["max_chunk_4_nodes_bytes"]) if c.nodes >= 4 else chunk
    return min(chunk, tree_max)


def nvls_tree_chunk_bytes(c: ClusterSpec, T: dict, size: int) -> int:
    """The chunk NCCL runs an NVLSTree all-reduce of ``size`` bytes in (src/enqueue.cc calcCollChunking)."""
    chunk = _nvls_tree_base_chunk(c, T)
    ops = _nvls_channels(c, T) * _nvls_heads(c)
    for mult, above in T["nvls_tree_pipeline"]["halving"]:
        if size < mult * ops * chunk and chunk > above:
            chunk = int(above)
    return chunk


def nvls_tree_fill_us(c: ClusterSpec, T: dict, size: int, bwt_us: float) -> float:
    """Pipeline fill of an NVLSTree all-reduce across nodes, us, added to the bandwidth term ``bwt_us``.

    A loop of ``channels x nHeads x chunk`` bytes (:func:`nvls_tree_chunk_bytes`) is the unit the
    pipeline moves: its first loop passes the NVLS stages (scatter, multicast reduce, multicast
    store, gather: warp groups sharing the GPU's NVLink port, so together one loop's time at the
    NVLS rate [I]) and ``2 floor(log2 n)`` network hops in turn, each hop carrying the loop over
    the node's NICs at the share the bandwidth term gives NVLSTree (``_algbw``: twice the node's
    NICs on 2 nodes, where half the channels' trees are rooted on each node); the next loops follow
    at the steady rate ``bwt_us`` charges::

        fill = loop1 / nvls + 2 floor(log2 n) x loop1 / net - loop1 / steady,  loop1 = min(loop, size)

    Below one loop nothing is pipelined.  Never negative; 0 on one node (no network hop).
    """
    n = c.nodes
    if n < 2 or size <= 0 or not (bwt_us > 0 and math.isfinite(bwt_us)):
        return 0.0
    loop = _nvls_channels(c, T) * _nvls_heads(c) * nvls_tree_chunk_bytes(c, T, size)
    loop1 = float(min(loop, size))
    N = c.ranks
    nvls = _nvls_bw(c, T) * N / (2 * (N - 1)) * 1e3  # bytes per us, the NVLS stages' algorithm rate
    net = c.node_net_GBps * (2.0 if n == 2 else 1.0) * 1e3
    if not (nvls > 0 and net > 0):
        return 0.0
    steady = size / bwt_us
    return max(0.0, loop1 / nvls + 2 * _log2i(n) * loop1 / net - loop1 / steady)


def _tree_correction(p: str, size: int, T: dict) -> float:
    """NCCL's treeCorrectionFactor for ``size`` bytes (ncclTopoGetAlgoTime): 1 below 64 B and above its table."""
    ls = _log2i(max(1, size >> 6))
    corr = T["tree_correction"][p]
    return corr[ls] if size >= 64 and ls < len(corr) else 1.0


def _nvls_bw(c: ClusterSpec, T: dict) -> float:
    eff = T["nvls_efficiency"]
    rel = eff[c.gpu] / eff["hopper"] if eff["hopper"] > 0 else 0.0
    return c.up_GBps * c.nvls_busbw_per_up * rel


def _algbw(op: str, a: str, p: str, c: ClusterSpec, T: dict, size: int, tree_run: bool = False) -> float:
    """Algorithm bandwidth, GB/s (module docstring); ``tree_run``: the tree's time as it runs on 2 nodes
    (both trees rooted on their own node) rather than as NCCL's choice prices it."""
    N, n, ppn = c.ranks, c.nodes, c.gpus_per_node
    nch = c.n_channels
    gi = _gen_index(n)
    pf = T["protocol_factor"]
    capch = T["per_channel_max"]
    ll_max = T["ll_max_busbw"]["single_node"][c.gpu] if n == 1 else T["ll_max_busbw"][c.cpu][gi]
    intra_ring = c.up_GBps * c.ring_intra_efficiency if ppn > 1 else math.inf
    net = c.node_net_GBps if n > 1 else math.inf
    if a == "ring":
        bus = min(intra_ring, net)
        if p == "LL":
            bus = min(ll_max, bus * pf["ring_LL"])
        elif p == "LL128":
            bus = min(bus * pf["ring_LL128"], nch * capch["ring_ll128"][c.gpu][gi])
        if op == "allreduce":
            return bus * N / (2 * (N - 1))
        if op in ("reduce_scatter", "allgather"):
            return bus * N / (N - 1)
        return bus
    if a == "tree":
        # NCCL prices every algorithm on 2 nodes at bwIntra (tuning.cc ``nNodes <= 2 ? bwIntra :
        # bwInter``), so its tree never beats its ring there; we keep the tree's network share
        # undoubled for the choice [I] (NCCL's own choice of ring on 2 x 8 A100 and of NVLSTree over
        # Tree on 2 x 8 H100 is only reproduced so).  Where the tree does run on 2 nodes (chosen
        # with one GPU per node, or forced: NCCL_ALGO, a tuner plugin) each of its two trees is
        # rooted on one node, so a node sends and receives the buffer once across its NICs: half the
        # ring's 2(N-1)/N, twice the network share of a tree over more nodes (``tree_run``).
        # One node: the tree's chains run on the same NVLink graph as the ring (NCCL: bwIntra).
        phys = intra_ring if n == 1 else (2 * net if n == 2 and (ppn == 1 or tree_run) else net)
        bus = min(phys * pf["tree"], nch * capch["tree"][c.gpu][gi])
        if p == "LL":
            bus = min(bus * pf["tree_LL"], ll_max)
        elif p == "LL128":
            f = pf["tree_LL128_single_node"] if n == 1 else pf["tree_LL128_multinode"]
            bus = min(bus * f, nch * capch["tree_ll128"][c.gpu][gi])
        return bus * 0.5 * _tree_correction(p, size, T)
    if a in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain"):
        nv = _nvls_bw(c, T) if a.startswith("nvls") else intra_ring
        if a == "nvls_tree":
            nvch = _nvls_channels(c, T)
            cap = nvch * capch["nvls_tree"][c.gpu][gi] if capch["nvls_tree"][c.gpu][gi] > 0 else math.inf
            bus = min(nv, net * (2.0 if n == 2 else 1.0), cap)
            if c.gpu == "blackwell" and size < (64 << 24) and not tree_run:  # log2(size / 64) < 24: below 1 GiB
                # ncclTopoGetAlgoTime: NVLSTree takes the tree correction on compute capability >= 10.0 (x86)
                bus *= _tree_correction(p, size, T)
        elif a == "nvls":
            bus = nv if n == 1 else min(nv, net)
            if op in ("reduce_scatter", "allgather"):
                bus = c.up_GBps * T["nvls_efficiency"][c.gpu]
                return bus * N / (N - 1)
        else:
            bus = min(nv, net) * 0.9
        return bus * N / (2 * (N - 1))
    if a == "pat":
        return min(net, c.nic_GBps * c.nics_per_node) * 0.75 * N / (N - 1)
    # p2p
    if op == "sendrecv":
        return c.nic_GBps if n > 1 else c.up_GBps * c.ring_intra_efficiency
    # all-to-all: a rank sends (N-1)/N of its buffer, (N-ppn)/N of it across its node's NICs
    share_net = (N - ppn) / N
    share_up = (ppn - 1) / N
    over = c.oversubscription if n > 1 and c.path(0, n - 1)[0] > 2 else 1.0
    per_gpu_net = c.node_net_GBps / ppn / over if n > 1 else math.inf
    t_net = share_net / per_gpu_net if share_net > 0 else 0.0
    t_up = share_up / (c.up_GBps * c.ring_intra_efficiency) if share_up > 0 and c.up_GBps > 0 else 0.0
    t = max(t_net, t_up)
    return 1.0 / t if t > 0 else math.inf


def _hops(op: str, a: str, c: ClusterSpec) -> tuple[int, ...]:
    """Links of each inter-node hop on the critical path (module docstring)."""
    n = c.nodes
    if n <= 1:
        return ()
    if a == "ring":
        k = 2 * (n - 1) if op == "allreduce" else n - 1
        return tuple(c.path(i % n, (i + 1) % n)[0] for i in range(k))
    if a in ("tree", "nvls_tree"):
        levels = [c.path(0, 2 ** lv)[0] for lv in range(_log2i(n)) if 2 ** lv < n]
        return tuple(levels + levels[::-1])
    if a == "pat":
        return tuple(c.path(0, 2 ** lv)[0] for lv in range(_log2i(n)) if 2 ** lv < n)
    if op == "sendrecv":
        return (c.path(0, 1)[0],)
    return (c.path(0, n - 1)[0],)


def _algo_value(pairs: tuple, a: str, default: float) -> float:
    for k, v in pairs:
        if k == a:
            return float(v)
    return default


def _time_us(op: str, a: str, p: str, c: ClusterSpec, T: dict, size: int,
             tree_run: bool = False) -> tuple[float, float, float]:
    # the per-algorithm corrections (ClusterSpec.algo_latency_us / algo_bw_factor) act on NCCL's
    # entries, so they also move the choice, as a tuner plugin's constants would
    lat = _lat_us(op, a, p, c, T, size) + c.latency_offset_us + _algo_value(c.algo_latency_us, a, 0.0)
    bw = _algbw(op, a, p, c, T, size, tree_run) * _algo_value(c.algo_bw_factor, a, 1.0)
    bwt = size / (1000.0 * bw) if bw > 0 and math.isfinite(bw) else (0.0 if bw == math.inf else math.inf)
    return lat + bwt, lat, bwt


def _norm_set(value, aliases: dict, names: tuple, what: str, canon) -> tuple | None:
    """``NCCL_ALGO`` / ``NCCL_PROTO`` semantics (NCCL's src/graph/tuning.cc, parseList): a comma
    list of the names enabled, or ``^`` and a list of the names disabled; None: all enabled."""
    if value is None:
        return None
    if isinstance(value, (tuple, list, frozenset, set)):
        items, neg = [str(v) for v in value], False
    else:
        text = str(value).strip()
        neg = text.startswith("^")
        items = text[1:].split(",") if neg else text.split(",")
    keys = []
    for it in items:
        k = canon(it.strip(), aliases)
        if k not in names:
            raise ValueError(f"unknown {what} {it.strip()!r} in {value!r}; choose from {', '.join(names)}")
        keys.append(k)
    if not keys:
        raise ValueError(f"no {what} named in {value!r}")
    return tuple(n for n in names if (n in keys) != neg)


def _norm_algo(algo) -> tuple | None:
    return _norm_set(algo, _ALGO_ALIASES, ALGOS, "algorithm", lambda t, al: al.get(t.lower(), t.lower()))


def _norm_proto(proto) -> tuple | None:
    return _norm_set(proto, _PROTO_ALIASES, PROTOS, "protocol", lambda t, al: al.get(t.lower(), t))


def parse_nccl_list(value: str, kind: str) -> tuple[str, ...]:
    """The names an ``NCCL_ALGO`` (``kind="algo"``) or ``NCCL_PROTO`` (``kind="proto"``) value enables,
    in this module's spelling; a ValueError naming an unknown name."""
    return (_norm_algo if kind == "algo" else _norm_proto)(value)


def enabled(op: str, cluster: ClusterSpec, algo=None, proto=None, table: dict | None = None) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL may choose for ``op`` on ``cluster`` with ``NCCL_ALGO=algo``
    and ``NCCL_PROTO=proto`` (each None, one name, a comma list or ``^``-list of names disabled)."""
    al, pr = _norm_algo(algo), _norm_proto(proto)
    return [(a, p) for a, p in _enabled(norm_op(op), cluster, table if table is not None else default_table())
            if (al is None or a in al) and (pr is None or p in pr)]


def predict(op: str, size_bytes: float, cluster: ClusterSpec, *, algo=None, proto=None,
            table: dict | None = None) -> Prediction:
    """Predicted time of ``op`` on ``size_bytes`` (nccl-tests' size: the full buffer) over ``cluster``.

    ``algo`` / ``proto`` restrict the choice among :func:`candidates` as ``NCCL_ALGO`` /
    ``NCCL_PROTO`` do: one name forces it, a comma list (``"ring,tree"``) or a ``^``-list of the
    names disabled leaves NCCL's minimum-time choice among those enabled (an impossible set is a
    ValueError naming what is possible); default: all, as NCCL picks.
    """
    op = norm_op(op)
    if not (isinstance(size_bytes, (int, float)) and math.isfinite(size_bytes) and size_bytes >= 0):
        raise ValueError(f"size_bytes must be a finite number >= 0, got {size_bytes!r}")
    return _predict(op, int(math.ceil(size_bytes)), cluster, _norm_algo(algo), _norm_proto(proto),
                    table if table is not None else default_table())


@functools.lru_cache(maxsize=8192)
def _predict(op: str, size: int, c: ClusterSpec, algo: tuple | None, proto: tuple | None, T: dict) -> Prediction:
    N = c.ranks
    phy, phy_rate = phy_latency_ns(c.code, c.fec, c.rate, c.latency)
    sp = c.spine
    phy_sp, _ = phy_latency_ns(sp.code, sp.fec, c.rate, c.latency)
    ref, _ = phy_latency_ns("kp4", "ieee", c.rate, c.latency)
    if (N <= 1 and op != "sendrecv") or size == 0:
        return Prediction(op, algo[0] if algo else "ring", proto[-1] if proto else "Simple", c.nodes, c.gpus_per_node, N, size, c.code, c.fec,
                          c.ber, 0.0, 0.0, 0.0, 0.0, 0.0, phy, phy_rate, 0, (), math.inf, math.inf, False,
                          c.n_channels)
    cands = _enabled(op, c, T)
    pool = [(a, p) for a, p in cands if (algo is None or a in algo) and (proto is None or p in proto)]
    if not pool:
        raise ValueError(f"{op} with algo={','.join(algo) if algo else 'any'} proto={','.join(proto) if proto else 'any'} "
                         "is not available on this cluster; "
                         f"possible: {', '.join(f'{a}/{p}' for a, p in cands)}")
    # NCCL's choice: minimum time on its full-channel table (ncclTopoGetAlgoTime) ...
    times = {f"{a}/{p}": _time_us(op, a, p, c, T, size) for a, p in cands}
    a, p = min(pool, key=lambda ap: times[f"{ap[0]}/{ap[1]}"][0])
    total, lat, bwt = times[f"{a}/{p}"]
    if a == "tree" and c.nodes == 2:
        # ... a 2-node tree runs at its own network share (_algbw), not at the share it was priced at
        total, lat, bwt = _time_us(op, a, p, c, T, size, tree_run=True)
    # ... then run with the channels and threads it gives that size (channels_used)
    nch, share = channels_used(a, p, c, T, size)
    if share < 1.0:
        bwt /= share
        total = lat + bwt
    if a == "tree" and p == "Simple" and op == "allreduce":
        # ... and a tree/Simple channel's first chunk crosses every hop before the pipeline fills:
        # the fill replaces NCCL's empirical tree correction, which prices that same mid-size loss
        # for the choice (on its reference machines' buffers); the steady rate is the uncorrected one
        bwt *= _tree_correction(p, size, T)
        bwt += tree_simple_fill_us(c, T, size, nch, bwt)
        total = lat + bwt
    if a == "nvls_tree" and op == "allreduce" and c.nodes > 1:
        # ... an NVLSTree all-reduce's first loop crosses the NVLS stages and the network hops in
        # turn (nvls_tree_fill_us); it runs at the uncorrected rate (the Blackwell tree correction
        # prices the same loss for the choice only)
        _, _, bwt = _time_us(op, a, p, c, T, size, tree_run=True)
        bwt /= share
        bwt += nvls_tree_fill_us(c, T, size, bwt)
        total = lat + bwt
    if lat < 0:
        raise NegativeLatencyError(op, a, p, lat, f"the modelled latency of {op} {a}/{p} is negative ({lat:.3g} us): "
                                   f"latency_offset_us {c.latency_offset_us:g} / algo_latency_us "
                                   f"{dict(c.algo_latency_us)} shift it below zero")
    hops = _hops(op, a, c)
    fibre = c.fiber_m * c.fiber_ns_per_m
    # the two NIC-leaf links run (code, fec), the switch-switch links beyond them the spine's PHY
    path_ns = sum(min(L, 2) * (phy - ref) + max(0, L - 2) * (phy_sp - ref + fibre + c.switch_ns) for L in hops)
    trav = int(sum(hops))
    phy_total = sum(min(L, 2) * phy + max(0, L - 2) * phy_sp for L in hops)
    t_us = total + path_ns * 1e-3
    if c.sustained_busbw_GBps is not None:
        # a bottleneck off the pipelined path (ClusterSpec.sustained_busbw_GBps): the same for every
        # algorithm in busbw terms, so it does not move the choice; charged to the bandwidth term
        floor_us = size * bus_factor(op, N) / (1000.0 * c.sustained_busbw_GBps)
        if floor_us > t_us:
            bwt += floor_us - t_us
            t_us = floor_us
    algbw = size / (1000.0 * t_us) if t_us > 0 else math.inf  # GB/s
    return Prediction(op=op, algo=a, proto=p, nodes=c.nodes, gpus_per_node=c.gpus_per_node, ranks=N, bytes=size,
                      code=c.code, fec=c.fec, ber=c.ber, time_s=t_us * 1e-6, latency_s=lat * 1e-6,
                      bandwidth_s=bwt * 1e-6, path_s=path_ns * 1e-9, phy_s=phy_total * 1e-9, phy_ns=phy,
                      phy_rate=phy_rate, fec_traversals=trav, hops=hops, algbw_GBps=algbw,
                      busbw_GBps=algbw * bus_factor(op, N), forced=algo is not None or proto is not None,
                      channels=nch, candidates={k: v[0] for k, v in times.items()})
