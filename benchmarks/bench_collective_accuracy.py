"""Benchmark: the cluster model's accuracy on the public nccl-tests runs of ``tests/data/nccl/``.

For every run of ``tests/data/nccl/runs.json`` (the cluster each describes, its regime, its goal
and its role: held out, or which constant it sets): measured / predicted time per size (above 1:
the model is too fast), before any calibration, and the summary from 8 KB up against the goals
(worst ratio within the run's goal, 1.5x on healthy Hopper/Blackwell, 2x on cloud transports and
one-NIC-per-node layouts; median within 1.15x where the run states it).  Then, per run with enough
sizes, ``--calibrate`` on every other size from 8 KB up and the ratios on the sizes held out
(goal: within 1.2x).  Measured values are nccl-tests'; predicted ones are model values.

Usage::

    python benchmarks/bench_collective_accuracy.py [--sizes] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HOLDOUT_GOAL = 1.2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", action="store_true", help="print every size of every run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from protocol.cluster.accuracy import MIN_BYTES, evaluate, holdout, load_runs, summary

    here = os.path.dirname(os.path.abspath(__file__))
    runs = load_runs(os.path.join(here, os.pardir, "tests", "data", "nccl", "runs.json"))
    report = []
    for s in runs:
        rows = evaluate(s)
        sm = summary(rows)
        ho = holdout(s)
        met = None
        if sm is not None and s.goal is not None:
            met = sm["worst"] <= s.goal and (s.goal_median is None or sm["median_abs"] <= s.goal_median)
        hw = max(max(r["ratio"], 1 / r["ratio"]) for r in ho) if ho else None
        hm = statistics.median(r["ratio"] for r in ho) if ho else None
        report.append({"file": os.path.basename(s.path), "regime": s.regime, "role": s.role, "goal": s.goal,
                       "goal_median": s.goal_median, "summary": sm, "goal_met": met, "rows": rows,
                       "holdout_worst": hw, "holdout_median": hm, "holdout_met": None if hw is None else hw <= HOLDOUT_GOAL,
                       "holdout_rows": ho})
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"measured / predicted (nccl-tests / model values), before calibration, sizes from {MIN_BYTES} B up")
    print(f"{'run':<48} {'role':<12} {'n':>3} {'min':>5} {'max':>5} {'median':>6} {'goal':>5} {'met':>4}"
          f" {'held-out worst':>14} {'median':>6} {'(<=1.2)':>7}")
    for r in report:
        sm = r["summary"]
        g = "-" if r["goal"] is None else f"{r['goal']:g}"
        met = "-" if r["goal_met"] is None else ("yes" if r["goal_met"] else "NO")
        ho = "-" if r["holdout_worst"] is None else f"{r['holdout_worst']:.2f}"
        hmed = "-" if r["holdout_median"] is None else f"{r['holdout_median']:.2f}"
        hm = "-" if r["holdout_met"] is None else ("yes" if r["holdout_met"] else "NO")
        if sm is None:
            print(f"{r['file']:<48} {r['role']:<12} {0:>3} (no size from {MIN_BYTES} B up)")
            continue
        print(f"{r['file']:<48} {r['role']:<12} {sm['n']:>3} {sm['min']:>5.2f} {sm['max']:>5.2f} {sm['median']:>6.2f} "
              f"{g:>5} {met:>4} {ho:>14} {hmed:>6} {hm:>7}")
        if a.sizes:
            for x in r["rows"]:
                print(f"    {x['bytes']:>12} B  measured {x['measured_us']:>10.1f} us  predicted {x['predicted_us']:>10.1f} us"
                      f"  ratio {x['ratio']:5.2f}  {x['algo']}/{x['proto']}, {x['channels']} channels")
    print("regimes: " + "; ".join(f"{r['file'].split('_')[0]}: {r['regime']}" for r in report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
