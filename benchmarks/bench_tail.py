"""``phy802 fec tail`` benchmark: speed, baseline vs truth on simulated burst channels, interval coverage.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/bench_tail.py            # all three parts (minutes)
    NUMBA_NUM_THREADS=1 python benchmarks/bench_tail.py --quick    # smaller (CI smoke)
    NUMBA_NUM_THREADS=1 python benchmarks/bench_tail.py --json

1. **Speed** (CPU seconds, ``time.process_time``): the codeword law per call, the compiled fast
   path against the step-by-step DP timed in the same run; one port's full fit (binomial, dfe, ge;
   goodness of fit; profile, 200-replicate bootstrap and likelihood-region intervals) on three
   histograms; the baseline in the same run: the first 8 ports of the 64-port SONiC switch of
   ``vectors/fec_hist/example_switch64_portstat_*`` (``--since``) with GE by the 200-replicate
   bootstrap (the method before) against the current code; the whole switch in one process, and
   with ``workers=2`` (wall clock; the result compared port by port).
2. **Baseline vs truth**: histograms of ``--codewords`` KP4 codewords drawn (fixed seeds) from the
   exact codeword law of DFE and Gilbert-Elliott channels with known FER; for each, the FER of
   phy802's models (with 95% intervals), of SONiC's predictor (log-linear fit of bins 1..15,
   extrapolated to 16..20) and the observed CER, as ratios to the true FER.
3. **Coverage**: ``--coverage-reps`` independent histograms per channel, each fitted with
   ``--coverage-bootstrap`` replicates; the fraction of 95% FER intervals (of the true model family)
   that hold the true FER, with its Clopper-Pearson 95% interval and the exact two-sided binomial
   test of coverage = 0.95; GE both by its likelihood region (now) and by the bootstrap (before).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from phy802.telemetry.fit import CODES, _reference_pmf, fit_histogram, model_pmf, sample_histogram  # noqa: E402
from phy802.telemetry.ports import fit_ports  # noqa: E402
from phy802.telemetry import fit as tail_mod  # noqa: E402
from phy802.telemetry.parsers import difference, read_telemetry  # noqa: E402
from phy802.stats import rate  # noqa: E402

KP4 = CODES["kp4"]
CHANNELS = [
    ("DFE ser 2e-4 pb 0.5", "dfe", {"ser": 2e-4, "pb": 0.5}),
    ("DFE ser 3e-4 pb 0.3", "dfe", {"ser": 3e-4, "pb": 0.3}),
    ("DFE ser 1e-4 pb 0.75", "dfe", {"ser": 1e-4, "pb": 0.75}),
    ("GE e_b 0.02 (bursts 10 sym)", "ge", {"p_gb": 1e-3, "p_bg": 0.1, "e_g": 1e-5, "e_b": 0.02}),
    ("GE e_b 0.05 (bursts 50 sym)", "ge", {"p_gb": 1e-5, "p_bg": 0.02, "e_g": 5e-5, "e_b": 0.05}),
]


def _cpu(fn):
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def speed(quick: bool) -> dict:
    out: dict = {}
    p = {"ser": 3e-4, "pb": 0.3}
    model_pmf("dfe", p, KP4), _reference_pmf("dfe", p, KP4)  # compile
    n = 500 if quick else 3000
    tr, _ = _cpu(lambda: [_reference_pmf("dfe", p, KP4) for _ in range(n)])
    tf, _ = _cpu(lambda: [model_pmf("dfe", p, KP4) for _ in range(n)])
    out["law_us"] = {"step_dp": tr / n * 1e6, "fast": tf / n * 1e6, "ratio": tr / tf}
    rng = np.random.default_rng(3)
    hists = {"example_kp4_dfe.json (DFE, 9 bins)":
             read_telemetry(ROOT / "vectors/fec_hist/example_kp4_dfe.json", t=15).ports[0].hist,
             "GE, 2e6 codewords": sample_histogram("ge", CHANNELS[3][2], KP4, 2_000_000, rng),
             "binomial BER 1e-4, 1e9 codewords": sample_histogram("binomial", {"p_symbol": 1e-3}, KP4, 10**9, rng)}
    fit_histogram(hists["GE, 2e6 codewords"], "kp4", bootstrap=2)  # compile
    out["one_port_s"] = {}
    for name, h in hists.items():
        t, f = _cpu(lambda: fit_histogram(h, "kp4", bootstrap=200, seed=1))
        out["one_port_s"][name] = {"cpu_s": t, "methods": {k: v.interval_method for k, v in f.fits.items()}}
    t1 = read_telemetry(ROOT / "vectors/fec_hist/example_switch64_portstat_t1.out", t=15)
    t0 = read_telemetry(ROOT / "vectors/fec_hist/example_switch64_portstat_t0.out", t=15)
    sw = difference(t1, t0)
    # the baseline, in this run: the method before (GE by the 200-replicate percentile bootstrap) on the
    # first `base_ports` ports, against the current code on the same ports
    base_ports = 4 if quick else 8
    sub = replace(sw, ports=tuple(sw.ports[:base_ports]))
    tail_mod.GE_INTERVALS = "bootstrap"
    try:
        tb, _ = _cpu(lambda: fit_ports(sub, KP4, bootstrap=200, seed=1))
    finally:
        tail_mod.GE_INTERVALS = "region"
    tn, _ = _cpu(lambda: fit_ports(sub, KP4, bootstrap=200, seed=1))
    out["baseline_ports"] = {"ports": base_ports, "before_cpu_s": tb, "now_cpu_s": tn, "ratio": tb / tn}
    if not quick:
        w0 = time.perf_counter()
        t, fits = _cpu(lambda: fit_ports(sw, KP4, bootstrap=200, seed=1))
        out["switch64"] = {"cpu_s": t, "wall_s": time.perf_counter() - w0, "ports": len(fits), "bootstrap": 200}
        # --workers 2 (2 processes; CPU time of the children is not in process_time: wall clock only)
        w0 = time.perf_counter()
        fits2 = fit_ports(sw, KP4, bootstrap=200, seed=1, workers=2)
        out["switch64"]["workers2_wall_s"] = time.perf_counter() - w0
        out["switch64"]["workers2_same"] = all(
            (fits[k] is None and fits2[k] is None) or fits[k].as_dict()["models"] == fits2[k].as_dict()["models"]
            for k in fits)
    return out


def baseline(codewords: int, bootstrap: int) -> list[dict]:
    rows = []
    for i, (name, m, p) in enumerate(CHANNELS):
        true = model_pmf(m, p, KP4).fer
        h = sample_histogram(m, p, KP4, codewords, np.random.default_rng(100 + i))
        f = fit_histogram(h, "kp4", bootstrap=bootstrap, seed=1)
        # best: the lowest AIC among the laws that pass their goodness-of-fit test ("no law fits" where none does)
        r = {"channel": name, "true_fer": true, "best": f.best if not f.withheld else f"{f.best} (no law fits)",
             "passing": f.verdict["passing"], "codewords": codewords}
        for k, v in f.fits.items():
            r[k] = v.predicted["fer"]
        r["sonic_predicted"] = f.baseline["predicted_fer"]
        r["sonic_r2"] = f.baseline["r2"]
        r["observed_cer"] = rate(int(h.uncorrectable), h.total).as_dict()
        rows.append(r)
    return rows


def coverage(reps: int, bootstrap: int, codewords: int, ge_bootstrap_too: bool = True) -> list[dict]:
    """Coverage of the 95% FER interval of the true model family, with the exact binomial test of
    "coverage = 0.95" (two-sided, scipy.stats.binomtest; p < 0.05 rejects nominal coverage)."""
    from scipy.stats import binomtest

    out = []
    runs = [(CHANNELS[0], "bootstrap"), (CHANNELS[3], "region")]
    if ge_bootstrap_too:
        runs.append((CHANNELS[3], "bootstrap"))
    for (name, m, p), how in runs:
        true = model_pmf(m, p, KP4).fer
        hit = 0
        widths = []
        tail_mod.GE_INTERVALS = how if m == "ge" else "region"
        try:
            for k in range(reps):
                h = sample_histogram(m, p, KP4, codewords, np.random.default_rng(1000 + k))
                f = fit_histogram(h, "kp4", models=("binomial", m), bootstrap=bootstrap, seed=k)
                r = f.fits[m].predicted["fer"]
                hit += int(r["lo"] <= true <= r["hi"])
                widths.append(r["hi"] / r["lo"])
        finally:
            tail_mod.GE_INTERVALS = "region"
        cp = rate(hit, reps).as_dict()
        out.append({"channel": name, "model": m, "method": how if m == "ge" else "bootstrap", "reps": reps,
                    "bootstrap": bootstrap, "codewords": codewords, "covered": hit, "coverage": cp,
                    "binomtest_p": float(binomtest(hit, reps, 0.95).pvalue),
                    "median_hi_over_lo": float(np.median(widths))})
    return out


def _fmt(r) -> str:
    return "-" if r is None else f"{r['value']:.2e} [{r['lo']:.2e},{r['hi']:.2e}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (no 64-port switch; fewer coverage reps)")
    ap.add_argument("--codewords", type=float, default=1e10, help="codewords per baseline histogram (default 1e10)")
    ap.add_argument("--bootstrap", type=int, default=200, help="bootstrap replicates in the baseline table (default 200)")
    ap.add_argument("--coverage-reps", type=int, default=40, help="histograms per channel for coverage (default 40)")
    ap.add_argument("--coverage-bootstrap", type=int, default=100, help="replicates per coverage fit (default 100)")
    ap.add_argument("--coverage-codewords", type=float, default=1e7, help="codewords per coverage histogram (default 1e7)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: speed, baseline, coverage")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    reps = min(a.coverage_reps, 8) if a.quick else a.coverage_reps
    res: dict = {"machine": f"{os.cpu_count()} CPUs (shared: other jobs may run)", "numba_threads": os.environ["NUMBA_NUM_THREADS"]}
    if "speed" not in skip:
        res["speed"] = speed(a.quick)
    if "baseline" not in skip:
        res["baseline"] = baseline(int(a.codewords if not a.quick else 1e8), a.bootstrap if not a.quick else 20)
    if "coverage" not in skip:
        res["coverage"] = coverage(reps, a.coverage_bootstrap if not a.quick else 20, int(a.coverage_codewords),
                                   not a.quick)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"machine: {res['machine']}")
    if "speed" in res:
        s = res["speed"]
        lu = s["law_us"]
        print(f"\ncodeword law per call: step DP {lu['step_dp']:.1f} us, fast path {lu['fast']:.1f} us "
              f"({lu['ratio']:.1f}x, same run)")
        for k, v in s["one_port_s"].items():
            print(f"one port, full fit (3 models, bootstrap 200): {v['cpu_s']:.2f} s CPU  {k}")
        b = s["baseline_ports"]
        print(f"first {b['ports']} switch ports, full fit: before (GE by 200-replicate bootstrap) {b['before_cpu_s']:.1f} s "
              f"CPU, now {b['now_cpu_s']:.1f} s CPU ({b['ratio']:.1f}x, same run)")
        if "switch64" in s:
            w = s["switch64"]
            print(f"64-port switch (--since, bootstrap 200, 1 process): {w['cpu_s']:.1f} s CPU, {w['wall_s']:.1f} s wall; "
                  f"--workers 2: {w['workers2_wall_s']:.1f} s wall (same result: {w['workers2_same']})")
    if "baseline" in res:
        print("\n| channel | true FER | binomial | dfe [95%] | ge [95%] | best | SONiC predicted (R^2) | observed CER |")
        print("|---|---|---|---|---|---|---|---|")
        for r in res["baseline"]:
            ratio = lambda v: "-" if v is None else f"{v:.2e} (x{v / r['true_fer']:.2g})"
            o = r["observed_cer"]
            print(f"| {r['channel']} | {r['true_fer']:.2e} | {ratio(r['binomial']['value'])} | {_fmt(r.get('dfe'))} | "
                  f"{_fmt(r.get('ge'))} | {r['best']} | {ratio(r['sonic_predicted'])} ({r['sonic_r2']:.3f}) | "
                  f"{o['value']:.1e} [{o['lo']:.1e},{o['hi']:.1e}] |")
        print(f"({res['baseline'][0]['codewords']:.0e} codewords per histogram, drawn from each channel's exact law)")
    if "coverage" in res:
        print()
        for c in res["coverage"]:
            cp = c["coverage"]
            print(f"coverage {c['channel']}: {c['covered']}/{c['reps']} {c['model']} ({c['method']}) 95% FER intervals "
                  f"hold the true FER (CP 95% [{cp['lo']:.2f},{cp['hi']:.2f}]; exact binomial test of 0.95: p = "
                  f"{c['binomtest_p']:.3g}; {c['codewords']:.0e} codewords, bootstrap {c['bootstrap']}; median hi/lo "
                  f"{c['median_hi_over_lo']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
