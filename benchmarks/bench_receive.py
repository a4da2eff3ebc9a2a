"""Benchmark: the replay wrapper's own code per DDP step, by part, in one process (no training around it).

The two DDP buckets of ``bench_replay.py``'s model (0.82 M fp32 parameters: DDP's first bucket
of 1 MiB, then the rest) go through the wrapper's ``allreduce`` over torch's fake process group
(``FakeProcessGroup``: every op completes at once and moves no data), so everything timed is the
wrapper's own code: the delivery model at issue (framing, the link's error stream, resends) and
the receive path at completion (the signal norm, the flips, the guard, counters and log). The
parts are also timed alone, each against a baseline in the same run:

* ``norm``: the signal norm of the step's received bytes, ``integration._kernels.sum_squares``
  against ``torch.linalg.vector_norm`` (what the wrapper used before) -- one read of the
  gradients, the floor of the receive path when ``measure_noise`` is on;
* ``stream``: the live generator's error stream for the step's stream bits (``take_chunk``);
* ``deliver``: ``BufferedLink.deliver`` of both messages (the stream included);
* ``kernels``: the link's work with no Python around it, each Numba kernel alone on the step's two
  messages (``deliver_frames``: the frame fates; ``receive_flips`` with the norm off: the flips);
  with ``stream``, ``norm`` and torch's own op they make the ``floor`` of any implementation of
  this model in this process, and the wrapper's time above it is its per-op Python;
* ``lookup``: one store look-up (``store.check``) for each of two ops, alone, on a HashStore, a
  FileStore and a TCPStore on localhost (what every op but a CPU float-sum all-reduce makes);
* ``wrapper``: the whole own code per step, with and without ``measure_noise``, and at BER 0
  (the bookkeeping alone), against torch's fake group by itself (torch's own cost per op);
* ``cold``: the whole own code and the fake group again, each step after ``--gap-ms`` of sleep
  (default 5): the CPU gone cold between steps, as it is in training, where the model's forward
  and backward passes run between the buckets' calls.

Times are the calling thread's CPU time over ``--steps`` steps: means for the wrapper (its median
too, over another ``--steps``) and ``deliver`` (the stream's read-ahead and the messages
``BufferedLink`` works out ahead are paid by a few of the calls), medians for the rest; between steps the
buckets are refilled from stored random gradients (what gloo's reduction does to them).

Usage::

    python benchmarks/bench_receive.py [--steps 200] [--ber 1e-5] [--source generator] [--gap-ms 5] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402


def _cpu_us(fn, steps: int, before=None, stat=statistics.median) -> float:
    """``stat`` (median or mean) of ``fn``'s thread CPU time over ``steps`` calls, in us; ``before(i)``
    runs untimed before call ``i``."""
    ts = []
    for i in range(steps):
        if before is not None:
            before(i)
        t0 = time.thread_time()
        fn()
        ts.append(time.thread_time() - t0)
    return 1e6 * stat(ts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200, help="timed steps per part (default 200)")
    p.add_argument("--ber", type=float, default=1e-5)
    p.add_argument("--source", choices=("independent", "generator"), default="generator",
                   help="generator: --ber is the pre-FEC line BER; independent: the payload-stream BER")
    p.add_argument("--gap-ms", type=float, default=5.0,
                   help="sleep before each step of the cold rows, in ms (default 5; 0 skips them)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.steps < 1 or not (0 < args.ber < 1) or not (0 <= args.gap_ms <= 1000):
        p.error(f"--steps must be >= 1, --ber in (0, 1) and --gap-ms in [0, 1000], got {args.steps}, {args.ber} "
                f"and {args.gap_ms}")

    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from integration._kernels import sum_squares
    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig
    from integration.process_group import ReplayProcessGroup
    from integration.replay import ReplayConfig
    from integration.sources import BufferedLink, SourceConfig, ber_meaning, make_link_source
    from protocol.modes import get_mode

    torch.set_num_threads(1)
    corpus = CharCorpus.load("kjv")
    n_params = sum(q.numel() for q in GPT(GPTConfig(corpus.vocab_size, 64, 4, 4, 128)).parameters())
    first = (1 << 20) // 4  # DDP's first bucket: 1 MiB of fp32
    sizes = [first, n_params - first]
    gen = torch.Generator().manual_seed(3)
    stored = [[torch.randn(n, generator=gen) * 1e-3 for _ in range(4)] for n in sizes]
    bufs = [torch.empty(n) for n in sizes]

    def refill(i: int) -> None:
        for b, s in zip(bufs, stored):
            b.copy_(s[i % 4])

    src_cfg = SourceConfig(ber=args.ber, seed=1, kind=args.source)
    res: dict = {"params": n_params, "buckets": sizes, "ber": args.ber, "ber_is": ber_meaning(args.source),
                 "source": args.source, "steps": args.steps, "gap_ms": args.gap_ms}

    def cold(i: int) -> None:  # the cold rows: refilled, then idle for --gap-ms
        refill(i)
        time.sleep(args.gap_ms / 1e3)

    # torch's own cost of the two ops (the fake group alone): the baseline of everything below
    fake0 = torch._C._distributed_c10d.FakeProcessGroup._create_internal(0, 2)
    def fake_step() -> list:
        return [fake0.allreduce([b]).wait() for b in bufs]

    res["torch_fake_op_us"] = _cpu_us(fake_step, args.steps, refill)
    if args.gap_ms:
        res["torch_fake_op_cold_us"] = _cpu_us(fake_step, args.steps, cold)

    # the whole own code per step, over torch's fake process group; at BER 0 only the bookkeeping
    # (op decorator, comm log, bit accounting, Work, the store look-up) runs
    flips = {}
    for measure, ber in ((True, args.ber), (False, args.ber), (True, 0.0)):
        cfg = ReplayConfig(source=SourceConfig(ber=ber, seed=1, kind=args.source), mode="endpoint",
                           measure_noise=measure)
        g = ReplayProcessGroup.standalone(cfg, timeout=timedelta(seconds=30))

        def step(g=g) -> None:
            for b in bufs:
                g.allreduce([b]).wait()

        for i in range(5):
            refill(i)
            step()
        key = "wrapper_ber0_us" if ber == 0 else ("wrapper_us" if measure else "wrapper_no_measure_us")
        res[key] = _cpu_us(step, args.steps, refill, stat=statistics.fmean)
        res[key.replace("_us", "_median_us")] = _cpu_us(step, args.steps, refill)
        flips[key] = g.metrics.total("errors_injected") / (2 * args.steps + 5)
        if key == "wrapper_us" and args.gap_ms:
            res["wrapper_cold_us"] = _cpu_us(step, args.steps, cold, stat=statistics.fmean)
            res["wrapper_cold_median_us"] = _cpu_us(step, args.steps, cold)
    res["flips_per_step"] = flips["wrapper_us"]

    # the signal norm: one read of the step's gradients
    views = [b.numpy() for b in bufs]
    for v in views:
        sum_squares(v)
    res["norm_sum_squares_us"] = _cpu_us(lambda: [sum_squares(v) for v in views], args.steps, refill)
    res["norm_vector_norm_us"] = _cpu_us(lambda: [float(torch.linalg.vector_norm(b)) ** 2 for b in bufs],
                                            args.steps, refill)
    res["norm_ratio"] = res["norm_sum_squares_us"] / res["norm_vector_norm_us"]

    # the link's error stream, and the delivery of both messages (stream included)
    octets = [4 * n for n in sizes]
    link = BufferedLink(make_link_source(src_cfg, 1, 0), get_mode(src_cfg.fec), rate=src_cfg.rate,
                        code=src_cfg.code)
    for _ in range(20):
        for o in octets:
            link.deliver(o)
    c0 = link.cursor
    # the mean (here and in the wrapper rows), not the median: most calls find their message worked
    # out by an earlier one (BufferedLink._predict) and the stream is read ahead in chunks, both paid
    # by a few of the calls
    res["deliver_us"] = _cpu_us(lambda: [link.deliver(o) for o in octets], args.steps, stat=statistics.fmean)
    bits_per_step = (link.cursor - c0) / args.steps
    res["stream_bits_per_step"] = bits_per_step
    source = make_link_source(src_cfg, 1, 0)
    take = getattr(source, "take_chunk", None) or source.take
    chunk = 1 << 28
    take(chunk)
    n_chunks = max(3, args.steps // 20)
    per_chunk = _cpu_us(lambda: take(chunk), n_chunks)
    res["stream_us"] = per_chunk * bits_per_step / chunk

    # the link's work with no Python around it: each Numba kernel alone on this step's two messages,
    # at the buffer's current position (consuming nothing): the frame fates (framing, header hits,
    # resends: integration._kernels.deliver_frames) and the flips without the norm (receive_flips,
    # measure off). With the error stream, the norm and torch's own op, the floor of any
    # implementation of this model in this process: what the wrapper spends above it is per-op Python
    import numpy as np

    from integration._kernels import deliver_frames, receive_flips

    frame_args, step_flips = [], []
    link._extend(link._end + 16 * sum(octets))  # the buffer covers both messages (framing adds < 2x)
    cur, k, m = link.cursor, link._k, link._m
    for o in octets:
        d, used, k2, m2 = link._message(o, "float32", False, cur, k, m)
        lay = link._layout(o)  # (frame starts, ...): one row of lost ranges per frame
        frame_args.append((link._off, k, link._marks, m, cur, link._end, *lay, link._tolerant, link._max_attempts,
                           np.empty(link._off.size, np.int64), np.empty((lay[0].size, 2), np.int64)))
        step_flips.append(d.payload_flips)
        cur, k, m = cur + used, k2, m2
    for a in frame_args:
        deliver_frames(*a)
    res["kernel_frames_us"] = _cpu_us(lambda: [deliver_frames(*a) for a in frame_args], args.steps)
    blocks = [np.empty((5, f.size), np.int64) for f in step_flips]

    def flips_alone() -> None:
        for v, f, blk in zip(views, step_flips, blocks):
            receive_flips(v, v.view(np.uint32), f, 32, 1, 0, -1.0, False, blk, 0)

    flips_alone()
    res["kernel_flips_us"] = _cpu_us(flips_alone, args.steps, refill)
    res["floor_us"] = (res["torch_fake_op_us"] + res["stream_us"] + res["kernel_frames_us"] + res["kernel_flips_us"]
                       + res["norm_sum_squares_us"])
    res["above_floor_us"] = res["wrapper_us"] - res["floor_us"]

    # the store look-up of a completed op (ReplayProcessGroup._check_peer: one store.check; a CPU float
    # sum all-reduce, as in this benchmark's wrapper rows, skips it when its result shows no loss),
    # timed alone for two ops on the stores a job may give the group, behind the PrefixStore torch puts in front of
    # each group's: torch's in-memory HashStore (this benchmark's groups), a FileStore (train.py,
    # bench_replay.py) and a TCPStore served on localhost in this process (torchrun's default; across
    # machines each look-up is also a network round trip to the server on rank 0)
    import tempfile

    from integration.process_group import _FAILED_KEY

    with tempfile.TemporaryDirectory(prefix="phy802-bench-store-") as tmp:
        stores = {"hashstore": dist.HashStore(), "filestore": dist.FileStore(os.path.join(tmp, "store"), 1),
                  "tcpstore": dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=30))}
        for name, base in stores.items():
            st = dist.PrefixStore("phy802_bench/", base)
            st.set("ready", "1")
            res[f"lookup_{name}_us"] = _cpu_us(lambda st=st: [st.check([_FAILED_KEY]) for _ in range(2)], args.steps)
        del stores

    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"replay wrapper's own code per DDP step, one process, {n_params} fp32 parameters in buckets "
          f"{sizes[0]} + {sizes[1]}, BER {args.ber:g} [{res['ber_is']}] ({args.source} source), "
          f"{res['flips_per_step']:.0f} flips per step, thread CPU time per step ({args.steps} steps; "
          f"means for the wrapper and the delivery, medians for the rest)")
    print(f"  torch's fake group alone (baseline): {res['torch_fake_op_us']:8.1f} us/step")
    print(f"  wrapper at BER 0 (bookkeeping only): {res['wrapper_ber0_us']:8.1f} us/step "
          f"({res['wrapper_ber0_us'] / res['torch_fake_op_us']:.1f}x the fake group; median {res['wrapper_ber0_median_us']:.1f})")
    print(f"  wrapper, measure_noise on          : {res['wrapper_us']:8.1f} us/step (median {res['wrapper_median_us']:.1f})")
    print(f"  wrapper, measure_noise off         : {res['wrapper_no_measure_us']:8.1f} us/step "
          f"(median {res['wrapper_no_measure_median_us']:.1f})")
    if args.gap_ms:
        print(f"  after {args.gap_ms:g} ms idle before each step (cold): wrapper {res['wrapper_cold_us']:.1f} us/step "
              f"(median {res['wrapper_cold_median_us']:.1f}) "
              f"({res['wrapper_cold_us'] / res['wrapper_us']:.2f}x warm, measure_noise on), torch's fake group "
              f"{res['torch_fake_op_cold_us']:.1f} us/step ({res['torch_fake_op_cold_us'] / res['torch_fake_op_us']:.2f}x warm)")
    print(f"  signal norm (one read of the gradients): sum_squares {res['norm_sum_squares_us']:.1f} us, "
          f"torch.linalg.vector_norm {res['norm_vector_norm_us']:.1f} us, ratio {res['norm_ratio']:.2f}")
    print(f"  delivery of both messages: {res['deliver_us']:.1f} us, of which the link's error stream "
          f"~{res['stream_us']:.1f} us ({bits_per_step / 1e6:.1f} Mbit per step)")
    print(f"  kernels alone (no Python around them): frame fates {res['kernel_frames_us']:.1f} us, flips without "
          f"the norm {res['kernel_flips_us']:.1f} us; floor (torch's op + stream + both kernels + norm) "
          f"{res['floor_us']:.1f} us, wrapper above it {res['above_floor_us']:.1f} us (per-op Python)")
    print(f"  store look-up for two ops (store.check, alone): HashStore {res['lookup_hashstore_us']:.1f} us, "
          f"FileStore {res['lookup_filestore_us']:.1f} us, TCPStore on localhost {res['lookup_tcpstore_us']:.1f} us")


if __name__ == "__main__":
    main()
