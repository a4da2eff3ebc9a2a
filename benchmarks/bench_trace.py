"""Benchmark: simulated line rate of the fast trace generator vs baselines measured in the same run.

    python benchmarks/bench_trace.py [--seconds 2] [--repeats 3] [--json]

For each FEC mode (bypass, ieee = KP4 correct+indicate) and pre-FEC BER it reports the line bits
simulated per second of wall time (Gb/s; the real 400GBASE-R link runs at 425 Gb/s) by
:class:`protocol.trace.fast.FastGenerator`, and two baselines timed in the same process:

* ``dense``: numpy drawing one uniform per line bit and comparing it with the BER (the cheapest
  possible bit-level channel, before any FEC or PCS work);
* ``bitexact``: :class:`protocol.trace.bitexact.BitExactGenerator`, the reference link on real bits.

Single-threaded (``NUMBA_NUM_THREADS=1``); medians over ``--repeats``.

``--written`` measures instead, side by side in one run, at pre-FEC BER 1e-4 bypass:

* ``written``: :func:`protocol.trace.generate_trace` to a file (format v2, one worker: generation
  and encoding in this thread, CRC + writing in the writer thread), wall and process CPU time;
* ``in-memory``: the same generator and chunk size without any file, chunks as flip arrays
  (``next_chunk``, what a live replay source consumes);
* ``encoded``: the same chunks as trace records without any file (``next_encoded``: the fused
  kernel writes the version-2 records itself; what ``written`` adds on top is the CRC, the write
  and each shard's first chunk, kept as arrays to join the previous shard's descrambler carry);
* ``v1 write``: the same generator and chunks written the version-1 way (raw int64/int8/uint8
  arrays in an uncompressed zip, chunk by chunk, no thread, fsync at the end): the old
  ``trace generate`` loop;
* bytes per flip of both formats;
* 1 vs 2 local workers: ``trace generate`` (shards on a process pool of 1 and of 2, each worker
  joining and writing its shards into the trace itself, at the offset the previous shard's baton
  hands on; timed once the pool's processes are started, and with the start-up as the command
  line pays it) and a sharded
  sweep point (``phy802.sweep`` with ``shard_pairs``), wall-time ratio;
* the 1-minute load average before and after, and the machine's CPU count (wall rates drop with load).
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
from protocol.trace.bitexact import BitExactGenerator  # noqa: E402
from protocol.trace.config import GeneratorConfig  # noqa: E402
from protocol.trace.fast import FastGenerator  # noqa: E402


def rate_of(fn, seconds: float) -> tuple[float, float]:
    """Run ``fn() -> line bits`` repeatedly for ``seconds``; return (wall Gb/s, CPU-time Gb/s).

    The CPU-time rate (``time.process_time``) is what one core delivers when this process is
    not descheduled; on a shared machine the wall rate is lower by the share other jobs take.
    """
    bits = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    while True:
        bits += fn()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            dc = max(time.process_time() - c0, 1e-9)
            return bits / dt / 1e9, bits / dc / 1e9


def bench_fast(fec: str, ber: float, seconds: float, seed: int) -> tuple[float, float]:
    gen = FastGenerator(GeneratorConfig("400G", fec, ber), seed)
    gen.next_chunk(64)  # compile / load the cache
    step = int(min(1 << 18, max(2048, 3e5 / (ber * PAIR_LINE_BITS))))

    def one() -> int:
        gen.next_chunk(step)
        return step * PAIR_LINE_BITS

    return rate_of(one, seconds)


def bench_dense(ber: float, seconds: float, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    n = 1 << 22

    def one() -> int:
        np.flatnonzero(rng.random(n) < ber)
        return n

    return rate_of(one, seconds)


def bench_bitexact(fec: str, ber: float, seconds: float, seed: int) -> tuple[float, float]:
    gen = BitExactGenerator(GeneratorConfig("400G", fec, ber), seed)
    gen.next_chunk(8)

    def one() -> int:
        gen.next_chunk(256)
        return 256 * PAIR_LINE_BITS

    return rate_of(one, seconds)


def _v1_write(path, gen, n_pairs: int, step: int) -> None:
    """Generate and write chunk by chunk the version-1 way (raw .npy members in an uncompressed zip):
    the old ``generate_trace`` loop, as the baseline."""
    import zipfile

    with open(path, "wb") as fh, zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        done = i = 0
        while done < n_pairs:
            k = min(step, n_pairs - done)
            ch = gen.next_chunk(k)
            done += k
            for what, arr in (("offsets", ch.offsets), ("lanes", ch.lanes), ("flags", ch.flags), ("marks", ch.marks)):
                with z.open(f"c{i:06d}_{what}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)
            i += 1
    with open(path, "rb+") as fh:  # the old writer ended with fsync (atomic_open), as v2 does
        os.fsync(fh.fileno())


def bench_written(bits: float, repeats: int, tmp: str, seed: int) -> dict:
    import tempfile

    from protocol.trace.sharded import _default_chunk_pairs, generate_trace

    ber = 1e-4
    step = _default_chunk_pairs(ber)
    n_pairs = int(bits // PAIR_LINE_BITS)
    load0 = os.getloadavg()[0]
    rows = {"written": [], "in_memory": [], "encoded": [], "v1_write": []}
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        path = os.path.join(d, "t.trace")
        generate_trace(path, fec="bypass", ber=ber, line_bits=1e9, seed=seed)  # compile / load caches
        meta = None
        for r in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            meta = generate_trace(path, fec="bypass", ber=ber, line_bits=n_pairs * PAIR_LINE_BITS, seed=seed + r)
            rows["written"].append((time.perf_counter() - t0, time.process_time() - c0))
            size = os.path.getsize(path)
            os.unlink(path)
            gen = FastGenerator(GeneratorConfig("400G", "bypass", ber), seed + r)
            done = 0
            t0, c0 = time.perf_counter(), time.process_time()
            while done < n_pairs:  # the same chunks, kept nowhere
                k = min(step, n_pairs - done)
                gen.next_chunk(k)
                done += k
            rows["in_memory"].append((time.perf_counter() - t0, time.process_time() - c0))
            gen = FastGenerator(GeneratorConfig("400G", "bypass", ber), seed + r)
            done = 0
            t0, c0 = time.perf_counter(), time.process_time()
            while done < n_pairs:  # the same chunks as trace records (the fused kernel), kept nowhere
                k = min(step, n_pairs - done)
                gen.next_encoded(k)
                done += k
            rows["encoded"].append((time.perf_counter() - t0, time.process_time() - c0))
            gen = FastGenerator(GeneratorConfig("400G", "bypass", ber), seed + r)
            t0, c0 = time.perf_counter(), time.process_time()
            _v1_write(os.path.join(d, "v1.npz"), gen, n_pairs, step)  # generate + write as version 1 did
            rows["v1_write"].append((time.perf_counter() - t0, time.process_time() - c0))
            v1_size = os.path.getsize(os.path.join(d, "v1.npz"))
            os.unlink(os.path.join(d, "v1.npz"))
    line = n_pairs * PAIR_LINE_BITS
    out = {"ber": ber, "fec": "bypass", "line_bits": line, "chunk_pairs": step, "repeats": repeats,
           "load_avg_1min_before": load0}
    for k, v in rows.items():
        out[f"{k}_gbps"] = statistics.median(line / w / 1e9 for w, _ in v)
        out[f"{k}_cpu_gbps"] = statistics.median(line / c / 1e9 for _, c in v)
    out["written_over_in_memory"] = out["written_gbps"] / out["in_memory_gbps"]
    out["written_over_v1"] = out["written_gbps"] / out["v1_write_gbps"]
    out["bytes_per_flip"] = size / meta["n_flips"]
    out["v1_bytes_per_flip"] = v1_size / meta["n_flips"]
    out["flips"] = meta["n_flips"]
    return out


def bench_workers(bits: float, tmp: str, seed: int, sweep_codewords: int) -> dict:
    """1 vs 2 local worker processes: trace shards and a sharded sweep point, wall time each."""
    import tempfile

    from phy802.sweep import SweepConfig, run_sweep
    from protocol.trace import generate_trace

    out = {}
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        cold, warm = {}, {}
        for w in (1, 2, 1, 2):  # interleaved, the better of two each
            path = os.path.join(d, f"w{w}.trace")
            t0 = time.perf_counter()
            with _pool(w) as ex:  # same process-pool path for 1 and 2
                _warm_up(ex, w)  # worker processes started, kernels loaded
                t1 = time.perf_counter()
                generate_trace(path, fec="bypass", ber=1e-4, line_bits=bits, seed=seed, workers=w, executor=ex,
                               shard_pairs=1 << 20)
                t2 = time.perf_counter()
            cold[w] = min(cold.get(w, 1e30), t2 - t0)  # as the command line pays it: pool start-up included
            warm[w] = min(warm.get(w, 1e30), t2 - t1)
            os.unlink(path)
        out["trace_1_worker_s"], out["trace_2_workers_s"] = warm[1], warm[2]
        out["trace_speedup_2_over_1"] = warm[1] / warm[2]
        out["trace_1_worker_cold_s"], out["trace_2_workers_cold_s"] = cold[1], cold[2]
        out["trace_speedup_2_over_1_cold"] = cold[1] / cold[2]
    cfg = SweepConfig(points=(1.3e-3,), code="kp4", fec="ieee", target_errors=None, max_codewords=sweep_codewords,
                      max_seconds=None, shard_pairs=sweep_codewords // 16, seed=seed)
    t = {}
    for w in (1, 2, 1, 2):
        t0 = time.perf_counter()
        run_sweep(cfg, executor="process", workers=w)
        t[w] = min(t.get(w, 1e30), time.perf_counter() - t0)
    out["sweep_1_worker_s"], out["sweep_2_workers_s"] = t[1], t[2]
    out["sweep_speedup_2_over_1"] = t[1] / t[2]
    return out


def _warm_up(ex, n: int) -> None:
    """Start the ``n`` worker processes and load their kernels (one tiny shard each, at once)."""
    from protocol.trace.sharded import _run_shard
    from protocol.trace.config import GeneratorConfig

    cfg = GeneratorConfig("400G", "bypass", 1e-4)
    for f in [ex.submit(_run_shard, cfg, "fast", 1, j, 64 * j, 64 * j + 64, 64, 16) for j in range(n)]:
        f.result()


def _pool(n: int):
    import concurrent.futures as cf

    return cf.ProcessPoolExecutor(max_workers=n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time per measurement (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per measurement, median reported (default 3)")
    ap.add_argument("--ber", type=float, action="append", help="pre-FEC BER (repeatable; default 1e-4, 1e-5, 2.4e-4)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--written", action="store_true",
                    help="issue-13 mode: written vs in-memory rate, bytes per flip, 1 vs 2 workers")
    ap.add_argument("--bits", type=float, default=3e11, help="line bits per written measurement (default 3e11)")
    ap.add_argument("--worker-bits", type=float, default=2e12, help="line bits of the 1-vs-2-worker trace run (default 2e12)")
    ap.add_argument("--sweep-codewords", type=int, default=4_000_000,
                    help="codewords of the 1-vs-2-worker sweep point (default 4e6)")
    ap.add_argument("--tmp", default=None, help="folder for the temporary trace files (default: the system temp dir)")
    args = ap.parse_args(argv)
    if args.written:
        res = bench_written(args.bits, args.repeats, args.tmp, args.seed)
        res.update(bench_workers(args.worker_bits, args.tmp, args.seed, args.sweep_codewords))
        res["load_avg_1min_after"] = os.getloadavg()[0]
        res["machine_note"] = (f"{os.cpu_count()} CPUs: wall rates and the 2-worker speed-up drop with load; "
                               "CPU-time rates are what one core delivers when not descheduled")
        if args.json:
            json.dump(res, sys.stdout, indent=2)
            print()
        else:
            print(f"pre-FEC BER {res['ber']:.0e} {res['fec']}, {res['line_bits']:.3g} line bits, "
                  f"chunks of {res['chunk_pairs']} pairs, median of {res['repeats']}")
            print(f"{'':<12} {'wall Gb/s':>10} {'cpu Gb/s':>10}")
            for k in ("in_memory", "encoded", "written", "v1_write"):
                print(f"{k:<12} {res[k + '_gbps']:>10.1f} {res[k + '_cpu_gbps']:>10.1f}")
            print(f"written / in-memory {res['written_over_in_memory']:.2f}; written / v1 write "
                  f"{res['written_over_v1']:.2f}; x 425G line {res['written_gbps'] / 425:.2f} "
                  f"(cpu {res['written_cpu_gbps'] / 425:.2f})")
            print(f"bytes per flip: v2 {res['bytes_per_flip']:.3f}, v1 {res['v1_bytes_per_flip']:.3f}")
            print(f"trace generate 1 vs 2 workers: {res['trace_1_worker_s']:.2f} s vs {res['trace_2_workers_s']:.2f} s "
                  f"= {res['trace_speedup_2_over_1']:.2f}x (pool started); with the pool start-up: "
                  f"{res['trace_1_worker_cold_s']:.2f} s vs {res['trace_2_workers_cold_s']:.2f} s "
                  f"= {res['trace_speedup_2_over_1_cold']:.2f}x")
            print(f"sharded sweep point 1 vs 2 workers: {res['sweep_1_worker_s']:.2f} s vs {res['sweep_2_workers_s']:.2f} s "
                  f"= {res['sweep_speedup_2_over_1']:.2f}x")
            print(f"load average (1 min) before {res['load_avg_1min_before']:.2f}, after {res['load_avg_1min_after']:.2f}; "
                  + res["machine_note"])
        return 0
    bers = args.ber or [1e-4, 1e-5, 2.4e-4]
    rows = []

    def med(fn, n):
        r = [fn(i) for i in range(n)]
        return statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)

    for ber in bers:
        dense, dense_cpu = med(lambda i: bench_dense(ber, args.seconds / 2, args.seed + i), args.repeats)
        for fec in ("bypass", "ieee"):
            fast, fast_cpu = med(lambda i: bench_fast(fec, ber, args.seconds, args.seed + i), args.repeats)
            exact, exact_cpu = bench_bitexact(fec, ber, args.seconds / 2, args.seed)
            rows.append(dict(ber=ber, fec=fec, fast_gbps=fast, fast_cpu_gbps=fast_cpu, dense_gbps=dense,
                             dense_cpu_gbps=dense_cpu, bitexact_gbps=exact, bitexact_cpu_gbps=exact_cpu,
                             ratio_vs_dense=fast / dense, ratio_vs_bitexact=fast / exact,
                             realtime_factor=fast / 425.0, realtime_factor_cpu=fast_cpu / 425.0))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    out = {"machine_note": f"single thread; 1-min load average at the end {load:.2f} on {os.cpu_count()} CPUs "
                           "(wall rates drop with load, the ratios are measured in the same run)",
           "line_rate_gbps": 425.0, "rows": rows}
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(f"{'BER':>8} {'fec':<7} {'fast Gb/s':>10} {'(cpu)':>7} {'dense Gb/s':>11} {'bitexact Gb/s':>14} "
              f"{'x dense':>8} {'x bitexact':>11} {'x 425G':>7} {'(cpu)':>6}")
        for r in rows:
            print(f"{r['ber']:>8.1e} {r['fec']:<7} {r['fast_gbps']:>10.1f} {r['fast_cpu_gbps']:>7.1f} "
                  f"{r['dense_gbps']:>11.2f} {r['bitexact_gbps']:>14.3f} {r['ratio_vs_dense']:>8.0f} "
                  f"{r['ratio_vs_bitexact']:>11.0f} {r['realtime_factor']:>7.2f} {r['realtime_factor_cpu']:>6.2f}")
        print(out["machine_note"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
