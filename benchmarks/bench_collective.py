"""Benchmark: the cluster model's query time, and the loss-recovery simulation of the issue's case.

1. **Query**: one ``predict`` (all NCCL candidates of an all-reduce, cache cleared) on a
   64-node x 8-GPU cluster, median over ``--queries`` sizes; the target is well under 0.1 s.
2. **Simulation**: a 64-node x 8-GPU (512 ranks) 25 MB all-reduce at BER 1e-5, ``--trials``
   (default 1000) seeded trials of go-back-N recovery, on one core (``NUMBA_NUM_THREADS=1``),
   against the closed-form expectation computed in the same run (expected lost frames per trial
   ``M q_path``, and the earlier flat model's expected-value time,
   :func:`protocol.cluster.flat.collective_time`); target under 10 s.  The Numba kernels are
   compiled (or loaded from cache) by a one-trial warm-up first, reported separately.  Wall and
   CPU (process) time are both printed: on a shared machine the CPU time is the one-core figure.
3. **Kernels, same run, same inputs**: the streaming kernel (``_kernels.sim_trials``) against the
   earlier sorted-array formulation (``_kernels.sim_trials_sorted``: K-sized arrays and a sort
   per trial), ``--ref-trials`` trials each, CPU time and ns per lost frame.
4. ``--big``: the same at 4096 ranks on a three-tier fat tree (26.2 MB, 200 trials: the shape of
   ``phy802 tradeoff --ranks 4096 --topology three-tier``).

Usage::

    python benchmarks/bench_collective.py [--trials 1000] [--fec bypass] [--queries 200] [--big] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--fec", default="bypass", help="receive mode of every link (default bypass: frames are lost)")
    ap.add_argument("--ber", type=float, default=1e-5)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--bytes", type=float, default=25e6)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ref-trials", type=int, default=200)
    ap.add_argument("--big", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from protocol.cluster import nccl
    from protocol.cluster.flat import Cluster, collective_time
    from protocol.cluster.topology import preset
    from protocol.cluster.transport import simulate, traffic

    c = preset("dgx-h100-ib", nodes=a.nodes, fec=a.fec, ber=a.ber)
    qt = []
    for i in range(a.queries):
        nccl._predict.cache_clear()
        t0 = time.perf_counter()
        nccl.predict("allreduce", 2 ** (3 + i % 31), c)
        qt.append(time.perf_counter() - t0)
    pr = nccl.predict("allreduce", a.bytes, c)
    t0 = time.perf_counter()
    simulate(pr, c, 1, seed=0)
    warm = time.perf_counter() - t0
    t0, p0 = time.perf_counter(), time.process_time()
    res = simulate(pr, c, a.trials, seed=a.seed)
    sim_s, sim_cpu = time.perf_counter() - t0, time.process_time() - p0
    t0 = time.perf_counter()
    tr = traffic(pr, c)
    expected_losses = tr.frames_per_trial * res.path_loss
    flat = collective_time("allreduce", a.bytes, Cluster(ranks=pr.ranks, fec=a.fec, ber=a.ber))
    closed_s = time.perf_counter() - t0
    out = {
        "cluster": c.describe(), "op": "allreduce", "bytes": a.bytes, "algo": pr.algo, "proto": pr.proto,
        "query_median_s": statistics.median(qt), "query_max_s": max(qt), "queries": a.queries,
        "trials": a.trials, "warmup_s": warm, "simulation_s": sim_s, "simulation_cpu_s": sim_cpu,
        "closed_form_s": closed_s,
        "deterministic_us": pr.time_us, "mean_us": res.mean_us, "p50_us": res.p50_us, "p99_us": res.p99_us,
        "p999_us": res.p999_us, "failure_rate": res.failure_rate,
        "lost_frames_per_trial_sim": res.losses / a.trials, "lost_frames_per_trial_closed_form": expected_losses,
        "flat_model_expected_us": flat.time_s * 1e6, "frame_loss_per_link": res.frame_loss,
    }
    out["kernels"] = [_kernels(pr, c, a.ref_trials, a.seed)]
    if a.big:
        cb = preset("dgx-h100-ib", nodes=512, fec=a.fec, ber=a.ber, topology="three-tier")
        out["kernels"].append(_kernels(nccl.predict("allreduce", 26214400, cb), cb, 200, a.seed))
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['cluster']}")
        print(f"query: median {out['query_median_s'] * 1e3:.3f} ms, max {out['query_max_s'] * 1e3:.3f} ms over "
              f"{a.queries} sizes (target < 100 ms)")
        print(f"simulation: {a.trials} trials of a {a.bytes:g} B all-reduce ({pr.algo}/{pr.proto}) in {sim_s:.2f} s "
              f"wall, {sim_cpu:.2f} s CPU (target < 10 s; warm-up/compile {warm:.2f} s); closed forms "
              f"{closed_s * 1e3:.2f} ms")
        print(f"  lost frames per trial: simulated {out['lost_frames_per_trial_sim']:.1f}, closed form "
              f"{expected_losses:.1f}")
        print(f"  time us: deterministic {pr.time_us:.1f}, mean {res.mean_us:.4g}, p50 {res.p50_us:.4g}, "
              f"p99 {res.p99_us:.4g}, p999 {res.p999_us:.4g}, failure rate {res.failure_rate:.3g}; flat model's "
              f"expected value {out['flat_model_expected_us']:.4g}")
        for k in out["kernels"]:
            print(f"kernels, {k['ranks']} ranks {k['algo']}, {k['trials']} trials, {k['lost_frames']:.3g} lost frames: "
                  f"streaming {k['streaming_cpu_s']:.3f} s CPU ({k['streaming_ns_per_loss']:.0f} ns/lost frame), "
                  f"sorted arrays {k['sorted_cpu_s']:.3f} s ({k['sorted_ns_per_loss']:.0f} ns): "
                  f"{k['speedup']:.1f}x")
    return 0


def _kernels(pr, c, trials: int, seed: int) -> dict:
    """CPU time of the streaming and the sorted-array kernels on the same inputs (compiled first)."""
    import numpy as np

    from protocol.cluster import _kernels as K
    from protocol.cluster.transport import kernel_args, kernel_params

    args = kernel_args(kernel_params(pr, c))
    none = np.empty(0, np.int64)
    K.sim_trials(seed, 1, *args, none, none, none)
    K.sim_trials_sorted(seed, 1, *args)
    p0 = time.process_time()
    _, _, n_stream, _ = K.sim_trials(seed, trials, *args, none, none, none)
    t_stream = time.process_time() - p0
    p0 = time.process_time()
    _, _, n_sorted = K.sim_trials_sorted(seed, trials, *args)
    t_sorted = time.process_time() - p0
    return {"ranks": pr.ranks, "algo": pr.algo, "trials": trials, "lost_frames": float(n_stream),
            "streaming_cpu_s": t_stream, "sorted_cpu_s": t_sorted,
            "streaming_ns_per_loss": 1e9 * t_stream / max(1, n_stream),
            "sorted_ns_per_loss": 1e9 * t_sorted / max(1, n_sorted), "speedup": t_sorted / max(t_stream, 1e-12)}


if __name__ == "__main__":
    raise SystemExit(main())
