"""Loss recovery as it happens: a seeded Monte-Carlo of the frames a collective loses and what the
transport does about them.

**Traffic** (:func:`traffic`).  The chosen algorithm (:func:`protocol.cluster.nccl.predict`) is
laid out as ``chains`` (NCCL channels) of ``steps``; in step ``s`` a chain has ``crossings[s]``
concurrent inter-node flows (queue pairs), each of ``frames`` frames of ``mtu`` payload:

=============  ================================================================================
ring           ``2(N-1)`` steps (RS/AG: ``N-1``), ``n`` node crossings each, ``S / (N C)`` bytes
tree, NVLSTree ``2 floor(log2 n)`` levels (up, then down), ``ceil(n / 2^(l+1))`` edges at level
               ``l``, the whole ``S / C`` per edge (pipelined)
all-to-all     one step, ``N (N - ppn)`` flows of ``S / N`` bytes, one chain
send/recv      one step, one flow
=============  ================================================================================

A lost frame delays its flow; a step waits for its slowest flow; a chain's delays add over its
steps; the collective waits for its slowest chain.  Each trial draws the lost frames of every
flow (independent losses of probability ``q_path = 1 - (1 - q)^L`` on a path of ``L`` links,
``q`` from :func:`protocol.cluster.flat.frame_loss_probability`: the closed forms of
:mod:`phy802.theory`), and for every lost frame the number ``k`` of times its retransmission is
lost again (geometric).  Per flow, with ``ft`` the frame time, ``rtt`` the path round trip,
``W = ceil(rtt / ft)`` the frames in flight, ``gap`` the time to the next step's first packet:

* **go-back-N** (RoCEv2 / IB reliable connection; ``ib``, ``roce``): a loss at position ``p`` not
  already inside an earlier loss's resent window is detected by the next packet (``rtt``; the
  step's last frame: ``gap + rtt``; the chain's very last frame: the retransmission timeout
  ``RTO = 4.096 us x 2^timeout``) and resends ``min(W, F - p)`` frames.  Every re-loss pays that
  again.  A frame lost ``retry_cnt + 1`` times fails the queue pair, and the job with it.
* **selective repeat** (``selective``: IRN, UEC): only lost frames are resent, ``ft`` each; the
  flow ends ``max(0, max_i((p_i + 1) ft + rec_i) - F ft)`` late on top, with ``rec_i`` as above
  (a loss inside an earlier loss's window is resent with that loss's NAK: ``rtt``).  Per trial
  never slower than go-back-N: each term is bounded by one of go-back-N's (docstring of
  ``_kernels.flow_delays``).
* **link-level retry** (``fec = llr``): the link replays the frame from its buffer within one link
  round trip (``LatencyBreakdown.retry_ns`` of :mod:`protocol.latency`) + ``ft``, below the
  transport; a frame lost more than ``llr_retries`` times, or a replay buffer smaller than one
  link round trip of frames, leaves the loss to the transport (go-back-N, as above).

Errors are independent (the closed forms) unless ``burst_pb`` is set: then each link's errors are
DFE bursts (:func:`burst_frame_loss`, exact Markov codeword error ratios of :mod:`phy802.theory`);
frames are still lost independently of each other.  The result
(:class:`SimResult`) has the mean, p50, p99, p999 of the collective time over the trials that
completed and the failure rate (trials in which some queue pair failed).

The kernel (:func:`protocol.cluster._kernels.sim_trials`) walks each trial's lost frames in frame
order by geometric skips (every frame of the trial lost independently with ``q_path``), closing
flows, steps and chains as it passes them: O(lost frames + trials) time, O(trials) memory.  A trial
stops at its first frame that fails the queue pair: its time is not used (``samples_us`` is inf),
so ``losses`` counts the lost frames drawn, which is fewer than ``M q_path`` per trial only where
trials fail.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np

from .nccl import Prediction, phy_latency_ns
from .topology import ClusterSpec

__all__ = ["Traffic", "traffic", "SimResult", "simulate", "estimate", "frame_loss", "rto_ns", "chunk_trials",
           "CHUNK_LOSSES"]

# EFA's SRD and TCP (TCPXO) resend only what was lost [I: SRD and SACK], as selective repeat does
_TRANSPORT = {"ib": 0, "roce": 0, "selective": 1, "efa": 1, "tcpxo": 1}


def rto_ns(timeout: int) -> float:
    """RoCE / IB retransmission timeout: 4.096 us x 2^timeout (``NCCL_IB_TIMEOUT``), ns."""
    return 4096.0 * (2.0 ** int(timeout))


@dataclass(frozen=True)
class Traffic:
    """The inter-node flows of one collective (module docstring)."""

    chains: int
    crossings: tuple
    frames: int
    links: int
    flow_bytes: int

    @property
    def frames_per_trial(self) -> int:
        return self.chains * int(sum(self.crossings)) * self.frames


def traffic(pr: Prediction, c: ClusterSpec) -> Traffic:
    """The flows of prediction ``pr`` on ``c`` (module docstring)."""
    N, n, S = pr.ranks, pr.nodes, pr.bytes
    mtu = c.framing.rdma_mtu
    links = max(pr.hops) if pr.hops else 0
    if n <= 1 or S == 0 or links == 0:
        return Traffic(1, (0,), 0, 0, 0)
    C = pr.channels
    if pr.op == "sendrecv":
        return Traffic(1, (1,), -(-S // mtu), links, S)
    if pr.op == "alltoall":
        b = -(-S // N)
        return Traffic(1, (N * (N - c.gpus_per_node),), -(-b // mtu), links, b)
    if pr.algo in ("ring", "pat"):
        steps = 2 * (N - 1) if pr.op == "allreduce" else N - 1
        b = max(1, -(-S // (N * C)))
        return Traffic(C, (n,) * steps, -(-b // mtu), links, b)
    # tree-like: levels up then down, the whole S / C per edge
    L = max(1, int(math.floor(math.log2(n))))
    lv = [max(1, -(-n // 2 ** (i + 1))) for i in range(L)]
    b = max(1, -(-S // C))
    return Traffic(C, tuple(lv + lv[::-1]), -(-b // mtu), links, b)


def frame_loss(c: ClusterSpec, payload: int) -> float:
    """Loss probability of one frame of ``payload`` octets on one link of ``c`` (independent errors:
    :func:`protocol.cluster.flat.frame_loss_probability`; ``burst_pb``: :func:`burst_frame_loss`)."""
    from .flat import frame_loss_probability

    if c.ber == 0 or payload <= 0:
        return 0.0
    if c.burst_pb is not None:
        return burst_frame_loss(c.code, c.fec, float(c.ber), int(payload), float(c.burst_pb), c.framing)
    rate = c.rate
    try:
        return frame_loss_probability(c.code, c.fec, c.ber, payload, rate, c.framing)
    except ValueError:
        # protocol.framing does not know this rate yet (800G / 1.6T): the 400G geometry [I]
        return frame_loss_probability(c.code, c.fec, c.ber, payload, "400G", c.framing)


@functools.lru_cache(maxsize=1024)
def burst_frame_loss(code: str, fec: str, ber: float, payload: int, pb: float, framing=None) -> float:
    """Frame loss on a link whose errors are DFE bursts over PAM4 symbols (Gray: one bit per wrong
    symbol, so symbol error rate ``2 ber``; ``ErrorChain.dfe(pe, pb)`` with ``pe`` set to give it).

    * ``ieee``, ``llr``: a codeword pair under the frame uncorrectable,
      ``FER = markov_codeword_error_ratio(chain, code, 5 PAM4 symbols per RS symbol)``, the frame's
      pairs independent [I] (bursts are far shorter than a pair);
    * ``detect_only``: any symbol error in a codeword; ``code = none``: any error in the frame;
    * ``bypass``, ``unequal``: a hit in the contiguous headers (no error over their PAM4 symbols:
      ``pi_G (1 - pe)^(m - 1)``) or in a 257b block-header bit (isolated bits, at the BER);
    * ``correct_no_indication``: an uncorrectable codeword under the headers (``1 - (1 - FER)^2``) [I].
    Burst errors make one error event kill one frame where independent errors kill several, and
    hit RS codewords harder: the closed forms assume independence.
    """
    from phy802 import theory

    from ..framing import FramingConfig
    from ..modes import get_mode

    fr = framing if framing is not None else FramingConfig()
    ser = min(0.999999, 2.0 * ber)
    pe = ser * (1.0 - pb) / (1.0 - ser)
    chain = theory.ErrorChain.dfe(min(1.0, pe), pb)
    m = get_mode(fec)
    stream_bits = 8 * int(fr.frame_octets(payload))

    def clean(symbols: float) -> float:  # P(no error over `symbols` consecutive PAM4 symbols)
        if symbols <= 0:
            return 1.0
        return (1.0 - ser) * math.exp((symbols - 1) * math.log1p(-pe)) if pe < 1 else 0.0

    if code == "none":
        if m.tolerant:
            return 1.0 - clean(4 * fr.header_octets) * (1.0 - ber) ** math.ceil(stream_bits / 256)
        return 1.0 - clean(stream_bits / 2)
    rs = theory.rs_code(code)
    if m.tolerant and m.decoder != "correct":
        return 1.0 - clean(4 * fr.header_octets) * (1.0 - ber) ** math.ceil(stream_bits / 256)
    if m.decoder == "detect":
        fer = 1.0 - clean(rs.n * 5)
    else:
        fer = theory.markov_codeword_error_ratio(chain, rs, 5)
    if m.tolerant:  # correct_no_indication
        return -math.expm1(2 * math.log1p(-fer)) if fer < 1 else 1.0
    pairs = stream_bits * 1.0625 / (2 * rs.n * rs.m) + 1  # line bits ~ stream x 544/512 [I]
    return -math.expm1(2 * pairs * math.log1p(-fer)) if fer < 1 else 1.0


@dataclass(frozen=True)
class SimResult:
    """Distribution of one collective's time over ``trials`` (us); failures excluded from quantiles.

    ``samples_us``: per trial, inf where the trial failed; ``losses``: lost frames drawn."""

    trials: int
    deterministic_us: float
    mean_us: float
    p50_us: float
    p99_us: float
    p999_us: float
    failure_rate: float
    frame_loss: float
    path_loss: float
    losses: int
    seconds: float
    samples_us: np.ndarray

    @property
    def mean_delay_us(self) -> float:
        return self.mean_us - self.deterministic_us


def _frame_ns(c: ClusterSpec, payload: int) -> float:
    return 8.0 * float(c.framing.frame_octets(int(payload))) / c.rate_gbps


def _rtt_ns(c: ClusterSpec, links: int) -> float:
    phy, _ = phy_latency_ns(c.code, c.fec, c.rate, c.latency)
    phy_sp, _ = phy_latency_ns(c.spine.code, c.spine.fec, c.rate, c.latency)
    one_way = (2 * c.nic_ns + (links - 1) * c.switch_ns + links * c.fiber_m * c.fiber_ns_per_m
               + min(links, 2) * phy + max(0, links - 2) * phy_sp)
    return 2.0 * one_way


def path_loss(c: ClusterSpec, links: int, payload: int) -> tuple[float, float]:
    """``(q of a NIC link, q of the path)``: ``1 - (1 - q)^min(L, 2) (1 - q_spine)^(L - 2)``."""
    q = frame_loss(c, payload)
    qs = frame_loss(c.spine, payload) if links > 2 else 0.0
    if q >= 1 or qs >= 1:
        return q, 1.0
    lg = min(links, 2) * (math.log1p(-q) if q > 0 else 0.0) + max(0, links - 2) * (math.log1p(-qs) if qs > 0 else 0.0)
    return q, max(0.0, -math.expm1(lg))


def _llr_ns(c: ClusterSpec) -> float:
    from dataclasses import replace

    from ..latency import added_latency

    cfg = replace(c.latency, llr_fiber_m=c.fiber_m, fiber_ns_per_m=c.fiber_ns_per_m)
    try:
        return float(added_latency("llr", c.rate, cfg, code=c.code).retry_ns)
    except ValueError:
        return float(added_latency("llr", "400G", cfg, code=c.code).retry_ns)


def _fail_per_loss(c: ClusterSpec, qp: float) -> float:
    """Probability that a lost frame fails its queue pair: lost ``retry_cnt`` more times (plus the
    link-level replays where they apply)."""
    extra = int(c.retry_cnt) + (int(c.llr_retries) if c.fec == "llr" else 0)
    return qp ** extra if qp > 0 else 0.0


def estimate(pr: Prediction, c: ClusterSpec, trials: int) -> dict:
    """Expected lost frames drawn, memory (bytes) and run time (s) of :func:`simulate`, before running it.

    The kernel streams (O(lost frames + trials) time, O(trials) memory) and stops a trial at its
    first failing frame, so the frames drawn per trial are ``E[min(K, G)]`` with ``K`` the lost
    frames (mean ``M q_path``) and ``G`` the first failing one (``1 / f``, ``f`` a lost frame's
    failure probability): about ``(1 - (1 - f)^(M q_path)) / f``."""
    tr = traffic(pr, c)
    _, qp = path_loss(c, tr.links, min(c.framing.rdma_mtu, max(1, tr.flow_bytes)))
    k = tr.frames_per_trial * qp
    f = _fail_per_loss(c, qp)
    per_trial = k if f * k < 1e-9 else -math.expm1(k * math.log1p(-min(f, 1 - 1e-16))) / f
    losses = trials * per_trial
    # per trial: samples, delays, failure flags and the sorted copy of the quantiles (~40 bytes);
    # ~3e7 lost frames per second and ~1e6 trials per second on one core [I: measured, bench_collective]
    return {"losses": losses, "memory_bytes": 40.0 * trials, "seconds": losses / 3e7 + trials * 1e-6}


#: lost frames per compiled call of :func:`simulate` (~0.3 s at the kernel's ~3e7 per second): a
#: run with fewer in all is one call (its result as before chunking), a longer one is cut into
#: calls of about this many, between which Ctrl-C / SIGTERM are honoured
CHUNK_LOSSES = 1 << 23


def chunk_trials(pr: Prediction, c: ClusterSpec, trials: int) -> int:
    """Trials per compiled call of :func:`simulate`: about :data:`CHUNK_LOSSES` expected lost
    frames (:func:`estimate`), at least 1, at most ``trials``; a function of the inputs only, so
    a seeded run gives the same samples on every machine."""
    per_trial = estimate(pr, c, 1)["losses"]
    if per_trial * trials <= CHUNK_LOSSES:
        return max(1, trials)
    return int(min(trials, max(1, CHUNK_LOSSES // max(per_trial, 1.0))))


_KERNEL_ARGS = ("M", "qp", "per_chain", "F", "off", "last_step", "W", "ft", "rtt", "gap", "rto", "retry_cnt", "mode",
                "llr", "llr_ok", "llr_ns", "llr_retries")


def kernel_params(pr: Prediction, c: ClusterSpec, q_override: float | None = None) -> dict:
    """The quantities the loss-recovery kernels take (module docstring), by name: frames per trial
    ``M``, path loss ``qp`` (and the per-link ``q``), frames per chain and per flow, the flow
    offsets of the steps, window ``W``, frame time, round trip, gap, RTO (ns), retry and
    link-level-retry settings."""
    tr = traffic(pr, c)
    det = pr.time_us
    payload = min(c.framing.rdma_mtu, max(1, tr.flow_bytes))
    if q_override is None:
        q, qp = path_loss(c, tr.links, payload)
    else:
        q = float(q_override)
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"frame loss probability must be in [0, 1], got {q!r}")
        qp = 0.0 if q == 0 else (1.0 if q >= 1 else -math.expm1(tr.links * math.log1p(-q)))
    if tr.links == 0:
        qp = 0.0
    ft = _frame_ns(c, payload)
    rtt = _rtt_ns(c, tr.links) if tr.links else 0.0
    steps = len(tr.crossings)
    llr = c.fec == "llr"
    llr_ns = _llr_ns(c) if llr and qp > 0 else 0.0
    off = np.concatenate([[0], np.cumsum(np.asarray(tr.crossings, dtype=np.int64))]).astype(np.int64)
    return dict(q=q, M=tr.frames_per_trial, qp=qp, per_chain=int(off[-1]) * tr.frames, F=tr.frames, off=off,
                last_step=steps - 1, W=max(1, int(math.ceil(rtt / ft))), ft=ft, rtt=rtt,
                gap=max(ft, det * 1e3 / max(1, steps)), rto=rto_ns(c.timeout), retry_cnt=int(c.retry_cnt),
                mode=_TRANSPORT[c.transport], llr=llr, llr_ok=llr and c.llr_buffer_frames >= int(math.ceil(llr_ns / ft)),
                llr_ns=llr_ns, llr_retries=int(c.llr_retries))


def kernel_args(kp: dict) -> tuple:
    """:func:`kernel_params` as the kernels' positional arguments after ``(seed, trials)``."""
    return tuple(kp[k] for k in _KERNEL_ARGS)


