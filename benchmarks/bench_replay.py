"""Benchmark: per-step overhead of the replay wrapper vs plain gloo, same model, same processes.

Two DDP replicas of the same char GPT (default 0.82 M parameters, batch 12, block 64) run in the
same ``world_size`` processes: one over a plain gloo group (the baseline), one over the
``phy802`` wrapper group (endpoint mode, BER 1e-5 from the protocol layer's live generator by
default, guard none). Steps alternate in blocks, one block of each replica per round and the
order rotated from round to round, so machine load hits all alike; the median step time of each
and their ratio are printed, and per pair of replicas the geometric mean over the rounds of the
ratio of their blocks' mean step times, with a 95% t-interval (the blocks of one round ran next to
each other, so the machine's drift cancels in their ratio). A step is forward,
backward (bucket allreduces), global-norm clipping and AdamW. The time spent inside the wrapper's
own code (reserving errors at issue, corrupting/guarding/logging on receive) is also reported:
with guard ``none`` the corrupted gradients change the step itself (fp32 norm overflows, huge
values), so the ratio mixes wrapper cost with the cost of training on corrupted numbers; with
``--guard exponent_protection`` the flips are applied but values stay bounded.

To separate the two, a third replica (``plain_corrupt``, on by default; endpoint mode) trains over
plain gloo and gets *the wrapper's own flips* of the same step (read from its injection log, mapped
from DDP's buckets to the parameters) with the same receive guard, applied to its averaged
gradients *outside* the timed region. Both replicas start from the same weights and data, so they
compute the same numbers bit for bit (checked at the end on every rank: ``corrupt_identical``); its
ratio to plain is the cost of training on these corrupted numbers alone, and ``wrapper /
plain_corrupt`` is what the wrapper itself adds. A fourth replica (``plain_aa``, on by default) is
plain again, the same computation: ``plain_aa / plain`` is an A/A test, how far two identical
replicas drift apart in the same run (memory placement and caches differ per replica), the
scale against which the other ratios are read. By default it runs over a gloo group of its own
(``--aa-own-gloo``), as the wrapper's inner gloo is its own (its own worker threads and
connections) while the other replicas share one. The process CPU time per step (all threads) is
printed too: it moves less than wall time when other jobs share the machine. So is the CPU time
spent in the wrapper's own code, by stage (the calling thread's CPU time: ``issue``, every op
method as torch calls it, with ``reserve`` and ``shadow`` inside it; ``receive`` and the peer
``look_up`` at completion; the delivery model inside reserve/shadow, the error process's own
reads ahead (``source``: drawing the errors, which any corrupted baseline must pay somewhere)
inside the delivery model, and the store look-up inside the peer look-up), per timed step.
Each stage's timer costs the wrapper's code about 10 us per call (two clock reads and a Python
frame); ``--no-stages`` times only the top-level stages and ``source``, so that the own code and
the ratios carry no nested timer.

Usage::

    python benchmarks/bench_replay.py [--steps 600] [--block 5] [--world-size 2] [--ber 1e-5]
                                      [--mode endpoint] [--source generator] [--guard none]
                                      [--classes ...] [--no-corrupt-plain] [--no-stages] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402


# name -> (ReplayProcessGroup method, top-level: counted in the wrapper's own code)
_STAGES = {
    # at issue: every op method as torch calls it (the comm log, the op's own code, the inner op's
    # issue, the Work), the outermost call only
    "issue": ("*ops", True),
    "reserve": ("_reserve", False),  # inside issue: the link's delivery of a received message
    "shadow": ("_shadow", False),  # inside issue: the sender's copy of that delivery (lost frames)
    "receive": ("_receive", True),  # at completion: flips, guard, norms, log
    "look_up": ("_check_peer_after", True),  # at completion: a peer's link failure (in band, else the store)
    "check_peer": ("_check_peer", False),  # inside look_up: the store look-up, when the in-band test cannot decide
    "deliver": ("_deliver", False),  # inside reserve and shadow: framing + errors (Numba)
    # inside deliver: the error process itself (BufferedLink._extend: the generator's reads ahead),
    # which plain_corrupt pays too, outside its timer
    "source": (None, False),
    # --python-pg: the pass-through group's op methods as torch calls them (not the wrapper's code):
    # what issuing an op costs any Python backend over gloo (the call from C++, the inner op's issue),
    # which the wrapper's ``issue`` stage includes
    "pt_issue": (None, False),
}


def _bucket_layouts(model, group, corpus, per_rank: int) -> list[list[list[tuple[str, int]]]]:
    """DDP's gradient buckets for ``model`` over ``group`` in each of three steps: per step, per bucket
    in bucket order, ``[(parameter name, numel), ...]``, what the flat buffer of that bucket's
    all-reduce holds, parameter after parameter. Learnt from a probe replica whose comm hook records
    ``bucket.parameters()`` (torch's own allreduce underneath). DDP's first step runs on its initial
    buckets and rebuilds them after it (first bucket capped at 1 MiB, in the order the gradients
    became ready), the same for every replica of one model."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    torch.manual_seed(1)
    probe = DDP(model, process_group=group)
    names = {p: n for n, p in probe.module.named_parameters()}
    seen: dict[int, list[tuple[str, int]]] = {}

    def hook(state, bucket):
        seen[bucket.index()] = [(names[p], p.numel()) for p in bucket.parameters()]
        return allreduce_hook(state, bucket)

    probe.register_comm_hook(group, hook)
    gen = torch.Generator().manual_seed(99)
    layouts = []
    for _ in range(3):
        seen.clear()
        x, y = corpus.batch("train", per_rank, 64, gen)
        logits = probe(x)
        F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).backward()
        layouts.append([seen[i] for i in sorted(seen)])
    return layouts


