"""Benchmark: simulated line rate of the fast trace generator vs baselines measured in the same run.

    python benchmarks/bench_trace.py [--seconds 2] [--repeats 3] [--json]

For each FEC mode (bypass, ieee = KP4 correct+indicate) and pre-FEC BER it reports the line bits
simulated per second of wall time (Gb/s; the real 400GBASE-R link runs at 425 Gb/s) by
:class:`protocol.tracegen.FastGenerator`, and two baselines timed in the same process:

* ``dense``: numpy drawing one uniform per line bit and comparing it with the BER (the cheapest
  possible bit-level channel, before any FEC or PCS work);
* ``bitexact``: :class:`protocol.tracegen.BitExactGenerator`, the reference link on real bits.

Single-threaded (``NUMBA_NUM_THREADS=1``); medians over ``--repeats``.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from protocol.framing import PAIR_LINE_BITS  # noqa: E402
from protocol.tracegen import BitExactGenerator, FastGenerator, GeneratorConfig  # noqa: E402


def rate_of(fn, seconds: float) -> float:
    """Run ``fn() -> line bits`` repeatedly for ``seconds``; return Gb/s."""
    bits = 0
    t0 = time.perf_counter()
    while True:
        bits += fn()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return bits / dt / 1e9


def bench_fast(fec: str, ber: float, seconds: float, seed: int) -> float:
    gen = FastGenerator(GeneratorConfig("400G", fec, ber), seed)
    gen.next_chunk(64)  # compile / load the cache
    step = int(min(1 << 18, max(2048, 3e5 / (ber * PAIR_LINE_BITS))))

    def one() -> int:
        gen.next_chunk(step)
        return step * PAIR_LINE_BITS

    return rate_of(one, seconds)


def bench_dense(ber: float, seconds: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    n = 1 << 22

    def one() -> int:
        np.flatnonzero(rng.random(n) < ber)
        return n

    return rate_of(one, seconds)


def bench_bitexact(fec: str, ber: float, seconds: float, seed: int) -> float:
    gen = BitExactGenerator(GeneratorConfig("400G", fec, ber), seed)
    gen.next_chunk(8)

    def one() -> int:
        gen.next_chunk(256)
        return 256 * PAIR_LINE_BITS

    return rate_of(one, seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time per measurement (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per measurement, median reported (default 3)")
    ap.add_argument("--ber", type=float, action="append", help="pre-FEC BER (repeatable; default 1e-4, 1e-5, 2.4e-4)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    bers = args.ber or [1e-4, 1e-5, 2.4e-4]
    rows = []
    for ber in bers:
        dense = statistics.median(bench_dense(ber, args.seconds / 2, args.seed) for _ in range(args.repeats))
        for fec in ("bypass", "ieee"):
            fast = statistics.median(bench_fast(fec, ber, args.seconds, args.seed + r) for r in range(args.repeats))
            exact = bench_bitexact(fec, ber, args.seconds / 2, args.seed)
            rows.append(dict(ber=ber, fec=fec, fast_gbps=fast, dense_gbps=dense, bitexact_gbps=exact,
                             ratio_vs_dense=fast / dense, ratio_vs_bitexact=fast / exact,
                             realtime_factor=fast / 425.0))
    out = {"machine_note": "shared 2-vCPU machine, single thread; absolute rates vary with load, ratios are "
                           "measured in the same run", "line_rate_gbps": 425.0, "rows": rows}
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(f"{'BER':>8} {'fec':<7} {'fast Gb/s':>10} {'dense Gb/s':>11} {'bitexact Gb/s':>14} "
              f"{'x dense':>8} {'x bitexact':>11} {'x 425G':>7}")
        for r in rows:
            print(f"{r['ber']:>8.1e} {r['fec']:<7} {r['fast_gbps']:>10.1f} {r['dense_gbps']:>11.2f} "
                  f"{r['bitexact_gbps']:>14.3f} {r['ratio_vs_dense']:>8.0f} {r['ratio_vs_bitexact']:>11.0f} "
                  f"{r['realtime_factor']:>7.2f}")
        print(out["machine_note"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
