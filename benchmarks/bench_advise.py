"""``phy802 advise`` benchmark: a 64-port switch and a 1024-GPU workload on one core, with its parts.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/bench_advise.py          # the whole run (about a minute)
    NUMBA_NUM_THREADS=1 python benchmarks/bench_advise.py --json

Input: the 64-port switch of ``vectors/fec_hist/example_switch64_portstat_*`` (``--since``), the
default ``dgx-h100-ib`` cluster at 128 nodes x 8 GPUs = 1024 GPUs, workloads ddp and tp of
GPT-2 124M.  Timed in CPU seconds (``time.process_time``, one Numba thread; the compiled kernels
warmed first on one port): the whole answer (``protocol.advise``: fits, per-port advice, scenarios,
verdict) and its parts inside it -- the fits of every port (:func:`phy802.telemetry.ports.fit_ports`),
the per-port policy, the time model of every mode/BER the scenarios use -- with each part's share.  Goal: the whole under 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VEC = ROOT / "vectors" / "fec_hist"
GOAL_S = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--nodes", type=int, default=128, help="nodes of 8 GPUs (default 128: 1024 GPUs)")
    ap.add_argument("--models", default="binomial,dfe,ge", help="laws fitted (default binomial,dfe,ge)")
    ap.add_argument("--bootstrap", type=int, default=50, help="dfe bootstrap replicates (default 50, as advise)")
    a = ap.parse_args()

    from phy802.telemetry.fit import CODES
    from phy802.telemetry.ports import fit_ports
    from phy802.telemetry.parsers import difference, read_telemetry
    from protocol.advise import AdviseConfig, TimeSide, advise_links, evaluate, verdict
    from protocol.cluster.topology import preset

    code = CODES["kp4"]
    tel = difference(read_telemetry(VEC / "example_switch64_portstat_t1.out", t=code.t, n=code.n),
                     read_telemetry(VEC / "example_switch64_portstat_t0.out", t=code.t, n=code.n))
    models = tuple(a.models.split(","))
    kw = dict(models=models, bootstrap=a.bootstrap, seed=1)
    cfg = AdviseConfig()
    ts = TimeSide(preset("dgx-h100-ib", nodes=a.nodes), workloads=("ddp", "tp"))
    # warm the compiled kernels (fits and the loss-recovery simulation) outside the timings
    one = type(tel)(tel.ports[:1], tel.fmt, tel.source)
    f1 = fit_ports(one, code, **kw)
    evaluate(advise_links(one, f1, cfg), f1, cfg, ts, None)

    t0 = time.process_time()
    fits = fit_ports(tel, code, **kw)
    t1 = time.process_time()
    links = advise_links(tel, fits, cfg)
    t2 = time.process_time()
    rows = evaluate(links, fits, cfg, ts, None)
    t3 = time.process_time()
    v = verdict(links, rows, cfg, ts, None)
    whole = time.process_time() - t0
    t_fit, t_policy, t_time = t1 - t0, t2 - t1, t3 - t2

    res = {"ports": len(tel.ports), "gpus": ts.cluster.ranks, "models": list(models), "whole_cpu_s": whole,
           "fit_cpu_s": t_fit, "policy_cpu_s": t_policy, "time_model_cpu_s": t_time, "fit_share": t_fit / whole, "time_model_share": t_time / whole,
           "goal_s": GOAL_S, "meets_goal": whole < GOAL_S, "verdict": v.sentence}
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"phy802 advise: {res['ports']} ports, {res['gpus']} GPUs, workloads ddp,tp, laws {','.join(models)}")
        print(f"  whole answer      {whole:7.2f} s CPU  (goal < {GOAL_S:.0f} s: {'met' if whole < GOAL_S else 'MISSED'})")
        print(f"  fits of 64 ports  {t_fit:7.2f} s CPU  ({100 * t_fit / whole:.0f}% of the whole)")
        print(f"  per-port policy   {t_policy:7.2f} s CPU  ({100 * t_policy / whole:.0f}% of the whole)")
        print(f"  time model        {t_time:7.2f} s CPU  ({100 * t_time / whole:.0f}% of the whole: scenarios x workloads)")
        print(f"  verdict: {v.sentence}")
    return 0 if whole < GOAL_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
