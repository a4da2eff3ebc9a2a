"""Benchmark the PAM4 AWGN channel paths against a plain numpy baseline, in the same run.

Rates are PAM4 symbols per second through each path, for the same sent symbols, at pre-FEC BER
1e-4 and 1e-5 (SNR from the closed form), single-threaded:

* ``events``: exact error-event sampler given the sent symbols (geometric skipping + thinning);
* ``events_iid``: the data-free sampler (positions, sent and received levels);
* ``waveform``: one Gaussian per symbol inside a Numba kernel, sliced;
* ``numpy``: baseline ``levels[s] + sigma * rng.standard_normal(n)``, a 3-threshold slicer and
  ``flatnonzero(received != sent)``;
* ``dfe_events``: the DFE burst sampler at the same SER (pb = 0.5), for reference.

Every path also reports its measured BER next to the closed form (a sanity check, not a test).
Run: ``NUMBA_NUM_THREADS=1 python benchmarks/bench_channel.py [--n 20000000] [--repeats 5] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from phy802.channel import DfeBurst, Pam4Awgn  # noqa: E402
from phy802.pma.pam4 import symbol_bit_errors  # noqa: E402

LEVELS = np.array([-3.0, -1.0, 1.0, 3.0])


def numpy_baseline(s: np.ndarray, sigma: float, rng: np.random.Generator):
    y = LEVELS[s] + sigma * rng.standard_normal(s.size)
    r = (y > -2.0).astype(np.uint8) + (y > 0.0) + (y > 2.0)
    pos = np.flatnonzero(r != s)
    return pos, r[pos]


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000_000, help="symbols per call (default 2e7)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per path; the median is reported")
    ap.add_argument("--ber", type=float, nargs="+", default=[1e-4, 1e-5])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    s = rng.integers(0, 4, args.n).astype(np.uint8)
    results = []
    for ber in args.ber:
        ch = Pam4Awgn.from_ber(ber)
        dfe = DfeBurst.from_ser(ch.ser, 0.5)
        paths = {
            "events": lambda: ch.sample_symbol_errors(s, rng, "events"),
            "events_iid": lambda: ch.sample_iid_errors(s.size, rng),
            "waveform": lambda: ch.sample_symbol_errors(s, rng, "waveform"),
            "numpy": lambda: numpy_baseline(s, ch.sigma, rng),
            "dfe_events": lambda: dfe.sample_events(s.size, rng),
        }
        for fn in paths.values():  # warm-up: Numba compile / cache load
            fn()
        row = {"ber": ber, "snr_db": ch.snr_db, "n_symbols": args.n, "paths": {}}
        for name, fn in paths.items():
            sec, out = _median_time(fn, args.repeats)
            if name in ("events", "waveform"):
                meas = float(symbol_bit_errors(s[out.positions], out.values).sum()) / (2 * s.size)
            elif name == "numpy":
                meas = float(symbol_bit_errors(s[out[0]], out[1]).sum()) / (2 * s.size)
            elif name == "events_iid":
                meas = float(symbol_bit_errors(out.sent, out.received).sum()) / (2 * s.size)
            else:
                meas = out.positions.size / (2 * s.size)
            row["paths"][name] = {"seconds": sec, "symbols_per_s": args.n / sec, "measured_ber": meas}
        base = row["paths"]["numpy"]["symbols_per_s"]
        for v in row["paths"].values():
            v["ratio_vs_numpy"] = v["symbols_per_s"] / base
        row["closed_form_ber"] = ch.ber
        results.append(row)

    out = {"benchmark": "channel", "numba_threads": os.environ.get("NUMBA_NUM_THREADS"), "results": results}
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for row in results:
        print(f"pre-FEC BER {row['ber']:.0e} (SNR {row['snr_db']:.2f} dB, closed form {row['closed_form_ber']:.3e}), "
              f"{row['n_symbols']:.1e} symbols/call, median of {args.repeats}")
        print(f"  {'path':<11} {'Msym/s':>10} {'x numpy':>9} {'measured BER':>13}")
        for name, v in row["paths"].items():
            print(f"  {name:<11} {v['symbols_per_s'] / 1e6:>10.1f} {v['ratio_vs_numpy']:>9.1f} {v['measured_ber']:>13.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