def _paired_ratio(x: list[float], y: list[float], block: int) -> dict[str, float]:
    """Geometric mean over rounds of ``mean(x's block) / mean(y's block)``, with its 95% t-interval
    (``lo``, ``hi``) and the number of rounds ``n``: the blocks of one round ran next to each other."""
    import numpy as np
    from scipy import stats

    n = min(len(x), len(y)) // block
    bx = np.asarray(x[:n * block]).reshape(n, block).mean(axis=1)
    by = np.asarray(y[:n * block]).reshape(n, block).mean(axis=1)
    lr = np.log(bx / by)
    m = float(lr.mean())
    h = float(stats.t.ppf(0.975, n - 1) * lr.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    return {"ratio": float(np.exp(m)), "lo": float(np.exp(m - h)), "hi": float(np.exp(m + h)), "n": n}


def _passthrough_group(inner):
    """A process group written in Python that forwards each op DDP makes to ``inner`` and returns
    ``inner``'s own Work: what any Python backend pays per op (torch's C++ calling into Python,
    the arguments converted), none of the wrapper's code, no completion callback."""
    import torch.distributed as dist

    class PassThrough(dist.ProcessGroup):
        def __init__(self) -> None:
            super().__init__(inner.rank(), inner.size())

        def allreduce(self, tensors, opts=None):
            return inner.allreduce(tensors, opts if opts is not None else dist.AllreduceOptions())

        def broadcast(self, tensors, opts=None):
            return inner.broadcast(tensors, opts if opts is not None else dist.BroadcastOptions())

        def allgather(self, outs, ins, opts=None):
            return inner.allgather(outs, ins, opts if opts is not None else dist.AllgatherOptions())

        def _allgather_base(self, out, inp, opts=None):
            return inner._allgather_base(out, inp, opts if opts is not None else dist.AllgatherOptions())

        def barrier(self, opts=None):
            return inner.barrier(opts if opts is not None else dist.BarrierOptions())

        def getBackendName(self) -> str:
            return "passthrough"

    return PassThrough()


def _worker(rank: int, args: argparse.Namespace, store: str, out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig
    from integration.process_group import register
    from integration.replay import DEFAULT_CLAMP, ReplayConfig, corrupt_received, guard_flipped
    from integration.sources import SourceConfig
    from integration.train import TrainConfig, _clip_global, _optimizer

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.world_size)
    classes = tuple(c for c in args.classes.split(",") if c)
    # the log keeps every flip: plain_corrupt replays it (2e6 flips, 80 MB at most)
    register(ReplayConfig(source=SourceConfig(ber=args.ber, seed=1, kind=args.source), mode=args.mode,
                          classes=classes, guard=args.guard, log_limit=2_000_000,
                          **({} if args.measure_noise else {"measure_noise": False})))
    g_plain = dist.new_group(backend="gloo")
    g_wrap = dist.new_group(backend="phy802")
    g_aa = dist.new_group(backend="gloo") if args.aa_own_gloo else g_plain  # every rank creates it, used or not
    # time spent in the wrapper's own code (reserve at issue, corrupt/guard/log on receive)
    import integration.process_group as pgmod

    # stages of the wrapper's own code (seconds summed over the timed wrapper steps); "own" is
    # the top-level stages (issue + receive + look_up), each counted where no other top-level
    # stage is running in the same thread (a completion that runs inline at issue is in issue);
    # the others are nested in them
    import threading

    from integration.commlog import _spec

    inside = {"s": 0.0, "cpu": 0.0}
    stages = {k: 0.0 for k in _STAGES}
    calls = {k: 0 for k in _STAGES}
    depth = threading.local()  # per thread: running top-level stages, and each stage's nesting

    def timed(fn, name, top):
        def wrapped(self, *a, **k):
            d = depth.__dict__
            mine, tops = d.get(name, 0), d.get("top", 0)
            d[name] = mine + 1
            d["top"] = tops + top
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(self, *a, **k)
            finally:
                dt, dc = time.perf_counter() - t0, time.thread_time() - c0
                d[name], d["top"] = mine, tops
                if not mine:  # a stage inside itself (an op nested in an op) counts once
                    stages[name] += dc  # CPU time of the calling thread: load on the machine barely moves it
                    calls[name] += 1
                if top and not tops:
                    inside["s"] += dt
                    inside["cpu"] += dc
        return wrapped

    for name, (attr, top) in _STAGES.items():
        if not (top or args.stages or name == "source"):
            continue  # --no-stages: a nested stage's timer (two clock reads, a Python frame) would count as own code
        if attr == "*ops":
            for op in _spec():
                if op in pgmod.ReplayProcessGroup.__dict__:
                    setattr(pgmod.ReplayProcessGroup, op, timed(getattr(pgmod.ReplayProcessGroup, op), name, top))
        elif attr is not None:
            setattr(pgmod.ReplayProcessGroup, attr, timed(getattr(pgmod.ReplayProcessGroup, attr), name, top))
    import integration.sources as srcmod

    srcmod.BufferedLink._extend = timed(srcmod.BufferedLink._extend, "source", False)
    corpus = CharCorpus.load(args.corpus)
    gcfg = GPTConfig(corpus.vocab_size, 64, args.n_layer, 4, args.n_embd)
    tcfg = TrainConfig()
    runs = {}
    # plain_aa: a second plain replica, the same computation as plain: their ratio (an A/A test) is
    # how far two identical replicas drift apart in this run (memory placement, caches, the order
    # of the blocks), the scale against which the other ratios can be read
    names = (("plain", "wrapper") + (("plain_corrupt",) if args.corrupt_plain else ()) + (("plain_aa",) if args.aa else ())
             + (("python_pg",) if args.python_pg else ()))
    g_py = _passthrough_group(g_plain) if args.python_pg else None
    if g_py is not None:  # every op the pass-through defines
        for op, fn in list(vars(type(g_py)).items()):
            if callable(fn) and not op.startswith("__") and op != "getBackendName":
                setattr(type(g_py), op, timed(fn, "pt_issue", False))
    for name in names:
        grp = {"wrapper": g_wrap, "python_pg": g_py, "plain_aa": g_aa}.get(name, g_plain)
        torch.manual_seed(1)
        model = DDP(GPT(gcfg), process_group=grp)
        runs[name] = dict(model=model, group=grp, opt=_optimizer(tcfg, list(model.parameters())),
                          gen=torch.Generator().manual_seed(10 + rank), times=[], cpu=[])
    per_rank = args.batch_size // args.world_size
    # plain_corrupt: plain gloo, then the very flips the wrapper applied to the same step's buckets
    # (its injection log), applied to this replica's averaged gradients outside the timed region,
    # with the same guard. The two replicas start from the same weights and data, so while their
    # corruption is the same their numbers are the same, bit for bit (checked at the end:
    # ``corrupt_identical``): the step-time ratio is the wrapper's own cost, not a difference in
    # what corrupted numbers cost to train on (Inf, NaN, overflowed norms).
    log = g_wrap.log
    replay: list[list[tuple]] = []  # per wrapper step not yet replayed: (seq, payload bits) per message
    layouts = _bucket_layouts(GPT(gcfg), g_plain, corpus, per_rank) if args.corrupt_plain else []

    if layouts and layouts[1] != layouts[2]:
        raise RuntimeError("bench_replay: DDP's buckets changed after their rebuild; no exact corrupted baseline")
    replayed = [0]

    def corrupt(model):
        msgs = replay.pop(0)
        # DDP's first step runs on its initial buckets, every later one on the rebuilt buckets
        layout = layouts[min(replayed[0], 1)]
        replayed[0] += 1
        sizes = [bits // 32 for _, bits in msgs]  # fp32 elements per bucket message, in issue order
        if [sum(n for _, n in b) for b in layout] != sizes:
            raise RuntimeError(f"bench_replay: the wrapper's bucket messages {sizes} are not DDP's buckets "
                               f"{[sum(n for _, n in b) for b in layout]}")
        by_msg = log.offsets_by_message(seq for seq, _ in msgs)
        params = dict(model.module.named_parameters())
        for (seq, _), bucket in zip(msgs, layout):
            offs = by_msg.get(seq)  # sorted message bits of the applied flips
            if offs is None:
                continue
            starts = 32 * np.cumsum([0] + [n for _, n in bucket])  # each fp32 parameter's first bit
            cuts = np.searchsorted(offs, starts)
            for q, (name, _) in enumerate(bucket):
                if cuts[q] == cuts[q + 1]:
                    continue
                g = params[name].grad.detach().view(-1)
                elem = corrupt_received(g, offs[cuts[q]:cuts[q + 1]] - starts[q])[0]
                if args.guard == "nan_to_zero_clamp":
                    guard_flipped(g, np.unique(elem), DEFAULT_CLAMP["gradients"])

    def step(r, corrupted=False):
        n0 = len(log.messages)
        c0 = time.process_time()
        t0 = time.perf_counter()
        r["opt"].zero_grad(set_to_none=True)
        x, y = corpus.batch("train", per_rank, 64, r["gen"])
        logits = r["model"](x)
        F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).backward()
        t_out = 0.0
        if corrupted:
            t1 = time.perf_counter()
            corrupt(r["model"])
            t_out = time.perf_counter() - t1
        _clip_global(list(r["model"].parameters()), 1.0, r["group"], across=False)
        r["opt"].step()
        t_end = time.perf_counter()
        r["cpu"].append(time.process_time() - c0 - t_out)
        if r["group"] is g_wrap and args.corrupt_plain:
            replay.append([(m[0], m[6]) for m in log.messages[n0:] if m[1] == "allreduce"])
        return t_end - t0 - t_out

    for name in names:  # warm-up (numba compile, allocator)
        for _ in range(3):
            step(runs[name], name == "plain_corrupt")
    if args.corrupt_plain:
        # the wrapper replica runs one block ahead, so that plain_corrupt finds the flips of its
        # steps whichever of the two comes first in a round; it catches up after the timed rounds
        for _ in range(args.block):
            step(runs["wrapper"])
    inside["s"] = inside["cpu"] = 0.0
    for k in stages:
        stages[k] = 0.0
        calls[k] = 0
    for r in runs.values():
        r["cpu"].clear()
    done = 0
    rounds = 0
    while done < args.steps:
        # one block of each replica per round, the order rotated from round to round so that no
        # replica always follows the same one (a block after another replica's finds the caches
        # holding that replica's weights)
        for q in range(len(names)):
            name = names[(rounds + q) % len(names)]
            for _ in range(args.block):
                runs[name]["times"].append(step(runs[name], name == "plain_corrupt"))
        done += args.block
        rounds += 1
    if args.corrupt_plain:  # the catching up, untimed
        r = runs["plain_corrupt"]
        n_cpu = len(r["cpu"])
        while replay:
            step(r, True)
        del r["cpu"][n_cpu:]
    identical = None
    if args.corrupt_plain:  # every rank: the baseline's weights equal the wrapper replica's, bit for bit
        same = log.dropped == 0 and all(
            torch.equal(a.detach().view(torch.int32), b.detach().view(torch.int32))
            for a, b in zip(runs["wrapper"]["model"].parameters(), runs["plain_corrupt"]["model"].parameters()))
        flag = torch.tensor([int(same)])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        identical = bool(flag.item())
    if rank == 0:
        m = g_wrap.metrics
        res = {
            "plain_ms": 1e3 * statistics.median(runs["plain"]["times"]),
            "wrapper_ms": 1e3 * statistics.median(runs["wrapper"]["times"]),
            "plain_mean_ms": 1e3 * statistics.fmean(runs["plain"]["times"]),
            "wrapper_mean_ms": 1e3 * statistics.fmean(runs["wrapper"]["times"]),
            "wrapper_code_ms_per_step": 1e3 * inside["s"] / len(runs["wrapper"]["times"]),
            "wrapper_code_cpu_ms_per_step": 1e3 * inside["cpu"] / len(runs["wrapper"]["times"]),
            "stage_ms_per_step": {k: 1e3 * v / len(runs["wrapper"]["times"]) for k, v in stages.items()},
            "stage_calls_per_step": {k: v / len(runs["wrapper"]["times"]) for k, v in calls.items()},
            "flips_rank0": m.total("errors_injected"),
            "gradient_bits_rank0": m.payload_bits.get("gradients", 0),
            "params": sum(p.numel() for p in runs["plain"]["model"].parameters()),
        }
        res["ratio"] = res["wrapper_ms"] / res["plain_ms"]
        # CPU time of the whole process (all threads) per step: less sensitive to other jobs' load
        res["plain_cpu_ms"] = 1e3 * statistics.median(runs["plain"]["cpu"])
        res["wrapper_cpu_ms"] = 1e3 * statistics.median(runs["wrapper"]["cpu"])
        res["cpu_ratio"] = res["wrapper_cpu_ms"] / res["plain_cpu_ms"]
        # per round, the ratio of two replicas' mean step times in that round's blocks (adjacent in
        # time, so the machine's slow drift cancels): their geometric mean and its 95% t-interval
        # over the rounds
        pairs = [("wrapper", "plain", "ratio"), ("plain_aa", "plain", "aa_ratio"), ("python_pg", "plain", "python_pg_ratio"),
                 ("wrapper", "python_pg", "wrapper_vs_python_pg"),
                 ("wrapper", "plain_corrupt", "wrapper_vs_corrupt"), ("plain_corrupt", "plain", "corrupt_ratio")]
        res["paired"] = {key: _paired_ratio(runs[a]["times"], runs[b]["times"], args.block)
                         for a, b, key in pairs if a in runs and b in runs}
        res["paired_cpu"] = {key: _paired_ratio(runs[a]["cpu"], runs[b]["cpu"], args.block)
                             for a, b, key in pairs if a in runs and b in runs}
        res["rounds"] = rounds
        if args.aa:
            res["aa_own_gloo"] = bool(args.aa_own_gloo)
            res["aa_ratio"] = statistics.median(runs["plain_aa"]["times"]) / statistics.median(runs["plain"]["times"])
            res["aa_cpu_ratio"] = statistics.median(runs["plain_aa"]["cpu"]) / statistics.median(runs["plain"]["cpu"])
        if args.corrupt_plain:
            # the baseline replayed the wrapper's flips: same corruption, so the same numbers
            res["corrupt_identical"] = identical
            res["plain_corrupt_ms"] = 1e3 * statistics.median(runs["plain_corrupt"]["times"])
            res["corrupt_ratio"] = res["plain_corrupt_ms"] / res["plain_ms"]
            res["wrapper_vs_corrupt"] = res["wrapper_ms"] / res["plain_corrupt_ms"]
            res["plain_corrupt_cpu_ms"] = 1e3 * statistics.median(runs["plain_corrupt"]["cpu"])
            res["corrupt_cpu_ratio"] = res["plain_corrupt_cpu_ms"] / res["plain_cpu_ms"]
        with open(out, "w") as fh:
            json.dump(res, fh)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600,
                   help="timed steps per variant (default 600: 120 rounds of 5, a 95%% interval of about +-2%%)")
    p.add_argument("--block", type=int, default=5, help="steps per alternation block (default 5)")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--ber", type=float, default=1e-5)
    p.add_argument("--mode", choices=("endpoint", "ring"), default="endpoint")
    p.add_argument("--source", choices=("independent", "generator"), default="generator",
                   help="generator: --ber is the pre-FEC line BER; independent: the payload-stream BER (default generator)")
    p.add_argument("--guard", default="none", help="receive guard of the wrapper (default none)")
    p.add_argument("--classes", default="gradients,activations,activation_grads",
                   help="traffic classes corrupted (default gradients,activations,activation_grads; '' = none)")
    p.add_argument("--corpus", choices=("kjv", "stdlib"), default="kjv")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--corrupt-plain", action=argparse.BooleanOptionalAction, default=True,
                   help="also time plain gloo with flips applied to the gradients outside the timed region "
                        "(the cost of training on corrupted numbers alone; default on)")
    p.add_argument("--aa", action=argparse.BooleanOptionalAction, default=True,
                   help="a second plain replica (plain_aa), the same computation as plain: their ratio is this "
                        "run's noise floor for the other ratios (default on)")
    p.add_argument("--aa-own-gloo", action=argparse.BooleanOptionalAction, default=True,
                   help="plain_aa over a gloo group of its own, as the wrapper's inner gloo is its own (default "
                        "on; off: the gloo group of plain)")
    p.add_argument("--python-pg", action=argparse.BooleanOptionalAction, default=False,
                   help="a fifth replica over a pass-through process group written in Python (python_pg): "
                        "what a Python backend costs per op before any of the wrapper's code (default off)")
    p.add_argument("--measure-noise", action=argparse.BooleanOptionalAction, default=True,
                   help="the wrapper measures the injected noise (a norm of every received message; "
                        "ReplayConfig.measure_noise, default on)")
    p.add_argument("--stages", action=argparse.BooleanOptionalAction, default=True,
                   help="time the nested stages (reserve, shadow, deliver, check_peer) too; each timer costs "
                        "about 10 us of the wrapper's own code per call, so --no-stages gives the own code "
                        "with only the top-level timers (issue, receive, look_up) and source (default on)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.mode == "ring" and args.corrupt_plain:
        # ring hops corrupt partial sums: the received flips replayed on the final gradients are
        # not the same numbers, so there is no exact corrupted baseline in ring mode
        print("bench_replay: no plain_corrupt baseline in ring mode (--no-corrupt-plain implied)", file=sys.stderr)
        args.corrupt_plain = False
    import shutil

    work = tempfile.mkdtemp(prefix="phy802-bench-")
    try:
        out = os.path.join(work, "res.json")
        store = os.path.join(work, "store")
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        mp.start_processes(_worker, args=(args, store, out), nprocs=args.world_size, start_method="spawn")
        with open(out) as fh:
            res = json.load(fh)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    from integration.sources import ber_meaning

    res.update(stages=args.stages, measure_noise=args.measure_noise, ber=args.ber, ber_is=ber_meaning(args.source), guard=args.guard, classes=args.classes, mode=args.mode, source=args.source, world_size=args.world_size, steps=args.steps)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        from integration.sources import ber_meaning

        print(f"replay wrapper overhead, DDP x{args.world_size}, {res['params']} parameters, {args.mode} mode, "
              f"BER {args.ber:g} [{ber_meaning(args.source)}] ({args.source} source), {args.steps} steps each")
        print(f"  plain gloo : {res['plain_ms']:8.2f} ms/step (median; mean {res['plain_mean_ms']:.2f})")
        print(f"  wrapper    : {res['wrapper_ms']:8.2f} ms/step (median; mean {res['wrapper_mean_ms']:.2f})")
        print(f"  ratio      : {res['ratio']:.3f}   flips on rank 0: {res['flips_rank0']}")
        print(f"  process CPU time per step (all threads, median): plain {res['plain_cpu_ms']:.2f} ms, "
              f"wrapper {res['wrapper_cpu_ms']:.2f} ms, ratio {res['cpu_ratio']:.3f}")
        if args.corrupt_plain:
            print(f"    plain with corrupted gradients: {res['plain_corrupt_cpu_ms']:.2f} ms CPU, "
                  f"ratio {res['corrupt_cpu_ratio']:.3f}")
            print(f"  plain gloo, the wrapper's flips replayed outside the timer "
                  f"(weights bit-identical to the wrapper replica's: {'yes' if res['corrupt_identical'] else 'NO'}): "
                  f"{res['plain_corrupt_ms']:.2f} ms/step, ratio {res['corrupt_ratio']:.3f}; "
                  f"wrapper / this: {res['wrapper_vs_corrupt']:.3f} (goal <= 1.02); CPU time wrapper / this: "
                  f"{res['wrapper_cpu_ms'] / res['plain_corrupt_cpu_ms']:.3f}")
        if args.aa:
            print(f"  A/A: a second plain replica, the same computation"
                  f"{' over a gloo group of its own' if res['aa_own_gloo'] else ''}: wall {res['aa_ratio']:.3f}, CPU "
                  f"{res['aa_cpu_ratio']:.3f} of plain (how far identical replicas drift apart in this run)")
        labels = {"ratio": "wrapper / plain", "wrapper_vs_corrupt": "wrapper / plain_corrupt (goal <= 1.02)",
                  "corrupt_ratio": "plain_corrupt / plain", "aa_ratio": "A/A plain_aa / plain",
                  "python_pg_ratio": "python_pg / plain", "wrapper_vs_python_pg": "wrapper / python_pg"}
        print(f"  per-round paired ratios of mean step time, geometric mean [95% CI] over {res['rounds']} rounds "
              f"of {args.block} steps (wall; process CPU):")
        for key, label in labels.items():
            if key in res["paired"]:
                w, c = res["paired"][key], res["paired_cpu"][key]
                print(f"    {label:40s} {w['ratio']:.3f} [{w['lo']:.3f}, {w['hi']:.3f}];  "
                      f"{c['ratio']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]")
        print(f"  of which in the wrapper's own code: {res['wrapper_code_ms_per_step']:.2f} ms/step "
              f"({100 * res['wrapper_code_ms_per_step'] / res['plain_ms']:.1f}% of a plain step)")
        print(f"    CPU time in the wrapper's own code (its threads): {res['wrapper_code_cpu_ms_per_step']:.3f} ms/step; "
              f"less the error process's reads (stage source): "
              f"{res['wrapper_code_cpu_ms_per_step'] - res['stage_ms_per_step']['source']:.3f} ms/step")
        print("    by stage (CPU ms/step, calls/step): " + ", ".join(
            f"{k} {v:.3f} ({res['stage_calls_per_step'][k]:g})" for k, v in res["stage_ms_per_step"].items()
            if k != "pt_issue" and (args.stages or _STAGES[k][1] or k == "source"))
              + ("" if args.stages else " (nested stages not timed: --no-stages)"))
        if args.python_pg:
            pt = res["stage_ms_per_step"]["pt_issue"]
            print(f"    the pass-through group's ops as torch calls them (python_pg; what any Python backend spends "
                  f"issuing, inside issue above): {pt:.3f} ms/step "
                  f"({res['stage_calls_per_step']['pt_issue']:g} calls); the wrapper's own code less this and the "
                  f"error process's reads: {res['wrapper_code_cpu_ms_per_step'] - res['stage_ms_per_step']['source'] - pt:.3f}"
                  " ms/step")


if __name__ == "__main__":
    main()
