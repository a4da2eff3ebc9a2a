"""Benchmark: per-step overhead of the replay wrapper vs plain gloo, same model, same processes.

Two DDP replicas of the same char GPT (default 0.82 M parameters, batch 12, block 64) run in the
same ``world_size`` processes: one over a plain gloo group (the baseline), one over the
``phy802`` wrapper group (endpoint mode, BER 1e-5 from the protocol layer's live generator by
default, guard none). Steps alternate in blocks (plain, wrapper, plain, ...) so machine load
hits both alike; the median step time of each and their ratio are printed. A step is forward,
backward (bucket allreduces), global-norm clipping and AdamW. The time spent inside the wrapper's
own code (reserving errors at issue, corrupting/guarding/logging on receive) is also reported:
with guard ``none`` the corrupted gradients change the step itself (fp32 norm overflows, huge
values), so the ratio mixes wrapper cost with the cost of training on corrupted numbers; with
``--guard exponent_protection`` the flips are applied but values stay bounded.

Usage::

    python benchmarks/bench_replay.py [--steps 60] [--block 5] [--world-size 2] [--ber 1e-5]
                                      [--mode endpoint] [--source auto] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402


def _worker(rank: int, args: argparse.Namespace, store: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from integration.data import CharCorpus
    from integration.model import GPT, GPTConfig
    from integration.process_group import register
    from integration.replay import ReplayConfig
    from integration.sources import SourceConfig
    from integration.train import TrainConfig, _clip_global, _optimizer

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.world_size)
    classes = tuple(c for c in args.classes.split(",") if c)
    register(ReplayConfig(source=SourceConfig(ber=args.ber, seed=1, kind=args.source), mode=args.mode,
                          classes=classes, guard=args.guard))
    g_plain = dist.new_group(backend="gloo")
    g_wrap = dist.new_group(backend="phy802")
    # time spent in the wrapper's own code (reserve at issue, corrupt/guard/log on receive)
    import integration.process_group as pgmod

    inside = {"s": 0.0}

    def timed(fn):
        def wrapped(self, *a, **k):
            t0 = time.perf_counter()
            try:
                return fn(self, *a, **k)
            finally:
                inside["s"] += time.perf_counter() - t0
        return wrapped

    pgmod.ReplayProcessGroup._reserve = timed(pgmod.ReplayProcessGroup._reserve)
    pgmod.ReplayProcessGroup._receive = timed(pgmod.ReplayProcessGroup._receive)
    corpus = CharCorpus.load(args.corpus)
    gcfg = GPTConfig(corpus.vocab_size, 64, args.n_layer, 4, args.n_embd)
    tcfg = TrainConfig()
    runs = {}
    for name, grp in (("plain", g_plain), ("wrapper", g_wrap)):
        torch.manual_seed(1)
        model = DDP(GPT(gcfg), process_group=grp)
        runs[name] = dict(model=model, group=grp, opt=_optimizer(tcfg, list(model.parameters())),
                          gen=torch.Generator().manual_seed(10 + rank), times=[])
    per_rank = args.batch_size // args.world_size

    def step(r):
        t0 = time.perf_counter()
        r["opt"].zero_grad(set_to_none=True)
        x, y = corpus.batch("train", per_rank, 64, r["gen"])
        logits = r["model"](x)
        F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).backward()
        _clip_global(list(r["model"].parameters()), 1.0, r["group"], across=False)
        r["opt"].step()
        return time.perf_counter() - t0

    for name in ("plain", "wrapper"):  # warm-up (numba compile, allocator)
        for _ in range(3):
            step(runs[name])
    inside["s"] = 0.0
    done = 0
    while done < args.steps:
        for name in ("plain", "wrapper"):
            for _ in range(args.block):
                runs[name]["times"].append(step(runs[name]))
        done += args.block
    if rank == 0:
        m = g_wrap.metrics
        res = {
            "plain_ms": 1e3 * statistics.median(runs["plain"]["times"]),
            "wrapper_ms": 1e3 * statistics.median(runs["wrapper"]["times"]),
            "plain_mean_ms": 1e3 * statistics.fmean(runs["plain"]["times"]),
            "wrapper_mean_ms": 1e3 * statistics.fmean(runs["wrapper"]["times"]),
            "wrapper_code_ms_per_step": 1e3 * inside["s"] / len(runs["wrapper"]["times"]),
            "flips_rank0": m.total("errors_injected"),
            "gradient_bits_rank0": m.payload_bits.get("gradients", 0),
            "params": sum(p.numel() for p in runs["plain"]["model"].parameters()),
        }
        res["ratio"] = res["wrapper_ms"] / res["plain_ms"]
        with open(out, "w") as fh:
            json.dump(res, fh)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60, help="timed steps per variant (default 60)")
    p.add_argument("--block", type=int, default=5, help="steps per alternation block (default 5)")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--ber", type=float, default=1e-5)
    p.add_argument("--mode", choices=("endpoint", "ring"), default="endpoint")
    p.add_argument("--source", choices=("auto", "independent", "generator"), default="auto")
    p.add_argument("--guard", default="none", help="receive guard of the wrapper (default none)")
    p.add_argument("--classes", default="gradients,activations,activation_grads",
                   help="traffic classes corrupted (default gradients,activations,activation_grads; '' = none)")
    p.add_argument("--corpus", choices=("kjv", "stdlib"), default="kjv")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    out = os.path.join(tempfile.mkdtemp(prefix="phy802-bench-"), "res.json")
    store = os.path.join(tempfile.mkdtemp(prefix="phy802-store-"), "s")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    mp.start_processes(_worker, args=(args, store, out), nprocs=args.world_size, start_method="spawn")
    with open(out) as fh:
        res = json.load(fh)
    res.update(ber=args.ber, guard=args.guard, classes=args.classes, mode=args.mode, source=args.source, world_size=args.world_size, steps=args.steps)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"replay wrapper overhead, DDP x{args.world_size}, {res['params']} parameters, {args.mode} mode, "
              f"BER {args.ber:g} ({args.source} source), {args.steps} steps each")
        print(f"  plain gloo : {res['plain_ms']:8.2f} ms/step (median; mean {res['plain_mean_ms']:.2f})")
        print(f"  wrapper    : {res['wrapper_ms']:8.2f} ms/step (median; mean {res['wrapper_mean_ms']:.2f})")
        print(f"  ratio      : {res['ratio']:.3f}  (target <= 1.10)   flips on rank 0: {res['flips_rank0']}")
        print(f"  of which in the wrapper's own code: {res['wrapper_code_ms_per_step']:.2f} ms/step "
              f"({100 * res['wrapper_code_ms_per_step'] / res['plain_ms']:.1f}% of a plain step)")


if __name__ == "__main__":
    main()
