"""Clause 177 inner code (128,120) throughput: encode, hard decode (bits) and Chase-2 soft decode
(PAM4 samples) of phy802.fec.inner (Numba) against its plain-numpy twins, in the same run.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/bench_inner.py            # table
    NUMBA_NUM_THREADS=1 python benchmarks/bench_inner.py --json     # machine-readable

Rates are Gb/s **of line** (128 bits per block), median of ``--reps`` timed runs on one batch of
``--blocks`` blocks, one thread; ``--clock thread`` times this thread's CPU time (steadier on a
shared machine).  Every run is checked: the Numba and numpy outputs are equal.  Goals:
encode and hard decode >= 1 Gb/s, soft >= 0.2 Gb/s per core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from phy802.fec import inner  # noqa: E402
from phy802.theory import sigma_from_snr_db  # noqa: E402

_CLOCK = {"wall": time.perf_counter, "thread": time.thread_time}


def _rate(fn, n_blocks: int, reps: int, clock) -> float:
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return n_blocks * 128 / statistics.median(times) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=200_000, help="blocks per timed batch (default 200000)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per case, median taken (default 5)")
    ap.add_argument("--snr-db", type=float, default=15.0, help="SNR of the soft-decode samples (default 15)")
    ap.add_argument("--lrp", type=int, default=2, help="Chase-2 least reliable positions (default 2)")
    ap.add_argument("--clock", choices=tuple(_CLOCK), default="wall", help="wall (default) or thread CPU time")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args(argv)
    clock = _CLOCK[a.clock]
    rng = np.random.default_rng(1)
    N = a.blocks
    m = rng.integers(0, 2, (N, 120), dtype=np.uint8)
    c = inner.encode(m)
    y = inner.pam4_samples(c, float(sigma_from_snr_db(a.snr_db)), rng)
    hard = c ^ (rng.random(c.shape) < 2e-3).astype(np.uint8)
    # correctness + warm-up (Numba compile)
    assert np.array_equal(inner.encode(m), inner.encode_numpy(m))
    assert all(np.array_equal(x, z) for x, z in zip(inner.decode_hard(hard), inner.decode_hard_numpy(hard)))
    ns = min(N, 50_000)
    assert all(np.array_equal(x, z) for x, z in zip(inner.decode_soft(y[:ns], a.lrp), inner.decode_soft_numpy(y[:ns], a.lrp)))
    rows = []
    for name, fast, slow, n_slow in (
        ("encode", lambda: inner.encode(m), lambda: inner.encode_numpy(m), N),
        ("hard decode", lambda: inner.decode_hard(hard), lambda: inner.decode_hard_numpy(hard), N),
        (f"soft decode (Chase-2, 2^{a.lrp})", lambda: inner.decode_soft(y, a.lrp),
         lambda: inner.decode_soft_numpy(y[:ns], a.lrp), ns),
    ):
        rf = _rate(fast, N, a.reps, clock)
        rs = _rate(slow, n_slow, max(1, a.reps // 2), clock)
        rows.append({"case": name, "numba_gbps": rf, "numpy_gbps": rs, "ratio": rf / rs})
    doc = {"blocks": N, "reps": a.reps, "clock": a.clock, "snr_db": a.snr_db, "rows": rows,
           "note": "one thread; the machine may be shared: compare the ratio column, timed in the same run"}
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"{'case':<28} {'numba Gb/s':>10} {'numpy Gb/s':>10} {'ratio':>7}")
        for r in rows:
            print(f"{r['case']:<28} {r['numba_gbps']:>10.2f} {r['numpy_gbps']:>10.3f} {r['ratio']:>7.1f}")
        print(f"# {N} blocks x {a.reps} reps, {a.clock} clock, 1 thread; line Gb/s = 128 bits per block")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
