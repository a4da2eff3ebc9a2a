"""Workloads where latency matters, as step times on a cluster (``phy802 tradeoff --workload``).

DDP with 25 MB buckets hides most communication behind backward and is where a FEC mode's
latency matters least.  The others put collectives on the critical path.  Rules ([I]: ours,
from the cited designs; ``C`` = compute per step and GPU from ``6 P tokens / (ranks x peak x
MFU)``, forward ``C/3``, backward ``2C/3``, as :mod:`protocol.cluster.steptime`):

* ``ddp``, ``fsdp``, ``pp``: :func:`protocol.cluster.steptime.step_time` on the synthetic logs.
* ``tp`` (Megatron-LM tensor parallel, Shoeybi et al. 2019): ``t`` GPUs per tensor-parallel group
  (default: the model preset's ``tp``, else a node's), ``d = ranks / t`` data-parallel replicas, ``m`` micro-batches.  Per layer
  and micro-batch two all-reduces of the activations (``tokens_mb x d_model x 2`` bytes, bf16) in
  forward and two in backward, on the critical path (no overlap); the gradients
  (``4 P / t`` bytes) are all-reduced over the ``d`` replicas with the DDP overlap rule.  A group
  inside one node crosses no optical link: the FEC mode then only touches the gradient all-reduce.
* ``moe`` (expert parallel, GShard / Switch style): every layer's MoE block sends each token to
  its ``top_k`` experts and back: 2 all-to-alls in forward, 2 in backward per micro-batch, of
  ``tokens_mb x top_k x d_model x 2`` bytes per rank over all ranks, on the critical path; the
  dense (non-expert) gradients all-reduced with the DDP rule.
* ``decode`` (inference, one generated token): per layer two all-reduces of ``batch x d_model x
  2`` bytes across the ``t`` tensor-parallel GPUs (attention and MLP outputs), on the critical
  path; compute = reading the weights once, ``2 P / t`` bytes at ``hbm_GBps`` (memory bound,
  H100 3350 GB/s).  ``step_s`` is the time per token.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .steptime import (DEFAULT_SIM, SimSettings, StepTime, compute_from_flops, model_preset, op_time, step_time,
                       synthetic_ddp_log)
from .topology import ClusterSpec

__all__ = ["WORKLOADS", "WorkloadConfig", "workload_step"]

WORKLOADS: tuple[str, ...] = ("ddp", "fsdp", "tp", "moe", "pp", "decode")


@dataclass(frozen=True)
class WorkloadConfig:
    """Sizes of a workload: ``tp`` (tensor-parallel GPUs; None: the model preset's, else a node's), ``microbatches``,
    ``decode_batch`` (sequences decoded together), ``hbm_GBps`` (decode's weight reads)."""

    tp: int | None = None
    microbatches: int = 4
    decode_batch: int = 8
    hbm_GBps: float = 3350.0


def _group(cluster: ClusterSpec, size: int) -> ClusterSpec:
    """The sub-cluster of ``size`` GPUs a tensor-parallel (or expert) group spans: inside a node
    when it fits, else whole nodes."""
    g = cluster.gpus_per_node
    if size <= g:
        return replace(cluster, nodes=1, gpus_per_node=size)
    if size % g:
        raise ValueError(f"a group of {size} GPUs is not a whole number of nodes of {g} GPUs")
    return replace(cluster, nodes=size // g)


def _dp_group(cluster: ClusterSpec, tp: int) -> ClusterSpec:
    """The data-parallel group of one tensor-parallel rank: ``ranks / tp`` GPUs, one per group."""
    g = cluster.gpus_per_node
    d = max(1, cluster.ranks // tp)
    if tp >= g:  # one GPU per node in the group, with its share of the node's NICs
        nics = max(1, cluster.nics_per_node // g)
        return replace(cluster, nodes=d, gpus_per_node=1, nics_per_node=nics, scale_up="none")
    per = g // tp
    return replace(cluster, nodes=max(1, d // per), gpus_per_node=min(per, d))


def _serial(ops: list) -> tuple[float, float, float]:
    return sum(t.time_s for t in ops), sum(t.phy_s for t in ops), sum(t.resend_s for t in ops)


def workload_step(workload: str, model: str, cluster: ClusterSpec, *, tflops: float, mfu: float,
                  cfg: WorkloadConfig = WorkloadConfig(), algo: str | None = None, pp_stages: int = 2,
                  sim: SimSettings = DEFAULT_SIM) -> StepTime:
    """Step time of ``workload`` for the model preset ``model`` on ``cluster`` (module docstring);
    ``sim``: how each collective's loss recovery is simulated at BER > 0."""
    from .steptime import synthetic_fsdp_log, synthetic_pp_log

    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    pr = model_preset(model)
    N = cluster.ranks
    C = compute_from_flops(pr["active_params"] if "active_params" in pr else pr["params"], pr["tokens_per_step"], N,
                           tflops, mfu)
    if workload == "ddp":
        return step_time(synthetic_ddp_log(pr["params"], world_size=N), cluster, compute_s=C, algo=algo, sim=sim)
    if workload == "fsdp":
        return step_time(synthetic_fsdp_log(pr["params"], units=pr["n_layer"], world_size=N), cluster, compute_s=C,
                         algo=algo, sim=sim)
    if workload == "pp":
        dp = max(1, N // pp_stages)
        act = pr["tokens_per_step"] // dp // cfg.microbatches * pr["d_model"] * pr["act_dtype_bytes"]
        log = synthetic_pp_log(pr["params"], stages=pp_stages, microbatches=cfg.microbatches, act_bytes=max(1, act))
        return step_time(log, cluster if N >= pp_stages else cluster.with_(ranks=pp_stages), compute_s=C, algo=algo,
                         sim=sim)
    t = cfg.tp or pr.get("tp") or cluster.gpus_per_node
    if N % t and workload in ("tp", "decode"):
        raise ValueError(f"--tp {t} does not divide the {N} ranks")
    d_model, L, ab = pr["d_model"], pr["n_layer"], pr["act_dtype_bytes"]
    if workload == "decode":
        grp = _group(cluster, t)
        ar = op_time("allreduce", cfg.decode_batch * d_model * ab, grp, algo, sim)
        ops = [ar] * (2 * L)
        comm, phy, res = _serial(ops)
        comp = 2.0 * pr["params"] / t / (cfg.hbm_GBps * 1e9)
        return _st("decode", cluster, comp + comm, comp, comm, phy, res, len(ops), ops, sim)
    m = cfg.microbatches
    if workload == "tp":
        d = max(1, N // t)
        tok_mb = pr["tokens_per_step"] / d / m
        grp = _group(cluster, t)
        ar = op_time("allreduce", int(tok_mb * d_model * ab), grp, algo, sim)
        ops = [ar] * (4 * L * m)
        tp_comm, tp_phy, tp_res = _serial(ops)
        base = step_time(synthetic_ddp_log(pr["params"] // t, world_size=d), _dp_group(cluster, t), compute_s=C,
                         algo=algo, sim=sim) if d > 1 else None
        step = (base.step_s if base else C) + tp_comm
        comm = tp_comm + (base.comm_s if base else 0.0)
        phy = tp_phy + (base.phy_s if base else 0.0)
        res = tp_res + (base.resend_s if base else 0.0)
        return _st("tp", cluster, step, C, comm, phy, res, len(ops) + (base.ops if base else 0), ops, sim, base)
    # moe: expert parallel over all ranks
    tok_mb = pr["tokens_per_step"] / N / m
    a2a = op_time("alltoall", int(tok_mb * pr.get("top_k", 2) * d_model * ab), cluster, None, sim)
    ops = [a2a] * (4 * L * m)
    e_comm, e_phy, e_res = _serial(ops)
    dense = pr["params"] - pr.get("expert_params", 0)
    base = step_time(synthetic_ddp_log(max(1, dense), world_size=N), cluster, compute_s=C, algo=algo, sim=sim)
    return _st("moe", cluster, base.step_s + e_comm, C, e_comm + base.comm_s, e_phy + base.phy_s,
               e_res + base.resend_s, len(ops) + base.ops, ops, sim, base)


def _st(name, cluster, step, comp, comm, phy, res, n, ops, sim: SimSettings, base=None) -> StepTime:
    """The step, and with simulated loss recovery its distribution: per trial, the critical-path
    ops' times (each use its own trials, :func:`protocol.cluster.steptime.per_trial_sum`) added to
    the base step's per-trial time (the gradient all-reduce part, independent of them [I]) or to
    its deterministic value."""
    import numpy as np

    from .steptime import OpTime, deterministic, per_trial_sum, with_distribution

    st = StepTime(name, cluster.ranks, cluster.code, cluster.fec, cluster.ber, step, comp, step - comp, comm, phy,
                  res, 0.0, n)
    simulated = [t.samples_s for t in ops if isinstance(t, OpTime) and t.samples_s is not None]
    base_sim = base is not None and base.samples_s is not None
    if not simulated and not base_sim:
        return deterministic(st)
    trials = len(simulated[0]) if simulated else len(base.samples_s)
    crit = per_trial_sum(ops, sim.seed)
    rest = (base.samples_s if base_sim else base.step_s) if base is not None else comp
    return with_distribution(st, np.broadcast_to(rest + crit, (trials,)))
