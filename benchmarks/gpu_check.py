"""GPU check of the replay wrapper: one prepared script, one table.

On a GPU machine (``--device cuda``, the default when a GPU is visible) it runs, over NCCL:

1. **bit identity at BER 0**: DDP training of the model (default GPT-2 small preset, 12 x 12 x
   768, byte vocabulary, short context) for a few steps over plain NCCL and over the ``phy802``
   group (endpoint and ring modes), from the same initial weights and data: the final
   parameters must be bit-identical; plus the primitive ops (all_reduce, broadcast,
   all_gather_into_tensor, reduce_scatter_tensor, batched send/recv) on device tensors.
2. **flip-rate honesty**: all-reduces of a device tensor with independent stream-bit errors at
   ``--ber``: the flip rate per payload bit must lie in its 99.9% Clopper-Pearson interval around
   the configured BER, and the popcount of (wrapper result XOR plain result) must equal the
   number of flips the wrapper logged (every logged flip is in the tensor, nothing else is).
3. **overhead**: median step time of the same model over plain NCCL and over the wrapper (BER 0
   and ``--ber``, guard ``nan_to_zero_clamp``), alternating blocks of steps in the same processes.

NCCL needs one GPU per rank; on a machine with one GPU the ranks share it over gloo for CUDA
tensors (``PHY802_CUDA_INNER=gloo``) and the table says so. ``--device cpu --tiny`` runs the same
checks on CPU with gloo and a tiny model: the smoke test of this script (``tests/integration``).

Usage::

    python benchmarks/gpu_check.py [--device auto|cpu|cuda] [--tiny] [--world-size N] [--steps 6]
                                   [--ber 1e-5] [--block 32] [--json] [--out FILE]
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

    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.world_size)
    plain_backend = "nccl" if (cuda and args.nccl) else "gloo"
    g_plain = dist.new_group(backend=plain_backend)
    groups = {}
    for name, mode, ber, guard in (("ber0_endpoint", "endpoint", 0.0, "nan_to_zero_clamp"),
                                   ("ber0_ring", "ring", 0.0, "none"),
                                   ("noisy", "endpoint", args.ber, "nan_to_zero_clamp"),
                                   ("noisy_raw", "endpoint", args.ber, "none")):
        register(ReplayConfig(source=SourceConfig(ber=ber, seed=7, kind="independent", fec="bypass"), mode=mode,
                              guard=guard, classes=("gradients", "params", "activations", "activation_grads")))
        groups[name] = dist.new_group(backend="phy802")
    rows: list[tuple[str, str, str]] = []

    # 1a. primitive ops at BER 0 on device tensors
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(1 << 16, generator=gen).to(dev)
    n = args.world_size
    prim_ok = True
    for gname in ("ber0_endpoint", "ber0_ring"):
        g = groups[gname]
        outs = []
        for grp in (g_plain, g):
            a = x.clone()
            dist.all_reduce(a, group=grp)
            b = x.clone()
            dist.broadcast(b, src=n - 1, group=grp)
            c = torch.empty(n * x.numel(), device=dev)
            dist.all_gather_into_tensor(c, x, group=grp)
            d = torch.empty(x.numel() // n, device=dev)
            dist.reduce_scatter_tensor(d, x, group=grp)
            e = torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, x, (rank + 1) % n, grp), dist.P2POp(dist.irecv, e, (rank - 1) % n, grp)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            outs.append((a, b, c, d, e))
        prim_ok &= all(torch.equal(u, v) for u, v in zip(*outs))
    rows.append(("BER 0: all_reduce/broadcast/all_gather/reduce_scatter/batched p2p == plain", "PASS" if prim_ok else "FAIL",
                 f"{plain_backend}, endpoint+ring"))

    # the model
    corpus = CharCorpus.load("stdlib", "byte")
    preset = dict(n_layer=2, n_head=2, n_embd=32) if args.tiny else dict(n_layer=12, n_head=12, n_embd=768)
    gcfg = GPTConfig(corpus.vocab_size, args.block, **preset)
    tcfg = TrainConfig()
    per_rank = args.batch

    def make(grp):
        torch.manual_seed(1)
        model = DDP(GPT(gcfg).to(dev), process_group=grp, device_ids=[dev.index] if cuda else None)
        return dict(model=model, opt=_optimizer(tcfg, list(model.parameters())), grp=grp,
                    gen=torch.Generator().manual_seed(10 + rank), times=[])

    def step(r):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        r["opt"].zero_grad(set_to_none=True)
        xb, yb = corpus.batch("train", per_rank, args.block, r["gen"])
        xb, yb = xb.to(dev), yb.to(dev)
        logits = r["model"](xb)
        F.cross_entropy(logits.view(-1, logits.size(-1)), yb.view(-1)).backward()
        _clip_global(list(r["model"].parameters()), 1.0, r["grp"], across=False)
        r["opt"].step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    # 1b. DDP training bit identity at BER 0
    runs = {k: make(g) for k, g in (("plain", g_plain), ("ber0_endpoint", groups["ber0_endpoint"]),
                                     ("ber0_ring", groups["ber0_ring"]))}
    for _ in range(args.steps):
        for r in runs.values():
            step(r)
    flat = {k: torch.cat([p.detach().reshape(-1) for p in r["model"].parameters()]) for k, r in runs.items()}
    for k in ("ber0_endpoint", "ber0_ring"):
        same = torch.equal(flat["plain"], flat[k])
        rows.append((f"BER 0: DDP {args.steps} steps, {k.split('_')[1]} mode, params == plain", "PASS" if same else "FAIL",
                     f"{sum(p.numel() for p in runs['plain']['model'].parameters()) / 1e6:.3g} M parameters"))

    # 2. flip-rate honesty on device tensors (no guard: every flipped bit stays visible)
    g = groups["noisy_raw"]
    before = len(g.log)
    bits = 0
    xor_pop = 0
    y = torch.randn(1 << 18, generator=gen).to(dev)
    for _ in range(args.flip_reps):
        a, b = y.clone(), y.clone()
        dist.all_reduce(a, group=g_plain)
        dist.all_reduce(b, group=g)
        xo = (a.view(torch.int32) ^ b.view(torch.int32)).cpu().numpy().view("uint32")
        import numpy as np

        xor_pop += int(np.unpackbits(xo.view(np.uint8)).sum())
        bits += 32 * y.numel()
    logged = len(g.log) - before
    totals = [None] * n
    dist.all_gather_object(totals, (logged, bits, xor_pop))
    if rank == 0:
        from phy802.stats import clopper_pearson

        k_all = sum(t[0] for t in totals)
        n_all = sum(t[1] for t in totals)
        lo, hi = clopper_pearson(k_all, n_all, 0.999)
        ok_rate = lo <= args.ber <= hi
        ok_pop = all(t[0] == t[2] for t in totals)
        rows.append(("flip rate per payload bit within 99.9% CI of --ber", "PASS" if ok_rate else "FAIL",
                     f"{k_all}/{n_all} = {k_all / max(n_all, 1):.3g} (CI {lo:.3g}..{hi:.3g}, BER {args.ber:g})"))
        rows.append(("popcount(wrapper XOR plain) == flips logged, every rank", "PASS" if ok_pop else "FAIL",
                     ", ".join(f"r{i}: {t[2]}/{t[0]}" for i, t in enumerate(totals))))

    # 3. overhead: plain vs wrapper BER 0 vs wrapper --ber, alternating blocks, same processes
    timing = {"plain": make(g_plain), "wrapper_ber0": make(groups["ber0_endpoint"]), "wrapper_ber": make(groups["noisy"])}
    for r in timing.values():
        for _ in range(2):
            step(r)  # warm-up
    done = 0
    while done < args.steps:
        for r in timing.values():
            for _ in range(args.block_steps):
                r["times"].append(step(r))
        done += args.block_steps
    med = {k: 1e3 * statistics.median(r["times"]) for k, r in timing.items()}
    if rank == 0:
        rows.append(("step time, plain (ms, median)", f"{med['plain']:.2f}", f"DDP x{n}, batch {per_rank}/rank, "
                                                                             f"context {args.block}"))
        rows.append(("step time, wrapper BER 0 (ratio to plain)", f"{med['wrapper_ber0'] / med['plain']:.3f}",
                     f"{med['wrapper_ber0']:.2f} ms"))
        rows.append((f"step time, wrapper BER {args.ber:g} + clamp (ratio to plain)",
                     f"{med['wrapper_ber'] / med['plain']:.3f}", f"{med['wrapper_ber']:.2f} ms"))
        with open(out, "w") as fh:
            json.dump({"rows": rows, "ms": med}, fh)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import shutil

    import torch
    import torch.multiprocessing as mp

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default auto (cuda if visible)")
    p.add_argument("--tiny", action="store_true", help="2-layer width-32 model instead of the GPT-2 small preset")
    p.add_argument("--world-size", type=int, default=None, help="ranks (default: GPUs visible, at least 2)")
    p.add_argument("--steps", type=int, default=6, help="DDP steps for the identity check and per timed variant (default 6)")
    p.add_argument("--block-steps", type=int, default=2, help="steps per alternation block (default 2)")
    p.add_argument("--ber", type=float, default=1e-5, help="stream BER of the noisy checks (default 1e-5)")
    p.add_argument("--block", type=int, default=128, help="context length (default 128)")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank and step (default 4)")
    p.add_argument("--flip-reps", type=int, default=20, help="all-reduces of 2^18 elements for the flip rate (default 20)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    n_gpu = torch.cuda.device_count() if args.device == "cuda" else 0
    if args.world_size is None:
        args.world_size = max(2, n_gpu)
    args.nccl = args.device == "cuda" and n_gpu >= args.world_size and torch.distributed.is_nccl_available()
    if args.device == "cuda" and not args.nccl:
        os.environ["PHY802_CUDA_INNER"] = "gloo"  # ranks share a GPU: NCCL refuses duplicate devices
    work = tempfile.mkdtemp(prefix="phy802-gpucheck-")
    try:
        out = os.path.join(work, "res.json")
        store = os.path.join(work, "store")
        os.environ["OMP_NUM_THREADS"] = "1"
        t0 = time.perf_counter()
        mp.start_processes(_worker, args=(args, store, out), nprocs=args.world_size, start_method="spawn")
        with open(out) as fh:
            res = json.load(fh)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["setup"] = {"device": args.device, "gpus": n_gpu, "world_size": args.world_size,
                    "inner": "nccl" if args.nccl else "gloo", "model": "tiny" if args.tiny else "gpt2-small preset",
                    "torch": torch.__version__, "seconds": time.perf_counter() - t0,
                    "gpu_name": torch.cuda.get_device_name(0) if n_gpu else None}
    failed = [r for r in res["rows"] if r[1] == "FAIL"]
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        s = res["setup"]
        print(f"gpu_check: {s['device']} ({s['gpu_name'] or 'no GPU'}), {s['world_size']} ranks, inner {s['inner']}, "
              f"{s['model']}, torch {s['torch']}, {s['seconds']:.0f} s")
        print("| check | result | detail |\n|---|---|---|")
        for r in res["rows"]:
            print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
