"""RS(544,514) "KP4" encode/decode throughput of phy802.fec against galois, measured in the same run.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/bench_rs.py            # table
    NUMBA_NUM_THREADS=1 python benchmarks/bench_rs.py --json     # machine-readable

Rates are codewords/s (median of ``--reps`` timed runs on one batch; ``--clock thread`` times this
thread's CPU time instead of wall time, steadier on a shared machine); every run is checked for
correctness (<= t errors decode to the sent word; t+1 errors are reported uncorrectable). galois is
timed on smaller batches (its decoder is ~1000x slower with errors); the ratio column is
phy802 / galois. First-call time is measured in a fresh subprocess (import + first encode + decode,
Numba cache warm after the first ever run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from phy802.fec import KP4, decode, encode  # noqa: E402

ERRORS = (0, 8, 15, 16)


_CLOCK = {"wall": time.perf_counter, "thread": time.thread_time}
_clock = time.perf_counter


def _median_rate(fn, n_words: int, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return n_words / statistics.median(times)


def _with_errors(rng, cw: np.ndarray, w: int) -> np.ndarray:
    rx = cw.copy()
    if w:
        pos = np.argsort(rng.random(cw.shape), axis=1)[:, :w]
        rx[np.arange(cw.shape[0])[:, None], pos] ^= rng.integers(1, 1024, size=(cw.shape[0], w)).astype(np.uint16)
    return rx


def _check(dec, nc, cw, w, t):
    if w <= t:
        assert np.array_equal(dec, cw) and np.all(nc == w), f"decode wrong at {w} errors"
    else:
        assert np.all(nc < 0), f"decoder did not flag {w} errors"  # miscorrection P ~ 1e-17


def first_call_seconds() -> float:
    code = (
        "import time; t=time.perf_counter(); import numpy as np; from phy802.fec import KP4, encode, decode;"
        "c=encode(KP4, np.zeros((1,514),np.uint16)); c[0,3]^=1; decode(KP4, c);"
        "print(time.perf_counter()-t)"
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)  # warm the cache
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def run(batch: int, reps: int, galois_batch: int, galois_dec_batch: int, with_galois: bool) -> dict:
    rng = np.random.default_rng(802)
    msgs = rng.integers(0, 1024, size=(batch, KP4.k)).astype(np.uint16)
    encode(KP4, msgs[:2])  # compile / load cache
    cw = encode(KP4, msgs)
    res: dict = {"code": str(KP4), "batch": batch, "reps": reps, "phy802": {}, "galois": {}, "ratio": {}}
    res["phy802"]["encode"] = _median_rate(lambda: encode(KP4, msgs), batch, reps)
    for w in ERRORS:
        rx = _with_errors(rng, cw, w)
        dec, nc = decode(KP4, rx)
        _check(dec, nc, cw, w, KP4.t)
        res["phy802"][f"decode_w{w}"] = _median_rate(lambda: decode(KP4, rx), batch, reps)
    if with_galois:
        import galois

        GF = galois.GF(2**10, irreducible_poly="x^10 + x^3 + 1")
        rs = galois.ReedSolomon(1023, 993, field=GF, alpha=GF(2), c=0)
        gm = GF(msgs[:galois_batch])
        gcw = rs.encode(gm)
        assert np.array_equal(np.asarray(gcw), cw[:galois_batch])
        res["galois"]["encode"] = _median_rate(lambda: rs.encode(gm), galois_batch, reps)
        for w in ERRORS:
            nb = galois_batch if w == 0 else galois_dec_batch
            rx = GF(_with_errors(rng, cw[:nb], w))
            rs.decode(rx[:2], output="codeword", errors=True)  # compile
            dec, nc = rs.decode(rx, output="codeword", errors=True)
            _check(np.asarray(dec), np.asarray(nc), cw[:nb], w, KP4.t)
            res["galois"][f"decode_w{w}"] = _median_rate(
                lambda: rs.decode(rx, output="codeword", errors=True), nb, max(1, min(reps, 3))
            )
        res["ratio"] = {k: res["phy802"][k] / res["galois"][k] for k in res["galois"]}
    res["first_call_s"] = first_call_seconds()
    return res


def table(res: dict) -> str:
    rows = [f"{res['code']}, batch {res['batch']}, median of {res['reps']}, {res['clock']} clock, NUMBA_NUM_THREADS="
            f"{os.environ.get('NUMBA_NUM_THREADS')}", f"{'operation':<16}{'phy802 cw/s':>14}{'galois cw/s':>14}{'ratio':>9}"]
    for k, v in res["phy802"].items():
        g = res["galois"].get(k)
        r = res["ratio"].get(k)
        rows.append(f"{k:<16}{v:>14,.0f}{(f'{g:,.0f}' if g else '-'):>14}{(f'{r:,.1f}x' if r else '-'):>9}")
    rows.append(f"first call in a fresh process (cache warm): {res['first_call_s']:.2f} s")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=20000, help="codewords per timed call (default 20000)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per point (default 5)")
    ap.add_argument("--galois-batch", type=int, default=2000, help="galois encode / error-free batch (default 2000)")
    ap.add_argument("--galois-decode-batch", type=int, default=100, help="galois batch with errors (default 100)")
    ap.add_argument("--no-galois", action="store_true", help="skip the galois baseline")
    ap.add_argument("--clock", choices=sorted(_CLOCK), default="wall",
                    help="wall time (default) or this thread's CPU time (steadier on a shared machine)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)
    global _clock
    _clock = _CLOCK[args.clock]
    res = run(args.batch, args.reps, args.galois_batch, args.galois_decode_batch, not args.no_galois)
    res["clock"] = args.clock
    print(json.dumps(res, indent=2) if args.json else table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