def simulate(pr: Prediction, c: ClusterSpec, trials: int, *, seed: int | np.random.Generator = 0,
             q_override: float | None = None) -> SimResult:
    """Simulate ``trials`` runs of the collective ``pr`` on ``c`` (module docstring).

    ``q_override`` sets the per-link frame loss probability directly (tests, what-ifs).
    """
    from ._kernels import sim_trials

    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an int >= 1, got {trials!r}")
    t0 = time.perf_counter()
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    kp = kernel_params(pr, c, q_override)
    det = pr.time_us
    qp = kp["qp"]
    delay = np.zeros(trials, dtype=np.float64)  # us
    failed = np.zeros(trials, dtype=np.bool_)
    total_losses = 0
    if qp > 0 and kp["M"] > 0:
        if qp >= 1.0:
            failed[:] = True
        else:
            from phy802.runtime.interrupts import check_interrupt

            none = np.empty(0, np.int64)
            args = kernel_args(kp)
            step = chunk_trials(pr, c, trials)
            for a in range(0, trials, step):
                # one compiled call per chunk (each with its own seed drawn from ``rng`` in order): a
                # signal is only handled between calls, so a long run stays interruptible
                b = min(trials, a + step)
                seed_ = int(rng.integers(0, 2**31 - 1))
                delay_ns, fail, losses, _ = sim_trials(seed_, b - a, *args, none, none, none)
                delay[a:b] = delay_ns * 1e-3
                failed[a:b] |= fail
                total_losses += int(losses)
                check_interrupt()
    samples = det + delay
    samples[failed] = math.inf
    ok = ~failed
    if ok.any():
        # the mean as det + the mean delay: the mean of n equal floats is not that float (it came
        # out up to 1e-14 us off), which made the mean delay of a run that lost nothing +-1e-14 us,
        # printed as a negative resend time; this way it is 0 exactly, and >= 0 always
        mean = det + float(delay[ok].mean())
        p50, p99, p999 = (float(np.quantile(samples[ok], x, method="inverted_cdf")) for x in (0.5, 0.99, 0.999))
    else:
        mean = p50 = p99 = p999 = math.inf
    return SimResult(trials, det, mean, p50, p99, p999, float(failed.mean()), kp["q"], qp, total_losses,
                     time.perf_counter() - t0, samples)
